"""The coordinators: Kafka's classic consumer-group protocol over __consumer_offsets,
and the transaction coordinator over __transaction_state.

``group`` is one group's state machine (join, sync, heartbeat, leave, static members),
``group_manager`` the coordinator of many groups (ownership and loading of
__consumer_offsets partitions, offset commits and fetches, expiry, admin requests) and
``group_records`` the formats of the records it appends. ``transaction_state`` is one
``transactional.id``'s metadata and state machine, ``transaction_coordinator`` the
coordinator of many ids (InitProducerId, AddPartitionsToTxn, EndTxn, markers, timeouts,
loading) and ``transaction_records`` the format of ``__transaction_state``; the broker shells
around them are ``service`` and ``transaction_service``. The cores are pure: time comes in
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
    OffsetDeleteResponse,
    OffsetFetchResponse,
    Output,
)
from raftka.broker.coordinator.group_records import OffsetsRecord
from raftka.broker.coordinator.transaction_coordinator import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AppendTransactionRecord,
    EndTxnResponse,
    InitProducerIdResponse,
    SendTxnMarkers,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TxnDecision,
    TxnOutput,
    TxnReply,
)
from raftka.broker.coordinator.transaction_records import TransactionLogRecord
from raftka.broker.coordinator.transaction_state import (
    TransactionMetadata,
    TransactionResult,
    TransactionState,
)

__all__ = [
    "NO_GENERATION",
    "NO_OFFSET",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnResponse",
    "AppendRecords",
    "AppendTransactionRecord",
    "CommitReply",
    "Decision",
    "DeleteGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "EndTxnResponse",
    "FencedInstanceIdError",
    "Group",
    "GroupConfig",
    "GroupCoordinatorConfig",
    "GroupManager",
    "GroupMaxSizeReachedError",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "InitProducerIdResponse",
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
    "OffsetDeleteResponse",
    "OffsetFetchResponse",
    "OffsetMetadataTooLargeError",
    "OffsetsRecord",
    "Output",
    "SendTxnMarkers",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "SyncReply",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionLogRecord",
    "TransactionMetadata",
    "TransactionResult",
    "TransactionState",
    "TxnDecision",
    "TxnOutput",
    "TxnReply",
]
