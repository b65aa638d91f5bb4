"""Transactional offset commits waiting for their transaction to end (KIP-98, KIP-447).

Theory of operation
-------------------
A TxnOffsetCommit writes its offset records to the group's ``__consumer_offsets``
partition as a transactional batch of the producer. The offsets are *pending*: OffsetFetch
does not show them (with ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for the
partition) until a COMMIT or ABORT marker of that producer lands in the same partition.
COMMIT makes them the committed offsets, ABORT drops them. The coordinator learns of a
marker from the partition leader's marker path at run time and from the control batches
in the log while it loads the partition: the same rules apply to both, so a failover
shows the same offsets.

Every offset value carries its **position**: its place in the partition's log order (a
counter the group manager advances for each record it replays and each append it
emits, in the log's order). Kafka's rule for a key (group, topic-partition) that has
both a committed value and a value a transaction commits is *the record later in the
log wins* (``CommitRecordMetadataAndOffset.olderThan``): a plain commit written after
the transactional one survives that transaction's COMMIT, an earlier one does not.
:func:`newer` is that comparison.

A plain tombstone (OffsetDelete, DeleteGroups, expiry) deletes the key; a transactional
value written before it is gone too (:meth:`PendingTxnOffsets.remove_key`), so that a
later COMMIT cannot bring back an offset the group deleted after it was written. (Kafka
drops them at run time, ``GroupMetadata.removeOffsets``; its load keeps them, which a
reload then disagrees with: raftka applies the run-time rule on load too.)

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from raftka.broker.coordinator.group_records import OffsetCommitValue
from raftka.common.structs import TopicPartition

__all__ = ["GroupOffsetKey", "PendingTxnOffsets", "Positioned", "newer"]

#: (group id, topic-partition): the key of an offset record.
GroupOffsetKey: TypeAlias = tuple[str, TopicPartition]


@dataclass(frozen=True, slots=True)
class Positioned:
    """An offset value and its place in the partition's log order."""

    value: OffsetCommitValue
    position: int


def newer(candidate: Positioned, current: Positioned | None) -> bool:
    """Whether ``candidate`` replaces ``current`` (Kafka: the later record wins)."""
    return current is None or current.position < candidate.position


class PendingTxnOffsets:
    """Pending transactional offsets: __consumer_offsets partition -> producer id ->
    key -> value. Single-threaded, like its owner."""

    def __init__(self) -> None:
        self._pending: dict[int, dict[int, dict[GroupOffsetKey, Positioned]]] = {}

    def add(self, partition: int, producer_id: int, key: GroupOffsetKey, value: Positioned) -> None:
        """A transactional offset record of ``producer_id`` was written (or replayed)."""
        producers = self._pending.setdefault(partition, {})
        producers.setdefault(producer_id, {})[key] = value

    def discard(self, partition: int, producer_id: int, key: GroupOffsetKey) -> None:
        """A transactional tombstone of ``producer_id`` (Kafka drops the pending value)."""
        offsets = self._pending.get(partition, {}).get(producer_id)
        if offsets is not None:
            offsets.pop(key, None)

    def remove_key(self, partition: int, key: GroupOffsetKey) -> None:
        """A plain tombstone deleted ``key``: every producer's pending value of it goes."""
        for offsets in self._pending.get(partition, {}).values():
            offsets.pop(key, None)

    def complete(self, partition: int, producer_id: int) -> Mapping[GroupOffsetKey, Positioned]:
        """The producer's transaction ended at ``partition``: its pending offsets, now
        forgotten (the caller commits them or lets them go)."""
        producers = self._pending.get(partition)
        if producers is None:
            return {}
        done = producers.pop(producer_id, {})
        if not producers:
            del self._pending[partition]
        return done

    def is_pending(self, partition: int, key: GroupOffsetKey) -> bool:
        return any(key in offsets for offsets in self._pending.get(partition, {}).values())

    def pending_keys(self, partition: int) -> set[GroupOffsetKey]:
        return {key for offsets in self._pending.get(partition, {}).values() for key in offsets}

    def producers(self, partition: int) -> Mapping[int, Mapping[GroupOffsetKey, Positioned]]:
        """A copy of ``partition``'s pending offsets by producer (tests and views)."""
        return {pid: dict(o) for pid, o in self._pending.get(partition, {}).items() if o}

    def drop_partition(self, partition: int) -> None:
        """The coordinator unloaded ``partition``: its next load replays them again."""
        self._pending.pop(partition, None)
