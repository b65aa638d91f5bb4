"""KIP-890 part 1's network half (broker/txn_verification.py) against an in-process
HTTP coordinator: which partitions it asks about, the guards it hands the append, and
Kafka's error mapping (retriable coordinator answers and an unreachable coordinator
become NOT_ENOUGH_REPLICAS; INVALID_TXN_STATE and PRODUCER_FENCED pass through)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.replication import MemoryPartitionLog, Replica, ReplicationConfig
from raftka.broker.txn_markers import write_txn_markers
from raftka.broker.txn_verification import (
    TRANSACTION_STATE_TOPIC,
    TxnVerifier,
    has_transactional_batch,
    verification_error,
)
from raftka.common.errors import (
    InvalidTxnStateError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
)
from raftka.common.messages.transactions import (
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
)
from raftka.common.record import Record, build_batch

TID = "tx-1"
PID = 7


def _txn(pid: int = PID) -> bytes:
    return build_batch(
        [Record(value=b"v")],
        producer_id=pid,
        producer_epoch=3,
        base_sequence=0,
        is_transactional=True,
    )


def _partition(index: int, *, leader: bool = True) -> Any:
    replica = Replica(
        topic="t",
        partition=index,
        local_broker_id=1,
        log=MemoryPartitionLog(),
        config=ReplicationConfig(min_insync_replicas=1, replica_lag_time_max_ms=1_000),
    )
    replica.on_metadata_change(
        leader_id=1 if leader else 2,
        leader_epoch=1,
        partition_epoch=1,
        replicas=(1, 2),
        isr=(1,) if leader else (1, 2),
        now_ms=0,
    )
    return SimpleNamespace(state=replica.state, producers=replica.producers, replica=replica)


def _image(num_partitions: int = 3, leader: int = 5) -> Any:
    partitions = {
        i: SimpleNamespace(leader=leader if i == coordinator_partition(TID, num_partitions) else 9)
        for i in range(num_partitions)
    }
    topic = SimpleNamespace(partitions=partitions)
    return SimpleNamespace(
        topics=SimpleNamespace(
            topic_by_name=lambda name: topic if name == TRANSACTION_STATE_TOPIC else None
        )
    )


@dataclass
class Coordinator:
    answer: Callable[[dict[str, Any]], dict[str, Any]]
    seen: list[dict[str, Any]] = field(default_factory=list)


async def _with_coordinator(
    coordinator: Coordinator, body: Callable[[TxnVerifier], Awaitable[Any]]
) -> Any:
    async def handle(request: web.Request) -> web.Response:
        payload = orjson.loads(await request.read())
        coordinator.seen.append(payload)
        return web.json_response(coordinator.answer(payload))

    app = web.Application()
    app.router.add_post("/v1/add-partitions-to-txn", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as session:
        verifier = TxnVerifier(
            image=_image,
            address_of=lambda b: f"127.0.0.1:{port}" if b == 5 else None,
            session=lambda: session,
        )
        try:
            return await body(verifier)
        finally:
            await runner.cleanup()


def _answer(errors: dict[int, str | None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def answer(_: dict[str, Any]) -> dict[str, Any]:
        return {
            "error": None,
            "results": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": i,
                            "error": None if e is None else {"error": e, "error_code": 0},
                        }
                        for i, e in errors.items()
                    ],
                }
            ],
        }

    return answer


def test_only_partitions_a_batch_would_start_a_transaction_at_are_asked() -> None:
    """Partition 0: first transactional batch (asked, verified); 1: the producer's
    transaction is open there already (not asked); 2: a plain batch (not asked)."""
    parts = {("t", i): _partition(i) for i in range(3)}
    parts[("t", 1)].replica.append_as_leader(_txn(), acks=1)
    coordinator = Coordinator(_answer({0: None}))
    entries = [
        ("t", 0, _txn()),
        (
            "t",
            1,
            build_batch(
                [Record(value=b"x")],
                producer_id=PID,
                producer_epoch=3,
                base_sequence=1,
                is_transactional=True,
            ),
        ),
        ("t", 2, build_batch([Record(value=b"p")])),
    ]
    out = asyncio.run(
        _with_coordinator(coordinator, lambda v: v.verify(TID, entries, parts, timeout_ms=5_000))
    )
    assert not out.errors
    assert list(out.guards[("t", 0)]) == [PID] and out.guards[("t", 1)] == {}
    (request,) = coordinator.seen
    assert request["verify_only"] is True and request["transactional_id"] == TID
    assert (request["producer_id"], request["producer_epoch"]) == (PID, 3)
    assert request["topics"] == [{"name": "t", "partitions": [0]}]
    appended = parts[("t", 0)].replica.append_as_leader(
        _txn(), acks=1, txn_guards=out.guards[("t", 0)]
    )
    assert appended.error is None


@pytest.mark.parametrize(
    ("coordinator_error", "expected"),
    [
        ("INVALID_TXN_STATE", InvalidTxnStateError),
        ("PRODUCER_FENCED", ProducerFencedError),
        ("CONCURRENT_TRANSACTIONS", NotEnoughReplicasError),
        ("NOT_COORDINATOR", NotEnoughReplicasError),
    ],
)
def test_coordinator_errors_map_as_kafkas(coordinator_error: str, expected: type) -> None:
    parts = {("t", 0): _partition(0)}
    out = asyncio.run(
        _with_coordinator(
            Coordinator(_answer({0: coordinator_error})),
            lambda v: v.verify(TID, [("t", 0, _txn())], parts, timeout_ms=5_000),
        )
    )
    assert isinstance(out.errors[("t", 0)], expected)
    assert out.guards[("t", 0)] == {}


def test_an_unreachable_or_unknown_coordinator_is_not_enough_replicas() -> None:
    parts = {("t", 0): _partition(0)}

    async def unreachable() -> Any:
        async with aiohttp.ClientSession() as session:
            verifier = TxnVerifier(
                image=_image, address_of=lambda b: "127.0.0.1:1", session=lambda: session
            )
            return await verifier.verify(TID, [("t", 0, _txn())], parts, timeout_ms=2_000)

    out = asyncio.run(unreachable())
    assert isinstance(out.errors[("t", 0)], NotEnoughReplicasError)
    no_topic = TxnVerifier(
        image=lambda: SimpleNamespace(topics=SimpleNamespace(topic_by_name=lambda _: None)),
        address_of=lambda b: None,
        session=lambda: None,
    )
    out = asyncio.run(no_topic.verify(TID, [("t", 0, _txn())], parts, timeout_ms=1_000))
    assert "COORDINATOR_NOT_AVAILABLE" in str(out.errors[("t", 0)])


def test_mapping_helpers() -> None:
    assert has_transactional_batch(_txn()) and not has_transactional_batch(
        build_batch([Record(value=b"p")])
    )
    assert isinstance(verification_error("NETWORK_EXCEPTION"), NotEnoughReplicasError)


def test_write_txn_markers_answers_per_partition_and_calls_the_offsets_hook() -> None:
    """The route's core: each partition's error in the request's shape, and the
    group-coordinator hook for __consumer_offsets partitions that got their marker."""
    calls: list[tuple[str, int, int, bool]] = []

    class Manager:
        async def write_txn_markers(self, writes: Any, *, timeout_ms: int) -> Any:
            del timeout_ms
            return [
                SimpleNamespace(
                    error=None if w.partition == 0 else NotLeaderOrFollowerError("elsewhere")
                )
                for w in writes
            ]

    request = WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=PID,
                producer_epoch=4,
                transaction_result=True,
                coordinator_epoch=2,
                topics=(
                    TxnTopic(name="__consumer_offsets", partitions=(0, 1)),
                    TxnTopic(name="t", partitions=(0,)),
                ),
            ),
        )
    )
    answer = asyncio.run(
        write_txn_markers(
            Manager(),  # type: ignore[arg-type]
            request,
            on_txn_marker=lambda *a: calls.append(a),
        )
    )
    (marker,) = answer.markers
    errors = {
        (t.name, p.partition_index): (p.error.error if p.error else None)
        for t in marker.topics
        for p in t.partitions
    }
    assert errors == {
        ("__consumer_offsets", 0): None,
        ("__consumer_offsets", 1): "NOT_LEADER_OR_FOLLOWER",
        ("t", 0): None,
    }
    assert calls == [("__consumer_offsets", 0, PID, True)]
