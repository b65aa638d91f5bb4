"""Kafka's own transactional clients, unchanged, against raftka's Kafka listener.

One module-scoped cluster (3 controllers, 3 brokers with Kafka listeners,
``transaction.state.log.num.partitions=3`` so that it starts fast). Checked from the
outside through the real libraries:

- confluent-kafka (librdkafka): a transactional producer commits a transaction over 2
  partitions, aborts one, commits another; a read_committed consumer sees exactly the
  committed records, a read_uncommitted one sees the aborted ones too; while a
  transaction is open, ListOffsets read_committed answers the last stable offset
  (below the high watermark); kcat with ``-X isolation.level=read_committed`` reads
  the committed records only;
- a second confluent-kafka producer with the same transactional.id fences the first
  (its commit fails fatally) and aborts its open transaction; the second one's
  transaction commits and is the only one read;
- send_offsets_to_transaction with a group consumer's group metadata: an aborted
  transaction leaves the group's offsets uncommitted, a committed one commits them;
- kafka-python's transactional producer (it has one since 2.1) commits and aborts, its
  read_committed consumer sees the committed records only, and its admin client's
  DescribeTransactions and ListTransactions show the transactional id;
- kafka-python's consume-transform-produce: its group consumer's offsets sent with
  ``send_offsets_to_transaction`` are committed with the output, or not at all.

Every client call has a timeout; waits poll a condition with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
N = 10  # records per transaction, over 2 partitions


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Kafka bootstrap servers of a 3-broker cluster."""
    tmp: Path = tmp_path_factory.mktemp("kafka-txn")
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        props = {
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "100",
            "group.min.session.timeout.ms": "1000",
        }
        with LocalBrokers(cluster, extra_properties=props, kafka_listener=True) as brokers:
            brokers.start()
            yield brokers.kafka_bootstrap_servers


def create_topic(kafka: str, name: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(name, partitions, 3)], request_timeout=20)[name].result(30)

    def led() -> bool:
        t = admin.list_topics(topic=name, timeout=10).topics.get(name)
        return t is not None and len(t.partitions) == partitions and t.error is None

    wait_for(led, timeout_s=DEADLINE_S, message=f"topic {name} has no leaders")


def txn_producer(kafka: str, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "transactional.id": transactional_id})
    producer.init_transactions(DEADLINE_S)
    return producer


def produce(producer: Any, topic: str, prefix: str) -> list[bytes]:
    """N records ``prefix-i`` to partitions 0 and 1 (alternating), flushed."""
    values = [f"{prefix}-{i}".encode() for i in range(N)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(DEADLINE_S) == 0, "records left unflushed"
    return values


def read(kafka: str, topic: str, expected: int, *, isolation: str) -> list[bytes]:
    """The values a fresh consumer with ``isolation`` reads from the beginning of
    partitions 0 and 1, once it has ``expected`` of them (a last poll after that
    catches any that must not be there)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
        seen: list[bytes] = []

        def poll(timeout_s: float) -> None:
            msg = consumer.poll(timeout_s)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())

        wait_for(
            lambda: poll(0.5) or len(seen) >= expected,
            timeout_s=DEADLINE_S,
            message=f"{isolation}: read {len(seen)} of {expected}",
        )
        for _ in range(3):
            poll(0.3)
        return seen
    finally:
        consumer.close()


def high_watermarks(kafka: str, topic: str, *, isolation: str) -> list[int]:
    """The "latest" offsets ListOffsets answers for partitions 0 and 1."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": "watermarks", "isolation.level": isolation}
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20, cached=False)[1]
            for p in (0, 1)
        ]
    finally:
        consumer.close()


