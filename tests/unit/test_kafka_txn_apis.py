"""The Kafka listener's transaction APIs, in process, against stand-in services.

Every version advertised of InitProducerId (with a transactional id),
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions and
ListTransactions answers a kio-built request with a frame kio reads back; the fields
reach the transaction coordinator service (or, for TxnOffsetCommit, the group
coordinator) as raftka's messages; its errors come back per partition or per request,
PRODUCER_FENCED as INVALID_PRODUCER_EPOCH to the versions before KIP-588's. Real
clients drive the same handlers against a cluster in
tests/integration/test_kafka_transactions.py.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from raftka.broker.kafka.apis import SUPPORTED, Call, KafkaApis
from raftka.common.errors import (
    InvalidRequestError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from raftka.common.messages import broker as broker_api
from raftka.common.messages import transactions as txn_api
from raftka.common.messages.broker import error_object

#: Kafka's int64 -1.
NO_START = struct.pack(">q", -1)
TXN_KEYS = (22, 24, 25, 26, 28, 65, 66)
#: The first version of each that knows PRODUCER_FENCED (KIP-588).
FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _fenced() -> broker_api.ErrorObject | None:
    return error_object(ProducerFencedError("a newer epoch holds the id"))


class Transactions:
    """The transaction coordinator service: records each request, answers canned."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def init_producer_id(
        self, m: broker_api.InitProducerIdRequest
    ) -> broker_api.InitProducerIdResponse:
        self.requests.append(m)
        if m.producer_epoch == 7:  # an epoch bump a newer producer fenced
            return broker_api.InitProducerIdResponse(error=_fenced())
        return broker_api.InitProducerIdResponse(producer_id=42, producer_epoch=3)

    async def add_partitions_to_txn(
        self, m: txn_api.AddPartitionsToTxnRequest, context: Any
    ) -> txn_api.AddPartitionsToTxnResponse:
        self.requests.append(m)
        # Partition 1 is fenced, partition 0 added; partition 2 is left unanswered.
        results = txn_api.TxnTopicResult(
            name="t",
            partitions=(
                txn_api.TxnPartitionResult(partition_index=0),
                txn_api.TxnPartitionResult(partition_index=1, error=_fenced()),
            ),
        )
        return txn_api.AddPartitionsToTxnResponse(results=(results,))

    async def add_offsets_to_txn(
        self, m: txn_api.AddOffsetsToTxnRequest, context: Any
    ) -> txn_api.AddOffsetsToTxnResponse:
        self.requests.append(m)
        return txn_api.AddOffsetsToTxnResponse(error=_fenced())

    async def end_txn(self, m: txn_api.EndTxnRequest, context: Any) -> txn_api.EndTxnResponse:
        self.requests.append(m)
        return txn_api.EndTxnResponse()

    async def describe_transactions(
        self, m: txn_api.DescribeTransactionsRequest, context: Any
    ) -> txn_api.DescribeTransactionsResponse:
        self.requests.append(m)
        return txn_api.DescribeTransactionsResponse(
            transaction_states=(
                txn_api.DescribedTransactionState(
                    transactional_id="tx",
                    transaction_state="Ongoing",
                    transaction_timeout_ms=60_000,
                    transaction_start_time_ms=1_700_000_000_123,
                    producer_id=42,
                    producer_epoch=3,
                    topics=(txn_api.TxnTopic(name="t", partitions=(0, 1)),),
                ),
                txn_api.DescribedTransactionState(
                    transactional_id="unknown",
                    error=error_object(TransactionalIdNotFoundError("unknown")),
                ),
            )
        )

    async def list_transactions(
        self, m: txn_api.ListTransactionsRequest, context: Any
    ) -> txn_api.ListTransactionsResponse:
        self.requests.append(m)
        return txn_api.ListTransactionsResponse(
            unknown_state_filters=("Bogus",),
            transaction_states=(
                txn_api.ListedTransaction(
                    transactional_id="tx", producer_id=42, transaction_state="Ongoing"
                ),
            ),
        )


