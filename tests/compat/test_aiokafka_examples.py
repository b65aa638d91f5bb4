"""aiokafka programs, written as aiokafka's documentation shows them, run against a
real raftka cluster with only their import lines changed (``from aiokafka import ...``
-> ``from raftka import ...``; ``aiokafka.structs`` -> ``raftka.structs``).

Each example is a coroutine in aiokafka's style, run with ``asyncio.run`` under a
deadline; the test around it checks what the program observed. One cluster serves the
module; each test uses its own topics and groups."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

# --- the changed import lines -----------------------------------------------------
from raftka import AIOKafkaConsumer, AIOKafkaProducer
from raftka.structs import OffsetAndMetadata, TopicPartition

# ----------------------------------------------------------------------------------

T = TypeVar("T")
TopicFactory = Callable[..., str]
DEADLINE_S = 60


def run(main: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(main, DEADLINE_S))


def test_producer_send_and_wait_and_send_futures(bootstrap: str, topic: TopicFactory) -> None:
    """aiokafka's producer examples: ``start()`` / ``send_and_wait`` / ``stop()`` in
    try/finally; ``async with`` and ``await producer.send(...)`` giving a future of
    RecordMetadata; a JSON value serializer; ``partitions_for``."""
    name = topic(partitions=2)

    async def send_one() -> Any:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        # Get cluster layout and initial topic/partition leadership information
        await producer.start()
        try:
            # Produce message
            return await producer.send_and_wait(name, b"Super message", partition=0)
        finally:
            # Wait for all pending messages to be delivered or expire.
            await producer.stop()

    async def send_many() -> list[Any]:
        async with AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            value_serializer=lambda v: json.dumps(v).encode("utf-8"),
            enable_idempotence=True,
        ) as producer:
            assert await producer.partitions_for(name) == {0, 1}
            futures = [await producer.send(name, {"n": i}, partition=1) for i in range(5)]
            await producer.flush()
            return [await fut for fut in futures]

    metadata = run(send_one())
    assert (metadata.topic, metadata.partition, metadata.offset) == (name, 0, 0)
    assert metadata.topic_partition == TopicPartition(name, 0)
    batch = run(send_many())
    assert [(m.partition, m.offset) for m in batch] == [(1, i) for i in range(5)]


def _produce(bootstrap: str, name: str, count: int, partitions: int = 1) -> None:
    async def main() -> None:
        async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
            for i in range(count):
                await producer.send(name, b"m%d" % i, key=b"k", partition=i % partitions)
            await producer.flush()

    run(main())


def test_consumer_async_for_in_a_group(bootstrap: str, topic: TopicFactory) -> None:
    """aiokafka's consumer example: subscribe through the constructor, ``start()``,
    ``async for msg in consumer``, ``stop()`` in finally; with a group the auto-commit
    at stop lets the next member start after what was read."""
    name = topic(partitions=2)
    _produce(bootstrap, name, 10, partitions=2)

    async def consume(count: int) -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(
            name,
            bootstrap_servers=bootstrap,
            group_id="my-group",
            auto_offset_reset="earliest",
        )
        # Get cluster layout and join group `my-group`
        await consumer.start()
        got = []
        try:
            # Consume messages
            async for msg in consumer:
                print(
                    "consumed: ",
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    msg.key,
                    msg.value,
                    msg.timestamp,
                )
                got.append((msg.partition, msg.offset, msg.value))
                if len(got) == count:
                    break
        finally:
            # Will leave consumer group; perform autocommit if enabled.
            await consumer.stop()
        return got

    first = run(consume(10))
    assert sorted((p, o) for p, o, _ in first) == [(p, o) for p in (0, 1) for o in range(5)]
    _produce(bootstrap, name, 2, partitions=2)
    assert sorted((p, o) for p, o, _ in run(consume(2))) == [(0, 5), (1, 5)]


def test_getmany_with_manual_commit(bootstrap: str, topic: TopicFactory) -> None:
    """aiokafka's "manual commit" example: ``enable_auto_commit=False``, batches from
    ``getmany(timeout_ms=...)`` processed then ``await consumer.commit()``; a commit of
    explicit offsets; ``committed(tp)`` reads them back."""
    name = topic(partitions=1)
    tp = TopicPartition(name, 0)
    _produce(bootstrap, name, 20)

    async def consume() -> tuple[list[int], int | None]:
        consumer = AIOKafkaConsumer(
            name,
            bootstrap_servers=bootstrap,
            group_id="manual-group",
            enable_auto_commit=False,  # Will disable autocommit
            auto_offset_reset="earliest",  # If committed offset not found, start from beginning
        )
        await consumer.start()
        processed: list[int] = []
        try:
            while len(processed) < 15:
                result = await consumer.getmany(timeout_ms=10 * 1000, max_records=5)
                for tp_, messages in result.items():
                    if messages:
                        processed.extend(m.offset for m in messages)
                        # Commit progress only for this partition
                        await consumer.commit({tp_: messages[-1].offset + 1})
            assert await consumer.committed(tp) == processed[-1] + 1
            await consumer.commit({tp: OffsetAndMetadata(17, "metadata", -1)})
            return processed, await consumer.committed(tp)
        finally:
            await consumer.stop()

    processed, committed = run(consume())
    assert processed == list(range(15)) and committed == 17


def test_seek_to_committed_and_getone(bootstrap: str, topic: TopicFactory) -> None:
    """``seek_to_committed()`` after reading past the committed offset rewinds to it;
    ``getone()`` then returns that record; ``position``, ``highwater``,
    ``beginning_offsets`` / ``end_offsets``, ``seek_to_beginning``, ``topics()``."""
    name = topic(partitions=1)
    tp = TopicPartition(name, 0)
    _produce(bootstrap, name, 10)

    async def main() -> dict[str, Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id="seek-group",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            out: dict[str, Any] = {"first": (await consumer.getone()).offset}
            await consumer.commit({tp: 3})
            data = await consumer.getmany(tp, timeout_ms=5000)
            out["read"] = [m.offset for m in data[tp]]
            out["committed"] = await consumer.seek_to_committed()
            out["position"] = await consumer.position(tp)
            out["again"] = (await consumer.getone(tp)).offset
            out["highwater"] = consumer.highwater(tp)
            out["ends"] = (
                await consumer.beginning_offsets([tp]),
                await consumer.end_offsets([tp]),
            )
            await consumer.seek_to_beginning(tp)
            out["from_start"] = (await consumer.getone()).value
            out["topics"] = await consumer.topics()
            return out
        finally:
            await consumer.stop()

    out = run(main())
    assert out["first"] == 0
    assert out["read"][0] == 1
    assert out["committed"] == {tp: 3}
    assert out["position"] == 3 and out["again"] == 3
    assert out["highwater"] == 10
    assert out["ends"] == ({tp: 0}, {tp: 10})
    assert out["from_start"] == b"m0"
    assert name in out["topics"]


def test_consumer_without_group_reads_every_partition(bootstrap: str, topic: TopicFactory) -> None:
    """A consumer subscribed without a group_id (as aiokafka allows) reads every
    partition of its topics; ``async with`` starts and stops it."""
    name = topic(partitions=3)
    _produce(bootstrap, name, 9, partitions=3)

    async def main() -> list[tuple[int, int]]:
        got = []
        async with AIOKafkaConsumer(
            name, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            while len(got) < 9:
                batch = await consumer.getmany(timeout_ms=5000)
                assert batch, "no records within 5 s"
                got.extend((m.partition, m.offset) for ms in batch.values() for m in ms)
        return sorted(got)

    assert run(main()) == [(p, o) for p in range(3) for o in range(3)]
