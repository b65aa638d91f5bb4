"""The segment log: Kafka's partition log (UnifiedLog + LocalLog) for one directory.

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
    log.read(start_offset, max_bytes, *, max_offset=None, min_one_batch=True) -> bytes
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
cleanly.

Rules, as Kafka's unless noted:

- Validation precedes any write: a request with any bad batch (framing, CRC, size above
  ``max.message.bytes``) appends nothing. A whole request lands in one segment.
- The high watermark bounds retention and delete-records (nothing at or above it is
  deleted). It starts at the log start offset; the replication layer moves it.
- ``truncate_to(offset)`` removes every batch whose last offset is >= ``offset``; if
  ``offset`` falls inside a batch, the log end becomes that batch's base offset.
- ``read`` returns whole batches from one segment, never spanning two.
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from raftka.client.errors import (
    CorruptMessageError,
    FencedLeaderEpochError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnknownServerError,
)
from raftka.client.records.batch import decode_batch
from raftka.client.records.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TimestampType,
    compute_crc,
    iter_batches,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from raftka.raft.log.checkpoint import TMP_SUFFIX, fsync_dir, read_checkpoint, write_checkpoint
from raftka.raft.log.config import LogConfig
from raftka.raft.log.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from raftka.raft.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    ShallowBatch,
)

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
_STRAY_SUFFIXES: Final = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)
_ATTR = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_MAX_TIMESTAMP_OFFSET: Final = 35


class UnexpectedAppendOffsetError(UnknownServerError):
    """A follower append whose first offset is not the log end offset (Kafka's
    UnexpectedAppendOffsetException, reported on the wire as UNKNOWN_SERVER_ERROR)."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did (Kafka's LogAppendInfo, the parts raftka uses)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless message.timestamp.type is LogAppendTime
    log_start_offset: int
    records_count: int
    batch_count: int
    valid_bytes: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp_ms: int


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """One replica's log in one directory. Build with :meth:`open`."""

    def __init__(self, path: Path, config: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.path = path
        self.config = config
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
        log = cls(Path(path), config, clock_ms or _wall_clock_ms)
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
            if dot + suffix == LOG_SUFFIX:
                bases.append(int(stem))
            elif dot + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                index_bases.append((int(stem), p))
        for base, p in index_bases:
            if base not in bases:
                p.unlink(missing_ok=True)  # an index without its log is an orphan
        bases.sort()

        rp = read_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, 0, 1)
        ls = read_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, 0, 1)
        cache, cache_ok = LeaderEpochFileCache.load(self.path / LEADER_EPOCH_CHECKPOINT)
        self.leader_epoch_cache = cache
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
        self._log_end_offset = self._segments[-1].next_offset
        self._log_start_offset = max(start_ck, self._segments[0].base_offset)
        self._rebuild_ts_prefix()
        if self._log_start_offset > self._log_end_offset:
            self.truncate_fully_and_start_at(self._log_start_offset)
        cache.truncate_from_end(self._log_end_offset, persist=False)
        cache.truncate_from_start(self._log_start_offset, persist=False)
        cache.flush()
        self._recovery_point = self._log_end_offset
        self._high_watermark = self._log_start_offset
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
        for i in range(first, len(self._segments)):
            seg = self._segments[i]
            if i > 0 and seg.base_offset != self._segments[i - 1].next_offset:
                keep = i  # a gap or overlap: the previous segment was cut short
                break
            cut = seg.recover(on_batch)
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
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

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

    def append_as_leader(self, batches: bytes | bytearray, leader_epoch: int) -> LogAppendInfo:
        """Validate, assign offsets from the log end, stamp ``leader_epoch``, append."""
        self._check_open()
        latest = self.leader_epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise FencedLeaderEpochError(
                f"leader epoch {leader_epoch} is older than the log's latest epoch {latest}"
            )
        buf = bytearray(batches)
        now = self._clock_ms()
        append_time = self.config.log_append_time
        next_offset = self._log_end_offset
        shallow: list[ShallowBatch] = []
        records = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, next_offset - 1
        for pos, h in iter_batches(buf):
            size = h.size_bytes
            self._check_size(size)
            if h.records_count != h.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"record batch at byte {pos} holds {h.records_count} records but spans "
                    f"{h.last_offset_delta + 1} offsets"
                )
            set_base_offset(buf, next_offset, pos)
            set_partition_leader_epoch(buf, leader_epoch, pos)
            batch_max_ts = h.max_timestamp
            if append_time:
                batch_max_ts = now
                _ATTR.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_TYPE_BIT)
                _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now)
                _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
            last = next_offset + h.last_offset_delta
            shallow.append(ShallowBatch(pos, size, next_offset, last, batch_max_ts))
            if batch_max_ts > max_ts:
                max_ts, offset_of_max_ts = batch_max_ts, last
            records += h.records_count
            next_offset = last + 1
        if not shallow:
            return self._empty_info()
        self._append(buf, shallow, now)
        self.leader_epoch_cache.assign(leader_epoch, shallow[0].base_offset)
        return self._finish_append(
            shallow=shallow,
            records=records,
            valid_bytes=len(buf),
            max_ts=max_ts,
            offset_of_max_ts=offset_of_max_ts,
            append_time_ms=now,
        )

    def append_as_follower(self, batches: bytes | bytearray) -> LogAppendInfo:
        """Append batches that already carry their offsets (replication, Raft fetch).
        They must start at the log end and be contiguous; epochs never decrease."""
        self._check_open()
        data = memoryview(batches)
        now = self._clock_ms()
        expected = self._log_end_offset
        epoch_floor = self.leader_epoch_cache.latest_epoch
        shallow: list[ShallowBatch] = []
        epochs: list[tuple[int, int]] = []
        records = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, expected - 1
        for pos, h in iter_batches(data):
            self._check_size(h.size_bytes)
            if h.base_offset != expected:
                if not shallow:
                    raise UnexpectedAppendOffsetError(
                        f"follower append starts at offset {h.base_offset} but the log end "
                        f"offset is {expected}",
                        h.base_offset,
                        expected,
                    )
                raise InvalidRecordError(
                    f"record batch at byte {pos} starts at offset {h.base_offset}, "
                    f"expected {expected}: offsets must be contiguous"
                )
            epoch = h.partition_leader_epoch
            if epoch_floor is not None and epoch < epoch_floor:
                raise InvalidRecordError(
                    f"record batch at offset {h.base_offset} has leader epoch {epoch}, "
                    f"below the log's {epoch_floor}"
                )
            epoch_floor = epoch
            epochs.append((epoch, h.base_offset))
            shallow.append(
                ShallowBatch(pos, h.size_bytes, h.base_offset, h.last_offset, h.max_timestamp)
            )
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.last_offset
            records += h.records_count
            expected = h.next_offset
        if not shallow:
            return self._empty_info()
        self._append(data, shallow, now)
        for epoch, base in epochs:
            self.leader_epoch_cache.assign(epoch, base)
        return self._finish_append(
            shallow=shallow,
            records=records,
            valid_bytes=len(data),
            max_ts=max_ts,
            offset_of_max_ts=offset_of_max_ts,
            append_time_ms=-1,
        )

    def _check_size(self, size: int) -> None:
        if size > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}"
            )

    def _empty_info(self) -> LogAppendInfo:
        leo = self._log_end_offset
        return LogAppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0, 0)

    def _append(
        self, data: bytes | bytearray | memoryview, shallow: list[ShallowBatch], now: int
    ) -> None:
        size = len(data)
        if size > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes exceeds segment.bytes {self.config.segment_bytes}"
            )
        self._maybe_roll(size, shallow[-1].last_offset, max(b.max_timestamp for b in shallow), now)
        seg = self._segments[-1]
        try:
            seg.append(data, shallow)
        except OSError as e:
            raise KafkaStorageError(f"append to {seg.log_path} failed: {e}") from e
        self._log_end_offset = seg.next_offset
        prev = self._ts_prefix_max[-2] if len(self._ts_prefix_max) > 1 else NO_TIMESTAMP
        self._ts_prefix_max[-1] = max(prev, seg.max_timestamp)

    def _finish_append(
        self,
        *,
        shallow: list[ShallowBatch],
        records: int,
        valid_bytes: int,
        max_ts: int,
        offset_of_max_ts: int,
        append_time_ms: int,
    ) -> LogAppendInfo:
        self._unflushed_messages += records
        self.maybe_flush()
        return LogAppendInfo(
            first_offset=shallow[0].base_offset,
            last_offset=shallow[-1].last_offset,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max_ts,
            log_append_time_ms=append_time_ms if self.config.log_append_time else -1,
            log_start_offset=self._log_start_offset,
            records_count=records,
            batch_count=len(shallow),
            valid_bytes=valid_bytes,
        )

    # -------------------------------------------------------------------- rolling

    def _maybe_roll(self, size: int, last_offset: int, max_timestamp: int, now: int) -> None:
        seg = self._segments[-1]
        if seg.size == 0:
            return  # an empty segment takes any append (it already starts at the LEO)
        # Kafka's rule (LogSegment.timeWaitedForRoll): with record timestamps, the time a
        # segment has waited is the incoming batch's max timestamp minus the first
        # batch's; only without timestamps does the wall clock since creation count.
        # Comparing the wall clock with record timestamps would roll on every append
        # for producers that send old or zero timestamps.
        first_ts = seg.first_batch_timestamp
        if first_ts is not None and first_ts >= 0:
            waited_ms = max_timestamp - first_ts
        else:
            waited_ms = now - seg.created_ms
        if (
            not seg.can_hold(size, last_offset, self.config.segment_bytes)
            or waited_ms > self.config.segment_ms
        ):
            self.roll()

    def roll(self) -> None:
        """Start a new active segment at the log end; fsync the old one (Kafka does that
        in the background) and move the recovery point to the new base offset."""
        self._check_open()
        active = self._segments[-1]
        if active.size == 0:
            return
        try:
            active.on_become_inactive()
            active.flush()
            seg = self._new_segment(self._log_end_offset)
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"roll of {self.path} failed: {e}") from e
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._ts_prefix_max.append(self._ts_prefix_max[-1])
        self._recovery_point = max(self._recovery_point, seg.base_offset)

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
    ) -> bytes:
        """Whole stored batches from the one holding ``start_offset``, up to ``max_bytes``
        (the first batch even if larger, when ``min_one_batch``), only batches that end
        below ``max_offset`` (exclusive, e.g. the high watermark). Empty at the log end.
        Raises OffsetOutOfRangeError below the log start or above the log end."""
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
        i = self._segment_index(start_offset)
        while i < len(self._segments):
            out = self._segments[i].read(
                start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch
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

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: drop every batch whose last offset is >= ``offset``,
        with the indexes and epoch cache. Returns True if anything was removed."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._log_end_offset:
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
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
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:

            def too_old(seg: LogSegment, _next: LogSegment | None) -> bool:
                ts = seg.largest_timestamp()
                return now - (seg.created_ms if ts == NO_TIMESTAMP else ts) > retention_ms

            deleted += self._delete_old_segments(too_old)
        retention_bytes = self.config.retention_bytes
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
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.path} failed: {e}") from e
        self._recovery_point = target
        self._last_flush_ms = self._clock_ms()
        if target == self._log_end_offset:
            self._unflushed_messages = 0

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
