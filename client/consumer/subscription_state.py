"""What a consumer holds per assigned partition: Kafka's SubscriptionState.

The assignment (manual or from the group) and, per partition, its fetch position, pause
flag, pending offset reset, last known high watermark and the leader epoch of the last
record consumed (KIP-320). The fetcher reads and moves positions; the coordinator
replaces the assignment on a rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftka.client.structs import TopicPartition
from raftka.common.errors import IllegalStateError

__all__ = ["SubscriptionState", "TopicPartitionState"]


@dataclass(slots=True)
class TopicPartitionState:
    position: int | None = None
    paused: bool = False
    #: The strategy to reset with ("earliest"/"latest"), or None to use
    #: auto_offset_reset when the position is None.
    reset_to: str | None = None
    high_watermark: int = -1
    #: The last stable offset the last fetch reported (Kafka's LSO; -1 before any).
    last_stable_offset: int = -1
    leader_epoch: int | None = None


@dataclass(slots=True)
class SubscriptionState:
    assignment: dict[TopicPartition, TopicPartitionState] = field(default_factory=dict)

    def assign(self, tps: list[TopicPartition]) -> None:
        old = self.assignment
        self.assignment = {tp: old.get(tp) or TopicPartitionState() for tp in tps}

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        s = self.assignment.get(tp)
        if s is None:
            raise IllegalStateError(f"no current assignment for partition {tp}")
        return s

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is not None and not s.paused]

    def needing_reset(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is None]
