"""Kafka's CooperativeStickyAssignor (protocol name ``cooperative-sticky``).

The sticky assignment (:mod:`.sticky`), made safe for the cooperative rebalance
protocol (KIP-429): a partition that the sticky assignment moves from a member that
still owns it to a different member is left out of this round's assignment. Its owner,
seeing it missing from its new assignment, revokes it and rejoins; in the follow-up
rebalance nobody owns it any more and it goes to its new member. So no partition is
ever assigned to a new owner while its old owner may still be consuming it.

Which partitions move: from the constrained algorithm, those it took from a member's
owned partitions beyond that member's quota, and those claimed by two members of one
generation; from the general algorithm, those in one member's new assignment that it
did not own while another member owned them (computed from ``owned_partitions``).
A partition whose previous owner has left the group moves at once: there is nothing to
revoke.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from raftka.client.consumer.assignors.base import (
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
)
from raftka.client.consumer.assignors.sticky import sticky_assign
from raftka.client.structs import TopicPartition

__all__ = ["CooperativeStickyAssignor", "cooperative_sticky_assign"]


def _transferring_from_owned(
    members: Mapping[str, Subscription], assignment: Mapping[str, Sequence[TopicPartition]]
) -> dict[TopicPartition, str]:
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, assigned in assignment.items():
        owned = set(members[member].owned_partitions)
        now = set(assigned)
        added.update((tp, member) for tp in assigned if tp not in owned)
        revoked.update(owned - now)
    return {tp: m for tp, m in added.items() if tp in revoked}


def cooperative_sticky_assign(
    members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """The sticky assignment minus the partitions changing owner in this round."""
    result = sticky_assign(members, partitions_per_topic)
    transferring = result.transferring
    if transferring is None:
        transferring = _transferring_from_owned(members, result.assignment)
    return {
        member: [tp for tp in tps if transferring.get(tp) != member]
        for member, tps in result.assignment.items()
    }


class CooperativeStickyAssignor(PartitionAssignor):
    name: ClassVar[str] = "cooperative-sticky"
    rebalance_protocols: ClassVar[tuple[str, ...]] = (
        RebalanceProtocol.COOPERATIVE,
        RebalanceProtocol.EAGER,
    )

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        return cooperative_sticky_assign(members, partitions_per_topic)
