"""The interface the rest of raftka sees of a metadata quorum, whatever engine runs it.

Two engines implement it: raftka's own KRaft-style Raft (``native``, the default: the
pure :class:`~raftka.raft.quorum.core.QuorumCore` driven over the segment log and an
aiohttp transport) and pysyncobj (``pysyncobj``, for users who ask for it; its measured
limits are in docs/operations.md). The controller codes against this module only.

Theory of operation: the log holds opaque payloads (the controller's encoded metadata
records). ``append`` hands payloads to the leader and returns once they are committed
(the high watermark passed them) with the offset of the last one. Every node, leader or
not, delivers committed payloads to its :class:`CommitListener` in log order, exactly
once per process lifetime, starting from its latest snapshot: the same replay runs on
every controller. Snapshots are the listener's state at an offset, as opaque bytes:
the engine asks nothing about their contents.

Errors: ``append`` on a node that is not the leader raises NotControllerError carrying
the leader's id (if known) in its message and in ``leader_id``; a timeout raises
KafkaTimeoutError, and then the outcome is unknown (the payloads may still commit): a
caller must treat it as such, never as "failed".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from raftka.common.errors import NotControllerError


@dataclass(frozen=True, slots=True)
class CommittedRecord:
    """One committed payload and where it sits in the log."""

    offset: int
    epoch: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class VoterState:
    node_id: int
    log_end_offset: int  # as last reported to the leader (-1 if unknown)
    last_fetch_ms: int  # leader's clock; -1 if never
    last_caught_up_ms: int  # leader's clock; -1 if never


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """What kafka-metadata-quorum's describe shows, from this node's point of view."""

    node_id: int
    leader_id: int | None
    epoch: int
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    role: str
    voters: tuple[VoterState, ...]
    observers: tuple[VoterState, ...]


class NotLeaderError(NotControllerError):
    """NOT_CONTROLLER with the leader this node knows of (None while none is known)."""

    def __init__(self, message: str, leader_id: int | None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class CommitListener(Protocol):
    """The state machine a quorum feeds (the controller's metadata replay)."""

    def handle_commit(self, records: Sequence[CommittedRecord]) -> None:
        """Committed records, in log order, never twice, never with a gap."""

    def handle_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """Replace all state with a snapshot covering every offset below end_offset."""

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """Leadership moved (also called with None while an election runs)."""


class QuorumEngine(Protocol):
    """One node of the metadata quorum."""

    @property
    def node_id(self) -> int: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def epoch(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    async def start(self, listener: CommitListener) -> None:
        """Open the log, load the latest snapshot into the listener, replay committed
        records after it, and join the quorum."""

    async def stop(self) -> None:
        """Leave cleanly: a leader resigns first (EndQuorumEpoch) so another takes over
        without waiting for a timeout; the log is flushed and closed."""

    async def append(self, payloads: Sequence[bytes], *, timeout_ms: int) -> int:
        """Replicate payloads as consecutive records; return the offset of the last
        once committed. Raises NotLeaderError or KafkaTimeoutError (outcome unknown)."""

    async def read_barrier(self, *, timeout_ms: int) -> int:
        """For linearizable reads: on the leader, wait until a record of its own epoch is
        committed and this node's listener has seen everything up to it; return that
        high watermark. Raises NotLeaderError elsewhere."""

    def read_committed(self, from_offset: int, records_max: int) -> Sequence[CommittedRecord]:
        """Committed records from ``from_offset`` (for metadata observers); raises
        OffsetOutOfRangeError below the log start (the caller sends a snapshot)."""

    def latest_snapshot(self) -> tuple[int, int, bytes] | None:
        """(end_offset, epoch, data) of the newest snapshot this node holds."""

    def save_snapshot(self, end_offset: int, data: bytes) -> None:
        """Store the listener's state as of ``end_offset`` (<= high watermark) and let
        the engine drop log entries below it once it is durable."""

    def describe(self) -> QuorumInfo: ...

    def routes(self) -> Sequence[web.RouteDef]:
        """aiohttp routes the engine needs on the node's server (its peer protocol), to
        be added before the server starts; empty for an engine with its own port."""
        ...
