"""The kafka-python and aiokafka adapters' own logic, against fakes of raftka's
clients (no sockets): kafka-python futures (callbacks and errbacks on success and on
failure, before and after completion, extra arguments first, ``get`` in seconds with
KafkaTimeoutError), the RecordMetadata / ConsumerRecord shapes, iteration that hands
over one record per poll and ends after ``consumer_timeout_ms`` without records,
``commit_async``'s future and callback, a subscription without a group served by
assigning every partition, and aiokafka's ``getone`` / ``getmany(*partitions)``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from raftka import AIOKafkaConsumer, KafkaConsumer, TopicPartition
from raftka.client.compat._future import Future
from raftka.client.compat.kafka_python import FutureRecordMetadata, RecordMetadata
from raftka.client.structs import ConsumerRecord as RaftkaRecord
from raftka.client.structs import RecordMetadata as RaftkaMetadata
from raftka.common.record.header import TimestampType
from raftka.errors import KafkaTimeoutError, NotLeaderForPartitionError, TopicAlreadyExistsError
from raftka.structs import OffsetAndMetadata

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _pending() -> concurrent.futures.Future[Any]:
    inner: concurrent.futures.Future[Any] = concurrent.futures.Future()
    inner.set_running_or_notify_cancel()
    return inner


def _convert(md: RaftkaMetadata) -> RecordMetadata:
    from raftka.client.compat.kafka_python import _metadata_converter

    return _metadata_converter(7)(md)


# ---------------------------------------------------------------------------- futures


def test_callbacks_run_on_success_with_extra_arguments_first() -> None:
    """Registered before completion (run in the completing thread) and after (run at
    once); errbacks stay silent; the value is kafka-python's RecordMetadata."""
    inner = _pending()
    future = FutureRecordMetadata(inner, _convert)
    seen: list[tuple[str, Any]] = []
    future.add_callback(lambda tag, md: seen.append((tag, md)), "early")
    future.add_errback(lambda e: seen.append(("errback", e)))
    assert not future.is_done and future.value is None and future.exception is None
    done = threading.Thread(target=inner.set_result, args=(RaftkaMetadata("t", 1, 42, 1000, 3, 5),))
    done.start()
    done.join()
    future.add_callback(lambda md, tag: seen.append((tag, md)), tag="late")
    expected = RecordMetadata("t", 1, TopicPartition("t", 1), 42, 1000, None, 3, 5, 7)
    assert seen == [("early", expected), ("late", expected)]
    assert future.is_done and future.succeeded() and not future.failed()
    assert future.get(timeout=0) == expected == future.value
    assert future.get().topic_partition == TopicPartition("t", 1)


def test_errbacks_run_on_failure_and_get_raises_it() -> None:
    inner = _pending()
    future = Future[Any](inner)
    seen: list[Any] = []
    future.add_callback(seen.append)
    future.add_errback(seen.append)
    error = NotLeaderForPartitionError("moved")
    inner.set_exception(error)
    future.add_both(lambda x: seen.append(("both", x)))
    assert seen == [error, ("both", error)]
    assert future.failed() and future.retriable() and future.exception is error
    assert future.value is None
    with pytest.raises(NotLeaderForPartitionError):
        future.get(10)
    other = Future[Any](_pending())
    other._inner.set_exception(TopicAlreadyExistsError("x"))
    assert other.failed() and not other.retriable()


def test_get_times_out_in_seconds() -> None:
    future = Future[Any](_pending())
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"0\.05 secs"):
        future.get(timeout=0.05)
    assert time.monotonic() - started >= 0.05
    with pytest.raises(ValueError):
        future.get(timeout=-1)


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = _pending()
    future = Future[Any](inner)
    seen: list[Any] = []

    def broken(_: Any) -> None:
        raise RuntimeError("boom")

    future.add_callback(broken)
    future.add_callback(seen.append)
    with caplog.at_level(logging.ERROR):
        inner.set_result(1)
    assert seen == [1]
    assert "Error processing callback" in caplog.text


# ---------------------------------------------------------------------------- consumer


def _raftka_record(offset: int, partition: int = 0) -> RaftkaRecord:
    return RaftkaRecord(
        "t",
        partition,
        offset,
        1000 + offset,
        TimestampType.CREATE_TIME,
        b"k",
        b"v%d" % offset,
        (("h", b"x"),),
        1,
        2,
        leader_epoch=3,
    )


