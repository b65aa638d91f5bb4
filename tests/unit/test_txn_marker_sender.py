"""The transaction coordinator's marker sender against fake partition leaders.

Each fake leader is an aiohttp test server answering ``/v1/write-txn-markers`` from a
script; the metadata image is a stub naming each partition's leader. Checked: one
request per leader with its partitions, partitions reported as each leader answers
null, retriable errors and leader moves retried after a backoff (not a hot loop), a
deleted topic done without a request, a non-retriable error given up on, a fencing
error stopping the delivery without a report, and cancel/close stopping retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from broker_harness import run, until

from raftka.broker.coordinator.transaction_coordinator import SendTxnMarkers
from raftka.broker.coordinator.transaction_state import TransactionResult
from raftka.broker.coordinator.txn_marker_sender import TxnMarkerSender, marker_request
from raftka.common.messages import decode, encode
from raftka.common.messages.broker import ErrorObject
from raftka.common.messages.transactions import (
    TxnPartitionResult,
    TxnTopicResult,
    WritableTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from raftka.common.structs import TopicPartition
from raftka.metadata.metadata_records import NO_LEADER

MARKERS = SendTxnMarkers(
    transactional_id="tx",
    producer_id=7,
    producer_epoch=3,
    coordinator_epoch=5,
    result=TransactionResult.COMMIT,
    partitions=frozenset({TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)}),
    transaction_version=2,
)


@dataclass
class Reg:
    leader: int


@dataclass
class Topics:
    leaders: dict[TopicPartition, int]

    def topic_by_name(self, name: str) -> object | None:
        return object() if any(tp.topic == name for tp in self.leaders) else None

    def partition_by_name(self, name: str, partition: int) -> Reg | None:
        leader = self.leaders.get(TopicPartition(name, partition))
        return None if leader is None else Reg(leader)


@dataclass
class Image:
    topics: Topics


@dataclass
class Leader:
    """A fake partition leader: ``script`` maps each asked partition to its error name
    (None: written); the default answers null."""

    script: Callable[[TopicPartition, int], str | None] = lambda tp, n: None
    requests: list[WriteTxnMarkersRequest] = field(default_factory=list)
    status: int = 200

    async def handle(self, request: web.Request) -> web.Response:
        body = decode(await request.read(), WriteTxnMarkersRequest)
        self.requests.append(body)
        if self.status != 200:
            return web.Response(status=self.status, text="no such route")
        n = len(self.requests)
        results = []
        for marker in body.markers:
            topics = []
            for t in marker.topics:
                parts = []
                for p in t.partitions:
                    name = self.script(TopicPartition(t.name, p), n)
                    error = None if name is None else ErrorObject(error=name)
                    parts.append(TxnPartitionResult(partition_index=p, error=error))
                topics.append(TxnTopicResult(name=t.name, partitions=tuple(parts)))
            results.append(
                WritableTxnMarkerResult(producer_id=marker.producer_id, topics=tuple(topics))
            )
        return web.Response(
            body=encode(WriteTxnMarkersResponse(markers=tuple(results))),
            content_type="application/json",
        )

    def asked(self) -> list[set[TopicPartition]]:
        return [
            {TopicPartition(t.name, p) for m in r.markers for t in m.topics for p in t.partitions}
            for r in self.requests
        ]


async def _scenario(
    leaders: dict[int, Leader],
    placement: dict[TopicPartition, int],
    body: Callable[[TxnMarkerSender, list[frozenset[TopicPartition]]], Any],
) -> None:
    servers = {}
    for node, leader in leaders.items():
        app = web.Application()
        app.router.add_post("/v1/write-txn-markers", leader.handle)
        servers[node] = TestServer(app)
        await servers[node].start_server()
    written: list[frozenset[TopicPartition]] = []
    async with aiohttp.ClientSession() as session:
        image = Image(Topics(placement))
        sender = TxnMarkerSender(
            image=lambda: image,  # type: ignore[arg-type,return-value]
            address_of=lambda node: (
                f"{servers[node].host}:{servers[node].port}" if node in servers else None
            ),
            session=lambda: session,
            on_written=lambda markers, tps: written.append(tps),
            request_timeout_ms=2_000,
            backoff_ms=20,
            backoff_max_ms=80,
        )
        try:
            await body(sender, written)
        finally:
            await sender.close()
            for server in servers.values():
                await server.close()


def _done(sender: TxnMarkerSender) -> Callable[[], bool]:
    return lambda: not sender.pending()


def test_one_request_per_leader_and_every_partition_reported() -> None:
    leaders = {1: Leader(), 2: Leader()}
    placement = {TopicPartition("a", 0): 1, TopicPartition("b", 0): 1, TopicPartition("a", 1): 2}

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        sender.send(MARKERS)
        await until(_done(sender), "delivery")
        assert leaders[1].asked() == [{TopicPartition("a", 0), TopicPartition("b", 0)}]
        assert leaders[2].asked() == [{TopicPartition("a", 1)}]
        (marker,) = leaders[1].requests[0].markers
        assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (7, 3, 5)
        assert marker.transaction_result is True and marker.transaction_version == 2
        assert frozenset().union(*written) == MARKERS.partitions
        assert sender.retries == 0

    run(lambda: _scenario(leaders, placement, body))


def test_retriable_errors_and_leader_moves_are_retried_after_a_backoff() -> None:
    moved = TopicPartition("a", 1)
    placement = {TopicPartition("a", 0): 1, TopicPartition("b", 0): 1, moved: 1}

    def first_leader(tp: TopicPartition, n: int) -> str | None:
        if tp == moved:
            placement[moved] = 2  # the leader moved: the next round asks broker 2
            return "NOT_LEADER_OR_FOLLOWER"
        return "NOT_ENOUGH_REPLICAS" if n < 3 else None

    leaders = {1: Leader(first_leader), 2: Leader()}

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        started = time.monotonic()
        sender.send(MARKERS)
        await until(_done(sender), "delivery")
        assert frozenset().union(*written) == MARKERS.partitions
        assert leaders[2].asked() == [{moved}]
        assert len(leaders[1].requests) == 3
        assert sender.retries == 2
        # Two backoffs: 20 ms then 40 ms.
        assert time.monotonic() - started >= 0.06

    run(lambda: _scenario(leaders, placement, body))


def test_deleted_topic_is_done_and_non_retriable_errors_are_given_up() -> None:
    # Topic "b" is not in the image (deleted); a-1 is refused for good.
    placement = {TopicPartition("a", 0): 1, TopicPartition("a", 1): 1}
    leaders = {1: Leader(lambda tp, n: "INVALID_REQUEST" if tp.partition == 1 else None)}

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        sender.send(MARKERS)
        await until(_done(sender), "delivery")
        assert frozenset().union(*written) == MARKERS.partitions
        assert leaders[1].asked() == [{TopicPartition("a", 0), TopicPartition("a", 1)}]

    run(lambda: _scenario(leaders, placement, body))


def test_a_fencing_answer_stops_the_delivery_without_a_report() -> None:
    placement = dict.fromkeys(MARKERS.partitions, 1)
    leaders = {1: Leader(lambda tp, n: "TRANSACTION_COORDINATOR_FENCED")}

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        sender.send(MARKERS)
        await until(_done(sender), "the delivery to stop")
        assert written == [] and len(leaders[1].requests) == 1

    run(lambda: _scenario(leaders, placement, body))


def test_no_route_and_no_leader_back_off_until_cancelled() -> None:
    placement = {TopicPartition("a", 0): 1, TopicPartition("a", 1): NO_LEADER}
    leaders = {1: Leader(status=404)}
    markers = dataclasses.replace(MARKERS, partitions=frozenset(placement))

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        sender.send(markers)
        await until(lambda: sender.retries >= 4, "four failed rounds")
        assert len(leaders[1].requests) == sender.retries
        assert written == []
        sender.cancel(lambda tid: tid == "tx")
        await until(_done(sender), "the delivery to stop")
        asked = len(leaders[1].requests)
        await asyncio.sleep(0.2)  # nothing may be sent once cancelled (a negative check)
        assert len(leaders[1].requests) == asked

    run(lambda: _scenario(leaders, placement, body))


def test_marker_request_groups_partitions_by_topic() -> None:
    request = marker_request(MARKERS, MARKERS.partitions)
    (marker,) = request.markers
    assert [(t.name, t.partitions) for t in marker.topics] == [("a", (0, 1)), ("b", (0,))]


def test_concurrent_transactions_share_one_request_per_leader() -> None:
    placement = dict.fromkeys(MARKERS.partitions, 1)
    leaders = {1: Leader()}
    others = [
        dataclasses.replace(MARKERS, transactional_id=f"tx{i}", producer_id=100 + i)
        for i in range(5)
    ]

    async def body(sender: TxnMarkerSender, written: list[frozenset[TopicPartition]]) -> None:
        for markers in others:
            sender.send(markers)
        await until(_done(sender), "delivery")
        # All five queued before the first request left: one request, five markers.
        (request,) = leaders[1].requests
        assert sorted(m.producer_id for m in request.markers) == [100, 101, 102, 103, 104]
        assert len(written) == 5 and all(w == MARKERS.partitions for w in written)

    run(lambda: _scenario(leaders, placement, body))
