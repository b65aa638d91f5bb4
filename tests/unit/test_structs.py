"""Client value types: immutable, hashable, ordered where Kafka orders them.

Each check builds values and compares, hashes, sorts or tries to mutate them; the
validation checks feed NewTopic/NewPartitions the inputs Kafka's Admin rejects.
"""

from __future__ import annotations

import pytest

from raftka.client.structs import (
    ConsumerRecord,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionInfo,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)
from raftka.common.record.header import TimestampType


def test_topic_partition_orders_by_topic_then_partition() -> None:
    """Sorting uses (topic, partition), numerically: the assignors depend on it."""
    tps = [TopicPartition("b", 0), TopicPartition("a", 10), TopicPartition("a", 2)]
    assert sorted(tps) == [TopicPartition("a", 2), TopicPartition("a", 10), TopicPartition("b", 0)]
    assert str(TopicPartition("orders", 3)) == "orders-3"
    assert len({TopicPartition("a", 1), TopicPartition("a", 1)}) == 1


def test_offset_and_metadata_defaults() -> None:
    """metadata defaults to "" and leader_epoch to None, as in Kafka."""
    om = OffsetAndMetadata(42)
    assert (om.offset, om.metadata, om.leader_epoch) == (42, "", None)
    assert hash(om) == hash(OffsetAndMetadata(42, "", None))


def test_records_are_frozen_and_hashable() -> None:
    """ConsumerRecord and RecordMetadata refuse mutation and hash by value."""
    rec = ConsumerRecord(
        topic="t",
        partition=1,
        offset=7,
        timestamp=1000,
        timestamp_type=TimestampType.CREATE_TIME,
        key=b"k",
        value=None,
        headers=(("h", b"v"),),
        serialized_key_size=1,
    )
    assert rec.topic_partition == TopicPartition("t", 1)
    assert rec.serialized_value_size == -1
    assert hash(rec) == hash(rec._replace()) and rec == rec._replace()
    assert rec._replace(offset=8) != rec
    with pytest.raises(AttributeError):
        rec.offset = 8  # type: ignore[misc]
    meta = RecordMetadata("t", 0, 5, 99)
    assert meta.topic_partition == TopicPartition("t", 0)
    assert (meta.serialized_key_size, meta.serialized_value_size) == (-1, -1)
    assert not hasattr(meta, "__dict__")  # a tuple: no per-instance dict
    with pytest.raises(AttributeError):
        meta.offset = 6  # type: ignore[misc]


def test_new_topic_defaults_ask_for_broker_defaults_and_hash() -> None:
    """-1/-1 asks the broker's defaults; configs are frozen so the value is hashable."""
    topic = NewTopic("orders", configs={"cleanup.policy": "compact"})
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert hash(topic) == hash(NewTopic("orders", configs={"cleanup.policy": "compact"}))
    with pytest.raises(TypeError):
        topic.configs["x"] = "y"  # type: ignore[index]
    explicit = NewTopic("t", replica_assignment={0: [1, 2], 1: [2, 3]})  # type: ignore[dict-item]
    assert explicit.replica_assignment == {0: (1, 2), 1: (2, 3)}
    assert hash(explicit) == hash(NewTopic("t", replica_assignment={0: (1, 2), 1: (2, 3)}))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": ""},
        {"name": "t", "num_partitions": 0},
        {"name": "t", "num_partitions": -2},
        {"name": "t", "replication_factor": 0},
        {"name": "t", "num_partitions": 3, "replica_assignment": {0: (1,)}},
    ],
)
def test_new_topic_rejects_invalid(kwargs: dict[str, object]) -> None:
    """Empty names, zero counts and counts given together with an assignment."""
    with pytest.raises(ValueError):
        NewTopic(**kwargs)  # type: ignore[arg-type]


def test_new_partitions() -> None:
    """total_count must be positive; assignments become nested tuples."""
    np_ = NewPartitions(6, new_assignments=[[1, 2], [2, 3]])  # type: ignore[arg-type]
    assert np_.new_assignments == ((1, 2), (2, 3))
    hash(np_)
    with pytest.raises(ValueError):
        NewPartitions(0)


def test_topic_description_requires_partition_order() -> None:
    """A description lists its own topic's partitions in order."""
    p0 = PartitionInfo("t", 0, leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2))
    p1 = PartitionInfo("t", 1, leader=None, leader_epoch=0, replicas=(2, 3), isr=())
    desc = TopicDescription("t", "id", is_internal=False, partitions=(p0, p1))
    assert desc.partitions[1].topic_partition == TopicPartition("t", 1)
    with pytest.raises(AssertionError):
        TopicDescription("t", "id", is_internal=False, partitions=(p1, p0))
