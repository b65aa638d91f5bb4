"""The metadata quorum over pysyncobj: raftka's second, non-default engine.

Theory of operation: pysyncobj runs its own Raft on its own thread (the "tick thread")
and its own TCP port (the voter's port + ``port_offset``). The replicated state is
:class:`_PayloadLog`, a pysyncobj consumer holding an append-only log of opaque payloads;
its one replicated method, :meth:`_PayloadLog.apply_proposal`, appends a proposal's
payloads at the next offsets. Offsets are indexes in that payload log, not pysyncobj's
raft indexes (pysyncobj's own no-ops and configuration entries take no offset).

Three rules make pysyncobj's weak points survivable (measured facts in
/work/shared/notes/pysyncobj.md; the user-facing account is docs/pysyncobj-engine.md):

- An error from pysyncobj does not mean "not applied" (a LEADER_CHANGED write was
  measured committed everywhere), so every proposal carries a unique id, the log keeps a
  bounded table of applied ids, and ``append`` re-proposes the same id until it gets a
  definite answer or its deadline: a proposal whose first attempt committed is applied
  once and the retry returns the first attempt's offset.
- Every proposal carries the raft term its proposer held. The log keeps the highest term
  it has applied and rejects (deterministically, on every node) a proposal from a lower
  term: a deposed leader's late proposal cannot commit behind its successor's. Each new
  leader proposes an empty "barrier" in its term, and ``read_barrier`` does the same, so
  reads go through the log.
- The replicated method never raises (pysyncobj retries a raising method forever and
  wedges every node): inputs are validated before proposing and again on apply.

pysyncobj calls the replicated method and the proposal callbacks on its tick thread.
State shared with the asyncio loop lives under ``_PayloadLog.lock``; everything that
touches the listener or futures is handed to the loop with ``call_soon_threadsafe``,
which keeps the tick thread's order (commits are delivered before an append resolves).

Durability: the full dump (pysyncobj's log compaction) is written by our serializer as a
checksummed, fsynced file; pysyncobj itself never fsyncs its journal (an mmap) nor the
rename of the dump, so records survive kill -9 but not power loss. Compaction runs only
when raftka saves a snapshot (``save_snapshot``), because a crash while pysyncobj
compacts was measured to lose acknowledged records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from raftka.common.errors import (
    InvalidRequestError,
    KafkaStorageError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from raftka.raft.quorum.engine import (
    CommitListener,
    CommittedRecord,
    NotLeaderError,
    QuorumInfo,
    VoterState,
)

try:
    from pysyncobj import (
        FAIL_REASON,
        SyncObj,
        SyncObjConf,
        SyncObjConsumer,
        replicated,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "quorum.engine = 'pysyncobj' needs the optional extra: pip install 'raftka[pysyncobj]'"
    ) from exc

__all__ = ["PysyncobjQuorumEngine", "PysyncobjTuning", "pysyncobj_address"]

# Bounds (TIGER_STYLE: every table and loop has a named limit).
PROPOSAL_IDS_MAX = 65_536  # applied proposal ids remembered for dedup (FIFO eviction)
PAYLOADS_PER_PROPOSAL_MAX = 10_000
PAYLOAD_BYTES_MAX = 4 << 20  # as the native engine: one 10,000-partition topic fits
PROPOSAL_ATTEMPTS_MAX = 200  # re-proposals of one id within one append's deadline
DELIVERY_BATCH_MAX = 1_000  # records per handle_commit call
COMMANDS_QUEUE_MAX = 10_000  # pysyncobj's commandsQueueSize
STOP_RESIGN_TIMEOUT_MS = 1_000

_DUMP_MAGIC = b"RKPSYNC1"
_DUMP_HEAD = struct.Struct(">IQ")  # crc32 of the rest, header length
_RECORD_HEAD = struct.Struct(">qI")  # epoch, payload length
_BLOB_LEN = struct.Struct(">I")

_ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}  # pysyncobj's getStatus()['state']
_LEADER_STATE = 2


def pysyncobj_address(host: str, port: int, port_offset: int) -> str:
    """The address pysyncobj uses for a voter: its host, its port + ``port_offset``."""
    assert 0 < port + port_offset < 65_536, (port, port_offset)
    return f"{host}:{port + port_offset}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PysyncobjTuning:
    """pysyncobj's timers. Defaults: short elections (failover of ~0.3 s measured with
    0.2-0.4 s), and leader fallback near the election timeout so an isolated leader
    stops calling itself leader soon (pysyncobj's default is 30 s)."""

    append_entries_period_ms: int = 50
    raft_min_timeout_ms: int = 200
    raft_max_timeout_ms: int = 400
    leader_fallback_timeout_ms: int = 600
    connection_timeout_ms: int = 3_500
    connection_retry_time_ms: int = 500
    auto_tick_period_ms: int = 50


@dataclass(frozen=True, slots=True)
class _Proposal:
    proposal_id: str
    term: int
    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class _Applied:
    """What the replicated method returned for a proposal (on the proposer only)."""

    fenced: bool
    last_offset: int  # last payload's offset; for a barrier, the end offset - 1
    max_epoch: int


@dataclass(slots=True)
class _LogState:
    base_offset: int = 0  # offsets below were folded into ``snapshot``
    records: list[tuple[int, bytes]] = field(default_factory=list)  # (epoch, payload)
    max_epoch: int = -1
    applied_ids: OrderedDict[str, int] = field(default_factory=OrderedDict)
    snapshot: tuple[int, int, bytes] | None = None  # (end_offset, epoch, data)
    load_error: str | None = None

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


class _PayloadLog(SyncObjConsumer):  # type: ignore[misc]
    """The replicated state: created before SyncObj, mutated only by apply_proposal (on
    the tick thread), by the dump loader, and by local trimming after a snapshot."""

    def __init__(self, on_applied: Callable[[], None]) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.state = _LogState()
        self._on_applied = on_applied

    @replicated  # type: ignore[untyped-decorator]
    def apply_proposal(self, proposal_id: object, term: object, payloads: object) -> _Applied:
        # Never raise: pysyncobj retries a raising method forever on every node. Every
        # branch is a pure function of the arguments and the state, so all nodes agree.
        try:
            result = self._apply(proposal_id, term, payloads)
        except Exception:
            result = _Applied(fenced=True, last_offset=-1, max_epoch=-1)
        self._on_applied()
        return result

    def _apply(self, proposal_id: object, term: object, payloads: object) -> _Applied:
        with self.lock:
            s = self.state
            valid = (
                isinstance(proposal_id, str)
                and isinstance(term, int)
                and isinstance(payloads, list)
                and len(payloads) <= PAYLOADS_PER_PROPOSAL_MAX
                and all(isinstance(p, bytes) for p in payloads)
            )
            if not valid:
                return _Applied(fenced=True, last_offset=-1, max_epoch=s.max_epoch)
            assert isinstance(proposal_id, str) and isinstance(term, int)
            assert isinstance(payloads, list)
            if not payloads:  # a barrier: fences lower terms, takes no offset
                if term < s.max_epoch:
                    return _Applied(fenced=True, last_offset=-1, max_epoch=s.max_epoch)
                s.max_epoch = term
                return _Applied(fenced=False, last_offset=s.next_offset - 1, max_epoch=term)
            known = s.applied_ids.get(proposal_id)
            if known is not None:  # a retry of a proposal that already committed
                return _Applied(fenced=False, last_offset=known, max_epoch=s.max_epoch)
            if term < s.max_epoch:
                return _Applied(fenced=True, last_offset=-1, max_epoch=s.max_epoch)
            s.max_epoch = term
            s.records.extend((term, p) for p in payloads)
            last = s.next_offset - 1
            s.applied_ids[proposal_id] = last
            if len(s.applied_ids) > PROPOSAL_IDS_MAX:
                s.applied_ids.popitem(last=False)
            return _Applied(fenced=False, last_offset=last, max_epoch=term)

    # -- full dump (pysyncobj's compaction), our own format ------------------------------

    def write_dump(self, file_name: str, raft_data: tuple[Any, Any, Any]) -> None:
        """pysyncobj's ``serializer``: called on the tick thread (no fork: a custom
        serializer disables it), so the state matches the last applied entry exactly."""
        last_entry, prev_entry, cluster = raft_data
        with self.lock:
            s = self.state
            header = {
                "base_offset": s.base_offset,
                "count": len(s.records),
                "max_epoch": s.max_epoch,
                "applied_ids": list(s.applied_ids.items()),
                "snapshot": None if s.snapshot is None else [s.snapshot[0], s.snapshot[1]],
                "entries": [[last_entry[1], last_entry[2]], [prev_entry[1], prev_entry[2]]],
                "cluster": sorted(getattr(node, "id", str(node)) for node in cluster),
            }
            parts = [_blob(bytes(last_entry[0])), _blob(bytes(prev_entry[0]))]
            parts.append(_blob(b"" if s.snapshot is None else s.snapshot[2]))
            for epoch, payload in s.records:
                parts.append(_RECORD_HEAD.pack(epoch, len(payload)))
                parts.append(payload)
        head = json.dumps(header, separators=(",", ":")).encode()
        body = head + b"".join(parts)
        with open(file_name, "wb") as f:
            f.write(_DUMP_MAGIC + _DUMP_HEAD.pack(zlib.crc32(body), len(head)))
            f.write(body)
            f.flush()
            os.fsync(f.fileno())

    def read_dump(self, file_name: str) -> tuple[Any, Any, Any]:
        """pysyncobj's ``deserializer``: restores our state from a dump (ours, or one the
        leader sent) and returns the raft entries pysyncobj stored with it."""
        try:
            data = Path(file_name).read_bytes()
            if data[: len(_DUMP_MAGIC)] != _DUMP_MAGIC:
                raise ValueError("not a raftka pysyncobj dump")
            at = len(_DUMP_MAGIC)
            crc, head_len = _DUMP_HEAD.unpack_from(data, at)
            body = memoryview(data)[at + _DUMP_HEAD.size :]
            if zlib.crc32(body) != crc:
                raise ValueError("checksum mismatch")
            header = json.loads(bytes(body[:head_len]))
            pos = head_len
            blobs: list[bytes] = []
            for _ in range(3):
                (n,) = _BLOB_LEN.unpack_from(body, pos)
                blobs.append(bytes(body[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            records: list[tuple[int, bytes]] = []
            for _ in range(int(header["count"])):
                epoch, n = _RECORD_HEAD.unpack_from(body, pos)
                pos += _RECORD_HEAD.size
                records.append((epoch, bytes(body[pos : pos + n])))
                pos += n
            if pos != len(body):
                raise ValueError("trailing bytes")
        except (OSError, ValueError, KeyError, struct.error) as exc:
            # pysyncobj would log this and go on from a journal that may start after
            # the dump: offsets would shift. Stop instead (the engine refuses to serve).
            with self.lock:
                self.state.load_error = f"{file_name}: {exc}"
            raise
        snap = header["snapshot"]
        state = _LogState(
            base_offset=int(header["base_offset"]),
            records=records,
            max_epoch=int(header["max_epoch"]),
            applied_ids=OrderedDict((str(k), int(v)) for k, v in header["applied_ids"]),
            snapshot=None if snap is None else (int(snap[0]), int(snap[1]), blobs[2]),
        )
        with self.lock:
            self.state = state
        self._on_applied()
        (last_idx, last_term), (prev_idx, prev_term) = header["entries"]
        return (blobs[0], last_idx, last_term), (blobs[1], prev_idx, prev_term), header["cluster"]


def _blob(data: bytes) -> bytes:
    return _BLOB_LEN.pack(len(data)) + data


@dataclass(frozen=True, slots=True)
class _Status:
    """What the tick thread last saw (getStatus()), for the loop thread to read."""

    leader_id: int | None
    term: int
    role: str
    has_quorum: bool


class PysyncobjQuorumEngine:
    """One voter of a pysyncobj metadata quorum, behind raftka's QuorumEngine interface.

    Thread safety: call everything from the asyncio loop that ran :meth:`start`.
    """

    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, tuple[str, int]],
        data_dir: Path,
        *,
        password: str,
        port_offset: int = 1000,
        tuning: PysyncobjTuning = PysyncobjTuning(),
    ) -> None:
        if not password:
            # Without a password pysyncobj unpickles whatever frame arrives on its port.
            raise ValueError("the pysyncobj engine needs quorum.password (peer frames are pickle)")
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not among the voters {sorted(voters)}")
        self._node_id = node_id
        self._addresses = {
            nid: pysyncobj_address(host, port, port_offset) for nid, (host, port) in voters.items()
        }
        self._ids_by_address = {addr: nid for nid, addr in self._addresses.items()}
        assert len(self._ids_by_address) == len(self._addresses), "two voters share an address"
        self._data_dir = data_dir
        self._password = password
        self._tuning = tuning
        self._incarnation = secrets.token_hex(8)  # proposal ids: unique across restarts
        self._proposal_seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: CommitListener | None = None
        self._log: _PayloadLog | None = None
        self._syncobj: Any = None
        self._status = _Status(None, 0, "follower", False)
        self._delivered_end = 0  # every offset below was handed to the listener
        self._delivered_epoch = -1
        self._ready: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiters: list[asyncio.Future[None]] = []  # woken on any status/delivery change
        self._stopped = False

    # -- QuorumEngine properties -----------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def leader_id(self) -> int | None:
        return self._status.leader_id

    @property
    def epoch(self) -> int:
        return self._status.term

    @property
    def high_watermark(self) -> int:
        """The end of the payload log as applied on this node (a follower's may lag the
        leader's commit by a round trip)."""
        return self._state_view()[1]

    @property
    def is_leader(self) -> bool:
        return self._status.leader_id == self._node_id

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, listener: CommitListener) -> None:
        assert self._syncobj is None, "started twice"
        self._loop = asyncio.get_running_loop()
        self._listener = listener
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._ready = self._loop.create_future()
        log = _PayloadLog(self._post_drain)
        self._log = log
        t = self._tuning
        me = self._addresses[self._node_id]
        conf = SyncObjConf(
            password=self._password,
            bindAddress=me,
            journalFile=str(self._data_dir / "pysyncobj.journal"),
            fullDumpFile=str(self._data_dir / "pysyncobj.dump"),
            serializer=log.write_dump,
            deserializer=log.read_dump,
            useFork=False,
            appendEntriesUseBatch=False,
            commandsWaitLeader=False,
            commandsQueueSize=COMMANDS_QUEUE_MAX,
            appendEntriesPeriod=t.append_entries_period_ms / 1000,
            raftMinTimeout=t.raft_min_timeout_ms / 1000,
            raftMaxTimeout=t.raft_max_timeout_ms / 1000,
            leaderFallbackTimeout=t.leader_fallback_timeout_ms / 1000,
            connectionTimeout=t.connection_timeout_ms / 1000,
            connectionRetryTime=t.connection_retry_time_ms / 1000,
            autoTickPeriod=t.auto_tick_period_ms / 1000,
            # Compaction only when raftka saves a snapshot (see the module docstring).
            logCompactionMinEntries=2**62,
            logCompactionMinTime=10 * 365 * 24 * 3600,
            dynamicMembershipChange=False,
        )
        others = [a for nid, a in sorted(self._addresses.items()) if nid != self._node_id]
        syncobj = await self._loop.run_in_executor(
            None, lambda: SyncObj(me, others, conf=conf, consumers=[log])
        )
        self._syncobj = syncobj
        syncobj.addOnTickCallback(self._on_tick)
        await self._loop.run_in_executor(None, syncobj.waitBinded)
        # The first tick with a ready transport loads the dump and applies the journal
        # up to its commit index before it runs the tick callbacks.
        await self._ready
        if log.state.load_error is not None:
            await self._destroy()
            self._raise_if_load_failed()
        self._drain()

    async def stop(self) -> None:
        if self._syncobj is None or self._stopped:
            return
        if self.is_leader:
            await self._resign()
        await self._destroy()

    async def kill(self) -> None:
        """For fault tests: leave without resigning (peers see a silent node)."""
        await self._destroy()

    async def _destroy(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        syncobj = self._syncobj
        assert self._loop is not None
        await self._loop.run_in_executor(None, syncobj.destroy_synchronous)

    async def _resign(self) -> None:
        """pysyncobj's transferLeadership (TimeoutNow) stands in for EndQuorumEpoch."""
        assert self._loop is not None
        done: asyncio.Future[object] = self._loop.create_future()
        self._syncobj.transferLeadership(callback=self._bridge(done))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done, STOP_RESIGN_TIMEOUT_MS / 1000)
            deadline = self._loop.time() + STOP_RESIGN_TIMEOUT_MS / 1000
            while self.is_leader and self._loop.time() < deadline:
                await self._status_change(deadline)

    # -- appends and reads -------------------------------------------------------------

    async def append(self, payloads: Sequence[bytes], *, timeout_ms: int) -> int:
        if not payloads or len(payloads) > PAYLOADS_PER_PROPOSAL_MAX:
            raise InvalidRequestError(f"append takes 1..{PAYLOADS_PER_PROPOSAL_MAX} payloads")
        if any(not isinstance(p, bytes) or len(p) > PAYLOAD_BYTES_MAX for p in payloads):
            raise InvalidRequestError(f"payloads must be bytes of at most {PAYLOAD_BYTES_MAX}")
        applied = await self._propose_checked(tuple(payloads), timeout_ms)
        return applied.last_offset

    async def read_barrier(self, *, timeout_ms: int) -> int:
        """Commit an empty proposal of this leader's term through the log and wait until
        the listener has seen everything before it: a read after this sees every write
        that committed before the call. An isolated leader cannot commit it, so it times
        out instead of answering from stale state."""
        applied = await self._propose_checked((), timeout_ms)
        return applied.last_offset + 1

    async def _propose_checked(self, payloads: tuple[bytes, ...], timeout_ms: int) -> _Applied:
        self._raise_if_load_failed()
        if not self.is_leader:
            raise NotLeaderError(f"node {self._node_id} is not the leader", self.leader_id)
        self._proposal_seq += 1
        proposal = _Proposal(
            proposal_id=f"{self._node_id}:{self._incarnation}:{self._proposal_seq}",
            # The term this node was seen leading in, not pysyncobj's live term: a
            # deposed leader's tick thread may already have adopted its successor's
            # term while the loop still believes it leads, and a proposal stamped with
            # the new term would pass the fence although it was computed on a stale
            # image (measured: a duplicate TopicRecord committed after a SIGSTOP).
            term=self._status.term,
            payloads=payloads,
        )
        applied = await self._submit(proposal, timeout_ms=timeout_ms)
        if applied.fenced:
            raise NotLeaderError(
                f"proposal of epoch {proposal.term} fenced by epoch {applied.max_epoch}",
                self.leader_id,
            )
        return applied

    async def _submit(self, proposal: _Proposal, *, timeout_ms: int) -> _Applied:
        """Propose until a definite answer. The first attempt's NOT_LEADER or
        MISSING_LEADER means it never entered a log; after any other error the outcome
        is unknown, so the same id is proposed again (the log applies it once)."""
        assert self._loop is not None and self._log is not None
        deadline = self._loop.time() + timeout_ms / 1000
        outcome_known_unapplied = True
        for _attempt in range(PROPOSAL_ATTEMPTS_MAX):
            remaining_s = deadline - self._loop.time()
            if remaining_s <= 0:
                break
            done: asyncio.Future[tuple[object, int]] = self._loop.create_future()
            self._log.apply_proposal(
                proposal.proposal_id,
                proposal.term,
                list(proposal.payloads),
                callback=self._bridge(done),
            )
            try:
                result, error = await asyncio.wait_for(done, remaining_s)
            except TimeoutError:
                break
            if error == FAIL_REASON.SUCCESS:
                assert isinstance(result, _Applied)
                await self._until_delivered(result.last_offset + 1, deadline)
                return result
            if outcome_known_unapplied and error in (
                FAIL_REASON.NOT_LEADER,
                FAIL_REASON.MISSING_LEADER,
            ):
                raise NotLeaderError(
                    f"node {self._node_id} lost leadership (pysyncobj error {error})",
                    self.leader_id,
                )
            outcome_known_unapplied = False
            # Give the cluster one heartbeat before proposing the same id again.
            await asyncio.sleep(
                min(self._tuning.append_entries_period_ms / 1000, max(0.0, remaining_s))
            )
        raise KafkaTimeoutError(
            f"proposal {proposal.proposal_id} not confirmed within {timeout_ms} ms "
            "(outcome unknown: it may still commit)"
        )

    def _bridge(self, done: asyncio.Future[Any]) -> Callable[[object, int], None]:
        """A pysyncobj callback (tick thread) that resolves ``done`` on the loop."""
        loop = self._loop
        assert loop is not None

        def settle(result: object, error: int) -> None:
            if not done.done():
                done.set_result((result, error))

        def callback(result: object, error: int) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, result, error)

        return callback

    async def _until_delivered(self, end_offset: int, deadline: float) -> None:
        assert self._loop is not None
        while self._delivered_end < end_offset:
            self._drain()
            if self._delivered_end >= end_offset:
                return
            if self._loop.time() >= deadline:
                raise KafkaTimeoutError(f"committed offset {end_offset - 1} not yet delivered")
            await self._status_change(deadline)

    def read_committed(self, from_offset: int, records_max: int) -> Sequence[CommittedRecord]:
        assert records_max > 0
        log = self._log
        assert log is not None
        with log.lock:
            s = log.state
            if from_offset < s.base_offset or from_offset > s.next_offset:
                raise OffsetOutOfRangeError(
                    f"offset {from_offset} outside [{s.base_offset}, {s.next_offset}]"
                )
            start = from_offset - s.base_offset
            chosen = s.records[start : start + records_max]
        return [
            CommittedRecord(offset=from_offset + i, epoch=epoch, payload=payload)
            for i, (epoch, payload) in enumerate(chosen)
        ]

    def latest_snapshot(self) -> tuple[int, int, bytes] | None:
        log = self._log
        assert log is not None
        with log.lock:
            return log.state.snapshot

    def save_snapshot(self, end_offset: int, data: bytes) -> None:
        """Keep the listener's state in the replicated state (dropping the payloads it
        covers) and ask pysyncobj to compact: the next full dump, fsynced by our
        serializer, holds it, and pysyncobj then shortens its journal."""
        log = self._log
        assert log is not None
        assert end_offset <= self._delivered_end, (end_offset, self._delivered_end)
        with log.lock:
            s = log.state
            if end_offset <= s.base_offset:
                return
            epoch = s.records[end_offset - s.base_offset - 1][0]
            del s.records[: end_offset - s.base_offset]
            s.base_offset = end_offset
            s.snapshot = (end_offset, epoch, bytes(data))
        self._syncobj.forceLogCompaction()

    def describe(self) -> QuorumInfo:
        status = self._status
        start, end = self._state_view()
        voters = tuple(
            VoterState(
                node_id=nid,
                log_end_offset=end if nid == self._node_id else -1,
                last_fetch_ms=-1,
                last_caught_up_ms=-1,
            )
            for nid in sorted(self._addresses)
        )
        return QuorumInfo(
            node_id=self._node_id,
            leader_id=status.leader_id,
            epoch=status.term,
            high_watermark=end,
            log_end_offset=end,
            log_start_offset=start,
            role=status.role,
            voters=voters,
            observers=(),
        )

    def routes(self) -> Sequence[web.RouteDef]:
        return []  # pysyncobj listens on its own port (voter port + port_offset)

    # -- tick thread -> loop -------------------------------------------------------------

    def _on_tick(self) -> None:
        """Runs on pysyncobj's tick thread after every tick."""
        status = self._syncobj.getStatus()
        leader = status.get("leader")
        leader_address = getattr(leader, "id", None) if leader is not None else None
        new = _Status(
            leader_id=self._ids_by_address.get(leader_address) if leader_address else None,
            term=int(status["raft_term"]),
            role=_ROLE_NAMES.get(int(status["state"]), "unknown"),
            has_quorum=bool(status["has_quorum"]),
        )
        loop = self._loop
        assert loop is not None
        if new != self._status or (self._ready is not None and not self._ready.done()):
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_status, new)

    def _on_status(self, new: _Status) -> None:
        old, self._status = self._status, new
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
        if self._stopped:
            return
        self._notify_waiters()
        if (old.leader_id, old.term) != (new.leader_id, new.term) and self._listener:
            self._listener.handle_leader_change(new.leader_id, new.term)
        if new.leader_id == self._node_id and (old.leader_id, old.term) != (
            new.leader_id,
            new.term,
        ):
            # A barrier in the new term fences proposals of older leaders.
            task = asyncio.ensure_future(self._leader_barrier())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _leader_barrier(self) -> None:
        with contextlib.suppress(NotLeaderError, KafkaTimeoutError):
            await self.read_barrier(timeout_ms=self._tuning.leader_fallback_timeout_ms * 4)

    def _post_drain(self) -> None:
        """Called on the tick thread after each apply and after a dump load."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """Hand the listener everything applied since the last call, in order, once."""
        log, listener = self._log, self._listener
        if log is None or listener is None or self._stopped:
            return
        if self._ready is None or not self._ready.done():
            return  # the dump and journal are still loading
        with log.lock:
            s = log.state
            if s.load_error is not None:
                return  # state and pysyncobj's journal may disagree: deliver nothing more
            assert s.base_offset == (0 if s.snapshot is None else s.snapshot[0])
            snapshot = s.snapshot if s.base_offset > self._delivered_end else None
            begin = max(self._delivered_end, s.base_offset)
            records = s.records[begin - s.base_offset :]
            end = s.next_offset
        if snapshot is not None:
            end_offset, epoch, data = snapshot
            assert end_offset == begin, (end_offset, begin)
            listener.handle_snapshot(end_offset, epoch, data)
            self._delivered_end = end_offset
        for at in range(0, len(records), DELIVERY_BATCH_MAX):
            chunk = records[at : at + DELIVERY_BATCH_MAX]
            first = begin + at
            listener.handle_commit(
                [
                    CommittedRecord(offset=first + i, epoch=e, payload=p)
                    for i, (e, p) in enumerate(chunk)
                ]
            )
        if end > self._delivered_end:
            self._delivered_end = end
            self._notify_waiters()

    # -- helpers -----------------------------------------------------------------------

    def _state_view(self) -> tuple[int, int]:
        log = self._log
        if log is None:
            return 0, 0
        with log.lock:
            return log.state.base_offset, log.state.next_offset

    def _raise_if_load_failed(self) -> None:
        log = self._log
        if log is not None and log.state.load_error is not None:
            raise KafkaStorageError(f"pysyncobj dump unreadable: {log.state.load_error}")

    def _notify_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _status_change(self, deadline: float) -> None:
        """Wait until the status or the delivered offset changes, or the deadline."""
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(waiter, max(0.0, deadline - self._loop.time()))
