"""The client library against a real cluster: 3 controllers + 3 brokers on loopback.

One module-scoped cluster (``cluster`` fixture) serves every test; each test uses its
own topics. Checked from the outside, through the public clients only:

- keyed records produced (blocking Producer) are read back (Consumer) in order per
  partition, each in the partition Java's murmur2 picks, at its acknowledged offset;
- the async faces round-trip too, with pipelined fetches;
- seek / position / known_position / seek_to_beginning / seek_to_end /
  beginning_offsets / end_offsets / offsets_for_times / pause / resume;
- admin: create (and TOPIC_ALREADY_EXISTS typed), describe, list, create_partitions,
  describe/alter configs, describe_cluster, list_offsets, delete;
- an unknown topic (no auto-creation) fails typed and bounded, for producer and
  consumer;
- kill -9 of a partition leader while a producer (acks=all, RF 3, min ISR 2) runs:
  every acknowledged record is readable at its acknowledged offset (the broker is
  restarted afterwards for the next tests; this test runs last).

Every client call has a timeout; waits poll a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from raftka.client import (
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    NewPartitions,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from raftka.common.errors import (
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftka.common.hashing import murmur2_partition
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 20.0
API_TIMEOUT_MS = 20_000


class Env(RaftkaCluster):
    def topic(self, name: str, partitions: int = 3, min_isr: int = 2) -> str:
        """Create a topic (RF 3) and wait until every broker knows its leaders."""
        configs = {"min.insync.replicas": str(min_isr)}
        return self.create_topic(name, partitions=partitions, configs=configs)

    def send_to_partition_0(self, topic: str, values: Iterable[bytes]) -> None:
        """Produce ``values`` to partition 0 of ``topic``, in order, and flush."""
        with Producer(bootstrap_servers=self.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as p:
            for value in values:
                p.send(topic, value, partition=0)
            p.flush(timeout_ms=API_TIMEOUT_MS)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(
        tmp_path_factory.mktemp("client"),
        controller_properties={"broker.session.timeout.ms": "2500"},
        broker_properties={"replica.lag.time.max.ms": "1500"},
    ) as env:
        yield env


def _consume_all(consumer: Consumer, expected: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < expected:
        assert time.monotonic() < deadline, f"read {len(got)} of {expected} records"
        for records in consumer.poll(1_000).values():
            got.extend(records)
    return got


def test_blocking_poll_serves_buffered_records_without_a_loop_hop(env: Env) -> None:
    """1,000 records in one partition, polled 100 at a time by a blocking Consumer
    (manual assignment): one fetch brings them all, so after the poll that waited for
    it the others are served from the fetcher's buffer in the caller's thread (the
    loop-thread hop, ``_thread.run``, is taken for fewer polls than returned records);
    the records come back once each, in offset order."""
    topic = env.topic("fastpoll")
    env.send_to_partition_0(topic, (b"v%d" % i for i in range(1_000)))
    with Consumer(
        bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        hops = 0
        real_run = consumer._thread.run

        def counting_run(coro: Any, timeout_s: float | None = None) -> Any:
            nonlocal hops
            hops += 1
            return real_run(coro, timeout_s)

        consumer._thread.run = counting_run  # type: ignore[method-assign]
        got: list[ConsumerRecord] = []
        polls_with_records = 0
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 1_000:
            assert time.monotonic() < deadline, f"read {len(got)} of 1000 records"
            hops_before = hops
            batch = consumer.poll(1_000, max_records=100).get(TopicPartition(topic, 0), [])
            if batch:
                polls_with_records += 1
            got.extend(batch)
            assert hops - hops_before <= 1
        consumer._thread.run = real_run  # type: ignore[method-assign]
    assert [r.offset for r in got] == list(range(1_000))
    assert [r.value for r in got] == [b"v%d" % i for i in range(1_000)]
    assert polls_with_records == 10
    assert hops < polls_with_records, f"{hops} hops for {polls_with_records} polls"


def test_keyed_records_round_trip_in_java_partitions(env: Env) -> None:
    """200 keyed records: each lands in murmur2(key) % 3 at its acknowledged offset and
    reads back in send order within its partition."""
    topic = env.topic("keyed")
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as producer:
        futures = [
            producer.send(topic, b"value-%d" % i, key=b"key-%d" % (i % 37)) for i in range(200)
        ]
        producer.flush(timeout_ms=API_TIMEOUT_MS)
        acked = [f.result(0) for f in futures]
    with Consumer(
        bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        records = _consume_all(consumer, 200)
    assert len(records) == 200
    by_position = {(r.partition, r.offset): r for r in records}
    for i, md in enumerate(acked):
        key = b"key-%d" % (i % 37)
        assert md.partition == murmur2_partition(key, 3)
        record = by_position[(md.partition, md.offset)]
        assert (record.key, record.value) == (key, b"value-%d" % i)
    for p in range(3):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == list(range(len(offsets)))


def test_async_faces_round_trip(env: Env) -> None:
    """AsyncProducer with serializers and gzip, AsyncConsumer with deserializers,
    small fetches (many round trips, pipelined): 300 records in order."""
    topic = env.topic("async", partitions=1)

    async def main() -> list[ConsumerRecord]:
        async with AsyncProducer(
            bootstrap_servers=env.bootstrap_servers,
            value_serializer=lambda v: v.encode(),
            compression_type="gzip",
            max_block_ms=API_TIMEOUT_MS,
        ) as producer:
            futures = [await producer.send(topic, f"v{i}") for i in range(300)]
            await producer.flush(timeout_ms=API_TIMEOUT_MS)
            assert [(await f).offset for f in futures] == list(range(300))
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap_servers,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=512,
            max_poll_records=50,
            value_deserializer=lambda b: None if b is None else b.decode(),
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[ConsumerRecord] = []
            while len(got) < 300:
                batch = await consumer.poll(DEADLINE_S * 1000)
                assert batch, "no records in time"
                assert sum(len(v) for v in batch.values()) <= 50
                got.extend(batch[TopicPartition(topic, 0)])
            return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert [r.value for r in got] == [f"v{i}" for i in range(300)]


def test_positions_and_offset_lookups(env: Env) -> None:
    """seek/position/seek_to_*/beginning/end offsets/offsets_for_times/pause on a
    partition holding 10 records with timestamps 1000, 2000, ... 10000."""
    topic = env.topic("seek", partitions=1)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0, timestamp_ms=(i + 1) * 1000)
        producer.flush(timeout_ms=API_TIMEOUT_MS)
    with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert consumer.known_position(tp) is None  # not looked up yet, and no request
        assert consumer.beginning_offsets([tp], API_TIMEOUT_MS) == {tp: 0}
        assert consumer.end_offsets([tp], API_TIMEOUT_MS) == {tp: 10}
        assert consumer.position(tp, API_TIMEOUT_MS) == 10  # latest
        assert consumer.known_position(tp) == 10
        found = consumer.offsets_for_times({tp: 4500, TopicPartition(topic, 0): 4500})
        assert found[tp] is not None and (found[tp].offset, found[tp].timestamp) == (4, 5000)
        assert consumer.offsets_for_times({tp: 99_000})[tp] is None
        consumer.seek(tp, 7)
        assert consumer.position(tp) == 7
        assert consumer.known_position(tp) == 7
        assert [r.offset for r in _consume_all(consumer, 3)] == [7, 8, 9]
        assert consumer.position(tp) == 10
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        consumer.pause(tp)
        assert consumer.poll(300) == {}
        consumer.resume(tp)
        assert [r.value for r in _consume_all(consumer, 10)] == [b"%d" % i for i in range(10)]
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 10
        assert consumer.highwater(tp) == 10


def test_admin_commands(env: Env) -> None:
    """create (typed TOPIC_ALREADY_EXISTS on repeat), list, describe, create_partitions,
    configs, describe_cluster, list_offsets, delete."""
    admin = env.admin
    topic = env.topic("admin", partitions=2)
    with pytest.raises(TopicAlreadyExistsError) as info:
        admin.create_topics([NewTopic(topic, 2, 3), NewTopic("admin-second", 1, 3)])
    assert info.value.results["admin-second"] is None  # type: ignore[attr-defined]
    # Brokers learn new topics from the metadata log, a moment after the controller
    # commits them (as in Kafka): wait for them, with a deadline.
    wait_for(
        lambda: {topic, "admin-second"} <= admin.list_topics(),
        timeout_s=DEADLINE_S,
        message="the brokers never listed the created topics",
    )
    (described,) = admin.describe_topics([topic])
    assert [p.partition for p in described.partitions] == [0, 1]
    assert all(len(p.replicas) == 3 and p.leader in p.replicas for p in described.partitions)
    admin.create_partitions({topic: NewPartitions(4)})
    wait_for(
        lambda: len(admin.describe_topics([topic])[0].partitions) == 4,
        timeout_s=DEADLINE_S,
        message="partitions did not grow",
    )
    admin.alter_configs({topic: {"retention.ms": "12345"}})
    entries = admin.describe_configs([topic], keys=["retention.ms"])[topic]
    assert entries["retention.ms"].value == "12345"
    assert entries["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
    admin.alter_configs({topic: {"retention.ms": None}})
    assert admin.describe_configs([topic])[topic]["retention.ms"].value != "12345"
    cluster = admin.describe_cluster()
    assert [b.node_id for b in cluster.brokers] == env.brokers.ids
    assert len(cluster.controllers) == 3
    offsets = admin.list_offsets({TopicPartition(topic, 0): "latest"})
    assert offsets[TopicPartition(topic, 0)].offset == 0
    admin.delete_topics([topic, "admin-second"])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic])
    wait_for(
        lambda: topic not in admin.list_topics(),
        timeout_s=DEADLINE_S,
        message="topic not deleted",
    )


def test_unknown_topic_fails_typed_not_hanging(env: Env) -> None:
    """No auto-creation: send to a missing topic raises UnknownTopicOrPartitionError
    after max_block_ms; a consumer's position lookup raises it after its timeout;
    describe_topics raises it at once."""
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=1_000) as producer:
        start = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("missing", b"x")
        assert time.monotonic() - start < 10
    with Consumer(bootstrap_servers=env.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition("missing", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.position(TopicPartition("missing", 0), timeout_ms=1_000)
    with pytest.raises(UnknownTopicOrPartitionError):
        env.admin.describe_topics(["missing"])


def test_deserializer_error_stops_at_the_bad_record(env: Env) -> None:
    """A value_deserializer that raises on one record: poll returns the records before
    it, then raises SerializationError naming its offset, with the position left at the
    bad record; after seek past it the consumer goes on (Kafka's
    RecordDeserializationException contract)."""
    from raftka.common.errors import SerializationError

    topic = env.topic("deser", partitions=1)
    tp = TopicPartition(topic, 0)
    env.send_to_partition_0(topic, (b"a", b"b", b"bad", b"c"))

    def strict(value: bytes | None) -> str:
        if value == b"bad":
            raise ValueError("not a letter")
        return (value or b"").decode()

    with Consumer(bootstrap_servers=env.bootstrap_servers, value_deserializer=strict) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        with pytest.raises(SerializationError, match="offset 2"):
            while time.monotonic() < deadline:
                for records in consumer.poll(1_000).values():
                    got.extend(r.value for r in records)
        assert got == ["a", "b"]
        assert consumer.position(tp) == 2
        consumer.seek(tp, 3)
        rest = _consume_all(consumer, 1)
        assert [r.value for r in rest] == ["c"]


def test_consumer_interceptors_see_polls_and_commits(env: Env) -> None:
    """A ConsumerInterceptor filters what poll returns (drops odd offsets) and sees
    every successful commit with its offsets; close() runs when the consumer closes."""
    from raftka.client.interceptors import ConsumerInterceptor

    topic = env.topic("icpt", partitions=1)
    tp = TopicPartition(topic, 0)
    env.send_to_partition_0(topic, (b"%d" % i for i in range(10)))
    commits: list[dict[TopicPartition, int]] = []
    closed: list[bool] = []

    class EvenOnly(ConsumerInterceptor):
        def on_consume(
            self, records: dict[TopicPartition, list[ConsumerRecord]]
        ) -> dict[TopicPartition, list[ConsumerRecord]]:
            return {t: [r for r in rs if r.offset % 2 == 0] for t, rs in records.items()}

        def on_commit(self, offsets: Any) -> None:
            commits.append({t: om.offset for t, om in offsets.items()})

        def close(self) -> None:
            closed.append(True)

    with Consumer(
        bootstrap_servers=env.bootstrap_servers,
        group_id="interceptor-test",
        enable_auto_commit=False,
        interceptors=[EvenOnly()],
    ) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < 10:
            assert time.monotonic() < deadline, f"read {seen}"
            for records in consumer.poll(1_000).values():
                seen.extend(r.offset for r in records)
        consumer.commit(timeout_ms=API_TIMEOUT_MS)
    assert seen == [0, 2, 4, 6, 8]
    assert commits == [{tp: 10}]
    assert closed == [True]


def test_zz_leader_kill9_loses_no_acknowledged_record(env: Env) -> None:
    """acks=all, RF 3, min ISR 2: send records one at a time (waiting for each ack)
    while the partition leader is killed -9 after 20. The producer's retries carry it
    to the new leader; every acknowledged record is read back at its offset."""
    topic = env.topic("kill", partitions=1)
    tp = TopicPartition(topic, 0)
    acked: list[tuple[RecordMetadata, bytes]] = []
    victim: int | None = None
    with Producer(
        bootstrap_servers=env.bootstrap_servers,
        max_block_ms=API_TIMEOUT_MS,
        request_timeout_ms=5_000,
        delivery_timeout_ms=30_000,
        linger_ms=0,
        metadata_max_age_ms=1_000,
    ) as producer:
        for i in range(60):
            value = b"record-%d" % i
            if i == 20:
                (described,) = env.admin.describe_topics([topic])
                victim = described.partitions[0].leader
                assert victim is not None
                env.brokers[victim].kill()
            try:
                md = producer.send(topic, value, partition=0).result(40)
            except KafkaError:
                continue  # not acknowledged: allowed to be lost
            acked.append((md, value))
    assert victim is not None
    assert len(acked) >= 50, len(acked)
    with Consumer(
        bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp], API_TIMEOUT_MS)[tp]
        records = _consume_all(consumer, end)
    by_offset = {r.offset: r.value for r in records}
    for md, value in acked:
        assert by_offset.get(md.offset) == value, (md, value)
    # Leave the cluster whole for anything that runs after.
    env.brokers[victim].start()
    env.brokers.wait_unfenced(victim)


def test_getone_and_breaking_out_of_iteration_lose_no_record(env: Env) -> None:
    """getone() and a loop that breaks out of iteration hand over records one at a
    time: the next poll starts right after the last record handed over (they used to
    poll a whole batch, return one record and drop the rest with the position past
    them)."""
    topic = env.topic("getone", partitions=1)
    tp = TopicPartition(topic, 0)
    env.send_to_partition_0(topic, (b"%d" % i for i in range(20)))

    async def run() -> list[int]:
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([tp])
            first = await consumer.getone()
            second = await consumer.getone()
            async for record in consumer:
                third = record
                break
            rest = await consumer.poll(API_TIMEOUT_MS, max_records=100)
            return [first.offset, second.offset, third.offset, rest[tp][0].offset]

    assert asyncio.run(run()) == [0, 1, 2, 3]
    with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp])
        seen = []
        for record in c:
            seen.append(record.offset)
            if len(seen) == 3:
                break
        after = c.poll(API_TIMEOUT_MS, max_records=100)
        assert seen == [0, 1, 2]
        assert after[tp][0].offset == 3
