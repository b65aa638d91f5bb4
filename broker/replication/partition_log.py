"""The log of one partition replica as the partition core sees it (:class:`PartitionLog`),
over the segment log (:class:`SegmentPartitionLog`) or in memory (:class:`MemoryPartitionLog`).

Theory of operation. The partition core (:mod:`.partition`) never touches files: it
calls this small interface, synchronously, for the few things it needs from a log:
its offsets (log start, log end), its leader-epoch cache (``end_offset_for``,
``assign_epoch``), reading whole batches, appending validated batch bytes (as leader:
the log assigns offsets and stamps the epoch; as follower: the batches carry them),
truncation (a diverging follower, a follower below the leader's log start), moving the
log start (DeleteRecords, retention) and the producer state stored beside the log
(recovered on open and after truncation, snapshotted when the active segment rolls).

The log is the single source of truth for the log start and log end offsets: the core
reads them here after every change and keeps no copy. The high watermark is the other
way round: the core computes and owns it, and only *tells* the log
(``persist_high_watermark``) so that the HW checkpoint file and retention (which never
deletes at or above the HW) see the value the core holds.

Appends are synchronous calls today; when appends move to I/O workers only this
interface and the core's callers change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final, Protocol

from raftka.broker.producer_state import ProducerStateConfig, ProducerStateManager
from raftka.broker.producer_state_store import (
    load_producer_state,
    prune_snapshots,
    write_producer_snapshot,
)
from raftka.broker.transaction_recovery import apply_stored_batches
from raftka.common.errors import CorruptMessageError, OffsetOutOfRangeError
from raftka.common.record.header import (
    NO_TIMESTAMP,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)
from raftka.common.record.read_committed import AbortedTransaction
from raftka.storage import Log
from raftka.storage.epoch_cache import LeaderEpochFileCache
from raftka.storage.log import LogAppendInfo, OffsetAndTimestamp, UnexpectedAppendOffsetError
from raftka.storage.transaction_index import AbortedTxn, collect_aborted

__all__ = ["MEMORY_LOG_BATCHES_MAX", "MemoryPartitionLog", "PartitionLog", "SegmentPartitionLog"]

#: Bound on the batches an in-memory log holds (it is for tests and simulations).
MEMORY_LOG_BATCHES_MAX: Final = 1_000_000


class PartitionLog(Protocol):
    """What the partition core needs from a log (see the module docstring)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int | None: ...

    @property
    def active_segment_base_offset(self) -> int:
        """Changes when the log rolls: the moment to snapshot the producer state."""
        ...

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """The leader-epoch cache's OffsetsForLeaderEpoch answer."""
        ...

    def assign_epoch(self, epoch: int, start_offset: int) -> None: ...

    def persist_high_watermark(self, high_watermark: int) -> None: ...

    def append_as_leader(self, batches: bytes, leader_epoch: int) -> LogAppendInfo: ...

    def append_as_follower(self, batches: bytes) -> LogAppendInfo: ...

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes: ...

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def delete_records_below(self, offset: int) -> None:
        """Move the log start up to ``offset`` (at most the persisted HW) and drop what
        lies wholly below it."""
        ...

    def delete_retention_segments(self) -> int: ...

    def load_producer_state(self, config: ProducerStateConfig) -> ProducerStateManager: ...

    def snapshot_producer_state(self, producers: ProducerStateManager) -> None: ...

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker was just appended (the
        segment's ``.txnindex``)."""
        ...

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``."""
        ...


class SegmentPartitionLog:
    """:class:`PartitionLog` over the segment log (``raftka.storage.Log``)."""

    __slots__ = ("defer_epoch_writes", "epoch_write_due", "held", "on_truncate", "segment_log")

    def __init__(
        self,
        segment_log: Log,
        *,
        on_truncate: Callable[[Log, int], None] | None = None,
        held: Callable[[], bool] | None = None,
        defer_epoch_writes: bool = False,
    ) -> None:
        self.segment_log = segment_log
        # Shell hook (the broker's I/O workers): with defer_epoch_writes, an epoch the
        # core assigns (becoming leader) is kept in memory and epoch_write_due set; the
        # shell then writes the leader-epoch checkpoint on a worker while it holds the
        # log, so nothing is appended under the new epoch before the file is durable.
        self.defer_epoch_writes = defer_epoch_writes
        self.epoch_write_due = False
        # Log cleaner hook: True while the cleaner's thread holds this log. The shell
        # keeps every other call away meanwhile; DeleteRecords (broker/delete_records.py)
        # still moves the log start (a number and a checkpoint file, which the cleaner
        # does not touch) but leaves deleting the segments below it to the next
        # retention check, since the cleaner swaps segments by position in the list.
        self.held = held
        # Log cleaner hook: told the new log end after every truncation, so a cleaner
        # checkpoint above it moves down (LogCleaner.truncate_checkpoint); otherwise the
        # records appended next below the old checkpoint would never be cleaned.
        self.on_truncate = on_truncate

    @property
    def log_start_offset(self) -> int:
        return self.segment_log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.segment_log.log_end_offset

    @property
    def latest_epoch(self) -> int | None:
        return self.segment_log.latest_epoch

    @property
    def active_segment_base_offset(self) -> int:
        return self.segment_log.active_segment_base_offset

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self.segment_log.leader_epoch_cache.end_offset_for(requested_epoch, log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        cache = self.segment_log.leader_epoch_cache
        defer = self.defer_epoch_writes and not (self.held is not None and self.held())
        if cache.assign(epoch, start_offset, persist=not defer) and defer:
            self.epoch_write_due = True

    def persist_high_watermark(self, high_watermark: int) -> None:
        stored = self.segment_log.update_high_watermark(high_watermark)
        assert stored == high_watermark, (stored, high_watermark)

    def append_as_leader(self, batches: bytes, leader_epoch: int) -> LogAppendInfo:
        return self.segment_log.append_as_leader(batches, leader_epoch)

    def append_as_follower(self, batches: bytes) -> LogAppendInfo:
        return self.segment_log.append_as_follower(batches)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes:
        return self.segment_log.read(
            start_offset,
            max_bytes,
            max_offset=max_offset,
            min_one_batch=min_one_batch,
            whole_batches=whole_batches,
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        return self.segment_log.offset_for_timestamp(timestamp_ms)

    def truncate_to(self, offset: int) -> None:
        self.segment_log.truncate_to(offset)
        if self.on_truncate is not None:
            self.on_truncate(self.segment_log, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.segment_log.truncate_fully_and_start_at(offset)
        if self.on_truncate is not None:
            self.on_truncate(self.segment_log, offset)

    def delete_records_below(self, offset: int) -> None:
        if offset > self.segment_log.log_start_offset:
            self.segment_log.maybe_increment_log_start_offset(offset)
        if self.held is not None and self.held():
            return
        if self.segment_log.delete_retention_segments():
            prune_snapshots(self.segment_log)

    def delete_retention_segments(self) -> int:
        deleted = self.segment_log.delete_retention_segments()
        if deleted:
            prune_snapshots(self.segment_log)
        return deleted

    def load_producer_state(self, config: ProducerStateConfig) -> ProducerStateManager:
        return load_producer_state(self.segment_log, config)

    def snapshot_producer_state(self, producers: ProducerStateManager) -> None:
        write_producer_snapshot(self.segment_log, producers)

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        self.segment_log.append_aborted_txn(entry)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        return self.segment_log.collect_aborted(fetch_offset, upper_bound)


class MemoryPartitionLog:
    """:class:`PartitionLog` in memory, for tests and the replication simulation.

    Holds whole batches (bytes with their offsets and epoch stamped, as the segment log
    stores them) and a leader-epoch cache that is never written to disk. Deleting below
    an offset drops whole batches, as segments are dropped whole; the log start may sit
    inside the first batch kept.
    """

    __slots__ = ("_aborted", "_batches", "_end", "_epochs", "_hw", "_start", "snapshots")

    def __init__(self, *, log_start_offset: int = 0) -> None:
        assert log_start_offset >= 0
        # (base offset, next offset, batch bytes), contiguous, in offset order.
        self._batches: list[tuple[int, int, bytes]] = []
        self._start = log_start_offset
        self._end = log_start_offset
        self._hw = log_start_offset
        self._epochs = LeaderEpochFileCache(Path("memory-partition-log"), [])
        # Producer-state snapshots taken, for tests that look for them.
        self.snapshots = 0
        # The aborted-transaction entries, in marker order (one .txnindex for the log).
        self._aborted: list[AbortedTxn] = []

    # -- offsets and epochs

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def active_segment_base_offset(self) -> int:
        return self._start  # one segment: it never rolls

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._epochs.entries()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(requested_epoch, log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self._epochs.assign(epoch, start_offset, persist=False)

    def persist_high_watermark(self, high_watermark: int) -> None:
        assert self._start <= high_watermark <= self._end, (self._start, high_watermark, self._end)
        self._hw = high_watermark

    # -- appends

    def append_as_leader(self, batches: bytes, leader_epoch: int) -> LogAppendInfo:
        headers = list(iter_batches(batches, check_crc=False))
        if not headers:
            raise CorruptMessageError("no record batch")
        data = bytearray(batches)
        first = offset = self._end
        for pos, header in headers:
            set_base_offset(data, offset, pos)
            set_partition_leader_epoch(data, leader_epoch, pos)
            offset += header.last_offset_delta + 1
        if self._epochs.latest_epoch != leader_epoch:
            self._epochs.assign(leader_epoch, first, persist=False)
        return self._store(bytes(data), first)

    def append_as_follower(self, batches: bytes) -> LogAppendInfo:
        first = expected = self._end
        for _, header in iter_batches(batches, check_crc=False):
            if header.base_offset != expected:
                raise UnexpectedAppendOffsetError(
                    f"follower append at offset {header.base_offset}, log end {expected}",
                    header.base_offset,
                    expected,
                )
            latest = self._epochs.latest_epoch
            assert latest is None or header.partition_leader_epoch >= latest, "epochs grow"
            if header.partition_leader_epoch != latest:
                self._epochs.assign(header.partition_leader_epoch, expected, persist=False)
            expected = header.next_offset
        if expected == first:
            return LogAppendInfo(first, first - 1, NO_TIMESTAMP, -1, -1, self._start, 0, 0, 0)
        return self._store(batches, first)

    def _store(self, data: bytes, first: int) -> LogAppendInfo:
        records = batches = 0
        for pos, header in iter_batches(data, check_crc=False):
            size = header.size_bytes
            self._batches.append((header.base_offset, header.next_offset, data[pos : pos + size]))
            self._end = header.next_offset
            records += header.records_count
            batches += 1
        if len(self._batches) > MEMORY_LOG_BATCHES_MAX:
            raise OverflowError(f"more than {MEMORY_LOG_BATCHES_MAX} batches in memory")
        return LogAppendInfo(
            first, self._end - 1, NO_TIMESTAMP, -1, -1, self._start, records, batches, len(data)
        )

    # -- reads

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes:
        del whole_batches  # every read here returns whole batches
        if not self._start <= start_offset <= self._end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._start}, {self._end}]"
            )
        limit = self._end if max_offset is None else max_offset
        out: list[bytes] = []
        size = 0
        for base, next_offset, data in self._batches:
            if next_offset <= start_offset:
                continue
            if base >= limit:
                break
            if size + len(data) > max_bytes and not (min_one_batch and not out):
                break
            out.append(data)
            size += len(data)
        return b"".join(out)

    def batches(self) -> list[bytes]:
        """Every batch held, in offset order (for checks in tests)."""
        return [data for _, _, data in self._batches]

    def batch_spans(self) -> list[tuple[int, bytes]]:
        """(base offset, batch) for every batch held, in offset order."""
        return [(base, data) for base, _, data in self._batches]

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        del timestamp_ms
        return None  # the simulation does not look records up by time

    # -- truncation and deletion

    def truncate_to(self, offset: int) -> None:
        assert offset >= 0
        if offset >= self._end:
            # Nothing to drop, but an epoch that starts at the log end (a leadership
            # that appended nothing) goes, as in the segment log.
            self._epochs.truncate_from_end(offset, persist=False)
            return
        if offset < self._start:
            self.truncate_fully_and_start_at(offset)
            return
        # Like the segment log: drop every batch that reaches ``offset`` or beyond.
        while self._batches and self._batches[-1][1] > offset:
            self._batches.pop()
        self._end = self._batches[-1][1] if self._batches else self._start
        self._aborted = [e for e in self._aborted if e.last_offset < self._end]
        if self._end < self._start:
            self.truncate_fully_and_start_at(self._start)
            return
        self._epochs.truncate_from_end(self._end, persist=False)
        self._hw = min(self._hw, self._end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._batches.clear()
        self._aborted.clear()
        self._start = self._end = self._hw = offset
        self._epochs.clear(persist=False)

    def delete_records_below(self, offset: int) -> None:
        assert offset <= self._hw, "only committed records are deleted"
        if offset <= self._start:
            return
        self._start = offset
        self._epochs.truncate_from_start(offset, persist=False)
        while self._batches and self._batches[0][1] <= offset:
            self._batches.pop(0)
        # As a segment's .txnindex goes with it: entries of markers in dropped batches.
        first = self._batches[0][0] if self._batches else self._end
        self._aborted = [e for e in self._aborted if e.last_offset >= first]

    def delete_retention_segments(self) -> int:
        return 0  # no time- or size-based retention in memory

    # -- producer state

    def load_producer_state(self, config: ProducerStateConfig) -> ProducerStateManager:
        producers = ProducerStateManager(config=config)
        for data in self.batches():
            apply_stored_batches(producers, data)
        return producers

    def snapshot_producer_state(self, producers: ProducerStateManager) -> None:
        del producers
        self.snapshots += 1

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        assert self._start <= entry.last_offset < self._end, (entry, self._start, self._end)
        assert not self._aborted or self._aborted[-1].last_offset < entry.last_offset, entry
        self._aborted.append(entry)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        return collect_aborted([self._aborted], fetch_offset=fetch_offset, upper_bound=upper_bound)
