"""The Kafka listener's per-request authorization helpers
(raftka.broker.kafka.authorization), pure: an authorizer built from bindings, no image
and no sockets.

Checks: the principal is the SASL user, else the certificate's, else User:ANONYMOUS;
with no authorizer every question answers yes; the authorizer is rebuilt only when the
image's ACL set is a different object; which topics a listing shows (DESCRIBE, implied
by READ/WRITE); the idempotent-produce rule (IDEMPOTENT_WRITE on the cluster or WRITE on
some topic, a DENY beating it); CREATE on the cluster or the topic; super users; what
counts as an idempotent batch; and Metadata through KafkaApis over a fake image: what
it lists, refuses and auto-creates.
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any, cast

from acl_helpers import acl
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from raftka.broker.kafka.apis import Call, KafkaApis
from raftka.broker.kafka.authorization import (
    SUPPORTED_OPERATIONS,
    Access,
    AuthorizerCache,
    has_idempotent_batch,
)
from raftka.common.acl import CLUSTER_NAME, AclOperation, AclPermissionType, ResourceType
from raftka.common.messages import coordinator as group_api
from raftka.common.messages import transactions as txn_api
from raftka.common.record.batch import Record, build_batch
from raftka.metadata.authorizer import AclAuthorizer, AuthorizerConfig
from raftka.server_common.ssl_principal import ANONYMOUS

ALICE = "User:alice"
HOST = "10.0.0.1"


def _access(
    *bindings: Any, principal: str = ALICE, super_users: frozenset[str] = frozenset()
) -> Access:
    authorizer = AclAuthorizer(AuthorizerConfig(super_users=super_users), frozenset(bindings))
    return Access(authorizer, principal, HOST)


def test_the_principal_is_the_sasl_user_else_the_certificate_else_anonymous() -> None:
    """A SASL connection's authenticated user; else an SSL client certificate's mapped
    principal; else (PLAINTEXT, SSL without a certificate, SASL not yet authenticated)
    User:ANONYMOUS, Kafka's default principal builder."""
    assert Call(None, HOST).principal == ANONYMOUS == "User:ANONYMOUS"
    sasl = cast(Any, SimpleNamespace(principal=ALICE))
    assert Call(None, HOST, sasl).principal == ALICE
    not_yet = cast(Any, SimpleNamespace(principal=None))
    assert Call(None, HOST, not_yet).principal == ANONYMOUS
    assert Call(None, HOST, None, "User:CN=bob").principal == "User:CN=bob"


def test_without_an_authorizer_everything_is_allowed() -> None:
    """authorizer.class.name empty: no check refuses anything (today's behaviour)."""
    access = Access(None, ANONYMOUS, HOST)
    assert access.may_topic(AclOperation.WRITE, "t")
    assert access.may_cluster(AclOperation.ALTER)
    assert access.may_write_idempotently()
    assert access.topics(AclOperation.READ, ["a", "b", "a"]) == {"a", "b"}
    assert access.describable(ResourceType.TOPIC, ["b", "a"], str) == ["b", "a"]
    cache = AuthorizerCache(None)
    assert not cache.enabled
    image = cast(Any, SimpleNamespace(acl_bindings=frozenset))
    assert cache.authorizer(image) is None


def test_the_authorizer_is_rebuilt_only_for_a_new_acl_set() -> None:
    """Same ACL set object: the same authorizer; a new set: a new one deciding by it."""
    config = AuthorizerConfig()
    cache = AuthorizerCache(config)
    first = frozenset({acl(ALICE, AclOperation.READ, "t")})
    image = SimpleNamespace(acl_bindings=lambda: first)
    a = cache.authorizer(cast(Any, image))
    assert a is not None and a is cache.authorizer(cast(Any, image))
    second = frozenset({acl(ALICE, AclOperation.WRITE, "t")})
    b = cache.authorizer(cast(Any, SimpleNamespace(acl_bindings=lambda: second)))
    assert b is not a and b is not None and b.bindings == second


