"""The real aiokafka (not raftka's look-alike, ``raftka.client.compat``) against the
brokers' Kafka listener, unchanged (issue #16): its admin client creates a topic, an
idempotent producer writes with acks=all, a consumer group reads and commits, a
transactional producer commits and aborts, and a read_committed consumer sees exactly
the committed records. Records written through raftka's own client over HTTP are read
back identically through aiokafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.client import Admin, NewTopic, Producer
from raftka.local import LocalCluster
from raftka.local.brokers import LocalBrokers

aiokafka = pytest.importorskip("aiokafka")

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBrokers]:
    tmp: Path = tmp_path_factory.mktemp("aiokafka")
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster, kafka_listener=True, extra_properties={"offsets.topic.num.partitions": "3"}
        ) as b:
            b.start()
            yield b


async def _read(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        for records in (await consumer.getmany(timeout_ms=500)).values():
            got.extend(records)
    return got


def test_aiokafka_admin_producer_group_and_transactions(brokers: LocalBrokers) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    boot = brokers.kafka_bootstrap_servers

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=boot)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio", 3, 3)])
        finally:
            await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=boot, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("aio", b"v%d" % i, key=b"k%d" % i)
        finally:
            await producer.stop()

        group = AIOKafkaConsumer(
            "aio", bootstrap_servers=boot, group_id="aio-group", auto_offset_reset="earliest"
        )
        await group.start()
        try:
            records = await _read(group, 10)
            await group.commit()
            committed = {tp.partition: await group.committed(tp) for tp in group.assignment()}
        finally:
            await group.stop()
        assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(10))
        # The committed offsets are each partition's end: 10 records in all.
        assert sum(o or 0 for o in committed.values()) == 10, committed

        txn = AIOKafkaProducer(bootstrap_servers=boot, transactional_id="aio-txn")
        await txn.start()
        try:
            async with txn.transaction():
                await txn.send("aio", b"committed-1", partition=0)
                await txn.send("aio", b"committed-2", partition=1)
            await txn.begin_transaction()
            await txn.send("aio", b"aborted", partition=2)
            await txn.abort_transaction()
            async with txn.transaction():
                await txn.send("aio", b"committed-3", partition=2)
        finally:
            await txn.stop()

        reader = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=boot,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await reader.start()
        try:
            values = sorted(r.value for r in await _read(reader, 13))
            # Nothing more arrives: the aborted record and the markers are skipped.
            values += [
                r.value for rs in (await reader.getmany(timeout_ms=1000)).values() for r in rs
            ]
        finally:
            await reader.stop()
        assert b"aborted" not in values
        assert sorted(values) == sorted(
            [b"v%d" % i for i in range(10)] + [b"committed-1", b"committed-2", b"committed-3"]
        )

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_records_from_raftka_http_read_back_through_aiokafka(brokers: LocalBrokers) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("cross", 1, replication_factor=3)])
    with Producer(bootstrap_servers=brokers.bootstrap_servers, acks="all") as producer:
        for i in range(5):
            producer.send("cross", b"x%d" % i, key=b"k", headers=[("h", b"%d" % i)], partition=0)
        producer.flush()

    async def read() -> list[Any]:
        consumer = AIOKafkaConsumer(bootstrap_servers=brokers.kafka_bootstrap_servers)
        await consumer.start()
        try:
            tp = TopicPartition("cross", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return await _read(consumer, 5)
        finally:
            await consumer.stop()

    records = asyncio.run(asyncio.wait_for(read(), 60))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, b"k", b"x%d" % i) for i in range(5)
    ]
    assert [list(r.headers) for r in records] == [[("h", b"%d" % i)] for i in range(5)]
