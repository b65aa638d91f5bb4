"""The value types that clients and servers both speak of.

Names and field order are Kafka's (``TopicPartition``, ``OffsetAndMetadata``). They are
``NamedTuple`` so that ordering comes for free and matches Kafka's (by topic, then
partition: the order every assignor sorts by), and so that building one per record or
per partition stays cheap. Client-only values (``ConsumerRecord``, ``NewTopic``, ...)
live in :mod:`raftka.client.structs`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["EpochEndOffset", "OffsetAndMetadata", "TopicPartition"]


class TopicPartition(NamedTuple):
    """A partition of a topic. Ordered by (topic, partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's TopicPartition.toString: "topic-3".
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, with optional metadata text and the
    leader epoch of the last record consumed (KIP-320; ``None`` when unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class EpochEndOffset(NamedTuple):
    """Where a leader epoch ends in a log (exclusive): what OffsetForLeaderEpoch answers
    and where a diverging follower truncates, for topic partitions and the Raft log
    alike. Epoch 0 with end offset 0 means "no entry of any epoch at or below the one
    asked"."""

    epoch: int
    end_offset: int
