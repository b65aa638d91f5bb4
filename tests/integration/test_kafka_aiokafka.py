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


async def _read_committed(boot: str, topic: str, count: int) -> list[bytes]:
    """``count`` values of ``topic`` as a read_committed consumer reads them from the
    start, and any more that arrive within the next second (where none should)."""
    from aiokafka import AIOKafkaConsumer

    reader = AIOKafkaConsumer(
        topic,
        bootstrap_servers=boot,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await reader.start()
    try:
        values = [r.value for r in await _read(reader, count)]
        values += [r.value for rs in (await reader.getmany(timeout_ms=1000)).values() for r in rs]
    finally:
        await reader.stop()
    return values


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

        # Nothing more arrives: the aborted record and the markers are skipped.
        values = await _read_committed(boot, "aio", 13)
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


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_and_acks_level_round_trip(brokers: LocalBrokers, codec: str) -> None:
    """aiokafka's producer with each codec and acks 0, 1 and all: every record is read
    back, in order, by aiokafka's consumer, and by raftka's own client over HTTP (which
    decompresses the batches aiokafka compressed)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from raftka.client import Consumer
    from raftka.client import TopicPartition as RaftkaTopicPartition

    topic = f"codec-{codec}"
    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(topic, 1, replication_factor=3)])
    values = [b"%s-%d-" % (codec.encode(), i) + b"x" * 200 for i in range(30)]

    async def produce_and_read() -> list[Any]:
        for n, acks in enumerate((0, 1, "all")):
            producer = AIOKafkaProducer(
                bootstrap_servers=brokers.kafka_bootstrap_servers,
                acks=acks,
                compression_type=codec,
                linger_ms=5,
            )
            await producer.start()
            try:
                batch = values[n * 10 : (n + 1) * 10]
                futures = [await producer.send(topic, v, partition=0) for v in batch]
                await producer.flush()
                await asyncio.gather(*futures)
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=brokers.kafka_bootstrap_servers)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return await _read(consumer, len(values))
        finally:
            await consumer.stop()

    records = asyncio.run(asyncio.wait_for(produce_and_read(), 90))
    # acks=0 has no answer to wait for, but one connection keeps the order: all arrive.
    assert [r.value for r in records] == values
    with Consumer(bootstrap_servers=brokers.bootstrap_servers) as consumer:
        tp = RaftkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"raftka's client read {len(got)} records"
            for batch in consumer.poll(500).values():
                got.extend(r.value for r in batch)
    assert got == values


def test_consume_transform_produce_with_send_offsets_to_transaction(
    brokers: LocalBrokers,
) -> None:
    """aiokafka's exactly-once loop: a read_committed group consumer's records go to an
    output topic in a transaction that also commits the group's offsets
    (send_offsets_to_transaction). An aborted round leaves neither its output nor its
    offsets; the committed round leaves both."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    boot = brokers.kafka_bootstrap_servers
    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("eos-in", 1, 3), NewTopic("eos-out", 1, 3)])
    with Producer(bootstrap_servers=brokers.bootstrap_servers, acks="all") as producer:
        for i in range(6):
            producer.send("eos-in", b"in-%d" % i, partition=0)
        producer.flush()
    tp_in = TopicPartition("eos-in", 0)

    async def scenario() -> tuple[list[bytes], int | None]:
        consumer = AIOKafkaConsumer(
            "eos-in",
            bootstrap_servers=boot,
            group_id="eos-group",
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        producer = AIOKafkaProducer(bootstrap_servers=boot, transactional_id="eos-txn")
        await consumer.start()
        await producer.start()
        try:
            records = await _read(consumer, 6)
            offsets = {tp_in: records[-1].offset + 1}
            # An aborted round: nothing of it may show.
            await producer.begin_transaction()
            for r in records:
                await producer.send("eos-out", b"aborted-" + r.value, partition=0)
            await producer.send_offsets_to_transaction(offsets, "eos-group")
            await producer.abort_transaction()
            assert await consumer.committed(tp_in) is None
            # The committed round.
            async with producer.transaction():
                for r in records:
                    await producer.send("eos-out", b"out-" + r.value, partition=0)
                await producer.send_offsets_to_transaction(offsets, "eos-group")
            # EndTxn returns once the commit is decided; the markers (the one on
            # __consumer_offsets included) are written just after, as in Kafka.
            deadline = time.monotonic() + DEADLINE_S
            while (committed := await consumer.committed(tp_in)) is None:
                assert time.monotonic() < deadline, "the transaction's offsets never showed"
                await asyncio.sleep(0.1)
        finally:
            await producer.stop()
            await consumer.stop()
        return await _read_committed(boot, "eos-out", 6), committed

    out, committed = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert out == [b"out-in-%d" % i for i in range(6)]
    assert committed == 6


def test_admin_alters_describes_and_deletes(brokers: LocalBrokers) -> None:
    """aiokafka's admin client: create_partitions, alter_configs and describe_configs
    on a topic, describe_topics, list_topics, delete_topics."""
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    boot = brokers.kafka_bootstrap_servers

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=boot)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-admin", 1, 3)])
            await admin.create_partitions({"aio-admin": NewPartitions(3)})
            resource = ConfigResource(
                ConfigResourceType.TOPIC, "aio-admin", configs={"retention.ms": "3600000"}
            )
            await admin.alter_configs([resource])
            deadline = time.monotonic() + DEADLINE_S
            while True:
                (described,) = await admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "aio-admin")]
                )
                # DescribeConfigs' resources: (error, message, type, name, entries), each
                # entry starting (name, value, ...).
                entries = {e[0]: e[1] for r in described.resources for e in r[4]}
                if entries.get("retention.ms") == "3600000":
                    break
                assert time.monotonic() < deadline, f"retention.ms not altered: {entries}"
                await asyncio.sleep(0.2)
            while True:
                topics = await admin.describe_topics(["aio-admin"])
                if len(topics[0]["partitions"]) == 3:
                    break
                assert time.monotonic() < deadline, f"not 3 partitions: {topics}"
                await asyncio.sleep(0.2)
            assert "aio-admin" in await admin.list_topics()
            await admin.delete_topics(["aio-admin"])
            while "aio-admin" in await admin.list_topics():
                assert time.monotonic() < deadline, "aio-admin was not deleted"
                await asyncio.sleep(0.2)
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


