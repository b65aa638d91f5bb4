"""``SegmentRaftLog``: the Raft core's ``RaftLog`` over the segment log and snapshot files.

Theory of operation. Entries are stored as RecordBatch v2 batches in a
:class:`raftka.storage.Log`: one batch per appended run of entries with the same epoch
and kind, ``base_offset`` the first entry's offset, ``partition_leader_epoch`` their
epoch, one record per entry holding the payload as its value. The core's control
entries (a leader's epoch-start LeaderChange no-op) go in control batches whose record
key is the control key of type LEADER_CHANGE, as KRaft writes them. The segment log's
leader-epoch cache, filled from those batch epochs, answers ``end_offset_for_epoch``.

Snapshots (KIP-630) live in the same directory (see ``snapshots``). Creating one
(``create_snapshot``) writes its file durably, then moves the log start to its end and
deletes the segments wholly below it and the older snapshot files. Installing one
fetched from the leader writes the file durably, then restarts the log empty at its
end. On open, a snapshot whose end lies above the log start re-applies that cut (a
crash may have come between the file and the cut).

Durability: ``append`` writes into the page cache; ``flush`` fsyncs and returns the
offset made durable (the driver reports it to the core). ``truncate_to`` keeps its
exact contract even when the cut falls inside a stored batch (a follower stores a
fetched run as one batch, which the leader may have written as several): the segment
log drops the whole batch, and the entries below the cut are written again and fsynced
before returning, because the core counts them as durable. A plain truncation is not
fsynced: should a crash undo it, the node restarts with the log it durably had before,
which the core already counted as no more than what it had flushed.

Not thread safe: the driver calls it from one task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from raftka.common.record import Record, build_batch, decode_batches, parse_header
from raftka.common.record.control import ControlRecordType, encode_control_key
from raftka.common.structs import EpochEndOffset
from raftka.raft.quorum.messages import (
    Entry,
    SnapshotId,
)
from raftka.raft.quorum.snapshots import SnapshotStore
from raftka.storage import Log, LogConfig

# KRaft's batch size limit for the metadata log (KafkaRaftClient's 8 MiB).
BATCH_BYTES_MAX: Final = 8 * 1024 * 1024
# Records per batch we write (a batch is decoded whole on every read of it).
BATCH_RECORDS_MAX: Final = 2048
# Bytes asked of the segment log per read step.
_READ_BYTES: Final = 1024 * 1024
# Recent entries kept decoded in memory: the leader answers most fetches from here.
TAIL_ENTRIES_MAX: Final = 4096
_CONTROL_KEY: Final = encode_control_key(ControlRecordType.LEADER_CHANGE)
# Per-record overhead bound (length, attributes, deltas, key, headers varints).
_RECORD_OVERHEAD_BYTES: Final = 32

# The metadata log's settings: KRaft's metadata.log.segment.bytes (1 GiB) and
# metadata.log.segment.ms (7 days); no time or size retention, since only a snapshot
# may remove entries; batches up to 8 MiB.
METADATA_LOG_CONFIG: Final = LogConfig(
    segment_bytes=1024 * 1024 * 1024,
    segment_ms=7 * 24 * 60 * 60 * 1000,
    retention_ms=-1,
    retention_bytes=-1,
    max_message_bytes=BATCH_BYTES_MAX,
)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SegmentRaftLog:
    """A durable ``RaftLog`` in one directory. Build with :meth:`open`."""

    def __init__(self, log: Log, snapshots: SnapshotStore, clock_ms: Callable[[], int]) -> None:
        self._log = log
        self._snapshots = snapshots
        self._clock_ms = clock_ms
        self._flushed = log.log_end_offset  # everything found on open is on disk
        self._tail: list[Entry] = []  # the newest entries, contiguous up to the log end

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        config: LogConfig = METADATA_LOG_CONFIG,
        clock_ms: Callable[[], int] | None = None,
    ) -> SegmentRaftLog:
        """Open (recovering after a crash) the log and snapshots in ``directory``."""
        clock = clock_ms or _wall_clock_ms
        log = Log.open(directory, config, clock_ms=clock)
        snapshots = SnapshotStore(directory)
        self = cls(log, snapshots, clock)
        try:
            latest = snapshots.load()
            if latest is not None:
                self._apply_snapshot_cut(latest)
                snapshots.delete_older_than(latest)
        except BaseException:
            log.close()
            raise
        self._flushed = log.log_end_offset
        return self

    def _apply_snapshot_cut(self, snapshot_id: SnapshotId) -> None:
        log = self._log
        end = snapshot_id.end_offset
        if log.log_start_offset >= end:
            return
        last = end - 1
        matches = (
            log.log_start_offset <= last < log.log_end_offset
            and self._read(last, 1)[0].epoch == snapshot_id.epoch
        )
        if matches:
            # Same offset and epoch as the snapshot's last entry: the log below agrees
            # with what the snapshot covers, and what follows it may be kept.
            log.update_high_watermark(end)
            log.maybe_increment_log_start_offset(end)
            log.delete_retention_segments()
        else:
            log.truncate_fully_and_start_at(end)

    # ------------------------------------------------------------------ queries

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        """Every entry below this offset is fsynced."""
        return self._flushed

    @property
    def last_epoch(self) -> int:
        if self._log.log_end_offset > self._log.log_start_offset:
            epoch = self._log.leader_epoch_cache.latest_epoch
            assert epoch is not None, "entries without an epoch"
            return epoch
        snapshot_id = self._snapshots.latest_id
        return snapshot_id.epoch if snapshot_id is not None else 0

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots.latest_id

    @property
    def directory(self) -> Path:
        return self._log.path

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        log = self._log
        if log.log_end_offset > log.log_start_offset:
            entries = log.leader_epoch_cache.entries()
            best = -1
            for i, (cached_epoch, _) in enumerate(entries):
                if cached_epoch > epoch:
                    break
                best = i
            if best >= 0:
                end = entries[best + 1][1] if best + 1 < len(entries) else log.log_end_offset
                return EpochEndOffset(entries[best][0], end)
        snapshot_id = self._snapshots.latest_id
        if snapshot_id is not None and snapshot_id.epoch <= epoch:
            return EpochEndOffset(snapshot_id.epoch, log.log_start_offset)
        return EpochEndOffset(0, 0)

    def read(self, from_offset: int, max_records: int) -> Sequence[Entry]:
        assert self.start_offset <= from_offset <= self.end_offset, (
            from_offset,
            self.start_offset,
            self.end_offset,
        )
        tail = self._tail
        if tail and tail[0].offset <= from_offset:
            index = from_offset - tail[0].offset
            return tail[index : index + max_records]
        return self._read(from_offset, max_records)

    def _read(self, from_offset: int, max_records: int) -> list[Entry]:
        out: list[Entry] = []
        position = from_offset
        end = self._log.log_end_offset
        while len(out) < max_records and position < end:
            raw = self._log.read(position, _READ_BYTES)
            progressed = False
            for batch in decode_batches(raw):
                header = batch.header
                control = header.is_control
                epoch = header.partition_leader_epoch
                for record in batch.records:
                    if record.offset < position:
                        continue  # the batch holding from_offset starts below it
                    out.append(Entry(record.offset, epoch, record.value or b"", control))
                    position = record.offset + 1
                    progressed = True
                    if len(out) >= max_records:
                        return out
            assert progressed, ("the segment log returned no whole batch", position, end)
        return out

    # ------------------------------------------------------------------ writes

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        expected = self.end_offset
        floor = self.last_epoch
        for entry in entries:
            assert entry.offset == expected, (entry.offset, expected)
            assert entry.epoch >= floor, (entry.epoch, floor)
            expected += 1
            floor = entry.epoch
        now_ms = self._clock_ms()
        batches = [self._build(run, now_ms) for run in _runs(entries)]
        self._log.append_as_follower(b"".join(batches))
        assert self.end_offset == expected, (self.end_offset, expected)
        self._tail.extend(entries)
        if len(self._tail) > TAIL_ENTRIES_MAX:
            del self._tail[: len(self._tail) - TAIL_ENTRIES_MAX]

    @staticmethod
    def _build(run: Sequence[Entry], now_ms: int) -> bytes:
        first = run[0]
        key = _CONTROL_KEY if first.control else None
        return build_batch(
            [Record(e.payload, key, now_ms) for e in run],
            base_offset=first.offset,
            partition_leader_epoch=first.epoch,
            is_control=first.control,
        )

    def truncate_to(self, offset: int) -> None:
        assert self.start_offset <= offset <= self.end_offset, (
            offset,
            self.start_offset,
            self.end_offset,
        )
        if offset == self.end_offset:
            return
        # Where the cut falls inside a stored batch, keep that batch's entries below it.
        base = parse_header(self._log.read(offset, 1)).base_offset
        keep_from = max(base, self.start_offset)
        kept = self._read(keep_from, offset - keep_from) if keep_from < offset else []
        self._log.truncate_to(offset)
        self._tail = [e for e in self._tail if e.offset < self.end_offset]
        self._flushed = min(self._flushed, self.end_offset)
        if kept:
            self.append(kept)
            self.flush()
        assert self.end_offset == offset, (self.end_offset, offset)

    def flush(self) -> int:
        """fsync the whole log; returns the offset now durable (the log end)."""
        self._log.flush()
        self._flushed = self._log.log_end_offset
        return self._flushed

    # ------------------------------------------------------------------ snapshots

    def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Store ``data`` as the state below ``end_offset`` and drop those entries.

        ``end_offset`` must be committed (the caller's business) and held; the log is
        fsynced up to it first if need be, since a snapshot covers only durable entries.
        """
        assert self.start_offset < end_offset <= self.end_offset, (
            end_offset,
            self.start_offset,
            self.end_offset,
        )
        if end_offset > self._flushed:
            self.flush()
        last = self.read(end_offset - 1, 1)[0]
        snapshot_id = SnapshotId(end_offset, last.epoch)
        self._snapshots.write(snapshot_id, data)  # durable before anything is dropped
        self._log.update_high_watermark(end_offset)
        self._log.maybe_increment_log_start_offset(end_offset)
        self._log.delete_retention_segments()
        self._snapshots.delete_older_than(snapshot_id)
        self._tail = [e for e in self._tail if e.offset >= end_offset]
        return snapshot_id

    def read_snapshot(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int] | None:
        return self._snapshots.read_chunk(snapshot_id, position, max_bytes)

    def read_snapshot_data(self, snapshot_id: SnapshotId) -> bytes:
        """The whole (CRC-checked) data of a held snapshot."""
        return self._snapshots.read(snapshot_id)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots.write(snapshot_id, data)
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._snapshots.delete_older_than(snapshot_id)
        self._tail = []
        self._flushed = self.end_offset

    def close(self) -> None:
        """Flush, fsync and close (idempotent)."""
        self._log.close()
        self._tail = []


def _runs(entries: Sequence[Entry]) -> list[Sequence[Entry]]:
    """Split entries into runs of one epoch and kind, bounded in records and bytes."""
    runs: list[Sequence[Entry]] = []
    start = 0
    size = 0
    for i, entry in enumerate(entries):
        first = entries[start]
        entry_bytes = len(entry.payload) + _RECORD_OVERHEAD_BYTES
        if i > start and (
            entry.epoch != first.epoch
            or entry.control != first.control
            or i - start >= BATCH_RECORDS_MAX
            or size + entry_bytes > BATCH_BYTES_MAX // 2
        ):
            runs.append(entries[start:i])
            start, size = i, 0
        size += entry_bytes
    runs.append(entries[start:])
    return runs
