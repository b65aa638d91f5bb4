"""The metadata quorum's peer messages (KIP-595 Raft with KIP-996 pre-vote) on the wire.

Theory of operation
-------------------
Controllers exchange one-way messages, each one ``POST /v1/raft/message`` whose body is
one of the classes below as JSON, tagged by its ``type`` key (``"VoteRequest"``, ...):
msgspec's tagged union :data:`RaftMessageData` decodes any of them in one pass, checking
every field's type and bound, or raises ``INVALID_REQUEST`` naming the field. Payload
and snapshot bytes travel as standard base64 strings; epochs, offsets and node ids are
non-negative.

These are the wire shapes only. The Raft core (``raftka.raft.quorum``) works on its own
frozen dataclasses (``VoteRequest``, ``FetchResponse``, ``Entry``, ``SnapshotId``, and
``common.structs.EpochEndOffset``); ``raftka.raft.quorum.messages`` converts between
the two, field for field (the names are the same). The JSON is the one the core's
hand-written ``to_dict`` produced before these classes existed, so a node that still
speaks it interoperates: same keys, same nesting (``diverging_epoch`` and
``snapshot_id`` as ``{"epoch", "end_offset"}`` objects, entries as
``{"offset", "epoch", "payload", "control"}``), same base64. Unknown fields are
ignored, as everywhere in ``raftka.common.messages``.
"""

from __future__ import annotations

from typing import Annotated, Final

from msgspec import Meta

from raftka.common.messages import INT64_MAX, Message, NonNegInt32, NonNegInt64

__all__ = [
    "BeginQuorumEpochRequestData",
    "BeginQuorumEpochResponseData",
    "EndQuorumEpochRequestData",
    "EndQuorumEpochResponseData",
    "EntryData",
    "EpochEndOffsetData",
    "FetchRequestData",
    "FetchResponseData",
    "FetchSnapshotRequestData",
    "FetchSnapshotResponseData",
    "RaftMessageData",
    "RaftRequest",
    "SnapshotIdData",
    "VoteRequestData",
    "VoteResponseData",
]

#: Bound on the entries of one FetchResponse and the voters named in one
#: EndQuorumEpoch (the body itself is bounded by the transport).
ITEMS_MAX: Final = 100_000

NodeId = NonNegInt32
Epoch = NonNegInt32
Offset = NonNegInt64
ErrorName = Annotated[str, Meta(max_length=64)]


class EntryData(Message, frozen=True, kw_only=True):
    """One log entry; ``control`` marks the leader's epoch-start record."""

    offset: Offset
    epoch: Epoch
    payload: bytes
    control: bool = False


class EpochEndOffsetData(Message, frozen=True, kw_only=True):
    """Where a leader epoch ends in the log (exclusive)."""

    epoch: Epoch
    end_offset: Offset


class SnapshotIdData(Message, frozen=True, kw_only=True):
    """A snapshot: it covers every entry below ``end_offset``; ``epoch`` is its last
    entry's."""

    epoch: Epoch
    end_offset: Offset


class RaftRequest(Message, frozen=True, kw_only=True, tag_field="type"):
    """Base of every peer message: who sent it and in which epoch."""

    sender_id: NodeId
    epoch: Epoch


class VoteRequestData(RaftRequest, frozen=True, kw_only=True, tag="VoteRequest"):
    last_epoch: Epoch
    last_epoch_end_offset: Offset
    pre_vote: bool


class VoteResponseData(RaftRequest, frozen=True, kw_only=True, tag="VoteResponse"):
    leader_id: NodeId | None
    vote_granted: bool
    pre_vote: bool
    candidate_epoch: Epoch
    error: ErrorName | None = None


class BeginQuorumEpochRequestData(
    RaftRequest, frozen=True, kw_only=True, tag="BeginQuorumEpochRequest"
):
    pass


class BeginQuorumEpochResponseData(
    RaftRequest, frozen=True, kw_only=True, tag="BeginQuorumEpochResponse"
):
    leader_id: NodeId | None
    error: ErrorName | None = None


class EndQuorumEpochRequestData(
    RaftRequest, frozen=True, kw_only=True, tag="EndQuorumEpochRequest"
):
    preferred_successors: Annotated[tuple[NodeId, ...], Meta(max_length=ITEMS_MAX)]


class EndQuorumEpochResponseData(
    RaftRequest, frozen=True, kw_only=True, tag="EndQuorumEpochResponse"
):
    leader_id: NodeId | None
    error: ErrorName | None = None


class FetchRequestData(RaftRequest, frozen=True, kw_only=True, tag="FetchRequest"):
    fetch_offset: Offset
    last_fetched_epoch: Epoch


class FetchResponseData(RaftRequest, frozen=True, kw_only=True, tag="FetchResponse"):
    leader_id: NodeId | None
    fetch_offset: Offset
    last_fetched_epoch: Epoch
    high_watermark: Offset
    entries: Annotated[tuple[EntryData, ...], Meta(max_length=ITEMS_MAX)] = ()
    diverging_epoch: EpochEndOffsetData | None = None
    error: ErrorName | None = None
    snapshot_id: SnapshotIdData | None = None


class FetchSnapshotRequestData(RaftRequest, frozen=True, kw_only=True, tag="FetchSnapshotRequest"):
    snapshot_id: SnapshotIdData
    position: Offset


class FetchSnapshotResponseData(
    RaftRequest, frozen=True, kw_only=True, tag="FetchSnapshotResponse"
):
    leader_id: NodeId | None
    snapshot_id: SnapshotIdData
    position: Offset
    size: Annotated[int, Meta(ge=0, le=INT64_MAX)] = 0
    data: bytes = b""
    error: ErrorName | None = None


#: Any peer message, told apart by its ``type`` key.
RaftMessageData = (
    VoteRequestData
    | VoteResponseData
    | BeginQuorumEpochRequestData
    | BeginQuorumEpochResponseData
    | EndQuorumEpochRequestData
    | EndQuorumEpochResponseData
    | FetchRequestData
    | FetchResponseData
    | FetchSnapshotRequestData
    | FetchSnapshotResponseData
)