_MEMBER = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer

async def main() -> None:
    consumer = AIOKafkaConsumer(
        "killgroup", bootstrap_servers=sys.argv[1], group_id="kill-group",
        session_timeout_ms=6000, heartbeat_interval_ms=500, auto_offset_reset="earliest",
    )
    await consumer.start()
    while True:
        await consumer.getmany(timeout_ms=200)
        if consumer.assignment():
            print("assigned", sorted(tp.partition for tp in consumer.assignment()), flush=True)

asyncio.run(main())
"""


def test_group_member_killed_its_partitions_move(brokers: LocalBrokers, tmp_path: Path) -> None:
    """Two aiokafka members share a 4-partition topic; one is killed with SIGKILL (no
    LeaveGroup). When its session expires the coordinator rebalances and the survivor
    owns every partition and reads what is produced to each."""
    import subprocess
    import sys

    from aiokafka import AIOKafkaConsumer

    boot = brokers.kafka_bootstrap_servers
    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("killgroup", 4, 3)])
    out = (tmp_path / "member.out").open("w")
    member = subprocess.Popen(
        [sys.executable, "-c", _MEMBER, boot], stdout=out, stderr=subprocess.STDOUT
    )

    async def scenario() -> list[Any]:
        survivor = AIOKafkaConsumer(
            "killgroup",
            bootstrap_servers=boot,
            group_id="kill-group",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            auto_offset_reset="earliest",
        )
        await survivor.start()
        try:
            deadline = time.monotonic() + 60
            # Both members hold partitions: the group has rebalanced over two.
            while not (
                survivor.assignment()
                and len(survivor.assignment()) < 4
                and "assigned" in (tmp_path / "member.out").read_text()
            ):
                assert time.monotonic() < deadline, (
                    f"the two members never shared the topic: survivor has "
                    f"{survivor.assignment()}, member printed "
                    f"{(tmp_path / 'member.out').read_text()[-300:]!r}"
                )
                await survivor.getmany(timeout_ms=200)
            member.kill()
            while len(survivor.assignment()) < 4:
                assert time.monotonic() < deadline, (
                    f"the killed member's partitions never moved: {survivor.assignment()}"
                )
                await survivor.getmany(timeout_ms=200)
            with Producer(bootstrap_servers=brokers.bootstrap_servers, acks="all") as producer:
                for p in range(4):
                    producer.send("killgroup", b"after-%d" % p, partition=p)
                producer.flush()
            return await _read(survivor, 4)
        finally:
            await survivor.stop()

    try:
        records = asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        member.kill()
        member.wait(10)
        out.close()
    assert sorted(r.value for r in records) == [b"after-%d" % p for p in range(4)]
