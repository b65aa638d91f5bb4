"""Building ACL bindings in tests (test modules cannot import each other, so the one
way lives here, on pytest's ``pythonpath``)."""

from __future__ import annotations

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def acl(
    principal: str,
    operation: AclOperation,
    name: str,
    *,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    resource_type: ResourceType = ResourceType.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    """One binding: ``principal`` may (or, DENY, may not) do ``operation`` on ``name``."""
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )
