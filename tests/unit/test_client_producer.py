"""AsyncProducer/Producer against an in-process fake broker (aiohttp on loopback).

The fake serves GET /v1/metadata (itself as broker 1, topic "t" with 3 partitions) and
POST /v1/produce (decodes the frame, assigns offsets, can fail or hold requests), so
these tests check the producer's own behaviour without a cluster: partitioning of
keyed records (Java's murmur2), serializer errors leaving the producer usable, closed
producer errors, buffer_memory back-pressure ending in KafkaTimeoutError after
max_block_ms, an oversized record failing with MessageTooLargeError at once, retries
of a retriable error, an unknown topic failing typed after max_block_ms, and the
blocking face from several threads. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from http_fake import serve_on_thread

from raftka.client import AsyncProducer, Producer, RecordMetadata
from raftka.client.interceptors import ProducerInterceptor, ProducerRecord
from raftka.common.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from raftka.common.hashing import murmur2_partition
from raftka.common.record import iter_records
from raftka.common.record.header import iter_batches
from raftka.common.wire import decode_frame

PARTITIONS = 3


@dataclass
class FakeBroker:
    address: str = ""
    logs: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = field(
        default_factory=dict
    )
    #: Errors to answer, in order, before succeeding.
    fail_with: list[str] = field(default_factory=list)
    hold: asyncio.Event | None = None
    requests: int = 0
    #: (partition, producer id, epoch, base sequence, record count) of every batch.
    batches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    producer_ids_given: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/v1/metadata", self._metadata),
                web.post("/v1/produce", self._produce),
                web.post("/v1/init-producer-id", self._init_producer_id),
            ]
        )
        return app

    async def _init_producer_id(self, request: web.Request) -> web.Response:
        self.producer_ids_given += 1
        body = {"error": None, "producer_id": 1000 + self.producer_ids_given, "producer_epoch": 0}
        return web.json_response(body)

    async def _metadata(self, request: web.Request) -> web.Response:
        host, port = self.address.split(":")
        wanted = [n for n in request.query.get("topics", "").split(",") if n]
        topics: list[dict[str, Any]] = []
        for name in wanted:
            if name != "t":
                topics.append(
                    {
                        "name": name,
                        "topic_id": None,
                        "error": {"error": "UNKNOWN_TOPIC_OR_PARTITION", "error_code": 3},
                        "partitions": [],
                    }
                )
                continue
            parts = [
                {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]}
                for p in range(PARTITIONS)
            ]
            topics.append({"name": "t", "topic_id": "x", "error": None, "partitions": parts})
        body = {
            "controller_id": None,
            "controllers": [],
            "brokers": [{"id": 1, "host": host, "port": int(port), "rack": None}],
            "topics": topics,
        }
        return web.json_response(body)

    async def _produce(self, request: web.Request) -> web.Response:
        self.requests += 1
        header, payloads = decode_frame(await request.read(), "partitions")
        if self.hold is not None:
            await self.hold.wait()
        responses = []
        for entry, payload in zip(header["partitions"], payloads, strict=True):
            key = (entry["topic"], entry["partition"])
            for _, h in iter_batches(bytes(payload)):  # one or more per partition
                self.batches.append(
                    (
                        key[1],
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.last_offset_delta + 1,
                    )
                )
            out: dict[str, Any] = {"topic": key[0], "partition": key[1], "current_leader": None}
            if self.fail_with:
                name = self.fail_with.pop(0)
                out["error"] = {"error": name, "error_code": 6, "message": "fake"}
            else:
                log = self.logs.setdefault(key, [])
                out.update(error=None, base_offset=len(log), log_append_time_ms=-1)
                log.extend((r.key, r.value) for r in iter_records(bytes(payload)))
            responses.append(out)
        return web.Response(body=orjson.dumps({"responses": responses}))


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    """A fake broker on its own loop thread (so sync and async clients can share it)."""
    fake = FakeBroker()
    with serve_on_thread(fake.app()) as (fake.address, loop):
        fake.hold_loop = loop  # type: ignore[attr-defined]
        yield fake


def _release(broker: FakeBroker) -> None:
    loop: asyncio.AbstractEventLoop = broker.hold_loop  # type: ignore[attr-defined]
    if broker.hold is not None:
        loop.call_soon_threadsafe(broker.hold.set)


def _make_hold(broker: FakeBroker) -> None:
    loop: asyncio.AbstractEventLoop = broker.hold_loop  # type: ignore[attr-defined]

    async def make() -> None:
        broker.hold = asyncio.Event()

    asyncio.run_coroutine_threadsafe(make(), loop).result(5)


def async_test(
    fn: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., None]:
    """Run an async test body on a fresh loop, bounded (no pytest-asyncio here). A test
    that takes ``producer`` gets one on the fake broker, closed afterwards."""

    @functools.wraps(fn)
    def wrapper(broker: FakeBroker) -> None:
        async def main() -> None:
            if "producer" not in inspect.signature(fn).parameters:
                await fn(broker)
                return
            p = AsyncProducer(bootstrap_servers=broker.address, max_block_ms=2_000, linger_ms=1)
            try:
                await fn(broker, p)
            finally:
                await asyncio.wait_for(p.close(timeout_ms=2_000), 10)

        asyncio.run(asyncio.wait_for(main(), 30))

    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("broker", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    return wrapper


def test_keyed_records_go_to_javas_murmur2_partition(broker: FakeBroker) -> None:
    """Keyed records land in toPositive(murmur2(key)) % 3, as Java's producer puts them;
    offsets per partition count up from 0 in send order."""

    async def main() -> list[RecordMetadata]:
        async with AsyncProducer(bootstrap_servers=broker.address, max_block_ms=2_000) as p:
            futures = [await p.send("t", b"v%d" % i, key=b"key-%d" % i) for i in range(30)]
            return list(await asyncio.wait_for(asyncio.gather(*futures), 10))

    results = asyncio.run(main())
    seen: dict[int, int] = {}
    for i, md in enumerate(results):
        assert md.partition == murmur2_partition(b"key-%d" % i, PARTITIONS)
        assert md.offset == seen.get(md.partition, 0)
        seen[md.partition] = md.offset + 1
        assert broker.logs[("t", md.partition)][md.offset] == (b"key-%d" % i, b"v%d" % i)


@async_test
async def test_serializer_error_leaves_producer_usable(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """A failing serializer raises SerializationError from send; the next send works.
    A non-bytes value without a serializer is a SerializationError too."""
    bad = AsyncProducer(
        bootstrap_servers=broker.address,
        value_serializer=lambda v: v.encode(),
        max_block_ms=2_000,
    )
    try:
        with pytest.raises(SerializationError, match="value_serializer failed"):
            await bad.send("t", 42)
        md = await asyncio.wait_for(await bad.send("t", "ok"), 10)
        assert md.offset >= 0
    finally:
        await asyncio.wait_for(bad.close(), 10)
    with pytest.raises(SerializationError, match="needs bytes"):
        await producer.send("t", "a str")
    assert (await asyncio.wait_for(producer.send_and_wait("t", b"fine"), 10)).offset >= 0


@async_test
async def test_closed_producer_raises_illegal_state(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """send after close raises IllegalStateError; close is idempotent."""
    await producer.close()
    await producer.close()
    with pytest.raises(IllegalStateError):
        await producer.send("t", b"x")
    sync = Producer(bootstrap_servers="127.0.0.1:1")
    sync.close()
    with pytest.raises(IllegalStateError):
        sync.send("t", b"x")


@async_test
async def test_oversized_record_fails_at_once(broker: FakeBroker) -> None:
    """A record above max_request_size raises MessageTooLargeError before any
    metadata wait (no broker is needed, and nothing hangs)."""
    lonely = AsyncProducer(bootstrap_servers="127.0.0.1:1", max_request_size=1000)
    try:
        with pytest.raises(MessageTooLargeError, match="max_request_size=1000"):
            await asyncio.wait_for(lonely.send("t", b"x" * 1000), 5)
    finally:
        await lonely.close()


@async_test
async def test_buffer_full_blocks_then_times_out(broker: FakeBroker) -> None:
    """With the broker holding every produce, records fill buffer_memory; the next
    send blocks max_block_ms and raises KafkaTimeoutError. Releasing the broker
    completes the buffered records."""
    _make_hold(broker)
    p = AsyncProducer(
        bootstrap_servers=broker.address,
        buffer_memory=2_000,
        max_block_ms=300,
        linger_ms=0,
    )
    try:
        futures = []
        with pytest.raises(KafkaTimeoutError, match="max_block_ms=300"):
            for _ in range(100):
                futures.append(await asyncio.wait_for(p.send("t", b"x" * 200), 5))
        assert 1 <= len(futures) < 100
        _release(broker)
        done = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert all(md.offset >= 0 for md in done)
    finally:
        _release(broker)
        await asyncio.wait_for(p.close(), 10)


@async_test
async def test_retriable_error_is_retried(broker: FakeBroker, producer: AsyncProducer) -> None:
    """NOT_LEADER_OR_FOLLOWER twice, then success: the record is acknowledged once,
    at offset 0, after three requests."""
    broker.fail_with = ["NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_OR_FOLLOWER"]
    md = await asyncio.wait_for(producer.send_and_wait("t", b"v", partition=1), 10)
    assert (md.partition, md.offset) == (1, 0)
    assert broker.requests == 3
    assert broker.logs[("t", 1)] == [(None, b"v")]


@async_test
async def test_non_retriable_error_fails_the_future(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """A non-retriable error (INVALID_RECORD) fails the record's future with its type,
    and the delivery callback sees it."""
    from raftka.common.errors import InvalidRecordError

    broker.fail_with = ["INVALID_RECORD"]
    seen: list[BaseException | None] = []
    future = await producer.send("t", b"v", partition=0, callback=lambda md, e: seen.append(e))
    with pytest.raises(InvalidRecordError):
        await asyncio.wait_for(future, 10)
    assert len(seen) == 1 and isinstance(seen[0], InvalidRecordError)


@async_test
async def test_unknown_topic_fails_typed_after_max_block(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """A topic the cluster does not know raises UnknownTopicOrPartitionError once
    max_block_ms (2 s here) has passed, not a hang."""
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        await asyncio.wait_for(producer.send("nope", b"x"), 10)


def test_sync_producer_from_several_threads(broker: FakeBroker) -> None:
    """The blocking Producer is shared by 4 threads; every record is acknowledged once,
    and flush() returns with nothing pending."""
    with Producer(bootstrap_servers=broker.address, max_block_ms=2_000) as p:
        results: list[RecordMetadata] = []
        lock = threading.Lock()

        def work(n: int) -> None:
            futures = [p.send("t", b"%d-%d" % (n, i), partition=2) for i in range(50)]
            p.flush(timeout_ms=10_000)
            with lock:
                results.extend(f.result(0) for f in futures)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(md.offset for md in results) == list(range(200))
    assert len(broker.logs[("t", 2)]) == 200


def test_sync_futures_complete_with_their_batch(broker: FakeBroker) -> None:
    """The blocking face completes a batch, not each record: in one batch of 20
    records where only every third has a callback, every future reports base offset +
    its index, the callbacks run in send order with the same metadata, and a
    done-callback added before the answer runs once. A batch the broker refuses
    (INVALID_RECORD) fails every future of it, and its callbacks get the error."""
    from raftka.common.errors import InvalidRecordError

    seen: list[tuple[int, BaseException | None]] = []

    def callback(md: RecordMetadata | None, error: BaseException | None) -> None:
        seen.append((-1 if md is None else md.offset, error))

    with Producer(bootstrap_servers=broker.address, max_block_ms=2_000, linger_ms=5_000) as p:
        futures = [
            p.send("t", b"v", partition=1, callback=callback if i % 3 == 0 else None)
            for i in range(20)
        ]
        done_once: list[int] = []
        futures[5].add_done_callback(lambda f: done_once.append(f.result().offset))
        p.flush(timeout_ms=10_000)
        assert broker.requests == 1  # one batch (flush, not linger, sent it), one request
        assert [f.result(0).offset for f in futures] == list(range(20))
        assert all(f.result(0).partition == 1 for f in futures)
        assert seen == [(i, None) for i in range(0, 20, 3)]
        assert done_once == [5]

        broker.fail_with = ["INVALID_RECORD"]
        seen.clear()
        failed = [p.send("t", b"w", partition=0, callback=callback) for _ in range(3)]
        p.flush(timeout_ms=10_000)
        assert all(isinstance(f.exception(0), InvalidRecordError) for f in failed)
        assert [offset for offset, _ in seen] == [-1, -1, -1]
        assert all(isinstance(e, InvalidRecordError) for _, e in seen)
        with pytest.raises(InvalidRecordError):
            failed[0].result(0)


@async_test
async def test_callbacks_run_in_order_before_flush_returns(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """The sender calls delivery callbacks itself: for 50 records on one partition they
    run in send order with each record's metadata, all before flush() returns; a
    callback that raises neither stops the others nor fails its future; close right
    after flush returns at once (the sender sees itself idle)."""
    seen: list[int] = []

    def callback(md: RecordMetadata | None, error: BaseException | None) -> None:
        assert md is not None and error is None
        seen.append(md.offset)
        if md.offset == 3:
            raise RuntimeError("a broken callback")

    futures = [await producer.send("t", b"v", partition=0, callback=callback) for _ in range(50)]
    # Awaited directly (async_test bounds the whole test at 30 s): a wait_for wrapper
    # would add loop turns that hide a sender that does not see itself idle.
    await producer.flush()
    assert seen == list(range(50))
    assert [f.result().offset for f in futures] == list(range(50))
    await producer.close()


@async_test
async def test_flush_waits_for_records_in_flight(
    broker: FakeBroker, producer: AsyncProducer
) -> None:
    """flush() waits for a batch the broker holds (in flight, not queued), and returns
    once it is answered with every future done."""
    _make_hold(broker)
    futures = [await producer.send("t", b"v", partition=1) for _ in range(3)]
    flush = asyncio.create_task(producer.flush(timeout_ms=10_000))
    done, _ = await asyncio.wait({flush}, timeout=0.3)
    assert not done and not any(f.done() for f in futures)
    _release(broker)
    await asyncio.wait_for(flush, 10)
    assert all(f.done() for f in futures)


@async_test
async def test_idempotent_batches_carry_contiguous_sequences(broker: FakeBroker) -> None:
    """With idempotence on (the default) the producer takes one producer id and numbers
    its batches per partition from 0, each base sequence following the previous batch's
    records; with it off, batches carry no producer id."""
    async with AsyncProducer(bootstrap_servers=broker.address, batch_size=200) as producer:
        futures = [await producer.send("t", b"v" * 50, partition=i % 2) for i in range(40)]
        await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert broker.producer_ids_given == 1
    for partition in (0, 1):
        mine = [b for b in broker.batches if b[0] == partition]
        assert len(mine) > 1, "the test needs several batches per partition"
        assert {(b[1], b[2]) for b in mine} == {(1001, 0)}
        expected = 0
        for _, _, _, base, count in mine:
            assert base == expected, (partition, mine)
            expected = base + count
    broker.batches.clear()
    async with AsyncProducer(
        bootstrap_servers=broker.address, acks=1, enable_idempotence=False
    ) as producer:
        await asyncio.wait_for(await producer.send("t", b"v", partition=0), 10)
    assert broker.batches == [(0, -1, -1, -1, 1)]


@async_test
async def test_retry_keeps_its_sequence(broker: FakeBroker) -> None:
    """A batch answered with a retriable error is sent again with the same producer id,
    epoch and base sequence (what lets the broker recognise a retry)."""
    broker.fail_with = ["NOT_ENOUGH_REPLICAS"]
    async with AsyncProducer(bootstrap_servers=broker.address, retry_backoff_ms=10) as producer:
        await asyncio.wait_for(await producer.send("t", b"v", partition=0), 10)
        await asyncio.wait_for(await producer.send("t", b"w", partition=0), 10)
    assert [b[1:4] for b in broker.batches] == [(1001, 0, 0), (1001, 0, 0), (1001, 0, 1)]


@async_test
async def test_out_of_order_sequence_fails_the_batch_then_bumps_the_epoch(
    broker: FakeBroker,
) -> None:
    """OUT_OF_ORDER_SEQUENCE_NUMBER is not retried under the same or a new number: the
    record's future fails with it; the next record goes out under the next epoch from
    sequence 0 (the client-side epoch bump), with the same producer id."""
    from raftka.common.errors import OutOfOrderSequenceNumberError

    async with AsyncProducer(bootstrap_servers=broker.address, retry_backoff_ms=10) as producer:
        await asyncio.wait_for(await producer.send("t", b"a", partition=0), 10)
        broker.fail_with = ["OUT_OF_ORDER_SEQUENCE_NUMBER"]
        with pytest.raises(OutOfOrderSequenceNumberError):
            await asyncio.wait_for(await producer.send("t", b"b", partition=0), 10)
        await asyncio.wait_for(await producer.send("t", b"c", partition=0), 10)
    assert [b[1:4] for b in broker.batches] == [(1001, 0, 0), (1001, 0, 1), (1001, 1, 0)]
    assert broker.logs[("t", 0)] == [(None, b"a"), (None, b"c")]


def test_idempotence_caps_requests_in_flight() -> None:
    """Kafka's rule: idempotence needs max_in_flight_requests_per_connection <= 5."""
    from raftka.client.config import ClientConfigError

    with pytest.raises(ClientConfigError, match="max_in_flight"):
        AsyncProducer(bootstrap_servers="x:1", max_in_flight_requests_per_connection=6)
    AsyncProducer(
        bootstrap_servers="x:1",
        max_in_flight_requests_per_connection=6,
        enable_idempotence=False,
        acks=1,
    )


