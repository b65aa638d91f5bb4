"""The broker's I/O workers (broker/io_workers.py) and the disk work the replica manager
hands them.

Checks: the pool runs at most num.io.threads jobs and admits at most
queued.max.requests more (the rest wait on the loop); jobs of one strand run one after
the other in submission order while other strands run beside them; a job's error
reaches its caller; a cancelled caller still waits for its running job; the loop-lag
monitor sees a blocked loop. Through the ReplicaManager: new logs are opened (recovered)
on the workers before a metadata change applies; an idle partition is flushed by
flush.ms; retention runs on a worker while produces to that partition wait; a roll's
fsync is done by a worker, not the appending call.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from broker_harness import AppendGate, BrokerHarness, Clock, register_brokers, run
from broker_harness import until as _until

from raftka.broker import io_workers
from raftka.broker.io_workers import (
    APPEND_HOLD_DOWN_MS,
    INLINE,
    INLINE_APPEND_SLOW_MS,
    WORKER_FSYNC_SLOW_MS,
    WORKERS,
    AppendModes,
    IoWorkers,
    LoopLagMonitor,
    Strand,
    WriteTimer,
)
from raftka.broker.replication.manager import FetchPartition
from raftka.common.errors import KafkaStorageError
from raftka.common.record import Record, build_batch, iter_records
from raftka.metadata.metadata_records import (
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)

DEADLINE_S = 10.0


# ---------------------------------------------------------------------- the pool


def test_the_pool_runs_num_io_threads_and_admits_queued_max_requests_more() -> None:
    async def body() -> None:
        pool = IoWorkers(num_io_threads=2, queued_max_requests=1)
        gate = threading.Event()
        jobs = [asyncio.create_task(pool.run(lambda: gate.wait(DEADLINE_S))) for _ in range(5)]
        await _until(lambda: pool.busy == 2, "two busy workers")
        await _until(lambda: pool.counters.waiting_for_queue == 2, "two callers held back")
        assert pool.queued == 1, "one admitted job waits for a thread"
        assert pool.counters.submitted == 3, "no more than threads + queued.max.requests"
        gate.set()
        assert await asyncio.gather(*jobs) == [True] * 5
        assert pool.counters.completed == 5 and pool.busy == 0 and pool.queued == 0
        assert pool.health()["max_waiting_for_queue"] == 2
        await pool.close()

    run(body)


def test_a_strand_keeps_submission_order_while_strands_run_in_parallel() -> None:
    async def body() -> None:
        pool = IoWorkers(num_io_threads=4, queued_max_requests=100)
        seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
        running = 0
        overlap = 0
        lock = threading.Lock()
        rng = random.Random(7)

        def job(key: str, i: int, pause: float) -> None:
            nonlocal running, overlap
            with lock:
                running += 1
                overlap = max(overlap, running)
            time.sleep(pause)  # the disk work being simulated, not synchronisation
            seen[key].append(i)
            with lock:
                running -= 1

        pauses = {(k, i): rng.random() / 200 for i in range(30) for k in seen}
        submitted = [
            pool.run_in_strand(key, lambda k=key, i=i: job(k, i, pauses[(k, i)]))
            for i in range(30)
            for key in seen
        ]
        await asyncio.gather(*submitted)
        for key, order in seen.items():
            assert order == list(range(30)), f"strand {key} ran out of order: {order}"
        assert overlap > 1, "jobs of different strands never ran side by side"
        pool.forget("a")
        await pool.close()

    run(body)


def test_a_jobs_error_reaches_its_caller_and_a_cancelled_caller_waits_for_its_job() -> None:
    async def body() -> None:
        pool = IoWorkers(num_io_threads=1, queued_max_requests=1)

        def fail() -> None:
            raise ValueError("disk says no")

        with pytest.raises(ValueError, match="disk says no"):
            await pool.run(fail)
        assert pool.counters.failed == 1

        gate = threading.Event()
        done = threading.Event()

        def slow() -> None:
            gate.wait(DEADLINE_S)
            done.set()

        caller = asyncio.create_task(pool.run_in_strand("p", slow))
        await _until(lambda: pool.busy == 1, "the job to start")
        caller.cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        assert not caller.done(), "the cancellation went on under a running job"
        assert pool.strand("p").locked(), "the strand was given up under a running job"
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert done.is_set() and not pool.strand("p").locked()
        await pool.close()
        with pytest.raises(RuntimeError, match="closed"):
            await pool.run(lambda: None)

    run(body)


def test_a_strand_place_taken_synchronously_is_served_before_later_ones() -> None:
    """A place reserved now is served before an acquire begun later, even if its owner
    awaits it later still; an abandoned place (its turn come or not) is skipped; the
    strand is idle only when nobody holds it."""

    async def body() -> None:
        strand = Strand()
        order: list[str] = []
        first = strand.reserve()
        assert first.done() and not strand.idle
        second = strand.reserve()  # in line; its owner awaits later
        dropped = strand.reserve()
        strand.abandon(dropped)  # given up before its turn

        async def late() -> None:
            async with strand:
                order.append("late")

        late_task = asyncio.create_task(late())
        await asyncio.sleep(0)
        strand.release()  # first's turn ends: second's comes, not late's
        await asyncio.sleep(0)
        assert order == [] and second.done() and not strand.idle
        await strand.turn(second)
        order.append("second")
        strand.release()
        await late_task
        assert order == ["second", "late"] and strand.idle
        handed = strand.reserve()
        strand.abandon(handed)  # its turn had come: abandoning it releases
        assert strand.idle

    run(body)


def test_bad_pool_sizes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"num\.io\.threads"):
        IoWorkers(num_io_threads=0, queued_max_requests=1)
    with pytest.raises(ValueError, match=r"queued\.max\.requests"):
        IoWorkers(num_io_threads=1, queued_max_requests=0)


def test_the_lag_monitor_sees_a_blocked_loop() -> None:
    async def body() -> None:
        monitor = LoopLagMonitor(interval_ms=5)
        task = asyncio.create_task(monitor.run())
        await _until(lambda: monitor.samples >= 3, "the first samples")
        time.sleep(0.2)  # the loop blocked: what the monitor must report
        await _until(lambda: monitor.max_ms >= 150, "the blocked loop's lag")
        health = monitor.health()
        assert health["max_ms"] >= 150 and health["window_max_ms"] >= 150
        task.cancel()

    run(body)


# ------------------------------------------------------- through the ReplicaManager

TOPIC_ID = str(uuid.uuid4())


class _Broker(BrokerHarness):
    """Broker 1 alone, leading topic ``t`` (ISR {1}); its clock is ``clock``."""

    def __init__(
        self, tmp_path: Path, clock: Clock, *, partitions: int = 1, mode: str | None = None
    ) -> None:
        super().__init__(tmp_path, clock=clock, num_io_threads=4)
        self.partitions = partitions
        self.manager.appends.pin(mode)  # None: adaptive, as a broker runs

    async def topic(self, **configs: str) -> None:
        await self.commit_on_workers(
            *register_brokers([1]),
            TopicRecord(name="t", topic_id=TOPIC_ID),
            *[ConfigRecord("topic", "t", k.replace("_", "."), v) for k, v in configs.items()],
            *[
                PartitionRecord(
                    partition_id=i, topic_id=TOPIC_ID, replicas=(1,), isr=(1,), leader=1
                )
                for i in range(self.partitions)
            ],
        )

    async def produce(self, partition: int, *values: bytes) -> Any:
        batch = build_batch([Record(v, timestamp_ms=1_000) for v in values])
        (result,) = await self.manager.produce(
            acks=1, timeout_ms=5_000, entries=[("t", partition, batch)]
        )
        assert result.error is None, result.error
        return result


def test_logs_are_recovered_on_the_workers_before_the_metadata_applies(tmp_path: Path) -> None:
    """Twenty partitions with data, a restart: the new broker opens every log on the
    I/O workers (one job each) and the replicas start from what the logs hold."""

    async def body() -> None:
        clock = Clock()
        first = _Broker(tmp_path, clock, partitions=20)
        await first.topic()
        for i in range(20):
            for _ in range(i + 1):
                await first.produce(i, b"v" * 50)
        await first.manager.close()

        again = _Broker(tmp_path, clock, partitions=20)
        await again.topic()
        assert again.manager.io.counters.completed >= 20, "the logs were not opened on workers"
        for i in range(20):
            p = again.manager.partitions[("t", i)]
            assert p.log.log_end_offset == i + 1 and p.state.is_leader
        await again.manager.close()

    run(body)


def test_a_new_leaderships_epoch_is_written_by_a_worker_before_the_change_returns(
    tmp_path: Path,
) -> None:
    """Broker 1 leads, then leads again at a new leader epoch: the metadata change
    returns with the leader-epoch checkpoint written (by a worker) and the log given
    back, and the next append carries the new epoch."""

    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock)
        await b.topic()
        await b.produce(0, b"a")
        p = b.manager.partitions[("t", 0)]
        checkpoint = p.log.path / "leader-epoch-checkpoint"
        jobs = b.manager.io.counters.completed
        await b.commit_on_workers(
            PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1)
        )
        assert p.state.leader_epoch == 1
        assert b.manager.io.counters.completed == jobs + 1, "not written by a worker"
        assert checkpoint.read_text().splitlines()[-1] == "1 1", "the new epoch is not durable"
        assert not b.manager.is_cleaning(("t", 0)), "the log was not given back"
        await b.produce(0, b"b")
        assert p.log.latest_epoch == 1
        await b.manager.close()

    run(body)


def test_an_idle_partition_is_flushed_by_flush_ms(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock)
        await b.topic(flush_ms="1000")
        await b.produce(0, b"a", b"b")
        log = b.manager.partitions[("t", 0)].log
        assert log.recovery_point == 0, "nothing fsynced yet"
        assert await b.manager.flush_due_logs() == 0, "flush.ms has not passed"
        clock.now_ms += 1_000  # no append since: only the timer can flush it
        assert await b.manager.flush_due_logs() == 1
        assert log.recovery_point == log.log_end_offset == 2
        assert await b.manager.flush_due_logs() == 0, "nothing left to flush"
        await b.manager.close()

    run(body)


def test_retention_runs_on_a_worker_while_produces_to_its_partition_wait(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock)
        await b.topic(segment_bytes="1000", retention_bytes="2000")
        for _ in range(40):
            await b.produce(0, b"x" * 100, b"y" * 100)
        p = b.manager.partitions[("t", 0)]
        leo = p.log.log_end_offset
        gate = threading.Event()
        entered = threading.Event()
        real = p.log.delete_retention_segments

        def slow_delete() -> int:
            entered.set()
            gate.wait(DEADLINE_S)  # a slow disk
            return real()

        p.log.delete_retention_segments = slow_delete  # type: ignore[method-assign]
        # The rolls' snapshot jobs first (they hold the log too).
        await _until(lambda: not b.manager.is_cleaning(("t", 0)), "the roll snapshots")
        retention = asyncio.create_task(b.manager.enforce_retention_on_workers())
        await _until(entered.is_set, "retention to run on a worker")
        assert b.manager.is_cleaning(("t", 0)), "retention runs without holding the log"
        produce = asyncio.create_task(b.produce(0, b"z"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done(), "a produce appended under a worker's job"
        gate.set()
        assert await retention > 0
        assert p.state.log_start_offset == p.log.log_start_offset > 0, "the core saw the move"
        assert (await produce).base_offset == leo
        await b.manager.close()

    run(body)


@pytest.mark.parametrize("mode", [INLINE, WORKERS])
def test_a_roll_leaves_its_fsync_to_a_worker(tmp_path: Path, mode: str) -> None:
    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock)
        b.manager.appends.pin(mode)
        await b.topic(segment_bytes="1000")
        log = b.manager.partitions[("t", 0)].log
        # Who held the log at each fsync tells an appending call's (inline: nobody; on
        # a worker: APPEND) from the roll's snapshot job's.
        flushed_under: list[str | None] = []
        real_flush = log.flush

        def flush(*args: Any, **kwargs: Any) -> None:
            flushed_under.append(b.manager._holders.get(("t", 0)))
            real_flush(*args, **kwargs)

        log.flush = flush  # type: ignore[method-assign]
        while log.segment_count < 3:
            await b.produce(0, b"x" * 300)

        def jobs_done() -> bool:
            snapshots = [n for n in log.path.iterdir() if n.suffix == ".snapshot"]
            return log.recovery_point == log.active_segment_base_offset and bool(snapshots)

        # The appends rolled twice; the workers' jobs fsync what the rolls left and
        # write the rolls' producer-state snapshots.
        await _until(jobs_done, "the rolled segments' fsync and the snapshots")
        assert flushed_under, "nothing fsynced the rolled segments"
        assert set(flushed_under) == {"a producer-state snapshot"}, flushed_under
        await b.manager.close()

    run(body)


# ------------------------------------------------------- appends on the workers


def _values(records: bytes) -> list[bytes]:
    return [r.value for r in iter_records(records) if r.value is not None]


def test_concurrent_produces_to_one_partition_append_in_arrival_order(tmp_path: Path) -> None:
    """Forty produce requests to one partition, all in flight at once, each append slow
    by a random few ms on a pool of four threads: the strand runs them one at a time,
    in the order they arrived."""

    async def body() -> None:
        b = _Broker(tmp_path, Clock(), mode=WORKERS)
        await b.topic()
        log = b.manager.partitions[("t", 0)].log
        gate = AppendGate(log)
        real = gate._real
        gate._real = lambda data, epoch: (time.sleep(random.random() / 500), real(data, epoch))[1]
        gate.open.set()
        values = [f"v{i}".encode() for i in range(40)]
        produced = await asyncio.gather(*(b.produce(0, v) for v in values))
        assert [r.base_offset for r in produced] == list(range(40))
        assert gate.max_running == 1, "two appends of one partition ran at once"
        assert _values(log.read(0, 1 << 20)) == values
        await b.manager.close()

    run(body)


async def _an_append_held(
    tmp_path: Path, value: bytes
) -> tuple[_Broker, AppendGate, asyncio.Task[Any]]:
    """A broker whose produce of ``value`` is appending on a worker, held at the gate."""
    b = _Broker(tmp_path, Clock(), mode=WORKERS)
    await b.topic()
    gate = AppendGate(b.manager.partitions[("t", 0)].log)
    produce = asyncio.create_task(b.produce(0, value))
    await _until(gate.entered.is_set, "the append on a worker")
    return b, gate, produce


def test_a_produce_behind_a_running_append_waits_then_appends(tmp_path: Path) -> None:
    """While a worker's append holds the log, a second produce waits (nothing of it is
    appended) and appends right after, in order."""

    async def body() -> None:
        b, gate, first = await _an_append_held(tmp_path, b"first")
        assert b.manager.is_cleaning(("t", 0)), "the append runs without holding the log"
        second = asyncio.create_task(b.produce(0, b"second"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not second.done() and gate.running == 1, "a produce appended under an append"
        gate.open.set()
        assert (await first).base_offset == 0
        assert (await second).base_offset == 1
        await b.manager.close()

    run(body)


@pytest.mark.parametrize("min_bytes", [1, 0])
def test_a_fetch_meeting_an_append_job_reads_its_records_once_released(
    tmp_path: Path, min_bytes: int
) -> None:
    """A consumer fetch (long poll 5 s) that finds the log held by a worker's append
    neither answers empty at once (even with min_bytes 0) nor waits out its long poll:
    it returns the records the job appended as soon as the log is given back."""

    async def body() -> None:
        b, gate, produce = await _an_append_held(tmp_path, b"held")
        fetch = asyncio.create_task(
            b.manager.fetch(
                replica_id=-1,
                broker_epoch=-1,
                max_wait_ms=5_000,
                min_bytes=min_bytes,
                max_bytes=1 << 20,
                partitions=[FetchPartition("t", 0, 0)],
            )
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert not fetch.done(), "the fetch answered while the append held the log"
        started = time.monotonic()
        gate.open.set()
        await produce
        (result,) = await asyncio.wait_for(fetch, DEADLINE_S)
        assert result.error is None and _values(result.records) == [b"held"]
        assert time.monotonic() - started < 2, "the fetch waited out its long poll"
        await b.manager.close()

    run(body)


@pytest.mark.parametrize("failure", [KafkaStorageError("disk gone"), RuntimeError("bug")])
def test_an_append_job_error_is_the_produce_error_and_the_broker_goes_on(
    tmp_path: Path, failure: Exception
) -> None:
    """The log raising on the worker (KafkaStorageError, as a failing disk does, or
    anything else) answers that partition KAFKA_STORAGE_ERROR; the log is given back and
    the next produce appends."""

    async def body() -> None:
        b = _Broker(tmp_path, Clock(), mode=WORKERS)
        await b.topic()
        log = b.manager.partitions[("t", 0)].log
        real = log.append_as_leader

        def failing(data: bytes, epoch: int) -> Any:
            raise failure

        log.append_as_leader = failing
        batch = build_batch([Record(b"lost", timestamp_ms=1_000)])
        (result,) = await b.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, batch)])
        assert result.error is not None and result.error.name == "KAFKA_STORAGE_ERROR"
        assert not b.manager.is_cleaning(("t", 0)), "the log was not given back"
        log.append_as_leader = real
        assert (await b.produce(0, b"next")).base_offset == 0
        await b.manager.close()

    run(body)


def test_a_produce_waiting_for_the_strand_times_out_at_its_timeout(tmp_path: Path) -> None:
    """A produce queued behind a partition's job that does not end (a stuck disk) is
    answered REQUEST_TIMED_OUT at its timeout, and takes nothing from the queue: the
    next produce appends right after the stuck one."""

    async def body() -> None:
        b, gate, first = await _an_append_held(tmp_path, b"first")
        batch = build_batch([Record(b"late", timestamp_ms=1_000)])
        started = time.monotonic()
        (late,) = await b.manager.produce(acks=1, timeout_ms=50, entries=[("t", 0, batch)])
        assert late.error is not None and late.error.name == "REQUEST_TIMED_OUT"
        assert time.monotonic() - started < 2
        gate.open.set()
        assert (await first).base_offset == 0
        assert (await b.produce(0, b"next")).base_offset == 1
        await b.manager.close()

    run(body)


# ------------------------------------------------------- adaptive appends


def test_append_modes_move_a_slow_log_dir_to_the_workers_and_back() -> None:
    """Inline by default; a slow write (inline or on a worker) or a slow fsync job puts
    that log dir alone in worker mode for the hold-down from the last slow one; fast
    writes do not renew it; then inline again. Each switch is counted."""
    clock = Clock()
    modes = AppendModes(clock_ms=clock)
    assert modes.inline("a") and modes.inline("b")
    modes.appended("a", INLINE_APPEND_SLOW_MS, on_worker=False)  # at the bar: not slow
    modes.fsynced("a", WORKER_FSYNC_SLOW_MS)
    assert modes.inline("a") and modes.to_workers == 0
    modes.appended("a", INLINE_APPEND_SLOW_MS + 1, on_worker=False)
    assert not modes.inline("a") and modes.inline("b"), "only the slow log dir moves"
    assert modes.health()["worker_mode_log_dirs"] == ["a"] and modes.to_workers == 1
    clock.now_ms += APPEND_HOLD_DOWN_MS - 1
    modes.appended("a", 1.0, on_worker=True)  # fast: no renewal
    modes.fsynced("b", WORKER_FSYNC_SLOW_MS + 1)  # a slow fsync moves b
    assert not modes.inline("b")
    clock.now_ms += 1
    assert modes.inline("a") and modes.to_inline == 1
    modes.appended("b", INLINE_APPEND_SLOW_MS + 1, on_worker=True)  # renews b's hold-down
    clock.now_ms += APPEND_HOLD_DOWN_MS - 1
    assert not modes.inline("b")
    clock.now_ms += 1
    assert modes.inline("b")
    h = modes.health()
    assert h["worker_mode_log_dirs"] == [] and h["inline_appends"] == 2
    assert h["worker_appends"] == 2
    assert (h["switches_to_workers"], h["switches_to_inline"]) == (2, 2)


def test_append_modes_pin_for_tests_and_refuse_an_unknown_mode() -> None:
    modes = AppendModes(clock_ms=Clock())
    modes.pin(WORKERS)
    assert not modes.inline("a")
    modes.pin(INLINE)
    modes.appended("a", 1_000.0, on_worker=False)
    assert modes.inline("a"), "a pinned mode does not adapt"
    modes.pin(None)
    assert not modes.inline("a"), "unpinned, the slow write counts"
    with pytest.raises(ValueError, match="append mode must be"):
        modes.pin("threads")


def test_a_write_timer_counts_a_blocked_write_but_not_a_wait_for_a_cpu() -> None:
    """A write blocked 20 ms (a sleep: off the CPU, not waiting for one) counts whole;
    time the thread waited for a CPU (Linux's schedstat) is taken off."""
    timer = WriteTimer()
    time.sleep(0.02)  # the blocked write
    assert timer.ms() >= 19.0
    timer = WriteTimer()
    timer._queued_ms -= 50.0  # as if the thread had waited 50 ms for a CPU meanwhile
    time.sleep(0.002)
    if io_workers._runqueue_wait_ms() > 0:  # schedstat readable (Linux)
        assert timer.ms() < 0


class _SlowAppends:
    """Wraps a log's ``append_as_leader``: the calls whose number (from 0) is in
    ``slow`` take ``slow_s`` longer (a slow disk); records on which thread each ran."""

    def __init__(self, log: Any, slow: set[int], slow_s: float) -> None:
        self.calls = 0
        self.threads: list[int] = []
        self.slow = slow
        self.slow_s = slow_s
        self._real = log.append_as_leader
        log.append_as_leader = self

    def __call__(self, data: bytes, epoch: int) -> Any:
        n = self.calls
        self.calls += 1
        self.threads.append(threading.get_ident())
        if n in self.slow:
            time.sleep(self.slow_s)  # the injected slow write, not a synchronisation
        return self._real(data, epoch)


def test_a_slow_append_moves_the_next_ones_to_the_workers_until_the_hold_down_ends(
    tmp_path: Path,
) -> None:
    """Append 0 is slow inline (50 ms: the loop is blocked once, the price); append 1
    runs on a worker, and a loop timer fires while it runs (the worker waits for it, so
    an inline append would have waited out the deadline); being slow (> 10 ms) too, it
    renews the hold-down; append 2 still runs on a worker just before the renewed
    hold-down ends, append 3 inline after it. Offsets and values in order."""

    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock)
        await b.topic()
        modes = b.manager.appends
        log = b.manager.partitions[("t", 0)].log
        slow = _SlowAppends(log, slow={0}, slow_s=0.05)
        loop_thread = threading.get_ident()

        assert (await b.produce(0, b"v0")).base_offset == 0
        assert slow.threads == [loop_thread] and modes.inline_appends == 1
        assert modes.health()["worker_mode_log_dirs"] == [str(log.path.parent)]

        # Append 1: on a worker it waits for a timer of the loop (and so takes > 10 ms).
        ticked = threading.Event()
        real = slow._real

        def waits_for_the_loop(data: bytes, epoch: int) -> Any:
            assert ticked.wait(DEADLINE_S), "the loop's timer did not fire during the append"
            time.sleep(INLINE_APPEND_SLOW_MS / 1000 * 1.5)  # slow on the worker too
            return real(data, epoch)

        slow._real = waits_for_the_loop
        asyncio.get_running_loop().call_later(0.001, ticked.set)
        clock.now_ms += 1_000
        assert (await b.produce(0, b"v1")).base_offset == 1
        assert slow.threads[1] != loop_thread and modes.worker_appends == 1
        slow._real = real

        clock.now_ms += APPEND_HOLD_DOWN_MS - 1  # renewed by append 1: not yet over
        assert (await b.produce(0, b"v2")).base_offset == 2
        assert slow.threads[2] != loop_thread and modes.worker_appends == 2
        clock.now_ms += 1
        assert (await b.produce(0, b"v3")).base_offset == 3
        assert slow.threads[3] == loop_thread and modes.inline_appends == 2
        assert (modes.to_workers, modes.to_inline) == (1, 1)
        assert _values(log.read(0, 1 << 20)) == [b"v0", b"v1", b"v2", b"v3"]
        await b.manager.close()

    run(body)


