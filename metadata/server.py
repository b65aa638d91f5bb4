"""The controller process: metadata replay, the active controller's event loop, its API.

Theory of operation
-------------------
Every controller runs a quorum engine (``raftka.raft.quorum``) and a
:class:`MetadataReplayer` as its commit listener. Each committed payload is one
command's metadata records (``encode_records``); the replayer replays them through a
:class:`MetadataDelta` into the next :class:`MetadataImage`, identically on every
controller, and writes a snapshot (``image.to_records()``) once
``metadata.log.max.record.bytes.between.snapshots`` payload bytes were committed since
the last one. A snapshot from the engine replaces the image (``image_from_records``).
A payload that does not decode or replay is skipped with an error in the log on every
node alike (replay is deterministic), so the images stay equal.

The node the engine elects is the *active controller*. Every write command runs through
one asyncio queue with a single consumer task (:meth:`ControllerServer._consume`):

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
queue item).

The HTTP API (``/v1/...``) is JSON through orjson; ``docs/controller-api.md`` has every
endpoint. A write sent to a follower answers 503 NOT_CONTROLLER with ``leader_id`` and
``leader_address``. Reads (``/v1/metadata``, ``/v1/configs``, ``/v1/quorum``) are served
by any controller from its own committed state. Every error is
``{"error", "error_code", "message"}`` with an HTTP status; never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

import orjson
from aiohttp import web

from raftka.common.errors import (
    InvalidRequestError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    RequestTimedOutError,
    UnknownServerError,
)
from raftka.common.time import monotonic_ms, wait_event
from raftka.metadata.controller import (
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    ControllerResult,
    CreatablePartitions,
    CreatableTopic,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    QuorumController,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    describe_configs,
)
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_fetch import (
    METADATA_RECORDS_MAX,
    METADATA_WAIT_MS_MAX,
    CommitSignal,
    fetch_metadata,
)
from raftka.metadata.metadata_records import Endpoint, decode_records, encode_records
from raftka.raft.quorum.engine import (
    CommittedRecord,
    NotLeaderError,
    QuorumEngine,
    QuorumInfo,
    VoterState,
)
from raftka.server_common.http_errors import error_middleware, json_response
from raftka.server_common.process_config import NodeConfig

__all__ = [
    "APPEND_TIMEOUT_MS",
    "COMMANDS_QUEUED_MAX",
    "ControllerServer",
    "JsonLogFormatter",
    "MetadataReplayer",
    "configure_logging",
    "create_engine",
    "run_controller",
]

log = logging.getLogger("raftka.controller")

R = TypeVar("R")

# How long one command may wait for its records to commit and replay, and for the
# read barrier on becoming leader.
APPEND_TIMEOUT_MS: Final = 5000
# Bound on write commands waiting in the queue; beyond it a request is refused at once.
COMMANDS_QUEUED_MAX: Final = 1000
# Bound on a request body.
REQUEST_BYTES_MAX: Final = 1024 * 1024
# Bound on the items of one request (topics, resources, ops, endpoints, replicas).
REQUEST_ITEMS_MAX: Final = 10_000

# HTTP status per error name; every other KafkaError is a client error (400).
_STATUS: Final[Mapping[str, int]] = {
    "NOT_CONTROLLER": 503,
    "REQUEST_TIMED_OUT": 503,
    "KAFKA_TIMEOUT": 503,
    "LEADER_NOT_AVAILABLE": 503,
    "UNKNOWN_SERVER_ERROR": 500,
    "UNKNOWN_TOPIC_OR_PARTITION": 404,
}


# ---------------------------------------------------------------------------------------
# Structured logs


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, fields
    (``extra={"fields": {...}}``), and the exception text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            out["fields"] = fields
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log is one line per request: too chatty at INFO.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


# ---------------------------------------------------------------------------------------
# Replay of the committed log


class MetadataReplayer:
    """The controllers' commit listener: committed payloads -> the current image.

    ``image`` is read from the event loop while an engine may call the handlers from its
    own thread: the image is immutable and swapped as one reference under a lock.
    """

    def __init__(
        self,
        *,
        snapshot_bytes_between: int,
        on_leader_change: Callable[[int | None, int], None] | None = None,
    ) -> None:
        assert snapshot_bytes_between > 0
        self._lock = threading.Lock()
        self._image = MetadataImage.EMPTY
        self._bytes_since_snapshot = 0
        self._snapshot_bytes_between = snapshot_bytes_between
        self._on_leader_change = on_leader_change
        self._engine: QuorumEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.signal = CommitSignal()
        self.skipped_payloads = 0
        self.snapshots_written = 0
        self._snapshot_encoding = False
        self._snapshot_again = False  # one fell due while another was encoding

    def attach(self, engine: QuorumEngine, loop: asyncio.AbstractEventLoop) -> None:
        self._engine = engine
        self._loop = loop
        self.signal.bind(loop)

    @property
    def image(self) -> MetadataImage:
        return self._image

    # -- CommitListener ---------------------------------------------------------------

    def handle_commit(self, records: Sequence[CommittedRecord]) -> None:
        with self._lock:
            image = self._image
            for committed in records:
                assert committed.offset > image.offset, (committed.offset, image.offset)
                image = self._replay(image, committed)
                self._bytes_since_snapshot += len(committed.payload)
            self._image = image
            snapshot_due = self._bytes_since_snapshot >= self._snapshot_bytes_between
            if snapshot_due:
                self._bytes_since_snapshot = 0
        if snapshot_due:
            self._schedule_snapshot()
        self.signal.notify()

    def handle_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        records = decode_records(data)
        image = image_from_records(records, end_offset - 1, epoch)
        with self._lock:
            self._image = image
            self._bytes_since_snapshot = 0
        log.info(
            "loaded metadata snapshot",
            extra={"fields": {"end_offset": end_offset, "epoch": epoch, "records": len(records)}},
        )
        self.signal.notify()

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if self._on_leader_change is not None:
            self._on_leader_change(leader_id, epoch)

    # -- internals --------------------------------------------------------------------

    def _replay(self, image: MetadataImage, committed: CommittedRecord) -> MetadataImage:
        delta = MetadataDelta(image)
        try:
            delta.replay_all(decode_records(committed.payload))
        except KafkaError as e:
            # Deterministic on every node: each skips the same payload.
            self.skipped_payloads += 1
            log.error(
                "skipping a committed metadata payload that does not replay",
                extra={"fields": {"offset": committed.offset, "error": str(e)}},
            )
            delta = MetadataDelta(image)
        delta.offset, delta.epoch = committed.offset, max(committed.epoch, image.epoch)
        return delta.apply()

    def _schedule_snapshot(self) -> None:
        loop = self._loop
        if loop is None:
            self.write_snapshot()
            return
        # Not from inside the engine's callback: the engine may not expect re-entry.
        loop.call_soon_threadsafe(self._encode_snapshot_off_loop)

    def _encode_snapshot_off_loop(self) -> None:
        """Encode the image on a worker thread, then save it on the loop. Encoding a
        large image takes seconds (100,000 partitions: ~3 s); on the loop it stalled
        the quorum's fetches past the fetch timeout, and every snapshot caused an
        election. The image is immutable, so the thread reads it safely. One snapshot
        at a time: one that falls due meanwhile is taken as soon as it finishes, of the
        image as it is then (so the last commits before a quiet period are covered)."""
        image = self._image
        if self._engine is None or image.offset < 0:
            return
        if self._snapshot_encoding:
            self._snapshot_again = True
            return
        loop = self._loop
        assert loop is not None
        self._snapshot_encoding = True
        encoded = loop.run_in_executor(None, lambda: encode_records(image.to_records()))

        def save(done: asyncio.Future[bytes]) -> None:
            self._snapshot_encoding = False
            try:
                data = done.result()
            except Exception:
                log.exception("encoding a metadata snapshot failed")
            else:
                self._save_snapshot(image.offset + 1, data)
            if self._snapshot_again:
                self._snapshot_again = False
                self._encode_snapshot_off_loop()

        encoded.add_done_callback(save)

    def write_snapshot(self) -> None:
        """Snapshot the current image through the engine (covers offsets < end)."""
        image = self._image
        if self._engine is None or image.offset < 0:
            return
        self._save_snapshot(image.offset + 1, encode_records(image.to_records()))

    def _save_snapshot(self, end_offset: int, data: bytes) -> None:
        engine = self._engine
        assert engine is not None
        try:
            engine.save_snapshot(end_offset, data)
        except Exception:
            log.exception("writing a metadata snapshot failed")
            return
        self.snapshots_written += 1
        log.info("wrote metadata snapshot", extra={"fields": {"end_offset": end_offset}})

    async def wait_applied(self, offset: int, timeout_ms: int, clock_ms: Callable[[], int]) -> None:
        """Until the image includes the payload at ``offset``; RequestTimedOutError."""
        deadline_ms = clock_ms() + timeout_ms
        while True:
            waiter = self.signal.waiter()
            if self._image.offset >= offset:
                return
            remaining = deadline_ms - clock_ms()
            if remaining <= 0 or not await CommitSignal.wait(waiter, remaining):
                if self._image.offset >= offset:
                    return
                raise RequestTimedOutError(
                    f"the record at offset {offset} committed but was not applied in time"
                )


# ---------------------------------------------------------------------------------------
# The event queue

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
    """NOT_CONTROLLER with where the active controller is, for the response body."""

    def __init__(self, message: str, leader_id: int | None, leader_address: str | None) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address


@dataclass(slots=True)
class _Stats:
    commands: int = 0
    appended: int = 0
    activations: int = 0
    offset_mismatches: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class ControllerServer:
    """One controller: the engine, the replayer, the event queue, the aiohttp app.

    Use from one event loop: ``await start()`` (serves on the configured port unless
    ``listen=False``, for tests that use ``app`` directly), then ``await stop()``.
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
        self._clock_ms = clock_ms
        self._rng = rng if rng is not None else random.Random()
        self._append_timeout_ms = append_timeout_ms
        self.replayer = MetadataReplayer(
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
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._runner: web.AppRunner | None = None
        self._started = False
        self._stopping = False
        self.stats = _Stats()
        self.app = self._build_app()

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, *, listen: bool = True) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.replayer.attach(self.engine, self._loop)
        if listen:
            # Serve first: the engine's peers reach it through this app.
            self._runner = web.AppRunner(self.app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(
                self._runner, self.config.listen_host, self.config.listen_port, reuse_address=True
            )
            await site.start()
        self._tasks = [
            asyncio.create_task(self._consume(), name="controller-queue"),
            asyncio.create_task(self._timers(), name="controller-timers"),
        ]
        await self.engine.start(self.replayer)
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
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail_queued(NotControllerError("the controller is shutting down"))
        try:
            if self._started:
                await self.engine.stop()
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
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
        now_ms = self._clock_ms()
        controller = QuorumController(self.config.controller, self.replayer.image, now_ms)
        self._controller, self._active_epoch = controller, epoch
        self.stats.activations += 1
        log.info(
            "became the active controller",
            extra={
                "fields": {
                    "node_id": self.config.node_id,
                    "epoch": epoch,
                    "metadata_offset": self.replayer.image.offset,
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
        image = self.replayer.image
        now_ms = self._clock_ms()
        # Every earlier payload is committed and replayed (we waited for each), so the
        # next payload lands at the high watermark.
        next_offset = max(self.engine.high_watermark, image.offset + 1)
        self.stats.commands += 1
        result = run(controller, image, now_ms, next_offset)
        if not result.records:
            return result.response
        payload = encode_records(result.records)
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
        if offset != next_offset:
            # Only the broker-epoch-equals-offset convention suffers; records carry
            # their own epochs, so every node still agrees.
            self.stats.offset_mismatches += 1
            log.warning(
                "payload landed at an unexpected offset",
                extra={"fields": {"expected": next_offset, "offset": offset}},
            )
        await self.replayer.wait_applied(offset, self._append_timeout_ms, self._clock_ms)
        return result.response

    # -- timers -----------------------------------------------------------------------

    def _update_timer(self) -> None:
        controller = self._controller
        if controller is None or not self.is_active:
            self._next_timer_ms = None
        else:
            deadlines = controller.deadlines(self.replayer.image, self._clock_ms())
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
            delay_ms = due_ms - self._clock_ms()
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
        now_ms = self._clock_ms()
        deadlines = controller.deadlines(self.replayer.image, now_ms)
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

    # -- the HTTP app -----------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[error_middleware(error_response, log)], client_max_size=REQUEST_BYTES_MAX
        )
        app[_SERVER_KEY] = self
        app.add_routes(list(self.engine.routes()))
        app.add_routes(
            [
                web.get("/health", _health),
                web.post("/v1/brokers/register", _register_broker),
                web.post("/v1/brokers/heartbeat", _heartbeat),
                web.post("/v1/topics", _create_topics),
                web.delete("/v1/topics", _delete_topics),
                web.post("/v1/partitions", _create_partitions),
                web.post("/v1/configs", _alter_configs),
                web.get("/v1/configs", _describe_configs),
                web.post("/v1/alter-partition", _alter_partition),
                web.post("/v1/producer-ids", _allocate_producer_ids),
                web.get("/v1/quorum", _describe_quorum),
                web.get("/v1/metadata", _fetch_metadata),
            ]
        )
        return app

    def quorum_json(self) -> dict[str, Any]:
        info: QuorumInfo = self.engine.describe()

        def replica(state: VoterState) -> dict[str, Any]:
            known = state.log_end_offset >= 0
            return {
                "node_id": state.node_id,
                "address": self.config.address_of(state.node_id),
                "log_end_offset": state.log_end_offset if known else None,
                "lag": max(info.log_end_offset - state.log_end_offset, 0) if known else None,
                "last_fetch_ms": state.last_fetch_ms if state.last_fetch_ms >= 0 else None,
                "last_caught_up_ms": (
                    state.last_caught_up_ms if state.last_caught_up_ms >= 0 else None
                ),
            }

        voters = [replica(v) for v in info.voters]
        lags = [v["lag"] for v in voters if v["lag"] is not None]
        return {
            "node_id": info.node_id,
            "role": info.role,
            "leader_id": info.leader_id,
            "leader_address": (
                None if info.leader_id is None else self.config.address_of(info.leader_id)
            ),
            "epoch": info.epoch,
            "high_watermark": info.high_watermark,
            "log_end_offset": info.log_end_offset,
            "log_start_offset": info.log_start_offset,
            "max_follower_lag": max(lags) if lags else None,
            "voters": voters,
            "observers": [replica(o) for o in info.observers],
            "metadata_offset": self.replayer.image.offset,
        }


_SERVER_KEY: Final = web.AppKey("controller_server", ControllerServer)


def _server(request: web.Request) -> ControllerServer:
    return request.app[_SERVER_KEY]


# ---------------------------------------------------------------------------------------
# Responses and errors


_json = json_response


def error_response(error: KafkaError) -> web.Response:
    body: dict[str, Any] = dict(error.to_wire())
    if isinstance(error, NotControllerRedirectError):
        body["leader_id"] = error.leader_id
        body["leader_address"] = error.leader_address
    elif isinstance(error, NotControllerError):
        body.setdefault("leader_id", None)
        body.setdefault("leader_address", None)
    return _json(body, _STATUS.get(error.name, 400))


def _error_or_none(error: KafkaError | None) -> dict[str, object] | None:
    return None if error is None else error.to_wire()


# ---------------------------------------------------------------------------------------
# Strict request parsing: every field's type is checked; unknown fields are errors.


class _Body:
    """A JSON object from a request, read field by field with strict types."""

    def __init__(self, data: Mapping[str, object], where: str) -> None:
        self._data = data
        self._where = where
        self._used: set[str] = set()

    def _get(self, name: str) -> object:
        self._used.add(name)
        return self._data.get(name)

    def _bad(self, name: str, expected: str, value: object) -> InvalidRequestError:
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return InvalidRequestError(f"{self._where}{name}: expected {expected}, got {shown}")

    def get_int(
        self,
        name: str,
        *,
        default: int | None = None,
        minimum: int = -(2**63),
        maximum: int = 2**63 - 1,
    ) -> int:
        value = self._get(name)
        if value is None and name not in self._data and default is not None:
            return default
        if type(value) is not int or not minimum <= value <= maximum:
            raise self._bad(name, f"an integer in [{minimum}, {maximum}]", value)
        return value

    def get_bool(self, name: str, *, default: bool) -> bool:
        if name not in self._data:
            self._used.add(name)
            return default
        value = self._get(name)
        if type(value) is not bool:
            raise self._bad(name, "true or false", value)
        return value

    def get_str(self, name: str, *, optional: bool = False) -> str | None:
        value = self._get(name)
        if value is None and optional:
            return None
        if type(value) is not str:
            raise self._bad(name, "a string", value)
        return value

    def req_str(self, name: str) -> str:
        value = self.get_str(name)
        assert value is not None
        return value

    def get_int_list(self, name: str, *, optional: bool = False) -> tuple[int, ...] | None:
        value = self._get(name)
        if value is None and optional:
            return None
        return _int_list(value, f"{self._where}{name}")

    def get_list(self, name: str, *, optional: bool = False) -> list[object] | None:
        value = self._get(name)
        if value is None and optional:
            return None
        if type(value) is not list:
            raise self._bad(name, "a list", value)
        if len(value) > REQUEST_ITEMS_MAX:
            raise InvalidRequestError(f"{self._where}{name}: more than {REQUEST_ITEMS_MAX} items")
        return value

    def raw(self, name: str) -> object:
        return self._get(name)

    def has(self, name: str) -> bool:
        return name in self._data

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._used)
        if unknown:
            raise InvalidRequestError(f"{self._where}unknown field {unknown[0]!r}")


def _int_list(value: object, where: str) -> tuple[int, ...]:
    if type(value) is not list or len(value) > REQUEST_ITEMS_MAX:
        raise InvalidRequestError(f"{where}: expected a list of integers, got {value!r:.60}")
    for item in value:
        if type(item) is not int or not 0 <= item <= 2**31 - 1:
            raise InvalidRequestError(
                f"{where}: expected a list of broker ids (int32 >= 0), got item {item!r:.40}"
            )
    return tuple(value)


def _object(value: object, where: str) -> _Body:
    if type(value) is not dict:
        raise InvalidRequestError(f"{where}: expected a JSON object, got {value!r:.60}")
    return _Body(value, f"{where}." if where else "")


async def _read_body(request: web.Request) -> _Body:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise InvalidRequestError(f"request body larger than {REQUEST_BYTES_MAX} bytes") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"malformed JSON body: {e}") from None
    return _object(data, "")


def _query_int(request: web.Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not minimum <= int(raw) <= maximum:
        raise InvalidRequestError(
            f"query parameter {name}: expected an integer in [{minimum}, {maximum}], got {raw!r}"
        )
    return int(raw)


# ---------------------------------------------------------------------------------------
# Handlers


async def _health(request: web.Request) -> web.Response:
    server = _server(request)
    if not server._started:
        return _json({"status": "starting", "node_id": server.config.node_id}, 503)
    info = server.engine.describe()
    return _json(
        {
            "status": "ok",
            "node_id": server.config.node_id,
            "role": info.role,
            "leader_id": info.leader_id,
            "epoch": info.epoch,
            "active_controller": server.is_active,
            "high_watermark": info.high_watermark,
            "metadata_offset": server.replayer.image.offset,
        }
    )


async def _register_broker(request: web.Request) -> web.Response:
    body = await _read_body(request)
    endpoints: list[Endpoint] = []
    for i, item in enumerate(body.get_list("endpoints") or []):
        e = _object(item, f"endpoints[{i}]")
        endpoints.append(
            Endpoint(
                e.req_str("name"),
                e.req_str("host"),
                e.get_int("port", minimum=0, maximum=65535),
            )
        )
        e.done()
    req = RegisterBrokerRequest(
        broker_id=body.get_int("broker_id", minimum=0, maximum=2**31 - 1),
        incarnation_id=body.req_str("incarnation_id"),
        endpoints=tuple(endpoints),
        rack=body.get_str("rack", optional=True),
    )
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[RegisterBrokerResponse]:
        return c.register_broker(image, req, now_ms=now, next_offset=nxt)

    response: RegisterBrokerResponse = await _server(request).submit("register_broker", run)
    return _json({"broker_epoch": response.broker_epoch})


async def _heartbeat(request: web.Request) -> web.Response:
    body = await _read_body(request)
    req = BrokerHeartbeatRequest(
        broker_id=body.get_int("broker_id", minimum=0, maximum=2**31 - 1),
        broker_epoch=body.get_int("broker_epoch"),
        current_metadata_offset=body.get_int("current_metadata_offset", minimum=-1),
        want_fence=body.get_bool("want_fence", default=False),
        want_shutdown=body.get_bool("want_shutdown", default=False),
    )
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        return c.heartbeat(image, req, now_ms=now, next_offset=nxt)

    response: BrokerHeartbeatResponse = await _server(request).submit("heartbeat", run)
    return _json(
        {
            "is_caught_up": response.is_caught_up,
            "is_fenced": response.is_fenced,
            "in_controlled_shutdown": response.in_controlled_shutdown,
            "should_shutdown": response.should_shutdown,
        }
    )


def _assignments(value: object, where: str) -> dict[int, tuple[int, ...]]:
    """``{"0": [1, 2], ...}`` or ``[[1, 2], ...]`` (list index = partition)."""
    out: dict[int, tuple[int, ...]] = {}
    if type(value) is list:
        if len(value) > REQUEST_ITEMS_MAX:
            raise InvalidRequestError(f"{where}: more than {REQUEST_ITEMS_MAX} partitions")
        for i, replicas in enumerate(value):
            out[i] = _int_list(replicas, f"{where}[{i}]")
        return out
    if type(value) is dict:
        if len(value) > REQUEST_ITEMS_MAX:
            raise InvalidRequestError(f"{where}: more than {REQUEST_ITEMS_MAX} partitions")
        for key, replicas in value.items():
            if not key.isdigit():
                raise InvalidRequestError(f"{where}: partition {key!r} is not an integer")
            out[int(key)] = _int_list(replicas, f"{where}[{key}]")
        return out
    raise InvalidRequestError(
        f"{where}: expected a list of replica lists or an object of them, got {value!r:.60}"
    )


async def _create_topics(request: web.Request) -> web.Response:
    body = await _read_body(request)
    topics: list[CreatableTopic] = []
    for i, item in enumerate(body.get_list("topics") or []):
        t = _object(item, f"topics[{i}]")
        configs: dict[str, str] = {}
        raw_configs = t.raw("configs")
        if raw_configs is not None:
            if type(raw_configs) is not dict:
                raise InvalidRequestError(f"topics[{i}].configs: expected an object of strings")
            for key, value in raw_configs.items():
                if type(value) is not str:
                    raise InvalidRequestError(
                        f"topics[{i}].configs.{key}: expected a string, got {value!r:.40}"
                    )
                configs[key] = value
        raw_assignments = t.raw("assignments")
        topics.append(
            CreatableTopic(
                name=t.req_str("name"),
                num_partitions=t.get_int(
                    "num_partitions", default=-1, minimum=-1, maximum=2**31 - 1
                ),
                replication_factor=t.get_int(
                    "replication_factor", default=-1, minimum=-1, maximum=2**15 - 1
                ),
                assignments=(
                    None
                    if raw_assignments is None
                    else _assignments(raw_assignments, f"topics[{i}].assignments")
                ),
                configs=configs,
            )
        )
        t.done()
    validate_only = body.get_bool("validate_only", default=False)
    body.done()
    server = _server(request)

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[CreateTopicsResponse]:
        return c.create_topics(image, topics, rng=server._rng, validate_only=validate_only)

    response: CreateTopicsResponse = await server.submit("create_topics", run)
    return _json(
        {
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "error": _error_or_none(t.error),
                }
                for t in response.topics
            ]
        }
    )


