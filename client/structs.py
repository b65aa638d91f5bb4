"""Kafka's client value types: small, immutable, hashable.

Names and field order follow Kafka's Java client (``TopicPartition``,
``OffsetAndMetadata``, ``ConsumerRecord``, ``RecordMetadata``, ``NewTopic``, ...) and the
Python clients that users already know (kafka-python, aiokafka), so code written against
those reads the same here. Field names keep Kafka's spelling (``timestamp``, not
``timestamp_ms``) for that reason; every timestamp is milliseconds since the epoch.

Types that Kafka orders (``TopicPartition``: by topic, then partition, which is the order
every assignor sorts by) are ``NamedTuple`` so comparison comes for free and matches
that order. The others are frozen, slotted dataclasses: equality and hashing by value,
no ordering, because Kafka gives them none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, NamedTuple

from raftka.common.record.batch import Header
from raftka.common.record.header import TimestampType
from raftka.common.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "BROKER_DEFAULT",
    "NO_TIMESTAMP",
    "ConsumerRecord",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]

#: ``num_partitions`` / ``replication_factor`` of -1 asks the broker for its default
#: (``num.partitions``, ``default.replication.factor``), as CreateTopics v4+ allows.
BROKER_DEFAULT: Final = -1
#: Kafka's RecordBatch.NO_TIMESTAMP.
NO_TIMESTAMP: Final = -1


class OffsetAndTimestamp(NamedTuple):
    """The answer to ``offsets_for_times``: the earliest offset whose timestamp is at least
    the one asked for, that record's timestamp and its leader epoch."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None


class ConsumerRecord(NamedTuple):
    """One record as a consumer returns it.

    ``serialized_key_size`` / ``serialized_value_size`` are -1 for a null key/value, as in
    Kafka. ``leader_epoch`` is the batch's partition leader epoch (``None`` if unknown).
    A named tuple, as in kafka-python: immutable, and one is built per record, which a
    tuple does several times faster than a frozen dataclass.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 when acks=0 (the broker says
    nothing), and ``timestamp`` is the broker's LogAppendTime when the topic uses it,
    otherwise the record's CreateTime. A named tuple (kafka-python's shape; one per
    record, so its construction cost counts)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _frozen_configs(configs: Mapping[str, str | None]) -> Mapping[str, str | None]:
    return MappingProxyType(dict(configs))


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Admin.create_topics).

    Either ``num_partitions``/``replication_factor`` (each -1 for the broker default) or an
    explicit ``replica_assignment`` ({partition: [broker ids, preferred leader first]}),
    as Kafka's NewTopic: giving both is rejected here rather than by the broker.
    ``configs`` are topic configs by Kafka name (``cleanup.policy``...). The object is
    hashable: the mappings are frozen copies and hash by their items.
    """

    name: str
    num_partitions: int = BROKER_DEFAULT
    replication_factor: int = BROKER_DEFAULT
    replica_assignment: Mapping[int, tuple[int, ...]] | None = None
    configs: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("topic name must not be empty")
        if self.replica_assignment is not None:
            if self.num_partitions != BROKER_DEFAULT or self.replication_factor != BROKER_DEFAULT:
                raise ValueError(
                    "give either replica_assignment or num_partitions/replication_factor"
                )
            frozen = {int(p): tuple(r) for p, r in self.replica_assignment.items()}
            object.__setattr__(self, "replica_assignment", MappingProxyType(frozen))
        else:
            if self.num_partitions == 0 or self.num_partitions < BROKER_DEFAULT:
                raise ValueError(f"num_partitions must be >= 1 or -1, not {self.num_partitions}")
            if self.replication_factor == 0 or self.replication_factor < BROKER_DEFAULT:
                raise ValueError(
                    f"replication_factor must be >= 1 or -1, not {self.replication_factor}"
                )
        object.__setattr__(self, "configs", _frozen_configs(self.configs))

    def __hash__(self) -> int:
        assignment = (
            None
            if self.replica_assignment is None
            else tuple(sorted(self.replica_assignment.items()))
        )
        return hash(
            (
                self.name,
                self.num_partitions,
                self.replication_factor,
                assignment,
                tuple(sorted(self.configs.items())),
            )
        )


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow a topic to ``total_count`` partitions (Admin.create_partitions). Kafka's
    ``NewPartitions.increaseTo(total, assignments)``: ``new_assignments`` lists, for each
    new partition in order, its replicas (``None``: the controller chooses)."""

    total_count: int
    new_assignments: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.total_count < 1:
            raise ValueError(f"total_count must be >= 1, not {self.total_count}")
        if self.new_assignments is not None:
            object.__setattr__(
                self, "new_assignments", tuple(tuple(r) for r in self.new_assignments)
            )


@dataclass(frozen=True, slots=True, order=True)
class Node:
    """A broker as metadata names it. ``rack`` is ``broker.rack`` or ``None``."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's placement, as metadata reports it (Kafka's PartitionInfo /
    TopicPartitionInfo). ``leader`` is ``None`` while no leader is elected; ``replicas``,
    ``isr``, ``offline_replicas`` and ``elr`` are broker ids. ``elr`` is KIP-966's
    eligible leader replicas (Kafka's ``TopicPartitionInfo.elr()``): replicas out of
    the ISR that still hold every record below the high watermark."""

    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """Admin.describe_topics: a topic, its id, whether it is internal (such as
    ``__consumer_offsets``), and its partitions in partition order."""

    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]

    def __post_init__(self) -> None:
        numbers = [p.partition for p in self.partitions]
        assert numbers == sorted(numbers), "partitions must be in partition order"
        assert all(p.topic == self.name for p in self.partitions)
