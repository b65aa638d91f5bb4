"""The ACL model and the authorizer's rule, case by case (Kafka's documented behaviour)."""

from __future__ import annotations

import pytest
from acl_helpers import acl

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.common.errors import InvalidRequestError
from raftka.metadata.authorizer import AclAuthorizer, AuthorizerConfig

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def authz(*bindings: AclBinding, **config: object) -> AclAuthorizer:
    return AclAuthorizer(AuthorizerConfig(**config), frozenset(bindings))  # type: ignore[arg-type]


def test_no_acl_denies_by_default_and_allow_everyone_opens_only_unnamed_resources() -> None:
    assert not authz().authorize("User:a", "h", Op.READ, TOPIC, "t")
    open_ = authz(acl("User:b", Op.READ, "t"), allow_everyone_if_no_acl_found=True)
    # Another topic has no ACL at all: everyone may.
    assert open_.authorize("User:a", "h", Op.READ, TOPIC, "other")
    # An ACL names "t" (for someone else): the setting no longer applies to it.
    assert not open_.authorize("User:a", "h", Op.READ, TOPIC, "t")
    assert open_.authorize("User:b", "h", Op.READ, TOPIC, "t")


def test_super_users_pass_even_an_explicit_deny() -> None:
    a = authz(acl("User:root", Op.ALL, "*", permission=DENY), super_users=frozenset({"User:root"}))
    assert a.authorize("User:root", "h", Op.DELETE, TOPIC, "t")


def test_deny_beats_allow_whatever_the_pattern() -> None:
    a = authz(
        acl("User:a", Op.ALL, "*"),
        acl("User:a", Op.WRITE, "secret-", pattern=PatternType.PREFIXED, permission=DENY),
    )
    assert a.authorize("User:a", "h", Op.WRITE, TOPIC, "public")
    assert not a.authorize("User:a", "h", Op.WRITE, TOPIC, "secret-1")
    # The deny is for WRITE only: READ on the same topic stays allowed by ALL.
    assert a.authorize("User:a", "h", Op.READ, TOPIC, "secret-1")


def test_wildcards_of_principal_and_host() -> None:
    a = authz(acl("User:*", Op.READ, "t", host="10.0.0.1"))
    assert a.authorize("User:anyone", "10.0.0.1", Op.READ, TOPIC, "t")
    assert not a.authorize("User:anyone", "10.0.0.2", Op.READ, TOPIC, "t")


def test_implied_operations_allow_but_never_deny() -> None:
    a = authz(acl("User:a", Op.READ, "t"), acl("User:a", Op.ALTER_CONFIGS, "t"))
    assert a.authorize("User:a", "h", Op.DESCRIBE, TOPIC, "t")
    assert a.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not a.authorize("User:a", "h", Op.WRITE, TOPIC, "t")
    d = authz(acl("User:a", Op.ALL, "t"), acl("User:a", Op.READ, "t", permission=DENY))
    assert not d.authorize("User:a", "h", Op.READ, TOPIC, "t")
    assert d.authorize("User:a", "h", Op.DESCRIBE, TOPIC, "t")


def test_resource_types_are_separate() -> None:
    a = authz(acl("User:a", Op.READ, "x"))
    assert a.authorize("User:a", "h", Op.READ, TOPIC, "x")
    assert not a.authorize("User:a", "h", Op.READ, GROUP, "x")


def test_by_resource_type_follows_kafkas_default_rule() -> None:
    # KIP-679: an idempotent producer with WRITE on some topic.
    a = authz(acl("User:a", Op.WRITE, "orders"))
    assert a.authorize_by_resource_type("User:a", "h", Op.WRITE, TOPIC)
    assert not a.authorize_by_resource_type("User:b", "h", Op.WRITE, TOPIC)
    # Denied by the same literal, or by a prefix of it, or by a literal wildcard.
    for deny in (
        acl("User:a", Op.WRITE, "orders", permission=DENY),
        acl("User:a", Op.WRITE, "ord", permission=DENY, pattern=PatternType.PREFIXED),
        acl("User:*", Op.ALL, "*", permission=DENY),
    ):
        assert not a.with_added([deny]).authorize_by_resource_type("User:a", "h", Op.WRITE, TOPIC)
    # A deny of another name leaves the allow standing.
    other = acl("User:a", Op.WRITE, "payments", permission=DENY)
    assert a.with_added([other]).authorize_by_resource_type("User:a", "h", Op.WRITE, TOPIC)
    open_ = authz(allow_everyone_if_no_acl_found=True)
    assert open_.authorize_by_resource_type("User:z", "h", Op.WRITE, TOPIC)
    closed = open_.with_added([acl("User:b", Op.READ, "*")])
    assert not closed.authorize_by_resource_type("User:z", "h", Op.WRITE, TOPIC)


def test_filters_select_like_describe_and_delete_acls() -> None:
    lit = acl("User:a", Op.READ, "orders")
    pre = acl("User:a", Op.READ, "ord", pattern=PatternType.PREFIXED)
    star = acl("User:b", Op.WRITE, "*")
    grp = acl("User:a", Op.READ, "g", resource_type=GROUP)
    a = authz(lit, pre, star, grp)
    # A stable order: by resource type, then name, then the rest.
    assert a.acls(AclBindingFilter()) == (star, pre, lit, grp)
    assert set(a.acls(AclBindingFilter(ResourceType.TOPIC, "orders"))) == {lit}
    match = AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    assert set(a.acls(match)) == {lit, pre, star}
    assert set(a.acls(AclBindingFilter(principal="User:b"))) == {star}
    assert set(a.acls(AclBindingFilter(operation=Op.READ, pattern_type=PatternType.PREFIXED))) == {
        pre
    }
    assert a.with_removed([pre]).bindings == frozenset({lit, star, grp})


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: ResourcePattern(ResourceType.ANY, "t"), "resource type"),
        (lambda: ResourcePattern(TOPIC, "t", PatternType.MATCH), "LITERAL or PREFIXED"),
        (lambda: ResourcePattern(TOPIC, ""), "must not be empty"),
        (lambda: ResourcePattern(CLUSTER, "mine"), "kafka-cluster"),
        (lambda: AccessControlEntry("alice", "*", Op.READ, ALLOW), "User:alice"),
        (lambda: AccessControlEntry("User:a", "*", Op.ANY, ALLOW), "operation"),
        (
            lambda: AccessControlEntry("User:a", "*", Op.READ, AclPermissionType.ANY),
            "ALLOW or DENY",
        ),
        (lambda: AclBindingFilter(pattern_type=PatternType.MATCH), "MATCH filter"),
        (lambda: AclBindingFilter(operation=Op.UNKNOWN), "UNKNOWN"),
        (lambda: AuthorizerConfig(super_users=frozenset({"root"})), "<type>:<name>"),
        (lambda: authz().authorize("User:a", "h", Op.ALL, TOPIC, "t"), "ALL"),
    ],
)
def test_malformed_acls_are_invalid_request(build: object, needle: str) -> None:
    with pytest.raises(InvalidRequestError, match=needle):
        build()  # type: ignore[operator]
