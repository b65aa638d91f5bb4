"""Leader election and ISR changes for one partition, as a pure builder.

Theory of operation
-------------------
Every change the controller makes to a partition's leader or ISR goes through
:class:`PartitionChangeBuilder` (Kafka's class of the same name): it starts from the
current :class:`PartitionRegistration`, takes a target ISR and an election kind, and
``build()`` returns the one :class:`PartitionChangeRecord` that gets there, or None when
nothing would change. Records name a leader only when the leader changes, so the leader
epoch grows exactly on leadership changes; the partition epoch grows with every record.

Election rules (``is_acceptable_leader`` says which brokers may lead: registered,
unfenced and not in controlled shutdown, minus any broker being removed):

* ``ANY``: keep the current leader if it is in the target ISR and acceptable; else the
  first acceptable ISR member in replica order; else the first acceptable eligible
  leader replica (ELR, below) in replica order, with the ISR restarting from it; else,
  when unclean election is enabled, the first acceptable replica in replica order, with
  the ISR reset to just that replica (records it did not have may be lost: that is what
  "unclean" means); else NO_LEADER.
* ``PREFERRED``: the first replica if it is in the target ISR and acceptable, otherwise
  as ``ANY``.

The builder never empties an ISR: when the target ISR is empty the current one is kept
(Kafka keeps the last member of the ISR so that nothing acknowledged is forgotten; the
partition then has no leader until that member returns). The leader, when there is one,
is always a member of the resulting ISR.

Eligible leader replicas (KIP-966, on by default in Kafka 4.1 clusters)
-----------------------------------------------------------------------
A partition's high watermark advances only while its ISR has at least
``min.insync.replicas`` members (the leader enforces that). So a replica that leaves
the ISR while the ISR is *below* that size still holds every record below the high
watermark, and can lead without losing an acknowledged record. Such replicas are the
ELR: whenever a change leaves the ISR smaller than ``min_isr``, the ELR becomes (old
ELR + old ISR) - new ISR; when the ISR is back at ``min_isr`` or more, the ELR is
emptied; an unclean election empties it too. A fenced ELR member stays in the ELR (it
still has the records), and the controller removes a broker from every ELR when it
registers after an unclean shutdown (its unflushed records may be gone).

Without this, an ISR that shrank to its leader (both followers briefly slow) leaves the
partition with no leader for as long as that one broker is down, although both
followers hold every committed record. raftka differs from Kafka in one detail: Kafka
empties the ISR when its last member is fenced and moves that member to the ELR;
raftka keeps that member in the ISR (the rule above) and consults the ELR when no ISR
member is acceptable, which elects the same leaders.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from raftka.metadata.image import PartitionRegistration
from raftka.metadata.metadata_records import NO_LEADER, NO_LEADER_CHANGE, PartitionChangeRecord

__all__ = ["Election", "ElectionResult", "PartitionChangeBuilder", "next_elr"]


class Election(enum.Enum):
    ANY = "any"
    PREFERRED = "preferred"
    #: Only as an ElectLeaders request's type (the builder takes unclean_election).
    UNCLEAN = "unclean"


class ElectionResult:
    """The leader an election chose and whether it was unclean (outside the ISR)."""

    __slots__ = ("from_elr", "leader", "unclean")

    def __init__(self, leader: int, unclean: bool, *, from_elr: bool = False) -> None:
        self.leader = leader
        self.unclean = unclean
        self.from_elr = from_elr


class PartitionChangeBuilder:
    """Computes the PartitionChangeRecord for one partition (see the module doc)."""

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: str,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        *,
        unclean_election: bool = False,
        min_isr: int = 1,
    ) -> None:
        """``min_isr`` is the topic's min.insync.replicas: below it the ELR is kept."""
        self._partition = partition
        self._min_isr = min_isr
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._acceptable = is_acceptable_leader
        self._unclean = unclean_election
        self._target_isr: tuple[int, ...] = partition.isr
        self._election = Election.ANY

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        target = tuple(isr)
        assert set(target) <= set(self._partition.replicas), (target, self._partition)
        self._target_isr = target
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self._election = election
        return self

    def _valid_clean_leader(self, broker_id: int) -> bool:
        return broker_id in self._target_isr and self._acceptable(broker_id)

    def elect(self, isr: tuple[int, ...]) -> ElectionResult:
        """The leader this builder would choose with ``isr`` as the target ISR."""
        replicas = self._partition.replicas
        current = self._partition.leader
        in_isr = [r for r in replicas if r in isr and self._acceptable(r)]
        if self._election is Election.PREFERRED and replicas[0] in in_isr:
            return ElectionResult(replicas[0], False)
        if current != NO_LEADER and current in in_isr:
            return ElectionResult(current, False)
        if in_isr:
            return ElectionResult(in_isr[0], False)
        elr = next_elr(self._partition, isr, self._min_isr)
        in_elr = [r for r in replicas if r in elr and self._acceptable(r)]
        if in_elr:
            return ElectionResult(in_elr[0], False, from_elr=True)
        if self._unclean:
            for replica in replicas:
                if self._acceptable(replica):
                    return ElectionResult(replica, True)
        return ElectionResult(NO_LEADER, False)

    def build(self) -> PartitionChangeRecord | None:
        """The record that makes the change, or None when the partition would not change."""
        partition = self._partition
        # Never empty the ISR: keep the current one (see the module doc).
        isr = self._target_isr if self._target_isr else partition.isr
        result = self.elect(isr)
        if result.unclean or result.from_elr:
            isr = (result.leader,)
        leader = result.leader
        assert leader == NO_LEADER or leader in isr, (leader, isr)
        assert isr, "an ISR is never emptied"
        # An unclean leader may lack records below the HW, so no one is known to have
        # them all any more: the ELR starts over (Kafka clears it the same way). Not
        # elect()'s ELR: an election from the ELR has just changed the ISR.
        elr = () if result.unclean else next_elr(partition, isr, self._min_isr)
        if (
            leader == partition.leader
            and isr == partition.isr
            and elr == partition.eligible_leader_replicas
        ):
            return None
        return PartitionChangeRecord(
            partition_id=self._partition_id,
            topic_id=self._topic_id,
            isr=None if isr == partition.isr else isr,
            leader=NO_LEADER_CHANGE if leader == partition.leader else leader,
            eligible_leader_replicas=None if elr == partition.eligible_leader_replicas else elr,
        )


def next_elr(
    partition: PartitionRegistration, new_isr: Sequence[int], min_isr: int
) -> tuple[int, ...]:
    """The ELR once ``partition``'s ISR becomes ``new_isr`` (see the module doc): empty
    while the ISR has ``min_isr`` members or more (capped at the replica count, as a
    topic with fewer replicas than min.insync.replicas could never reach it), else the
    old ELR and old ISR minus the new ISR, in replica order."""
    replicas = partition.replicas
    if len(new_isr) >= min(min_isr, len(replicas)):
        return ()
    candidates = set(partition.eligible_leader_replicas) | set(partition.isr)
    return tuple(r for r in replicas if r in candidates and r not in new_isr)
