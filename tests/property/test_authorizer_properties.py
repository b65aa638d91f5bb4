"""Properties of the authorizer's rule over random ACL sets (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.metadata.authorizer import AclAuthorizer, AuthorizerConfig

PRINCIPALS = ("User:a", "User:b", "User:*")
HOSTS = ("h1", "h2", "*")
NAMES = ("*", "o", "or", "ord", "orders", "p", "pay")
# Operations no other operation implies: by-type and per-resource answers must agree.
PLAIN_OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.CREATE)
TYPES = (ResourceType.TOPIC, ResourceType.GROUP)


@st.composite
def bindings(draw: st.DrawFn) -> AclBinding:
    name = draw(st.sampled_from(NAMES))
    pattern = (
        PatternType.LITERAL
        if name == "*"
        else draw(st.sampled_from((PatternType.LITERAL, PatternType.PREFIXED)))
    )
    return AclBinding(
        ResourcePattern(draw(st.sampled_from(TYPES)), name, pattern),
        AccessControlEntry(
            draw(st.sampled_from(PRINCIPALS)),
            draw(st.sampled_from(HOSTS)),
            draw(st.sampled_from((*PLAIN_OPS, AclOperation.ALL, AclOperation.DESCRIBE))),
            draw(st.sampled_from((AclPermissionType.ALLOW, AclPermissionType.DENY))),
        ),
    )


acl_sets = st.frozensets(bindings(), max_size=12)
requests = st.tuples(
    st.sampled_from(("User:a", "User:b")),
    st.sampled_from(("h1", "h2")),
    st.sampled_from(PLAIN_OPS),
    st.sampled_from(TYPES),
    st.sampled_from(("orders", "order", "pay", "x")),
)


@settings(max_examples=300, deadline=None)
@given(acl_sets, requests, bindings())
def test_a_matching_deny_always_wins(
    acls: frozenset[AclBinding],
    request: tuple[str, str, AclOperation, ResourceType, str],
    extra: AclBinding,
) -> None:
    principal, host, op, rtype, name = request
    deny = AclBinding(
        ResourcePattern(rtype, name),
        AccessControlEntry(principal, host, op, AclPermissionType.DENY),
    )
    a = AclAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=True), acls | {extra, deny})
    assert not a.authorize(principal, host, op, rtype, name)


@settings(max_examples=300, deadline=None)
@given(acl_sets, requests, bindings())
def test_an_acl_for_someone_else_never_grants(
    acls: frozenset[AclBinding],
    request: tuple[str, str, AclOperation, ResourceType, str],
    extra: AclBinding,
) -> None:
    """Adding a binding for another (non-wildcard) principal never turns a DENIED into
    ALLOWED for this one (with allow.everyone.if.no.acl.found off)."""
    principal, host, op, rtype, name = request
    if extra.entry.principal in (principal, "User:*"):
        return
    before = AclAuthorizer(AuthorizerConfig(), acls).authorize(principal, host, op, rtype, name)
    after = AclAuthorizer(AuthorizerConfig(), acls | {extra}).authorize(
        principal, host, op, rtype, name
    )
    assert after <= before


@settings(max_examples=300, deadline=None)
@given(acl_sets, requests)
def test_by_resource_type_agrees_with_some_resource(
    acls: frozenset[AclBinding], request: tuple[str, str, AclOperation, ResourceType, str]
) -> None:
    """KIP-679: 'some resource of the type' is ALLOWED exactly when a witness resource
    is: any name allowed implies the type is; the type allowed implies a witness name
    (an allow pattern's own name, or it extended past every deny prefix) is."""
    principal, host, op, rtype, name = request
    a = AclAuthorizer(AuthorizerConfig(), acls)
    by_type = a.authorize_by_resource_type(principal, host, op, rtype)
    if a.authorize(principal, host, op, rtype, name):
        assert by_type
    witnesses = {"\uffffwitness"} | {
        b.pattern.name + ("\uffffwitness" if b.pattern.pattern_type is PatternType.PREFIXED else "")
        for b in acls
        if b.pattern.name != "*"
    }
    assert by_type == any(a.authorize(principal, host, op, rtype, w) for w in witnesses)
