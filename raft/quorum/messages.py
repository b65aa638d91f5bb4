"""The quorum's messages (KIP-595 with KIP-996 pre-vote), as small frozen dataclasses.

Every message names its sender (``sender_id``) and carries an epoch: on a request it is
the epoch the sender is in (for a pre-vote, the epoch the sender would run in); on a
response it is the responder's current epoch, together with the leader it knows, so
the receiver can catch up. Errors travel as Kafka's error names
(``FENCED_LEADER_EPOCH``), never as exceptions.

``to_dict``/``message_from_dict`` give a JSON-ready shape (payload bytes as base64) so
the transport can send them with orjson; the ``type`` key names the class.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from raftka.common.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    SnapshotNotFoundError,
    UnknownLeaderEpochError,
)
from raftka.common.structs import EpochEndOffset

FENCED_LEADER_EPOCH = FencedLeaderEpochError.name
NOT_LEADER_OR_FOLLOWER = NotLeaderOrFollowerError.name
UNKNOWN_LEADER_EPOCH = UnknownLeaderEpochError.name
SNAPSHOT_NOT_FOUND = SnapshotNotFoundError.name


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: its offset, the epoch of the leader that wrote it, opaque bytes.

    ``control`` marks the leader's own LeaderChange record (its epoch-start no-op),
    which the state machine above skips.
    """

    offset: int
    epoch: int
    payload: bytes
    control: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "epoch": self.epoch,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "control": self.control,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        return cls(
            int(d["offset"]), int(d["epoch"]), base64.b64decode(d["payload"]), bool(d["control"])
        )


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot covers every entry below ``end_offset``; ``epoch`` is the epoch of
    the last entry it covers (KIP-630's OffsetAndEpoch)."""

    end_offset: int
    epoch: int


class Message:
    """Base of every quorum message (for typing and the ``type`` registry)."""

    __slots__ = ()
    sender_id: int
    epoch: int
    type_name: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type_name}
        for f in fields(self):  # type: ignore[arg-type]
            name = f.name
            value = getattr(self, name)
            if name == "entries":
                value = [e.to_dict() for e in value]
            elif isinstance(value, EpochEndOffset | SnapshotId):
                value = {"epoch": value.epoch, "end_offset": value.end_offset}
            elif isinstance(value, bytes):
                value = base64.b64encode(value).decode("ascii")
            elif isinstance(value, tuple):
                value = list(value)
            d[name] = value
        return d


@dataclass(frozen=True, slots=True)
class VoteRequest(Message):
    """Ask for a vote (or, with ``pre_vote``, whether a vote would be granted).

    ``epoch`` is the candidate's epoch; for a pre-vote it is the epoch the sender would
    run in (its current epoch + 1), and the receiver does not move to it.
    """

    type_name: ClassVar[str] = "VoteRequest"
    sender_id: int
    epoch: int
    last_epoch: int
    last_epoch_end_offset: int
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class VoteResponse(Message):
    """The answer to a VoteRequest. ``candidate_epoch`` echoes the request's epoch so a
    candidate counts only answers to its current round."""

    type_name: ClassVar[str] = "VoteResponse"
    sender_id: int
    epoch: int
    leader_id: int | None
    vote_granted: bool
    pre_vote: bool
    candidate_epoch: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest(Message):
    """A new leader announces its epoch to the voters."""

    type_name: ClassVar[str] = "BeginQuorumEpochRequest"
    sender_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse(Message):
    type_name: ClassVar[str] = "BeginQuorumEpochResponse"
    sender_id: int
    epoch: int
    leader_id: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest(Message):
    """A leader steps down; voters listed first in ``preferred_successors`` should run
    first (the leader lists them by how far their logs reach)."""

    type_name: ClassVar[str] = "EndQuorumEpochRequest"
    sender_id: int
    epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse(Message):
    type_name: ClassVar[str] = "EndQuorumEpochResponse"
    sender_id: int
    epoch: int
    leader_id: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class FetchRequest(Message):
    """A follower or observer asks the leader for entries from ``fetch_offset`` on.

    ``last_fetched_epoch`` is the epoch of the entry just below ``fetch_offset`` (0 for
    an empty log); the leader checks it against its own log to detect divergence.
    """

    type_name: ClassVar[str] = "FetchRequest"
    sender_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse(Message):
    """The leader's answer: entries, its high watermark, or where the follower diverges.

    ``fetch_offset``/``last_fetched_epoch`` echo the request so the follower acts only
    on an answer to the position it is still at (a late duplicate is ignored).
    """

    type_name: ClassVar[str] = "FetchResponse"
    sender_id: int
    epoch: int
    leader_id: int | None
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int
    entries: tuple[Entry, ...] = ()
    diverging_epoch: EpochEndOffset | None = None
    error: str | None = None
    snapshot_id: SnapshotId | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest(Message):
    """A replica that fell below the leader's log start fetches its snapshot in chunks
    (KIP-630), from byte ``position``."""

    type_name: ClassVar[str] = "FetchSnapshotRequest"
    sender_id: int
    epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse(Message):
    """One chunk of a snapshot: ``data`` starts at ``position``; ``size`` is the total."""

    type_name: ClassVar[str] = "FetchSnapshotResponse"
    sender_id: int
    epoch: int
    leader_id: int | None
    snapshot_id: SnapshotId
    position: int
    size: int = 0
    data: bytes = b""
    error: str | None = None


_TYPES: dict[str, type[Message]] = {
    cls.type_name: cls
    for cls in (
        VoteRequest,
        VoteResponse,
        BeginQuorumEpochRequest,
        BeginQuorumEpochResponse,
        EndQuorumEpochRequest,
        EndQuorumEpochResponse,
        FetchRequest,
        FetchResponse,
        FetchSnapshotRequest,
        FetchSnapshotResponse,
    )
}


def message_from_dict(d: dict[str, Any]) -> Message:
    """Rebuild a message from ``Message.to_dict`` output (e.g. after orjson)."""
    cls = _TYPES[d["type"]]
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        name = f.name
        if name not in d:
            continue
        value = d[name]
        if name == "entries":
            value = tuple(Entry.from_dict(e) for e in value)
        elif name == "diverging_epoch" and value is not None:
            value = EpochEndOffset(int(value["epoch"]), int(value["end_offset"]))
        elif name == "snapshot_id" and value is not None:
            value = SnapshotId(int(value["end_offset"]), int(value["epoch"]))
        elif name == "data":
            value = base64.b64decode(value)
        elif name == "preferred_successors":
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)
