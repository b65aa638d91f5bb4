"""Kafka's ``ConsumerRebalanceListener`` and ``ConsumerGroupMetadata``.

The listener's methods run inside ``poll`` (and ``close``/``unsubscribe``), on the
consumer's event loop: with :class:`~raftka.client.consumer.consumer.AsyncConsumer`
they may be coroutines (awaited); with the blocking ``Consumer`` they run on its loop
thread while the caller's ``poll`` waits, and may call the consumer's ``seek*``,
``pause``/``resume``, ``assignment`` and ``group_metadata`` (not its blocking network
calls such as ``commit``, ``committed`` or ``position``: those belong to the async face
inside a listener).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from raftka.client.structs import TopicPartition

__all__ = ["ConsumerGroupMetadata", "ConsumerRebalanceListener"]


class ConsumerRebalanceListener:
    """Override the callbacks you need; each may return an awaitable (async consumer)."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Awaitable[None] | None:
        """Before a rebalance takes ``revoked`` away (EAGER: everything, before the
        rejoin; COOPERATIVE: what the new assignment no longer holds) and on close.
        Commit here what was processed: the new owner starts from the committed offset."""
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Awaitable[None] | None:
        """After a rebalance, with the partitions added (EAGER: the whole assignment).
        ``seek`` here decides where consumption starts."""
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Awaitable[None] | None:
        """The partitions were already given to others (the session expired or the
        generation is gone): committing is no longer possible. By default the same as
        ``on_partitions_revoked`` (Kafka's default)."""
        return self.on_partitions_revoked(lost)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Who this consumer is in its group right now (Kafka's ConsumerGroupMetadata)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