def test_confluent_kafka_commit_abort_and_read_committed(kafka: str) -> None:
    topic = "ck-txn"
    create_topic(kafka, topic)
    # A new producer instance per transaction, same id: each init_transactions() bumps
    # the epoch (one producer, many transactions: test_many_transactions_of_one_producer).
    producer = txn_producer(kafka, "ck-txn-id")
    producer.begin_transaction()
    committed = produce(producer, topic, "c1")
    producer.commit_transaction(DEADLINE_S)
    producer = txn_producer(kafka, "ck-txn-id")
    producer.begin_transaction()
    aborted = produce(producer, topic, "a")
    producer.abort_transaction(DEADLINE_S)
    producer = txn_producer(kafka, "ck-txn-id")
    producer.begin_transaction()
    committed += produce(producer, topic, "c2")
    producer.commit_transaction(DEADLINE_S)

    assert sorted(read(kafka, topic, 2 * N, isolation="read_committed")) == sorted(committed)
    everything = read(kafka, topic, 3 * N, isolation="read_uncommitted")
    assert sorted(everything) == sorted(committed + aborted)

    # The markers are written once EndTxn is answered: wait until the last stable
    # offset has caught up with the high watermark, then open a transaction.
    def stable() -> bool:
        return high_watermarks(kafka, topic, isolation="read_committed") == high_watermarks(
            kafka, topic, isolation="read_uncommitted"
        )

    wait_for(stable, timeout_s=DEADLINE_S, message="the LSO never reached the high watermark")
    before = high_watermarks(kafka, topic, isolation="read_uncommitted")
    producer = txn_producer(kafka, "ck-txn-id")
    producer.begin_transaction()
    produce(producer, topic, "open")
    # ListOffsets read_committed: latest is the LSO, where the open transaction starts.
    assert high_watermarks(kafka, topic, isolation="read_committed") == before
    assert high_watermarks(kafka, topic, isolation="read_uncommitted") == [
        b + N // 2 for b in before
    ]
    producer.abort_transaction(DEADLINE_S)

    if shutil.which("kcat") is None:
        return  # CI installs kcat; the Kafka clients above have checked the rest
    first = kafka.split(",", maxsplit=1)[0]
    kcat = ["kcat", "-b", first, "-t", topic, "-C", "-e", "-o", "beginning", "-f", "%s\n"]
    out = subprocess.run(
        [*kcat, "-X", "isolation.level=read_committed"],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    assert sorted(out.split()) == sorted(committed)


def test_a_second_producer_fences_the_first(kafka: str) -> None:
    from confluent_kafka import KafkaException

    topic = "ck-fence"
    create_topic(kafka, topic)
    zombie = txn_producer(kafka, "ck-fence-id")
    zombie.begin_transaction()
    produce(zombie, topic, "zombie")
    winner = txn_producer(kafka, "ck-fence-id")  # bumps the epoch, aborts the zombie's
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(DEADLINE_S)
    assert raised.value.args[0].fatal(), raised.value
    winner.begin_transaction()
    values = produce(winner, topic, "winner")
    winner.commit_transaction(DEADLINE_S)
    assert sorted(read(kafka, topic, N, isolation="read_committed")) == sorted(values)


def test_send_offsets_to_transaction_commits_only_with_the_transaction(kafka: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    source, sink, group = "ck-eos-in", "ck-eos-out", "ck-eos"
    create_topic(kafka, source)
    create_topic(kafka, sink)
    seed = txn_producer(kafka, "ck-eos-seed")
    seed.begin_transaction()
    produce(seed, source, "in")
    seed.commit_transaction(DEADLINE_S)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe([source])
        consumed: list[bytes] = []

        def poll() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                consumed.append(msg.value())
            return len(consumed) >= N

        wait_for(poll, timeout_s=DEADLINE_S, message=f"consumed {len(consumed)} of {N}")
        partitions = [TopicPartition(source, p) for p in (0, 1)]
        positions = consumer.position(partitions)
        wanted = [tp.offset for tp in positions]
        # Past the N/2 records of each; past the commit marker too once it was read.
        assert all(N // 2 <= o <= N // 2 + 1 for o in wanted), wanted

        def committed() -> list[int]:
            return [tp.offset for tp in consumer.committed(partitions, timeout=20)]

        for commit in (False, True):
            producer = txn_producer(kafka, "ck-eos-id")  # one transaction per producer
            producer.begin_transaction()
            produce(producer, sink, "out")
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), DEADLINE_S
            )
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
                assert committed() == [-1001, -1001]  # OFFSET_INVALID: nothing committed
        # OffsetFetch require_stable (KIP-447) waits out the commit's markers.
        wait_for(
            lambda: committed() == wanted,
            timeout_s=DEADLINE_S,
            message="the transaction's offsets were never committed",
        )
    finally:
        consumer.close()


def test_kafka_python_transactions_and_transaction_admin(kafka: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kp-txn"
    create_topic(kafka, topic)
    servers = kafka.split(",")
    expected: list[bytes] = []
    # One producer, several transactions: kafka-python speaks EndTxn v0-3, so it keeps
    # its epoch across transactions (transaction version 1).
    producer = KafkaProducer(bootstrap_servers=servers, transactional_id="kp-txn-id")
    try:
        producer.init_transactions()
        for n, commit in enumerate((True, True, False)):
            producer.begin_transaction()
            values = [f"kp-{n}-{commit}-{i}".encode() for i in range(N)]
            for i, value in enumerate(values):
                producer.send(topic, value=value, partition=i % 2)
            producer.flush(timeout=DEADLINE_S)
            if commit:
                producer.commit_transaction()
                expected += values
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=DEADLINE_S)

    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in (0, 1)])
        seen: list[bytes] = []

        def poll() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
            return len(seen) >= len(expected)

        wait_for(poll, timeout_s=DEADLINE_S, message=f"read {len(seen)} of {len(expected)}")
        consumer.poll(timeout_ms=1000)  # nothing more: the aborted ones follow
        assert sorted(seen) == sorted(expected)
    finally:
        consumer.close()

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:

        def aborted() -> Any:
            (d,) = admin.describe_transactions(["kp-txn-id"]).values()
            return d if d.state.value == "CompleteAbort" else None

        # PrepareAbort until the markers are written.
        wait_for(aborted, timeout_s=DEADLINE_S, message="the transaction never completed")
        described = aborted()
        assert described.producer_id >= 0
        listed = [t for ts in admin.list_transactions().values() for t in ts]
        assert [t.producer_id for t in listed if t.transactional_id == "kp-txn-id"] == [
            described.producer_id
        ]
    finally:
        admin.close()