async def _delete_topics(request: web.Request) -> web.Response:
    body = await _read_body(request)
    names = [
        _str_item(v, f"names[{i}]")
        for i, v in enumerate(body.get_list("names", optional=True) or [])
    ]
    ids = [
        _str_item(v, f"topic_ids[{i}]")
        for i, v in enumerate(body.get_list("topic_ids", optional=True) or [])
    ]
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[DeleteTopicsResponse]:
        return c.delete_topics(image, names=names, topic_ids=ids)

    response: DeleteTopicsResponse = await _server(request).submit("delete_topics", run)
    return _json(
        {
            "topics": [
                {"name": t.name, "topic_id": t.topic_id, "error": _error_or_none(t.error)}
                for t in response.topics
            ]
        }
    )


def _str_item(value: object, where: str) -> str:
    if type(value) is not str:
        raise InvalidRequestError(f"{where}: expected a string, got {value!r:.60}")
    return value


async def _create_partitions(request: web.Request) -> web.Response:
    body = await _read_body(request)
    topics: list[CreatablePartitions] = []
    for i, item in enumerate(body.get_list("topics") or []):
        t = _object(item, f"topics[{i}]")
        raw = t.raw("assignments")
        assignments = None
        if raw is not None:
            if type(raw) is not list or len(raw) > REQUEST_ITEMS_MAX:
                raise InvalidRequestError(f"topics[{i}].assignments: expected a list of lists")
            assignments = [_int_list(r, f"topics[{i}].assignments[{j}]") for j, r in enumerate(raw)]
        topics.append(
            CreatablePartitions(
                name=t.req_str("name"),
                count=t.get_int("count", minimum=1, maximum=2**31 - 1),
                assignments=assignments,
            )
        )
        t.done()
    validate_only = body.get_bool("validate_only", default=False)
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[CreatePartitionsResponse]:
        return c.create_partitions(image, topics, validate_only=validate_only)

    response: CreatePartitionsResponse = await _server(request).submit("create_partitions", run)
    return _json(
        {"topics": [{"name": t.name, "error": _error_or_none(t.error)} for t in response.topics]}
    )


