"""The log as the Raft core sees it: a small synchronous protocol, and an in-memory log.

The core calls the log directly (append, truncate, read) rather than asking the driver
to: it needs the new end offset and epochs at once to answer the next message, and the
segment log's append/truncate are synchronous writes into the page cache. What is not
synchronous is durability: the core asks for it with a ``Flush`` action, and the driver
reports it back with ``QuorumCore.on_flushed``. Only flushed entries count toward a
vote or a high watermark.

``InMemoryRaftLog`` keeps flushed and unflushed entries apart so a simulation can crash
a node (``crash()``) and lose exactly what a power cut would lose.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from raftka.common.structs import EpochEndOffset
from raftka.raft.quorum.messages import (
    Entry,
    SnapshotId,
)


class RaftLog(Protocol):
    """What the core needs from a log. Offsets are dense; ``end_offset`` is exclusive.

    Below ``start_offset`` the log's content lives in its latest snapshot (KIP-630).
    Snapshots are opaque bytes to the core; the layer above creates them (at or below
    the high watermark and the flushed offset) and the log drops the prefix they cover.
    """

    @property
    def start_offset(self) -> int:
        """The first offset held as an entry (the latest snapshot's end, or 0)."""
        ...

    @property
    def end_offset(self) -> int:
        """One past the last entry (the log end offset, LEO)."""
        ...

    @property
    def last_epoch(self) -> int:
        """The epoch of the last entry (or of the snapshot's last entry), 0 if none."""
        ...

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        """The newest snapshot held, if any."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """The largest epoch <= ``epoch`` in the log and where it ends (exclusive).

        Where only the snapshot knows (no entry of such an epoch is held) the answer is
        the snapshot's epoch and end offset when that epoch is <= ``epoch``;
        ``EpochEndOffset(0, 0)`` when nothing at all is known.
        """
        ...

    def read(self, from_offset: int, max_records: int) -> Sequence[Entry]:
        """Up to ``max_records`` entries from ``from_offset`` (empty at the end)."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries; the first must be at ``end_offset``, epochs must not fall."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or above ``offset`` (never below ``start_offset``)."""
        ...

    def read_snapshot(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int] | None:
        """Up to ``max_bytes`` of a snapshot from ``position`` and its total size, or
        ``None`` when that snapshot is no longer held."""
        ...

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Replace the whole log by a snapshot fetched from the leader: afterwards
        ``start_offset == end_offset == snapshot_id.end_offset``. Durable on return."""
        ...


class InMemoryRaftLog:
    """A list-backed ``RaftLog`` that tracks which prefix has been flushed.

    ``flush(up_to)`` marks entries below ``up_to`` durable; ``crash()`` drops the
    unflushed suffix, as a power cut would. Truncation, snapshot creation and install
    are treated as durable at once (the segment log makes them so before returning).
    """

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self._start = 0
        self._snapshot: tuple[SnapshotId, bytes] | None = None
        self._flushed_end_offset = 0
        self.append(entries)
        self._flushed_end_offset = self.end_offset

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end_offset

    @property
    def last_epoch(self) -> int:
        if self._entries:
            return self._entries[-1].epoch
        return self._snapshot[0].epoch if self._snapshot else 0

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshot[0] if self._snapshot else None

    @property
    def snapshot_data(self) -> bytes | None:
        return self._snapshot[1] if self._snapshot else None

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The entries held (from ``start_offset``)."""
        return tuple(self._entries)

    def entry_at(self, offset: int) -> Entry | None:
        if self._start <= offset < self.end_offset:
            return self._entries[offset - self._start]
        return None

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        # Scan backwards: callers ask about recent epochs, and the log is short in tests.
        for entry in reversed(self._entries):
            if entry.epoch <= epoch:
                return EpochEndOffset(entry.epoch, entry.offset + 1)
        if self._snapshot is not None and self._snapshot[0].epoch <= epoch:
            return EpochEndOffset(self._snapshot[0].epoch, self._start)
        return EpochEndOffset(0, 0)

    def read(self, from_offset: int, max_records: int) -> Sequence[Entry]:
        assert self._start <= from_offset <= self.end_offset, (from_offset, self._start)
        index = from_offset - self._start
        return self._entries[index : index + max_records]

    def append(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            assert entry.offset == self.end_offset, (entry, self.end_offset)
            assert entry.epoch >= self.last_epoch, (entry, self.last_epoch)
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        assert self._start <= offset <= self.end_offset, (offset, self._start, self.end_offset)
        del self._entries[offset - self._start :]
        self._flushed_end_offset = min(self._flushed_end_offset, offset)

    def flush(self, up_to: int) -> int:
        """Make entries below ``min(up_to, end_offset)`` durable; returns the flushed end."""
        self._flushed_end_offset = max(self._flushed_end_offset, min(up_to, self.end_offset))
        return self._flushed_end_offset

    def crash(self) -> None:
        """Lose every unflushed entry (a power cut)."""
        del self._entries[self._flushed_end_offset - self._start :]

    def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Record a snapshot of the state below ``end_offset`` and drop those entries.

        The caller (the state machine) must only snapshot committed, flushed entries.
        """
        assert self._start < end_offset <= self._flushed_end_offset, (
            end_offset,
            self._start,
            self._flushed_end_offset,
        )
        last = self.entry_at(end_offset - 1)
        assert last is not None
        snapshot_id = SnapshotId(end_offset, last.epoch)
        del self._entries[: end_offset - self._start]
        self._start = end_offset
        self._snapshot = (snapshot_id, data)
        return snapshot_id

    def read_snapshot(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int] | None:
        if self._snapshot is None or self._snapshot[0] != snapshot_id:
            return None
        data = self._snapshot[1]
        return data[position : position + max_bytes], len(data)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._entries = []
        self._start = snapshot_id.end_offset
        self._snapshot = (snapshot_id, data)
        self._flushed_end_offset = snapshot_id.end_offset
