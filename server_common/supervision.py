"""Supervised background tasks: no half-broken server processes.

Theory of operation
-------------------
A server process (broker, controller, or both in combined mode) runs long-lived
asyncio tasks beside its HTTP API: heartbeats, the metadata follower, replica
fetchers, timers, the Raft driver. Before this module a task that raised was logged
once and the process went on serving without it (a broker that no longer heartbeats,
a controller without its event queue): alive to ``raftka status`` and to clients,
broken in fact. Every such task now runs under :meth:`Supervisor.spawn`, which decides
what an unexpected exception means, one of two things:

- ``restart=True``: the loop is started again after an exponential backoff
  (:class:`Backoff`), and the restart is counted (``/health`` shows the counters).
  This is for the loops Kafka itself restarts or keeps alive across errors: the replica
  fetchers and the metadata fetch loop, whose state lives outside the loop (the
  partitions, the metadata image) so that a new loop starts from where it was.
- ``restart=False`` (the default): the process fails. The supervisor reports
  ``fatal: <task> died: <error>`` through its fatal hook; in a server process that is
  :func:`process_fatal`, which writes that one line to stderr and wakes the process's
  main coroutine, which shuts down cleanly within a bounded deadline and exits 1 (a
  watchdog thread calls ``os._exit(1)`` if the shutdown hangs).

A task that returns normally is done (a loop that ends on close); cancellation is
never a failure. When no process installed a handler (:func:`install_process_fatal`),
as in tests that run servers in-process, a fatal failure is only logged.

Test-only hook: the environment variable ``RAFTKA_TEST_FAIL_TASK=<task name>``, read
when a task is spawned, makes that task raise ``RuntimeError`` as soon as it starts
(every time it starts, so a restartable task keeps restarting with backoff). It exists
for the real-process tests of the fatal path and is documented in docs/operations.md;
nothing sets it in normal operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TextIO

from raftka.common.time import monotonic_ms

__all__ = [
    "FAIL_TASK_ENV",
    "Backoff",
    "ProcessFatal",
    "Supervisor",
    "install_process_fatal",
    "process_fatal",
]

log = logging.getLogger(__name__)

#: The test-only fault injection (see the module docstring).
FAIL_TASK_ENV: Final = "RAFTKA_TEST_FAIL_TASK"
#: How long a clean shutdown after a fatal failure may take before ``os._exit(1)``.
FATAL_SHUTDOWN_DEADLINE_S: Final = 15.0

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential restart backoff: ``initial_ms * multiplier**n``, capped at ``max_ms``.
    A run that lasted ``stable_ms`` or more resets ``n`` (a loop that fails once a day
    restarts quickly every time)."""

    initial_ms: int = 100
    max_ms: int = 10_000
    multiplier: float = 2.0
    stable_ms: int = 60_000

    def delay_ms(self, failures: int) -> int:
        return int(min(self.max_ms, self.initial_ms * self.multiplier ** max(failures, 0)))