def test_concurrent_produces_keep_arrival_order_across_mode_switches(tmp_path: Path) -> None:
    """Sixty produce requests in flight at once (the even ones to partitions 0 and 1 in
    one request, the odd ones to partition 0 alone); every seventh append is slow (12 ms)
    and the clock jumps past the hold-down every ten requests, so the partitions switch
    between inline and worker appends in mid-stream. Each partition's records are in
    the order the requests arrived, at consecutive offsets."""

    async def body() -> None:
        clock = Clock()
        b = _Broker(tmp_path, clock, partitions=2)
        await b.topic()
        logs = [b.manager.partitions[("t", i)].log for i in (0, 1)]
        for log in logs:
            _SlowAppends(log, slow=set(range(3, 100, 7)), slow_s=0.012)

        async def produce(i: int) -> list[Any]:
            batch = build_batch([Record(f"v{i}".encode(), timestamp_ms=1_000)])
            entries = [("t", p, batch) for p in ((0, 1) if i % 2 == 0 else (0,))]
            results = await b.manager.produce(acks=1, timeout_ms=10_000, entries=entries)
            assert all(r.error is None for r in results), results
            return [r.base_offset for r in results]

        tasks = []
        for i in range(60):
            tasks.append(asyncio.create_task(produce(i)))
            if i % 10 == 9:
                clock.now_ms += APPEND_HOLD_DOWN_MS
            if i % 3 == 0:
                await asyncio.sleep(0)  # let some start (and some finish) meanwhile
        offsets = await asyncio.gather(*tasks)
        assert [o[0] for o in offsets] == list(range(60))
        assert [o[1] for o in offsets if len(o) == 2] == list(range(30))
        assert _values(logs[0].read(0, 1 << 20)) == [f"v{i}".encode() for i in range(60)]
        assert _values(logs[1].read(0, 1 << 20)) == [f"v{i}".encode() for i in range(0, 60, 2)]
        modes = b.manager.appends
        assert modes.inline_appends > 0 and modes.worker_appends > 0
        assert modes.to_workers >= 2 and modes.to_inline >= 1, modes.health()
        await b.manager.close()

    run(body)
