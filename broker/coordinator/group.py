"""One consumer group's state machine: Kafka's classic join/sync/heartbeat protocol.

(Over 700 lines: one state machine whose transition table, member timers and
invariant checks read together; split by operation, each half would need the other.)

Theory of operation
-------------------
A group moves through five states (Kafka's names)::

    Empty --join--> PreparingRebalance --all rejoined / timeout--> CompletingRebalance
      ^                 ^        |                                      |
      |                 |        +--no member left--> Empty             | leader's SyncGroup
      |                 +--- join / leave / expiry / leader rejoin ---- + persisted
      |                 |                                               v
      |                 +--- join / leave / expiry / leader rejoin --- Stable
    any --> Dead (deleted, or its offsets expired while empty)

* **Join.** A new dynamic member first gets MEMBER_ID_REQUIRED with a member id
  (client id + "-" + a UUID from the injected rng); it is *pending* until it rejoins
  with that id (or its session timeout passes). A join that changes the group moves it
  to PreparingRebalance; the JoinGroup responses are *parked* (Kafka's delayed
  operation) and come out later as :class:`JoinReply` outputs addressed by member id.
* **Completing the join phase.** From Empty the first rebalance waits
  ``group.initial.rebalance.delay.ms``; each member joining during that wait extends
  it by the same delay, never beyond the group's rebalance timeout (Kafka's
  InitialDelayedJoin). Otherwise the phase ends as soon as every known member has
  rejoined and no member is pending, or when the rebalance timeout (the largest of the
  members') passes; members that did not rejoin are then removed. The generation
  grows by one, a protocol every member supports is chosen, the leader (kept if it
  rejoined, else the first member) gets every member's metadata.
* **Sync.** Followers' SyncGroup requests are parked until the leader's arrives. The
  leader's assignment is persisted first (an :class:`AppendRecords` output); only when
  the driver reports that append done (``store_completed``) does the group become
  Stable and release every parked :class:`SyncReply`.
* **Liveness.** A member that sends nothing for ``session.timeout.ms`` is removed at the
  next ``tick``, which starts a rebalance. A member whose JoinGroup or SyncGroup is
  parked is alive (its request is the proof), except a brand-new member, which Kafka
  keeps for at most five minutes while waiting to join.
* **Static members** (KIP-345) carry a ``group.instance.id``. A known instance that
  joins without a member id takes a new member id in place of the old one; the old id
  is fenced (FENCED_INSTANCE_ID). In a Stable group whose protocols did not change this
  needs no rebalance: the group is persisted with the new id and the member gets the
  current generation back.

Everything is pure: time comes in as ``now_ms``, randomness from an injected
``random.Random``, appends go out as outputs and come back through ``store_completed``.
The :class:`~raftka.broker.coordinator.group_manager.GroupManager` owns the groups,
checks coordinator ownership and session timeout bounds, and handles offsets.
"""

from __future__ import annotations

import enum
import json
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, TypeAlias, TypeVar

from kio.schema.consumer_protocol_subscription import v0 as _subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as _subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as _subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as _subscription_v3
from kio.serial import entity_reader

from raftka.broker.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetsRecord,
    group_metadata_record,
)
from raftka.common.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    ProducerFencedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownServerError,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "NO_GENERATION",
    "AppendRecords",
    "Decision",
    "ErrorType",
    "FencedInstanceIdError",
    "Group",
    "GroupConfig",
    "GroupMaxSizeReachedError",
    "GroupOutput",
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
    "Member",
    "NonEmptyGroupError",
    "OffsetMetadataTooLargeError",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "SyncReply",
    "coordinator_error_for_append",
]

#: The generation of a group that has never completed a rebalance, and the generation
#: manual (simple) consumers commit with.
NO_GENERATION: Final = -1
#: How long a brand-new member may wait with a parked JoinGroup (Kafka's
#: GroupCoordinator.NewMemberJoinTimeoutMs): a client that died while waiting must not
#: hold the rebalance forever.
NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 300_000

#: An error answer: the KafkaError subclass, or None for NONE.
ErrorType: TypeAlias = type[KafkaError] | None

T = TypeVar("T")


