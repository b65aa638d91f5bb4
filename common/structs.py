"""The value types that clients and servers both speak of.

Names and field order are Kafka's (``TopicPartition``, ``OffsetAndMetadata``). They are
``NamedTuple`` so that ordering comes for free and matches Kafka's (by topic, then
partition: the order every assignor sorts by), and so that building one per record or
per partition stays cheap. Client-only values (``ConsumerRecord``, ``NewTopic``, ...)
live in :mod:`raftka.client.structs`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["OffsetAndMetadata", "TopicPartition"]


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
