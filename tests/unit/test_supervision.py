"""The background-task supervisor (``raftka.server_common.supervision``) with a fake
clock and sleep: restarts with exponential backoff and a counter, the fatal path's hook
and its one-line reason, the process handler's watchdog, the test-only fault hook."""

from __future__ import annotations

import asyncio
import functools
import io
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from raftka.server_common.supervision import (
    FAIL_TASK_ENV,
    Backoff,
    ProcessFatal,
    Supervisor,
)


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


class FakeTime:
    """A clock that moves only when the supervisor sleeps (its backoff)."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.sleeps_ms: list[int] = []

    def clock_ms(self) -> int:
        return self.now_ms

    async def sleep(self, seconds: float) -> None:
        ms = round(seconds * 1000)
        self.sleeps_ms.append(ms)
        self.now_ms += ms


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    b = Backoff(initial_ms=100, max_ms=1_000, multiplier=2.0)
    assert [b.delay_ms(n) for n in range(6)] == [100, 200, 400, 800, 1_000, 1_000]


@run
async def test_a_restartable_task_restarts_with_backoff_and_a_counter() -> None:
    """Three failures, then a run that ends normally: three restarts counted, waits of
    100, 200, 400 ms in between, no fatal report."""
    time = FakeTime()
    fatal: list[str] = []
    runs = 0

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs <= 3:
            raise ValueError(f"boom {runs}")

    sup = Supervisor(on_fatal=fatal.append, sleep=time.sleep, clock_ms=time.clock_ms)
    await sup.spawn(
        "replica-fetcher-2", loop, restart=True, backoff=Backoff(initial_ms=100, stable_ms=10**6)
    )
    assert runs == 4 and time.sleeps_ms == [100, 200, 400]
    assert sup.restarts == {"replica-fetcher-2": 3}
    assert sup.last_error["replica-fetcher-2"] == "ValueError: boom 3"
    assert sup.health() == {"task_restarts": {"replica-fetcher-2": 3}, "tasks_failed": []}
    assert fatal == []


@run
async def test_a_long_stable_run_resets_the_backoff() -> None:
    """A failure after a run longer than stable_ms restarts after the initial delay."""
    time = FakeTime()
    runs = 0

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs == 2:
            time.now_ms += 5_000  # this run lasted long enough to count as stable
        if runs <= 3:
            raise RuntimeError("x")

    sup = Supervisor(on_fatal=lambda _: None, sleep=time.sleep, clock_ms=time.clock_ms)
    await sup.spawn("metadata", loop, restart=True, backoff=Backoff(initial_ms=10, stable_ms=1_000))
    assert time.sleeps_ms == [10, 10, 20]


@run
async def test_a_fatal_task_reports_its_reason_once_and_is_not_restarted() -> None:
    time = FakeTime()
    fatal: list[str] = []
    runs = 0

    async def heartbeats() -> None:
        nonlocal runs
        runs += 1
        raise KeyError("broker_epoch")

    sup = Supervisor(on_fatal=fatal.append, sleep=time.sleep, clock_ms=time.clock_ms)
    await sup.spawn("heartbeat", heartbeats)
    assert runs == 1 and time.sleeps_ms == []
    assert fatal == ["heartbeat died: KeyError: 'broker_epoch'"]
    assert sup.health()["tasks_failed"] == ["heartbeat"]


@run
async def test_cancellation_and_stop_are_not_failures() -> None:
    fatal: list[str] = []
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    sup = Supervisor(on_fatal=fatal.append)
    task = sup.spawn("isr-shrink", forever)
    await asyncio.wait_for(started.wait(), 5)
    await sup.stop()
    assert task.cancelled() and fatal == [] and sup.restarts == {}


@run
async def test_the_test_hook_fails_the_named_task_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAIL_TASK_ENV, "log-retention")
    fatal: list[str] = []
    ran: list[str] = []

    async def work() -> None:
        ran.append("ok")

    sup = Supervisor(on_fatal=fatal.append)
    await sup.spawn("log-retention", work)
    await sup.spawn("hw-checkpoint", work)
    assert ran == ["ok"]
    assert len(fatal) == 1 and fatal[0].startswith("log-retention died: RuntimeError: injected")


@run
async def test_process_fatal_prints_one_line_wakes_the_process_and_arms_the_watchdog() -> None:
    """The first reason wins; the stderr line is ``fatal: <task> died: <error>``; the
    watchdog calls the hard exit with 1 when the clean shutdown does not finish."""
    stream = io.StringIO()
    exited = asyncio.Event()
    codes: list[int] = []
    loop = asyncio.get_running_loop()

    def hard_exit(code: int) -> None:
        codes.append(code)
        loop.call_soon_threadsafe(exited.set)

    handler = ProcessFatal(deadline_s=0.01, hard_exit=hard_exit, stream=stream)
    handler.fatal("heartbeat died: KeyError: 'x'")
    handler.fatal("metadata died: later")
    assert stream.getvalue() == "fatal: heartbeat died: KeyError: 'x'\n"
    assert handler.event.is_set() and handler.reason == "heartbeat died: KeyError: 'x'"
    await asyncio.wait_for(exited.wait(), 5)
    assert codes == [1]


@run
async def test_the_watchdog_is_disarmed_by_a_clean_shutdown() -> None:
    codes: list[int] = []
    handler = ProcessFatal(deadline_s=60, hard_exit=codes.append, stream=io.StringIO())
    handler.fatal("x died: y")
    handler.cancel_watchdog()
    assert handler._watchdog is not None
    handler._watchdog.join(5)
    assert not handler._watchdog.is_alive() and codes == []


@run
async def test_shut_down_stops_and_returns_the_exit_code() -> None:
    """0 after a signal; 1 after a fatal failure, with the watchdog disarmed."""
    logger = logging.getLogger("test_supervision")
    stops: list[str] = []

    async def stop() -> None:
        stops.append("stopped")

    assert await ProcessFatal().shut_down(stop, logger) == 0
    codes: list[int] = []
    handler = ProcessFatal(deadline_s=60, hard_exit=codes.append, stream=io.StringIO())
    handler.fatal("x died: y")
    assert await handler.shut_down(stop, logger) == 1
    assert handler._watchdog is not None
    handler._watchdog.join(5)
    assert stops == ["stopped", "stopped"] and codes == []
