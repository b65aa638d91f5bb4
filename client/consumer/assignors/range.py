"""Kafka's RangeAssignor (protocol name ``range``).

Topic by topic: the members subscribed to the topic, in Kafka's member order (static
members by ``group.instance.id`` first, then the rest by member id), each get one
consecutive range of partitions; with ``n`` partitions and ``c`` members each gets
``n // c`` and the first ``n % c`` members one more. Because every topic starts again
from the first member, members early in the order can end with more partitions overall;
that is Kafka's behaviour (and what makes co-partitioned joins line up), not a bug.
Kafka 3.5's rack-aware variant (KIP-881) is not implemented: raftka ignores racks here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from raftka.client.consumer.assignors.base import PartitionAssignor, Subscription, member_order
from raftka.client.structs import TopicPartition

__all__ = ["RangeAssignor", "range_assign"]


def range_assign(
    members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """The range assignment as plain lists (every member present, maybe empty)."""
    ordered = member_order(members)
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(partitions_per_topic):
        consumers = [m for m in ordered if topic in members[m].topics]
        if not consumers:
            continue
        n = partitions_per_topic[topic]
        share, extra = divmod(n, len(consumers))
        start = 0
        for i, member in enumerate(consumers):
            length = share + (1 if i < extra else 0)
            result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
        assert start == n
    return result


class RangeAssignor(PartitionAssignor):
    name: ClassVar[str] = "range"

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        return range_assign(members, partitions_per_topic)