class Groups:
    """The group coordinator service: TxnOffsetCommit answers partition 0 fenced."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def txn_offset_commit(
        self, m: txn_api.TxnOffsetCommitRequest, context: Any
    ) -> txn_api.TxnOffsetCommitResponse:
        self.requests.append(m)
        result = txn_api.TxnTopicResult(
            name="t", partitions=(txn_api.TxnPartitionResult(partition_index=0, error=_fenced()),)
        )
        return txn_api.TxnOffsetCommitResponse(topics=(result,))


def _apis() -> tuple[KafkaApis, Transactions, Groups]:
    transactions, groups = Transactions(), Groups()
    server = SimpleNamespace(
        transactions=transactions,
        coordinator=groups,
        config=SimpleNamespace(
            authorizer=None,
            request_timeout_ms=1000,
            node_id=1,
            controller_ids=(1,),
            controllers=("h:9093",),
        ),
    )
    return KafkaApis(cast(Any, server)), transactions, groups


def _request(key: int, version: int, *, producer_epoch: int = 0) -> Any:
    """A small request of ``key`` in ``version``, built with kio's own classes."""
    cls = load_request_schema(key, version)
    m = sys.modules[cls.__module__]
    if key == 22:
        bump = {"producer_id": 42, "producer_epoch": producer_epoch} if version >= 3 else {}
        return cls(
            transactional_id="tx",
            transaction_timeout=datetime.timedelta(seconds=9),
            **bump,
        )
    if key == 24:
        topic = m.AddPartitionsToTxnTopic(name="t", partitions=(0, 1, 2))
        return cls(
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=42,
            v3_and_below_producer_epoch=3,
            v3_and_below_topics=(topic,),
        )
    if key == 25:
        return cls(transactional_id="tx", producer_id=42, producer_epoch=3, group_id="g")
    if key == 26:
        return cls(transactional_id="tx", producer_id=42, producer_epoch=3, committed=True)
    if key == 28:
        extra: dict[str, Any] = {}
        leader_epoch: dict[str, Any] = {}
        if version >= 2:
            leader_epoch = {"committed_leader_epoch": 5}
        if version >= 3:
            extra = {"generation_id": 4, "member_id": "m-1", "group_instance_id": None}
        partition = m.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=17, committed_metadata="md", **leader_epoch
        )
        topic = m.TxnOffsetCommitRequestTopic(name="t", partitions=(partition,))
        return cls(
            transactional_id="tx",
            group_id="g",
            producer_id=42,
            producer_epoch=3,
            topics=(topic,),
            **extra,
        )
    if key == 65:
        return cls(transactional_ids=("tx", "unknown"))
    duration = {"duration_filter": 1000} if version >= 1 else {}
    return cls(state_filters=("Ongoing", "Bogus"), producer_id_filters=(42,), **duration)


def _answer(apis: KafkaApis, key: int, version: int, request: Any) -> Any:
    frame = asyncio.run(apis._answer(key, version, 7, request, Call("c", "127.0.0.1")))
    assert frame is not None
    response_cls = load_response_schema(key, version)
    start = 9 if response_cls.__flexible__ else 8  # size, correlation id (and header tags)
    if key == 65:
        # Kafka's -1 start time (no transaction running) is on the wire, but kio's
        # reader refuses negative timestamps: read every int64 -1 as 0 (the described
        # states here have no other -1 than an unknown id's start time and producer id).
        assert NO_START in frame
        frame = frame.replace(NO_START, struct.pack(">q", 0))
    answer, used = entity_reader(response_cls)(frame, start)
    assert start + used == len(frame), (key, version)
    return answer


