"""``NativeQuorumEngine``: raftka's own KRaft-style Raft, driven over disk and sockets.

Theory of operation. One asyncio task (the driver) owns the pure
:class:`~raftka.raft.quorum.core.QuorumCore` and its :class:`SegmentRaftLog`; nothing
else touches either. Inputs reach the driver through queues and a wake-up event:
messages from peers (the aiohttp handler in ``transport`` queues them), and
``append`` calls (queued, then handed to the core together in one ``propose`` per
driver turn: concurrent appends share one batch, and the core's
``controller.quorum.append.linger.ms`` lets several turns share one fsync). Each turn
the driver ticks the core, feeds it the queued messages and proposals, and carries out
the actions in order as ``actions`` prescribes:

- ``PersistQuorumState``: the quorum-state file is written and fsynced at once, so it
  is durable before any later ``Send`` of the batch is even queued;
- ``Send``: queued on the transport (delivery is fire and forget);
- ``Flush``: coalesced to one fsync at the end of the batch, then ``on_flushed``;
- ``HighWatermarkChanged``: committed entries are handed to the ``CommitListener`` in
  order, exactly once, control entries skipped; ``append`` futures whose last offset
  is now below the high watermark resolve;
- ``LeaderChanged`` / ``BecameLeader`` / ``ResignedLeadership`` /
  ``SnapshotInstalled``: the listener hears of it; proposals of a lost leadership fail
  with NotLeaderError, which for them means *outcome unknown* (a later leader may still
  commit them, exactly as after a timeout).

Between turns the driver sleeps until an input arrives, the linger deadline of its own
proposals, or the next tick (every ``tick_interval_ms``, 5 ms by default: the core has
no "next deadline" query, and its timers fire on the first tick after they are due).

I/O is synchronous on the event loop (fsync of the log and of the quorum-state file,
segment reads): the metadata log is small and its writes are batched, and keeping the
log on one task keeps it single-threaded as ``SegmentRaftLog`` requires. A slow disk
therefore delays this process's other coroutines by the fsync time.

Restart: the newest snapshot is loaded into the listener, and entries after it are
delivered as they become known committed. A restarted node does not know the high
watermark until it hears from a leader (or, as the leader, commits its epoch's first
entry), so nothing is replayed before that: only what is known committed is ever
applied.

Linearizable reads (``read_barrier``) rely on the leader's fetch-timeout resignation
for freshness: a leader that lost a majority stops serving barriers within
``controller.quorum.fetch.timeout.ms``, as KRaft's active controller does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiohttp import web

from raftka.common.errors import KafkaTimeoutError, MessageTooLargeError, OffsetOutOfRangeError
from raftka.common.time import monotonic_ms, wait_event
from raftka.raft.quorum import actions as act
from raftka.raft.quorum.core import NotLeader, QuorumCore
from raftka.raft.quorum.engine import (
    CommitListener,
    CommittedRecord,
    NotLeaderError,
    QuorumInfo,
    VoterState,
)
from raftka.raft.quorum.messages import FetchRequest, Message
from raftka.raft.quorum.quorum_state_file import load_quorum_state, write_quorum_state
from raftka.raft.quorum.segment_raft_log import SegmentRaftLog
from raftka.raft.quorum.state import QuorumRole, QuorumState
from raftka.raft.quorum.transport import RaftTransport
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp
from raftka.server_common.quorum_config import QuorumConfig
from raftka.server_common.supervision import process_fatal

logger = logging.getLogger("raftka.raft.quorum")

# Messages queued for the driver; beyond it new ones are dropped (the core retries).
INBOX_MAX: Final = 4096
# Records queued by append() and not yet proposed.
PENDING_RECORDS_MAX: Final = 100_000
# Largest payload (one controller command's records) accepted: a 10,000-partition topic
# with RF 3 encodes to ~3 MiB, and it must fit one metadata-log batch (8 MiB) with room.
PAYLOAD_BYTES_MAX: Final = 4 * 1024 * 1024
# Committed records handed to the listener per call.
COMMIT_BATCH_MAX: Final = 500
TICK_INTERVAL_MS_DEFAULT: Final = 5


@dataclass(slots=True)
class _Pending:
    payloads: Sequence[bytes]
    future: asyncio.Future[int]


@dataclass(slots=True)
class _InFlight:
    epoch: int
    last_offset: int
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Progress:
    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


class NativeQuorumEngine:
    """One member of the metadata quorum (a voter, or an observer when ``node_id`` is
    not in ``voters``). ``voters`` and ``observers`` map node ids to (host, port) of
    their aiohttp servers, where :meth:`routes` must be mounted. Constructing it does no
    I/O; :meth:`start` opens the files. Use from one event loop only."""

    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, tuple[str, int]],
        data_dir: Path,
        config: QuorumConfig,
        *,
        observers: Mapping[int, tuple[str, int]] | None = None,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] | None = None,
        tick_interval_ms: int = TICK_INTERVAL_MS_DEFAULT,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        assert voters, "a quorum needs voters"
        assert tick_interval_ms > 0
        self._node_id = node_id
        self._voters = dict(voters)
        self._observers = dict(observers or {})
        self._data_dir = Path(data_dir)
        self._config = config
        self._rng = rng or random.Random()
        self._clock = clock_ms or monotonic_ms
        self._tick_interval_ms = tick_interval_ms
        peers = {**self._observers, **self._voters}
        peers.pop(node_id, None)
        self._transport = RaftTransport(
            node_id=node_id,
            peers=peers,
            allowed_senders=set(self._voters) | set(self._observers),
            request_timeout_ms=config.request_timeout_ms,
            deliver=self._on_message,
            http=http,
        )
        self._core: QuorumCore | None = None
        self._log: SegmentRaftLog | None = None
        self._listener: CommitListener | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._inbox: collections.deque[Message] = collections.deque()
        self._pending: list[_Pending] = []
        self._pending_records = 0
        self._inflight: collections.deque[_InFlight] = collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._applied = 0  # next offset the listener has not seen
        self._hw = 0
        self._epoch_start_offset = -1
        self._progress: dict[int, _Progress] = {}
        self._linger_wake_ms: int | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self.dropped_messages = 0

    # ------------------------------------------------------------------ queries

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def leader_id(self) -> int | None:
        return self._core.leader_id if self._core is not None else None

    @property
    def epoch(self) -> int:
        return self._core.epoch if self._core is not None else 0

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def is_leader(self) -> bool:
        return self._core is not None and self._core.role is QuorumRole.LEADER

    @property
    def role(self) -> QuorumRole | None:
        return self._core.role if self._core is not None else None

    @property
    def applied_offset(self) -> int:
        """Every committed offset below this has been handed to the listener."""
        return self._applied

    @property
    def log_end_offset(self) -> int:
        return self._log.end_offset if self._log is not None else 0

    @property
    def log_start_offset(self) -> int:
        return self._log.start_offset if self._log is not None else 0

    def routes(self) -> Sequence[web.RouteDef]:
        return self._transport.routes()

    # ------------------------------------------------------------------ lifecycle

    async def start(self, listener: CommitListener) -> None:
        assert self._core is None and not self._stopped, "start() once"
        self._listener = listener
        log = SegmentRaftLog.open(self._data_dir)
        self._log = log
        try:
            empty = log.end_offset == log.start_offset and log.latest_snapshot_id is None
            state = load_quorum_state(self._data_dir, log_empty=empty)
            if state.epoch < log.last_epoch:
                # The log was appended in a later epoch whose state never reached the
                # file (the core appends before the driver persists). The node cannot
                # have voted there (a vote leaves only once persisted), so it resumes
                # in that epoch with no vote and no known leader.
                state = QuorumState(log.last_epoch)
                write_quorum_state(self._data_dir, state, self._voters)
            snapshot_id = log.latest_snapshot_id
            if snapshot_id is not None:
                data = log.read_snapshot_data(snapshot_id)
                listener.handle_snapshot(snapshot_id.end_offset, snapshot_id.epoch, data)
                self._applied = snapshot_id.end_offset
            else:
                assert log.start_offset == 0, "a log start above 0 needs a snapshot"
            now = self._clock()
            self._core = QuorumCore(
                node_id=self._node_id,
                voter_ids=self._voters.keys(),
                log=log,
                state=state,
                config=self._config,
                rng=self._rng,
                now_ms=now,
            )
        except BaseException:
            log.close()
            raise
        logger.info(
            "node %s starting: epoch %s, role %s, leader %s, log [%s, %s), snapshot %s",
            self._node_id,
            state.epoch,
            self._core.role.value,
            state.leader_id,
            log.start_offset,
            log.end_offset,
            snapshot_id,
        )
        listener.handle_leader_change(self._core.leader_id, self._core.epoch)
        await self._transport.start()
        self._task = asyncio.create_task(self._run(), name=f"raft-driver-{self._node_id}")

    async def stop(self) -> None:
        """Resign if leading (EndQuorumEpoch, sent within the request timeout), flush,
        close files and the client session. Pending appends fail with NotLeaderError
        (outcome unknown)."""
        if self._stopped:
            return
        core = self._core
        running = self._task is not None and not self._task.done()
        if core is not None and running and core.role is QuorumRole.LEADER:
            logger.info("node %s resigning leadership of epoch %s", self._node_id, core.epoch)
            self._execute(core.resign(self._clock()))
            deadline = self._clock() + self._config.request_timeout_ms
            await self._wait_for(self._transport.idle, deadline, "EndQuorumEpoch to be sent")
        await self._shutdown()

    async def abort(self) -> None:
        """Stop at once without resigning, as a crashed process would: the driver stops,
        sockets close; files are closed without any further write (a process crash
        keeps the page cache, so this loses nothing a crash would keep). For tests."""
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._transport.close()
        self._fail_all(NotLeaderError(f"node {self._node_id} stopped", None))
        if self._log is not None:
            self._log.close()
        self._notify()
        logger.info("node %s stopped", self._node_id)

    # ------------------------------------------------------------------ appends

    async def append(self, payloads: Sequence[bytes], *, timeout_ms: int) -> int:
        if not payloads:
            raise ValueError("append needs at least one payload")
        for payload in payloads:
            if len(payload) > PAYLOAD_BYTES_MAX:
                raise MessageTooLargeError(
                    f"a metadata record of {len(payload)} bytes exceeds {PAYLOAD_BYTES_MAX}"
                )
        self._check_running()
        core = self._core
        assert core is not None
        if core.role is not QuorumRole.LEADER:
            raise self._not_leader()
        if self._pending_records + len(payloads) > PENDING_RECORDS_MAX:
            raise KafkaTimeoutError(
                f"{self._pending_records} records already wait to be appended; nothing was queued"
            )
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(tuple(payloads), future))
        self._pending_records += len(payloads)
        self._wake.set()
        try:
            return await asyncio.wait_for(future, timeout_ms / 1000)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"append of {len(payloads)} records not committed within {timeout_ms} ms; "
                "the outcome is unknown (they may still commit)"
            ) from None

    async def read_barrier(self, *, timeout_ms: int) -> int:
        deadline = self._clock() + timeout_ms
        while True:
            self._check_running()
            core = self._core
            assert core is not None
            if core.role is not QuorumRole.LEADER:
                raise self._not_leader()
            index = core.read_index()
            if index is not None and self._applied >= index:
                return index
            if self._clock() >= deadline:
                raise KafkaTimeoutError(f"no read barrier within {timeout_ms} ms")
            await self._wait_change(deadline)

    def read_committed(self, from_offset: int, records_max: int) -> Sequence[CommittedRecord]:
        log = self._log
        assert log is not None, "start() first"
        if from_offset < log.start_offset:
            raise OffsetOutOfRangeError(
                f"offset {from_offset} is below the metadata log start {log.start_offset}: "
                "load the snapshot first"
            )
        end = min(self._hw, log.end_offset)
        out: list[CommittedRecord] = []
        position = from_offset
        while position < end and len(out) < records_max:
            entries = log.read(position, min(COMMIT_BATCH_MAX, end - position))
            for entry in entries:
                if not entry.control:
                    out.append(CommittedRecord(entry.offset, entry.epoch, entry.payload))
                    if len(out) >= records_max:
                        break
            position = entries[-1].offset + 1
        return out

    def latest_snapshot(self) -> tuple[int, int, bytes] | None:
        log = self._log
        if log is None or log.latest_snapshot_id is None:
            return None
        snapshot_id = log.latest_snapshot_id
        return snapshot_id.end_offset, snapshot_id.epoch, log.read_snapshot_data(snapshot_id)

    def save_snapshot(self, end_offset: int, data: bytes) -> None:
        log = self._log
        assert log is not None, "start() first"
        assert end_offset <= self._hw, ("snapshot above the high watermark", end_offset, self._hw)
        assert end_offset <= self._applied, ("snapshot above what was applied", end_offset)
        latest = log.latest_snapshot_id
        if end_offset <= log.start_offset or (
            latest is not None and end_offset <= latest.end_offset
        ):
            return  # nothing new to cover
        # Safe to call between driver turns: everything runs on one event loop, and
        # the driver never awaits while it holds the log in an intermediate state.
        snapshot_id = log.create_snapshot(end_offset, data)
        logger.info(
            "node %s saved snapshot %s; log now starts at %s",
            self._node_id,
            snapshot_id,
            log.start_offset,
        )

    def describe(self) -> QuorumInfo:
        core, log = self._core, self._log
        assert core is not None and log is not None, "start() first"
        now = self._clock()
        leading = core.role is QuorumRole.LEADER

        def state(node_id: int) -> VoterState:
            if node_id == self._node_id:
                return VoterState(node_id, log.end_offset, now, now)
            progress = self._progress.get(node_id) if leading else None
            if progress is None:
                return VoterState(node_id, -1, -1, -1)
            return VoterState(
                node_id, progress.log_end_offset, progress.last_fetch_ms, progress.last_caught_up_ms
            )

        observer_ids = sorted(n for n in self._progress if n not in self._voters) if leading else []
        return QuorumInfo(
            node_id=self._node_id,
            leader_id=core.leader_id,
            epoch=core.epoch,
            high_watermark=self._hw,
            log_end_offset=log.end_offset,
            log_start_offset=log.start_offset,
            role=core.role.value,
            voters=tuple(state(v) for v in sorted(self._voters)),
            observers=tuple(state(o) for o in observer_ids),
        )

    # ------------------------------------------------------------------ driver

    def _on_message(self, message: Message) -> None:
        if self._core is None or self._stopped:
            return  # not started (or stopped): the sender retries
        if len(self._inbox) >= INBOX_MAX:
            self.dropped_messages += 1
            logger.debug("node %s inbox full: dropping %s", self._node_id, type(message).__name__)
            return
        self._inbox.append(message)
        self._wake.set()

    async def _run(self) -> None:
        core = self._core
        assert core is not None
        try:
            # _stopped is checked as well as cancellation: a loop must never outlive its
            # engine's stop().
            while not self._stopped:
                now = self._clock()
                self._execute(core.tick(now))
                while self._inbox:
                    message = self._inbox.popleft()
                    now = self._clock()
                    if isinstance(message, FetchRequest):
                        self._track_fetch(message, now)
                    self._execute(core.handle(message, now))
                if self._pending:
                    self._propose(self._clock())
                if self._inbox or self._pending:
                    await asyncio.sleep(0)  # let the sockets run between busy turns
                    continue
                self._wake.clear()
                now = self._clock()
                wake_ms = now + self._tick_interval_ms
                if self._linger_wake_ms is not None:
                    if self._linger_wake_ms <= now:
                        self._linger_wake_ms = None
                    else:
                        wake_ms = min(wake_ms, self._linger_wake_ms)
                await wait_event(self._wake, max(0, wake_ms - now) / 1000)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            # A failed assertion or a storage error: stop rather than limp on.
            logger.exception("node %s quorum driver failed; the engine is stopped", self._node_id)
            self._failure = e
            self._fail_all(KafkaTimeoutError(f"quorum engine failed: {e!r}; outcome unknown"))
            self._notify()
            # (supervise) a controller without its Raft driver must not go on serving
            process_fatal(f"raft-driver-{self._node_id} died: {type(e).__name__}: {e}")
            raise

    def _propose(self, now: int) -> None:
        core = self._core
        assert core is not None
        batch = [p for p in self._pending if not p.future.done()]
        self._pending = []
        self._pending_records = 0
        if not batch:
            return
        payloads = [payload for p in batch for payload in p.payloads]
        result, actions = core.propose(payloads, now)
        if isinstance(result, NotLeader):
            error = self._not_leader()
            for p in batch:
                p.future.set_exception(error)
        else:
            offset = result.first_offset
            for p in batch:
                offset += len(p.payloads)
                self._inflight.append(_InFlight(result.epoch, offset - 1, p.future))
            assert offset == result.end_offset, (offset, result)
            if self._config.append_linger_ms > 0 and self._linger_wake_ms is None:
                self._linger_wake_ms = now + self._config.append_linger_ms
        self._execute(actions)

    def _track_fetch(self, request: FetchRequest, now: int) -> None:
        """The leader's view of each replica, for describe()."""
        core, log = self._core, self._log
        assert core is not None and log is not None
        if core.role is not QuorumRole.LEADER or request.epoch != core.epoch:
            return
        progress = self._progress.get(request.sender_id)
        if progress is None:
            if len(self._progress) >= len(self._voters) + len(self._observers):
                return  # an unknown sender; the transport refuses those anyway
            progress = self._progress[request.sender_id] = _Progress()
        progress.log_end_offset = request.fetch_offset
        progress.last_fetch_ms = now
        if request.fetch_offset >= log.end_offset:
            progress.last_caught_up_ms = now

    def _execute(self, actions: list[act.Action]) -> None:
        core, log = self._core, self._log
        assert core is not None and log is not None
        flush = False
        for action in actions:
            if isinstance(action, act.Send):
                self._transport.send(action.destination, action.message)
            elif isinstance(action, act.Flush):
                flush = True
            elif isinstance(action, act.PersistQuorumState):
                write_quorum_state(
                    self._data_dir,
                    QuorumState(action.epoch, action.voted_id, action.leader_id),
                    self._voters,
                )
            elif isinstance(action, act.HighWatermarkChanged):
                self._on_high_watermark(action.high_watermark)
            elif isinstance(action, act.LeaderChanged):
                self._on_leader_changed(action)
            elif isinstance(action, act.BecameLeader):
                logger.info(
                    "node %s became leader of epoch %s (epoch starts at offset %s)",
                    self._node_id,
                    action.epoch,
                    action.epoch_start_offset,
                )
                self._epoch_start_offset = action.epoch_start_offset
                self._progress = {}
                self._notify()
            elif isinstance(action, act.ResignedLeadership):
                logger.info("node %s no longer leads epoch %s", self._node_id, action.epoch)
                self._epoch_start_offset = -1
                self._progress = {}
                self._fail_inflight()
                self._notify()
            elif isinstance(action, act.SnapshotInstalled):
                self._on_snapshot_installed(action)
            else:
                raise AssertionError(f"unknown action {action!r}")
        if flush:
            offset = log.flush()
            self._execute(core.on_flushed(offset, self._clock()))

    def _on_leader_changed(self, action: act.LeaderChanged) -> None:
        logger.info("node %s: epoch %s, leader %s", self._node_id, action.epoch, action.leader_id)
        listener = self._listener
        assert listener is not None
        listener.handle_leader_change(action.leader_id, action.epoch)
        if action.leader_id != self._node_id:
            error = self._not_leader()
            for p in self._pending:
                if not p.future.done():
                    p.future.set_exception(error)
            self._pending = []
            self._pending_records = 0
        self._notify()

    def _on_high_watermark(self, high_watermark: int) -> None:
        log, listener = self._log, self._listener
        assert log is not None and listener is not None
        self._hw = high_watermark
        target = min(high_watermark, log.end_offset)
        while self._applied < target:
            assert self._applied >= log.start_offset, (self._applied, log.start_offset)
            entries = log.read(self._applied, min(COMMIT_BATCH_MAX, target - self._applied))
            records = [
                CommittedRecord(e.offset, e.epoch, e.payload) for e in entries if not e.control
            ]
            self._applied = entries[-1].offset + 1
            if records:
                listener.handle_commit(records)
        while self._inflight and self._inflight[0].last_offset < high_watermark:
            done = self._inflight.popleft()
            if not done.future.done():
                done.future.set_result(done.last_offset)
        self._notify()

    def _on_snapshot_installed(self, action: act.SnapshotInstalled) -> None:
        log, listener = self._log, self._listener
        assert log is not None and listener is not None
        snapshot_id = action.snapshot_id
        logger.info("node %s installed snapshot %s from the leader", self._node_id, snapshot_id)
        data = log.read_snapshot_data(snapshot_id)
        listener.handle_snapshot(snapshot_id.end_offset, snapshot_id.epoch, data)
        self._applied = snapshot_id.end_offset
        self._notify()

    # ------------------------------------------------------------------ helpers

    def _not_leader(self) -> NotLeaderError:
        leader = self._core.leader_id if self._core is not None else None
        return NotLeaderError(
            f"node {self._node_id} is not the quorum leader (leader: {leader})", leader
        )

    def _check_running(self) -> None:
        if self._failure is not None:
            raise KafkaTimeoutError(f"quorum engine failed: {self._failure!r}")
        if self._core is None or self._stopped:
            raise NotLeaderError(f"node {self._node_id} is not running", None)

    def _fail_inflight(self) -> None:
        error = NotLeaderError(
            f"node {self._node_id} lost leadership; the outcome of the pending append is "
            "unknown (a later leader may still commit it)",
            self._core.leader_id if self._core is not None else None,
        )
        while self._inflight:
            f = self._inflight.popleft().future
            if not f.done():
                f.set_exception(error)

    def _fail_all(self, error: BaseException) -> None:
        for p in self._pending:
            if not p.future.done():
                p.future.set_exception(error)
        self._pending = []
        self._pending_records = 0
        while self._inflight:
            f = self._inflight.popleft().future
            if not f.done():
                f.set_exception(error)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _wait_change(self, deadline_ms: int) -> None:
        """Wait for the next state change (or the deadline)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        remaining = max(0, deadline_ms - self._clock())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, remaining / 1000)

    async def _wait_for(self, predicate: Callable[[], bool], deadline_ms: int, what: str) -> bool:
        """Poll ``predicate`` every tick until it holds or the deadline passes."""
        while not predicate():
            if self._clock() >= deadline_ms:
                logger.debug("node %s gave up waiting for %s", self._node_id, what)
                return False
            await asyncio.sleep(self._tick_interval_ms / 1000)
        return True