class Supervisor:
    """Runs a process's background tasks; see the module docstring.

    ``on_fatal`` receives the reason (``"<task> died: <error>"``); ``sleep`` and
    ``clock_ms`` are injectable for tests (a fake clock, no real waiting)."""

    def __init__(
        self,
        *,
        on_fatal: Callable[[str], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._on_fatal = on_fatal if on_fatal is not None else process_fatal
        self._sleep = sleep
        self._clock_ms = clock_ms
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        #: Restarts per task name (for /health).
        self.restarts: dict[str, int] = {}
        #: The last error of each task that failed, as ``Type: message``.
        self.last_error: dict[str, str] = {}
        #: The tasks that failed fatally.
        self.failed: list[str] = []

    def spawn(
        self,
        name: str,
        factory: TaskFactory,
        *,
        restart: bool = False,
        backoff: Backoff | None = None,
    ) -> asyncio.Task[None]:
        """Start ``factory()`` as the task ``name`` under supervision. ``factory`` is
        called again for each restart (a coroutine runs once)."""
        if os.environ.get(FAIL_TASK_ENV) == name:
            factory = _failing(name)
        task = asyncio.get_running_loop().create_task(
            self._run(name, factory, restart, backoff or Backoff()), name=name
        )
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._forget(name, t))
        return task

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]

    async def _run(self, name: str, factory: TaskFactory, restart: bool, backoff: Backoff) -> None:
        failures = 0
        while True:
            started = self._clock_ms()
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._stopping:
                    return  # torn down under us while the process stops: not a failure
                error = f"{type(e).__name__}: {e}"
                self.last_error[name] = error
                if not restart:
                    self.failed.append(name)
                    log.critical(
                        "background task died",
                        exc_info=e,
                        extra={"fields": {"task": name, "error": error}},
                    )
                    self._on_fatal(f"{name} died: {error}")
                    return
                if self._clock_ms() - started >= backoff.stable_ms:
                    failures = 0
                delay_ms = backoff.delay_ms(failures)
                failures += 1
                self.restarts[name] = self.restarts.get(name, 0) + 1
                log.error(
                    "background task died; restarting",
                    exc_info=e,
                    extra={
                        "fields": {
                            "task": name,
                            "error": error,
                            "restarts": self.restarts[name],
                            "backoff_ms": delay_ms,
                        }
                    },
                )
                await self._sleep(delay_ms / 1000)  # the restart backoff, not synchronisation

    def health(self) -> dict[str, Any]:
        """What /health shows: restarts per task and the tasks that failed fatally."""
        return {
            "task_restarts": dict(sorted(self.restarts.items())),
            "tasks_failed": list(self.failed),
        }

    async def stop(self) -> None:
        """Cancel every task and wait for them (a failure while stopping is ignored)."""
        self._stopping = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _failing(name: str) -> TaskFactory:
    async def fail() -> None:
        raise RuntimeError(f"injected failure of task {name} ({FAIL_TASK_ENV})")

    return fail


class ProcessFatal:
    """A server process's fatal-failure handler: the first reason wins; it is printed as
    one line on stderr, :attr:`event` wakes the process's main coroutine for a clean
    shutdown, and a watchdog thread ends the process with exit code 1 if that shutdown
    has not finished within ``deadline_s``."""

    def __init__(
        self,
        *,
        deadline_s: float = FATAL_SHUTDOWN_DEADLINE_S,
        hard_exit: Callable[[int], None] = os._exit,
        stream: TextIO | None = None,
    ) -> None:
        self.event = asyncio.Event()
        self.reason: str | None = None
        self._deadline_s = deadline_s
        self._hard_exit = hard_exit
        self._stream = stream
        self._watchdog: threading.Timer | None = None

    def fatal(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        stream = self._stream if self._stream is not None else sys.stderr
        print(f"fatal: {reason}", file=stream, flush=True)
        # A thread, not a task: the event loop itself may be what hangs.
        self._watchdog = threading.Timer(self._deadline_s, self._hard_exit, args=(1,))
        self._watchdog.daemon = True
        self._watchdog.start()
        self.event.set()

    def cancel_watchdog(self) -> None:
        """The clean shutdown finished in time (the process exits 1 by itself)."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    async def shut_down(self, stop: Callable[[], Awaitable[None]], logger: logging.Logger) -> int:
        """The end of a server process's main coroutine: run ``stop`` and return the
        exit code, 0 after a signal; after a fatal failure 1, the shutdown bounded (the
        watchdog thread ends the process if even this wait cannot run). ``logger`` is
        the process's own, which says why it shuts down."""
        if self.reason is None:
            logger.info("shutting down on a signal")
            await stop()
            return 0
        logger.error("shutting down on a fatal failure", extra={"fields": {"reason": self.reason}})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop(), self._deadline_s - 1)
        self.cancel_watchdog()
        return 1


_process: ProcessFatal | None = None


def install_process_fatal(handler: ProcessFatal | None = None) -> ProcessFatal:
    """Make ``handler`` (a new one by default) this process's fatal handler; called by
    the ``raftka broker/controller/server`` entry points, never by in-process tests."""
    global _process  # noqa: PLW0603 - one handler per process, by design
    _process = handler if handler is not None else ProcessFatal()
    return _process


def process_fatal(reason: str) -> None:
    """Report a fatal failure to the process's handler (only logged when none)."""
    if _process is None:
        log.critical(
            "fatal failure (no process handler installed)", extra={"fields": {"reason": reason}}
        )
        return
    _process.fatal(reason)
