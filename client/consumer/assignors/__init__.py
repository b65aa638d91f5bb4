"""Kafka's consumer partition assignors: ``range``, ``roundrobin``, ``sticky`` and
``cooperative-sticky``, with Kafka's names and Kafka's answers (see each module)."""

from typing import Final

from raftka.client.consumer.assignors.base import (
    DEFAULT_GENERATION,
    Assignment,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raftka.client.consumer.assignors.cooperative_sticky import CooperativeStickyAssignor
from raftka.client.consumer.assignors.range import RangeAssignor
from raftka.client.consumer.assignors.roundrobin import RoundRobinAssignor
from raftka.client.consumer.assignors.sticky import StickyAssignor

#: Assignors by protocol name.
ASSIGNORS: Final[dict[str, type[PartitionAssignor]]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}
#: Kafka 3.x's ``partition.assignment.strategy`` default: range, then cooperative-sticky
#: (a group can move to cooperative-sticky with one rolling bounce that drops range).
DEFAULT_ASSIGNMENT_STRATEGY: Final[tuple[str, ...]] = ("range", "cooperative-sticky")


def assignor_for(name: str) -> PartitionAssignor:
    """A fresh assignor for a protocol name; ValueError for an unknown one."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(
            f"unknown partition assignor {name!r}; known: {sorted(ASSIGNORS)}"
        ) from None


__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNMENT_STRATEGY",
    "DEFAULT_GENERATION",
    "Assignment",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "assignor_for",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]
