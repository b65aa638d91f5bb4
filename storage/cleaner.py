"""The log cleaner: Kafka's log compaction (its LogCleaner, Cleaner and the cleanable-range
rules of LogCleanerManager) for one :class:`~raftka.storage.log.Log` at a time.

(Over 700 lines: choosing the range, the offset map, the rewrite and the crash-safe
swap are one pass whose steps share the group and checkpoint bookkeeping.)

Theory of operation
===================

A compacted log is cut at three offsets (each one a segment base offset)::

    log start ....... first dirty ........... end ............ active base ..... LEO
    |  clean section  |  dirty section         |  not cleanable  |  active segment |

- **first dirty offset**: where the previous pass stopped, read from the log directory's
  ``cleaner-offset-checkpoint``; the log start for a log never cleaned, or when the
  checkpoint lies outside the log (after a truncation or delete-records).
- **end** (Kafka's first uncleanable offset, rounded down to a segment base): never past
  the active segment's base, nor the high watermark (data above it may still be
  truncated), nor the first segment holding a record younger than
  ``min.compaction.lag.ms`` (its largest timestamp), nor the first offset of a
  transaction with no COMMIT/ABORT marker yet (Kafka's last stable offset).

One pass, :meth:`LogCleaner.clean_once`:

1. **Decide.** The dirty ratio, dirty bytes / (clean + dirty) bytes, must exceed
   ``min.cleanable.dirty.ratio``, unless the first dirty segment's first batch is older
   than ``max.compaction.lag.ms``: then the pass is forced whatever the ratio.
2. **Map.** Over the dirty section build key -> offset of the key's latest record, held
   to ``dedupe_buffer_bytes`` (Kafka's ``log.cleaner.dedupe.buffer.size``). If the map
   fills, the end moves down to the segment where it filled (the next pass goes on
   from there): every offset in the map is then still a real record at or above the new
   end or inside the range, so removing what it supersedes stays correct. Records of a
   transaction enter the map only when its COMMIT marker is read; an ABORT marker marks
   the transaction's batches for removal; a transaction without a marker caps the end.
3. **Rewrite** every segment from the log start to the end (the clean section too: a
   newer key in the dirty section supersedes records there), in groups of consecutive
   segments whose sizes sum to at most ``segment.bytes`` (and whose indexes and int32
   relative offsets fit one segment, Kafka's groupSegmentsBySize). Each group becomes
   one segment with the first one's base offset.
4. **Swap** each group in (the on-disk protocol below), then write the checkpoint: the
   new first dirty offset is the end.

What a record and a batch become (Kafka's ``MemoryRecords.filterTo`` rules):

- A record is kept unless a later offset of its key is in the map, or it is a
  tombstone (a key with a null value) whose segment is older than
  ``delete.retention.ms``, or it belongs to an aborted transaction.
- Records without a key are kept. Kafka refuses them on compacted topics at produce
  time (and its cleaner drops any that slipped in); raftka's produce path does not
  refuse them yet, so the cleaner keeps them rather than lose data without a trace.
- A batch that keeps every record is copied byte for byte. A batch that keeps some is
  rebuilt with those records at their original offsets, with the same base offset and
  last offset (the last offset delta carries the producer's last sequence), producer
  id, epoch, base sequence, leader epoch and attributes, compressed with its own codec.
  **No offset ever changes**; the log has gaps instead.
- A batch that keeps no record keeps its 61-byte header (records count 0, base and
  last offset unchanged) when it has a producer id and is that producer's last batch,
  so producer state rebuilt from the log keeps the producer's epoch and last sequence
  (Kafka's RETAIN_EMPTY). The broker names the last batch of each active producer in
  ``active_producers``; without it every producer's emptied batches keep their header
  (more bytes, never a lost producer). Any other emptied batch is removed.
- An empty header an earlier pass kept stays while it is still its producer's last
  batch, and goes once the broker names another (Kafka's DELETE_EMPTY).
- Transaction markers (Kafka's LogCleaner, CleanedTransactionMetadata and KIP-534).
  The rewrite walks the log from its start in offset order, so when it reaches a
  producer's COMMIT or ABORT marker it has decided every batch of the transaction the
  marker ends (the producer's transactional batches since its previous marker; an
  emptied header kept for producer state counts as a batch). A marker stays while its
  transaction keeps a batch, and while it holds its producer's state (the broker names
  it in ``active_producers`` when the marker's epoch bump emptied the producer's
  batches, Kafka's LastRecord; with ``active_producers`` None every emptied producer
  batch keeps its header, so every marker stays). Otherwise the first pass that finds
  it so stamps a delete horizon into it, now + ``delete.retention.ms``, as Kafka 3.1+
  does: the base timestamp holds the horizon and attribute bit 0x40 says so (the
  record's own timestamp and the batch's max timestamp are unchanged); the first pass
  at or past the horizon removes it. So a reader that read the transaction's data has
  delete.retention.ms to read its marker too. Markers of another control type stay.
- ``.txnindex``: a cleaned segment gets the entries of the segments it replaces whose
  transaction keeps a batch (their marker stays and bounds them); an entry whose
  aborted data is gone goes in the same pass (nothing is left to skip; left behind
  once its marker went, it would make a read_committed reader skip the producer's
  later transactions). The entries are written and renamed with the segment's other
  files; a swap completed after a crash keeps the swap's copy.

Tombstone age: Kafka before KIP-534 compared a segment file's last-modified time with a
delete horizon; since KIP-534 it stamps a horizon into the batch on the first pass
(raftka does that for markers, above). raftka measures a tombstone's age as
``now_ms`` minus its segment's largest record timestamp (the segment's creation time
when it has no timestamps): the reference the log's time retention uses, which
survives copies and restores (file mtimes do not) and which tests drive with a clock.
A tombstone thus lives at least delete.retention.ms after the newest record of its
segment.

On-disk protocol (Kafka's): for a group of old segments S1..Sk with base offset B,

1. write ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned``; fsync them and
   the directory;
2. rename the two index files ``.cleaned`` -> ``.swap``, then ``B.log.cleaned`` ->
   ``B.log.swap``; fsync the directory. **This last rename is the commit point.**
3. delete S1..Sk (each file renamed to ``.deleted``, then unlinked); fsync the directory;
4. rename the three ``.swap`` files to their final names; fsync the directory; put the
   new segment in the in-memory list (:meth:`Log.replace_cleaned_segments`).

After every group: ``cleaner-offset-checkpoint`` (Kafka's name and format, one file per
log directory, ``topic partition offset`` lines) is rewritten atomically with the end.

Recovery (:func:`complete_interrupted_clean`, which :meth:`Log.open` runs before it lists
segments) finishes or rolls back what a kill -9 left, Kafka's rule:

- ``*.cleaned`` files are deleted: the crash came before the commit point, the old
  segments are whole.
- ``B.log.swap`` means the commit point was passed: every segment whose base offset is
  in ``[B, next offset of the swap file)`` is one of the old segments it replaces and is
  deleted, with B's index files (final and ``.swap``: recovery rebuilds them with a CRC
  scan); then ``B.log.swap`` becomes ``B.log``. Each step is idempotent, so a crash
  during recovery is finished by the next open.
- an index ``.swap`` without its ``.log.swap`` is deleted (Log.open does this).

One residue, as in Kafka: if the crash falls in step 3 and the cleaner had removed every
record of an old segment past the swap file's last batch, that segment is not known to
belong to the group and survives. It holds only records the cleaner had removed
(superseded values, expired tombstones) at their original offsets; the latest value of
every key and every offset are unchanged, and the next pass removes them again.

Bounds: the offset map (``dedupe_buffer_bytes``), the kept bytes buffered before a write
(``io_buffer_bytes``, Kafka's ``log.cleaner.io.buffer.size``), a group's size
(``segment.bytes``), a batch's decompressed size (the codec's bound). Transactions
pending in the map pass (their keys and batch offsets, kept until a marker decides them)
count against the dedupe buffer too, so one bound covers the map pass's memory. Every
loop walks a finite list: segments, the batches of a segment, the records of a batch.

Concurrency (Kafka's cleaner runs beside appends; :meth:`LogCleaner.clean_once` says
how): a pass touches the :class:`Log` only in short exclusive steps its caller grants
(its start, each group's swap, the checkpoint write). In between it reads the segments
below the active one through descriptors of its own (``os.dup``: a segment deleted or
closed meanwhile stays readable, so no read fails under it) and writes its ``.cleaned``
files, while the log's owner goes on. What the owner may do meanwhile, and what the
pass makes of it:

- append, roll, read, move the high watermark: harmless (only the active segment and
  new segments above the range change; the range's segments are immutable);
- move the log start (DeleteRecords): harmless; the swapped segment keeps the records
  below it until retention deletes the segment, as before the pass;
- delete segments of the range (retention): the swap finds them gone and the pass
  aborts (the broker skips retention on a log being cleaned, Kafka's rule);
- truncate below the range's end (a follower): the pass aborts at its next step (its
  map may name offsets that are gone); a read that the truncation made short aborts
  it too instead of failing as corrupt data;
- close the log, or ask the pass to stop (``stop_requested``, polled every batch and
  before each swap): the pass aborts;
- change ``cleanup.policy`` to delete: the pass finishes with the settings it started
  with (a compacted log is a valid log under delete; recovery allows its gaps).

An aborted pass removes its unswapped ``.cleaned`` files and leaves the checkpoint;
groups it swapped before stay. The swap's on-disk protocol and recovery are unchanged,
so kill -9 at any point still leaves a log that opens (the tests stop a pass at each
step). Without an ``exclusive`` the caller holds the log for the whole call.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

from raftka.common.errors import CorruptMessageError, KafkaStorageError
from raftka.common.record.batch import DecodedRecord, decode_batch
from raftka.common.record.compression import compress
from raftka.common.record.control import ControlRecordType, end_transaction_marker
from raftka.common.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    Compression,
    compute_crc,
    parse_header,
)
from raftka.common.record.varint import write_bytes, write_varint, write_varlong
from raftka.storage.checkpoint import fsync_dir, read_checkpoint_lines, write_checkpoint
from raftka.storage.index import OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES
from raftka.storage.log_config import LONG_MAX
from raftka.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    BatchSpan,
    LogSegment,
    file_name,
)
from raftka.storage.transaction_index import TXN_INDEX_SUFFIX

if TYPE_CHECKING:
    from raftka.storage.log import Log
    from raftka.storage.log_config import LogConfig

_T = TypeVar("_T")

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_OFFSET_CHECKPOINT",
    "SWAP_SUFFIX",
    "CleanerConfig",
    "CleanerStats",
    "CleaningAbortedError",
    "Exclusive",
    "LogCleaner",
    "complete_interrupted_clean",
    "partition_of",
    "read_cleaner_checkpoint",
    "was_cleaned",
]

CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
_CHECKPOINT_VERSION: Final = 0

# Kafka's broker defaults (log.cleaner.*). Kafka splits the dedupe buffer across
# log.cleaner.threads; raftka runs one cleaner, so it gets the whole buffer.
DEDUPE_BUFFER_BYTES_DEFAULT: Final = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
IO_BUFFER_BYTES_DEFAULT: Final = 512 * 1024  # log.cleaner.io.buffer.size
# What one offset-map entry costs beyond its key bytes: Kafka's SkimpyOffsetMap holds a
# 16-byte MD5 and an 8-byte offset per entry; a Python dict entry with an int costs
# about this much more than its key. The bound is on these accounted bytes.
MAP_ENTRY_OVERHEAD_BYTES: Final = 64

_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_CRC = struct.Struct(">I")
_DIR_RE: Final = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Read-modify-write of a directory's checkpoint file, shared by every log in it.
_CHECKPOINT_LOCK = threading.Lock()


def _crash_point(step: str) -> None:
    """Called before every durable step of a pass. Tests replace it to stop the pass at
    step N as a kill -9 would (nothing after that step happens, nothing is undone)."""


# ------------------------------------------------------------------------ config, stats


class CleaningAbortedError(Exception):
    """A pass stopped because its log changed under it (truncated, its segments deleted,
    closed) or its owner asked (a stop or delete of the partition): Kafka's "cleaning
    aborted". Nothing half-done stays in the log; :meth:`LogCleaner.clean_once` turns it
    into a CleanerStats with ``aborted`` set."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker-level settings of the cleaner (Kafka's ``log.cleaner.*``)."""

    dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES_DEFAULT
    io_buffer_bytes: int = IO_BUFFER_BYTES_DEFAULT

    def __post_init__(self) -> None:
        if self.dedupe_buffer_bytes < MAP_ENTRY_OVERHEAD_BYTES:
            raise ValueError(f"dedupe_buffer_bytes {self.dedupe_buffer_bytes} is too small")
        if self.io_buffer_bytes < HEADER_SIZE:
            raise ValueError(f"io_buffer_bytes {self.io_buffer_bytes} is too small")


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one :meth:`LogCleaner.clean_once` call did (Kafka's CleanerStats, in part)."""

    cleaned: bool  # False: nothing was rewritten (see reason)
    reason: str  # why it cleaned or why not
    first_dirty_offset: int
    end_offset: int  # the new first dirty offset if cleaned
    dirty_ratio: float
    forced_by_max_lag: bool = False
    map_keys: int = 0
    segments_before: int = 0  # segments rewritten ...
    segments_after: int = 0  # ... and how many they became
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    empty_batches_kept: int = 0  # headers kept for producer state
    batches_removed: int = 0
    marker_horizons_set: int = 0  # markers found removable, stamped with a delete horizon
    markers_removed: int = 0  # markers removed past their delete horizon
    aborted: bool = False  # see CleaningAbortedError; groups swapped before it stay


# ---------------------------------------------------------------------- checkpoint file


def partition_of(log_dir: Path) -> tuple[str, int]:
    """(topic, partition) from a ``<topic>-<partition>`` directory name (Kafka's layout).
    A directory of another shape (a test's, the metadata log's) is its own topic, -1."""
    m = _DIR_RE.match(log_dir.name)
    if m is None:
        return log_dir.name, -1
    return m["topic"], int(m["partition"])


def read_cleaner_checkpoint(data_dir: Path) -> dict[tuple[str, int], int]:
    """``cleaner-offset-checkpoint`` of one log (data) directory: (topic, partition) ->
    first dirty offset. Empty if the file is absent or malformed (every log is then
    cleaned from its start: more work, never a wrong result)."""
    lines = read_checkpoint_lines(data_dir / CLEANER_OFFSET_CHECKPOINT, _CHECKPOINT_VERSION, 3)
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in lines or ():
        try:
            out[topic, int(partition)] = int(offset)
        except ValueError:
            return {}
    return out


def was_cleaned(log_dir: Path) -> bool:
    """True if the cleaner has a checkpoint for this log: its segments may have offset
    gaps (recovery then allows them, even if cleanup.policy changed to delete since)."""
    return partition_of(log_dir) in read_cleaner_checkpoint(log_dir.parent)


def _update_cleaner_checkpoint(data_dir: Path, key: tuple[str, int], offset: int | None) -> None:
    with _CHECKPOINT_LOCK:
        entries = read_cleaner_checkpoint(data_dir)
        if offset is None:
            if key not in entries:
                return
            del entries[key]
        else:
            entries[key] = offset
        _crash_point("write cleaner-offset-checkpoint")
        write_checkpoint(
            data_dir / CLEANER_OFFSET_CHECKPOINT,
            _CHECKPOINT_VERSION,
            [[t, p, o] for (t, p), o in sorted(entries.items())],
        )


# ----------------------------------------------------------------------------- recovery


def _next_offset_of_file(path: Path, base_offset: int) -> int:
    """One past the last offset of the whole batches in a segment file (``base_offset``
    if it holds none). Reads headers only."""
    next_offset = base_offset
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:  # bounded by the file size
            f.seek(position)
            try:
                h = parse_header(f.read(HEADER_SIZE))
            except CorruptMessageError:
                break
            if position + h.size_bytes > size:
                break
            next_offset = h.last_offset + 1
            position += h.size_bytes
    return next_offset


def complete_interrupted_clean(directory: Path) -> bool:
    """Finish or roll back a cleaning pass a crash interrupted in ``directory`` (see the
    module docstring). Returns True if a swap was completed: the caller must then
    rebuild that segment's indexes (Log.open recovers from it on)."""
    names = os.listdir(directory)
    changed = completed = False
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)  # before the commit point
            changed = True
    swap_log = LOG_SUFFIX + SWAP_SUFFIX
    swap_bases = sorted(
        int(name[:20])
        for name in names
        if name.endswith(swap_log) and len(name) == 20 + len(swap_log) and name[:20].isdigit()
    )
    log_bases = sorted(
        int(name[:20])
        for name in names
        if name.endswith(LOG_SUFFIX) and len(name) == 20 + len(LOG_SUFFIX) and name[:20].isdigit()
    )
    for base in swap_bases:
        swap = directory / file_name(base, swap_log)
        end = max(_next_offset_of_file(swap, base), base + 1)
        lo, hi = bisect.bisect_left(log_bases, base), bisect.bisect_left(log_bases, end)
        for old in log_bases[lo:hi]:  # the old segments this swap replaces
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
                (directory / file_name(old, suffix)).unlink(missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (directory / file_name(base, suffix)).unlink(missing_ok=True)
            (directory / file_name(base, suffix + SWAP_SUFFIX)).unlink(missing_ok=True)
        # The .txnindex cannot be rebuilt by the CRC scan: the swap's copy (the old
        # segments' entries) is the one to keep; none means the group had no entry.
        txn_swap = directory / file_name(base, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
        if txn_swap.exists():
            os.replace(txn_swap, directory / file_name(base, TXN_INDEX_SUFFIX))
        else:
            (directory / file_name(base, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
        fsync_dir(directory)
        os.replace(swap, directory / file_name(base, LOG_SUFFIX))
        changed = completed = True
    if changed:
        fsync_dir(directory)
    return completed


# ---------------------------------------------------------------------------- the map


class _OffsetMap:
    """key -> offset of the key's latest record, held to ``bytes_max`` accounted bytes
    (key length plus :data:`MAP_ENTRY_OVERHEAD_BYTES` per entry)."""

    def __init__(self, bytes_max: int) -> None:
        self.offsets: dict[bytes, int] = {}
        self.bytes_used = 0
        self.bytes_max = bytes_max

    def reserve(self, entry_bytes: int) -> bool:
        """Account ``entry_bytes`` more (pending transactional keys); False if full."""
        if self.bytes_used + entry_bytes > self.bytes_max:
            return False
        self.bytes_used += entry_bytes
        return True

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` for ``key`` unless a later record of it is mapped. False if
        full. A committed transaction's records arrive at its marker, after later plain
        records of the same keys (a tombstone among them): the latest record by offset
        must win, as in Kafka's map, or an older value outlives a tombstone."""
        if key not in self.offsets and not self.reserve(len(key) + MAP_ENTRY_OVERHEAD_BYTES):
            return False
        self.offsets[key] = max(offset, self.offsets.get(key, offset))
        return True


@dataclass(slots=True)
class _MapResult:
    stop: int  # segments [0, stop) may be rewritten
    aborted_batches: set[int]  # base offsets of batches of aborted transactions
    full: bool


@dataclass(slots=True)
class _Source:
    """A segment below the active one as a pass found it (taken while the log was held):
    the pass reads it through its own descriptor, so a delete or close on the loop
    meanwhile cannot take the file from under a read (an unlinked file stays readable
    through an open descriptor), and the swap checks ``seg`` and ``size`` are still
    what the log holds (a truncation or delete meanwhile aborts the pass)."""

    seg: LogSegment
    fd: int  # os.dup of the segment's descriptor, closed when the pass ends
    size: int
    base_offset: int
    time_ms: int  # _segment_time_ms: the tombstone age reference
    created_ms: int
    log_path: Path


@dataclass(slots=True)
class _Plan:
    """What the exclusive start of a pass decided (see :meth:`LogCleaner.clean_once`)."""

    config: LogConfig  # the log's settings at the start (a reconfigure does not stop it)
    first_dirty: int
    d: int  # index of the first dirty segment
    k: int  # index of the first segment not read (the end of the cleanable range)
    end: int  # its base offset: a truncation below it aborts the pass
    ratio: float
    forced: bool
    sources: list[_Source]  # segments [0, k)
    groups: list[list[_Source]]  # the rewrite groups of [0, k) (cut later at the map's stop)


class Exclusive(Protocol):
    """Runs a step of a pass while nothing else touches the log; returns its result or
    raises CleaningAbortedError (see :meth:`LogCleaner.clean_once`)."""

    def __call__(self, step: Callable[[], _T], /) -> _T: ...


def _run_now(step: Callable[[], _T]) -> _T:
    """The exclusion of a caller that holds the log for the whole pass."""
    return step()


def _iter_raw_batches(seg: _Source, io_buffer_bytes: int) -> Iterator[bytes]:
    """Each whole batch of ``seg``, read in chunks of at most ``io_buffer_bytes`` (one
    larger batch is read alone)."""
    position, size = 0, seg.size
    while position + LOG_OVERHEAD <= size:  # bounded by the segment size
        chunk = os.pread(seg.fd, min(io_buffer_bytes, size - position), position)
        off = 0
        while off + HEADER_SIZE <= len(chunk):
            length = struct.unpack_from(">i", chunk, off + 8)[0] + LOG_OVERHEAD
            if length < HEADER_SIZE:
                raise CorruptMessageError(f"{seg.log_path}: bad batch length at {position + off}")
            if off + length > len(chunk):
                break
            yield chunk[off : off + length]
            off += length
        if off == 0:
            # One batch larger than the chunk: read it whole.
            head = os.pread(seg.fd, LOG_OVERHEAD, position)
            if len(head) < LOG_OVERHEAD:  # the file is shorter than the pass found it
                raise CorruptMessageError(f"{seg.log_path}: short read at {position}")
            length = struct.unpack_from(">i", head, 8)[0] + LOG_OVERHEAD
            if length < HEADER_SIZE or position + length > size:
                raise CorruptMessageError(f"{seg.log_path}: torn batch at {position}")
            yield os.pread(seg.fd, length, position)
            off = length
        position += off


# ---------------------------------------------------------------------- batch building


def _encode_records(records: list[DecodedRecord], base_offset: int, base_ts: int) -> bytes:
    """The records section with each record at its own offset (offset deltas from
    ``base_offset`` keep the gaps; the codec's encoder numbers records 0, 1, 2, ...)."""
    out = bytearray()
    for r in records:
        body = bytearray(b"\x00")  # record attributes: unused
        write_varlong(body, r.timestamp_ms - base_ts)
        write_varint(body, r.offset - base_offset)
        write_bytes(body, r.key)
        write_bytes(body, r.value)
        write_varint(body, len(r.headers))
        for hkey, hvalue in r.headers:
            write_bytes(body, hkey.encode("utf-8"))
            write_bytes(body, hvalue)
        write_varint(out, len(body))
        out += body
    return bytes(out)


def _build(
    h: BatchHeader, *, attributes: int, count: int, base_ts: int, max_ts: int, payload: bytes
) -> bytes:
    size = HEADER_SIZE + len(payload)
    buf = bytearray(size)
    _PREFIX.pack_into(
        buf, 0, h.base_offset, size - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC_V2
    )
    _AFTER_CRC.pack_into(
        buf,
        ATTRIBUTES_OFFSET,
        attributes,
        h.last_offset_delta,  # unchanged: the producer's last sequence depends on it
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
    )
    buf[HEADER_SIZE:] = payload
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, size))
    return bytes(buf)


def rebuild_batch(
    h: BatchHeader, kept: list[DecodedRecord], *, delete_horizon_ms: int | None = None
) -> bytes:
    """The batch ``h`` holding only ``kept`` (at least one record), at their offsets,
    compressed with the batch's own codec. With ``delete_horizon_ms`` (KIP-534) the
    base timestamp holds the horizon and the delete-horizon attribute bit is set; the
    records' timestamp deltas are taken from it, so every record keeps its time."""
    if h.attributes & TIMESTAMP_TYPE_BIT:
        # LogAppendTime: readers take every record's time from maxTimestamp.
        base_ts, max_ts = h.base_timestamp, h.max_timestamp
        kept = [r._replace(timestamp_ms=base_ts) for r in kept]
    else:
        base_ts, max_ts = kept[0].timestamp_ms, max(r.timestamp_ms for r in kept)
    attributes = h.attributes
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
        attributes |= DELETE_HORIZON_BIT
    codec = Compression(h.attributes & COMPRESSION_MASK)
    payload = compress(codec, _encode_records(kept, h.base_offset, base_ts))
    return _build(
        h, attributes=attributes, count=len(kept), base_ts=base_ts, max_ts=max_ts, payload=payload
    )


def delete_horizon_ms(h: BatchHeader) -> int | None:
    """The delete horizon a cleaner stamped into batch ``h`` (KIP-534), or None."""
    return h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None


def empty_batch(h: BatchHeader) -> bytes:
    """The header of ``h`` with no records (Kafka's writeEmptyHeader): same offsets,
    producer fields and flags, no compression, both timestamps the batch's max."""
    return _build(
        h,
        attributes=h.attributes & ~COMPRESSION_MASK,
        count=0,
        base_ts=h.max_timestamp,
        max_ts=h.max_timestamp,
        payload=b"",
    )


# ----------------------------------------------------------------------------- cleaner


def _holds_producer_state(h: BatchHeader, active_producers: Mapping[int, int] | None) -> bool:
    """Whether batch ``h`` must stay (at least as a header) so that producer state
    rebuilt from the log keeps its producer's epoch and last sequence (Kafka's
    RETAIN_EMPTY): it is the batch the broker named for its producer, or the broker
    named none (``active_producers`` None: every producer batch may be one)."""
    return h.producer_id != NO_PRODUCER_ID and (
        active_producers is None or active_producers.get(h.producer_id) == h.last_offset
    )


class _CleanedTxns:
    """What a rewrite learns of transactions as it walks the log from its start in
    offset order (Kafka's CleanedTransactionMetadata). A producer has at most one
    transaction open per partition, so its transactional batches since its last marker
    are that transaction's; when its next marker comes, every batch of the transaction
    has been decided. A marker whose transaction keeps no batch may go (see the module
    docstring), and its ``.txnindex`` entry goes at once: no aborted record is left for
    a read_committed reader to skip."""

    def __init__(self) -> None:
        self._kept: set[int] = set()  # producers whose open transaction keeps a batch
        self.emptied: set[int] = set()  # offsets of markers whose transaction kept none

    def batch_kept(self, h: BatchHeader) -> None:
        if h.is_transactional and h.producer_id != NO_PRODUCER_ID:
            self._kept.add(h.producer_id)

    def marker_read(self, h: BatchHeader) -> bool:
        """True if the transaction this marker ends keeps a batch in the cleaned log."""
        if h.producer_id in self._kept:
            self._kept.discard(h.producer_id)
            return True
        self.emptied.add(h.last_offset)
        return False


def _segment_time_ms(seg: LogSegment) -> int:
    """A segment's age reference: its largest record timestamp, else its creation time."""
    ts = seg.largest_timestamp()
    return seg.created_ms if ts == NO_TIMESTAMP else ts


class LogCleaner:
    """Compacts logs whose ``cleanup.policy`` includes ``compact``.

    How the broker uses it (Kafka's LogCleaner thread, one per broker):

    - One ``LogCleaner`` per broker, called from one worker thread (never the event
      loop: a pass reads and rewrites whole segments).
    - Every ``log.cleaner.backoff.ms`` (Kafka: 15000) while idle: for every log whose
      ``config.compact`` is true, :meth:`dirty_ratio` says how dirty it is; take the log
      with the highest ratio (or any log :meth:`needs_cleaning` reports forced by
      ``max.compaction.lag.ms``) and call :meth:`clean_once` with an ``exclusive``
      that runs a step while the partition is held (or hold the partition for the whole
      call and pass none), ``now_ms`` from the wall clock, ``active_producers`` from
      the partition's producer state (producer id -> last offset of its last batch, for
      producers not yet expired) and ``stop_requested`` for a stop or delete. Loop
      without backoff while a pass cleaned.
    - After a follower truncation: :meth:`truncate_checkpoint`; after deleting a
      partition: :meth:`forget`.
    - Time and size retention are not the cleaner's: the broker keeps calling
      ``log.delete_retention_segments()`` (it deletes nothing by time or size under
      ``cleanup.policy=compact`` alone).
    - If :meth:`clean_once` raises KafkaStorageError, the log's files may be mid-swap:
      close the log (or drop the object) and reopen it; ``Log.open`` finishes the swap.
    """

    def __init__(self, config: CleanerConfig | None = None) -> None:
        self.config = config or CleanerConfig()

    # ---------------------------------------------------------------- the range

    def first_dirty_offset(self, log: Log) -> int:
        """Where the next pass starts: the checkpoint, clamped to the log."""
        checkpointed = read_cleaner_checkpoint(log.path.parent).get(partition_of(log.path))
        if checkpointed is None or not (log.log_start_offset <= checkpointed <= log.log_end_offset):
            return log.log_start_offset
        return checkpointed

    def _dirty_range(
        self, log: Log, segments: list[LogSegment], now_ms: int
    ) -> tuple[int, int, int]:
        """(first dirty offset, index of its segment, index of the first segment not to
        clean): the end is at most the active segment, the high watermark and the
        first segment younger than min.compaction.lag.ms."""
        first_dirty = self.first_dirty_offset(log)
        bases = [s.base_offset for s in segments]
        d = max(0, bisect.bisect_right(bases, first_dirty) - 1)
        limit = min(bases[-1], log.high_watermark)
        lag_ms = log.config.min_compaction_lag_ms
        k = d
        while k < len(segments) - 1 and segments[k + 1].base_offset <= limit:
            if lag_ms > 0 and _segment_time_ms(segments[k]) > now_ms - lag_ms:
                break  # Kafka uses the segment's largest timestamp for the lag too
            k += 1
        return first_dirty, d, k

    def dirty_ratio(self, log: Log, now_ms: int) -> float:
        """Dirty bytes / (clean + dirty) bytes of the cleanable part of ``log``."""
        segments = log.segments_for_cleaner()
        _, d, k = self._dirty_range(log, segments, now_ms)
        clean = sum(s.size for s in segments[:d])
        dirty = sum(s.size for s in segments[d:k])
        return dirty / (clean + dirty) if dirty else 0.0

    def needs_cleaning(self, log: Log, now_ms: int) -> bool:
        """True if a pass over ``log`` now would clean (policy, ratio or max lag)."""
        if not log.config.compact:
            return False
        segments = log.segments_for_cleaner()
        _, d, k = self._dirty_range(log, segments, now_ms)
        if k <= d:
            return False
        return self._forced(log, segments[d], now_ms) or (
            self.dirty_ratio(log, now_ms) > log.config.min_cleanable_dirty_ratio
        )

    @staticmethod
    def _forced(log: Log, first_dirty_segment: LogSegment, now_ms: int) -> bool:
        """max.compaction.lag.ms: the first dirty segment's first batch is too old."""
        lag_ms = log.config.max_compaction_lag_ms
        first_ts = first_dirty_segment.first_batch_timestamp
        ts = first_ts if first_ts is not None and first_ts >= 0 else first_dirty_segment.created_ms
        return now_ms - ts > lag_ms

    # ------------------------------------------------------------- checkpoint upkeep

    def truncate_checkpoint(self, log: Log, offset: int) -> None:
        """After ``log.truncate_to(offset)``: a first dirty offset above the new end
        would skip the data appended next (Kafka's maybeTruncateCheckpoint)."""
        key = partition_of(log.path)
        current = read_cleaner_checkpoint(log.path.parent).get(key)
        if current is not None and current > offset:
            _update_cleaner_checkpoint(log.path.parent, key, offset)

    def forget(self, log_dir: Path) -> None:
        """Drop a deleted partition's checkpoint entry."""
        _update_cleaner_checkpoint(log_dir.parent, partition_of(log_dir), None)

    # ------------------------------------------------------------------- a pass

    def clean_once(
        self,
        log: Log,
        now_ms: int,
        *,
        active_producers: Mapping[int, int] | None = None,
        exclusive: Exclusive | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> CleanerStats:
        """Clean ``log`` once if it needs it (see the module docstring). Returns what
        was done. ``active_producers``: producer id -> last offset of that producer's
        last batch (the broker's producer state); None keeps every emptied producer
        batch's header. Raises KafkaStorageError on an I/O error or corrupt data (then
        reopen the log).

        Concurrency (Kafka's cleaner beside appends): ``exclusive(step)`` runs ``step``
        while nothing else touches ``log`` and returns its result, or raises
        CleaningAbortedError. Only three kinds of step run under it: the start (choose
        the range, take the segments below it with their own descriptors), each
        group's swap, and the checkpoint write. Between them the pass reads those
        segments (immutable until it swaps them: appends only write the active segment
        or roll new ones above) and writes its ``.cleaned`` files, while the owner may
        append, roll, read, move the high watermark or the log start, truncate or
        delete segments. A step finds out what changed: a truncation below the range's
        end, a segment of the group gone or shortened, a closed log, or
        ``stop_requested()`` (also polled between batches) abort the pass, with its
        unswapped ``.cleaned`` files removed; groups already swapped stay (each is a
        whole, valid segment). Without ``exclusive`` the caller holds the log for the
        whole call (the steps run in place)."""
        run: Exclusive = exclusive or _run_now

        def aborted_by() -> None:
            if stop_requested is not None and stop_requested():
                raise CleaningAbortedError("the partition is stopping")

        plan: _Plan | None = None
        stats = _Counters()
        try:
            found = run(lambda: self._plan(log, now_ms))
            if isinstance(found, CleanerStats):
                return found
            plan = found
            return self._clean_planned(
                log,
                plan,
                now_ms,
                run=run,
                aborted_by=aborted_by,
                active_producers=active_producers,
                stats=stats,
            )
        except CleaningAbortedError as e:
            first = -1 if plan is None else plan.first_dirty
            return CleanerStats(
                cleaned=False,
                reason=f"cleaning aborted: {e}",
                first_dirty_offset=first,
                end_offset=first,
                dirty_ratio=0.0 if plan is None else plan.ratio,
                aborted=True,
                **asdict(stats),
            )
        finally:
            for src in [] if plan is None else plan.sources:
                os.close(src.fd)

    def _clean_planned(
        self,
        log: Log,
        plan: _Plan,
        now_ms: int,
        *,
        run: Exclusive,
        aborted_by: Callable[[], None],
        active_producers: Mapping[int, int] | None,
        stats: _Counters,
    ) -> CleanerStats:
        """The pass after its start: map, rewrite and swap (see :meth:`clean_once`)."""

        def unchanged() -> None:
            self._check_unchanged(log, plan)

        offset_map = _OffsetMap(self.config.dedupe_buffer_bytes)
        try:
            built = self._build_offset_map(
                plan.sources, plan.d, plan.k, plan.first_dirty, offset_map, aborted_by=aborted_by
            )
        except (OSError, CorruptMessageError, struct.error) as e:
            run(unchanged)  # a truncation meanwhile reads short: an abort, not an error
            raise KafkaStorageError(f"cleaning {log.path}: reading the dirty section: {e}") from e
        if built.stop <= plan.d:
            reason = "an open transaction starts in the first dirty segment"
            if built.full:
                reason = "the offset map filled inside the first dirty segment"
            return CleanerStats(False, reason, plan.first_dirty, plan.first_dirty, plan.ratio)
        end = plan.sources[built.stop].base_offset if built.stop < plan.k else plan.end
        groups = _cut_groups(plan.groups, built.stop)
        txns = _CleanedTxns()  # carried across groups: a transaction may span them
        for group in groups:
            try:
                cleaned = self._clean_group(
                    log,
                    plan.config,
                    group,
                    latest=offset_map.offsets,
                    aborted=built.aborted_batches,
                    now_ms=now_ms,
                    active_producers=active_producers,
                    txns=txns,
                    stats=stats,
                    aborted_by=aborted_by,
                )
            except (OSError, CorruptMessageError, struct.error) as e:
                run(unchanged)
                raise KafkaStorageError(f"cleaning {log.path} failed: {e}") from e

            def swap(group: list[_Source] = group, cleaned: LogSegment = cleaned) -> None:
                aborted_by()  # a stop asked while the group was written: no swap
                self._swap_checked(log, plan, group, cleaned, txns.emptied)

            try:
                run(swap)
            except CleaningAbortedError:
                _discard(cleaned)
                raise
            except OSError as e:  # mid-swap: reopening the log finishes or undoes it
                raise KafkaStorageError(f"cleaning {log.path} failed: {e}") from e

        def checkpoint() -> None:
            self._check_unchanged(log, plan)
            # A crash before this leaves the old checkpoint: the next pass cleans the
            # same range again, which changes nothing already clean.
            _update_cleaner_checkpoint(log.path.parent, partition_of(log.path), end)

        try:
            run(checkpoint)
        except OSError as e:
            raise KafkaStorageError(f"cleaning {log.path} failed: {e}") from e
        return CleanerStats(
            cleaned=True,
            reason="forced by max.compaction.lag.ms"
            if plan.forced
            else f"dirty ratio {plan.ratio:.3f}",
            first_dirty_offset=plan.first_dirty,
            end_offset=end,
            dirty_ratio=plan.ratio,
            forced_by_max_lag=plan.forced,
            map_keys=len(offset_map.offsets),
            segments_before=built.stop,
            segments_after=len(groups),
            **asdict(stats),  # the counters, named as in CleanerStats
        )

    def _plan(self, log: Log, now_ms: int) -> _Plan | CleanerStats:
        """The exclusive start of a pass: the range to clean and its segments, each
        with a descriptor of the pass's own; or why there is nothing to do."""
        if log.closed:
            raise CleaningAbortedError("the log is closed")
        segments = log.segments_for_cleaner()
        first_dirty, d, k = self._dirty_range(log, segments, now_ms)
        clean_bytes = sum(s.size for s in segments[:d])
        dirty_bytes = sum(s.size for s in segments[d:k])
        ratio = dirty_bytes / (clean_bytes + dirty_bytes) if dirty_bytes else 0.0

        def skipped(reason: str) -> CleanerStats:
            return CleanerStats(False, reason, first_dirty, first_dirty, ratio)

        if not log.config.compact:
            return skipped(f"cleanup.policy is {log.config.cleanup_policy}")
        if k <= d:
            return skipped("no dirty segment below the active segment, high watermark and lag")
        forced = self._forced(log, segments[d], now_ms)
        if not forced and ratio <= log.config.min_cleanable_dirty_ratio:
            return skipped(
                f"dirty ratio {ratio:.3f} <= min.cleanable.dirty.ratio "
                f"{log.config.min_cleanable_dirty_ratio}"
            )
        sources: list[_Source] = []
        try:
            for seg in segments[:k]:
                sources.append(
                    _Source(
                        seg,
                        os.dup(seg.fd),
                        seg.size,
                        seg.base_offset,
                        _segment_time_ms(seg),
                        seg.created_ms,
                        seg.log_path,
                    )
                )
        except OSError as e:
            for src in sources:
                os.close(src.fd)
            raise KafkaStorageError(f"cleaning {log.path}: {e}") from e
        # From here on the truncation record says whether the range changed under us.
        log.lowest_truncation = LONG_MAX
        by_seg = {id(src.seg): src for src in sources}
        groups = [[by_seg[id(seg)] for seg in g] for g in self._group_segments(log, segments[:k])]
        return _Plan(
            log.config, first_dirty, d, k, segments[k].base_offset, ratio, forced, sources, groups
        )

    @staticmethod
    def _check_unchanged(log: Log, plan: _Plan) -> None:
        """Under exclusion: abort if the log was closed or truncated below the range."""
        if log.closed:
            raise CleaningAbortedError("the log was closed")
        if log.lowest_truncation < plan.end:
            raise CleaningAbortedError(
                f"the log was truncated to {log.lowest_truncation}, below the cleaned "
                f"range's end {plan.end}"
            )

    def _swap_checked(
        self,
        log: Log,
        plan: _Plan,
        group: list[_Source],
        cleaned: LogSegment,
        emptied: set[int],
    ) -> None:
        """Under exclusion: swap ``cleaned`` in if ``group``'s segments are still in the
        log as the pass read them (retention or DeleteRecords may have deleted them)."""
        self._check_unchanged(log, plan)
        segments = log.segments_for_cleaner()
        first = next((i for i, s in enumerate(segments) if s is group[0].seg), -1)
        now = segments[first : first + len(group)] if first >= 0 else []
        if len(now) != len(group) or any(
            s is not src.seg or s.size != src.size for s, src in zip(now, group, strict=True)
        ):
            raise CleaningAbortedError(
                f"segments from {group[0].base_offset} were deleted or changed meanwhile"
            )
        self._swap(log, first, now, cleaned, emptied)

    def _build_offset_map(
        self,
        segments: list[_Source],
        d: int,
        k: int,
        first_dirty: int,
        offset_map: _OffsetMap,
        *,
        aborted_by: Callable[[], None],
    ) -> _MapResult:
        """Fill ``offset_map`` from segments [d, k) (records at or above first_dirty)."""
        # Per producer id, the open transaction: its keyed records and its batches.
        pending_keys: dict[int, list[tuple[bytes, int]]] = {}
        pending_batches: dict[int, list[int]] = {}
        aborted: set[int] = set()
        stop, full = k, False
        for i in range(d, k):  # bounded by the segment count
            seg = segments[i]
            for raw in _iter_raw_batches(seg, self.config.io_buffer_bytes):
                aborted_by()
                h = parse_header(raw)
                if h.last_offset < first_dirty or h.records_count == 0:
                    continue
                batch = decode_batch(raw)
                pid = h.producer_id
                if h.is_control:
                    marker = end_transaction_marker(batch)
                    if marker is None:
                        continue
                    keys = pending_keys.pop(pid, [])
                    batches = pending_batches.pop(pid, [])
                    if marker.control_type is ControlRecordType.COMMIT:
                        for key, offset in keys:
                            if not offset_map.put(key, offset):
                                full = True
                                break
                    else:
                        aborted.update(batches)
                elif h.is_transactional:
                    pending_batches.setdefault(pid, []).append(h.base_offset)
                    keyed = [(r.key, r.offset) for r in batch.records if r.key is not None]
                    # Each pending key and the batch itself cost an entry until the
                    # marker comes (an aborted batch's offset is kept for the rewrite).
                    cost = sum(len(key) for key, _ in keyed)
                    cost += MAP_ENTRY_OVERHEAD_BYTES * (len(keyed) + 1)
                    if not offset_map.reserve(cost):
                        full = True
                    pending_keys.setdefault(pid, []).extend(keyed)
                else:
                    for r in batch.records:
                        if (
                            r.key is not None
                            and r.offset >= first_dirty
                            and not offset_map.put(r.key, r.offset)
                        ):
                            full = True
                            break
                if full:
                    break
            if full:
                # Segments below i are wholly mapped; i only partly (harmless: every
                # mapped offset is a real record that stays).
                stop = i
                break
        if pending_batches:
            # Kafka's last stable offset: nothing from an open transaction's first
            # batch on may be cleaned (its fate is unknown).
            lso = min(batches[0] for batches in pending_batches.values())
            bases = [s.base_offset for s in segments]
            stop = min(stop, max(0, bisect.bisect_right(bases, lso) - 1))
        return _MapResult(stop, aborted, full)

    def _group_segments(self, log: Log, segments: list[LogSegment]) -> list[list[LogSegment]]:
        """Consecutive segments whose cleaned output surely fits one segment (their
        total size, index entries and int32 relative offsets; Kafka's
        groupSegmentsBySize). The log's next segment bounds each one's last offset."""
        config = log.config
        all_bases = [s.base_offset for s in log.segments_for_cleaner()]
        groups: list[list[LogSegment]] = []
        i = 0
        while i < len(segments):  # bounded by the segment count
            group = [segments[i]]
            size = segments[i].size
            index_bytes = len(segments[i].offset_index) * OFFSET_ENTRY_BYTES
            time_bytes = len(segments[i].time_index) * TIME_ENTRY_BYTES
            i += 1
            while i < len(segments):
                nxt = segments[i]
                j = bisect.bisect_right(all_bases, nxt.base_offset)
                next_base = all_bases[j] if j < len(all_bases) else nxt.next_offset
                if (
                    size + nxt.size > config.segment_bytes
                    or index_bytes + len(nxt.offset_index) * OFFSET_ENTRY_BYTES
                    > config.segment_index_bytes
                    or time_bytes + (len(nxt.time_index) + 1) * TIME_ENTRY_BYTES
                    > config.segment_index_bytes
                    or next_base - 1 - group[0].base_offset > INT32_MAX
                ):
                    break
                group.append(nxt)
                size += nxt.size
                index_bytes += len(nxt.offset_index) * OFFSET_ENTRY_BYTES
                time_bytes += len(nxt.time_index) * TIME_ENTRY_BYTES
                i += 1
            groups.append(group)
        return groups

    def _clean_group(
        self,
        log: Log,
        config: LogConfig,
        group: list[_Source],
        *,
        latest: dict[bytes, int],
        aborted: set[int],
        now_ms: int,
        active_producers: Mapping[int, int] | None,
        txns: _CleanedTxns,
        stats: _Counters,
        aborted_by: Callable[[], None],
    ) -> LogSegment:
        """Write the cleaned copy of ``group`` as ``<base>.*.cleaned``, fsynced."""
        base = group[0].base_offset
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (log.path / file_name(base, suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
        cleaned = LogSegment(
            log.path,
            base,
            index_bytes_max=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            created_ms=group[0].created_ms,
            suffix=CLEANED_SUFFIX,
        )
        try:
            buf = bytearray()
            spans: list[BatchSpan] = []
            retention_ms = config.delete_retention_ms
            for seg in group:
                drop_tombstones = now_ms - seg.time_ms > retention_ms
                for raw in _iter_raw_batches(seg, self.config.io_buffer_bytes):
                    aborted_by()
                    out = self._clean_batch(
                        raw,
                        latest=latest,
                        aborted=aborted,
                        drop_tombstones=drop_tombstones,
                        active_producers=active_producers,
                        txns=txns,
                        marker_horizon_ms=min(now_ms + retention_ms, LONG_MAX),
                        now_ms=now_ms,
                        stats=stats,
                    )
                    if out is None:
                        continue
                    h = parse_header(out)
                    spans.append((len(buf), len(out), h.last_offset, h.max_timestamp))
                    buf += out
                    if len(buf) >= self.config.io_buffer_bytes:
                        _crash_point("append to .cleaned")
                        cleaned.append(buf, spans)
                        stats.bytes_written += len(buf)
                        buf, spans = bytearray(), []
            if spans:
                _crash_point("append to .cleaned")
                cleaned.append(buf, spans)
                stats.bytes_written += len(buf)
            cleaned.on_become_inactive()
            _crash_point("fsync .cleaned")
            cleaned.flush()
            fsync_dir(log.path)
        except CleaningAbortedError:
            _discard(cleaned)
            raise
        except BaseException:
            cleaned.close()  # the .cleaned files stay: the next pass or open removes them
            raise
        return cleaned

    @staticmethod
    def _clean_batch(
        raw: bytes,
        *,
        latest: dict[bytes, int],
        aborted: set[int],
        drop_tombstones: bool,
        active_producers: Mapping[int, int] | None,
        txns: _CleanedTxns,
        marker_horizon_ms: int,
        now_ms: int,
        stats: _Counters,
    ) -> bytes | None:
        """What batch ``raw`` becomes: itself, a rebuilt batch, an empty header, or
        None (removed)."""
        h = parse_header(raw)
        stats.bytes_read += len(raw)
        stats.records_read += h.records_count
        if h.is_control:
            return LogCleaner._clean_marker(
                raw,
                h,
                txns=txns,
                active_producers=active_producers,
                horizon_ms=marker_horizon_ms,
                now_ms=now_ms,
                stats=stats,
            )
        out = LogCleaner._clean_data_batch(
            raw,
            h,
            latest=latest,
            aborted=aborted,
            drop_tombstones=drop_tombstones,
            active_producers=active_producers,
            stats=stats,
        )
        if out is not None:
            txns.batch_kept(h)
        return out

    @staticmethod
    def _clean_marker(
        raw: bytes,
        h: BatchHeader,
        *,
        txns: _CleanedTxns,
        active_producers: Mapping[int, int] | None,
        horizon_ms: int,
        now_ms: int,
        stats: _Counters,
    ) -> bytes | None:
        """A control batch: kept while its transaction keeps a batch or it holds its
        producer's state; else stamped with ``horizon_ms`` on the first pass that
        finds it so, and removed by the first pass at or past that horizon."""
        batch = decode_batch(raw)
        if end_transaction_marker(batch) is None:
            return raw  # not a COMMIT/ABORT marker: nothing says when it could go
        if txns.marker_read(h) or _holds_producer_state(h, active_producers):
            return raw
        horizon = delete_horizon_ms(h)
        if horizon is None:
            stats.marker_horizons_set += 1
            return rebuild_batch(h, list(batch.records), delete_horizon_ms=horizon_ms)
        if horizon <= now_ms:
            stats.markers_removed += 1
            return None
        return raw

    @staticmethod
    def _clean_data_batch(
        raw: bytes,
        h: BatchHeader,
        *,
        latest: dict[bytes, int],
        aborted: set[int],
        drop_tombstones: bool,
        active_producers: Mapping[int, int] | None,
        stats: _Counters,
    ) -> bytes | None:
        """A data batch: itself, a rebuilt batch, an empty header, or None."""
        if h.records_count == 0:
            # A header an earlier pass kept: it stays while it holds producer state.
            if _holds_producer_state(h, active_producers):
                return raw
            stats.batches_removed += 1
            return None
        records = decode_batch(raw).records
        if h.is_transactional and h.base_offset in aborted:
            stats.aborted_records_removed += len(records)
            kept: list[DecodedRecord] = []
        else:
            kept = []
            for r in records:
                if r.key is None:
                    kept.append(r)  # see the module docstring: kept, unlike Kafka
                elif latest.get(r.key, r.offset) > r.offset:
                    continue  # superseded by a later record of the key
                elif r.value is None and drop_tombstones:
                    stats.tombstones_removed += 1
                else:
                    kept.append(r)
        stats.records_kept += len(kept)
        if len(kept) == len(records):
            return raw
        if kept:
            return rebuild_batch(h, kept)
        if _holds_producer_state(h, active_producers):
            stats.empty_batches_kept += 1
            return empty_batch(h)
        stats.batches_removed += 1
        return None

    @staticmethod
    def _swap(
        log: Log, first: int, group: list[LogSegment], cleaned: LogSegment, emptied: set[int]
    ) -> None:
        """Steps 2-4 of the on-disk protocol, then the in-memory swap at ``first``.
        ``emptied``: offsets of markers whose transaction kept no batch."""
        directory = log.path
        try:
            # The cleaned segment keeps the aborted-transaction entries of the segments
            # it replaces whose transaction keeps a batch (so its marker stays and
            # bounds it). The others go: no aborted record is left to skip, and an
            # entry whose marker a later pass removes would, unbounded, make a
            # read_committed reader skip that producer's later transactions.
            entries = [
                e for old in group for e in old.txn_index.entries if e.last_offset not in emptied
            ]
            if entries:
                cleaned.txn_index.reset(entries)
            # 2. .cleaned -> .swap, the log file last: its rename is the commit point.
            _rename_suffix(cleaned, CLEANED_SUFFIX, SWAP_SUFFIX)
            _crash_point("fsync dir after .swap")
            fsync_dir(directory)
            # 3. delete the old segments.
            for old in group:
                old.close()
                paths = (
                    old.log_path,
                    old.offset_index.path,
                    old.time_index.path,
                    old.txn_index.path,
                )
                for p in paths:
                    _crash_point(f"rename {p.name} to .deleted")
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(p, p.with_name(p.name + DELETED_SUFFIX))
                for p in paths:
                    _crash_point(f"unlink {p.name}.deleted")
                    p.with_name(p.name + DELETED_SUFFIX).unlink(missing_ok=True)
            _crash_point("fsync dir after delete")
            fsync_dir(directory)
            # 4. .swap -> final names.
            _rename_suffix(cleaned, SWAP_SUFFIX, "")
            _crash_point("fsync dir after final rename")
            fsync_dir(directory)
        except BaseException:
            cleaned.close()
            raise
        log.replace_cleaned_segments(first, len(group), cleaned)


def _cut_groups(groups: list[list[_Source]], stop: int) -> list[list[_Source]]:
    """The groups of sources [0, stop) (grouping is greedy from the front, so those of
    a prefix are the whole range's groups cut at ``stop``)."""
    out: list[list[_Source]] = []
    taken = 0
    for group in groups:  # bounded by the segment count
        if taken >= stop:
            break
        out.append(group[: stop - taken])
        taken += len(group)
    return out


def _discard(cleaned: LogSegment) -> None:
    """Remove a ``.cleaned`` segment an aborted pass will not swap in."""
    cleaned.close()
    for path in (
        cleaned.log_path,
        cleaned.offset_index.path,
        cleaned.time_index.path,
        cleaned.txn_index.path,
    ):
        path.unlink(missing_ok=True)


def _rename_suffix(seg: LogSegment, old: str, new: str) -> None:
    """Rename a segment's three files from suffix ``old`` to ``new``, indexes first so
    that the log file's rename, last, commits the step (Kafka's changeFileSuffixes)."""
    for index in (seg.offset_index, seg.time_index, seg.txn_index):
        target = index.path.with_name(index.path.name.removesuffix(old) + new)
        _crash_point(f"rename {index.path.name}")
        index.rename(target)
    target = seg.log_path.with_name(seg.log_path.name.removesuffix(old) + new)
    _crash_point(f"rename {seg.log_path.name}")
    os.replace(seg.log_path, target)
    seg.log_path = target


@dataclass(slots=True)
class _Counters:
    """CleanerStats' counters while a pass runs (CleanerStats is frozen; these count)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    empty_batches_kept: int = 0
    batches_removed: int = 0
    marker_horizons_set: int = 0
    markers_removed: int = 0
