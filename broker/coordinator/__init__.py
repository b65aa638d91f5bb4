"""The group coordinator: Kafka's classic consumer-group protocol over __consumer_offsets.

``group`` is one group's state machine (join, sync, heartbeat, leave, static members),
``group_manager`` the coordinator of many groups (ownership and loading of
__consumer_offsets partitions, offset commits and fetches, expiry, admin requests) and
``records`` the formats of the records it appends. All three are pure: time comes in
as ``now_ms``, randomness from an injected ``random.Random``, and appends and delayed
responses leave as outputs for the broker to carry out.
"""

from __future__ import annotations

from raftka.broker.coordinator.group import (
    NO_GENERATION,
    AppendRecords,
    Decision,
    FencedInstanceIdError,
    Group,
    GroupConfig,
    GroupMaxSizeReachedError,
    GroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinReply,
    LeaveGroupResponse,
    LeaveMember,
    LeaveMemberResult,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    SyncGroupRequest,
    SyncGroupResponse,
    SyncReply,
)
from raftka.broker.coordinator.group_manager import (
    NO_OFFSET,
    CommitReply,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    GroupCoordinatorConfig,
    GroupManager,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchResponse,
    Output,
)
from raftka.broker.coordinator.group_records import OffsetsRecord

__all__ = [
    "NO_GENERATION",
    "NO_OFFSET",
    "AppendRecords",
    "CommitReply",
    "Decision",
    "DeleteGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FencedInstanceIdError",
    "Group",
    "GroupConfig",
    "GroupCoordinatorConfig",
    "GroupManager",
    "GroupMaxSizeReachedError",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinReply",
    "LeaveGroupResponse",
    "LeaveMember",
    "LeaveMemberResult",
    "ListGroupsResponse",
    "ListedGroup",
    "NonEmptyGroupError",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchResponse",
    "OffsetMetadataTooLargeError",
    "OffsetsRecord",
    "Output",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "SyncReply",
]