@async_test
async def test_full_batches_of_a_partition_share_one_request(broker: FakeBroker) -> None:
    """Records queued faster than they are sent fill several batches of one partition;
    the sender puts up to 5 of them, in order, in one request (one request in flight per
    partition), and each record's offset counts on from the batches before it."""
    broker.hold = asyncio.Event()
    async with AsyncProducer(
        bootstrap_servers=broker.address, batch_size=200, linger_ms=0
    ) as producer:
        first = await producer.send("t", b"v" * 50, partition=0)
        # The first request is held at the broker: these queue up behind it.
        futures = [await producer.send("t", b"v" * 50, partition=0) for _ in range(20)]
        _release(broker)
        done = await asyncio.wait_for(asyncio.gather(first, *futures), 10)
    assert [md.offset for md in done] == list(range(21))
    batches = len(broker.batches)
    assert batches >= 6, f"the test needs several full batches, got {batches}"
    # One request for the first batch, then at most 5 batches per request.
    assert broker.requests <= 1 + -(-(batches - 1) // 5), (broker.requests, batches)


@async_test
async def test_producer_interceptors_see_every_record_and_its_outcome(broker: FakeBroker) -> None:
    """Two interceptors in order: the first rewrites the value, the second sees the
    rewritten record; one that raises is logged and skipped; on_acknowledgement runs per
    record before the record's own callback; close() runs on the producer's close. A
    non-interceptor in the list is refused with INVALID_CONFIG."""
    from raftka.client.config import ClientConfigError
    from raftka.client.interceptors import ProducerInterceptor

    events: list[str] = []

    class Upper(ProducerInterceptor):
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record._replace(value=record.value.upper())

    class Broken(ProducerInterceptor):
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            raise RuntimeError("boom")

    class Watch(ProducerInterceptor):
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            events.append(f"send {record.value!r}")
            return record

        def on_acknowledgement(
            self, metadata: RecordMetadata | None, exception: BaseException | None
        ) -> None:
            assert metadata is not None and exception is None
            events.append(f"ack {metadata.offset}")

        def close(self) -> None:
            events.append("close")

    async with AsyncProducer(
        bootstrap_servers=broker.address, interceptors=[Upper(), Broken(), Watch()]
    ) as producer:
        f = await producer.send("t", b"abc", partition=0, callback=lambda m, e: events.append("cb"))
        await asyncio.wait_for(f, 10)
    assert broker.logs[("t", 0)] == [(None, b"ABC")]
    assert events == ["send b'ABC'", "ack 0", "cb", "close"]
    with pytest.raises(ClientConfigError, match="interceptors"):
        AsyncProducer(bootstrap_servers="x:1", interceptors=[object()])  # type: ignore[list-item]


@async_test
async def test_custom_partitioner_chooses_unless_a_partition_is_given(broker: FakeBroker) -> None:
    """partitioner(key_bytes, all, available) picks the partition of every record sent
    without one (here: always the last); an explicit partition still wins; an answer out
    of range fails send() with a clear error, and the producer stays usable."""

    def last(key: bytes | None, all_partitions: Any, available: Any) -> int:
        return int(all_partitions[-1]) if key != b"bad" else 99

    async with AsyncProducer(bootstrap_servers=broker.address, partitioner=last) as producer:
        md = await asyncio.wait_for(await producer.send("t", b"a", key=b"k"), 10)
        assert md.partition == PARTITIONS - 1
        md = await asyncio.wait_for(await producer.send("t", b"b", partition=0), 10)
        assert md.partition == 0
        with pytest.raises(KafkaError, match="partitioner chose 99"):
            await producer.send("t", b"c", key=b"bad")
        md = await asyncio.wait_for(await producer.send("t", b"d"), 10)
        assert md.partition == PARTITIONS - 1


# ---------------------------------------------------------------- the blocking face


def test_flush_and_close_take_timeout_ms_by_keyword_only(broker: FakeBroker) -> None:
    """``flush(90)`` would mean 90 ms here and 90 s in every other Python client: a
    positional timeout is a TypeError on both faces, for flush and for close."""
    with Producer(bootstrap_servers=broker.address, max_block_ms=2_000) as p:
        p.send("t", b"x").result(10)
        with pytest.raises(TypeError):
            p.flush(90)  # type: ignore[misc]
        with pytest.raises(TypeError):
            p.close(90)  # type: ignore[misc]
        p.flush(timeout_ms=10_000)
        p.close(timeout_ms=10_000)

    async def main() -> None:
        ap = AsyncProducer(bootstrap_servers=broker.address)
        with pytest.raises(TypeError):
            await ap.flush(90)  # type: ignore[misc]
        with pytest.raises(TypeError):
            await ap.close(90)  # type: ignore[misc]
        await ap.close(timeout_ms=1_000)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_sync_send_runs_in_the_callers_thread_without_a_loop_hop(broker: FakeBroker) -> None:
    """Once the topic's metadata is cached, ``Producer.send`` does its work in the
    caller's thread: the interceptor and the partitioner run there, and the loop
    thread's ``run`` (the hop) is not called for any of 500 records; the futures are
    concurrent.futures.Futures whose results arrive after flush."""
    threads_seen: set[threading.Thread] = set()

    class Recorder(ProducerInterceptor):
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            threads_seen.add(threading.current_thread())
            return record

    def partitioner(key: bytes | None, all_: Sequence[int], available: Sequence[int]) -> int:
        threads_seen.add(threading.current_thread())
        return 1

    with Producer(
        bootstrap_servers=broker.address,
        max_block_ms=2_000,
        interceptors=[Recorder()],
        partitioner=partitioner,
    ) as p:
        p.send("t", b"warm").result(10)  # starts the loop thread, caches metadata
        hops: list[object] = []
        real_run = p._thread.run

        def counting_run(coro: Any, timeout_s: float | None = None) -> Any:
            hops.append(coro)
            return real_run(coro, timeout_s)

        p._thread.run = counting_run  # type: ignore[method-assign]
        futures = [p.send("t", b"%d" % i) for i in range(500)]
        assert hops == [], "send hopped to the loop thread"
        p._thread.run = real_run  # type: ignore[method-assign]
        p.flush(timeout_ms=10_000)
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        assert [f.result(0).offset for f in futures] == list(range(1, 501))
    assert threads_seen == {threading.current_thread()}


def test_sync_send_keeps_each_threads_order_per_partition(broker: FakeBroker) -> None:
    """Four threads send 300 keyed records each through one Producer (small batches,
    so batches fill while others are drained): every record lands exactly once, and
    within a partition each thread's records have increasing offsets in send order."""
    with Producer(
        bootstrap_servers=broker.address, max_block_ms=5_000, batch_size=500, linger_ms=1
    ) as p:
        per_thread: dict[int, list[tuple[bytes, concurrent.futures.Future[RecordMetadata]]]] = {}

        def work(n: int) -> None:
            sent = []
            for i in range(300):
                key = b"k%d" % (i % 7)
                sent.append((key, p.send("t", b"%d-%d" % (n, i), key=key)))
            per_thread[n] = sent

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(per_thread) == [0, 1, 2, 3]
        p.flush(timeout_ms=20_000)
        for sent in per_thread.values():
            last: dict[int, int] = {}
            for key, future in sent:
                md = future.result(0)
                assert md.partition == murmur2_partition(key, PARTITIONS)
                assert md.offset > last.get(md.partition, -1)
                last[md.partition] = md.offset
    assert sum(len(log) for log in broker.logs.values()) == 1200


def test_sync_buffer_full_blocks_then_times_out(broker: FakeBroker) -> None:
    """The blocking face waits for buffer room in the caller's thread: with the broker
    holding every produce, a send past buffer_memory raises KafkaTimeoutError after
    max_block_ms; released, the buffered records are acknowledged."""
    _make_hold(broker)
    p = Producer(
        bootstrap_servers=broker.address, buffer_memory=2_000, max_block_ms=300, linger_ms=0
    )
    try:
        futures = []
        with pytest.raises(KafkaTimeoutError, match="max_block_ms=300"):
            for _ in range(100):
                futures.append(p.send("t", b"x" * 200))
        assert 1 <= len(futures) < 100
        _release(broker)
        assert all(f.result(10).offset >= 0 for f in futures)
    finally:
        _release(broker)
        p.close(timeout_ms=10_000)
    with pytest.raises(IllegalStateError):
        p.send("t", b"late")


def test_topic_partitions_are_built_once_and_grow_with_the_topic() -> None:
    """send reuses one TopicPartition per partition; a partition beyond those seen (the
    topic grew) extends the topic's list without replacing the others."""
    from raftka.client import TopicPartition

    p = AsyncProducer(bootstrap_servers="127.0.0.1:1")
    first = p._topic_partition("t", 1)
    assert first == TopicPartition("t", 1) and p._topic_partition("t", 1) is first
    assert p._topic_partition("t", 4) == TopicPartition("t", 4)
    assert p._topic_partition("t", 1) is first
    assert p._topic_partition("u", 0) == TopicPartition("u", 0)
