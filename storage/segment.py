"""One segment: a ``.log`` file of whole record batches plus its two indexes.

A segment is named by its base offset (the first offset it may hold), zero-padded to
20 digits: ``00000000000000000042.log``, ``.index``, ``.timeindex``. Batches are stored
exactly as appended; the segment reads only their headers.

Theory of operation:

- Appends go straight to the file descriptor with ``pwrite`` at the current size (no
  user-space buffer), so a read right after an append sees the bytes, and a failed
  write can be undone with ``ftruncate`` back to the old size.
- Offset -> position: the sparse offset index gives a position at or before the batch,
  then a header walk over a small chunk of the file finds it. A read first tries the
  least index entry at or above the offset, whose batch usually holds the offset (always
  when batches exceed index.interval.bytes): then one pread returns header and data.
- A read returns the pread bytes as they are, a slice of the file that may end in a
  partial batch (Kafka's fetch does the same): trimming to whole batches would copy.
- ``recover`` rewalks the whole file with CRC checks, rebuilds both indexes and cuts the
  file at the first batch that is torn, corrupt, or out of sequence.

Not thread-safe: the owning :class:`~raftka.storage.log.Log` serializes access.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, NamedTuple

from raftka.common.errors import CorruptMessageError
from raftka.common.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    crc_valid,
    parse_header,
)
from raftka.storage.index import OffsetIndex, TimeIndex
from raftka.storage.transaction_index import TransactionIndex, txn_index_file_name

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
INT32_MAX: Final = 2**31 - 1

# base offset (0), batch length (8), last offset delta (23), max timestamp (35)
_SHALLOW = struct.Struct(">qi11xi8xq")
_SHALLOW_BYTES: Final = _SHALLOW.size
_SCAN_CHUNK_BYTES: Final = 64 * 1024
# Locating one batch reads headers from an index entry onwards. The entry is at most
# index.interval.bytes plus one batch before the target, so with the default interval
# one small read usually covers every header in between; big batches take one read each.
_LOCATE_CHUNK_BYTES: Final = 4096

# One appended batch as the segment needs it: (position in the appended data, size,
# last offset, max timestamp). A plain tuple: the append path builds one per batch.
BatchSpan = tuple[int, int, int, int]


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """pwrite every byte of ``data`` at ``position``. A module-level function so tests
    can inject an OSError (ENOSPC) at the file layer."""
    written = os.pwrite(fd, data, position)
    if written == len(data):
        return  # the usual case: one call, no memoryview
    view = memoryview(data)[written:]
    position += written
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


class ShallowBatch(NamedTuple):
    """What the segment needs from a batch header: where it is and what it covers.
    (A NamedTuple: built once per batch walked, and cheaper than a frozen dataclass.)"""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class LogSegment:
    """A segment's files and the in-memory state derived from them."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_bytes_max: int,
        index_interval_bytes: int,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        # ``suffix`` (e.g. ``.cleaned``) follows every file name: the log cleaner writes a
        # segment under temporary names and renames it into place (storage/cleaner.py).
        self.base_offset = base_offset
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            directory / file_name(base_offset, INDEX_SUFFIX + suffix), base_offset, index_bytes_max
        )
        self.time_index = TimeIndex(
            directory / file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            index_bytes_max,
        )
        # The aborted transactions whose ABORT marker is in this segment (Kafka's
        # .txnindex): appended by the partition after a marker, read by read_committed
        # fetches (Log.collect_aborted).
        self.txn_index = TransactionIndex(directory / (txn_index_file_name(base_offset) + suffix))
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset  # one past the last offset held
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset - 1
        self.first_batch_timestamp: int | None = None  # Kafka's rolling base timestamp
        self.bytes_since_last_index_entry = 0

    # ----------------------------------------------------------------- appending

    def _write_at_end(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` after the last byte held and grow ``size``; returns where it
        starts. On an OSError the file is cut back to its old size, ``size`` stays, and
        the error propagates."""
        start = self.size
        try:
            write_all(self.fd, data, start)
        except OSError:
            # If even this fails, reads still stop at self.size and recovery cuts the tail.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise
        self.size = start + len(data)
        return start

    def append(self, data: bytes | bytearray | memoryview, spans: list[BatchSpan]) -> None:
        """Write ``data`` (the batches of ``spans``, positions relative to ``data``) at
        the end.

        On an OSError nothing stays visible: the file is cut back to its old size and
        the error propagates; the in-memory state is untouched.
        """
        start = self._write_at_end(data)
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = spans[0][3]
        # _index_batch, inlined: this loop runs for every appended batch.
        last_offset = spans[-1][2]
        assert last_offset - self.base_offset <= INT32_MAX, "relative offset overflow"
        interval, pending = self.index_interval_bytes, self.bytes_since_last_index_entry
        max_seen, offset_of_max = self.max_timestamp, self.offset_of_max_timestamp
        for position, size, last, max_ts in spans:
            if max_ts > max_seen:
                max_seen, offset_of_max = max_ts, last
            if pending > interval:
                self.offset_index.append(last, position + start)
                self.time_index.maybe_append(max_seen, offset_of_max)
                pending = 0
            pending += size
        self.max_timestamp, self.offset_of_max_timestamp = max_seen, offset_of_max
        self.bytes_since_last_index_entry = pending
        self.next_offset = last_offset + 1

    def append_batch(self, data: bytes | bytearray, last_offset: int, max_timestamp: int) -> None:
        """:meth:`append` for exactly one batch (``data``), the common produce request:
        the same effects without a spans list or a loop. Same failure contract.

        The offset index's growth assertions become one cheaper assertion here
        (``OffsetIndex.append_unchecked``): ``last_offset`` is past every offset held,
        so past every index entry, and the batch starts at ``self.size``, past every
        indexed position.
        """
        assert self.next_offset <= last_offset, "offsets must grow"
        assert last_offset - self.base_offset <= INT32_MAX, "relative offset overflow"
        start = self._write_at_end(data)
        size = len(data)
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        pending = self.bytes_since_last_index_entry
        if pending > self.index_interval_bytes:
            self.offset_index.append_unchecked(last_offset, start)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            pending = 0
        self.bytes_since_last_index_entry = pending + size
        self.next_offset = last_offset + 1

    def _index_batch(self, position: int, size: int, last_offset: int, max_ts: int) -> None:
        assert last_offset - self.base_offset <= INT32_MAX, "relative offset overflow"
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1

    # ------------------------------------------------------------------ reading

    def _walk(self, position: int, end: int | None = None) -> Iterator[ShallowBatch]:
        """Batch headers from ``position`` (a batch start) to ``end``, reading the file in
        chunks. Stops quietly at a torn tail; the caller checks where it stopped."""
        limit = self.size if end is None else end
        buf = b""
        buf_pos = position  # file position of buf[0]
        while position + LOG_OVERHEAD <= limit:
            off = position - buf_pos
            if off + _SHALLOW_BYTES > len(buf):
                buf = os.pread(self.fd, _SCAN_CHUNK_BYTES, position)
                buf_pos, off = position, 0
                if len(buf) < _SHALLOW_BYTES:
                    return
            base, length, delta, max_ts = _SHALLOW.unpack_from(buf, off)
            size = length + LOG_OVERHEAD
            if size < HEADER_SIZE or position + size > limit:
                return
            yield ShallowBatch(position, size, base, base + delta, max_ts)
            position += size

    def find_batch(self, offset: int) -> ShallowBatch | None:
        """The first batch whose last offset is >= ``offset``, or None.

        Reads headers from the offset index's entry at or below ``offset`` in small
        chunks (the read path calls this once or twice per fetch, so it avoids the
        generator and the 64 KiB chunks of :meth:`_walk`)."""
        _, position = self.offset_index.lookup(offset)
        limit, fd, unpack = self.size, self.fd, _SHALLOW.unpack_from
        while position + _SHALLOW_BYTES <= limit:
            buf = os.pread(fd, min(_LOCATE_CHUNK_BYTES, limit - position), position)
            n, off = len(buf), 0
            if n < _SHALLOW_BYTES:
                return None
            while off + _SHALLOW_BYTES <= n:
                base, length, delta, max_ts = unpack(buf, off)
                size = length + LOG_OVERHEAD
                if size < HEADER_SIZE or position + off + size > limit:
                    return None  # a torn tail: nothing past it is readable
                if base + delta >= offset:
                    return ShallowBatch(position + off, size, base, base + delta, max_ts)
                off += size
            position += off
        return None

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None,
        min_one_batch: bool,
        whole_batches: bool,
    ) -> bytes | None:
        """The file from the batch holding ``offset`` on, at most ``max_bytes`` (or the
        first batch whole if larger and ``min_one_batch``; nothing if larger and not),
        never reaching a batch whose last offset is >= ``max_offset``. The result may end
        in a partial batch unless ``whole_batches``. None if no batch here reaches
        ``offset``."""
        limit = self.size
        first: ShallowBatch | None = None
        data = b""
        if max_offset is not None and max_offset < self.next_offset:
            first = self.find_batch(offset)
            if first is None:
                return None
            if first.last_offset >= max_offset:
                return b""
            cut = self.find_batch(max_offset)  # the first batch not to return
            if cut is not None:
                limit = cut.position
        else:
            # Speculative read: the least index entry at or above ``offset`` usually
            # names the batch holding it (always, once batches exceed
            # index.interval.bytes), so one pread from there fetches the header and the
            # data together. If unindexed batches lie before it, locate by walking.
            entry = self.offset_index.lookup_at_or_above(offset)
            if entry is not None:
                position = entry[1]
                data = os.pread(
                    self.fd, min(max(max_bytes, _LOCATE_CHUNK_BYTES), limit - position), position
                )
                if len(data) >= _SHALLOW_BYTES:
                    base, length, delta, max_ts = _SHALLOW.unpack_from(data, 0)
                    if base <= offset <= base + delta and length + LOG_OVERHEAD >= HEADER_SIZE:
                        first = ShallowBatch(
                            position, length + LOG_OVERHEAD, base, base + delta, max_ts
                        )
            if first is None:
                data = b""
                first = self.find_batch(offset)
                if first is None:
                    return None
        position, size = first.position, first.size
        if max_bytes >= size:
            end = min(max_bytes, limit - position)
        elif min_one_batch:
            end = size
        else:
            return b""
        if len(data) < end:
            data = os.pread(self.fd, end, position)
        elif len(data) > end:
            data = data[:end]  # over-read by the speculative read: a small copy
        # One pread, returned as is: no trimming copy (Kafka's fetch returns a file
        # slice too and lets the consumer drop a trailing partial batch).
        if not whole_batches or len(data) == size:
            return data
        end, n, unpack = 0, len(data), _SHALLOW.unpack_from
        while end + _SHALLOW_BYTES <= n:
            _, length, _, _ = unpack(data, end)
            if end + length + LOG_OVERHEAD > n:
                break
            end += length + LOG_OVERHEAD
        return data if end == n else data[:end]

    def find_offset_by_timestamp(self, timestamp: int) -> ShallowBatch | None:
        """The first batch whose max timestamp is >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        below = self.time_index.lookup_below(timestamp)
        position = 0 if below is None else self.offset_index.lookup(below)[1]
        for b in self._walk(position):
            if b.max_timestamp >= timestamp:
                return b
        return None

    def read_batch(self, b: ShallowBatch) -> bytes:
        return os.pread(self.fd, b.size, b.position)

    # ------------------------------------------------------------------ loading

    def load(self) -> bool:
        """Load a segment trusted to be whole (below the recovery point or after a clean
        shutdown): indexes from their files, then a header walk past the last entry.
        False if anything does not add up; the caller then calls :meth:`recover`."""
        if not self.offset_index.load(self.size) or not self.time_index.load():
            self.offset_index.reset()
            self.time_index.reset()
            return False
        if self.size == 0:
            return len(self.offset_index) == 0 and len(self.time_index) == 0
        last_offset, position = self.offset_index.last_entry()
        self._max_timestamp_from_time_index()
        end = position
        self.next_offset = self.base_offset
        for b in self._walk(position):
            if b.position == position and len(self.offset_index) and b.last_offset != last_offset:
                return False
            if b.max_timestamp > self.max_timestamp:
                self.max_timestamp = b.max_timestamp
                self.offset_of_max_timestamp = b.last_offset
            self.next_offset = b.last_offset + 1
            end = b.position + b.size
        if end != self.size:
            return False
        self.bytes_since_last_index_entry = self.index_interval_bytes + 1  # index next append
        first = next(self._walk(0, min(self.size, _SCAN_CHUNK_BYTES)), None)
        self.first_batch_timestamp = None if first is None else first.max_timestamp
        return True

    def recover(
        self,
        on_batch: Callable[[int, int], None],
        *,
        expected_base: int | None = None,
        offsets_may_gap: bool = False,
        offset_limit: int | None = None,
    ) -> int:
        """Rewalk the file with CRC checks and rebuild both indexes.

        Cuts the file at the first batch that is torn, fails its CRC, or does not follow
        on from the previous one (offsets contiguous from ``expected_base``, which
        defaults to the segment's base offset, or only growing and below
        ``offset_limit`` if ``offsets_may_gap``, for a compacted log; leader epochs never
        decreasing).
        ``on_batch(epoch, base_offset)`` sees every batch kept. Returns the bytes cut.
        Never raises on bad data.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset - 1
        self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0
        self.next_offset = self.base_offset if expected_base is None else expected_base
        file_size = os.fstat(self.fd).st_size
        position, prev_epoch = 0, -1
        with open(self.log_path, "rb", buffering=1024 * 1024) as f:
            while position < file_size:
                head = f.read(LOG_OVERHEAD)
                if len(head) < LOG_OVERHEAD:
                    break
                _, length = struct.unpack(">qi", head)
                size = length + LOG_OVERHEAD
                if size < HEADER_SIZE or position + size > file_size:
                    break
                batch = head + f.read(size - LOG_OVERHEAD)
                try:
                    header = parse_header(batch)
                except CorruptMessageError:
                    break
                if len(batch) != size or not crc_valid(batch):
                    break
                # Offsets are contiguous, except in a log the cleaner has compacted: it
                # removes records and batches without renumbering (Kafka's recovery does
                # not require contiguity at all). The base offset lies outside the CRC,
                # so contiguity is what catches a corrupt one; with gaps allowed, a batch
                # must at least stay below the next segment (``offset_limit``).
                if header.base_offset != self.next_offset and not (
                    offsets_may_gap and header.base_offset > self.next_offset
                ):
                    break
                if offset_limit is not None and header.last_offset >= offset_limit:
                    break
                if header.last_offset - self.base_offset > INT32_MAX:
                    break
                if header.partition_leader_epoch < prev_epoch:
                    break
                prev_epoch = header.partition_leader_epoch
                if self.first_batch_timestamp is None:
                    self.first_batch_timestamp = header.max_timestamp
                self._index_batch(position, size, header.last_offset, header.max_timestamp)
                on_batch(header.partition_leader_epoch, header.base_offset)
                position += size
        self.size = position
        if file_size != position:
            os.ftruncate(self.fd, position)
        # Entries of markers the cut removed go too; entries a crash kept from being
        # written are re-appended by the producer-state replay on open
        # (broker/producer_state_store.py).
        self.txn_index.truncate_to(self.next_offset)
        return file_size - position

    # ------------------------------------------------------------- truncation etc.

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``. Returns bytes cut."""
        b = self.find_batch(offset)
        if b is None:
            return 0
        cut = self.size - b.position
        os.ftruncate(self.fd, b.position)
        self.size = b.position
        # Index entries name a batch's last offset; every surviving batch ends below
        # the cut batch's base offset.
        self.offset_index.truncate_to_offset(b.base_offset)
        self.time_index.truncate_to_offset(b.base_offset)
        self.txn_index.truncate_to(b.base_offset)
        # Rederive the max timestamp from the surviving index and the tail past it.
        _, position = self.offset_index.last_entry()
        self._max_timestamp_from_time_index()
        self.next_offset = self.base_offset
        for s in self._walk(position if len(self.offset_index) else 0):
            if s.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = s.max_timestamp, s.last_offset
            self.next_offset = s.last_offset + 1
        if self.size == 0:
            self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = self.index_interval_bytes + 1
        self.flush_indexes()
        return cut

    def _max_timestamp_from_time_index(self) -> None:
        entry = self.time_index.last_entry()
        if entry is None:
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset - 1
        else:
            self.max_timestamp, self.offset_of_max_timestamp = entry

    def on_become_inactive(self) -> None:
        """Rolled: index the segment's max timestamp so a reload needs no scan for it."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def flush_indexes(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def flush(self) -> None:
        os.fsync(self.fd)
        self.flush_indexes()

    def largest_timestamp(self) -> int:
        """Kafka's segment.largestTimestamp: for time retention."""
        return self.max_timestamp

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Close and remove the files: renamed to ``.deleted`` first (as Kafka) so a crash
        mid-way leaves files that the next open removes rather than loads."""
        self.close()
        paths = [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]
        self.txn_index.delete_cache()
        for p in paths:
            if p.exists():
                os.replace(p, p.with_name(p.name + DELETED_SUFFIX))
        for p in paths:
            p.with_name(p.name + DELETED_SUFFIX).unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"
