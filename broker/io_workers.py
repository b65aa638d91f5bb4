"""The broker's I/O workers: disk work off the event loop (Kafka's ``num.io.threads``).

Theory of operation
-------------------
Kafka keeps its network threads apart from its request-handler ("I/O") threads so that
a slow disk never stops the broker from talking. raftka's event loop plays the network
threads' part: it parses, routes and answers. Disk work that can take long (opening and
recovering logs at start-up, fsyncs, retention deletes, producer-state snapshots, HW
checkpoint writes) runs on :class:`IoWorkers`, a bounded pool of ``num.io.threads``
threads, and the loop only waits for it. Appends and truncations run there only for a
log dir whose writes turned slow (:class:`AppendModes`); while they are fast they run
on the loop, as the hop costs more than the write.

- **Bound** (``queued.max.requests``). At most ``num.io.threads`` jobs run and at most
  ``queued.max.requests`` more wait for a thread; a caller beyond that waits on the loop
  (its coroutine does not get a place in the executor's queue), as Kafka's network
  threads stop reading when the request queue is full. Nothing queues without bound.
- **Strands.** :meth:`IoWorkers.strand` is a per-key FIFO lock (:class:`Strand`: a
  place in line can be taken synchronously); :meth:`IoWorkers.run_in_strand` runs jobs of
  one key one after the other, in submission order, while jobs of other keys run in
  parallel. The replica manager keys them by partition. :meth:`IoWorkers.strand_idle`
  tells whether a key has no job running or in line: only then may the manager append
  to that partition on the loop without overtaking a job.
- **Cancellation.** A thread cannot be interrupted: a caller cancelled while its job
  runs still waits for the job to end before the cancellation goes on, so whatever the
  job owns (a partition's log) is never handed back under a running job.
- **Errors** raised by a job are raised to its caller, unchanged.

:class:`LoopLagMonitor` measures the event loop itself: a timer that should fire every
``interval_ms``; how late it fires is the loop's lag (time spent in callbacks that did
not yield, or GIL contention with the workers). ``/health`` shows both.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from raftka.server_common.metrics import add_queue

__all__ = [
    "APPEND_HOLD_DOWN_MS",
    "INLINE",
    "INLINE_APPEND_SLOW_MS",
    "NUM_IO_THREADS_DEFAULT",
    "QUEUED_MAX_REQUESTS_DEFAULT",
    "WORKERS",
    "WORKER_FSYNC_SLOW_MS",
    "AppendModes",
    "IoWorkers",
    "LoopLagMonitor",
    "Strand",
    "WriteTimer",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Kafka's defaults for ``num.io.threads`` and ``queued.max.requests``.
NUM_IO_THREADS_DEFAULT: Final = 8
QUEUED_MAX_REQUESTS_DEFAULT: Final = 500
#: The lag monitor's period and how many samples it keeps (2 minutes at 20 ms).
LAG_INTERVAL_MS_DEFAULT: Final = 20
LAG_SAMPLES_MAX: Final = 6_000


@dataclass(slots=True)
class IoCounters:
    """What the pool has done (``/health``)."""

    submitted: int = 0
    completed: int = 0
    failed: int = 0
    waiting_for_queue: int = 0  # callers held back by queued.max.requests now
    max_waiting_for_queue: int = 0


class IoWorkers:
    """See the module docstring."""

    def __init__(self, *, num_io_threads: int, queued_max_requests: int) -> None:
        if num_io_threads < 1:
            raise ValueError(f"num.io.threads must be at least 1, got {num_io_threads}")
        if queued_max_requests < 1:
            raise ValueError(f"queued.max.requests must be at least 1, got {queued_max_requests}")
        self.num_io_threads = num_io_threads
        self.queued_max_requests = queued_max_requests
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=num_io_threads, thread_name_prefix="io-worker"
        )
        # Places for running + queued jobs: taking one is what admits a job.
        self._places = asyncio.Semaphore(num_io_threads + queued_max_requests)
        self._admitted = 0  # on the loop: jobs running or queued in the executor
        self._busy = 0  # in the threads, under _busy_lock
        self._busy_lock = threading.Lock()
        self._strands: dict[Hashable, Strand] = {}
        self._closed = False
        self.counters = IoCounters()

    # ----------------------------------------------------------------- views

    @property
    def busy(self) -> int:
        """Jobs a thread runs now."""
        with self._busy_lock:
            return self._busy

    @property
    def queued(self) -> int:
        """Jobs admitted and waiting for a thread."""
        return max(0, self._admitted - self.busy)

    def health(self) -> dict[str, Any]:
        c = self.counters
        return {
            "num_io_threads": self.num_io_threads,
            "queued_max_requests": self.queued_max_requests,
            "busy": self.busy,
            "queued": self.queued,
            "waiting_for_queue": c.waiting_for_queue,
            "max_waiting_for_queue": c.max_waiting_for_queue,
            "submitted": c.submitted,
            "completed": c.completed,
            "failed": c.failed,
        }

    # ----------------------------------------------------------------- jobs

    def _call(self, fn: Callable[[], T], begun: list[float]) -> T:
        begun.append(time.perf_counter())
        with self._busy_lock:
            self._busy += 1
        try:
            return fn()
        finally:
            with self._busy_lock:
                self._busy -= 1

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on a worker thread and return (or raise) what it did."""
        if self._closed:
            raise RuntimeError("the I/O workers are closed")
        c = self.counters
        # A request's wait for a worker is its queue time (Kafka's RequestQueueTimeMs:
        # the wait for a handler thread); the thread notes when the job began.
        asked = time.perf_counter()
        begun: list[float] = []
        c.waiting_for_queue += 1
        c.max_waiting_for_queue = max(c.max_waiting_for_queue, c.waiting_for_queue)
        try:
            await self._places.acquire()
        finally:
            c.waiting_for_queue -= 1
        c.submitted += 1
        self._admitted += 1
        try:
            job = asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn, begun)
            try:
                result = await asyncio.shield(job)
            except asyncio.CancelledError:
                if not job.done():
                    # The thread goes on: what the job owns stays owned until it ends.
                    with contextlib.suppress(Exception):
                        await job
                raise
        except BaseException:
            c.failed += 1
            raise
        finally:
            self._admitted -= 1
            self._places.release()
            if begun:
                add_queue(begun[0] - asked)
        c.completed += 1
        return result

    def strand(self, key: Hashable) -> Strand:
        """The FIFO lock of ``key`` (created on first use)."""
        lock = self._strands.get(key)
        if lock is None:
            lock = self._strands[key] = Strand()
        return lock

    def strand_idle(self, key: Hashable) -> bool:
        """True if no job of ``key`` holds its strand or waits for it."""
        lock = self._strands.get(key)
        return lock is None or lock.idle

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s strand if nobody holds or waits for it (a deleted partition)."""
        lock = self._strands.get(key)
        if lock is not None and lock.idle:
            del self._strands[key]

    async def run_in_strand(self, key: Hashable, fn: Callable[[], T]) -> T:
        """Run ``fn`` on a worker after every job submitted earlier for ``key``."""
        async with self.strand(key):
            return await self.run(fn)

    async def close(self) -> None:
        """Refuse new jobs; wait for the running and queued ones; stop the threads."""
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True)


class Strand:
    """A strand's FIFO lock. Unlike an ``asyncio.Lock``, a place in line can be taken
    synchronously (:meth:`reserve`): a caller that decides, between two awaits, to send
    work to the strand is in line from that moment, even if the task that will await its
    turn has not started yet; and the lock passes straight to the next in line on
    release, so it is never free while someone waits."""

    def __init__(self) -> None:
        self._held = False
        self._line: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def idle(self) -> bool:
        """Nobody holds it, so nobody is in line (a release hands it to the next)."""
        return not self._held

    def locked(self) -> bool:
        return self._held

    def reserve(self) -> asyncio.Future[None]:
        """A place in line now: a ticket done when the strand is the caller's. Await
        it with :meth:`turn`, or give it up with :meth:`abandon`."""
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._held or self._line:
            self._line.append(ticket)
        else:
            self._held = True
            ticket.set_result(None)
        return ticket

    async def turn(self, ticket: asyncio.Future[None]) -> None:
        """Until ``ticket``'s turn; cancelled meanwhile, its place is given up."""
        try:
            await ticket
        except asyncio.CancelledError:
            self.abandon(ticket)
            raise

    def abandon(self, ticket: asyncio.Future[None]) -> None:
        """Give up ``ticket``: released if its turn came, else dropped from the line."""
        if ticket.done() and not ticket.cancelled():
            self.release()
        else:
            ticket.cancel()

    async def acquire(self) -> None:
        await self.turn(self.reserve())

    def release(self) -> None:
        """Hand the strand to the next in line, or free it."""
        while self._line:
            ticket = self._line.popleft()
            if not ticket.done():
                ticket.set_result(None)
                return
        self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------ adaptive appends