_OPS: Final = ("SET", "DELETE", "APPEND", "SUBTRACT")


async def _alter_configs(request: web.Request) -> web.Response:
    body = await _read_body(request)
    resources: list[AlterConfigsResource] = []
    for i, item in enumerate(body.get_list("resources") or []):
        r = _object(item, f"resources[{i}]")
        resource_type = r.req_str("resource_type")
        if resource_type not in ("topic", "broker"):
            raise InvalidRequestError(
                f"resources[{i}].resource_type: expected topic or broker, got {resource_type!r}"
            )
        ops: list[AlterConfigOp] = []
        for j, raw_op in enumerate(r.get_list("ops") or []):
            o = _object(raw_op, f"resources[{i}].ops[{j}]")
            op = o.req_str("op")
            if op not in _OPS:
                raise InvalidRequestError(
                    f"resources[{i}].ops[{j}].op: expected one of {', '.join(_OPS)}, got {op!r}"
                )
            ops.append(
                AlterConfigOp(
                    name=o.req_str("name"),
                    op=cast(Any, op),
                    value=o.get_str("value", optional=True),
                )
            )
            o.done()
        resources.append(
            AlterConfigsResource(
                resource_type="topic" if resource_type == "topic" else "broker",
                resource_name=r.req_str("resource_name"),
                ops=tuple(ops),
            )
        )
        r.done()
    validate_only = body.get_bool("validate_only", default=False)
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[AlterConfigsResponse]:
        return c.incremental_alter_configs(image, resources, validate_only=validate_only)

    response: AlterConfigsResponse = await _server(request).submit("alter_configs", run)
    return _json(
        {
            "resources": [
                {
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "error": _error_or_none(r.error),
                }
                for r in response.resources
            ]
        }
    )


