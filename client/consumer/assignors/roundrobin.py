"""Kafka's RoundRobinAssignor (protocol name ``roundrobin``).

All partitions of all subscribed topics, sorted by topic then partition, are dealt in
turn to the members in Kafka's member order (static members by ``group.instance.id``
first, then by member id), going round in a circle. A member not subscribed to a
partition's topic is passed over, and the circle resumes after the member that took the
partition. With identical subscriptions the sizes differ by at most one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from raftka.client.consumer.assignors.base import PartitionAssignor, Subscription, member_order
from raftka.client.structs import TopicPartition

__all__ = ["RoundRobinAssignor", "roundrobin_assign"]


def roundrobin_assign(
    members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """The round-robin assignment as plain lists (every member present, maybe empty)."""
    ordered = member_order(members)
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not ordered:
        return result
    subscribed = {m: frozenset(members[m].topics) for m in ordered}
    cursor = 0
    for topic in sorted(partitions_per_topic):
        if not any(topic in topics for topics in subscribed.values()):
            continue
        for p in range(partitions_per_topic[topic]):
            # Some member takes it: at least one is subscribed, so this ends within one lap.
            while topic not in subscribed[ordered[cursor]]:
                cursor = (cursor + 1) % len(ordered)
            result[ordered[cursor]].append(TopicPartition(topic, p))
            cursor = (cursor + 1) % len(ordered)
    return result


class RoundRobinAssignor(PartitionAssignor):
    name: ClassVar[str] = "roundrobin"

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        return roundrobin_assign(members, partitions_per_topic)
