"""confluent-kafka (librdkafka) and kafka-python, each unchanged, against the brokers'
Kafka listener (issue #16's compatibility list, as test_kafka_aiokafka.py covers it for
aiokafka): every codec at acks 0, 1 and all, read back by the same client and by
raftka's own client over HTTP; a consumer group of two members that commits, rebalances
and loses one member to SIGKILL; and kafka-python's admin client creating, describing,
altering, growing and deleting a topic. Idempotent produce, transactions and the rest of
the admin calls are in test_kafka_protocol.py and test_kafka_transactions.py."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_env import Env, kafka_env

from raftka.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from raftka.common.errors import UnknownTopicOrPartitionError
from raftka.local import wait_for

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
CLIENTS = ("confluent-kafka", "kafka-python")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    props = {
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "100",
    }
    with kafka_env(tmp_path_factory.mktemp("kafka-clients"), props) as e:
        yield e


def _create_topic(env: Env, name: str, partitions: int) -> None:
    with Admin(bootstrap_servers=env.http) as admin:
        admin.create_topics([NewTopic(name, partitions, replication_factor=3)])

        def led() -> bool:
            try:
                (topic,) = admin.describe_topics([name])
            except UnknownTopicOrPartitionError:
                return False  # not in the answering broker's metadata yet
            return all(p.leader is not None and p.leader >= 0 for p in topic.partitions)

        wait_for(led, timeout_s=DEADLINE_S, message=f"topic {name} has no leaders")


def _end_offsets(env: Env, topic: str, partitions: int) -> dict[int, int]:
    with Consumer(bootstrap_servers=env.http) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: end for tp, end in consumer.end_offsets(tps).items()}


def _read_http(env: Env, topic: str, count: int) -> list[bytes]:
    """``count`` values of ``topic``'s partition 0, from the start, by raftka's client."""
    with Consumer(bootstrap_servers=env.http) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"raftka's client read {len(got)} of {count}"
            for batch in consumer.poll(500).values():
                got.extend(r.value or b"" for r in batch)
    return got


# ---------------------------------------------------------------- codecs and acks


def _produce(
    client: str, kafka: str, topic: str, values: list[bytes], *, acks: str, codec: str
) -> None:
    """``values`` to partition 0 by one producer of ``client``, then closed."""
    if client == "confluent-kafka":
        from confluent_kafka import Producer as CKProducer

        errors: list[Any] = []
        producer = CKProducer(
            {"bootstrap.servers": kafka, "acks": acks, "compression.type": codec, "linger.ms": 5}
        )
        for v in values:
            producer.produce(
                topic, v, partition=0, on_delivery=lambda e, _m: e and errors.append(e)
            )
        assert producer.flush(DEADLINE_S) == 0, "records left unflushed"
        assert errors == []
        return
    from kafka import KafkaProducer

    kp = KafkaProducer(
        bootstrap_servers=kafka.split(","),
        acks=int(acks) if acks != "all" else "all",
        compression_type=codec,
        linger_ms=5,
    )
    try:
        futures = [kp.send(topic, v, partition=0) for v in values]
        kp.flush(timeout=DEADLINE_S)
        for f in futures:
            f.get(timeout=DEADLINE_S)
    finally:
        kp.close(timeout=10)


def _read_kafka(client: str, kafka: str, topic: str, count: int) -> list[bytes]:
    """``count`` values of partition 0 from the start, by ``client``'s consumer."""
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    if client == "confluent-kafka":
        from confluent_kafka import Consumer as CKConsumer
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CKTopicPartition

        consumer = CKConsumer({"bootstrap.servers": kafka, "group.id": f"read-{topic}"})
        consumer.assign([CKTopicPartition(topic, 0, 0)])
        try:
            while len(got) < count:
                assert time.monotonic() < deadline, f"read {len(got)} of {count}"
                for m in consumer.consume(count - len(got), 0.5):
                    if m.error():
                        raise KafkaException(m.error())
                    got.append(m.value())
        finally:
            consumer.close()
        return got
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KPTopicPartition

    kc = KafkaConsumer(bootstrap_servers=kafka.split(","), enable_auto_commit=False)
    tp = KPTopicPartition(topic, 0)
    kc.assign([tp])
    kc.seek_to_beginning(tp)
    try:
        while len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} of {count}"
            for records in kc.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        kc.close()
    return got


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("client", CLIENTS)
def test_every_codec_and_acks_level_round_trip(env: Env, client: str, codec: str) -> None:
    """The client's producer with ``codec`` at acks 0, 1 and all (a producer each, one
    after the other): every record is read back in order by the same client's consumer
    and by raftka's own client over HTTP (which decompresses the client's batches)."""
    topic = f"{client}-{codec}"
    _create_topic(env, topic, 1)
    values = [b"%s-%d-" % (codec.encode(), i) + b"x" * 200 for i in range(30)]
    for n, acks in enumerate(("0", "1", "all")):
        _produce(client, env.kafka, topic, values[n * 10 : (n + 1) * 10], acks=acks, codec=codec)
        # acks=0 has no answer: wait for the records, so the next producer's follow.
        held = (n + 1) * 10
        wait_for(
            lambda held=held: _end_offsets(env, topic, 1)[0] == held,
            timeout_s=DEADLINE_S,
            message=f"acks={acks}: the log never held {held} records",
        )
    assert _read_kafka(client, env.kafka, topic, len(values)) == values
    assert _read_http(env, topic, len(values)) == values