def test_a_listing_shows_only_what_the_principal_may_describe() -> None:
    """Metadata for every topic lists those it may DESCRIBE (READ and WRITE imply it);
    a DENY of DESCRIBE hides a topic a wildcard would show; others' ACLs do not count."""
    access = _access(
        acl(ALICE, AclOperation.READ, "orders"),
        acl(ALICE, AclOperation.WRITE, "events"),
        acl("User:bob", AclOperation.READ, "secret"),
        acl(ALICE, AclOperation.DESCRIBE, "*"),
        acl(ALICE, AclOperation.DESCRIBE, "hidden", permission=AclPermissionType.DENY),
    )
    names = ["events", "hidden", "orders", "secret"]
    assert access.describable(ResourceType.TOPIC, names, str) == ["events", "orders", "secret"]
    only_own = _access(acl(ALICE, AclOperation.READ, "orders"))
    assert only_own.describable(ResourceType.TOPIC, names, str) == ["orders"]
    assert only_own.topics(AclOperation.WRITE, names) == set()


def test_the_idempotent_produce_rule() -> None:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679); nothing, READ
    only, or a literal '*' DENY of WRITE: refused."""
    cluster = acl(
        ALICE, AclOperation.IDEMPOTENT_WRITE, CLUSTER_NAME, resource_type=ResourceType.CLUSTER
    )
    assert _access(cluster).may_write_idempotently()
    assert _access(acl(ALICE, AclOperation.WRITE, "t")).may_write_idempotently()
    assert not _access().may_write_idempotently()
    assert not _access(acl(ALICE, AclOperation.READ, "t")).may_write_idempotently()
    deny_all = acl(ALICE, AclOperation.WRITE, "*", permission=AclPermissionType.DENY)
    assert not _access(acl(ALICE, AclOperation.WRITE, "t"), deny_all).may_write_idempotently()


def test_create_on_the_cluster_or_the_topic_and_super_users() -> None:
    """CreateTopics and auto-creation: CREATE on the cluster covers every topic, on a
    topic only that one; a super user is never refused."""
    on_cluster = acl(ALICE, AclOperation.CREATE, CLUSTER_NAME, resource_type=ResourceType.CLUSTER)
    assert _access(on_cluster).may_create_topic("anything")
    on_topic = _access(acl(ALICE, AclOperation.CREATE, "new"))
    assert on_topic.may_create_topic("new") and not on_topic.may_create_topic("other")
    admin = _access(principal="User:admin", super_users=frozenset({"User:admin"}))
    assert admin.may_create_topic("x") and admin.may_cluster(AclOperation.ALTER)
    assert admin.may_group(AclOperation.READ, "g")
    assert not _access().may_group(AclOperation.READ, "g")
    assert not _access().may_transactional_id(AclOperation.WRITE, "tx")


def test_an_idempotent_batch_is_one_with_a_producer_id() -> None:
    """A batch with a producer id (idempotent or transactional) needs the idempotent
    rule; a plain batch, and bytes that do not parse, do not."""
    assert has_idempotent_batch(build_batch([Record(b"v")], producer_id=7, producer_epoch=0))
    assert not has_idempotent_batch(build_batch([Record(b"v")]))
    assert not has_idempotent_batch(b"\x00" * 10)


class _Channel:
    """The controller channel, recording the topics Metadata asks it to create."""

    def __init__(self) -> None:
        self.created: list[str] = []

    async def post(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        names = [t["name"] for t in body["topics"]]
        self.created += names
        return {"topics": [{"name": n} for n in names]}


def _metadata(bindings: frozenset[Any], topics: list[str] | None) -> tuple[Any, list[str]]:
    """KafkaApis.metadata as alice, the authorizer on, over an image holding topics
    ``orders`` and ``secret`` and the ACLs ``bindings``; the answer and what it
    auto-created."""
    image = SimpleNamespace(
        topics=SimpleNamespace(
            by_name={n: SimpleNamespace(topic_id=None, partitions={}) for n in ("orders", "secret")}
        ),
        cluster=SimpleNamespace(live_brokers=list),
        acl_bindings=lambda: bindings,
    )
    channel = _Channel()
    server = SimpleNamespace(
        manager=SimpleNamespace(image=image),
        channel=channel,
        config=SimpleNamespace(
            authorizer=AuthorizerConfig(),
            auto_create_topics_enable=True,
            request_timeout_ms=1000,
            node_id=1,
            controller_ids=(1,),
            controllers=("h:9093",),
        ),
    )
    cls = load_request_schema(3, 12)
    topic_cls = sys.modules[cls.__module__].MetadataRequestTopic
    request = cls(
        topics=None if topics is None else tuple(topic_cls(topic_id=None, name=n) for n in topics),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    call = Call("c", HOST, cast(Any, SimpleNamespace(principal=ALICE)))
    response = asyncio.run(KafkaApis(cast(Any, server)).metadata(request, 12, call))
    return response, channel.created


def test_metadata_lists_and_creates_only_what_the_acls_allow() -> None:
    """Every topic: only those alice may DESCRIBE. Named: one she may not see is
    TOPIC_AUTHORIZATION_FAILED whether or not it exists, and never auto-created; a
    missing one she may see but not CREATE is refused too; with CREATE it is created."""
    bindings = frozenset(
        {
            acl(ALICE, AclOperation.READ, "orders"),
            acl(ALICE, AclOperation.DESCRIBE, "seen"),
            acl(ALICE, AclOperation.DESCRIBE, "made"),
            acl(ALICE, AclOperation.CREATE, "made"),
        }
    )
    response, created = _metadata(bindings, None)
    assert [(t.name, t.error_code) for t in response.topics] == [("orders", ErrorCode.none)]
    response, created = _metadata(bindings, ["secret", "hidden", "seen", "made", "orders"])
    errors = {t.name: t.error_code for t in response.topics}
    assert errors == {
        "secret": ErrorCode.topic_authorization_failed,
        "hidden": ErrorCode.topic_authorization_failed,
        "seen": ErrorCode.topic_authorization_failed,
        "made": ErrorCode.leader_not_available,  # being created
        "orders": ErrorCode.none,
    }
    assert created == ["made"]


def test_cluster_apis_refuse_a_principal_without_cluster_acls() -> None:
    """DescribeCluster, DescribeLogDirs, AlterPartitionReassignments and
    DescribeUserScramCredentials need DESCRIBE (ALTER) on the cluster: alice, granted
    only a topic, gets CLUSTER_AUTHORIZATION_FAILED and empty lists; granted DESCRIBE
    on the cluster, her DescribeCluster gets past the check."""
    image = SimpleNamespace(acl_bindings=lambda: bindings)
    server = SimpleNamespace(
        manager=SimpleNamespace(image=image),
        config=SimpleNamespace(
            authorizer=AuthorizerConfig(), controller_ids=(1,), controllers=("h:9093",)
        ),
    )
    apis = KafkaApis(cast(Any, server))
    call = Call("c", HOST, cast(Any, SimpleNamespace(principal=ALICE)))
    requests = [
        (apis.describe_cluster, 60, 1, {"include_cluster_authorized_operations": False}),
        (apis.describe_log_dirs, 35, 4, {"topics": None}),
        (apis.alter_partition_reassignments, 45, 0, {"topics": ()}),
        (apis.describe_user_scram_credentials, 50, 0, {"users": ()}),
    ]
    bindings = frozenset({acl(ALICE, AclOperation.ALL, "orders")})
    for handler, key, version, fields in requests:
        request = load_request_schema(key, version)(**fields)
        response = asyncio.run(handler(request, version, call))
        assert response.error_code == ErrorCode.cluster_authorization_failed, handler.__name__
    cluster = ResourceType.CLUSTER
    bindings = frozenset(
        {
            acl(ALICE, AclOperation.DESCRIBE, CLUSTER_NAME, resource_type=cluster),
            acl(ALICE, AclOperation.ALTER, CLUSTER_NAME, resource_type=cluster),
        }
    )
    # Endpoint type 2 (controllers) is answered UNSUPPORTED_ENDPOINT_TYPE only after the
    # cluster check: that error shows the check passed, without a whole image behind it.
    request = load_request_schema(60, 1)(
        include_cluster_authorized_operations=False, endpoint_type=2
    )
    response = asyncio.run(apis.describe_cluster(request, 1, call))
    assert response.error_code == ErrorCode.unsupported_endpoint_type


def test_authorized_operations_bit_sets() -> None:
    """KIP-430: bit ``1 << code`` of each operation the resource type supports that the
    principal may do; with the authorizer off, every supported one (Kafka's answer
    without an authorizer). READ implies DESCRIBE; an operation the type does not
    support (IDEMPOTENT_WRITE on a topic) is never reported."""

    def bits(*ops: AclOperation) -> int:
        return sum(1 << op for op in ops)

    everything = Access(None, ALICE, HOST)
    assert everything.authorized_operations(ResourceType.GROUP, "g") == bits(
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
    )
    access = _access(
        acl(ALICE, AclOperation.READ, "orders"),
        acl(ALICE, AclOperation.ALL, "orders", permission=AclPermissionType.DENY, host="10.9.9.9"),
    )
    assert access.authorized_operations(ResourceType.TOPIC, "orders") == bits(
        AclOperation.READ, AclOperation.DESCRIBE
    )
    assert access.authorized_operations(ResourceType.TOPIC, "other") == 0
    assert access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) == 0
    topic_ops = everything.authorized_operations(ResourceType.TOPIC, "t")
    assert not topic_ops & bits(AclOperation.IDEMPOTENT_WRITE)
    assert topic_ops == sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])


def test_refused_ids_are_answered_in_kafkas_order() -> None:
    """Kafka's order of answers when some ids are refused: DescribeTransactions answers
    every id where the request named it; DescribeGroups lists the refused groups first,
    then the coordinator's answers. alice may DESCRIBE only ``t2`` and ``g2``."""
    bindings = frozenset(
        {
            acl(ALICE, AclOperation.DESCRIBE, "t2", resource_type=ResourceType.TRANSACTIONAL_ID),
            acl(ALICE, AclOperation.DESCRIBE, "g2", resource_type=ResourceType.GROUP),
        }
    )
    server = SimpleNamespace(
        manager=SimpleNamespace(image=SimpleNamespace(acl_bindings=lambda: bindings)),
        config=SimpleNamespace(authorizer=AuthorizerConfig()),
    )
    apis = KafkaApis(cast(Any, server))
    asked: list[list[str]] = []

    async def txn_call(call: Any, method: str, fields: dict[str, Any], *a: Any, **k: Any) -> Any:
        asked.append(list(fields["transactional_ids"]))
        states = [txn_api.DescribedTransactionState(transactional_id=t) for t in asked[-1]]
        return SimpleNamespace(transaction_states=states), ErrorCode.none

    async def group_call(method: str, fields: dict[str, Any], *a: Any) -> Any:
        asked.append(list(fields["groups"]))
        return SimpleNamespace(groups=[group_api.DescribedGroup(group_id=g) for g in asked[-1]])

    apis._txn_call = txn_call  # type: ignore[method-assign]
    apis._group_call = group_call  # type: ignore[method-assign]
    call = Call("c", HOST, cast(Any, SimpleNamespace(principal=ALICE)))
    request = load_request_schema(65, 0)(transactional_ids=("t1", "t2", "t3"))
    response = asyncio.run(apis.describe_transactions(request, 0, call))
    assert [(s.transactional_id, s.error_code) for s in response.transaction_states] == [
        ("t1", ErrorCode.transactional_id_authorization_failed),
        ("t2", ErrorCode.none),
        ("t3", ErrorCode.transactional_id_authorization_failed),
    ]
    request = load_request_schema(15, 5)(
        groups=("g1", "g2", "g3"), include_authorized_operations=False
    )
    response = asyncio.run(apis.describe_groups(request, 5, call))
    assert [(g.group_id, g.error_code) for g in response.groups] == [
        ("g1", ErrorCode.group_authorization_failed),
        ("g3", ErrorCode.group_authorization_failed),
        ("g2", ErrorCode.none),
    ]
    assert asked == [["t2"], ["g2"]], "a refused id reached a coordinator"