async def _describe_configs(request: web.Request) -> web.Response:
    topic = request.query.get("topic")
    if not topic:
        raise InvalidRequestError("query parameter topic is required")
    unknown = sorted(set(request.query) - {"topic", "key"})
    if unknown:
        raise InvalidRequestError(f"unknown query parameter {unknown[0]!r}")
    keys = request.query.getall("key", [])
    result = describe_configs(_server(request).replayer.image, topic, keys or None)
    if result.error is not None:
        raise result.error
    return _json(
        {
            "resource_type": result.resource_type,
            "resource_name": result.resource_name,
            "entries": [
                {
                    "name": e.name,
                    "value": e.value,
                    "source": e.source,
                    "is_default": e.is_default,
                    "type": e.type,
                    "read_only": e.read_only,
                    "is_sensitive": e.is_sensitive,
                }
                for e in result.entries
            ],
        }
    )


async def _alter_partition(request: web.Request) -> web.Response:
    body = await _read_body(request)
    new_isr = body.get_int_list("new_isr")
    assert new_isr is not None
    req = AlterPartitionRequest(
        broker_id=body.get_int("broker_id", minimum=0, maximum=2**31 - 1),
        broker_epoch=body.get_int("broker_epoch"),
        topic_id=body.req_str("topic_id"),
        partition=body.get_int("partition", minimum=0, maximum=2**31 - 1),
        leader_epoch=body.get_int("leader_epoch", minimum=0, maximum=2**31 - 1),
        partition_epoch=body.get_int("partition_epoch", minimum=0, maximum=2**31 - 1),
        new_isr=new_isr,
    )
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[AlterPartitionResponse]:
        return c.alter_partition(image, req)

    response: AlterPartitionResponse = await _server(request).submit("alter_partition", run)
    return _json(
        {
            "topic_id": response.topic_id,
            "partition": response.partition,
            "leader": response.leader,
            "leader_epoch": response.leader_epoch,
            "partition_epoch": response.partition_epoch,
            "isr": list(response.isr),
        }
    )