def test_many_transactions_of_one_producer(kafka: str) -> None:
    """librdkafka speaks EndTxn v0-3 (transaction version 1): it never learns a bumped
    epoch, so the coordinator must not bump it at EndTxn for this client, or its next
    transaction is fenced. Commits and aborts alternate on one producer, and a
    read_committed reader sees exactly the committed ones."""
    topic = "ck-many"
    create_topic(kafka, topic)
    producer = txn_producer(kafka, "ck-many-id")
    committed: list[bytes] = []
    for n, commit in enumerate((True, False, True, True, False)):
        producer.begin_transaction()
        values = produce(producer, topic, f"many-{n}")
        if commit:
            producer.commit_transaction(DEADLINE_S)
            committed += values
        else:
            producer.abort_transaction(DEADLINE_S)
    assert sorted(read(kafka, topic, len(committed), isolation="read_committed")) == sorted(
        committed
    )


def test_kafka_python_send_offsets_to_transaction(kafka: str) -> None:
    """kafka-python's consume-transform-produce: a read_committed group consumer reads
    the input, and a transactional producer writes the output with the consumer's
    offsets (``send_offsets_to_transaction`` with ``group_metadata()``, KIP-447). Aborted,
    neither the output nor the offsets show; committed, both do."""
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    source, sink, group = "kp-eos-in", "kp-eos-out", "kp-eos"
    create_topic(kafka, source)
    create_topic(kafka, sink)
    seed = txn_producer(kafka, "kp-eos-seed")
    seed.begin_transaction()
    produce(seed, source, "in")
    seed.commit_transaction(DEADLINE_S)
    servers = kafka.split(",")

    consumer = KafkaConsumer(
        source,
        bootstrap_servers=servers,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
    )
    producer = KafkaProducer(bootstrap_servers=servers, transactional_id="kp-eos-id")
    try:
        consumed: dict[TopicPartition, list[Any]] = {}

        def poll() -> bool:
            for tp, records in consumer.poll(timeout_ms=500).items():
                consumed.setdefault(tp, []).extend(records)
            return sum(map(len, consumed.values())) >= N

        wait_for(poll, timeout_s=DEADLINE_S, message=f"consumed {consumed} of {N} records")
        offsets = {
            tp: OffsetAndMetadata(records[-1].offset + 1, "", -1)
            for tp, records in consumed.items()
        }
        outputs = [r.value.upper() for records in consumed.values() for r in records]
        producer.init_transactions()
        for commit in (False, True):
            producer.begin_transaction()
            for value in outputs:
                producer.send(sink, value=value)
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
                assert {tp: consumer.committed(tp) for tp in offsets} == dict.fromkeys(offsets)
        wait_for(
            lambda: all(consumer.committed(tp) == o.offset for tp, o in offsets.items()),
            timeout_s=DEADLINE_S,
            message="the transaction's offsets were never committed",
        )
    finally:
        producer.close(timeout=DEADLINE_S)
        consumer.close()

    reader = KafkaConsumer(
        bootstrap_servers=servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        reader.assign([TopicPartition(sink, p) for p in (0, 1)])
        seen: list[bytes] = []

        def read_output() -> bool:
            for records in reader.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
            return len(seen) >= len(outputs)

        wait_for(read_output, timeout_s=DEADLINE_S, message=f"read {len(seen)} of {len(outputs)}")
        reader.poll(timeout_ms=1000)  # nothing more: the aborted copies stay hidden
        assert sorted(seen) == sorted(outputs)
    finally:
        reader.close()
