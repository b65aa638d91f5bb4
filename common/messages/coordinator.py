"""The group coordinator's API messages (docs/protocol.md, "Group coordinator").

Kafka's classic group protocol as JSON: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups. Byte fields (member metadata, assignments) are ``bytes`` here and base64
text on the wire (msgspec's JSON encoding of bytes, as the API has always sent them).
Errors travel inside the answers at the level Kafka puts them (:class:`ErrorObject`).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from raftka.common.messages import Int32, Message, PartitionId, TopicName
from raftka.common.messages.broker import ErrorObject, Int64, KafkaString

__all__ = [
    "GROUP_BYTES_MAX",
    "ITEMS_MAX",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteGroupsResult",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupProtocol",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupMember",
    "LeaveGroupMemberResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitPartition",
    "OffsetCommitPartitionResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTopic",
    "OffsetCommitTopicResponse",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchPartition",
    "OffsetFetchPartitionResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetFetchTopic",
    "OffsetFetchTopicResponse",
    "SyncGroupAssignment",
    "SyncGroupRequest",
    "SyncGroupResponse",
]

#: Items of one list in a request (groups, topics, partitions, members, protocols).
ITEMS_MAX: Final = 100_000
#: One member's metadata or assignment (a consumer's is a small JSON document; this
#: leaves room for subscriptions to thousands of long topic names).
GROUP_BYTES_MAX: Final = 16 * 1024 * 1024

GroupId = KafkaString
MemberId = KafkaString
GroupBytes = Annotated[bytes, msgspec.Meta(max_length=GROUP_BYTES_MAX)]


# ---------------------------------------------------------------------------------------
# FindCoordinator


class FindCoordinatorRequest(Message, frozen=True, kw_only=True):
    key: GroupId
    #: 0 (group) is the only kind; transactions would add 1.
    key_type: Int32 = 0


class FindCoordinatorResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1


# ---------------------------------------------------------------------------------------
# JoinGroup


class JoinGroupProtocol(Message, frozen=True, kw_only=True):
    name: KafkaString
    metadata: GroupBytes = b""


class JoinGroupRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    member_id: MemberId = ""
    group_instance_id: KafkaString | None = None
    session_timeout_ms: Int32
    #: None: the session timeout (JoinGroup v0 had no rebalance timeout).
    rebalance_timeout_ms: Int32 | None = None
    protocol_type: KafkaString
    protocols: Annotated[tuple[JoinGroupProtocol, ...], msgspec.Meta(max_length=ITEMS_MAX)]
    client_id: KafkaString = "consumer"


class JoinGroupMember(Message, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes = b""


class JoinGroupResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    skip_assignment: bool = False
    #: Every member's metadata; only the leader gets it.
    members: tuple[JoinGroupMember, ...] = ()


# ---------------------------------------------------------------------------------------
# SyncGroup


class SyncGroupAssignment(Message, frozen=True, kw_only=True):
    member_id: MemberId
    assignment: GroupBytes = b""


class SyncGroupRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    generation_id: Int32
    member_id: MemberId
    group_instance_id: KafkaString | None = None
    protocol_type: KafkaString | None = None
    protocol_name: KafkaString | None = None
    #: Only the leader sends assignments.
    assignments: Annotated[tuple[SyncGroupAssignment, ...], msgspec.Meta(max_length=ITEMS_MAX)] = ()


class SyncGroupResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# ---------------------------------------------------------------------------------------
# Heartbeat


class HeartbeatRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    generation_id: Int32
    member_id: MemberId
    group_instance_id: KafkaString | None = None


class HeartbeatResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None


# ---------------------------------------------------------------------------------------
# LeaveGroup


class LeaveGroupMember(Message, frozen=True, kw_only=True):
    member_id: MemberId = ""
    group_instance_id: KafkaString | None = None


class LeaveGroupRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    members: Annotated[tuple[LeaveGroupMember, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class LeaveGroupMemberResponse(Message, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    error: ErrorObject | None = None


class LeaveGroupResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    members: tuple[LeaveGroupMemberResponse, ...] = ()


# ---------------------------------------------------------------------------------------
# OffsetCommit


class OffsetCommitPartition(Message, frozen=True, kw_only=True):
    partition: PartitionId
    offset: Int64
    leader_epoch: Int32 | None = None
    metadata: str = ""


class OffsetCommitTopic(Message, frozen=True, kw_only=True):
    name: TopicName
    partitions: Annotated[tuple[OffsetCommitPartition, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class OffsetCommitRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    #: -1 with an empty member id: a commit from outside the group (manual assignment,
    #: admin resets), accepted while the group has no members.
    generation_id: Int32 = -1
    member_id: MemberId = ""
    group_instance_id: KafkaString | None = None
    #: OffsetCommit v2-v4's retention; null or -1: the broker's.
    retention_time_ms: Int64 | None = None
    topics: Annotated[tuple[OffsetCommitTopic, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class OffsetCommitPartitionResponse(Message, frozen=True, kw_only=True):
    partition: int
    error: ErrorObject | None = None


class OffsetCommitTopicResponse(Message, frozen=True, kw_only=True):
    name: str
    partitions: tuple[OffsetCommitPartitionResponse, ...] = ()


class OffsetCommitResponse(Message, frozen=True, kw_only=True):
    topics: tuple[OffsetCommitTopicResponse, ...] = ()


# ---------------------------------------------------------------------------------------
# OffsetFetch


class OffsetFetchPartition(Message, frozen=True, kw_only=True):
    partition: PartitionId


class OffsetFetchTopic(Message, frozen=True, kw_only=True):
    name: TopicName
    partitions: Annotated[tuple[OffsetFetchPartition, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class OffsetFetchRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    #: None: every committed offset of the group.
    topics: Annotated[tuple[OffsetFetchTopic, ...], msgspec.Meta(max_length=ITEMS_MAX)] | None = (
        None
    )
    #: KIP-447: answer UNSTABLE_OFFSET_COMMIT for a partition with transactional
    #: offsets whose transaction has not ended, instead of its last committed offset.
    require_stable: bool = False


class OffsetFetchPartitionResponse(Message, frozen=True, kw_only=True):
    partition: int
    #: -1: nothing committed.
    offset: int = -1
    leader_epoch: int | None = None
    metadata: str = ""
    error: ErrorObject | None = None


class OffsetFetchTopicResponse(Message, frozen=True, kw_only=True):
    name: str
    partitions: tuple[OffsetFetchPartitionResponse, ...] = ()


class OffsetFetchResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    topics: tuple[OffsetFetchTopicResponse, ...] = ()


# ---------------------------------------------------------------------------------------
# ListGroups, DescribeGroups, DeleteGroups


class ListGroupsRequest(Message, frozen=True, kw_only=True):
    #: Kafka's state names; null or empty: every state.
    states_filter: Annotated[tuple[KafkaString, ...], msgspec.Meta(max_length=16)] | None = None


class ListedGroup(Message, frozen=True, kw_only=True):
    group_id: str
    protocol_type: str = ""
    state: str = ""


class ListGroupsResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    groups: tuple[ListedGroup, ...] = ()


class DescribeGroupsRequest(Message, frozen=True, kw_only=True):
    groups: Annotated[tuple[GroupId, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class DescribedMember(Message, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


class DescribedGroup(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    group_id: str
    state: str = ""
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()


class DescribeGroupsResponse(Message, frozen=True, kw_only=True):
    groups: tuple[DescribedGroup, ...] = ()


# ---------------------------------------------------------------------------------------
# OffsetDelete (the topics and partitions are shaped as OffsetFetch's and OffsetCommit's
# answer's: a partition index each, an error each)


class OffsetDeleteRequest(Message, frozen=True, kw_only=True):
    group_id: GroupId
    topics: Annotated[tuple[OffsetFetchTopic, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class OffsetDeleteResponse(Message, frozen=True, kw_only=True):
    #: The group's error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...).
    error: ErrorObject | None = None
    topics: tuple[OffsetCommitTopicResponse, ...] = ()


# ---------------------------------------------------------------------------------------
# DeleteGroups


class DeleteGroupsRequest(Message, frozen=True, kw_only=True):
    groups: Annotated[tuple[GroupId, ...], msgspec.Meta(max_length=ITEMS_MAX)]


class DeleteGroupsResult(Message, frozen=True, kw_only=True):
    group_id: str
    error: ErrorObject | None = None


class DeleteGroupsResponse(Message, frozen=True, kw_only=True):
    results: tuple[DeleteGroupsResult, ...] = ()
