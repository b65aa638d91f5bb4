"""The leader-epoch cache: for each leader epoch, the first offset written in it.

Followers ask a leader "where does my epoch E end?" (OffsetsForLeaderEpoch) and
truncate to the answer; Raft uses the same question to find where a replica's log
diverges. This module holds that map, persists it to ``leader-epoch-checkpoint``
(Kafka's checkpoint format, version 0, lines ``epoch start_offset``) on every change,
and keeps it consistent with the log across truncation at either end.

Invariants (asserted): epochs strictly increase and start offsets strictly increase
along the list.
"""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path
from typing import Final

from raftka.storage.checkpoint import read_checkpoint, write_checkpoint

LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1
_VERSION: Final = 0


class LeaderEpochFileCache:
    """Epoch -> start offset, backed by a checkpoint file. Not thread-safe."""

    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in entries or ():
            self._epochs.append(epoch)
            self._offsets.append(offset)
        self._check()

    @classmethod
    def load(cls, path: Path) -> tuple[LeaderEpochFileCache, bool]:
        """Load the checkpoint. Returns (cache, ok); ok is False if the file was present
        but unreadable or inconsistent, in which case the cache starts empty."""
        if not path.exists():
            return cls(path), True
        raw = read_checkpoint(path, _VERSION, 2)
        if raw is None:
            return cls(path), False
        entries = [(e[0], e[1]) for e in raw]
        ok = all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(entries)) and all(
            e >= 0 and o >= 0 for e, o in entries
        )
        return (cls(path, entries), True) if ok else (cls(path), False)

    def _check(self) -> None:
        for i in range(1, len(self._epochs)):
            assert self._epochs[i - 1] < self._epochs[i], "epochs must strictly increase"
            assert self._offsets[i - 1] < self._offsets[i], "start offsets must increase"

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_epoch(self) -> int | None:
        return self._epochs[0] if self._epochs else None

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``. Returns True if it changed.

        As Kafka: a repeat of the latest epoch at a later offset is a no-op; an entry
        that conflicts (an epoch >= this one, or a start offset >= this one) is removed
        first, so the list stays monotonic in both columns.
        """
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._check()
        if persist:
            self.flush()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (epoch, end offset).

        The end offset of epoch E is the start offset of the first epoch above E (or the
        log end offset if E is the latest). If E itself is unknown, the answer names the
        largest known epoch below E. (-1, -1) when E is undefined or above every epoch.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # Older than anything we hold: its end is where our first epoch starts.
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in force at ``offset``, or None if before the first entry."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else None

    def truncate_from_end(self, end_offset: int, *, persist: bool = True) -> None:
        """Drop entries that start at or after ``end_offset`` (log truncated to it)."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if i < len(self._offsets):
            del self._epochs[i:], self._offsets[i:]
            if persist:
                self.flush()

    def truncate_from_start(self, start_offset: int, *, persist: bool = True) -> None:
        """Log start moved to ``start_offset``: drop entries wholly below it and move the
        epoch in force there to start at ``start_offset``."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0 or (i == 1 and self._offsets[0] == start_offset):
            return
        epoch = self._epochs[i - 1]
        del self._epochs[:i], self._offsets[:i]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._check()
        if persist:
            self.flush()

    def clear(self, *, persist: bool = True) -> None:
        self._epochs.clear()
        self._offsets.clear()
        if persist:
            self.flush()

    def flush(self) -> None:
        write_checkpoint(self.path, _VERSION, self.entries())