# ---------------------------------------------------------------- a group losing a member

_CONFLUENT_MEMBER = """
import sys
from confluent_kafka import Consumer

consumer = Consumer({
    "bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    "auto.offset.reset": "earliest", "enable.auto.commit": False,
})
consumer.subscribe([sys.argv[3]])
while True:
    consumer.poll(0.2)
    if consumer.assignment():
        print("assigned", sorted(tp.partition for tp in consumer.assignment()), flush=True)
"""

_KAFKA_PYTHON_MEMBER = """
import sys
from kafka import KafkaConsumer

consumer = KafkaConsumer(
    sys.argv[3], bootstrap_servers=sys.argv[1].split(","), group_id=sys.argv[2],
    session_timeout_ms=6000, heartbeat_interval_ms=500,
    auto_offset_reset="earliest", enable_auto_commit=False,
)
while True:
    consumer.poll(timeout_ms=200)
    if consumer.assignment():
        print("assigned", sorted(tp.partition for tp in consumer.assignment()), flush=True)
"""


class _Survivor:
    """The group member that stays, in this process: one face over both clients."""

    def __init__(self, client: str, kafka: str, group: str, topic: str) -> None:
        self.client = client
        self.topic = topic
        if client == "confluent-kafka":
            from confluent_kafka import Consumer as CKConsumer

            self._ck = CKConsumer(
                {
                    "bootstrap.servers": kafka,
                    "group.id": group,
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            self._ck.subscribe([topic])
        else:
            from kafka import KafkaConsumer

            self._kp = KafkaConsumer(
                topic,
                bootstrap_servers=kafka.split(","),
                group_id=group,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )

    def poll(self) -> list[tuple[int, bytes]]:
        """(partition, value) of what one poll returned."""
        if self.client == "confluent-kafka":
            from confluent_kafka import KafkaException

            m = self._ck.poll(0.2)
            if m is None:
                return []
            if m.error():
                raise KafkaException(m.error())
            return [(m.partition(), m.value())]
        return [
            (tp.partition, r.value)
            for tp, records in self._kp.poll(timeout_ms=200).items()
            for r in records
        ]

    def assigned(self) -> set[int]:
        if self.client == "confluent-kafka":
            return {tp.partition for tp in self._ck.assignment()}
        return {tp.partition for tp in self._kp.assignment()}

    def commit(self) -> None:
        if self.client == "confluent-kafka":
            self._ck.commit(asynchronous=False)
        else:
            self._kp.commit()

    def committed(self, partitions: int) -> dict[int, int]:
        if self.client == "confluent-kafka":
            from confluent_kafka import TopicPartition as CKTopicPartition

            tps = [CKTopicPartition(self.topic, p) for p in range(partitions)]
            return {tp.partition: tp.offset for tp in self._ck.committed(tps, timeout=20)}
        from kafka import TopicPartition as KPTopicPartition

        return {
            p: self._kp.committed(KPTopicPartition(self.topic, p)) or -1 for p in range(partitions)
        }

    def close(self) -> None:
        if self.client == "confluent-kafka":
            self._ck.close()
        else:
            self._kp.close()


def _poll_until(
    survivor: _Survivor, done: Callable[[], bool], deadline: float, what: Callable[[], str]
) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    while not done():
        assert time.monotonic() < deadline, what()
        got.extend(survivor.poll())
    return got


@pytest.mark.parametrize("client", CLIENTS)
def test_group_member_killed_its_partitions_move(env: Env, client: str, tmp_path: Path) -> None:
    """Two members of one group (the other in a child process) share a 4-partition topic
    and read a record of each partition; the survivor commits what it read. The child
    is killed with SIGKILL (no LeaveGroup): once its session expires the group
    rebalances, and the survivor owns every partition, reads the child's partitions
    from the start (the child committed nothing) but not its own again (it committed
    them), reads what is produced next, and commits up to the end of each partition."""
    topic, group = f"kill-{client}", f"kill-group-{client}"
    _create_topic(env, topic, 4)
    script = _CONFLUENT_MEMBER if client == "confluent-kafka" else _KAFKA_PYTHON_MEMBER
    out_path = tmp_path / "member.out"
    with out_path.open("w") as out:
        member = subprocess.Popen(
            [sys.executable, "-c", script, env.kafka, group, topic],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    survivor = _Survivor(client, env.kafka, group, topic)
    try:
        deadline = time.monotonic() + 90
        # Both members hold partitions: the group has rebalanced over two.
        _poll_until(
            survivor,
            lambda: 0 < len(survivor.assigned()) < 4 and "assigned" in out_path.read_text(),
            deadline,
            lambda: (
                f"the two members never shared the topic: survivor has "
                f"{survivor.assigned()}, member printed {out_path.read_text()[-300:]!r}"
            ),
        )
        mine = survivor.assigned()
        with Producer(bootstrap_servers=env.http, acks="all") as producer:
            for p in range(4):
                producer.send(topic, b"before-%d" % p, partition=p)
            producer.flush()
        before: list[tuple[int, bytes]] = []
        while len(before) < len(mine):
            assert time.monotonic() < deadline, f"the survivor read {before} before the kill"
            before.extend(survivor.poll())
        assert sorted(before) == [(p, b"before-%d" % p) for p in sorted(mine)]
        survivor.commit()

        member.kill()
        member.wait(10)
        after = _poll_until(
            survivor,
            lambda: len(survivor.assigned()) == 4,
            deadline,
            lambda: f"the killed member's partitions never moved: {survivor.assigned()}",
        )
        with Producer(bootstrap_servers=env.http, acks="all") as producer:
            for p in range(4):
                producer.send(topic, b"after-%d" % p, partition=p)
            producer.flush()
        theirs = set(range(4)) - mine
        expected = sorted(
            [(p, b"before-%d" % p) for p in theirs] + [(p, b"after-%d" % p) for p in range(4)]
        )
        while len(after) < len(expected):
            assert time.monotonic() < deadline, f"the survivor read {sorted(after)} after"
            after.extend(survivor.poll())
        assert sorted(after) == expected
        survivor.commit()
        assert survivor.committed(4) == _end_offsets(env, topic, 4)
    finally:
        member.kill()
        member.wait(10)
        survivor.close()


# ---------------------------------------------------------------- kafka-python's admin


def test_kafka_python_admin_creates_describes_alters_and_deletes_a_topic(env: Env) -> None:
    """kafka-python's KafkaAdminClient: create a topic with a config, describe it, read
    and change its config (IncrementalAlterConfigs), add partitions, delete it."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
    from kafka.admin import NewTopic as KPNewTopic

    name = "kp-admin"
    admin = KafkaAdminClient(bootstrap_servers=env.kafka.split(","), request_timeout_ms=20000)
    try:
        admin.create_topics(
            [KPNewTopic(name, 2, 3, topic_configs={"retention.ms": "3600000"})],
            timeout_ms=20000,
        )
        # Like Kafka's, the answer comes when the controller committed the topic; each
        # broker's metadata learns of it a moment later.
        wait_for(
            lambda: name in admin.list_topics(),
            timeout_s=DEADLINE_S,
            message=f"{name} never listed after create_topics",
        )
        (described,) = admin.describe_topics([name])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1]
        assert all(len(p["replica_nodes"]) == 3 for p in described["partitions"])

        resource = ConfigResource(ConfigResourceType.TOPIC, name)

        def retention() -> str:
            configs = admin.describe_configs([resource])
            (topic_configs,) = configs.values()
            return str(topic_configs[name]["retention.ms"]["value"])

        assert retention() == "3600000"
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7200000"})]
        )
        wait_for(
            lambda: retention() == "7200000",
            timeout_s=DEADLINE_S,
            message="retention.ms never read back as altered",
        )

        admin.create_partitions({name: NewPartitions(3)}, timeout_ms=20000)
        wait_for(
            lambda: len(admin.describe_topics([name])[0]["partitions"]) == 3,
            timeout_s=DEADLINE_S,
            message="the topic never showed its third partition",
        )

        admin.delete_topics([name], timeout_ms=20000)
        wait_for(
            lambda: name not in admin.list_topics(),
            timeout_s=DEADLINE_S,
            message=f"{name} still listed after delete_topics",
        )
    finally:
        admin.close()
