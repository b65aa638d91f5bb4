"""raftka.raft.quorum: KRaft's Raft (KIP-595, pre-vote per KIP-996) as a pure core.

``QuorumCore`` takes time and messages in and hands actions out; a driver (the aiohttp
transport and the segment-log adapter) carries them out. See ``core`` for the theory of
operation, ``actions`` for the driver contract and ``log`` for the log protocol.
"""

from raftka.common.structs import EpochEndOffset
from raftka.raft.quorum.actions import (
    Action,
    BecameLeader,
    Flush,
    HighWatermarkChanged,
    LeaderChanged,
    PersistQuorumState,
    ResignedLeadership,
    Send,
    SnapshotInstalled,
)
from raftka.raft.quorum.core import NotLeader, Proposed, QuorumCore
from raftka.raft.quorum.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    message_from_dict,
)
from raftka.raft.quorum.native import NativeQuorumEngine
from raftka.raft.quorum.quorum_state_file import (
    QuorumStateCorruptError,
    load_quorum_state,
    write_quorum_state,
)
from raftka.raft.quorum.raft_log import InMemoryRaftLog, RaftLog
from raftka.raft.quorum.segment_raft_log import SegmentRaftLog
from raftka.raft.quorum.snapshots import SnapshotCorruptError, SnapshotStore
from raftka.raft.quorum.state import QuorumRole, QuorumState
from raftka.raft.quorum.transport import RaftTransport
from raftka.server_common.quorum_config import QuorumConfig

__all__ = [
    "Action",
    "BecameLeader",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "Entry",
    "EpochEndOffset",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "Flush",
    "HighWatermarkChanged",
    "InMemoryRaftLog",
    "LeaderChanged",
    "Message",
    "NativeQuorumEngine",
    "NotLeader",
    "PersistQuorumState",
    "Proposed",
    "QuorumConfig",
    "QuorumCore",
    "QuorumRole",
    "QuorumState",
    "QuorumStateCorruptError",
    "RaftLog",
    "RaftTransport",
    "ResignedLeadership",
    "SegmentRaftLog",
    "Send",
    "SnapshotCorruptError",
    "SnapshotId",
    "SnapshotInstalled",
    "SnapshotStore",
    "VoteRequest",
    "VoteResponse",
    "load_quorum_state",
    "message_from_dict",
    "write_quorum_state",
]
