"""The transactional producer's requests, against an in-process fake cluster.

One aiohttp server on loopback plays the broker (metadata, produce), the transaction
coordinator (FindCoordinator key_type 1, InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn) and the group coordinator (TxnOffsetCommit), records every
request in order, and answers scripted errors. Checked: what each request carries
(transactional id, producer id and epoch, the partitions batched into one
AddPartitionsToTxn before any produce to them, the transactional flag on batches, the
group metadata on TxnOffsetCommit), the epoch a version-2 EndTxn answers being used by
the next transaction (sequences from 0), retries of coordinator errors, fencing being
final, an abortable produce error leaving the producer usable after an abort, records
not yet sent failing with TransactionAbortedError, and the blocking face. Every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from http_fake import serve_on_thread

from raftka.client import AsyncProducer, ClientConfigError, ConsumerGroupMetadata, Producer
from raftka.client.compat.aiokafka import AIOKafkaProducer
from raftka.client.compat.kafka_python import KafkaProducer
from raftka.client.producer.transactions import TxnState
from raftka.client.structs import OffsetAndMetadata, TopicPartition
from raftka.common.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTransactionTimeoutError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
)
from raftka.common.record.header import iter_batches
from raftka.common.wire import decode_frame

PARTITIONS = 3
PRODUCER_ID = 4242


def _error(name: str) -> dict[str, Any]:
    return {"error": name, "error_code": -1, "message": "fake"}


@dataclass
class FakeCluster:
    address: str = ""
    #: (path, body) of every request but metadata, in arrival order.
    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Per path, errors to answer in order before succeeding.
    errors: dict[str, list[str]] = field(default_factory=dict)
    epoch: int = -1
    #: Transaction version 2: EndTxn answers epoch + 1.
    bump_on_end: bool = True
    #: Answer EndTxn with the unchanged producer id and epoch (not a bump).
    name_same_epoch: bool = False
    #: (partition, producer id, epoch, base sequence, transactional?) of every batch.
    batches: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    hold_add: asyncio.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None
    #: Per log entry, the error injected into its answer (the first one for produce).
    injected: list[str | None] = field(default_factory=list)
    #: Records per batch, in the order of ``batches``.
    batch_counts: list[int] = field(default_factory=list)
    #: Batches whose epoch was not the one the coordinator last gave out.
    stale_epoch_batches: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/v1/metadata", self._metadata),
                web.post("/v1/produce", self._produce),
                web.post("/v1/find-coordinator", self._find_coordinator),
                web.post("/v1/init-producer-id", self._init_producer_id),
                web.post("/v1/add-partitions-to-txn", self._add_partitions),
                web.post("/v1/add-offsets-to-txn", self._simple),
                web.post("/v1/end-txn", self._end_txn),
                web.post("/v1/txn-offset-commit", self._txn_offset_commit),
            ]
        )
        return app

    def paths(self) -> list[str]:
        return [p for p, _ in self.log]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [b for p, b in self.log if p == path]

    async def _take(self, request: web.Request) -> tuple[dict[str, Any], str | None]:
        body = orjson.loads(await request.read())
        self.log.append((request.path, body))
        pending = self.errors.get(request.path)
        error = pending.pop(0) if pending else None
        self.injected.append(error)
        return body, error

    async def _metadata(self, request: web.Request) -> web.Response:
        host, port = self.address.split(":")
        parts = [
            {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]}
            for p in range(PARTITIONS)
        ]
        body = {
            "controller_id": None,
            "controllers": [],
            "brokers": [{"id": 1, "host": host, "port": int(port), "rack": None}],
            "topics": [{"name": "t", "topic_id": "x", "error": None, "partitions": parts}],
        }
        return web.json_response(body)

    async def _find_coordinator(self, request: web.Request) -> web.Response:
        _, error = await self._take(request)
        host, port = self.address.split(":")
        if error:
            return web.json_response({"error": _error(error)})
        return web.json_response({"error": None, "node_id": 1, "host": host, "port": int(port)})

    async def _init_producer_id(self, request: web.Request) -> web.Response:
        _, error = await self._take(request)
        if error:
            return web.json_response({"error": _error(error)})
        self.epoch += 1
        return web.json_response(
            {"error": None, "producer_id": PRODUCER_ID, "producer_epoch": self.epoch}
        )

    async def _add_partitions(self, request: web.Request) -> web.Response:
        body, error = await self._take(request)
        if self.hold_add is not None:
            await self.hold_add.wait()
        results = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "error": _error(error) if error else None}
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ]
        return web.json_response({"error": None, "results": results})

    async def _simple(self, request: web.Request) -> web.Response:
        _, error = await self._take(request)
        return web.json_response({"error": _error(error) if error else None})

    async def _end_txn(self, request: web.Request) -> web.Response:
        _, error = await self._take(request)
        if error:
            return web.json_response({"error": _error(error)})
        if self.name_same_epoch:
            return web.json_response(
                {"error": None, "producer_id": PRODUCER_ID, "producer_epoch": self.epoch}
            )
        if not self.bump_on_end:
            return web.json_response({"error": None})
        self.epoch += 1
        return web.json_response(
            {"error": None, "producer_id": PRODUCER_ID, "producer_epoch": self.epoch}
        )

    async def _txn_offset_commit(self, request: web.Request) -> web.Response:
        body, error = await self._take(request)
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error": _error(error) if error else None,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ]
        return web.json_response({"topics": topics})

    async def _produce(self, request: web.Request) -> web.Response:
        raw = await request.read()
        header, payloads = decode_frame(raw, "partitions")
        self.log.append((request.path, header))
        pending = self.errors.get(request.path)
        self.injected.append(pending[0] if pending else None)
        responses = []
        for entry, payload in zip(header["partitions"], payloads, strict=True):
            for _, h in iter_batches(bytes(payload)):
                self.batches.append(
                    (
                        entry["partition"],
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.is_transactional,
                    )
                )
                self.batch_counts.append(h.last_offset_delta + 1)
                if h.producer_epoch != self.epoch:
                    self.stale_epoch_batches += 1
            out: dict[str, Any] = {
                "topic": entry["topic"],
                "partition": entry["partition"],
                "current_leader": None,
                "error": None,
                "base_offset": 0,
                "log_append_time_ms": -1,
            }
            if pending:
                out["error"] = _error(pending.pop(0))
            responses.append(out)
        return web.Response(body=orjson.dumps({"responses": responses}))


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """The fake on its own loop thread (the blocking producer shares it)."""
    fake = FakeCluster()
    with serve_on_thread(fake.app()) as (fake.address, fake.loop):
        yield fake


def _producer(cluster: FakeCluster, **extra: Any) -> AsyncProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": cluster.address,
        "transactional_id": "tid",
        "max_block_ms": 3_000,
        "linger_ms": 1,
        "retry_backoff_ms": 10,
    }
    options.update(extra)
    return AsyncProducer(**options)


def run(cluster: FakeCluster, body: Callable[[AsyncProducer], Coroutine[Any, Any, None]]) -> None:
    """Run ``body`` with a transactional AsyncProducer on a fresh loop, bounded."""

    async def main() -> None:
        p = _producer(cluster)
        try:
            await body(p)
        finally:
            await asyncio.wait_for(p.close(timeout_ms=2_000), 10)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_committed_transaction_sends_kafkas_requests_in_order(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        futures = [await p.send("t", b"v", partition=i % PARTITIONS) for i in range(6)]
        await p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)

    run(cluster, body)
    paths = cluster.paths()
    assert paths[0] == "/v1/find-coordinator"
    find = cluster.bodies("/v1/find-coordinator")[0]
    assert find == {"key": "tid", "key_type": 1}
    init = cluster.bodies("/v1/init-producer-id")[0]
    assert init["transactional_id"] == "tid" and init["transaction_timeout_ms"] == 60_000
    # One AddPartitionsToTxn for every partition, before the first produce.
    adds = cluster.bodies("/v1/add-partitions-to-txn")
    first_produce = paths.index("/v1/produce")
    assert paths.index("/v1/add-partitions-to-txn") < first_produce
    added = {p for a in adds for t in a["topics"] for p in t["partitions"]}
    assert added == {0, 1, 2}
    assert adds[0]["producer_id"] == PRODUCER_ID and adds[0]["producer_epoch"] == 0
    assert all(b["transactional_id"] == "tid" for b in cluster.bodies("/v1/produce"))
    assert cluster.batches and all(
        pid == PRODUCER_ID and epoch == 0 and transactional
        for _, pid, epoch, _, transactional in cluster.batches
    )
    (end,) = cluster.bodies("/v1/end-txn")
    assert end == {
        "transactional_id": "tid",
        "producer_id": PRODUCER_ID,
        "producer_epoch": 0,
        "committed": True,
        # raftka's client takes the bumped epoch from the answer: a version-2 client.
        "transaction_version": 2,
    }
    assert paths[-1] == "/v1/end-txn"


def test_the_next_transaction_uses_the_epoch_endtxn_answered(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        for _ in range(2):
            p.begin_transaction()
            await p.send("t", b"v", partition=0)
            await p.send("t", b"w", partition=0)
            await p.commit_transaction()

    run(cluster, body)
    epochs = sorted({(epoch, seq) for _, _, epoch, seq, _ in cluster.batches})
    # Epoch 0 then 1 (KIP-890 part 2), each numbering partition 0 from sequence 0.
    assert {e for e, _ in epochs} == {0, 1}
    assert min(s for e, s in epochs if e == 1) == 0
    ends = cluster.bodies("/v1/end-txn")
    assert [e["producer_epoch"] for e in ends] == [0, 1]
    # Each transaction adds its partition again.
    assert len(cluster.bodies("/v1/add-partitions-to-txn")) == 2


def test_an_end_txn_naming_the_same_epoch_keeps_the_sequences(cluster: FakeCluster) -> None:
    """An EndTxn answer that names the producer's current epoch is no bump: the next
    transaction's batches go on with the sequence (restarting at 0 under the same
    epoch would be dropped by the partition as a duplicate of the first batch)."""
    cluster.name_same_epoch = True

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        for _ in range(2):
            p.begin_transaction()
            await p.send("t", b"v", partition=0)
            await p.commit_transaction()

    run(cluster, body)
    sent = [(epoch, seq) for _, _, epoch, seq, _ in cluster.batches]
    assert sent == [(0, 0), (0, 1)], sent


def test_calls_in_the_wrong_state_raise_illegal_state(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await p.send("t", b"v")
        await p.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await p.send("t", b"v")
        with pytest.raises(IllegalStateError, match="READY"):
            await p.commit_transaction()
        with pytest.raises(IllegalStateError, match="READY"):
            await p.abort_transaction()
        with pytest.raises(IllegalStateError, match="already called"):
            await p.init_transactions()
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
            p.begin_transaction()

    run(cluster, body)
    assert "/v1/produce" not in cluster.paths()


async def _plain_transactional_methods(p: AsyncProducer) -> None:
    with pytest.raises(IllegalStateError, match="transactional_id"):
        await p.init_transactions()
    with pytest.raises(IllegalStateError, match="transactional_id"):
        p.begin_transaction()


def test_a_producer_without_transactional_id_refuses_transactions(
    cluster: FakeCluster,
) -> None:
    async def main() -> None:
        p = AsyncProducer(bootstrap_servers=cluster.address)
        try:
            await _plain_transactional_methods(p)
        finally:
            await p.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_config_refuses_transactions_without_idempotence() -> None:
    with pytest.raises(ClientConfigError, match="enable_idempotence"):
        AsyncProducer(bootstrap_servers="h:1", transactional_id="x", enable_idempotence=False)
    with pytest.raises(ClientConfigError, match="transaction_timeout_ms"):
        AsyncProducer(bootstrap_servers="h:1", transactional_id="x", transaction_timeout_ms=0)
    with pytest.raises(ClientConfigError, match="transactional_id"):
        AsyncProducer(bootstrap_servers="h:1", transactional_id="")


def test_init_retries_coordinator_errors_then_times_out(cluster: FakeCluster) -> None:
    cluster.errors["/v1/init-producer-id"] = [
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NOT_COORDINATOR",
        "CONCURRENT_TRANSACTIONS",
    ]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()

    run(cluster, body)
    paths = cluster.paths()
    assert paths.count("/v1/init-producer-id") == 4
    # NOT_COORDINATOR made the producer look the coordinator up again.
    assert paths.count("/v1/find-coordinator") == 2

    cluster.log.clear()
    cluster.errors["/v1/init-producer-id"] = ["COORDINATOR_LOAD_IN_PROGRESS"] * 10_000

    async def times_out(p: AsyncProducer) -> None:
        with pytest.raises(KafkaTimeoutError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            await p.init_transactions(timeout_ms=300)
        cluster.errors["/v1/init-producer-id"] = []
        await p.init_transactions()  # a timed-out init may be called again
        p.begin_transaction()

    run(cluster, times_out)


def test_fenced_producer_fails_every_later_call(cluster: FakeCluster) -> None:
    cluster.errors["/v1/end-txn"] = ["PRODUCER_FENCED"]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("t", b"v", partition=0)
        with pytest.raises(ProducerFencedError):
            await p.commit_transaction()
        with pytest.raises(ProducerFencedError):
            p.begin_transaction()
        with pytest.raises(ProducerFencedError):
            await p.abort_transaction()
        with pytest.raises(ProducerFencedError):
            await p.send("t", b"v")

    run(cluster, body)
    assert cluster.paths().count("/v1/end-txn") == 1


def test_invalid_producer_epoch_on_produce_is_fencing(cluster: FakeCluster) -> None:
    cluster.errors["/v1/produce"] = ["INVALID_PRODUCER_EPOCH"]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        future = await p.send("t", b"v", partition=0)
        with pytest.raises(ProducerFencedError):
            await p.commit_transaction()
        with pytest.raises(InvalidProducerEpochError):  # the batch's own error
            await future
        with pytest.raises(ProducerFencedError):
            p.begin_transaction()

    run(cluster, body)
    assert "/v1/end-txn" not in cluster.paths()


def test_abortable_error_then_abort_leaves_the_producer_usable(cluster: FakeCluster) -> None:
    cluster.errors["/v1/produce"] = ["INVALID_RECORD"]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        failed = await p.send("t", b"bad", partition=0)
        with pytest.raises(InvalidRecordError, match="abort_transaction"):
            await p.commit_transaction()
        with pytest.raises(InvalidRecordError):
            await failed
        with pytest.raises(InvalidRecordError):
            await p.send("t", b"v")  # no more sends until the abort
        await p.abort_transaction()
        p.begin_transaction()
        ok = await p.send("t", b"good", partition=1)
        await p.commit_transaction()
        assert (await ok).partition == 1

    run(cluster, body)
    ends = cluster.bodies("/v1/end-txn")
    assert [e["committed"] for e in ends] == [False, True]
    # The failed batch left a sequence hole: the abort's new epoch numbers from 0.
    assert ends[1]["producer_epoch"] == ends[0]["producer_epoch"] + 1


def test_abort_without_epoch_from_coordinator_bumps_it_with_init(cluster: FakeCluster) -> None:
    """Transaction version 1: EndTxn answers no epoch; a failed batch's hole is closed
    by InitProducerId with the current id and epoch (KIP-360)."""
    cluster.bump_on_end = False
    cluster.errors["/v1/produce"] = ["INVALID_RECORD"]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("t", b"bad", partition=0)
        with pytest.raises(InvalidRecordError):
            await p.commit_transaction()
        await p.abort_transaction()
        p.begin_transaction()
        await p.send("t", b"good", partition=0)
        await p.commit_transaction()

    run(cluster, body)
    inits = cluster.bodies("/v1/init-producer-id")
    assert len(inits) == 2
    assert inits[1]["producer_id"] == PRODUCER_ID and inits[1]["producer_epoch"] == 0
    assert cluster.batches[-1][2:4] == (1, 0)  # epoch 1, sequence 0


def test_abort_fails_records_not_yet_sent(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        assert cluster.loop is not None

        async def make_hold() -> None:
            cluster.hold_add = asyncio.Event()

        asyncio.run_coroutine_threadsafe(make_hold(), cluster.loop).result(5)
        await p.init_transactions()
        p.begin_transaction()
        future = await p.send("t", b"v", partition=2)
        abort = asyncio.ensure_future(p.abort_transaction())
        # The abort's first step (before any await) marks the state; only then may the
        # held AddPartitionsToTxn answer, so the record can never be sent.
        while p._txn is not None and p._txn.state is not TxnState.ABORTING_TRANSACTION:
            assert not abort.done(), abort
            await asyncio.wait([abort], timeout=0.01)
        assert cluster.hold_add is not None
        cluster.loop.call_soon_threadsafe(cluster.hold_add.set)
        await abort
        with pytest.raises(TransactionAbortedError):
            await future

    run(cluster, body)
    assert "/v1/produce" not in cluster.paths()
    assert cluster.bodies("/v1/end-txn")[0]["committed"] is False


def test_empty_transaction_sends_no_endtxn(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        await p.commit_transaction()
        p.begin_transaction()
        await p.abort_transaction()
        p.begin_transaction()

    run(cluster, body)
    assert "/v1/end-txn" not in cluster.paths()


def test_send_offsets_adds_the_group_then_commits_to_its_coordinator(
    cluster: FakeCluster,
) -> None:
    group = ConsumerGroupMetadata("g1", 7, "member-1", "instance-1")

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("t", b"out", partition=0)
        await p.send_offsets_to_transaction(
            {TopicPartition("in", 0): OffsetAndMetadata(11), TopicPartition("in", 1): 5},
            group,
        )
        await p.commit_transaction()

    run(cluster, body)
    (add,) = cluster.bodies("/v1/add-offsets-to-txn")
    assert add == {
        "transactional_id": "tid",
        "producer_id": PRODUCER_ID,
        "producer_epoch": 0,
        "group_id": "g1",
    }
    (commit,) = cluster.bodies("/v1/txn-offset-commit")
    assert commit["group_id"] == "g1" and commit["generation_id"] == 7
    assert commit["member_id"] == "member-1" and commit["group_instance_id"] == "instance-1"
    parts = {
        (p["partition_index"], p["committed_offset"]) for p in commit["topics"][0]["partitions"]
    }
    assert parts == {(0, 11), (1, 5)}
    finds = cluster.bodies("/v1/find-coordinator")
    assert {"key": "g1", "key_type": 0} in finds
    paths = cluster.paths()
    assert paths.index("/v1/add-offsets-to-txn") < paths.index("/v1/txn-offset-commit")
    assert paths.index("/v1/txn-offset-commit") < paths.index("/v1/end-txn")


def test_offsets_refused_for_a_stale_generation_are_abortable(cluster: FakeCluster) -> None:
    cluster.errors["/v1/txn-offset-commit"] = ["ILLEGAL_GENERATION"]

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        with pytest.raises(CommitFailedError, match="abort the transaction"):
            await p.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "g1")
        with pytest.raises(CommitFailedError, match="abort_transaction"):
            await p.commit_transaction()
        await p.abort_transaction()
        p.begin_transaction()

    run(cluster, body)
    assert [e["committed"] for e in cluster.bodies("/v1/end-txn")] == [False]


def test_close_aborts_an_open_transaction(cluster: FakeCluster) -> None:
    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        p.begin_transaction()
        await p.send_and_wait("t", b"v", partition=0)

    run(cluster, body)
    assert [e["committed"] for e in cluster.bodies("/v1/end-txn")] == [False]


def test_blocking_producer_runs_a_transaction_from_several_threads(
    cluster: FakeCluster,
) -> None:
    p = Producer(
        bootstrap_servers=cluster.address, transactional_id="tid", linger_ms=1, max_block_ms=3_000
    )
    try:
        p.init_transactions()
        p.begin_transaction()
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = list(
                pool.map(lambda i: p.send("t", b"v%d" % i, partition=i % PARTITIONS), range(30))
            )
        p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)
        p.begin_transaction()
        p.send("t", b"x", partition=0)
        p.abort_transaction()
    finally:
        p.close(timeout_ms=2_000)
    assert [e["committed"] for e in cluster.bodies("/v1/end-txn")] == [True, False]
    assert all(transactional for *_, transactional in cluster.batches)


def test_kafka_python_shim_runs_a_transaction(cluster: FakeCluster) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.address, transactional_id="tid")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"v", partition=1)
        producer.send_offsets_to_transaction({TopicPartition("in", 0): 3}, "g1")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.abort_transaction()
    finally:
        producer.close(timeout=2)
    (commit,) = cluster.bodies("/v1/txn-offset-commit")
    assert commit["group_id"] == "g1" and commit["generation_id"] == -1
    assert commit["topics"][0]["partitions"][0]["committed_offset"] == 3
    assert [e["committed"] for e in cluster.bodies("/v1/end-txn")] == [True]


def test_aiokafka_shim_commits_or_aborts_its_transaction_context(cluster: FakeCluster) -> None:
    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.address, transactional_id="tid")
        async with producer:  # start() runs InitProducerId, as aiokafka's does
            async with producer.transaction():
                await producer.send("t", b"v", partition=0)
            with pytest.raises(RuntimeError, match="boom"):
                async with producer.transaction():
                    await producer.send_and_wait("t", b"w", partition=0)
                    raise RuntimeError("boom")
            async with producer.transaction():
                pass

    asyncio.run(asyncio.wait_for(main(), 30))
    assert len(cluster.bodies("/v1/init-producer-id")) == 1
    assert [e["committed"] for e in cluster.bodies("/v1/end-txn")] == [True, False]


def test_init_refused_by_the_coordinator_is_fatal(cluster: FakeCluster) -> None:
    """Kafka's InitProducerIdHandler: an error other than a retriable coordinator one
    (here a transaction timeout above the broker's maximum) ends the producer."""
    cluster.errors["/v1/init-producer-id"] = ["INVALID_TRANSACTION_TIMEOUT"]

    async def body(p: AsyncProducer) -> None:
        with pytest.raises(InvalidTransactionTimeoutError):
            await p.init_transactions()
        with pytest.raises(InvalidTransactionTimeoutError):
            await p.init_transactions()
        with pytest.raises(InvalidTransactionTimeoutError):
            p.begin_transaction()

    run(cluster, body)
    assert cluster.paths().count("/v1/init-producer-id") == 1


ADD = "/v1/add-partitions-to-txn"
PRODUCE = "/v1/produce"
END = "/v1/end-txn"


@pytest.mark.parametrize("seed", range(12))
def test_random_errors_never_break_the_request_order(cluster: FakeCluster, seed: int) -> None:
    """Seeded: transactions of random sends over the partitions, with random errors
    injected into produce (retriable and not), AddPartitionsToTxn and EndTxn (retried
    coordinator errors); the application commits, or aborts on an abortable error. The
    request log must show: every produce to a partition after an AddPartitionsToTxn
    that added it since the last EndTxn (so no batch lands outside its transaction),
    every batch under the epoch the coordinator last gave, sequences per (epoch,
    partition) from 0 and contiguous (a retry repeats its own), and every commit's
    records acknowledged."""
    rng = random.Random(seed)
    produce_errors = ["NOT_LEADER_OR_FOLLOWER", "INVALID_RECORD", "REQUEST_TIMED_OUT"]
    coordinator_errors = [
        "CONCURRENT_TRANSACTIONS",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
    ]
    outcomes: list[str] = []

    async def body(p: AsyncProducer) -> None:
        await p.init_transactions()
        for _ in range(4):
            cluster.errors[PRODUCE] = [
                rng.choice(produce_errors) for _ in range(rng.choice([0, 0, 1, 2]))
            ]
            cluster.errors[ADD] = [rng.choice(coordinator_errors) for _ in range(rng.randint(0, 2))]
            cluster.errors[END] = [rng.choice(coordinator_errors) for _ in range(rng.randint(0, 1))]
            p.begin_transaction()
            futures = [
                await p.send("t", b"r", partition=rng.randrange(PARTITIONS))
                for _ in range(rng.randint(1, 8))
            ]
            try:
                await p.commit_transaction()
            except InvalidRecordError:
                await p.abort_transaction()
                outcomes.append("aborted")
            else:
                assert all(f.done() and f.exception() is None for f in futures)
                outcomes.append("committed")

    run(cluster, body)
    assert len(outcomes) == 4, outcomes
    added: set[int] = set()
    for (path, entry), error in zip(cluster.log, cluster.injected, strict=True):
        if path == ADD and error is None:
            added |= {p for t in entry["topics"] for p in t["partitions"]}
        elif path == PRODUCE:
            sent = {e["partition"] for e in entry["partitions"]}
            assert sent <= added, (seed, sent, added)
        elif path == END and error is None:
            added.clear()
    assert cluster.stale_epoch_batches == 0, seed
    next_sequence: dict[tuple[int, int], int] = {}
    last_batch: dict[tuple[int, int], tuple[int, int]] = {}
    for (partition, _, epoch, sequence, transactional), count in zip(
        cluster.batches, cluster.batch_counts, strict=True
    ):
        assert transactional
        key = (epoch, partition)
        if last_batch.get(key) == (sequence, count):
            continue  # a retry of the same batch
        assert sequence == next_sequence.get(key, 0), (seed, key, sequence)
        next_sequence[key] = sequence + count
        last_batch[key] = (sequence, count)
