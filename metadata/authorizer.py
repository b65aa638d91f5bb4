"""The ACL authorizer's decision: may this principal, from this host, do this to that?

Theory of operation
-------------------
This is the pure core of Kafka's ``StandardAuthorizer`` (KRaft): an immutable set of ACL
bindings (:mod:`raftka.common.acl`) and the rule that turns it into ALLOWED or DENIED.
Every broker builds the same set from the same committed metadata records, so every
broker decides alike; nothing here does I/O or reads a clock.

The rule, for a principal P on host H asking for operation O on resource R:

1. P is in ``super.users``: ALLOWED.
2. The bindings that *apply*: their pattern covers R (the literal name, the literal
   wildcard ``*``, or a prefix of R's name), their principal is P or ``User:*``, their
   host is H or ``*``.
3. A DENY binding that applies, for O or ALL: DENIED. Deny beats allow, whatever the
   order the bindings were added in.
4. An ALLOW binding that applies, for O, ALL, or an operation that implies O: ALLOWED.
   READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS
   (a consumer allowed to READ a topic may see it in metadata). Implication never
   applies to DENY: denying READ does not deny DESCRIBE.
5. No binding of any principal covers R: ``allow.everyone.if.no.acl.found`` decides
   (Kafka's default, and raftka's, is false: DENIED). Otherwise DENIED.

``authorize_by_resource_type`` answers Kafka's KIP-679 question "may P do O on *some*
resource of this type?" (an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
WRITE on any topic). Kafka's default implementation is followed: an applicable literal
``*`` DENY refuses; an applicable ALLOW pattern counts unless a DENY of the same literal
name or a DENY prefix of it covers it. Kafka first asks the plain rule about a resource
named ``hardcode``, so that super users and ``allow.everyone.if.no.acl.found`` apply;
here the same question is asked directly: with that setting on, some resource without
an ACL exists unless a literal ``*`` binding names every resource of the type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from raftka.common.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_sort_key,
    parse_principal,
)
from raftka.common.errors import InvalidRequestError

__all__ = ["AclAuthorizer", "AuthorizerConfig"]

# What an ALLOW of the key grants besides itself (Kafka's implied operations).
_IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """Kafka's ``super.users`` (principals, e.g. ``User:admin``) and
    ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        for principal in self.super_users:
            parse_principal(principal)


@dataclass(frozen=True, slots=True)
class AclAuthorizer:
    """An immutable ACL set and its decisions. ``with_added``/``with_removed`` return a
    new authorizer, so a broker swaps one reference when metadata changes and a request
    in flight keeps deciding against the set it started with."""

    config: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    bindings: frozenset[AclBinding] = frozenset()
    # Bindings by resource type: a decision looks only at its own type's bindings.
    _by_type: Mapping[ResourceType, tuple[AclBinding, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in self.bindings:
            by_type.setdefault(binding.pattern.resource_type, []).append(binding)
        object.__setattr__(self, "_by_type", {k: tuple(v) for k, v in by_type.items()})

    # -- the set ------------------------------------------------------------------------

    def with_added(self, bindings: Iterable[AclBinding]) -> AclAuthorizer:
        return AclAuthorizer(self.config, self.bindings | frozenset(bindings))

    def with_removed(self, bindings: Iterable[AclBinding]) -> AclAuthorizer:
        return AclAuthorizer(self.config, self.bindings - frozenset(bindings))

    def acls(self, acl_filter: AclBindingFilter) -> tuple[AclBinding, ...]:
        """The bindings a DescribeAcls/DeleteAcls filter selects, in a stable order."""
        found = [b for b in self.bindings if acl_filter.matches(b)]
        return tuple(sorted(found, key=binding_sort_key))

    # -- decisions ----------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on one resource."""
        _check_request(operation, resource_type)
        if principal in self.config.super_users:
            return True
        covering = [
            b for b in self._by_type.get(resource_type, ()) if b.pattern.covers(resource_type, name)
        ]
        if not covering:
            return self.config.allow_everyone_if_no_acl_found
        applicable = [b for b in covering if _applies_to(b, principal, host)]
        if any(_denies(b, operation) for b in applicable):
            return False
        return any(_allows(b, operation) for b in applicable)

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (KIP-679); see the module docstring for the rule."""
        _check_request(operation, resource_type)
        if principal in self.config.super_users:
            return True
        of_type = self._by_type.get(resource_type, ())
        if self.config.allow_everyone_if_no_acl_found and not any(
            b.pattern.pattern_type is PatternType.LITERAL and b.pattern.name == WILDCARD_RESOURCE
            for b in of_type
        ):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allowed: list[AclBinding] = []
        for binding in of_type:
            entry = binding.entry
            if not _applies_to(binding, principal, host) or entry.operation not in (
                operation,
                AclOperation.ALL,
            ):
                continue
            if entry.permission_type is AclPermissionType.DENY:
                if binding.pattern.pattern_type is PatternType.PREFIXED:
                    deny_prefixed.add(binding.pattern.name)
                elif binding.pattern.name == WILDCARD_RESOURCE:
                    return False
                else:
                    deny_literal.add(binding.pattern.name)
            else:
                allowed.append(binding)
        for binding in allowed:
            name = binding.pattern.name
            if binding.pattern.pattern_type is PatternType.LITERAL:
                if name == WILDCARD_RESOURCE:
                    return True
                if name in deny_literal:
                    continue
            if any(name.startswith(prefix) for prefix in deny_prefixed):
                continue
            return True
        return False


def _check_request(operation: AclOperation, resource_type: ResourceType) -> None:
    if operation in (AclOperation.ANY, AclOperation.ALL, AclOperation.UNKNOWN):
        raise InvalidRequestError(f"cannot authorize operation {operation.name}")
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidRequestError(f"cannot authorize resource type {resource_type.name}")


def _applies_to(binding: AclBinding, principal: str, host: str) -> bool:
    entry = binding.entry
    return entry.principal in (principal, WILDCARD_PRINCIPAL) and entry.host in (
        host,
        WILDCARD_HOST,
    )


def _denies(binding: AclBinding, operation: AclOperation) -> bool:
    entry = binding.entry
    return entry.permission_type is AclPermissionType.DENY and entry.operation in (
        operation,
        AclOperation.ALL,
    )


def _allows(binding: AclBinding, operation: AclOperation) -> bool:
    entry = binding.entry
    if entry.permission_type is not AclPermissionType.ALLOW:
        return False
    return entry.operation in (operation, AclOperation.ALL) or entry.operation in _IMPLIED_BY.get(
        operation, frozenset()
    )