async def _allocate_producer_ids(request: web.Request) -> web.Response:
    body = await _read_body(request)
    broker_id = body.get_int("broker_id", minimum=0, maximum=2**31 - 1)
    broker_epoch = body.get_int("broker_epoch")
    body.done()

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        return c.allocate_producer_ids(image, broker_id, broker_epoch)

    response: AllocateProducerIdsResponse = await _server(request).submit("producer_ids", run)
    return _json(
        {
            "producer_id_start": response.producer_id_start,
            "producer_id_len": response.producer_id_len,
        }
    )


async def _describe_quorum(request: web.Request) -> web.Response:
    if request.query:
        raise InvalidRequestError(f"unknown query parameter {sorted(request.query)[0]!r}")
    return _json(_server(request).quorum_json())


async def _fetch_metadata(request: web.Request) -> web.Response:
    unknown = sorted(set(request.query) - {"offset", "max_wait_ms", "records_max"})
    if unknown:
        raise InvalidRequestError(f"unknown query parameter {unknown[0]!r}")
    offset = _query_int(request, "offset", 0, 0, 2**63 - 1)
    max_wait_ms = _query_int(request, "max_wait_ms", 0, 0, METADATA_WAIT_MS_MAX)
    records_max = _query_int(request, "records_max", 500, 1, METADATA_RECORDS_MAX)
    server = _server(request)
    if not server._started:
        raise server.not_controller()
    result = await fetch_metadata(
        server.engine,
        server.replayer.signal,
        offset=offset,
        records_max=records_max,
        max_wait_ms=max_wait_ms,
        clock_ms=server._clock_ms,
    )
    return _json(result.to_json())