# Kafka errors that raftka.common.errors does not define yet (names and codes are Kafka's).


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's allowed previous states for each state.
_VALID_PREVIOUS: Final[Mapping[GroupState, frozenset[GroupState]]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's group settings (Kafka's names, defaults and units)."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    #: group.max.size; Kafka's default is Integer.MAX_VALUE, i.e. no limit.
    group_max_size: int | None = None
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS

    def __post_init__(self) -> None:
        assert 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms
        assert self.group_initial_rebalance_delay_ms >= 0
        assert self.group_max_size is None or self.group_max_size >= 1


# -- requests and responses ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    #: (protocol name, member metadata) in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str = "consumer"
    client_host: str = "/127.0.0.1"


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ErrorType
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    #: Every member's metadata for the chosen protocol; only the leader gets it.
    members: tuple[JoinGroupMember, ...] = ()
    #: KIP-814: a static leader that rejoined without a rebalance must not reassign.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    #: member id -> assignment bytes; only the leader sends them.
    assignments: Mapping[str, bytes] = field(default_factory=dict)
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: ErrorType
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorType


@dataclass(frozen=True, slots=True)
class LeaveMember:
    """A member to remove: by member id, or (admin removal of a static member) by
    instance id with an empty member id."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorType


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: ErrorType
    members: tuple[LeaveMemberResult, ...] = ()


# -- outputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinReply:
    """Release the parked JoinGroup of ``member_id`` with this response."""

    group_id: str
    member_id: str
    response: JoinGroupResponse


@dataclass(frozen=True, slots=True)
class SyncReply:
    """Release the parked SyncGroup of ``member_id`` with this response."""

    group_id: str
    member_id: str
    response: SyncGroupResponse


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Append these records to ``__consumer_offsets`` partition ``partition``, then call
    the manager's ``append_completed(append_id=...)`` with the outcome."""

    append_id: int
    group_id: str
    partition: int
    records: tuple[OffsetsRecord, ...]
    #: A TxnOffsetCommit's records go out as a transactional batch of this producer
    #: (so the partition's producer state and last stable offset see the transaction);
    #: -1: a plain batch.
    producer_id: int = -1
    producer_epoch: int = -1
    #: The transaction's id, for the append's KIP-890 verification ("" for none).
    transactional_id: str = ""


GroupOutput: TypeAlias = JoinReply | SyncReply | AppendRecords


@dataclass(frozen=True, slots=True)
class Decision(Generic[T]):
    """The answer to one request: ``response`` when it is known now (None when the
    request is parked; its answer comes later as an output addressed by member id),
    and the outputs the request caused (other members' parked replies, appends)."""

    response: T | None
    outputs: tuple[GroupOutput, ...] = ()


# What KIP-890 verification of a transactional append answers that the producer must
# see as it is (its transaction, not the coordinator, is the problem).
_TXN_REFUSALS: Final = (
    InvalidTxnStateError,
    ProducerFencedError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
)


def coordinator_error_for_append(error: type[KafkaError]) -> type[KafkaError]:
    """What a client is told when the coordinator's append failed (Kafka's mapping): the
    partition moved away -> NOT_COORDINATOR; not enough replicas or a timeout ->
    COORDINATOR_NOT_AVAILABLE (retry here); a transactional append's verification
    refusal (INVALID_TXN_STATE, PRODUCER_FENCED, ...) as it is, as Kafka passes it to a
    TxnOffsetCommit; anything else -> UNKNOWN_SERVER_ERROR."""
    if issubclass(error, NotLeaderOrFollowerError | KafkaStorageError | NotCoordinatorError):
        return NotCoordinatorError
    if issubclass(error, _TXN_REFUSALS):
        return error
    if error.retriable:
        return CoordinatorNotAvailableError
    return UnknownServerError


# -- members ---------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    """A member's state inside the group (mutable: the group owns it)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    #: Joined for the first time in the current rebalance.
    is_new: bool = False

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol}")

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)


@dataclass(frozen=True, slots=True)
class _PendingSyncStore:
    generation_id: int
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class _PendingStaticJoin:
    generation_id: int
    old: Member
    new_member_id: str


_PendingStore: TypeAlias = _PendingSyncStore | _PendingStaticJoin | None


#: ConsumerProtocolSubscription's schema by version.
_SUBSCRIPTIONS: Final = (
    _subscription_v0.ConsumerProtocolSubscription,
    _subscription_v1.ConsumerProtocolSubscription,
    _subscription_v2.ConsumerProtocolSubscription,
    _subscription_v3.ConsumerProtocolSubscription,
)
#: The protocol type of consumer groups, whose member metadata is a subscription.
CONSUMER_PROTOCOL_TYPE: Final = "consumer"