#: Where a log dir's appends and truncations run: on the event loop or on the workers.
INLINE: Final = "inline"
WORKERS: Final = "workers"
#: An append or truncation (the core call's wall time, less the time its thread waited
#: for a CPU: :class:`WriteTimer`) slower than this marks its log dir slow. Inline, the
#: loop ran nothing else meanwhile, so a heartbeat or fetch long-poll timer due then
#: fired that late: 10 ms late is within the loop's lag under ordinary load and far
#: inside every timeout the broker keeps (heartbeats every 2 s, replica.lag.time.max.ms
#: 30 s), while an append to the page cache takes well under 1 ms, so only a disk that
#: blocks writes (writeback throttling, a full device queue) crosses it.
INLINE_APPEND_SLOW_MS: Final = 10.0
#: A worker's fsync job (a roll's, flush.ms's) slower than this marks its log dir slow.
#: Higher than for an append: an fsync waits for the device by design and a healthy
#: disk takes tens of ms for a rolled segment; beyond 100 ms the device is saturated,
#: and the page-cache writes of the next appends are likely to block behind it.
WORKER_FSYNC_SLOW_MS: Final = 100.0
#: How long a slow log dir stays in worker mode after its last slow write (renewed by
#: every slow job of it on the workers). A slow spell of a disk lasts seconds: long
#: enough that it costs one blocked append on the loop, not one per probe; short enough
#: that a passing hiccup costs only seconds of the worker hop's ~10% produce throughput.
APPEND_HOLD_DOWN_MS: Final = 5_000