class FakeConsumer:
    """Stands for raftka's blocking Consumer: serves queued records, at most
    ``max_records`` per poll, without waiting (an empty queue answers {})."""

    def __init__(self, records: Iterable[RaftkaRecord] = (), partitions: int = 2) -> None:
        self.queue = deque(records)
        self.polls: list[tuple[int, int | None]] = []
        self.assigned: set[TopicPartition] = set()
        self.partitions = partitions
        self.commits: list[Any] = []
        self.commit_error: Exception | None = None
        self.closed = False

    def poll(
        self,
        timeout_ms: int = 0,
        max_records: int | None = None,
        paused: frozenset[TopicPartition] = frozenset(),
    ) -> Any:
        self.polls.append((timeout_ms, max_records))
        assert len(self.polls) < 10_000, "polled without end"
        out: dict[TopicPartition, list[RaftkaRecord]] = {}
        for r in list(self.queue):
            if sum(len(v) for v in out.values()) == (max_records or 500):
                break
            if r.topic_partition not in paused:
                self.queue.remove(r)
                out.setdefault(r.topic_partition, []).append(r)
        if not out and timeout_ms > 0:
            # A real poll waits out its timeout when nothing arrives (this models it;
            # no test waits on it to synchronise).
            time.sleep(timeout_ms / 1000)
        return out

    def _next_record(self, timeout_ms: int) -> RaftkaRecord | None:
        """Iteration's next record (raftka's Consumer batches and gives back; the
        real-cluster tests in tests/compat check that part)."""
        for records in self.poll(timeout_ms, 1).values():
            return records[0]
        return None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.assigned = set(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def commit_async(self, offsets: Any, callback: Callable[[Any, Any], Any]) -> None:
        self.commits.append(offsets)
        callback(offsets, self.commit_error)

    def close(self) -> None:
        self.closed = True


def _consumer(fake: FakeConsumer, **configs: Any) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", **configs)
    consumer._consumer.close()
    consumer._consumer = fake  # type: ignore[assignment]
    return consumer


def test_iteration_converts_records_and_ends_after_consumer_timeout() -> None:
    fake = FakeConsumer([_raftka_record(i) for i in range(3)])
    consumer = _consumer(fake, consumer_timeout_ms=20)
    consumer.assign([TP0])
    started = time.monotonic()
    got = list(consumer)
    assert time.monotonic() - started >= 0.02
    assert [r.offset for r in got] == [0, 1, 2]
    first = got[0]
    assert first == (
        "t",
        0,
        3,
        0,
        1000,
        0,
        b"k",
        b"v0",
        [("h", b"x")],
        None,
        1,
        2,
        -1,
    )  # kafka-python's field order
    assert (first.leader_epoch, first.timestamp_type, first.headers) == (3, 0, [("h", b"x")])
    fake.queue.append(_raftka_record(3))
    assert [r.offset for r in consumer] == [3]  # iterating again after the end works
    assert consumer.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"] == 4


def test_records_read_with_api_version_before_0_11_have_no_headers() -> None:
    """Message format v1 (what a 0.10 client reads) has no record headers."""
    consumer = _consumer(
        FakeConsumer([_raftka_record(0)]), consumer_timeout_ms=0, api_version=(0, 10)
    )
    consumer.assign([TP0])
    (record,) = list(consumer)
    assert record.headers == []
    newer = _consumer(FakeConsumer([_raftka_record(0)]), consumer_timeout_ms=0)
    newer.assign([TP0])
    assert [r.headers for r in newer] == [[("h", b"x")]]


def test_consumer_timeout_zero_polls_once() -> None:
    fake = FakeConsumer()
    consumer = _consumer(fake, consumer_timeout_ms=0)
    assert list(consumer) == []
    assert fake.polls == [(0, 1)]


def test_subscribe_without_group_assigns_every_partition_at_the_first_poll() -> None:
    fake = FakeConsumer(partitions=2)
    consumer = _consumer(fake)
    consumer.subscribe(["t"])
    assert fake.assigned == set()  # no I/O before the first poll
    assert consumer.poll(0) == {}
    assert fake.assigned == {TP0, TP1}
    assert consumer.subscription() == {"t"}


def test_commit_async_calls_back_and_completes_its_future() -> None:
    fake = FakeConsumer()
    consumer = _consumer(fake, group_id="g")
    heard: list[Any] = []
    future = consumer.commit_async(
        {TP0: OffsetAndMetadata(5, None, -1)},  # type: ignore[arg-type]
        callback=lambda offsets, error: heard.append((offsets, error)),
    )
    assert fake.commits == [{TP0: OffsetAndMetadata(5, "", None)}]
    assert heard == [({TP0: OffsetAndMetadata(5, "", None)}, None)] and future.succeeded()
    fake.commit_error = NotLeaderForPartitionError("x")
    failed = consumer.commit_async()
    assert failed.failed() and isinstance(failed.exception, NotLeaderForPartitionError)
    assert consumer.metrics()["consumer-coordinator-metrics"]["commit-total"] == 1


def test_commits_need_a_group_and_close_refuses_what_it_cannot_honour() -> None:
    from raftka.errors import IllegalStateError

    fake = FakeConsumer()
    consumer = _consumer(fake)
    with pytest.raises(IllegalStateError, match="group_id"):
        consumer.commit()
    grouped = _consumer(FakeConsumer(), group_id="g")
    with pytest.raises(ValueError, match="enable_auto_commit=False"):
        grouped.close(autocommit=False)
    with pytest.raises(ValueError, match="poll\\(update_offsets=False\\)"):
        consumer.poll(update_offsets=False)
    consumer.close()
    consumer.close()
    assert fake.closed


# ---------------------------------------------------------------------------- aiokafka


class FakeAsyncConsumer:
    """Stands for raftka's AsyncConsumer (records served as FakeConsumer does)."""

    def __init__(self, records: Iterable[RaftkaRecord]) -> None:
        self.sync = FakeConsumer(records)
        self.paused_log: list[set[TopicPartition]] = []
        self._paused: set[TopicPartition] = set()

    async def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> Any:
        self.paused_log.append(set(self._paused))
        await asyncio.sleep(0)  # a real poll yields to the loop
        return self.sync.poll(0, max_records, frozenset(self._paused))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.sync.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self.sync.assignment()

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, *tps: TopicPartition) -> None:
        self._paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused -= set(tps)

    async def close(self) -> None:
        self.sync.closed = True