def _fenced_code(key: int, version: int) -> ErrorCode:
    return (
        ErrorCode.producer_fenced
        if version >= FENCED_SINCE[key]
        else ErrorCode.invalid_producer_epoch
    )


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in TXN_KEYS for v in range(SUPPORTED[k][0], SUPPORTED[k][1] + 1)],
)
def test_every_version_reaches_the_service_and_answers(key: int, version: int) -> None:
    apis, transactions, groups = _apis()
    answer = _answer(apis, key, version, _request(key, version))
    if key == 22:
        (m,) = transactions.requests
        assert (m.transactional_id, m.transaction_timeout_ms) == ("tx", 9000)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
            ErrorCode.none,
            42,
            3,
        )
    elif key == 24:
        (m,) = transactions.requests
        assert not m.verify_only
        assert [(t.name, t.partitions) for t in m.topics] == [("t", (0, 1, 2))]
        (topic,) = answer.results_by_topic_v3_and_below
        codes = [p.partition_error_code for p in topic.results_by_partition]
        # A partition the service did not answer for is no silent success.
        assert codes == [ErrorCode.none, _fenced_code(24, version), ErrorCode.unknown_server_error]
    elif key == 25:
        assert transactions.requests[0].group_id == "g"
        assert answer.error_code == _fenced_code(25, version)
    elif key == 26:
        (m,) = transactions.requests
        assert m.committed is True and (m.producer_id, m.producer_epoch) == (42, 3)
        assert answer.error_code == ErrorCode.none
    elif key == 28:
        (m,) = groups.requests
        (p,) = m.topics[0].partitions
        assert (p.partition_index, p.committed_offset, p.committed_metadata) == (0, 17, "md")
        assert p.committed_leader_epoch == (5 if version >= 2 else -1)
        member = (4, "m-1") if version >= 3 else (-1, "")
        assert (m.generation_id, m.member_id) == member
        (topic,) = answer.topics
        assert [pt.error_code for pt in topic.partitions] == [_fenced_code(28, version)]
    elif key == 65:
        found, unknown = answer.transaction_states
        assert (found.transaction_state, found.producer_id, found.error_code) == (
            "Ongoing",
            42,
            ErrorCode.none,
        )
        assert found.transaction_start_time == datetime.datetime.fromtimestamp(
            1_700_000_000.123, datetime.UTC
        )
        assert [(t.topic, t.partitions) for t in found.topics] == [("t", (0, 1))]
        assert unknown.error_code == ErrorCode.transactional_id_not_found
        assert unknown.transaction_start_time.timestamp() == 0  # -1 on the wire, see _answer
    else:
        (m,) = transactions.requests
        assert m.state_filters == ("Ongoing", "Bogus") and m.producer_id_filters == (42,)
        assert m.duration_filter_ms == (1000 if version >= 1 else -1)
        assert answer.unknown_state_filters == ("Bogus",)
        assert [s.transactional_id for s in answer.transaction_states] == ["tx"]


@pytest.mark.parametrize("version", range(3, SUPPORTED[22][1] + 1))
def test_init_producer_id_fenced_epoch_bump(version: int) -> None:
    apis, transactions, _ = _apis()
    answer = _answer(apis, 22, version, _request(22, version, producer_epoch=7))
    assert transactions.requests[0].producer_id == 42
    assert answer.error_code == _fenced_code(22, version)
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)


def test_a_request_the_service_refuses_answers_its_error() -> None:
    """A request that does not check out (an empty transactional id: raftka's
    messages bound it as the HTTP API does) or a service that raises answers Kafka's
    error, never an exception that would close the connection."""

    apis, transactions, _ = _apis()
    request = load_request_schema(26, 3)(
        transactional_id="", producer_id=1, producer_epoch=0, committed=False
    )
    assert _answer(apis, 26, 3, request).error_code == ErrorCode.invalid_request
    assert transactions.requests == []

    async def refuse(m: Any, context: Any) -> Any:
        raise InvalidRequestError("no")

    cast(Any, transactions).describe_transactions = refuse
    answer = _answer(apis, 65, 0, _request(65, 0))
    assert [(s.transactional_id, s.error_code) for s in answer.transaction_states] == [
        ("tx", ErrorCode.invalid_request),
        ("unknown", ErrorCode.invalid_request),
    ]
