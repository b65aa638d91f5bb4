"""The segment log: Kafka's partition log (UnifiedLog + LocalLog) for one directory.

(Over 700 lines: appends, reads, truncation, retention and recovery all move the same
segment list and offsets under one set of invariants; the pure helpers already live
apart in segment.py, index.py, epoch_cache.py, checkpoint.py and log_validator.py.)

A :class:`Log` stores RecordBatch v2 bytes in segments (see ``segment.py``), assigns
offsets, keeps the leader-epoch cache, rolls, retains, truncates and recovers. It reads
batch headers only; it decodes records in one place, :meth:`Log.offset_for_timestamp`,
to find the exact record.

API (what the broker and Raft call)::

    Log.open(path, config, *, clock_ms=None) -> Log      # recovery happens here
    log.close()                                           # flush, fsync, checkpoints, marker
    log.log_start_offset / log_end_offset / recovery_point / high_watermark
    log.size_bytes / segment_count / latest_epoch / leader_epoch_cache
    log.append_as_leader(batches, leader_epoch) -> LogAppendInfo
    log.append_as_follower(batches) -> LogAppendInfo
    log.read(start_offset, max_bytes, *, max_offset=None, min_one_batch=True,
             whole_batches=False) -> bytes
    log.offset_for_timestamp(ts_ms) -> OffsetAndTimestamp | None
    log.end_offset_for_epoch(epoch) -> (epoch, end_offset)   # OffsetsForLeaderEpoch
    log.update_high_watermark(offset) -> int
    log.truncate_to(offset) -> bool
    log.truncate_fully_and_start_at(offset)
    log.maybe_increment_log_start_offset(offset) -> bool    # delete-records
    log.delete_retention_segments() -> int                  # segments deleted
    log.roll() / log.flush(up_to_offset=None) / log.maybe_flush()

Files in the directory: segment files, ``leader-epoch-checkpoint``,
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (Kafka's
checkpoint format with one entry holding the offset; Kafka keeps these per data
directory, raftka per log), and ``.kafka_cleanshutdown`` while the log is closed
cleanly. A checkpoint is written when its content changes (an absent file reads as
offset 0 or no epochs), so a new log has none until its first epoch, flush-and-close,
truncation or delete-records.

Rules, as Kafka's unless noted:

- Validation precedes any write: a request with any bad batch (framing, CRC, size above
  ``max.message.bytes``) appends nothing. A whole request lands in one segment.
- The high watermark bounds retention and delete-records (nothing at or above it is
  deleted). It starts at the log start offset; the replication layer moves it.
- ``truncate_to(offset)`` removes every batch whose last offset is >= ``offset``; if
  ``offset`` falls inside a batch, the log end becomes that batch's base offset.
- ``read`` returns a slice of one segment (never spanning two) from the batch holding
  the start offset; it may end in a partial batch unless ``whole_batches=True``
  (Kafka's fetch does the same; ``max_offset`` always cuts at a batch boundary).
- An OSError on write leaves nothing of the failed request visible and raises
  KafkaStorageError; the log stays usable (Kafka would take the whole log directory
  offline; raftka leaves that decision to the broker).
- Time-based roll uses the first batch's timestamp (Kafka's rolling base timestamp).

Not thread-safe: one caller at a time (the broker holds a lock per partition).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple, NoReturn

import crc32c

from raftka.common.errors import (
    CorruptMessageError,
    FencedLeaderEpochError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnknownServerError,
)
from raftka.common.record.batch import decode_batch
from raftka.common.record.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TimestampType,
    compute_crc,
    parse_header,
)
from raftka.common.record.read_committed import AbortedTransaction
from raftka.common.time import wall_clock_ms
from raftka.storage import segment
from raftka.storage.checkpoint import TMP_SUFFIX, fsync_dir, read_checkpoint, write_checkpoint
from raftka.storage.cleaner import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    complete_interrupted_clean,
    was_cleaned,
)
from raftka.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from raftka.storage.log_config import LONG_MAX, LogConfig
from raftka.storage.segment import BatchSpan, LogSegment
from raftka.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, collect_aborted

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
_STRAY_SUFFIXES: Final = (segment.DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)
_ATTR = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_MAX_TIMESTAMP_OFFSET: Final = 35
# The whole v2 header (see raftka.common.record.header), unpacked to a plain tuple.
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == HEADER_SIZE
# The fields the single-batch fast path checks, the rest skipped as padding (a 13-tuple
# costs about 0.1 us more to build): batchLength, magic, crc, lastOffsetDelta,
# maxTimestamp, recordsCount.
_HEADER_CHECKED = struct.Struct(">8xi4xbI2xi8xq8x2x4xi")
assert _HEADER_CHECKED.size == HEADER_SIZE
# baseOffset, batchLength, partitionLeaderEpoch: the leader's stamp, in one pack.
_STAMP = struct.Struct(">qii")
# What validation keeps of a batch: (position, size, base offset, partition leader
# epoch, attributes, last offset delta, max timestamp, records count).
_Header = tuple[int, int, int, int, int, int, int, int]


def _reject(view: memoryview, pos: int, size_max: int) -> NoReturn:
    """Raise the error for the first check the batch at ``pos`` fails (the append
    loops call this once a fast combined check has failed)."""
    _validated_headers(view, size_max, start=pos)
    raise AssertionError(f"batch at byte {pos} failed a check that no longer fails")


def _validated_headers(
    buf: bytes | bytearray | memoryview, size_max: int, *, start: int = 0
) -> list[_Header]:
    """Check every batch of a request before anything is written: framing (as
    :func:`parse_header`), whole, CRC-32C, at most ``size_max`` (max.message.bytes).

    Raises CorruptMessageError or MessageTooLargeError at the first bad batch. The
    codec's ``iter_batches`` checks the same but builds a BatchHeader per batch, which
    cost about 2 us of a 16 KiB append; this loop keeps plain tuples.
    """
    view = memoryview(buf)
    end = len(view)
    out: list[_Header] = []
    pos = start
    unpack = _HEADER.unpack_from
    crc = crc32c.crc32c
    while pos < end:
        if end - pos < HEADER_SIZE:
            parse_header(view, pos)  # raises: truncated header
        base, length, epoch, magic, stored_crc, attributes, delta, _, max_ts, _, _, _, count = (
            unpack(view, pos)
        )
        if magic != MAGIC_V2 or length < HEADER_SIZE - LOG_OVERHEAD or delta < 0 or count < 0:
            parse_header(view, pos)  # raises the codec's own error for this header
            raise AssertionError("parse_header accepted a header the log rejects")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptMessageError(
                f"record batch at byte {pos} is truncated: {end - pos} of {size} bytes present"
            )
        if crc(view[pos + ATTRIBUTES_OFFSET : pos + size]) != stored_crc:
            raise CorruptMessageError(f"record batch at byte {pos} fails its CRC-32C check")
        if size > size_max:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes {size_max}"
            )
        out.append((pos, size, base, epoch, attributes, delta, max_ts, count))
        pos += size
    return out


def _checkpoint_holds(path: Path, read: list[list[int]] | None, offset: int) -> bool:
    """True if the single-offset checkpoint at ``path``, which read as ``read``, holds
    ``offset``: it parsed to exactly that, or it is absent and ``offset`` is 0 (what
    reading an absent file gives)."""
    if read is not None:
        return read == [[offset]]
    return offset == 0 and not path.exists()


class UnexpectedAppendOffsetError(UnknownServerError):
    """A follower append whose first offset is not the log end offset (Kafka's
    UnexpectedAppendOffsetException, reported on the wire as UNKNOWN_SERVER_ERROR)."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class LogAppendInfo(NamedTuple):
    """What an append did (Kafka's LogAppendInfo, the parts raftka uses).

    Immutable. A NamedTuple rather than a frozen dataclass because it is built on every
    append: a frozen dataclass's ``__init__`` cost 1.8 us here, a sixth of the append
    budget (bench/log_bench.py), a NamedTuple about 0.3 us.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless message.timestamp.type is LogAppendTime
    log_start_offset: int
    records_count: int
    batch_count: int
    valid_bytes: int


_tuple_new: Final = tuple.__new__


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp_ms: int


class Log:
    """One replica's log in one directory. Build with :meth:`open`."""

    def __init__(self, path: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.path = path
        self.config = config
        # Read on every append; the config is frozen, and a property call costs ~60 ns.
        self._log_append_time = config.log_append_time
        self._segment_ms_max = config.max_segment_ms  # segment.ms, or the max compaction lag
        self._clock_ms = clock_ms
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._ts_prefix_max: list[int] = []  # running max of segments' largest timestamps
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock_ms()
        self._closed = False
        # Set by an owner that runs fsyncs itself, off the appending thread (the
        # broker's I/O workers): roll() then leaves the old segment and the directory
        # entry to the next flush(), as Kafka's roll schedules that flush (the recovery
        # point stays below the unflushed segment, so a crash meanwhile recovers it);
        # and flush.ms is left to the owner's timer (flush_due), as Kafka's scheduler.
        self.defer_flushes = False
        self._dir_fsync_due = False
        # The lowest offset a truncation cut the log to since the cleaner last reset it
        # (LONG_MAX: none): a pass reading beside appends aborts if it fell below the
        # range it cleans (storage/cleaner.py).
        self.lowest_truncation = LONG_MAX
        self.leader_epoch_cache = LeaderEpochFileCache(path / LEADER_EPOCH_CHECKPOINT)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls, path: Path | str, config: LogConfig, *, clock_ms: Callable[[], int] | None = None
    ) -> Log:
        """Open (creating if needed) the log in ``path``, recovering after a crash.

        Never raises on bad data in the files: recovery keeps the longest valid prefix.
        Raises KafkaStorageError if the directory cannot be read or written.
        """
        log = cls(Path(path), config, clock_ms or wall_clock_ms)
        try:
            log._load()
        except OSError as e:
            log._close_files()
            raise KafkaStorageError(f"cannot open log in {path}: {e}") from e
        return log

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.path,
            base_offset,
            index_bytes_max=self.config.segment_index_bytes,
            index_interval_bytes=self.config.index_interval_bytes,
            created_ms=self._clock_ms(),
        )

    def _load(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        marker = self.path / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        # Log cleaner: finish a swap a crash interrupted, drop unfinished .cleaned files.
        if complete_interrupted_clean(self.path):
            clean = False  # a completed swap's indexes are rebuilt by recovery
        bases: list[int] = []
        index_bases: list[tuple[int, Path]] = []
        for p in self.path.iterdir():
            name = p.name
            if name.endswith(_STRAY_SUFFIXES):
                p.unlink(missing_ok=True)  # unfinished delete, clean or checkpoint write
                continue
            stem, dot, suffix = name.partition(".")
            if len(stem) != 20 or not stem.isdigit():
                continue
            if dot + suffix == segment.LOG_SUFFIX:
                bases.append(int(stem))
            elif dot + suffix in (
                segment.INDEX_SUFFIX,
                segment.TIME_INDEX_SUFFIX,
                TXN_INDEX_SUFFIX,
            ):
                index_bases.append((int(stem), p))
        for base, p in index_bases:
            if base not in bases:
                p.unlink(missing_ok=True)  # an index without its log is an orphan
        bases.sort()

        rp = read_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, 0, 1)
        ls = read_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, 0, 1)
        cache, cache_ok = LeaderEpochFileCache.load(self.path / LEADER_EPOCH_CHECKPOINT)
        self.leader_epoch_cache = cache
        loaded_epochs = cache.entries()
        recovery_point = rp[0][0] if rp and len(rp) == 1 else 0
        if not cache_ok:
            clean, recovery_point = False, 0  # rebuild the epoch cache from every batch

        self._segments = [self._new_segment(b) for b in bases]
        self._bases = list(bases)
        recover_from = len(self._segments)
        if not clean:
            recover_from = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        for i in range(min(recover_from, len(self._segments))):
            if not self._segments[i].load():
                recover_from = i
                break
        if recover_from < len(self._segments):
            self._recover(recover_from)

        start_ck = ls[0][0] if ls and len(ls) == 1 else 0
        if not self._segments:
            self._segments = [self._new_segment(start_ck)]
            self._bases = [start_ck]
            fsync_dir(self.path)  # the new segment's directory entry is durable
        self._log_end_offset = self._segments[-1].next_offset
        self._log_start_offset = max(start_ck, self._segments[0].base_offset)
        self._rebuild_ts_prefix()
        if self._log_start_offset > self._log_end_offset:
            self.truncate_fully_and_start_at(self._log_start_offset)
        cache.truncate_from_end(self._log_end_offset, persist=False)
        cache.truncate_from_start(self._log_start_offset, persist=False)
        # Rewrite a checkpoint only if a reopen would read something else from it (each
        # write costs two fsyncs, which stall behind other writeback: opening a new or
        # cleanly closed log then fsyncs nothing it has not changed). An absent file
        # reads as an empty epoch cache and as offset 0.
        if not cache_ok or cache.entries() != loaded_epochs:
            cache.flush()
        self._recovery_point = self._log_end_offset
        self._high_watermark = self._log_start_offset
        if not (
            _checkpoint_holds(self.path / RECOVERY_POINT_CHECKPOINT, rp, self._recovery_point)
            and _checkpoint_holds(
                self.path / LOG_START_OFFSET_CHECKPOINT, ls, self._log_start_offset
            )
        ):
            self._write_offset_checkpoints()
        # From here on a crash must trigger recovery.
        if marker.exists():
            marker.unlink()
            fsync_dir(self.path)

    def _recover(self, first: int) -> None:
        """Rescan segments from index ``first``; cut at the first bad batch and delete
        every segment after it; rebuild the epoch cache from the surviving batches."""
        cache = self.leader_epoch_cache
        cache.truncate_from_end(self._segments[first].base_offset, persist=False)

        def on_batch(epoch: int, base_offset: int) -> None:
            cache.assign(epoch, base_offset, persist=False)

        keep = len(self._segments)
        # A compacted log (by policy now, or cleaned once) has offset gaps (cleaner.py).
        gaps = self.config.compact or was_cleaned(self.path)
        for i in range(first, len(self._segments)):
            seg = self._segments[i]
            prev_next = self._segments[i - 1].next_offset if i > 0 else seg.base_offset
            if seg.base_offset != prev_next and not (gaps and seg.base_offset > prev_next):
                keep = i  # a gap or overlap: the previous segment was cut short
                break
            limit = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else None
            cut = seg.recover(on_batch, offsets_may_gap=gaps, offset_limit=limit)
            seg.flush()
            if cut > 0:
                keep = i + 1
                break
        for seg in self._segments[keep:]:
            seg.delete()
        del self._segments[keep:], self._bases[keep:]
        fsync_dir(self.path)

    # --------------------------------------------------------------- properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign (Kafka's LEO)."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def active_segment_base_offset(self) -> int:
        """The base offset of the segment appends go to (changes when the log rolls)."""
        return self._bases[-1]

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset) for a follower's divergence check."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end]. Returns the value."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        return self._high_watermark

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.path} is closed")

    # ---------------------------------------------------------------- appending
    #
    # The append path is the log's hot loop (bench/log_bench.py holds it to >= 60% of a
    # raw file write). It validates a whole request in one pass over header tuples
    # (no per-batch objects), copies the request once into a bytearray to stamp base
    # offsets and epochs (one memcpy: cheaper than building an iovec list in Python),
    # then writes it with one pwrite. A request of one batch (the usual produce request)
    # takes a fast path that does all of that in one frame.

    def reconfigure(self, config: LogConfig) -> None:
        """Take a topic's new settings on the open log (``topics alter``): the next
        append, roll, flush and retention pass use them; nothing already stored moves."""
        self.config = config
        self._log_append_time = config.log_append_time
        self._segment_ms_max = config.max_segment_ms

    def append_as_leader(self, batches: bytes | bytearray, leader_epoch: int) -> LogAppendInfo:
        """Validate, assign offsets from the log end, stamp ``leader_epoch``, append."""
        if self._closed:
            self._check_open()
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise FencedLeaderEpochError(
                f"leader epoch {leader_epoch} is older than the log's latest epoch {latest}"
            )
        config = self.config
        end = len(batches)
        # Fast path: a request holding exactly one batch (a producer sends one batch per
        # partition per request) with CreateTime. The same checks, stamps and effects as
        # the general path below, in this one frame: no spans list, no per-batch loop
        # state, no keyword-argument calls. Anything else (several batches, a short or
        # torn request, LogAppendTime) takes the general path.
        if end >= HEADER_SIZE and not self._log_append_time:
            length, magic, stored_crc, delta, max_ts, count = _HEADER_CHECKED.unpack_from(batches)
            if length + LOG_OVERHEAD == end:
                # One whole batch: the framing checks on length hold (end >= HEADER_SIZE).
                if (
                    magic != MAGIC_V2
                    or delta < 0
                    or count < 0
                    or end > config.max_message_bytes
                    or crc32c.crc32c(memoryview(batches)[ATTRIBUTES_OFFSET:]) != stored_crc
                ):
                    _reject(memoryview(batches), 0, config.max_message_bytes)
                if count != delta + 1:
                    raise InvalidRecordError(
                        f"record batch at byte 0 holds {count} records but spans "
                        f"{delta + 1} offsets"
                    )
                first_offset = self._log_end_offset
                last_offset = first_offset + delta
                # Our own copy to stamp (one memcpy); the caller's bytes stay as sent.
                buf = bytearray(batches)
                _STAMP.pack_into(buf, 0, first_offset, length, leader_epoch)
                seg = self._active_segment_for(end, last_offset, max_ts)
                try:
                    seg.append_batch(buf, last_offset, max_ts)
                except OSError as e:
                    raise KafkaStorageError(f"append to {seg.log_path} failed: {e}") from e
                self._after_append(seg, count)
                if latest != leader_epoch:
                    cache.assign(leader_epoch, first_offset)
                # As the general path reports it: a batch without timestamps (-1, or any
                # value below) reports -1 and first_offset - 1 as the offset of the max.
                stamped = max_ts > NO_TIMESTAMP
                return _tuple_new(
                    LogAppendInfo,
                    (
                        first_offset,
                        last_offset,
                        max_ts if stamped else NO_TIMESTAMP,
                        last_offset if stamped else first_offset - 1,
                        -1,
                        self._log_start_offset,
                        count,
                        1,
                        end,
                    ),
                )
        size_max = config.max_message_bytes
        append_time = config.log_append_time
        # The clock is read only when something needs it (LogAppendTime here; a roll
        # without record timestamps or flush.ms in _append): it costs on every append.
        now = self._clock_ms() if append_time else -1
        buf = bytearray(batches)
        view = memoryview(buf)
        end = len(buf)
        first_offset = next_offset = self._log_end_offset
        spans: list[BatchSpan] = []
        records = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, next_offset - 1
        unpack, stamp, crc = _HEADER.unpack_from, _STAMP.pack_into, crc32c.crc32c
        pos = 0
        # Validate and stamp in one pass over our own copy; nothing is written until
        # the loop has accepted every batch. The checks are _validated_headers'.
        while pos < end:
            if end - pos < HEADER_SIZE:
                _reject(view, pos, size_max)
            _, length, _, magic, stored_crc, attributes, delta, _, batch_max_ts, _, _, _, count = (
                unpack(view, pos)
            )
            size = length + LOG_OVERHEAD
            if (
                magic != MAGIC_V2
                or length < HEADER_SIZE - LOG_OVERHEAD
                or delta < 0
                or count < 0
                or pos + size > end
                or size > size_max
                or crc(view[pos + ATTRIBUTES_OFFSET : pos + size]) != stored_crc
            ):
                _reject(view, pos, size_max)
            if count != delta + 1:
                raise InvalidRecordError(
                    f"record batch at byte {pos} holds {count} records but spans "
                    f"{delta + 1} offsets"
                )
            # Base offset and leader epoch lie before the CRC'd range (batchLength,
            # between them, is written back unchanged).
            stamp(buf, pos, next_offset, length, leader_epoch)
            if append_time:
                batch_max_ts = now
                _ATTR.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
                _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now)
                _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(view, pos, size))
            last = next_offset + delta
            spans.append((pos, size, last, batch_max_ts))
            if batch_max_ts > max_ts:
                max_ts, offset_of_max_ts = batch_max_ts, last
            records += count
            next_offset = last + 1
            pos += size
        view.release()
        if not spans:
            return self._empty_info()
        info = self._append(
            buf,
            spans,
            first_offset=first_offset,
            records=records,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max_ts,
            now=now,
            append_time_ms=now if append_time else -1,
        )
        if latest != leader_epoch:
            cache.assign(leader_epoch, first_offset)
        return info

    def append_as_follower(self, batches: bytes | bytearray) -> LogAppendInfo:
        """Append batches that already carry their offsets (replication, Raft fetch).
        They must start at the log end and be contiguous; epochs never decrease. On a
        compacted log (cleanup.policy has compact) offsets need only grow from the log
        end: the leader's cleaner leaves gaps (Kafka's follower accepts them too)."""
        if self._closed:
            self._check_open()
        data = memoryview(batches)
        headers = _validated_headers(data, self.config.max_message_bytes)
        if not headers:
            return self._empty_info()
        now = -1  # read lazily in _append, as for leader appends
        first_offset = expected = self._log_end_offset
        epoch_floor = self.leader_epoch_cache.latest_epoch
        spans: list[BatchSpan] = []
        epochs: list[tuple[int, int]] = []
        records = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, expected - 1
        gaps = self.config.compact
        for pos, size, base, epoch, _, delta, batch_max_ts, count in headers:
            if base != expected and not (gaps and base > expected):
                if not spans:
                    raise UnexpectedAppendOffsetError(
                        f"follower append starts at offset {base} but the log end "
                        f"offset is {expected}",
                        base,
                        expected,
                    )
                raise InvalidRecordError(
                    f"record batch at byte {pos} starts at offset {base}, "
                    f"expected {expected}: offsets must be contiguous"
                )
            if epoch_floor is not None and epoch < epoch_floor:
                raise InvalidRecordError(
                    f"record batch at offset {base} has leader epoch {epoch}, "
                    f"below the log's {epoch_floor}"
                )
            if epoch != epoch_floor:
                epochs.append((epoch, base))
            epoch_floor = epoch
            last = base + delta
            spans.append((pos, size, last, batch_max_ts))
            if batch_max_ts > max_ts:
                max_ts, offset_of_max_ts = batch_max_ts, last
            records += count
            expected = last + 1
        first_offset = headers[0][2]  # above the old log end only across a cleaner's gap
        info = self._append(
            data,
            spans,
            first_offset=first_offset,
            records=records,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max_ts,
            now=now,
            append_time_ms=-1,
        )
        for epoch, base in epochs:
            self.leader_epoch_cache.assign(epoch, base)
        return info

    def _empty_info(self) -> LogAppendInfo:
        leo = self._log_end_offset
        return LogAppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0, 0)

    def _append(
        self,
        data: bytearray | memoryview,
        spans: list[BatchSpan],
        *,
        first_offset: int,
        records: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        now: int,  # -1: not read yet (read only if needed)
        append_time_ms: int,
    ) -> LogAppendInfo:
        """Roll if needed, write ``data`` to the active segment, flush if flush.messages
        or flush.ms says so, and report (the general path; a one-batch leader append
        does the same inline in :meth:`append_as_leader`)."""
        size = len(data)
        seg = self._active_segment_for(size, spans[-1][2], max_timestamp, now)
        try:
            seg.append(data, spans)
        except OSError as e:
            raise KafkaStorageError(f"append to {seg.log_path} failed: {e}") from e
        self._after_append(seg, records, now)
        # tuple.__new__ is what LogAppendInfo(...) runs, minus a Python-level frame.
        return _tuple_new(
            LogAppendInfo,
            (
                first_offset,
                self._log_end_offset - 1,
                max_timestamp,
                offset_of_max_timestamp,
                append_time_ms,
                self._log_start_offset,
                records,
                len(spans),
                size,
            ),
        )

    def _active_segment_for(
        self, size: int, last_offset: int, max_timestamp: int, now: int = -1
    ) -> LogSegment:
        """The segment an append of ``size`` bytes ending at ``last_offset`` goes to:
        the active one, rolled first if segment.bytes, segment.ms, a full index or the
        int32 relative offset says so. Raises RecordListTooLargeError above
        segment.bytes. ``now`` is -1 if the clock has not been read yet."""
        config = self.config
        if size > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes exceeds segment.bytes {config.segment_bytes}"
            )
        seg = self._segments[-1]
        if seg.size:  # an empty segment takes any append (it already starts at the LEO)
            # Kafka's rule (LogSegment.timeWaitedForRoll): with record timestamps, the
            # time a segment has waited is the incoming batch's max timestamp minus the
            # first batch's; only without timestamps does the wall clock since creation
            # count. Comparing the wall clock with record timestamps would roll on every
            # append for producers that send old or zero timestamps.
            first_ts = seg.first_batch_timestamp
            if first_ts is not None and first_ts >= 0:
                waited_ms = max_timestamp - first_ts
            else:
                if now < 0:
                    now = self._clock_ms()
                waited_ms = now - seg.created_ms
            # Roll if the append would pass segment.bytes, fill an index or overflow
            # the int32 offset relative to the segment's base.
            if (
                waited_ms > self._segment_ms_max
                or seg.size + size > config.segment_bytes
                or seg.offset_index.is_full
                or seg.time_index.is_full
                or last_offset - seg.base_offset > segment.INT32_MAX
            ):
                self.roll()
                seg = self._segments[-1]
        return seg

    def _after_append(self, seg: LogSegment, records: int, now: int = -1) -> None:
        """Bookkeeping once ``seg`` holds an append of ``records`` records: log end,
        timestamp prefix, flush.messages / flush.ms."""
        self._log_end_offset = seg.next_offset
        # The prefix max is non-decreasing and this segment's max only grows, so the
        # last entry is max(previous entry, segment max) = max(itself, segment max).
        # (A comparison, not max(): the builtin call costs ~0.1 us on every append.)
        ts_prefix = self._ts_prefix_max
        if seg.max_timestamp > ts_prefix[-1]:  # noqa: PLR1730 (see above)
            ts_prefix[-1] = seg.max_timestamp
        config = self.config
        unflushed = self._unflushed_messages = self._unflushed_messages + records
        if unflushed >= config.flush_messages:
            self.flush()
        elif config.flush_ms < LONG_MAX and not self.defer_flushes:
            # (An owner that defers fsyncs runs flush.ms on a timer, as Kafka's
            # scheduler does: see flush_due.)
            if now < 0:
                now = self._clock_ms()
            if now - self._last_flush_ms >= config.flush_ms:
                self.flush()

    # -------------------------------------------------------------------- rolling

    def roll(self) -> None:
        """Start a new active segment at the log end; fsync the old one (Kafka does that
        in the background) and move the recovery point to the new base offset."""
        self._check_open()
        active = self._segments[-1]
        if active.size == 0:
            return
        try:
            active.on_become_inactive()
            if self.defer_flushes:
                seg = self._new_segment(self._log_end_offset)
                self._dir_fsync_due = True
                self._roll_done(seg)
                return
            active.flush()
            seg = self._new_segment(self._log_end_offset)
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"roll of {self.path} failed: {e}") from e
        self._roll_done(seg)
        self._recovery_point = max(self._recovery_point, seg.base_offset)

    def _roll_done(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._ts_prefix_max.append(self._ts_prefix_max[-1])

    # -------------------------------------------------------------------- reading

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes:
        """Stored bytes from the batch holding ``start_offset``, from one segment (Kafka's
        log read: a slice of the segment file).

        What the caller can rely on:

        - It starts at the batch holding ``start_offset`` (whose base offset may be
          lower), and that first batch is whole. It is empty at the log end, when
          ``max_bytes`` < 0, or when the first batch reaches ``max_offset``.
        - At most ``max_bytes`` long, except that the first batch is returned whole
          when larger and ``min_one_batch``; when larger and not ``min_one_batch``,
          the result is empty (never a lone partial batch).
        - It may end in a partial batch (as Kafka's fetch responses do; skip it, e.g.
          with ``decode_batches``, and fetch again from its base offset) unless
          ``whole_batches``, which trims to whole batches at the cost of a copy.
        - No byte of any batch whose last offset is >= ``max_offset`` (exclusive, e.g.
          the high watermark): that cut is always at a batch boundary.

        Raises OffsetOutOfRangeError below the log start or above the log end."""
        if self._closed:
            self._check_open()
        if start_offset < self._log_start_offset or start_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, "
                f"{self._log_end_offset}] of {self.path.name}"
            )
        if start_offset == self._log_end_offset or max_bytes < 0:
            return b""
        if max_offset is not None and start_offset >= max_offset:
            return b""
        segments = self._segments
        i = bisect.bisect_right(self._bases, start_offset) - 1
        i = max(i, 0)
        while i < len(segments):
            out = segments[i].read(
                start_offset,
                max_bytes,
                max_offset=max_offset,
                min_one_batch=min_one_batch,
                whole_batches=whole_batches,
            )
            if out is not None:
                return out
            i += 1
        return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """The first offset (at or above the log start) whose record timestamp is
        >= ``timestamp_ms``, with that timestamp; None if there is none (ListOffsets)."""
        self._check_open()
        i = bisect.bisect_left(self._ts_prefix_max, timestamp_ms)
        while i < len(self._segments):
            seg = self._segments[i]
            i += 1
            b = seg.find_offset_by_timestamp(timestamp_ms)
            while b is not None:
                if b.last_offset >= self._log_start_offset and b.max_timestamp >= timestamp_ms:
                    found = self._find_in_batch(seg.read_batch(b), timestamp_ms)
                    if found is not None:
                        return found
                b = seg.find_batch(b.last_offset + 1)
        return None

    def _find_in_batch(self, raw: bytes, timestamp_ms: int) -> OffsetAndTimestamp | None:
        h = parse_header(raw)
        if h.timestamp_type is TimestampType.LOG_APPEND_TIME:
            return OffsetAndTimestamp(max(h.base_offset, self._log_start_offset), h.max_timestamp)
        try:
            decoded = decode_batch(raw, check_crc=False)
        except CorruptMessageError:
            return None
        for r in decoded.records:
            if r.offset >= self._log_start_offset and r.timestamp_ms >= timestamp_ms:
                return OffsetAndTimestamp(r.offset, r.timestamp_ms)
        return None

    # ---------------------------------------------------------------- truncation

    # ------------------------------------------------------- transactions

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Add ``entry`` to the ``.txnindex`` of the segment holding its ABORT marker
        (appended just before: entries follow the markers' log order)."""
        self._check_open()
        if not self._log_start_offset <= entry.last_offset < self._log_end_offset:
            raise ValueError(
                f"{self.path.name}: aborted-transaction entry for marker {entry.last_offset} "
                f"outside [{self._log_start_offset}, {self._log_end_offset})"
            )
        seg = self._segments[self._segment_index(entry.last_offset)]
        try:
            seg.txn_index.append(entry)
        except OSError as e:
            raise KafkaStorageError(f"txnindex append of {self.path} failed: {e}") from e

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        """The aborted transactions a read_committed fetch of ``[fetch_offset,
        upper_bound)`` answers with (storage/transaction_index.py's rule)."""
        self._check_open()
        first = self._segment_index(fetch_offset)
        return collect_aborted(
            (seg.txn_index.entries for seg in self._segments[first:]),
            fetch_offset=fetch_offset,
            upper_bound=upper_bound,
        )

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: drop every batch whose last offset is >= ``offset``,
        with the indexes and epoch cache. Returns True if anything was removed."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._log_end_offset:
            # No batch to drop, but an epoch that starts at the log end (a leadership
            # that appended nothing) may have to go: a follower that kept it would
            # fetch with it again and get the same diverging answer forever.
            self.leader_epoch_cache.truncate_from_end(offset)
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self.lowest_truncation = min(self.lowest_truncation, offset)
        try:
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                self._segments.pop().delete()
                self._bases.pop()
            self._segments[-1].truncate_to(offset)
        except OSError as e:
            raise KafkaStorageError(f"truncation of {self.path} failed: {e}") from e
        self._log_end_offset = self._segments[-1].next_offset
        if self._log_end_offset < self._log_start_offset:
            # The cut batch straddled the log start: nothing visible is left.
            self.truncate_fully_and_start_at(self._log_start_offset)
            return True
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self._rebuild_ts_prefix()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log, empty, at ``offset``."""
        self._check_open()
        self.lowest_truncation = -1  # every segment goes
        try:
            for seg in self._segments:
                seg.delete()
            self._segments = [self._new_segment(offset)]
            self._bases = [offset]
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"truncation of {self.path} failed: {e}") from e
        self._log_start_offset = self._log_end_offset = offset
        self._recovery_point = self._high_watermark = offset
        self._rebuild_ts_prefix()
        self.leader_epoch_cache.clear()
        self._write_offset_checkpoints()

    # ------------------------------------------------------------------ retention

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Delete-records: move the log start up to ``offset`` (at most the high
        watermark). Segments wholly below become deletable by
        :meth:`delete_retention_segments`. Returns True if the start moved."""
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {offset}, above the high watermark "
                f"{self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._write_offset_checkpoints()
        return True

    def delete_retention_segments(self) -> int:
        """Delete old segments by retention.ms (largest timestamp), retention.bytes and
        the log start offset, oldest first, whole segments only, never a segment holding
        offsets at or above the high watermark. Returns how many were deleted."""
        self._check_open()
        now = self._clock_ms()
        deleted = 0
        # cleanup.policy=compact alone deletes nothing by time or size (Kafka's rule).
        retention_ms = self.config.retention_ms if self.config.delete else -1
        if retention_ms >= 0:

            def too_old(seg: LogSegment, _next: LogSegment | None) -> bool:
                ts = seg.largest_timestamp()
                return now - (seg.created_ms if ts == NO_TIMESTAMP else ts) > retention_ms

            deleted += self._delete_old_segments(too_old)
        retention_bytes = self.config.retention_bytes if self.config.delete else -1
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes

            def too_big(seg: LogSegment, _next: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_old_segments(too_big)

        def below_start(_seg: LogSegment, nxt: LogSegment | None) -> bool:
            return nxt is not None and nxt.base_offset <= self._log_start_offset

        deleted += self._delete_old_segments(below_start)
        return deleted

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> int:
        count = 0
        for i, seg in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and seg.size == 0:
                break
            if upper > self._high_watermark or not predicate(seg, nxt):
                break
            count += 1
        if count == 0:
            return 0
        try:
            if count == len(self._segments):
                self.roll()  # keep an active segment at the log end
            for seg in self._segments[:count]:
                seg.delete()
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"deleting segments of {self.path} failed: {e}") from e
        del self._segments[:count], self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self._rebuild_ts_prefix()
        self._write_offset_checkpoints()
        return count

    def _rebuild_ts_prefix(self) -> None:
        running = NO_TIMESTAMP
        self._ts_prefix_max = []
        for seg in self._segments:
            running = max(running, seg.max_timestamp)
            self._ts_prefix_max.append(running)

    # -------------------------------------------------------------------- flushing

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default: the log
        end) and move the recovery point there."""
        self._check_open()
        target = self._log_end_offset if up_to_offset is None else up_to_offset
        target = min(target, self._log_end_offset)
        if target <= self._recovery_point:
            return
        first = self._segment_index(self._recovery_point)
        last = self._segment_index(target - 1)
        try:
            for seg in self._segments[first : last + 1]:
                seg.flush()
            if self._dir_fsync_due:
                self._dir_fsync_due = False
                fsync_dir(self.path)  # the entries of segments a deferred roll made
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.path} failed: {e}") from e
        self._recovery_point = target
        self._last_flush_ms = self._clock_ms()
        if target == self._log_end_offset:
            self._unflushed_messages = 0

    def flush_due(self) -> bool:
        """True if flush.ms has passed since the last flush with records unflushed
        (memory only: the broker's flush timer asks every log)."""
        return (
            self._unflushed_messages > 0
            and self.config.flush_ms < LONG_MAX
            and self._clock_ms() - self._last_flush_ms >= self.config.flush_ms
        )

    def maybe_flush(self) -> bool:
        """Flush if flush.messages or flush.ms says so. Returns True if it flushed."""
        if self._unflushed_messages == 0:
            return False
        if (
            self._unflushed_messages >= self.config.flush_messages
            or self._clock_ms() - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()
            return True
        return False

    def _write_offset_checkpoints(self) -> None:
        try:
            write_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, 0, [[self._recovery_point]])
            write_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, 0, [[self._log_start_offset]])
        except OSError as e:
            raise KafkaStorageError(f"checkpoint write in {self.path} failed: {e}") from e

    # ------------------------------------------ log cleaner hooks (storage/cleaner.py)
    # The cleaner reads segments below the active one (through descriptors of its own,
    # beside appends) and, once a cleaned segment's files are in place on disk, swaps it
    # into the segment list here, while its owner excludes every other use of the log;
    # lowest_truncation tells it a truncation happened meanwhile. Nothing else.

    def segments_for_cleaner(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list; the last one is active)."""
        self._check_open()
        return list(self._segments)

    def replace_cleaned_segments(self, first: int, count: int, cleaned: LogSegment) -> None:
        """Put ``cleaned`` in place of segments ``[first, first + count)``, whose files the
        cleaner has already replaced on disk. Offsets, log start and log end are unchanged
        (the cleaner never touches the active segment)."""
        self._check_open()
        assert first >= 0 and first + count < len(self._segments), "active segment untouched"
        assert cleaned.base_offset == self._segments[first].base_offset, "same base offset"
        self._segments[first : first + count] = [cleaned]
        self._bases[first : first + count] = [cleaned.base_offset]
        self._rebuild_ts_prefix()

    # ---------------------------------------- end of log cleaner hooks

    # --------------------------------------------------------------------- closing

    def close(self) -> None:
        """Flush and fsync everything, write the checkpoints and the clean-shutdown
        marker, and close the files. Idempotent."""
        if self._closed:
            return
        self.flush()
        try:
            for seg in self._segments:
                seg.flush_indexes()
            self.leader_epoch_cache.flush()
            self._write_offset_checkpoints()
            fd = os.open(self.path / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
            os.fsync(fd)
            os.close(fd)
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"close of {self.path} failed: {e}") from e
        finally:
            self._close_files()
            self._closed = True

    def _close_files(self) -> None:
        for seg in self._segments:
            seg.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.path}, start={self._log_start_offset}, end={self._log_end_offset}, "
            f"segments={len(self._segments)})"
        )