def subscription_topics(metadata: bytes) -> tuple[str, ...] | None:
    """The topics of one consumer's subscription metadata, or None if it does not parse.

    Two encodings reach the coordinator: Kafka's ConsumerProtocolSubscription (an int16
    version, then that version's fields; a newer version is read as the newest known,
    its extra fields being appended, as Kafka's ConsumerProtocol reads it) and raftka's
    own client's JSON (client/consumer/assignors/base.py)."""
    if metadata[:1] == b"{":
        try:
            value = json.loads(metadata)
        except ValueError:
            return None
        topics = value.get("topics") if isinstance(value, dict) else None
        if isinstance(topics, list) and all(isinstance(t, str) for t in topics):
            return tuple(topics)
        return None
    if len(metadata) < 2:
        return None
    version = min(int.from_bytes(metadata[:2], "big", signed=True), len(_SUBSCRIPTIONS) - 1)
    if version < 0:
        return None
    try:
        subscription: Any
        subscription, _ = entity_reader(_SUBSCRIPTIONS[version])(metadata, 2)
    except Exception:  # kio's decoding errors have no common base
        return None
    return tuple(subscription.topics)


class Group:
    """One group's state machine. Methods return decisions; they never do I/O."""

    def __init__(
        self,
        *,
        group_id: str,
        partition: int,
        config: GroupConfig,
        rng: random.Random,
        allocate_append_id: Callable[[], int],
        now_ms: int,
    ) -> None:
        self.group_id = group_id
        self.partition = partition
        self._config = config
        self._rng = rng
        self._allocate_append_id = allocate_append_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        # Rebalances completed here since the group was loaded on this coordinator
        # (the metrics' counter; the generation survives a move, this does not).
        self.rebalances = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        # Insertion order matters: the first member becomes leader when one is needed.
        self.members: dict[str, Member] = {}
        # Member ids handed out with MEMBER_ID_REQUIRED -> the time they lapse.
        self.pending_members: dict[str, int] = {}
        self.static_members: dict[str, str] = {}
        # When the join phase ends (PreparingRebalance only).
        self.join_deadline_ms: int | None = None
        # Not None while in the initial delayed join: how much more it may extend.
        self.initial_delay_remaining_ms: int | None = None
        self.new_member_added = False
        self._pending_stores: dict[int, _PendingStore] = {}

    # -- views ---------------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_pending_stores(self) -> bool:
        return bool(self._pending_stores)

    def subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members of a consumer group subscribe to, from their metadata
        for the chosen protocol (Kafka's GroupMetadata.subscribedTopics); None when not
        known: no protocol chosen yet, not a consumer group, or a subscription that
        does not parse."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.protocol_name:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscription_topics(member.metadata_for(self.protocol_name))
            if member_topics is None:
                return None
            topics.update(member_topics)
        return frozenset(topics)

    def metadata_value(self, assignments: Mapping[str, bytes] | None = None) -> GroupMetadataValue:
        """The group as it is persisted (with ``assignments`` instead of the members'
        current ones, for the store that precedes Stable)."""
        members = tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=(m.metadata_for(self.protocol_name) if self.protocol_name else b""),
                assignment=(
                    m.assignment if assignments is None else assignments.get(m.member_id, b"")
                ),
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type,
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=members,
        )

    # -- loading -------------------------------------------------------------------------

    def restore(self, value: GroupMetadataValue, *, now_ms: int) -> None:
        """Take the state of a replayed group-metadata record (a freshly built group)."""
        assert self.state is GroupState.EMPTY and not self.members
        self.protocol_type = value.protocol_type
        self.generation_id = value.generation
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        self.state_timestamp_ms = (
            value.current_state_timestamp_ms
            if value.current_state_timestamp_ms is not None
            else now_ms
        )
        for stored in value.members:
            assert value.protocol is not None, "a stored member implies a chosen protocol"
            self.members[stored.member_id] = Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                session_timeout_ms=stored.session_timeout_ms,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                protocol_type=value.protocol_type or "",
                protocols=((value.protocol, stored.subscription),),
                # Members get a full session from the moment the new coordinator loads.
                last_heartbeat_ms=now_ms,
                assignment=stored.assignment,
            )
            if stored.group_instance_id is not None:
                self.static_members[stored.group_instance_id] = stored.member_id
        if self.members:
            self.state = GroupState.STABLE
        assert self.leader_id is None or self.leader_id in self.members

    # -- transitions -----------------------------------------------------------------------

    def _transition(self, target: GroupState, now_ms: int) -> None:
        assert self.state in _VALID_PREVIOUS[target], f"{self.state} -> {target}"
        self.state = target
        self.state_timestamp_ms = now_ms

    def mark_dead(self, *, now_ms: int) -> tuple[GroupOutput, ...]:
        """The group is being deleted or unloaded: answer whatever is parked."""
        outputs = self._fail_parked(CoordinatorNotAvailableError)
        self._transition(GroupState.DEAD, now_ms)
        self.pending_members.clear()
        self.join_deadline_ms = None
        self.initial_delay_remaining_ms = None
        return outputs

    def unload(self, *, now_ms: int) -> tuple[GroupOutput, ...]:
        """This broker no longer coordinates the group: parked requests learn
        NOT_COORDINATOR and the group is dropped."""
        outputs = self._fail_parked(NotCoordinatorError)
        self._transition(GroupState.DEAD, now_ms)
        self._pending_stores.clear()
        return outputs

    def _fail_parked(self, error: type[KafkaError]) -> tuple[GroupOutput, ...]:
        outputs: list[GroupOutput] = []
        for m in self.members.values():
            if m.awaiting_join:
                m.awaiting_join = False
                outputs.append(self._join_error(m.member_id, error))
            if m.awaiting_sync:
                m.awaiting_sync = False
                outputs.append(self._sync_error(m.member_id, error))
        return tuple(outputs)

    def _join_error(self, member_id: str, error: type[KafkaError]) -> JoinReply:
        return JoinReply(
            self.group_id, member_id, JoinGroupResponse(error=error, member_id=member_id)
        )

    def _sync_error(self, member_id: str, error: type[KafkaError]) -> SyncReply:
        return SyncReply(self.group_id, member_id, SyncGroupResponse(error=error))

    # -- protocols -----------------------------------------------------------------------

    def _candidate_protocols(self, exclude: str | None = None) -> set[str] | None:
        """Protocols every member (but ``exclude``) supports; None when no such member."""
        sets = [set(m.protocol_names()) for m in self.members.values() if m.member_id != exclude]
        if not sets:
            return None
        return set.intersection(*sets)

    def supports_protocols(
        self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...], member_id: str
    ) -> bool:
        if not protocol_type or not protocols:
            return False
        others = [m for m in self.members.values() if m.member_id != member_id]
        if not others:
            return True  # nobody else to agree with
        if any(m.protocol_type != protocol_type for m in others):
            return False
        candidates = self._candidate_protocols(exclude=member_id)
        assert candidates is not None
        return any(name in candidates for name, _ in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support;
        the most votes wins (ties: the leader's preference order)."""
        candidates = self._candidate_protocols()
        assert candidates, "join admits only members with a common protocol"
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name in m.protocol_names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        assert self.leader_id is not None
        order = self.members[self.leader_id].protocol_names()
        return max(votes, key=lambda name: (votes[name], -order.index(name)))

    # -- join ------------------------------------------------------------------------------

    def is_static_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        if group_instance_id is None:
            return False
        known = self.static_members.get(group_instance_id)
        return known is not None and known != member_id

    def join(self, request: JoinGroupRequest, *, now_ms: int) -> Decision[JoinGroupResponse]:
        """JoinGroup, after the manager checked ownership and session timeout bounds."""
        assert self.state is not GroupState.DEAD
        if not self.supports_protocols(request.protocol_type, request.protocols, request.member_id):
            return Decision(JoinGroupResponse(InconsistentGroupProtocolError, member_id=""))
        if request.member_id == "":
            return self._join_unknown(request, now_ms)
        return self._join_known(request, now_ms)

    def _join_unknown(self, request: JoinGroupRequest, now_ms: int) -> Decision[JoinGroupResponse]:
        instance = request.group_instance_id
        is_known_static = instance is not None and instance in self.static_members
        size_max = self._config.group_max_size
        if (
            not is_known_static
            and size_max is not None
            and len(self.members) + len(self.pending_members) >= size_max
        ):
            return Decision(JoinGroupResponse(GroupMaxSizeReachedError))
        new_id = f"{request.client_id}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"
        assert new_id not in self.members and new_id not in self.pending_members
        if instance is not None:
            if is_known_static:
                return self._replace_static_member(request, new_id, now_ms)
            # A static member skips MEMBER_ID_REQUIRED: its instance id identifies it.
            return self._add_member_and_rebalance(request, new_id, now_ms)
        # Kafka's two-step join (KIP-394): the member id is remembered for one session
        # timeout; the client must come back with it before it counts as a member.
        self.pending_members[new_id] = now_ms + request.session_timeout_ms
        return Decision(JoinGroupResponse(MemberIdRequiredError, member_id=new_id))

    def _join_known(self, request: JoinGroupRequest, now_ms: int) -> Decision[JoinGroupResponse]:
        member_id = request.member_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return self._add_member_and_rebalance(request, member_id, now_ms)
        if self.is_static_fenced(member_id, request.group_instance_id):
            return Decision(JoinGroupResponse(FencedInstanceIdError, member_id=member_id))
        member = self.members.get(member_id)
        if member is None or self.state in (GroupState.EMPTY, GroupState.DEAD):
            return Decision(JoinGroupResponse(UnknownMemberIdError, member_id=member_id))
        member.last_heartbeat_ms = now_ms
        unchanged = (
            member.protocols == request.protocols and member.protocol_type == request.protocol_type
        )
        if self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # The member lost our JoinGroup answer: send the same one again.
            return Decision(self._join_response(member_id))
        if self.state is GroupState.STABLE and unchanged and member_id != self.leader_id:
            # A follower rejoining with the same metadata changes nothing.
            return Decision(self._join_response(member_id))
        return self._update_member_and_rebalance(member, request, now_ms)

    def _join_response(self, member_id: str, *, skip_assignment: bool = False) -> JoinGroupResponse:
        is_leader = member_id == self.leader_id and not skip_assignment
        assert self.protocol_name is not None
        members = (
            tuple(
                JoinGroupMember(
                    m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)
                )
                for m in self.members.values()
            )
            if is_leader
            else ()
        )
        return JoinGroupResponse(
            error=None,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id or "",
            member_id=member_id,
            members=members,
            skip_assignment=skip_assignment,
        )

    def _add_member_and_rebalance(
        self, request: JoinGroupRequest, member_id: str, now_ms: int
    ) -> Decision[JoinGroupResponse]:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            last_heartbeat_ms=now_ms,
            awaiting_join=True,
            is_new=True,
        )
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        if self.initial_delay_remaining_ms is not None:
            self.new_member_added = True
        outputs = self._maybe_prepare_rebalance(now_ms)
        outputs += self._try_complete_join(now_ms)
        return Decision(None, outputs)

    def _update_member_and_rebalance(
        self, member: Member, request: JoinGroupRequest, now_ms: int
    ) -> Decision[JoinGroupResponse]:
        member.protocols = request.protocols
        member.protocol_type = request.protocol_type
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.awaiting_join = True
        outputs = self._maybe_prepare_rebalance(now_ms)
        outputs += self._try_complete_join(now_ms)
        return Decision(None, outputs)

    def _replace_static_member(
        self, request: JoinGroupRequest, new_id: str, now_ms: int
    ) -> Decision[JoinGroupResponse]:
        assert request.group_instance_id is not None
        old_id = self.static_members[request.group_instance_id]
        old = self.members[old_id]
        outputs: list[GroupOutput] = []
        # The old incarnation's parked requests are answered: it is fenced.
        if old.awaiting_join:
            outputs.append(self._join_error(old_id, FencedInstanceIdError))
        if old.awaiting_sync:
            outputs.append(self._sync_error(old_id, FencedInstanceIdError))
        unchanged = old.protocols == request.protocols and (
            old.protocol_type == request.protocol_type
        )
        new = replace(
            old,
            member_id=new_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            last_heartbeat_ms=now_ms,
            awaiting_join=False,
            awaiting_sync=False,
        )
        self._swap_member(old_id, new)
        if self.state is GroupState.STABLE and unchanged:
            # KIP-345: no rebalance; persist the new member id, then answer the join with
            # the current generation. The leader keeps its old assignment (KIP-814).
            # Until the store completes the join is parked like any other: a rebalance
            # starting meanwhile counts the member as joined and answers it.
            new.awaiting_join = True
            append_id = self._allocate_append_id()
            self._pending_stores[append_id] = _PendingStaticJoin(
                generation_id=self.generation_id, old=old, new_member_id=new_id
            )
            outputs.append(self._append(append_id, self.metadata_value()))
            return Decision(None, tuple(outputs))
        new.protocols = request.protocols
        new.protocol_type = request.protocol_type
        new.awaiting_join = True
        outputs.extend(self._maybe_prepare_rebalance(now_ms))
        outputs.extend(self._try_complete_join(now_ms))
        return Decision(None, tuple(outputs))

    def _swap_member(self, old_id: str, new: Member) -> None:
        """Put ``new`` where ``old_id`` was (same position, leadership, instance id)."""
        self.members = {
            (new.member_id if mid == old_id else mid): (new if mid == old_id else m)
            for mid, m in self.members.items()
        }
        if self.leader_id == old_id:
            self.leader_id = new.member_id
        if new.group_instance_id is not None:
            self.static_members[new.group_instance_id] = new.member_id

    def _append(self, append_id: int, value: GroupMetadataValue | None) -> AppendRecords:
        record = group_metadata_record(GroupMetadataKey(self.group_id), value)
        return AppendRecords(append_id, self.group_id, self.partition, (record,))

    # -- the join phase --------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, now_ms: int) -> tuple[GroupOutput, ...]:
        if self.state not in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        ):
            return ()
        outputs: tuple[GroupOutput, ...] = ()
        if self.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting for the old generation's assignment must rejoin instead.
            outputs = self._reset_and_propagate_assignment_error(RebalanceInProgressError)
        if self.state is GroupState.EMPTY:
            delay_ms = self._config.group_initial_rebalance_delay_ms
            self.join_deadline_ms = now_ms + delay_ms
            self.initial_delay_remaining_ms = max(self.rebalance_timeout_ms() - delay_ms, 0)
            self.new_member_added = False
        else:
            self.join_deadline_ms = now_ms + self.rebalance_timeout_ms()
            self.initial_delay_remaining_ms = None
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        return outputs

    def _reset_and_propagate_assignment_error(
        self, error: type[KafkaError]
    ) -> tuple[GroupOutput, ...]:
        assert self.state is GroupState.COMPLETING_REBALANCE
        outputs: list[GroupOutput] = []
        for m in self.members.values():
            m.assignment = b""
            if m.awaiting_sync:
                m.awaiting_sync = False
                outputs.append(self._sync_error(m.member_id, error))
        return tuple(outputs)

    def _all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def _try_complete_join(self, now_ms: int) -> tuple[GroupOutput, ...]:
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self.initial_delay_remaining_ms is None
            and self._all_members_joined()
        ):
            return self._complete_join(now_ms)
        return ()

    def _complete_join(self, now_ms: int) -> tuple[GroupOutput, ...]:
        assert self.state is GroupState.PREPARING_REBALANCE
        outputs: list[GroupOutput] = []
        for m in list(self.members.values()):
            if not m.awaiting_join:
                outputs.extend(self._remove_member(m.member_id))
        self.join_deadline_ms = None
        self.initial_delay_remaining_ms = None
        self.new_member_added = False
        self.generation_id += 1
        self.rebalances += 1
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY, now_ms)
            append_id = self._allocate_append_id()
            self._pending_stores[append_id] = None
            outputs.append(self._append(append_id, self.metadata_value()))
            return tuple(outputs)
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.protocol_type = self.members[self.leader_id].protocol_type
        self.protocol_name = self.select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for m in self.members.values():
            m.awaiting_join = False
            m.is_new = False
            m.last_heartbeat_ms = now_ms
            outputs.append(JoinReply(self.group_id, m.member_id, self._join_response(m.member_id)))
        return tuple(outputs)

    def _remove_member(self, member_id: str) -> tuple[GroupOutput, ...]:
        """Drop a member; its parked requests learn UNKNOWN_MEMBER_ID (the client then
        joins again if it is still alive)."""
        member = self.members.pop(member_id)
        outputs: list[GroupOutput] = []
        if member.awaiting_join:
            outputs.append(self._join_error(member_id, UnknownMemberIdError))
        if member.awaiting_sync:
            outputs.append(self._sync_error(member_id, UnknownMemberIdError))
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return tuple(outputs)

    def _remove_member_and_update(self, member_id: str, now_ms: int) -> tuple[GroupOutput, ...]:
        outputs = self._remove_member(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            outputs += self._maybe_prepare_rebalance(now_ms)
        outputs += self._try_complete_join(now_ms)
        return outputs

    # -- sync ------------------------------------------------------------------------------

    def sync(self, request: SyncGroupRequest, *, now_ms: int) -> Decision[SyncGroupResponse]:
        assert self.state is not GroupState.DEAD
        member_id = request.member_id
        if self.is_static_fenced(member_id, request.group_instance_id):
            return Decision(SyncGroupResponse(FencedInstanceIdError))
        member = self.members.get(member_id)
        if member is None:
            return Decision(SyncGroupResponse(UnknownMemberIdError))
        if request.generation_id != self.generation_id:
            return Decision(SyncGroupResponse(IllegalGenerationError))
        if (request.protocol_type is not None and request.protocol_type != self.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != self.protocol_name
        ):
            return Decision(SyncGroupResponse(InconsistentGroupProtocolError))
        if self.state is GroupState.EMPTY:
            return Decision(SyncGroupResponse(UnknownMemberIdError))
        if self.state is GroupState.PREPARING_REBALANCE:
            return Decision(SyncGroupResponse(RebalanceInProgressError))
        if self.state is GroupState.STABLE:
            member.last_heartbeat_ms = now_ms
            return Decision(self._sync_ok(member))
        assert self.state is GroupState.COMPLETING_REBALANCE
        member.awaiting_sync = True
        member.last_heartbeat_ms = now_ms
        if member_id != self.leader_id or self._sync_store_pending():
            return Decision(None)
        # Members the leader left out get an empty assignment; unknown ids are ignored.
        assignments = {mid: request.assignments.get(mid, b"") for mid in self.members}
        append_id = self._allocate_append_id()
        self._pending_stores[append_id] = _PendingSyncStore(self.generation_id, assignments)
        return Decision(None, (self._append(append_id, self.metadata_value(assignments)),))

    def _sync_store_pending(self) -> bool:
        return any(
            isinstance(p, _PendingSyncStore) and p.generation_id == self.generation_id
            for p in self._pending_stores.values()
        )

    def _sync_ok(self, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(
            error=None,
            assignment=member.assignment,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
        )

    def store_completed(
        self, append_id: int, error: type[KafkaError] | None, *, now_ms: int
    ) -> tuple[GroupOutput, ...]:
        """The append ``append_id`` finished (``error`` None when it succeeded)."""
        pending = self._pending_stores.pop(append_id)
        if self.state is GroupState.DEAD:
            return ()
        if isinstance(pending, _PendingSyncStore):
            return self._sync_store_completed(pending, error, now_ms)
        if isinstance(pending, _PendingStaticJoin):
            return self._static_join_store_completed(pending, error, now_ms)
        return ()  # a store with nobody waiting (the group became empty)

    def _sync_store_completed(
        self, pending: _PendingSyncStore, error: type[KafkaError] | None, now_ms: int
    ) -> tuple[GroupOutput, ...]:
        if (
            self.state is not GroupState.COMPLETING_REBALANCE
            or self.generation_id != pending.generation_id
        ):
            # The group moved on (a member joined or left); the waiting members were
            # already told REBALANCE_IN_PROGRESS.
            return ()
        if error is not None:
            failed = self._reset_and_propagate_assignment_error(coordinator_error_for_append(error))
            return failed + self._maybe_prepare_rebalance(now_ms)
        assert set(pending.assignments) == set(self.members)
        outputs: list[GroupOutput] = []
        for m in self.members.values():
            m.assignment = pending.assignments[m.member_id]
            if m.awaiting_sync:
                m.awaiting_sync = False
                m.last_heartbeat_ms = now_ms
                outputs.append(SyncReply(self.group_id, m.member_id, self._sync_ok(m)))
        self._transition(GroupState.STABLE, now_ms)
        return tuple(outputs)

    def _static_join_store_completed(
        self, pending: _PendingStaticJoin, error: type[KafkaError] | None, now_ms: int
    ) -> tuple[GroupOutput, ...]:
        new_id = pending.new_member_id
        member = self.members.get(new_id)
        if (
            member is None
            or not member.awaiting_join
            or self.state is not GroupState.STABLE
            or self.generation_id != pending.generation_id
        ):
            # Removed, fenced again or caught in a rebalance: it was answered then, or
            # will be when the rebalance completes.
            return ()
        member.awaiting_join = False
        if error is None:
            response = self._join_response(new_id, skip_assignment=True)
            return (JoinReply(self.group_id, new_id, response),)
        # Kafka reverts the replacement: the old member id stays valid.
        self._swap_member(new_id, replace(pending.old, last_heartbeat_ms=now_ms))
        return (self._join_error(new_id, coordinator_error_for_append(error)),)

    # -- heartbeat and leave -----------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> HeartbeatResponse:
        assert self.state is not GroupState.DEAD
        if self.is_static_fenced(request.member_id, request.group_instance_id):
            return HeartbeatResponse(FencedInstanceIdError)
        member = self.members.get(request.member_id)
        if member is None:
            return HeartbeatResponse(UnknownMemberIdError)
        if request.generation_id != self.generation_id:
            return HeartbeatResponse(IllegalGenerationError)
        if self.state is GroupState.EMPTY:
            return HeartbeatResponse(UnknownMemberIdError)
        member.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return HeartbeatResponse(RebalanceInProgressError)
        # Stable, or CompletingRebalance: a member may heartbeat between its JoinGroup
        # answer and its SyncGroup (Kafka treats that as a normal heartbeat).
        return HeartbeatResponse(None)

    def leave(
        self, members: tuple[LeaveMember, ...], *, now_ms: int
    ) -> Decision[LeaveGroupResponse]:
        assert self.state is not GroupState.DEAD
        results: list[LeaveMemberResult] = []
        outputs: list[GroupOutput] = []
        for leaving in members:
            member_id = leaving.member_id
            if member_id == "" and leaving.group_instance_id is not None:
                member_id = self.static_members.get(leaving.group_instance_id, "")
            error: ErrorType = None
            if member_id in self.pending_members:
                del self.pending_members[member_id]
                outputs.extend(self._try_complete_join(now_ms))
            elif self.is_static_fenced(member_id, leaving.group_instance_id):
                error = FencedInstanceIdError
            elif member_id not in self.members:
                error = UnknownMemberIdError
            else:
                outputs.extend(self._remove_member_and_update(member_id, now_ms))
            results.append(LeaveMemberResult(leaving.member_id, leaving.group_instance_id, error))
        return Decision(LeaveGroupResponse(None, tuple(results)), tuple(outputs))

    # -- time ------------------------------------------------------------------------------

    def _member_expired(self, member: Member, now_ms: int) -> bool:
        if member.awaiting_join:
            return member.is_new and now_ms >= (
                member.last_heartbeat_ms + self._config.new_member_join_timeout_ms
            )
        if member.awaiting_sync:
            return False
        return now_ms >= member.last_heartbeat_ms + member.session_timeout_ms

    def tick(self, *, now_ms: int) -> tuple[GroupOutput, ...]:
        """Expire sessions, pending member ids and the join phase at ``now_ms``."""
        if self.state is GroupState.DEAD:
            return ()
        outputs: list[GroupOutput] = []
        lapsed = [mid for mid, deadline in self.pending_members.items() if now_ms >= deadline]
        for mid in lapsed:
            del self.pending_members[mid]
        if lapsed:
            outputs.extend(self._try_complete_join(now_ms))
        for m in list(self.members.values()):
            if m.member_id in self.members and self._member_expired(m, now_ms):
                outputs.extend(self._remove_member_and_update(m.member_id, now_ms))
        # A loop: an extension of the initial delay may already be due (delay 0, or a
        # tick that comes late); it ends because an extension clears new_member_added.
        while (
            self.state is GroupState.PREPARING_REBALANCE
            and self.join_deadline_ms is not None
            and now_ms >= self.join_deadline_ms
        ):
            remaining = self.initial_delay_remaining_ms
            if remaining is not None and self.new_member_added and remaining > 0:
                # A member joined during the initial delay: wait once more for others,
                # within what is left of the rebalance timeout.
                delay_ms = self._config.group_initial_rebalance_delay_ms
                self.new_member_added = False
                # Counted from when the timer was due, as if it fired on time.
                self.join_deadline_ms += min(delay_ms, remaining)
                self.initial_delay_remaining_ms = max(remaining - delay_ms, 0)
            else:
                outputs.extend(self._complete_join(now_ms))
        return tuple(outputs)

    def next_deadline_ms(self) -> int | None:
        """The earliest time a ``tick`` may change something (None: nothing scheduled)."""
        deadlines = list(self.pending_members.values())
        if self.state is GroupState.PREPARING_REBALANCE and self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        for m in self.members.values():
            if m.awaiting_join:
                if m.is_new:
                    deadlines.append(m.last_heartbeat_ms + self._config.new_member_join_timeout_ms)
            elif not m.awaiting_sync:
                deadlines.append(m.last_heartbeat_ms + m.session_timeout_ms)
        return min(deadlines, default=None)
