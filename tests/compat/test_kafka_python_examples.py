"""kafka-python programs, written as kafka-python's documentation and README show them,
run against a real raftka cluster with only their import lines changed
(``kafka`` -> ``raftka``, ``kafka.errors`` -> ``raftka.errors``, ``kafka.admin`` ->
``raftka.admin``, ``kafka.structs`` -> ``raftka.structs``).

Each example is a function in kafka-python's style; the test around it checks what the
program observed. One cluster (3 controllers, 3 brokers) serves the module; each test
uses its own topics and groups. Every wait is bounded (``get(timeout=...)``,
``consumer_timeout_ms``, ``flush(timeout)``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

# --- the changed import lines -----------------------------------------------------
from raftka import KafkaConsumer, KafkaProducer, TopicPartition
from raftka.admin import KafkaAdminClient, NewPartitions, NewTopic
from raftka.errors import (
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NoBrokersAvailable,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftka.structs import OffsetAndMetadata

# ----------------------------------------------------------------------------------
from raftka.testing import RaftkaCluster  # the fixture's type, not the program's

log = logging.getLogger(__name__)
TopicFactory = Callable[..., str]
#: How long an example's consumer waits for the next record before its loop ends.
IDLE_MS = 3_000


def test_producer_readme_example(bootstrap: str, topic: TopicFactory) -> None:
    """kafka-python's README producer: raw bytes with ``future.get(timeout=10)``, keyed
    messages, a JSON value serializer, ``flush()``; the records read back."""
    name = topic(partitions=3)

    def example() -> list[Any]:
        producer = KafkaProducer(bootstrap_servers=[bootstrap])
        # Asynchronous by default
        future = producer.send(name, b"raw_bytes")
        # Block for 'synchronous' sends
        try:
            record_metadata = future.get(timeout=10)
        except KafkaError:
            # Decide what to do if produce request failed...
            log.exception("send failed")
            raise
        # Successful result returns assigned partition and offset
        seen = [(record_metadata.topic, record_metadata.partition, record_metadata.offset)]
        # produce keyed messages to enable hashed partitioning
        producer.send(name, key=b"foo", value=b"bar")
        producer.flush()
        producer.close()
        # encode objects via msgpack... or json
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, value_serializer=lambda m: json.dumps(m).encode("ascii")
        )
        producer.send(name, {"key": "value"})
        # produce asynchronously
        for _ in range(10):
            producer.send(name, {"n": _})
        # block until all async messages are sent
        producer.flush(timeout=10)
        producer.close(timeout=10)
        return seen

    seen = example()
    assert seen[0][0] == name and seen[0][2] == 0
    consumer = KafkaConsumer(
        name, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=IDLE_MS
    )
    values = []
    for message in consumer:
        values.append((message.key, message.value))
        if len(values) == 13:
            break
    consumer.close()
    assert (None, b"raw_bytes") in values and (b"foo", b"bar") in values
    assert (None, b'{"key": "value"}') in values
    assert sum(1 for _, v in values if v.startswith(b'{"n"')) == 10


def test_producer_callbacks_and_errbacks(bootstrap: str, topic: TopicFactory) -> None:
    """``send(...).add_callback(on_send_success).add_errback(on_send_error)``: the
    callback hears every acknowledged record's metadata; a record larger than the
    topic's max.message.bytes fails at the broker and reaches the errback (and
    ``get`` raises it)."""
    name = topic(partitions=1, configs={"max.message.bytes": "1000"})
    successes: list[Any] = []
    errors: list[BaseException] = []

    def on_send_success(record_metadata: Any) -> None:
        successes.append((record_metadata.topic, record_metadata.partition, record_metadata.offset))

    def on_send_error(excp: BaseException) -> None:
        log.error("I am an errback", exc_info=excp)
        errors.append(excp)

    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=5)
    for i in range(5):
        producer.send(name, b"raw_bytes-%d" % i).add_callback(on_send_success).add_errback(
            on_send_error
        )
    producer.flush(timeout=20)
    # (Alone in its batch: raftka's producer does not split a batch the broker
    # refuses as too large, so records batched with it would fail too.)
    too_big = producer.send(name, b"x" * 5_000)
    too_big.add_callback(on_send_success).add_errback(on_send_error)
    # block until all async messages are sent
    producer.flush(timeout=20)
    assert too_big.failed() and not too_big.succeeded() and too_big.is_done
    with pytest.raises(MessageSizeTooLargeError):
        too_big.get(timeout=1)
    producer.close()
    assert sorted(successes) == [(name, 0, i) for i in range(5)]
    assert len(errors) == 1 and isinstance(errors[0], MessageSizeTooLargeError)
    assert producer.metrics()["producer-metrics"]["record-error-total"] == 1


def test_consumer_group_iteration_with_consumer_timeout(
    bootstrap: str, topic: TopicFactory
) -> None:
    """kafka-python's README consumer: a group member iterating with a JSON value
    deserializer, ending after ``consumer_timeout_ms`` without records; its
    auto-commit at close lets a second member of the group start after them."""
    name = topic(partitions=3)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, value_serializer=lambda v: json.dumps(v).encode()
    )
    for i in range(30):
        producer.send(name, {"i": i}, key=b"k%d" % (i % 5))
    producer.flush(timeout=20)

    def example() -> list[Any]:
        # To consume latest messages and auto-commit offsets
        consumer = KafkaConsumer(
            name,
            group_id="my-group",
            bootstrap_servers=[bootstrap],
            auto_offset_reset="earliest",
            value_deserializer=lambda m: json.loads(m.decode("ascii")),
            consumer_timeout_ms=IDLE_MS,
        )
        got = []
        for message in consumer:
            # message value and key are raw bytes -- decode if necessary!
            # e.g., for unicode: `message.value.decode('utf-8')`
            log.info(
                "%s:%d:%d: key=%s value=%s",
                message.topic,
                message.partition,
                message.offset,
                message.key,
                message.value,
            )
            got.append(message.value["i"])
        consumer.close()
        return got

    started = time.monotonic()
    assert sorted(example()) == list(range(30))
    assert time.monotonic() - started >= IDLE_MS / 1000  # ended by consumer_timeout_ms
    producer.send(name, {"i": 30})
    producer.close(timeout=10)
    again = KafkaConsumer(
        name, group_id="my-group", bootstrap_servers=bootstrap, consumer_timeout_ms=IDLE_MS
    )
    assert json.loads(next(again).value)["i"] == 30
    again.close()


def test_manual_commits_sync_and_async(bootstrap: str, topic: TopicFactory) -> None:
    """``enable_auto_commit=False``: ``commit()`` after processing, ``commit_async``
    with a callback, and an explicit ``commit({tp: OffsetAndMetadata(offset + 1,
    None, -1)})``; ``committed(tp)`` reads each back, and a restarted member resumes
    from the last one."""
    name = topic(partitions=1)
    tp = TopicPartition(name, 0)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send(name, b"m%d" % i)
    producer.flush(timeout=20)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="manual",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=IDLE_MS,
    )
    consumer.subscribe([name])
    processed = []
    for message in consumer:
        processed.append(message.offset)
        if message.offset == 3:
            consumer.commit()  # synchronous: everything read so far
            assert consumer.committed(tp) == 4
        if message.offset == 6:
            break
    callbacks: list[Any] = []
    future = consumer.commit_async(callback=lambda offsets, response: callbacks.append(offsets))
    future.get(timeout=20)
    assert [{p: o.offset for p, o in offsets.items()} for offsets in callbacks] == [{tp: 7}]
    assert consumer.committed(tp) == 7
    message = next(consumer)
    assert message.offset == 7
    consumer.commit({tp: OffsetAndMetadata(message.offset + 1, None, -1)})
    assert consumer.committed(tp, metadata=True).offset == 8
    consumer.close()
    assert processed == list(range(7))
    restarted = KafkaConsumer(
        name, bootstrap_servers=bootstrap, group_id="manual", consumer_timeout_ms=IDLE_MS
    )
    assert [m.offset for m in restarted] == [8, 9]
    restarted.close(autocommit=True)


def test_stopping_iteration_early_loses_nothing(bootstrap: str, topic: TopicFactory) -> None:
    """Iteration fetches whole batches (up to max_poll_records per poll) but hands
    records over one at a time: a group member that breaks out of its loop after 50
    of 300 records, then ``poll``s, gets the 51st next (not the next batch); its
    ``position`` and auto-commit at ``close`` count only records handed over; a second
    member then reads exactly the rest. Every record is read once: none lost, none
    read twice."""
    name = topic(partitions=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(300):
        producer.send(name, b"%d" % i, partition=i % 3)
    producer.flush(timeout=20)
    producer.close()

    def member() -> KafkaConsumer:
        return KafkaConsumer(
            name,
            group_id="early-stop",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=IDLE_MS,
        )

    first = member()
    seen: list[tuple[int, int]] = []
    for message in first:
        seen.append((message.partition, message.offset))
        if len(seen) == 50:
            break
    partition, offset = seen[-1]
    tp = TopicPartition(name, partition)
    assert first.position(tp) == offset + 1  # not the end of the fetched batch
    for message in first:  # iterating again resumes right after the break
        seen.append((message.partition, message.offset))
        if len(seen) == 60:
            break
    polled = first.poll(timeout_ms=10_000, max_records=5)
    seen += [(m.partition, m.offset) for ms in polled.values() for m in ms]
    assert len(seen) == 65
    message = next(first)
    seen.append((message.partition, message.offset))
    first.close()  # auto-commit: the positions after the 66 records handed over
    second = member()
    seen += [(m.partition, m.offset) for m in second]
    second.close()
    assert sorted(seen) == sorted((i % 3, i // 3) for i in range(300))


def test_assign_seek_and_offset_lookups(bootstrap: str, topic: TopicFactory) -> None:
    """Manual assignment without a group: ``beginning_offsets`` / ``end_offsets``,
    ``offsets_for_times`` then ``seek`` to the offset found, ``position``,
    ``seek_to_beginning`` / ``seek_to_end``, ``highwater``, ``partitions_for_topic``,
    ``topics()``, ``bootstrap_connected()``."""
    name = topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
    for i in range(10):
        producer.send(name, b"%d" % i, partition=0, timestamp_ms=(i + 1) * 1000)
    producer.flush(timeout=20)
    assert producer.partitions_for(name) == {0, 1}
    assert producer.bootstrap_connected()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=IDLE_MS)
    assert consumer.bootstrap_connected()
    assert name in consumer.topics()
    assert consumer.partitions_for_topic(name) == {0, 1}
    assert consumer.partitions_for_topic("no-such-topic") is None
    tp = TopicPartition(name, 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: 4500})[tp]
    assert (found.offset, found.timestamp) == (4, 5000)
    assert consumer.offsets_for_times({tp: 99_000}) == {tp: None}
    consumer.seek(tp, found.offset)
    assert consumer.position(tp) == 4
    msg = next(consumer)
    assert (msg.offset, msg.value, msg.timestamp) == (4, b"4", 5000)
    consumer.seek_to_beginning(tp)
    assert next(consumer).offset == 0
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 10
    assert consumer.poll(timeout_ms=200) == {}
    assert consumer.highwater(tp) == 10
    consumer.close()


def test_admin_create_and_delete_topics(bootstrap: str, request: pytest.FixtureRequest) -> None:
    """KafkaAdminClient: ``create_topics([NewTopic(...)])`` with topic_configs, the
    second attempt raising TopicAlreadyExistsError, ``list_topics``,
    ``describe_topics``, ``create_partitions``, ``delete_topics``."""
    admin_client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test")
    # Closed even when an assertion fails: an unclosed client's session is reported
    # (ResourceWarning, an error here) by whichever later test the collector runs in.
    request.addfinalizer(admin_client.close)
    topic_list = [
        NewTopic(name="example_topic", num_partitions=1, replication_factor=3),
        NewTopic(
            name="example_compacted",
            num_partitions=2,
            replication_factor=2,
            topic_configs={"cleanup.policy": "compact"},
        ),
    ]
    admin_client.create_topics(new_topics=topic_list, validate_only=False)
    with pytest.raises(TopicAlreadyExistsError):
        admin_client.create_topics([NewTopic("example_topic", 1, 1)])
    # As in Kafka, a created topic reaches the brokers' metadata a moment after the
    # controller commits it (the broker opens its logs first): wait for it.
    deadline = time.monotonic() + 20
    while not {"example_topic", "example_compacted"} <= set(admin_client.list_topics()):
        assert time.monotonic() < deadline, "the created topics never reached list_topics"

    def describe(name: str) -> dict[str, Any]:
        # Each call may ask another broker, one that has not caught up yet.
        while True:
            try:
                (one,) = admin_client.describe_topics([name])
                return one
            except UnknownTopicOrPartitionError:
                assert time.monotonic() < deadline, f"describe_topics never found {name}"

    described = describe("example_compacted")
    assert described["topic"] == "example_compacted"
    assert [len(p["replicas"]) for p in described["partitions"]] == [2, 2]
    admin_client.create_partitions({"example_topic": NewPartitions(total_count=3)})
    deadline = time.monotonic() + 20
    while len(describe("example_topic")["partitions"]) != 3:
        assert time.monotonic() < deadline, "example_topic did not grow to 3 partitions"
    admin_client.delete_topics(["example_topic", "example_compacted"])
    while {"example_topic", "example_compacted"} & set(admin_client.list_topics()):
        assert time.monotonic() < deadline, "the topics were not deleted"
    admin_client.close()


def test_no_broker_times_out_as_kafka_python_programs_expect() -> None:
    """No broker at the address: the first ``send`` raises within ``max_block_ms``, as
    kafka-python's KafkaTimeoutError (which raftka also names NoBrokersAvailable)."""
    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1", max_block_ms=500)
    assert not producer.bootstrap_connected()
    try:
        producer.send("anything", b"x")
    except NoBrokersAvailable as e:
        assert isinstance(e, KafkaTimeoutError)
    else:
        raise AssertionError("send to no broker did not fail")
    finally:
        producer.close()


