"""Kafka's access-control model: resources, patterns, operations, ACL bindings, filters.

Theory of operation
-------------------
An ACL binding says that a *principal* (``User:alice``) connecting from a *host* may
(ALLOW) or may not (DENY) perform an *operation* (READ, WRITE, ...) on the resources a
*resource pattern* names. A pattern is a resource type (TOPIC, GROUP, CLUSTER,
TRANSACTIONAL_ID, ...), a name, and how the name matches: LITERAL (the name itself, or
every resource when the name is ``*``) or PREFIXED (every resource whose name starts
with it). These are Kafka's classes (``org.apache.kafka.common.acl`` and
``org.apache.kafka.common.resource``) with Kafka's enum codes, because the Kafka
protocol's CreateAcls/DescribeAcls/DeleteAcls carry the codes and ``kafka-acls`` users
know the names.

A *filter* selects bindings for DescribeAcls and DeleteAcls. Its fields may be ANY (or
None for names, principals and hosts: match everything); its pattern type may also be
MATCH, which selects every binding that would apply to the one named resource (the
literal name, the literal wildcard ``*``, and every prefix of the name).

The decision itself (deny beats allow, super users, implied operations, what happens
when no ACL names a resource) is the authorizer's: :mod:`raftka.metadata.authorizer`.
This module only describes ACLs and checks that a binding is well formed, so that a
binding decoded from a request or a metadata record passes the same gate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raftka.common.errors import InvalidRequestError

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "binding_sort_key",
    "parse_principal",
]

#: A literal resource name that matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: The principal that matches every principal.
WILDCARD_PRINCIPAL = "User:*"
#: The host that matches every host.
WILDCARD_HOST = "*"
#: The name of the one CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes (UNKNOWN and ANY are for filters only)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes. A binding is LITERAL or PREFIXED; a filter may
    also be ANY (either) or MATCH (whatever applies to one resource name)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes. ALL in a binding stands for every operation; ANY
    is for filters only."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes (ANY is for filters only)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def parse_principal(text: str) -> tuple[str, str]:
    """``User:alice`` -> (``User``, ``alice``); INVALID_REQUEST when it has no type.

    Kafka splits at the first colon, so a name may itself contain colons (an mTLS
    subject such as ``User:CN=a,O=b`` keeps its commas and any later colons)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequestError(f"principal {text!r} must be <type>:<name>, e.g. User:alice")
    return kind, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """The resources a binding applies to: a type, a name and how the name matches."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidRequestError(f"an ACL's resource type cannot be {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequestError(
                f"an ACL's pattern type must be LITERAL or PREFIXED, got {self.pattern_type.name}"
            )
        if not self.name:
            raise InvalidRequestError("an ACL's resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            # Kafka's CreateAcls refuses any other name for the one cluster resource.
            raise InvalidRequestError("the CLUSTER resource's name is 'kafka-cluster'")

    def covers(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern applies to the one resource ``(resource_type, name)``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD_RESOURCE)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who, from where, may or may not do what."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        parse_principal(self.principal)
        if not self.host:
            raise InvalidRequestError("an ACL's host must not be empty (use '*' for every host)")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidRequestError(f"an ACL's operation cannot be {self.operation.name}")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidRequestError(
                f"an ACL's permission type must be ALLOW or DENY, got {self.permission_type.name}"
            )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings (DescribeAcls, DeleteAcls). None and ANY match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        for field, value in (
            ("resource type", self.resource_type),
            ("pattern type", self.pattern_type),
            ("operation", self.operation),
            ("permission type", self.permission_type),
        ):
            if value.name == "UNKNOWN":
                raise InvalidRequestError(f"a filter's {field} cannot be UNKNOWN")
        if self.pattern_type is PatternType.MATCH and self.name is None:
            raise InvalidRequestError("a MATCH filter needs a resource name")

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            pattern.resource_type
        ):
            return False
        if self.pattern_type is PatternType.MATCH:
            # Every binding that applies to the resource this filter names.
            assert self.name is not None
            return pattern.covers(pattern.resource_type, self.name)
        if self.pattern_type is not PatternType.ANY and self.pattern_type is not (
            pattern.pattern_type
        ):
            return False
        return self.name is None or self.name == pattern.name

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation is AclOperation.ANY or self.operation is entry.operation)
            and (
                self.permission_type is AclPermissionType.ANY
                or self.permission_type is entry.permission_type
            )
        )


def binding_sort_key(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    """A stable order for listing bindings: by resource, then entry."""
    p, e = binding.pattern, binding.entry
    return (
        p.resource_type,
        p.name,
        p.pattern_type,
        e.principal,
        e.host,
        e.operation,
        e.permission_type,
    )