_schedstat = threading.local()


def _runqueue_wait_ms() -> float:
    """The calling thread's time spent waiting for a CPU so far (Linux's
    /proc/thread-self/schedstat, its second field), 0 where that is not known. A file
    per thread: a descriptor reads the stats of the thread that opened it."""
    fd: int | None = getattr(_schedstat, "fd", None)
    if fd is None:
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            fd = -1
        _schedstat.fd = fd
    if fd < 0:
        return 0.0
    try:
        return int(os.pread(fd, 64, 0).split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


class WriteTimer:
    """How long a write on this thread took, less the time the thread waited for a CPU
    meanwhile: on an oversubscribed machine a process waits for a CPU for tens of ms,
    which is not the disk's doing (measured: with the wall time alone, a loaded 2-core
    machine put every log dir in worker mode for most of a produce benchmark). Waiting
    for the GIL still counts. Costs two reads of a /proc file, ~2 us each."""

    __slots__ = ("_queued_ms", "_started")

    def __init__(self) -> None:
        self._queued_ms = _runqueue_wait_ms()
        self._started = time.perf_counter()

    def ms(self) -> float:
        wall_ms = (time.perf_counter() - self._started) * 1000
        if wall_ms < 1.0:
            return wall_ms  # fast: no need to look at the run queue
        return wall_ms - (_runqueue_wait_ms() - self._queued_ms)


class AppendModes:
    """Per log dir, whether appends run inline (the default) or on the workers.

    Appends and truncations run on the loop while their log dir's writes are fast: a
    hop to a worker and back costs about 0.1 ms and a GIL hand-over, ~10% of produce
    throughput. A write slower than :data:`INLINE_APPEND_SLOW_MS` (inline or on a
    worker), or an fsync job slower than :data:`WORKER_FSYNC_SLOW_MS`, puts its log dir
    in worker mode for :data:`APPEND_HOLD_DOWN_MS` from that write; each slow write
    renews it. The first slow write of a spell blocks the loop once (nobody can know
    before it runs); the next ones run on the workers. :meth:`pin` fixes the mode (for
    tests). Durations come from the callers (they time the core call); ``clock_ms``
    only says when a hold-down ends."""

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int],
        slow_append_ms: float = INLINE_APPEND_SLOW_MS,
        slow_fsync_ms: float = WORKER_FSYNC_SLOW_MS,
        hold_down_ms: int = APPEND_HOLD_DOWN_MS,
    ) -> None:
        self._clock_ms = clock_ms
        self.slow_append_ms = slow_append_ms
        self.slow_fsync_ms = slow_fsync_ms
        self.hold_down_ms = hold_down_ms
        self._workers_until: dict[Hashable, int] = {}  # slow log dir -> hold-down end
        self.pinned: str | None = None
        self.inline_appends = 0
        self.worker_appends = 0
        self.to_workers = 0  # mode switches, each way
        self.to_inline = 0

    def pin(self, mode: str | None) -> None:
        """Run every append in ``mode`` (INLINE or WORKERS); None: adapt again."""
        if mode not in (INLINE, WORKERS, None):
            raise ValueError(f"append mode must be {INLINE!r} or {WORKERS!r}, got {mode!r}")
        self.pinned = mode

    def inline(self, log_dir: Hashable) -> bool:
        """True if an append to ``log_dir`` may run on the loop now (its hold-down, if
        any, has ended)."""
        if self.pinned is not None:
            return self.pinned == INLINE
        if not self._workers_until:
            return True  # the common case: no slow log dir
        self._expire(self._clock_ms())
        return log_dir not in self._workers_until

    def _expire(self, now_ms: int) -> None:
        for log_dir, until_ms in list(self._workers_until.items()):
            if now_ms >= until_ms:
                del self._workers_until[log_dir]
                self.to_inline += 1
                log.info(
                    "appends run inline again",
                    extra={"fields": {"log_dir": str(log_dir), "quiet_ms": self.hold_down_ms}},
                )

    def appended(self, log_dir: Hashable, elapsed_ms: float, *, on_worker: bool) -> None:
        """An append or truncation to ``log_dir`` took ``elapsed_ms``."""
        if on_worker:
            self.worker_appends += 1
        else:
            self.inline_appends += 1
        if elapsed_ms > self.slow_append_ms:
            self._slow(log_dir, "an append", elapsed_ms)

    def fsynced(self, log_dir: Hashable, elapsed_ms: float) -> None:
        """A worker's fsync job of ``log_dir`` took ``elapsed_ms``."""
        if elapsed_ms > self.slow_fsync_ms:
            self._slow(log_dir, "an fsync", elapsed_ms)

    def _slow(self, log_dir: Hashable, what: str, elapsed_ms: float) -> None:
        if log_dir not in self._workers_until:
            self.to_workers += 1
            log.warning(
                "slow writes: appends move to the I/O workers",
                extra={
                    "fields": {
                        "log_dir": str(log_dir),
                        "write": what,
                        "ms": round(elapsed_ms, 1),
                        "hold_down_ms": self.hold_down_ms,
                    }
                },
            )
        self._workers_until[log_dir] = self._clock_ms() + self.hold_down_ms

    @property
    def worker_mode_log_dirs(self) -> int:
        """How many log dirs are in worker mode now (pinned: all or none)."""
        self._expire(self._clock_ms())
        return len(self._workers_until)

    def health(self) -> dict[str, Any]:
        self._expire(self._clock_ms())
        return {
            "pinned": self.pinned,
            "worker_mode_log_dirs": sorted(str(d) for d in self._workers_until),
            "inline_appends": self.inline_appends,
            "worker_appends": self.worker_appends,
            "switches_to_workers": self.to_workers,
            "switches_to_inline": self.to_inline,
        }


