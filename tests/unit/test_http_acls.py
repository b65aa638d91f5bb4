"""The ACL checks of the broker's HTTP API (raftka.broker.http_acls), pure: an
authorizer built from bindings, the request messages raftka's client sends.

Checks: each group and transaction request needs Kafka's operation on its group,
transactional id and topics, refused with Kafka's error name; a super user and an
authorizer that is off pass everything; OffsetFetch's answer leaves out the topics the
principal may not DESCRIBE ("every topic") or refuses them (named); a producer's
whole-request rule (WRITE on the transactional id, else IDEMPOTENT_WRITE or WRITE on
some topic); the listings stay for super users (the middleware's paths).
"""

from __future__ import annotations

from typing import Any

import pytest
from acl_helpers import acl

from raftka.broker.http_acls import ACL_PATHS, check_coordinator_request, refuse_producer
from raftka.broker.kafka.authorization import Access
from raftka.common.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.common.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from raftka.common.messages import Message
from raftka.common.messages import coordinator as api
from raftka.common.messages import transactions as txn_api
from raftka.metadata.authorizer import AclAuthorizer, AuthorizerConfig

BOB = "User:bob"
OP = AclOperation
GROUP = ResourceType.GROUP
TXN = ResourceType.TRANSACTIONAL_ID

#: What a consumer in group g of topic t and a transactional producer tx need.
GRANTS = (
    acl(BOB, OP.READ, "t"),
    acl(BOB, OP.WRITE, "out"),
    acl(BOB, OP.READ, "g", resource_type=GROUP),
    acl(BOB, OP.WRITE, "tx", resource_type=TXN),
)


def _access(*bindings: Any, super_users: frozenset[str] = frozenset()) -> Access:
    config = AuthorizerConfig(super_users=super_users)
    return Access(AclAuthorizer(config, frozenset(bindings)), BOB, "127.0.0.1")


def _commit(group: str, topic: str) -> api.OffsetCommitRequest:
    partition = api.OffsetCommitPartition(partition=0, offset=1)
    topics = (api.OffsetCommitTopic(name=topic, partitions=(partition,)),)
    return api.OffsetCommitRequest(group_id=group, topics=topics)


def _txn_commit(tid: str, group: str, topic: str) -> txn_api.TxnOffsetCommitRequest:
    partition = txn_api.TxnOffsetCommitPartition(partition_index=0, committed_offset=1)
    return txn_api.TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=1,
        producer_epoch=0,
        topics=(txn_api.TxnOffsetCommitTopic(name=topic, partitions=(partition,)),),
    )


def _add(tid: str, topic: str) -> txn_api.AddPartitionsToTxnRequest:
    topics = (txn_api.TxnTopic(name=topic, partitions=(0,)),)
    return txn_api.AddPartitionsToTxnRequest(
        transactional_id=tid, producer_id=1, producer_epoch=0, topics=topics
    )


def _join(group: str) -> api.JoinGroupRequest:
    protocol = api.JoinGroupProtocol(name="range")
    return api.JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, protocol_type="consumer", protocols=(protocol,)
    )


ALLOWED: list[Message] = [
    api.FindCoordinatorRequest(key="g"),
    api.FindCoordinatorRequest(key="tx", key_type=1),
    _join("g"),
    api.HeartbeatRequest(group_id="g", generation_id=1, member_id="m"),
    api.LeaveGroupRequest(group_id="g", members=(api.LeaveGroupMember(member_id="m"),)),
    _commit("g", "t"),
    api.OffsetFetchRequest(group_id="g"),
    _add("tx", "out"),
    txn_api.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"
    ),
    txn_api.EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True),
    _txn_commit("tx", "g", "t"),
]

REFUSED: list[tuple[Message, type[KafkaError], str]] = [
    (api.FindCoordinatorRequest(key="other"), GroupAuthorizationFailedError, "DESCRIBE on group"),
    (
        api.FindCoordinatorRequest(key="other", key_type=1),
        TransactionalIdAuthorizationFailedError,
        "DESCRIBE on transactional id 'other'",
    ),
    (_join("other"), GroupAuthorizationFailedError, "READ on group 'other'"),
    (_commit("g", "out"), TopicAuthorizationFailedError, "READ on topic 'out'"),
    (_commit("other", "t"), GroupAuthorizationFailedError, "READ on group"),
    (_add("other", "out"), TransactionalIdAuthorizationFailedError, "WRITE on transactional"),
    (_add("tx", "t"), TopicAuthorizationFailedError, "WRITE on topic 't'"),
    (_txn_commit("tx", "other", "t"), GroupAuthorizationFailedError, "READ on group 'other'"),
    (_txn_commit("tx", "g", "out"), TopicAuthorizationFailedError, "READ on topic 'out'"),
]