def test_pattern_subscription_and_earliest_without_commits(cluster: RaftkaCluster) -> None:
    """README: ``consumer.subscribe(pattern='^awesome.*')`` in a group (every matching
    topic, none other), and "consume earliest available messages, don't commit
    offsets" (``enable_auto_commit=False``) for a groupless pattern consumer."""
    prefix = cluster.unique_name("awesome")
    names = [cluster.create_topic(f"{prefix}-{i}", partitions=2) for i in range(2)]
    other = cluster.create_topic(cluster.unique_name("boring"))
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    for name in [*names, other]:
        for i in range(3):
            producer.send(name, b"%s-%d" % (name.encode(), i), partition=0)
    producer.flush(timeout=20)
    producer.close()

    def read(consumer: KafkaConsumer) -> list[str]:
        topics = []
        for message in consumer:
            topics.append(message.topic)
            if len(topics) == 6:
                break
        consumer.close()
        return sorted(topics)

    # Use multiple consumers in parallel... here one member of a group
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="pattern-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=IDLE_MS,
    )
    consumer.subscribe(pattern=f"^{prefix}.*")
    assert read(consumer) == sorted(names * 3)
    # consume earliest available messages, don't commit offsets
    groupless = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=IDLE_MS,
    )
    groupless.subscribe(pattern=f"^{prefix}.*")
    assert read(groupless) == sorted(names * 3)