class LoopLagMonitor:
    """How late a periodic timer fires on this loop (see the module docstring)."""

    def __init__(
        self,
        *,
        interval_ms: int = LAG_INTERVAL_MS_DEFAULT,
        samples_max: int = LAG_SAMPLES_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert interval_ms >= 1 and samples_max >= 1
        self.interval_ms = interval_ms
        self._clock = clock
        self._lags_ms: collections.deque[float] = collections.deque(maxlen=samples_max)
        self.max_ms = 0.0  # since start, beyond the kept window
        self.samples = 0

    def record(self, lag_ms: float) -> None:
        lag_ms = max(0.0, lag_ms)
        self._lags_ms.append(lag_ms)
        self.samples += 1
        self.max_ms = max(self.max_ms, lag_ms)

    async def run(self) -> None:
        interval_s = self.interval_ms / 1000
        while True:
            due = self._clock() + interval_s
            await asyncio.sleep(interval_s)  # the probe itself: how late does it wake?
            self.record((self._clock() - due) * 1000)

    def health(self) -> dict[str, Any]:
        window = sorted(self._lags_ms)
        return {
            "interval_ms": self.interval_ms,
            "samples": self.samples,
            "window_samples": len(window),
            "p50_ms": round(_percentile(window, 0.50), 2),
            "p99_ms": round(_percentile(window, 0.99), 2),
            "window_max_ms": round(window[-1], 2) if window else 0.0,
            "max_ms": round(self.max_ms, 2),
        }


def _percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
