"""The broker's log cleaner service: one :class:`~raftka.storage.cleaner.LogCleaner` per
broker, scheduled as its docstring says (Kafka's LogCleaner thread with its
LogCleanerManager's choice of the dirtiest log).

Theory of operation
-------------------
- **Where it runs.** The choice of a log runs on the event loop (it reads segment sizes
  and the small ``cleaner-offset-checkpoint`` file); the pass itself,
  ``LogCleaner.clean_once``, runs on one dedicated worker thread (a single-thread
  executor: ``log.cleaner.threads`` is 1), never on the loop.
- **Exclusion.** The loop is single-threaded and owns every log. A pass does not own
  the partition (``ReplicaManager.begin_clean`` registers it, ``end_clean`` ends it):
  it reads the segments below the active one and writes its ``.cleaned`` files on its
  thread while the loop appends, reads, credits followers and truncates (Kafka's
  cleaner beside appends). Its three kinds of exclusive step (the start, each swap,
  the checkpoint; see ``LogCleaner.clean_once``) run on its thread while it holds the
  log: the thread asks the loop for the hold (``hold_for_cleaner``, after any I/O
  worker's job on the log) and gives it back (``release_cleaner``). During a step,
  produces to the partition queue (up to their timeout) and fetches park, as for any
  held log (see replication/manager.py); a step is a few renames and fsyncs. A stop
  or delete of the partition sets the pass's abort event; retention skips it until
  the pass ends. This is a hold on the loop instead of a lock the append path would
  take, because a lock taken on the loop would block the whole broker while the
  thread waits for it; the flags are only read and written on the loop, so they need
  no lock of their own. Other partitions are not affected.
- **I/O workers.** The cleaner keeps its own thread (``log.cleaner.threads``, as Kafka
  keeps its cleaner threads apart from ``num.io.threads``): a pass takes minutes on a
  large log and would hold one of the request-handling workers all that time. Short
  worker jobs (broker/io_workers.py) hold a log the same way; the cleaner skips a log
  one holds and comes back to it when the job ends.
- **Which log.** Every ``log.cleaner.backoff.ms`` while idle, among the open logs with
  ``cleanup.policy`` including compact: a log forced by ``max.compaction.lag.ms`` first,
  else the one with the highest dirty ratio above its ``min.cleanable.dirty.ratio``.
  After a pass that cleaned, the next choice comes at once (Kafka loops without backoff
  while there is work).
- **Errors.** ``KafkaStorageError`` from a pass: the log is closed and reopened
  (``ReplicaManager.reopen_log``; ``Log.open`` finishes or rolls back a half-done swap)
  and the partition takes its role from the metadata again. Any other error is logged
  and counted; the service goes on with the next backoff.
- **Aborts.** A pass the log changed under (a truncation into its range, its segments
  deleted) or whose partition stopped returns ``aborted`` stats: counted in
  ``passes_aborted`` and logged; the next choice comes after the backoff.
- **Shutdown.** :meth:`close` stops choosing and waits for a running pass to end (a
  thread cannot be interrupted; a pass is bounded by the log's size; the manager's
  close asks it to abort), so the logs close cleanly after it.
- **Counters** (:meth:`health`) go to the broker's ``/health`` JSON.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from raftka.broker.replication.manager import ReplicaManager
from raftka.common.errors import KafkaStorageError
from raftka.common.time import wall_clock_ms
from raftka.storage.cleaner import CleanerStats, CleaningAbortedError, LogCleaner
from raftka.storage.log_manager import PartitionKey

__all__ = ["CleanerCounters", "LogCleanerService"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class CleanerCounters:
    """What the cleaner has done since the broker started (``/health``)."""

    passes_started: int = 0
    passes_cleaned: int = 0  # passes that rewrote segments
    passes_failed: int = 0
    passes_aborted: int = 0  # the log changed under the pass, or its partition stopped
    storage_errors: int = 0  # of which KafkaStorageError (the log was reopened)
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    marker_horizons_set: int = 0  # transaction markers stamped with a delete horizon
    markers_removed: int = 0  # transaction markers removed past their horizon
    segments_before: int = 0
    segments_after: int = 0
    forced_by_max_lag: int = 0
    cleaning: str | None = None  # the partition a pass works on now
    last_cleaned: str | None = None
    last_end_offset: int = -1
    last_duration_ms: int = 0
    max_duration_ms: int = 0


class LogCleanerService:
    """See the module docstring."""

    def __init__(
        self,
        manager: ReplicaManager,
        cleaner: LogCleaner,
        *,
        backoff_ms: int,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._manager = manager
        self.cleaner = cleaner
        self._backoff_s = backoff_ms / 1000
        self._clock_ms = clock_ms
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="log-cleaner"
        )
        self._wake = asyncio.Event()
        self._closing = False
        self._running: asyncio.Future[CleanerStats] | None = None
        # A log choose() skipped because an I/O worker held it (see run()).
        self._skipped_held: PartitionKey | None = None
        self.counters = CleanerCounters()

    def health(self) -> dict[str, Any]:
        return asdict(self.counters)

    def wake(self) -> None:
        """Look for work now instead of at the end of the backoff."""
        self._wake.set()

    # ----------------------------------------------------------------- choice

    def choose(self, now_ms: int) -> PartitionKey | None:
        """The log to clean next: one forced by max.compaction.lag.ms, else the one with
        the highest dirty ratio among those that need cleaning (on the loop)."""
        best: tuple[bool, float, PartitionKey] | None = None
        self._skipped_held = None
        for tp, lg in self._manager.logs.compacted():
            if self._manager.partitions.get(tp) is None:
                continue
            if self._manager.is_cleaning(tp):
                # An I/O worker holds it (a flush, a snapshot, retention): not rated now,
                # but run() comes back when the job ends instead of after the backoff.
                self._skipped_held = tp
                continue
            try:
                if not self.cleaner.needs_cleaning(lg, now_ms):
                    continue
                ratio = self.cleaner.dirty_ratio(lg, now_ms)
                forced = ratio <= lg.config.min_cleanable_dirty_ratio
            except Exception as e:  # a closed or broken log: skip it this round
                log.warning(
                    "cleaner could not rate a log",
                    extra={"fields": {"partition": f"{tp[0]}-{tp[1]}", "error": str(e)}},
                )
                continue
            key = (forced, ratio, tp)
            if best is None or key[:2] > best[:2]:
                best = key
        return None if best is None else best[2]

    # ----------------------------------------------------------------- passes

    async def clean_one(self) -> CleanerStats | None:
        """Choose a log and clean it once on the worker thread; None if none needed it."""
        now_ms = self._clock_ms()
        tp = self.choose(now_ms)
        if tp is None or self._closing:
            return None
        handed = self._manager.begin_clean(tp)
        if handed is None:
            return None
        segment_log, active, stop = handed
        name = f"{tp[0]}-{tp[1]}"
        c = self.counters
        c.passes_started += 1
        c.cleaning = name
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        manager = self._manager

        def exclusive(step: Callable[[], T]) -> T:
            """On the cleaner thread: run ``step`` while the pass holds the log (the
            loop takes the hold for it, after any I/O worker's job)."""
            held = asyncio.run_coroutine_threadsafe(manager.hold_for_cleaner(tp), loop)
            if not held.result():
                raise CleaningAbortedError("the partition is stopping")
            try:
                return step()
            finally:
                loop.call_soon_threadsafe(manager.release_cleaner, tp)

        running = loop.run_in_executor(
            self._executor,
            lambda: self.cleaner.clean_once(
                segment_log,
                now_ms,
                active_producers=active,
                exclusive=exclusive,
                stop_requested=stop.is_set,
            ),
        )
        self._running = running
        stats: CleanerStats | None = None
        reopen = False
        try:
            # Shielded: cancelling this task (shutdown) must not give the log back to
            # the loop while the thread still rewrites it.
            stats = await asyncio.shield(running)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await running  # the pass ends by itself; only then release the log
            raise
        except KafkaStorageError as e:
            c.passes_failed += 1
            c.storage_errors += 1
            reopen = True
            log.error(
                "log cleaner storage error: reopening the log",
                extra={"fields": {"partition": name, "error": str(e)}},
            )
        except Exception:
            c.passes_failed += 1
            log.exception("log cleaner pass failed", extra={"fields": {"partition": name}})
        finally:
            self._running = None
            c.cleaning = None
            self._manager.end_clean(tp)
        if reopen:
            # An I/O worker's job (a snapshot after a roll) may hold the log now: the
            # pass did not hold it; reopen once the job ends.
            await self._manager.wait_clean_ended(tp)
            self._manager.reopen_log(tp)
        if stats is None:
            return None
        if stats.aborted:
            c.passes_aborted += 1
            log.info(
                "log cleaning aborted",
                extra={"fields": {"partition": name, "reason": stats.reason}},
            )
        took_ms = int((time.monotonic() - started) * 1000)
        if stats.cleaned:
            c.passes_cleaned += 1
            c.bytes_read += stats.bytes_read
            c.bytes_written += stats.bytes_written
            c.records_read += stats.records_read
            c.records_kept += stats.records_kept
            c.tombstones_removed += stats.tombstones_removed
            c.marker_horizons_set += stats.marker_horizons_set
            c.markers_removed += stats.markers_removed
            c.segments_before += stats.segments_before
            c.segments_after += stats.segments_after
            c.forced_by_max_lag += int(stats.forced_by_max_lag)
            c.last_cleaned = name
            c.last_end_offset = stats.end_offset
            c.last_duration_ms = took_ms
            c.max_duration_ms = max(c.max_duration_ms, took_ms)
            log.info(
                "log cleaned",
                extra={
                    "fields": {
                        "partition": name,
                        "reason": stats.reason,
                        "end_offset": stats.end_offset,
                        "segments": f"{stats.segments_before}->{stats.segments_after}",
                        "bytes": f"{stats.bytes_read}->{stats.bytes_written}",
                        "ms": took_ms,
                    }
                },
            )
        return stats

    async def run(self) -> None:
        """Clean while there is work; otherwise wait ``log.cleaner.backoff.ms`` (or a
        :meth:`wake`)."""
        while not self._closing:
            stats = await self.clean_one()
            if stats is not None and stats.cleaned:
                await asyncio.sleep(0)  # let the loop serve what queued meanwhile
                continue
            skipped = self._skipped_held
            if stats is None and skipped is not None:
                # A worker's job on a log is short: rate that log once it ends.
                await self._manager.wait_clean_ended(skipped)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                # log.cleaner.backoff.ms: the idle period between looks for work.
                await asyncio.wait_for(self._wake.wait(), self._backoff_s)

    async def close(self) -> None:
        """Stop choosing; wait for a running pass to end; stop the worker thread."""
        self._closing = True
        self._wake.set()
        running = self._running
        if running is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
        await asyncio.to_thread(self._executor.shutdown, wait=True)
