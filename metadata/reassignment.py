"""Partition reassignment (KIP-455, Kafka's AlterPartitionReassignments), as records.

Theory of operation
-------------------
Moving a partition from replicas ``current`` to ``target`` happens in two steps, each
one PartitionChangeRecord, so that the partition is never under-replicated by the move:

1. **Start** (:func:`start_record`): the replicas become ``target`` followed by the
   current replicas that leave (``replicas = target + removing``), with
   ``adding_replicas = target - current`` and ``removing_replicas = current - target``.
   The brokers that are added become followers (their replica fetchers start copying
   the log); nothing leaves yet, and the ISR, the leader and the acks=all guarantees are
   those of the old replicas plus whichever new ones catch up.
2. **Completion** (:func:`completion_record`): once every adding replica is in the ISR
   (the leader adds a follower when it has caught up), the replicas become ``target``,
   the ISR loses the removing replicas, the adding and removing lists are cleared, and
   if the leader was leaving, the first replica of ``target`` in the new ISR (and
   active) becomes leader. The controller checks this after every ISR change and right
   after a start whose adding list is empty (a pure removal or reordering completes at
   once). Brokers that left delete their replica when they see the record.

A reassignment of a partition already being reassigned starts again from its original
replicas (the current ones minus those being added); a cancel (target None) goes back to
them: the adding replicas are dropped (from the ISR too), the removing ones stay. As in
Kafka, that list keeps the order of the reassignment's (target first, then the replicas
that were to leave), so a cancel can change a partition's preferred leader. Kafka's
errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicated, or
an unregistered broker), NO_REASSIGNMENT_IN_PROGRESS (a cancel of nothing).

These are pure functions of the image; the controller (``metadata/controller.py``)
batches their records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from raftka.common.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
)
from raftka.metadata.image import MetadataImage, PartitionRegistration
from raftka.metadata.metadata_records import NO_LEADER, NO_LEADER_CHANGE, PartitionChangeRecord

__all__ = ["completion_record", "original_replicas", "start_record"]


def original_replicas(partition: PartitionRegistration) -> tuple[int, ...]:
    """The replicas before the reassignment in progress (all of them when none is)."""
    adding = set(partition.adding_replicas)
    return tuple(r for r in partition.replicas if r not in adding)


def _check_target(image: MetadataImage, where: str, target: Sequence[int]) -> None:
    if not target:
        raise InvalidReplicaAssignmentError(f"{where}: the target replicas are empty")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"{where}: {list(target)} names a broker twice")
    for broker_id in target:
        if image.cluster.broker(broker_id) is None:
            raise InvalidReplicaAssignmentError(f"{where}: broker {broker_id} is not registered")


def _leader_for(
    leader: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    is_active: Callable[[int], bool],
) -> int:
    """``leader`` if it stays a member of ``isr``, else the first of ``replicas`` in
    ``isr`` that may lead, else NO_LEADER."""
    if leader != NO_LEADER and leader in isr:
        return leader
    return next((r for r in replicas if r in isr and is_active(r)), NO_LEADER)


def _change(
    topic_id: str,
    index: int,
    partition: PartitionRegistration,
    *,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    leader: int,
) -> PartitionChangeRecord:
    # A replica leaving the assignment leaves the ELR too (election.py).
    elr = tuple(r for r in partition.eligible_leader_replicas if r in replicas and r not in isr)
    return PartitionChangeRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=replicas,
        isr=None if isr == partition.isr else isr,
        adding_replicas=adding,
        removing_replicas=removing,
        leader=NO_LEADER_CHANGE if leader == partition.leader else leader,
        eligible_leader_replicas=None if elr == partition.eligible_leader_replicas else elr,
    )


def start_record(
    image: MetadataImage,
    topic_id: str,
    index: int,
    partition: PartitionRegistration,
    target: Sequence[int] | None,
    *,
    where: str,
    is_active: Callable[[int], bool],
) -> PartitionChangeRecord | None:
    """The record that starts (``target``) or cancels (None) a reassignment of
    ``partition``; None when nothing changes (the target is the current assignment).
    Raises the request's error (see the module doc)."""
    original = original_replicas(partition)
    if target is None:
        if not partition.is_reassigning():
            raise NoReassignmentInProgressError(f"{where} is not being reassigned")
        added = set(partition.adding_replicas)
        isr = tuple(r for r in partition.isr if r not in added) or partition.isr
        if set(isr) & added:
            # The ISR held only adding replicas: the original ones are all out of sync.
            # Going back would leave no in-sync replica, so the cancel waits.
            raise InvalidReplicaAssignmentError(
                f"{where}: no original replica is in sync; cannot cancel now"
            )
        leader = _leader_for(partition.leader, original, isr, is_active)
        return _change(
            topic_id,
            index,
            partition,
            replicas=original,
            isr=isr,
            adding=(),
            removing=(),
            leader=leader,
        )
    _check_target(image, where, target)
    target = tuple(target)
    if target == original:
        if not partition.is_reassigning():
            return None
        return start_record(
            image, topic_id, index, partition, None, where=where, is_active=is_active
        )
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    replicas = target + removing
    # Replicas being added by an earlier reassignment that this one drops leave the ISR.
    isr = tuple(r for r in partition.isr if r in replicas) or partition.isr
    if not set(isr) <= set(replicas):
        raise InvalidReplicaAssignmentError(
            f"{where}: only replicas this reassignment drops are in sync; cannot change it now"
        )
    leader = _leader_for(partition.leader, replicas, isr, is_active)
    return _change(
        topic_id,
        index,
        partition,
        replicas=replicas,
        isr=isr,
        adding=adding,
        removing=removing,
        leader=leader,
    )


def completion_record(
    topic_id: str,
    index: int,
    partition: PartitionRegistration,
    *,
    is_active: Callable[[int], bool],
) -> PartitionChangeRecord | None:
    """The record that completes ``partition``'s reassignment, once every adding
    replica is in its ISR and a target replica stays in sync; None before that (or
    when it is not being reassigned)."""
    if not partition.is_reassigning() or not set(partition.adding_replicas) <= set(partition.isr):
        return None
    removing = set(partition.removing_replicas)
    target = tuple(r for r in partition.replicas if r not in removing)
    isr = tuple(r for r in partition.isr if r not in removing)
    if not isr:
        return None
    leader = _leader_for(partition.leader, target, isr, is_active)
    return _change(
        topic_id,
        index,
        partition,
        replicas=target,
        isr=isr,
        adding=(),
        removing=(),
        leader=leader,
    )