@pytest.mark.parametrize("message", ALLOWED, ids=lambda m: type(m).__name__)
def test_the_grants_a_consumer_and_a_transactional_producer_need_suffice(message: Message) -> None:
    check_coordinator_request(_access(*GRANTS), message)


@pytest.mark.parametrize(("message", "error", "says"), REFUSED)
def test_a_request_without_its_acl_is_refused_with_kafkas_error(
    message: Message, error: type[KafkaError], says: str
) -> None:
    with pytest.raises(error, match=says):
        check_coordinator_request(_access(*GRANTS), message)


@pytest.mark.parametrize("message", [m for m, _, _ in REFUSED], ids=lambda m: type(m).__name__)
def test_a_super_user_and_no_authorizer_pass_everything(message: Message) -> None:
    assert check_coordinator_request(_access(super_users=frozenset({BOB})), message) is None
    assert check_coordinator_request(Access(None, BOB, ""), message) is None


def test_offset_fetch_needs_describe_on_the_group_not_read() -> None:
    """KIP-163: fetching a group's offsets is a DESCRIBE, which READ implies."""
    describe = acl(BOB, OP.DESCRIBE, "g", resource_type=GROUP)
    check_coordinator_request(_access(describe), api.OffsetFetchRequest(group_id="g"))
    with pytest.raises(GroupAuthorizationFailedError, match="DESCRIBE on group 'g'"):
        check_coordinator_request(_access(), api.OffsetFetchRequest(group_id="g"))
    with pytest.raises(GroupAuthorizationFailedError, match="READ on group 'g'"):
        check_coordinator_request(_access(describe), _commit("g", "t"))


def test_offset_fetch_shows_only_the_topics_it_may_describe() -> None:
    """Every topic: the hidden ones are left out; named: refused, offsets withheld."""
    partition = api.OffsetFetchPartitionResponse(partition=0, offset=7)
    answer = api.OffsetFetchResponse(
        topics=tuple(
            api.OffsetFetchTopicResponse(name=n, partitions=(partition,)) for n in ("t", "secret")
        )
    )
    access = _access(*GRANTS)
    every = check_coordinator_request(access, api.OffsetFetchRequest(group_id="g"))
    assert every is not None
    shown = every(answer)
    assert isinstance(shown, api.OffsetFetchResponse)
    assert [t.name for t in shown.topics] == ["t"]
    wanted = (
        api.OffsetFetchTopic(name=n, partitions=(api.OffsetFetchPartition(partition=0),))
        for n in ("t", "secret")
    )
    named = check_coordinator_request(
        access, api.OffsetFetchRequest(group_id="g", topics=tuple(wanted))
    )
    assert named is not None
    shown = named(answer)
    assert isinstance(shown, api.OffsetFetchResponse)
    hidden = shown.topics[1].partitions[0]
    assert (shown.topics[1].name, hidden.offset) == ("secret", -1)
    assert hidden.error is not None and hidden.error.error == "TOPIC_AUTHORIZATION_FAILED"
    assert shown.topics[0].partitions[0].offset == 7


def test_a_producer_needs_its_transactional_id_or_the_idempotent_right() -> None:
    granted = _access(*GRANTS)
    assert refuse_producer(granted, "tx") is None
    assert isinstance(refuse_producer(granted, "other"), TransactionalIdAuthorizationFailedError)
    # KIP-679: WRITE on some topic is enough for an idempotent producer ...
    assert refuse_producer(granted, None) is None
    # ... as is IDEMPOTENT_WRITE on the cluster; a reader alone has neither.
    cluster = acl(BOB, OP.IDEMPOTENT_WRITE, CLUSTER_NAME, resource_type=ResourceType.CLUSTER)
    assert refuse_producer(_access(cluster), None) is None
    refused = refuse_producer(_access(acl(BOB, OP.READ, "t")), None)
    assert isinstance(refused, ClusterAuthorizationFailedError)


def test_the_acl_checked_routes_are_the_clients_data_and_coordinator_routes() -> None:
    """The admin routes and listings stay for super users (the middleware refuses them
    before any handler runs)."""
    assert {"/v1/produce", "/v1/fetch", "/v1/join-group", "/v1/end-txn"} <= ACL_PATHS
    assert not {"/v1/list-groups", "/v1/describe-groups", "/v1/delete-records"} & ACL_PATHS
