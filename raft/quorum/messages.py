"""The quorum's messages (KIP-595 with KIP-996 pre-vote), as small frozen dataclasses.

Every message names its sender (``sender_id``) and carries an epoch: on a request it is
the epoch the sender is in (for a pre-vote, the epoch the sender would run in); on a
response it is the responder's current epoch, together with the leader it knows, so
the receiver can catch up. Errors travel as Kafka's error names
(``FENCED_LEADER_EPOCH``), never as exceptions.

On the wire each message is its typed counterpart in ``raftka.common.messages.raft``
(``VoteRequest`` <-> ``VoteRequestData``, same field names), JSON tagged by ``type``:
:func:`encode_message` / :func:`decode_message` are the transport's two calls, and
decoding validates every field (INVALID_REQUEST naming it). ``to_dict`` /
:func:`message_from_dict` give the same shape as plain Python values (payload bytes as
base64), for tools and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import msgspec

from raftka.common.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    SnapshotNotFoundError,
    UnknownLeaderEpochError,
)
from raftka.common.messages import decode, decode_value, encode
from raftka.common.messages import raft as wire
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


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot covers every entry below ``end_offset``; ``epoch`` is the epoch of
    the last entry it covers (KIP-630's OffsetAndEpoch)."""

    end_offset: int
    epoch: int


class Message:
    """Base of every quorum message."""

    __slots__ = ()
    sender_id: int
    epoch: int

    def to_dict(self) -> dict[str, Any]:
        """The wire form as plain values: ``{"type": ..., field: value, ...}``."""
        result: dict[str, Any] = msgspec.to_builtins(to_wire(self))
        return result


@dataclass(frozen=True, slots=True)
class VoteRequest(Message):
    """Ask for a vote (or, with ``pre_vote``, whether a vote would be granted).

    ``epoch`` is the candidate's epoch; for a pre-vote it is the epoch the sender would
    run in (its current epoch + 1), and the receiver does not move to it.
    """

    sender_id: int
    epoch: int
    last_epoch: int
    last_epoch_end_offset: int
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class VoteResponse(Message):
    """The answer to a VoteRequest. ``candidate_epoch`` echoes the request's epoch so a
    candidate counts only answers to its current round."""

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

    sender_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse(Message):
    sender_id: int
    epoch: int
    leader_id: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest(Message):
    """A leader steps down; voters listed first in ``preferred_successors`` should run
    first (the leader lists them by how far their logs reach)."""

    sender_id: int
    epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse(Message):
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

    sender_id: int
    epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse(Message):
    """One chunk of a snapshot: ``data`` starts at ``position``; ``size`` is the total."""

    sender_id: int
    epoch: int
    leader_id: int | None
    snapshot_id: SnapshotId
    position: int
    size: int = 0
    data: bytes = b""
    error: str | None = None


_WIRE_TYPES: dict[type[Message], type[wire.RaftRequest]] = {
    VoteRequest: wire.VoteRequestData,
    VoteResponse: wire.VoteResponseData,
    BeginQuorumEpochRequest: wire.BeginQuorumEpochRequestData,
    BeginQuorumEpochResponse: wire.BeginQuorumEpochResponseData,
    EndQuorumEpochRequest: wire.EndQuorumEpochRequestData,
    EndQuorumEpochResponse: wire.EndQuorumEpochResponseData,
    FetchRequest: wire.FetchRequestData,
    FetchResponse: wire.FetchResponseData,
    FetchSnapshotRequest: wire.FetchSnapshotRequestData,
    FetchSnapshotResponse: wire.FetchSnapshotResponseData,
}
_CORE_TYPES: dict[type[wire.RaftRequest], type[Message]] = {w: c for c, w in _WIRE_TYPES.items()}
# The wire tag of each message is its core class's name.
assert all(w.__struct_config__.tag == c.__name__ for c, w in _WIRE_TYPES.items())


def _value_to_wire(value: object) -> object:
    if isinstance(value, Entry):
        return wire.EntryData(
            offset=value.offset, epoch=value.epoch, payload=value.payload, control=value.control
        )
    if isinstance(value, EpochEndOffset):
        return wire.EpochEndOffsetData(epoch=value.epoch, end_offset=value.end_offset)
    if isinstance(value, SnapshotId):
        return wire.SnapshotIdData(epoch=value.epoch, end_offset=value.end_offset)
    if isinstance(value, tuple):
        return tuple(_value_to_wire(v) for v in value)
    return value


def _value_from_wire(value: object) -> object:
    if isinstance(value, wire.EntryData):
        return Entry(value.offset, value.epoch, value.payload, value.control)
    if isinstance(value, wire.EpochEndOffsetData):
        return EpochEndOffset(value.epoch, value.end_offset)
    if isinstance(value, wire.SnapshotIdData):
        return SnapshotId(value.end_offset, value.epoch)
    if isinstance(value, tuple):
        return tuple(_value_from_wire(v) for v in value)
    return value


def to_wire(message: Message) -> wire.RaftRequest:
    """The wire message of a core message (same fields, nested values converted)."""
    kwargs: dict[str, Any] = {
        f.name: _value_to_wire(getattr(message, f.name))
        for f in fields(message)  # type: ignore[arg-type]
    }
    return _WIRE_TYPES[type(message)](**kwargs)


def from_wire(data: wire.RaftRequest) -> Message:
    """The core message of a decoded wire message."""
    kwargs: dict[str, Any] = {
        name: _value_from_wire(getattr(data, name)) for name in data.__struct_fields__
    }
    return _CORE_TYPES[type(data)](**kwargs)


def encode_message(message: Message) -> bytes:
    """A core message as the JSON body of ``POST /v1/raft/message``."""
    return encode(to_wire(message))


def decode_message(body: bytes) -> Message:
    """The core message in a request body; INVALID_REQUEST naming the field if it is
    not a valid one."""
    data: wire.RaftRequest = decode(body, wire.RaftMessageData)  # type: ignore[arg-type]
    return from_wire(data)


def message_from_dict(d: dict[str, Any]) -> Message:
    """Rebuild a message from ``Message.to_dict`` output (validated as on the wire)."""
    data: wire.RaftRequest = decode_value(d, wire.RaftMessageData)  # type: ignore[arg-type]
    return from_wire(data)