# ---------------------------------------------------------------------------------------
# The process


def create_engine(config: NodeConfig) -> QuorumEngine:
    """The configured quorum engine (imported here only: pysyncobj stays optional)."""
    voters = dict(config.voters)
    if config.quorum_engine == "native":
        module = importlib.import_module("raftka.raft.quorum.native")
        engine = module.NativeQuorumEngine(
            config.node_id, voters, config.metadata_log_dir, config.quorum
        )
    else:
        module = importlib.import_module("raftka.raft.quorum.pysyncobj_engine")
        kwargs: dict[str, Any] = {"port_offset": config.pysyncobj_port_offset}
        if config.pysyncobj_password is not None:
            kwargs["password"] = config.pysyncobj_password
        engine = module.PysyncobjQuorumEngine(
            config.node_id, voters, config.metadata_log_dir, **kwargs
        )
    return cast(QuorumEngine, engine)


async def serve_until_signalled(server: ControllerServer) -> None:
    """Run until SIGTERM or SIGINT, then stop cleanly (the leader resigns first)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    log.info("shutting down on a signal")
    await server.stop()


def run_controller(config: NodeConfig) -> int:
    """The ``raftka controller`` process; returns its exit code."""
    configure_logging(config.log_level)
    config.metadata_log_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(config)
    server = ControllerServer(config, engine)
    try:
        asyncio.run(serve_until_signalled(server))
    except OSError as e:
        log.error("controller failed", extra={"fields": {"error": str(e)}})
        return 1
    return 0