def test_aiokafka_getone_getmany_and_async_for() -> None:
    """getone hands over one record per poll; getmany(tp) pauses the other partitions
    for the call only; async for ends once the consumer is stopped."""

    async def main() -> None:
        fake = FakeAsyncConsumer([_raftka_record(0), _raftka_record(1), _raftka_record(0, 1)])
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        consumer._consumer = fake  # type: ignore[assignment]
        consumer.assign([TP0, TP1])
        first = await consumer.getone()
        assert (first.offset, first.checksum, first.headers) == (0, None, (("h", b"x"),))
        assert fake.sync.polls[-1][1] == 1
        batch = await consumer.getmany(TP0, timeout_ms=10)
        assert fake.paused_log[-1] == {TP1} and fake.paused() == set()
        assert [r.offset for r in batch[TP0]] == [1]
        seen = []
        async for record in consumer:
            seen.append(record.partition)
            await consumer.stop()
        assert seen == [1] and fake.sync.closed

    asyncio.run(asyncio.wait_for(main(), 10))


def test_iterating_a_closed_consumer_stops() -> None:
    consumer = _consumer(FakeConsumer([_raftka_record(0)]))
    consumer.assign([TP0])
    consumer.close()
    assert list(consumer) == []


def test_send_to_a_topic_the_cluster_lacks_is_both_timeout_and_unknown_topic() -> None:
    """kafka-python programs catch KafkaTimeoutError there, raftka programs
    UnknownTopicOrPartitionError: the adapter's error is both."""
    from raftka import KafkaProducer
    from raftka.errors import UnknownTopicOrPartitionError

    class NoSuchTopic:
        def send(self, *args: Any, **kwargs: Any) -> Any:
            raise UnknownTopicOrPartitionError("topic 'nope' not present in metadata")

        def close(self, timeout_ms: int | None = None) -> None:
            pass

    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1")
    producer._producer = NoSuchTopic()  # type: ignore[assignment]
    with pytest.raises(KafkaTimeoutError) as caught:
        producer.send("nope", b"x")
    assert isinstance(caught.value, UnknownTopicOrPartitionError)
    assert "nope" in str(caught.value)
    producer.close()


def test_producer_flush_and_close_take_seconds() -> None:
    """kafka-python's flush(timeout) / close(timeout) are seconds; raftka's are ms.
    close is idempotent; send after close is IllegalStateError; kafka-python's own
    argument checks (key or value, headers as a list of (str, bytes))."""
    from raftka import KafkaProducer
    from raftka.errors import IllegalStateError

    calls: list[tuple[str, int | None]] = []

    class Recorder:
        def flush(self, timeout_ms: int | None = None) -> None:
            calls.append(("flush", timeout_ms))

        def close(self, timeout_ms: int | None = None) -> None:
            calls.append(("close", timeout_ms))

    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1")
    producer._producer = Recorder()  # type: ignore[assignment]
    producer.flush(timeout=2.5)
    producer.flush()
    with pytest.raises(ValueError, match="Need at least one"):
        producer.send("t")
    with pytest.raises(TypeError, match="list"):
        producer.send("t", b"v", headers=(("h", b"x"),))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tuples"):
        producer.send("t", b"v", headers=[("h",)])  # type: ignore[list-item]
    producer.close(timeout=1)
    producer.close(timeout=1)
    assert calls == [("flush", 2500), ("flush", None), ("close", 1000)]
    with pytest.raises(IllegalStateError):
        producer.send("t", b"v")
