"""Sparse offset index and time index of one segment.

``.index``: 8-byte entries, big-endian (relative offset int32, file position int32):
the last offset of a batch and the position where that batch starts, one entry per
``index.interval.bytes`` of appended data. A lookup gives the greatest entry at or
below an offset, from which a short header scan finds the batch.

``.timeindex``: 12-byte entries (timestamp int64, relative offset int32): the largest
timestamp seen so far in the segment and the last offset of the batch that holds it.
Entries only grow in both columns.

Theory of operation: Kafka preallocates and mmaps these files. Python cannot append
to an mmap cheaply, so the entries live in two ``array`` columns in memory (binary
search runs on them directly) and reach the file on :meth:`flush` (on roll, flush and
close). A crash may lose index entries not yet flushed; that is harmless because
recovery rebuilds the index of every segment past the recovery point, and a segment
below it was flushed, indexes included, before the recovery point moved past it.
Loading checks the file's sanity and reports failure so the caller rebuilds.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path
from typing import Final

OFFSET_ENTRY_BYTES: Final = 8
TIME_ENTRY_BYTES: Final = 12
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """The file half of an index: how many entries have reached it, and appending;
    and what both indexes do to their two columns alike (``_columns``, in the order of
    an entry's fields; ``_rel_offsets`` is one of them)."""

    entry_bytes: int
    _entry: struct.Struct
    _rel_offsets: array[int]
    _columns: tuple[array[int], array[int]]

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_bytes)
        self._persisted = 0
        # An attribute kept in step with the length (every mutator below refreshes it),
        # not a property: the log checks it on every append before deciding to roll.
        self.is_full = False

    def __len__(self) -> int:
        raise NotImplementedError

    def _refresh_full(self) -> None:
        self.is_full = len(self) >= self.max_entries

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries of offsets >= ``offset``."""
        i = bisect.bisect_left(self._rel_offsets, offset - self.base_offset)
        for column in self._columns:
            del column[i:]
        self._persisted = min(self._persisted, len(self))
        self._refresh_full()

    def reset(self) -> None:
        for column in self._columns:
            del column[:]
        self._persisted = 0
        self._refresh_full()

    def _encode(self, start: int) -> bytes:
        first, second = self._columns
        size, pack_into = self.entry_bytes, self._entry.pack_into
        out = bytearray((len(self) - start) * size)
        for k, i in enumerate(range(start, len(self))):
            pack_into(out, k * size, first[i], second[i])
        return bytes(out)

    def flush(self) -> None:
        """Write the entries not yet on disk, truncate stale ones, and fsync."""
        n = len(self)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            self._persisted = min(self._persisted, n)
            os.ftruncate(fd, self._persisted * self.entry_bytes)
            data = self._encode(self._persisted)
            view = memoryview(data)
            pos = self._persisted * self.entry_bytes
            while view:
                written = os.pwrite(fd, view, pos)
                view, pos = view[written:], pos + written
            os.fsync(fd)
        finally:
            os.close(fd)
        self._persisted = n

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path


class OffsetIndex(_IndexFile):
    """Relative offset -> file position, sparse and sorted."""

    entry_bytes = OFFSET_ENTRY_BYTES
    _entry = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._rel_offsets = array("i")
        self._positions: array[int] = array("i")
        self._columns = (self._rel_offsets, self._positions)

    def __len__(self) -> int:
        return len(self._rel_offsets)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        assert not self._rel_offsets or rel > self._rel_offsets[-1], "offset index must grow"
        assert not self._positions or position > self._positions[-1], "positions must grow"
        self._rel_offsets.append(rel)
        self._positions.append(position)
        self.is_full = len(self._rel_offsets) >= self.max_entries

    def append_unchecked(self, offset: int, position: int) -> None:
        """:meth:`append` minus its growth assertions, for a caller that asserts growth
        more cheaply itself (``LogSegment.append_batch``: the batch's last offset is past
        every offset in the segment and its position is the segment's size, so both
        exceed every entry). It runs on every append of a batch over
        index.interval.bytes."""
        self._rel_offsets.append(offset - self.base_offset)
        self._positions.append(position)
        self.is_full = len(self._rel_offsets) >= self.max_entries

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry <= offset, else (base_offset, 0)."""
        i = bisect.bisect_right(self._rel_offsets, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._rel_offsets[i - 1], self._positions[i - 1]

    def lookup_at_or_above(self, offset: int) -> tuple[int, int] | None:
        """(offset, position) of the least entry >= offset, else None. Its batch holds
        ``offset`` unless unindexed batches lie between it and the entry before."""
        i = bisect.bisect_left(self._rel_offsets, offset - self.base_offset)
        if i == len(self._rel_offsets):
            return None
        return self.base_offset + self._rel_offsets[i], self._positions[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._rel_offsets:
            return self.base_offset, 0
        return self.base_offset + self._rel_offsets[-1], self._positions[-1]

    def load(self, segment_size: int) -> bool:
        """Read the file. False if it is absent or fails the sanity check."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % OFFSET_ENTRY_BYTES or len(data) // OFFSET_ENTRY_BYTES > self.max_entries:
            return False
        self.reset()
        prev_rel, prev_pos = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= prev_rel or pos <= prev_pos or pos >= segment_size:
                self.reset()
                return False
            self._rel_offsets.append(rel)
            self._positions.append(pos)
            prev_rel, prev_pos = rel, pos
        self._persisted = len(self)
        self._refresh_full()
        return True


class TimeIndex(_IndexFile):
    """Timestamp -> relative offset, both columns non-decreasing (strictly, timestamps)."""

    entry_bytes = TIME_ENTRY_BYTES
    _entry = _TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._timestamps: array[int] = array("q")
        self._rel_offsets = array("i")
        self._columns = (self._timestamps, self._rel_offsets)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_timestamp(self) -> int | None:
        return self._timestamps[-1] if self._timestamps else None

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, if any."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._rel_offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append unless ``timestamp`` is not above the last entry's (Kafka's rule)."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        rel = offset - self.base_offset
        assert not self._rel_offsets or rel >= self._rel_offsets[-1], "time index must grow"
        self._timestamps.append(timestamp)
        self._rel_offsets.append(rel)
        self.is_full = len(self._timestamps) >= self.max_entries

    def lookup_below(self, timestamp: int) -> int | None:
        """Offset of the greatest entry whose timestamp is < ``timestamp``, if any."""
        i = bisect.bisect_left(self._timestamps, timestamp)
        if i == 0:
            return None
        return self.base_offset + self._rel_offsets[i - 1]

    def load(self) -> bool:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % TIME_ENTRY_BYTES or len(data) // TIME_ENTRY_BYTES > self.max_entries:
            return False
        self.reset()
        prev_ts, prev_rel = None, -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if (prev_ts is not None and ts <= prev_ts) or rel < prev_rel or rel < 0:
                self.reset()
                return False
            self._timestamps.append(ts)
            self._rel_offsets.append(rel)
            prev_ts, prev_rel = ts, rel
        self._persisted = len(self)
        self._refresh_full()
        return True
