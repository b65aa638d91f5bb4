"""The active controller's event loop: one queue, one consumer, timers (Kafka's
``QuorumController`` event queue).

Theory of operation
-------------------
Every controller runs a quorum engine (``raftka.raft.quorum``) with a
:class:`~raftka.metadata.loader.MetadataLoader` as its commit listener, so every
controller holds the same committed image. The node the engine elects is the *active
controller*. Every write command runs through one asyncio queue with a single consumer
task (:meth:`ControllerEventLoop._consume`):

1. On becoming leader the consumer first waits for ``engine.read_barrier`` (everything
   committed is in the image), then builds a fresh :class:`QuorumController` (fresh
   broker sessions, as Kafka does on failover).
2. A command reads the current image, runs the pure controller method, appends its
   records as one payload, and **waits until that payload is committed and replayed**
   before the next command starts. So each command sees every earlier one in the
   image itself (no pending image to keep), and the offset the next payload gets is
   known: the high watermark (exclusive), since nothing else is uncommitted. That
   offset is ``next_offset``, the broker epoch of a registration. Metadata rates are
   low, so the lost pipelining does not matter.
3. A command with no records replies at once. A failed append (not leader, timeout)
   drops the QuorumController; the next command re-runs step 1, since a timed-out
   payload may still commit.

Two timers feed the same queue: broker session expiry and the preferred-leader
rebalance, at the times ``QuorumController.deadlines`` names (recomputed after every
queue item). A write submitted to a node that is not the active controller fails with
:class:`NotControllerRedirectError` (NOT_CONTROLLER with the leader's address).

This module does no HTTP: ``raftka.metadata.routes`` turns requests into
:meth:`ControllerEventLoop.submit` calls, and ``raftka.metadata.controller_process``
puts the two together behind a listening socket.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from raftka.common.errors import (
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    RequestTimedOutError,
    UnknownServerError,
)
from raftka.common.time import monotonic_ms, wait_event
from raftka.metadata.controller import QuorumController
from raftka.metadata.controller_api import ControllerResult
from raftka.metadata.image import MetadataImage
from raftka.metadata.loader import MetadataLoader
from raftka.metadata.metadata_records import encode_records
from raftka.raft.quorum.engine import NotLeaderError, QuorumEngine
from raftka.server_common.node_config import NodeConfig
from raftka.server_common.supervision import Supervisor

__all__ = [
    "APPEND_TIMEOUT_MS",
    "COMMANDS_QUEUED_MAX",
    "ControllerEventLoop",
    "NotControllerRedirectError",
]

log = logging.getLogger("raftka.controller")

# How long one command may wait for its records to commit and replay, and for the
# read barrier on becoming leader.
APPEND_TIMEOUT_MS: Final = 5000
# Bound on write commands waiting in the queue; beyond it a request is refused at once.
COMMANDS_QUEUED_MAX: Final = 1000

_Run = Callable[[QuorumController, MetadataImage, int, int], ControllerResult[Any]]


@dataclass(slots=True)
class _Command:
    name: str
    run: _Run
    future: asyncio.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class _Activate:
    epoch: int


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


_Item = _Command | _Activate | _Tick


class NotControllerRedirectError(NotControllerError):
    """NOT_CONTROLLER with where the active controller is, for the response body, and
    the quorum epoch this node knows (``leader_epoch``): a broker never follows a
    redirect of an epoch older than one it has seen, which would lead it back to a
    controller that is no longer active."""

    def __init__(
        self,
        message: str,
        leader_id: int | None,
        leader_address: str | None,
        leader_epoch: int = -1,
    ) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address
        self.leader_epoch = leader_epoch


@dataclass(slots=True)
class _Stats:
    commands: int = 0
    appended: int = 0
    activations: int = 0
    # Quorum leaders this node has learned of, one per epoch: the elections it saw end.
    elections: int = 0
    last_elected_epoch: int = -1
    offset_mismatches: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def leader_known(self, epoch: int) -> None:
        """A quorum leader of ``epoch`` is known: an election ended, counted once per
        epoch (the engine may report the same leader again)."""
        if epoch > self.last_elected_epoch:
            self.elections += 1
            self.last_elected_epoch = epoch


class ControllerEventLoop:
    """One controller without its HTTP edge: the engine, the loader, the event queue.

    Use from one event loop: ``await start()``, then ``await stop()``. A subclass
    serves it (``raftka.metadata.controller_process.ControllerServer``) by overriding
    :meth:`_listen` and :meth:`_close_listener`.
    """

    def __init__(
        self,
        config: NodeConfig,
        engine: QuorumEngine,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
        append_timeout_ms: int = APPEND_TIMEOUT_MS,
    ) -> None:
        self.config: Final = config
        self.engine: Final = engine
        self.clock_ms: Final = clock_ms
        #: The randomness of topic ids and replica placement (seeded in tests).
        self.rng: Final = rng if rng is not None else random.Random()
        self._append_timeout_ms = append_timeout_ms
        self.loader = MetadataLoader(
            snapshot_bytes_between=config.snapshot_bytes_between,
            on_leader_change=self._leader_change_from_engine,
        )
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._commands_queued = 0
        self._controller: QuorumController | None = None
        self._active_epoch = -1
        self._next_timer_ms: int | None = None
        self._timer_wake = asyncio.Event()
        self._tick_queued = False
        # (supervise) the queue and the timers are fatal: a controller without either
        # answers its API but decides nothing.
        self.supervisor = Supervisor()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._started = False
        self._stopping = False
        self.stats = _Stats()
        # Told each write's commit time, ms (the metrics' commit latency; metadata/metrics.py).
        self.on_commit_ms: Callable[[float], None] | None = None

    # -- lifecycle --------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """True once the engine started (and until stop)."""
        return self._started

    async def _listen(self) -> None:
        """Serve the API (a subclass); called before the engine starts, since the
        engine's peers reach it through the same app."""

    async def _close_listener(self) -> None:
        """Stop serving (a subclass); called last on stop."""

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.loader.attach(self.engine, self._loop)
        await self._listen()
        self.supervisor.spawn("controller-queue", self._consume)  # (supervise)
        self.supervisor.spawn("controller-timers", self._timers)  # (supervise)
        await self.engine.start(self.loader)
        self._started = True
        if self.engine.is_leader:
            self._enqueue(_Activate(self.engine.epoch))
        log.info(
            "controller started",
            extra={
                "fields": {
                    "node_id": self.config.node_id,
                    "listen": f"{self.config.listen_host}:{self.config.listen_port}",
                    "engine": self.config.quorum_engine,
                }
            },
        )

    async def stop(self) -> None:
        """Resign (the engine's stop), fail what is queued, stop serving."""
        if self._stopping:
            return
        self._stopping = True
        await self.supervisor.stop()  # (supervise)
        self._fail_queued(NotControllerError("the controller is shutting down"))
        try:
            if self._started:
                await self.engine.stop()
        finally:
            self.loader.signal.close()
            await self._close_listener()
        log.info("controller stopped", extra={"fields": {"node_id": self.config.node_id}})

    # -- leadership -------------------------------------------------------------------

    def _leader_change_from_engine(self, leader_id: int | None, epoch: int) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._on_leader_change(leader_id, epoch)
        else:
            loop.call_soon_threadsafe(self._on_leader_change, leader_id, epoch)

    def _on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        log.info(
            "quorum leader changed",
            extra={"fields": {"leader_id": leader_id, "epoch": epoch}},
        )
        if leader_id is not None:
            self.stats.leader_known(epoch)
        if leader_id == self.config.node_id:
            self._enqueue(_Activate(epoch))
        elif self._controller is not None:
            self._deactivate("another node leads")

    def _deactivate(self, why: str) -> None:
        if self._controller is not None:
            log.info("no longer the active controller", extra={"fields": {"why": why}})
        self._controller = None
        self._active_epoch = -1
        self._next_timer_ms = None
        self._timer_wake.set()

    def not_controller(self) -> NotControllerRedirectError:
        leader_id = self.engine.leader_id
        if leader_id == self.config.node_id:
            leader_id = None  # leading but not active yet (or just lost it)
        address = None if leader_id is None else self.config.address_of(leader_id)
        where = f"the active controller is {leader_id} at {address}" if address else "unknown"
        return NotControllerRedirectError(
            f"node {self.config.node_id} is not the active controller; {where}",
            leader_id,
            address,
            self.engine.epoch,
        )

    @property
    def is_active(self) -> bool:
        return (
            self._controller is not None
            and self.engine.is_leader
            and self.engine.epoch == self._active_epoch
        )

    async def _ensure_active(self) -> QuorumController:
        """The QuorumController of this leadership, built after a read barrier."""
        controller = self._controller
        if controller is not None and self.is_active:
            return controller
        self._controller = None
        if not self.engine.is_leader:
            raise self.not_controller()
        epoch = self.engine.epoch
        try:
            await self.engine.read_barrier(timeout_ms=self._append_timeout_ms)
        except NotLeaderError:
            raise self.not_controller() from None
        except KafkaTimeoutError:
            raise RequestTimedOutError(
                "the quorum did not commit this leader's first record in time"
            ) from None
        if not self.engine.is_leader or self.engine.epoch != epoch:
            raise self.not_controller()
        now_ms = self.clock_ms()
        controller = QuorumController(self.config.controller, self.loader.image, now_ms)
        self._controller, self._active_epoch = controller, epoch
        self.stats.activations += 1
        log.info(
            "became the active controller",
            extra={
                "fields": {
                    "node_id": self.config.node_id,
                    "epoch": epoch,
                    "metadata_offset": self.loader.image.offset,
                }
            },
        )
        return controller

    # -- the queue --------------------------------------------------------------------

    def _enqueue(self, item: _Item) -> None:
        self._queue.put_nowait(item)

    async def submit(self, name: str, run: _Run) -> Any:
        """Run a write command on the queue; its response once its records are
        committed and replayed (at once when it has none)."""
        if not self._started or self._stopping:
            raise self.not_controller()
        if not self.engine.is_leader:
            raise self.not_controller()
        if self._commands_queued >= COMMANDS_QUEUED_MAX:
            raise RequestTimedOutError(
                f"{COMMANDS_QUEUED_MAX} commands are already queued at the controller"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._commands_queued += 1
        self._enqueue(_Command(name, run, future))
        return await future

    def _fail_queued(self, error: KafkaError) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Command) and item.future is not None:
                self._commands_queued -= 1
                if not item.future.done():
                    item.future.set_exception(error)

    async def _consume(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _Command):
                    if item.future is not None:
                        self._commands_queued -= 1
                    await self._run_command(item)
                elif isinstance(item, _Activate):
                    if self.engine.is_leader and self.engine.epoch == item.epoch:
                        try:
                            await self._ensure_active()
                        except KafkaError as e:
                            log.warning(
                                "could not become the active controller",
                                extra={"fields": {"epoch": item.epoch, "error": str(e)}},
                            )
                else:
                    self._tick_queued = False
                    await self._run_timers()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in one item must not stop the controller's queue.
                log.exception("controller event failed")
            self._update_timer()

    async def _run_command(self, command: _Command) -> None:
        future = command.future
        if future is not None and future.done():
            return  # the caller gave up (its connection closed)
        try:
            response = await self._execute(command.run)
        except asyncio.CancelledError:
            # The queue stops with the controller. The caller would otherwise wait for
            # good (and aiohttp's shutdown with it) on an answer that never comes.
            if future is not None and not future.done():
                future.set_exception(NotControllerError("the controller is shutting down"))
            raise
        except KafkaError as e:
            if future is not None and not future.done():
                future.set_exception(e)
            return
        except Exception as e:
            log.exception("controller command failed", extra={"fields": {"command": command.name}})
            if future is not None and not future.done():
                future.set_exception(UnknownServerError(f"{command.name} failed: {e}"))
            return
        if future is not None and not future.done():
            future.set_result(response)

    async def _execute(self, run: _Run) -> Any:
        controller = await self._ensure_active()
        image = self.loader.image
        now_ms = self.clock_ms()
        # Every earlier payload is committed and replayed (we waited for each), so the
        # next payload lands at the high watermark.
        next_offset = max(self.engine.high_watermark, image.offset + 1)
        self.stats.commands += 1
        result = run(controller, image, now_ms, next_offset)
        if not result.records:
            return result.response
        payload = encode_records(result.records)
        appending = time.perf_counter()
        try:
            offset = await self.engine.append([payload], timeout_ms=self._append_timeout_ms)
        except NotLeaderError:
            self._deactivate("append refused: not the leader")
            raise self.not_controller() from None
        except KafkaTimeoutError:
            self._deactivate("append timed out")
            raise RequestTimedOutError(
                "the metadata records were not committed in time (they may still commit)"
            ) from None
        self.stats.appended += 1
        if self.on_commit_ms is not None:
            self.on_commit_ms((time.perf_counter() - appending) * 1000)
        if offset != next_offset:
            # Only the broker-epoch-equals-offset convention suffers; records carry
            # their own epochs, so every node still agrees.
            self.stats.offset_mismatches += 1
            log.warning(
                "payload landed at an unexpected offset",
                extra={"fields": {"expected": next_offset, "offset": offset}},
            )
        await self.loader.wait_applied(offset, self._append_timeout_ms, self.clock_ms)
        return result.response

    # -- timers -----------------------------------------------------------------------

    def _update_timer(self) -> None:
        controller = self._controller
        if controller is None or not self.is_active:
            self._next_timer_ms = None
        else:
            deadlines = controller.deadlines(self.loader.image, self.clock_ms())
            due = [d for d in (deadlines.session_expiry_ms, deadlines.leader_rebalance_ms) if d]
            self._next_timer_ms = min(due) if due else None
        self._timer_wake.set()

    async def _timers(self) -> None:
        """Queues a tick when the earliest deadline passes; re-armed after each item."""
        while True:
            self._timer_wake.clear()
            due_ms = self._next_timer_ms
            if due_ms is None:
                await self._timer_wake.wait()
                continue
            delay_ms = due_ms - self.clock_ms()
            if delay_ms > 0:
                await wait_event(self._timer_wake, delay_ms / 1000)
                continue
            if not self._tick_queued:
                self._tick_queued = True
                self._enqueue(_Tick())
            await self._timer_wake.wait()

    async def _run_timers(self) -> None:
        controller = self._controller
        if controller is None or not self.is_active:
            return
        now_ms = self.clock_ms()
        deadlines = controller.deadlines(self.loader.image, now_ms)
        if deadlines.session_expiry_ms is not None and deadlines.session_expiry_ms <= now_ms:
            response = await self._execute(
                lambda c, image, now, _next: c.expire_sessions(image, now)
            )
            if response.fenced_brokers:
                log.info(
                    "fenced brokers whose sessions expired",
                    extra={"fields": {"brokers": list(response.fenced_brokers)}},
                )
        if deadlines.leader_rebalance_ms is not None and deadlines.leader_rebalance_ms <= now_ms:
            response = await self._execute(
                lambda c, image, now, _next: c.rebalance_leaders(image, now)
            )
            if response.elected:
                log.info(
                    "moved leaderships back to preferred replicas",
                    extra={"fields": {"partitions": len(response.elected)}},
                )

    async def tick(self) -> None:
        """Run due timers now, through the queue (for tests that move a fake clock):
        queues a tick, then an empty command behind it; FIFO order means the tick ran
        once that command answers."""
        self._tick_queued = True
        self._enqueue(_Tick())
        await self.submit("barrier", lambda c, image, now, nxt: ControllerResult((), None))
