"""The group coordinator of one broker: many groups, their offsets, and loading.

(Over 700 lines: the offsets, the group table and the load from __consumer_offsets
replay the same records and share one set of invariants.)

Theory of operation
-------------------
A broker coordinates the groups whose ``__consumer_offsets`` partition it leads
(``partition_for(group_id)``, supplied by the broker). For each such partition the
manager is in one of two states:

* **loading**: the broker just became leader; it feeds the partition's records to
  :meth:`GroupManager.replay` (latest value per key wins, a tombstone deletes) and calls
  :meth:`GroupManager.complete_loading`. Until then every request for those groups gets
  COORDINATOR_LOAD_IN_PROGRESS.
* **loaded**: requests are served. On losing leadership :meth:`GroupManager.unload`
  drops the partition's groups and offsets; parked requests and pending commits are
  answered NOT_COORDINATOR, and later requests get NOT_COORDINATOR too.

Group membership is :class:`~raftka.broker.coordinator.group.Group`'s business. The
manager adds offsets (Kafka's rules):

* **OffsetCommit** is accepted from a member of the current generation (also while the
  group prepares a rebalance: a consumer commits in onPartitionsRevoked), or with
  generation -1 from anyone while the group is Empty (manual/simple consumers, admin
  resets). A stale generation gets ILLEGAL_GENERATION (the client's CommitFailedError),
  an unknown member UNKNOWN_MEMBER_ID, and a group waiting for its leader's
  assignment REBALANCE_IN_PROGRESS.
* A commit is *visible only after its record is appended*: the manager emits
  :class:`~raftka.broker.coordinator.group.AppendRecords`, and only
  :meth:`GroupManager.append_completed` applies the offsets and releases the
  :class:`CommitReply`.
* **TxnOffsetCommit** (KIP-98, KIP-447) writes offsets as a transactional batch of the
  producer; they stay *pending* (:mod:`.txn_offsets`) until the producer's COMMIT or
  ABORT marker lands in the partition (:meth:`GroupManager.complete_transaction` at run
  time, markers replayed on load). OffsetFetch with ``require_stable`` answers
  UNSTABLE_OFFSET_COMMIT for a partition with pending offsets. Fencing is Kafka's
  ``doTxnCommitOffsets``: a member id or generation, when given, must match.
* **Expiry** (``offsets.retention.minutes``, 7 days): a consumer group's offsets expire
  that long after the group became Empty; a group that never had members (manual
  commits only) expires each offset that long after its commit; a commit carrying its
  own expire timestamp expires then. An Empty group left with no offsets is deleted
  (Dead, and a tombstone for its metadata). ``tick`` runs this check every
  ``offsets.retention.check.interval.ms``.

Every method is pure: ``now_ms`` comes in, responses and outputs go out, and the
driver appends records and reports back with ``append_completed``. Appends must be
applied to the log in the order they are emitted.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias, TypeVar

from raftka.broker.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    AppendRecords,
    Decision,
    ErrorType,
    Group,
    GroupConfig,
    GroupOutput,
    GroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMember,
    LeaveMemberResult,
    SyncGroupRequest,
    SyncGroupResponse,
    coordinator_error_for_append,
)
from raftka.broker.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
    OffsetsRecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_record,
    offset_commit_record,
)
from raftka.broker.coordinator.txn_offsets import (
    GroupOffsetKey,
    PendingTxnOffsets,
    Positioned,
    newer,
)
from raftka.common.errors import (
    CoordinatorLoadInProgressError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidGroupIdError,
    InvalidProducerEpochError,
    InvalidSessionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    ProducerFencedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from raftka.common.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "NO_OFFSET",
    "CommitReply",
    "DeleteGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "GroupCoordinatorConfig",
    "GroupManager",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchResponse",
    "Output",
    "ReplayedTxnMarker",
    "ReplayedTxnRecord",
    "TxnOffsetCommitRequest",
]

#: OffsetFetch's answer for a partition without a committed offset.
NO_OFFSET: Final = OffsetAndMetadata(-1, "", None)
_MINUTE_MS: Final = 60_000

T_ = TypeVar("T_")


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Broker settings of the group coordinator (Kafka's names and defaults)."""

    group: GroupConfig = field(default_factory=GroupConfig)
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096

    def __post_init__(self) -> None:
        assert self.offsets_retention_minutes > 0
        assert self.offsets_retention_check_interval_ms > 0
        assert self.offset_metadata_max_bytes >= 0


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    group_instance_id: str | None = None
    #: OffsetCommit v2-v4's retention_time_ms (-1 or None: the broker's retention).
    retention_time_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: ``offsets`` for ``group_id`` in the transaction of
    ``producer_id``/``producer_epoch``. ``generation_id`` -1 and ``member_id`` "" mean
    not given (a producer without the consumer's group metadata, pre-KIP-447)."""

    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    #: The producer's transactional id: the append verifies the transaction with it
    #: (KIP-890 part 1, service.py); "" skips that (tests of the core alone).
    transactional_id: str = ""


@dataclass(frozen=True, slots=True)
class ReplayedTxnRecord:
    """An offsets record read from a transactional batch of ``producer_id``."""

    record: OffsetsRecord
    producer_id: int


@dataclass(frozen=True, slots=True)
class ReplayedTxnMarker:
    """A COMMIT (``committed``) or ABORT control record of ``producer_id``."""

    producer_id: int
    committed: bool


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    errors: Mapping[TopicPartition, ErrorType]


@dataclass(frozen=True, slots=True)
class CommitReply:
    """Release the OffsetCommit whose records went out as append ``append_id``."""

    append_id: int
    group_id: str
    response: OffsetCommitResponse


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error: ErrorType
    #: Committed offsets; -1 (``NO_OFFSET``) for a partition without one.
    offsets: Mapping[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    #: Per-partition errors (UNSTABLE_OFFSET_COMMIT with require_stable); absent: none.
    errors: Mapping[TopicPartition, ErrorType] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error: ErrorType
    errors: Mapping[TopicPartition, ErrorType] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: Mapping[str, ErrorType]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error: ErrorType
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: Empty unless the group is Stable (as Kafka's DescribeGroups).
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ErrorType
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


Output: TypeAlias = GroupOutput | CommitReply


class _Loading(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(slots=True)
class _LoadBuffer:
    """Latest value per key seen while replaying one partition (None: tombstone), and
    markers the leader reported while the load was still reading (applied after it)."""

    groups: dict[str, GroupMetadataValue | None] = field(default_factory=dict)
    offsets: dict[GroupOffsetKey, Positioned | None] = field(default_factory=dict)
    markers: list[ReplayedTxnMarker] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _PendingCommit:
    group_id: str
    partition: int
    #: The group the commit was accepted for (a deleted group is not the current one).
    group: Group
    values: Mapping[TopicPartition, OffsetCommitValue]
    #: Partitions refused before the append (answered with the rest).
    refused: Mapping[TopicPartition, ErrorType]
    #: Partitions whose offsets were deleted (OffsetDelete) while this was in flight:
    #: their tombstones follow these records in the log, so memory must not keep them.
    deleted: set[TopicPartition] = field(default_factory=set)
    #: The append's place in the partition's log order (txn_offsets.Positioned).
    position: int = 0
    #: A TxnOffsetCommit's producer (its offsets become pending); -1: a plain commit.
    producer_id: int = -1


def _refused(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], error: type[KafkaError]
) -> Decision[OffsetCommitResponse]:
    """A commit refused with ``error`` for every partition."""
    return Decision(OffsetCommitResponse(dict.fromkeys(offsets, error)))


def _txn_append_error(error: type[KafkaError]) -> type[KafkaError]:
    """A TxnOffsetCommit's failed append as the client hears it: the partition's
    producer state fencing the producer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE) goes back as it is, as Kafka's TxnOffsetCommit answers it; the
    rest as for a plain commit."""
    if issubclass(error, ProducerFencedError | InvalidProducerEpochError | InvalidTxnStateError):
        return error
    return coordinator_error_for_append(error)


class _Tombstones:
    """An append nobody waits for (expiry, deletion)."""


_TOMBSTONES: Final = _Tombstones()


class GroupManager:
    """All groups this broker coordinates. Single-threaded: the driver serialises calls."""

    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        rng: random.Random,
        partition_for: Callable[[str], int],
    ) -> None:
        self._config = config
        self._rng = rng
        self._partition_for = partition_for
        self._partitions: dict[int, _Loading] = {}
        self._load_buffers: dict[int, _LoadBuffer] = {}
        self._groups: dict[str, Group] = {}
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        #: Log-order position of each committed value in ``_offsets``.
        self._positions: dict[GroupOffsetKey, int] = {}
        self._txn = PendingTxnOffsets()
        self._next_position = 0
        self._inflight: dict[int, Group | _PendingCommit | _Tombstones] = {}
        self._next_append_id = 0
        self._next_retention_check_ms = 0

    # -- views (tests and the broker's admin paths) --------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def group_ids(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def committed(self, group_id: str) -> Mapping[TopicPartition, OffsetCommitValue]:
        return dict(self._offsets.get(group_id, {}))

    def owned_partitions(self) -> Mapping[int, str]:
        return {p: s.value for p, s in self._partitions.items()}

    def pending_transactional(self, partition: int) -> Mapping[int, Mapping[GroupOffsetKey, int]]:
        """Producer id -> pending transactional offsets (key -> offset) of ``partition``."""
        return {
            pid: {key: p.value.offset for key, p in offsets.items()}
            for pid, offsets in self._txn.producers(partition).items()
        }

    # -- internals -------------------------------------------------------------------------

    def _allocate_append_id(self) -> int:
        self._next_append_id += 1
        return self._next_append_id

    def _allocate_position(self) -> int:
        """The next place in log order: replayed records and emitted appends take them
        in the order they are (or will be) in the log."""
        self._next_position += 1
        return self._next_position

    def _commit_offset(self, group_id: str, tp: TopicPartition, candidate: Positioned) -> None:
        """Make ``candidate`` the committed value unless a later record holds it."""
        committed = self._offsets.setdefault(group_id, {})
        key = (group_id, tp)
        current = committed.get(tp)
        if current is None or newer(candidate, Positioned(current, self._positions.get(key, -1))):
            committed[tp] = candidate.value
            self._positions[key] = candidate.position

    def _commit_group_error(self, group_id: str) -> type[KafkaError] | None:
        """Why a commit to ``group_id`` is refused before its group is looked at."""
        return InvalidGroupIdError if not group_id else self._coordinator_error(group_id)

    def _coordinator_error(self, group_id: str) -> type[KafkaError] | None:
        status = self._partitions.get(self._partition_for(group_id))
        if status is None:
            return NotCoordinatorError
        if status is _Loading.LOADING:
            return CoordinatorLoadInProgressError
        return None

    def _new_group(self, group_id: str, now_ms: int) -> Group:
        assert group_id not in self._groups
        group = Group(
            group_id=group_id,
            partition=self._partition_for(group_id),
            config=self._config.group,
            rng=self._rng,
            allocate_append_id=self._allocate_append_id,
            now_ms=now_ms,
        )
        self._groups[group_id] = group
        return group

    def _track(self, group: Group, outputs: Iterable[Output]) -> tuple[Output, ...]:
        """Remember which group waits for each append the group emitted."""
        result = tuple(outputs)
        for out in result:
            if isinstance(out, AppendRecords):
                assert out.append_id not in self._inflight
                self._inflight[out.append_id] = group
        return result

    def _tracked(self, group: Group, decision: Decision[T_]) -> Decision[T_]:
        self._track(group, decision.outputs)
        return decision

    # -- membership requests ---------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest, *, now_ms: int) -> Decision[JoinGroupResponse]:
        if not request.group_id:
            return Decision(JoinGroupResponse(InvalidGroupIdError))
        error = self._coordinator_error(request.group_id)
        if error is not None:
            return Decision(JoinGroupResponse(error, member_id=request.member_id))
        config = self._config.group
        if not (
            config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            return Decision(
                JoinGroupResponse(InvalidSessionTimeoutError, member_id=request.member_id)
            )
        group = self._groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return Decision(
                    JoinGroupResponse(UnknownMemberIdError, member_id=request.member_id)
                )
            group = self._new_group(request.group_id, now_ms)
        return self._tracked(group, group.join(request, now_ms=now_ms))

    def sync_group(self, request: SyncGroupRequest, *, now_ms: int) -> Decision[SyncGroupResponse]:
        if not request.group_id:
            return Decision(SyncGroupResponse(InvalidGroupIdError))
        error = self._coordinator_error(request.group_id)
        if error is not None:
            return Decision(SyncGroupResponse(error))
        group = self._groups.get(request.group_id)
        if group is None:
            return Decision(SyncGroupResponse(UnknownMemberIdError))
        return self._tracked(group, group.sync(request, now_ms=now_ms))

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> HeartbeatResponse:
        if not request.group_id:
            return HeartbeatResponse(InvalidGroupIdError)
        error = self._coordinator_error(request.group_id)
        if error is not None:
            return HeartbeatResponse(error)
        group = self._groups.get(request.group_id)
        if group is None:
            return HeartbeatResponse(UnknownMemberIdError)
        return group.heartbeat(request, now_ms=now_ms)

    def leave_group(
        self, *, group_id: str, members: tuple[LeaveMember, ...], now_ms: int
    ) -> Decision[LeaveGroupResponse]:
        if not group_id:
            return Decision(LeaveGroupResponse(InvalidGroupIdError))
        error = self._coordinator_error(group_id)
        if error is not None:
            return Decision(LeaveGroupResponse(error))
        group = self._groups.get(group_id)
        if group is None:
            results = tuple(
                LeaveMemberResult(m.member_id, m.group_instance_id, UnknownMemberIdError)
                for m in members
            )
            return Decision(LeaveGroupResponse(None, results))
        return self._tracked(group, group.leave(members, now_ms=now_ms))

    # -- offsets ---------------------------------------------------------------------------

    def offset_commit(
        self, request: OffsetCommitRequest, *, now_ms: int
    ) -> Decision[OffsetCommitResponse]:
        error = self._commit_group_error(request.group_id)
        if error is not None:
            return _refused(request.offsets, error)
        group = self._groups.get(request.group_id)
        if group is None:
            if request.generation_id >= 0:
                return _refused(request.offsets, IllegalGenerationError)
            # A group that does not use the coordinator for membership (manual assign).
            group = self._new_group(request.group_id, now_ms)
        elif group.is_static_fenced(request.member_id, request.group_instance_id):
            return _refused(request.offsets, FencedInstanceIdError)
        elif request.generation_id < 0 and group.state is GroupState.EMPTY:
            pass
        elif group.state is GroupState.COMPLETING_REBALANCE:
            return _refused(request.offsets, RebalanceInProgressError)
        elif request.member_id not in group.members:
            return _refused(request.offsets, UnknownMemberIdError)
        elif request.generation_id != group.generation_id:
            return _refused(request.offsets, IllegalGenerationError)
        else:
            group.members[request.member_id].last_heartbeat_ms = now_ms
        return self._store_offsets(group, request.offsets, request.retention_time_ms, now_ms)

    def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, *, now_ms: int
    ) -> Decision[OffsetCommitResponse]:
        """Kafka's TxnOffsetCommit (GroupCoordinator.doTxnCommitOffsets): a group that
        does not exist is created (Empty: the transactional producer need not be a
        member); a static member replaced by another instance is fenced
        (FENCED_INSTANCE_ID); a member id, when given, must be a member
        (UNKNOWN_MEMBER_ID); a generation, when given, must be the group's
        (ILLEGAL_GENERATION). No REBALANCE_IN_PROGRESS: the offsets only count if the
        transaction commits, and the producer of a fenced generation fails here."""

        error = self._commit_group_error(request.group_id)
        if error is not None:
            return _refused(request.offsets, error)
        group = self._groups.get(request.group_id)
        if group is None:
            group = self._new_group(request.group_id, now_ms)
        elif group.is_static_fenced(request.member_id, request.group_instance_id):
            return _refused(request.offsets, FencedInstanceIdError)
        elif request.member_id and request.member_id not in group.members:
            return _refused(request.offsets, UnknownMemberIdError)
        elif request.generation_id >= 0 and request.generation_id != group.generation_id:
            return _refused(request.offsets, IllegalGenerationError)
        return self._store_offsets(
            group,
            request.offsets,
            None,
            now_ms,
            producer=(request.producer_id, request.producer_epoch),
            transactional_id=request.transactional_id,
        )

    def _store_offsets(
        self,
        group: Group,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        retention: int | None,
        now_ms: int,
        *,
        producer: tuple[int, int] | None = None,
        transactional_id: str = "",
    ) -> Decision[OffsetCommitResponse]:
        refused: dict[TopicPartition, ErrorType] = {}
        values: dict[TopicPartition, OffsetCommitValue] = {}
        for tp, committed in offsets.items():
            if len(committed.metadata.encode("utf-8")) > self._config.offset_metadata_max_bytes:
                refused[tp] = OffsetMetadataTooLargeError
                continue
            values[tp] = OffsetCommitValue(
                offset=committed.offset,
                leader_epoch=-1 if committed.leader_epoch is None else committed.leader_epoch,
                metadata=committed.metadata,
                commit_timestamp_ms=now_ms,
                expire_timestamp_ms=(
                    None if retention is None or retention < 0 else now_ms + retention
                ),
            )
        if not values:
            return Decision(OffsetCommitResponse(refused))
        records = tuple(
            offset_commit_record(OffsetCommitKey(group.group_id, tp.topic, tp.partition), v)
            for tp, v in values.items()
        )
        append_id = self._allocate_append_id()
        producer_id, producer_epoch = (-1, -1) if producer is None else producer
        self._inflight[append_id] = _PendingCommit(
            group.group_id,
            group.partition,
            group,
            values,
            refused,
            position=self._allocate_position(),
            producer_id=producer_id,
        )
        append = AppendRecords(
            append_id,
            group.group_id,
            group.partition,
            records,
            producer_id,
            producer_epoch,
            transactional_id,
        )
        return Decision(None, (append,))

    def offset_fetch(
        self,
        *,
        group_id: str,
        partitions: tuple[TopicPartition, ...] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        """Committed offsets of ``partitions`` (None: every partition with one). With
        ``require_stable`` (KIP-447) a partition with pending transactional offsets is
        answered UNSTABLE_OFFSET_COMMIT (and offset -1) instead: the consumer retries
        rather than start from an offset its transaction may still replace."""
        if not group_id:
            return OffsetFetchResponse(InvalidGroupIdError)
        error = self._coordinator_error(group_id)
        if error is not None:
            return OffsetFetchResponse(error)
        committed = self._offsets.get(group_id, {})
        wanted = sorted(committed) if partitions is None else partitions
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        errors: dict[TopicPartition, ErrorType] = {}
        partition = self._partition_for(group_id)
        for tp in wanted:
            if require_stable and self._txn.is_pending(partition, (group_id, tp)):
                result[tp] = NO_OFFSET
                errors[tp] = UnstableOffsetCommitError
                continue
            value = committed.get(tp)
            result[tp] = (
                NO_OFFSET
                if value is None
                else OffsetAndMetadata(
                    value.offset,
                    value.metadata,
                    None if value.leader_epoch < 0 else value.leader_epoch,
                )
            )
        return OffsetFetchResponse(None, result, errors)

    # -- appends ---------------------------------------------------------------------------

    def append_completed(
        self, *, append_id: int, error: type[KafkaError] | None, now_ms: int
    ) -> tuple[Output, ...]:
        """The driver appended (``error`` None) or failed to append ``append_id``."""
        target = self._inflight.pop(append_id, None)
        if target is None or isinstance(target, _Tombstones):
            # Unloaded meanwhile (its waiters were answered then), or nobody waits.
            return ()
        if isinstance(target, Group):
            if self._groups.get(target.group_id) is not target:
                return ()  # deleted or unloaded; parked requests were answered then
            return self._track(target, target.store_completed(append_id, error, now_ms=now_ms))
        errors: dict[TopicPartition, ErrorType] = dict(target.refused)
        if error is None:
            # If the group was deleted after this commit was accepted, the deletion's
            # tombstones follow these records in the log (they cover in-flight commits):
            # the commit happened, then the delete; memory must not resurrect it.
            if self._groups.get(target.group_id) is target.group:
                for tp, value in target.values.items():
                    if tp in target.deleted:
                        continue
                    positioned = Positioned(value, target.position)
                    if target.producer_id < 0:
                        self._commit_offset(target.group_id, tp, positioned)
                    else:
                        key = (target.group_id, tp)
                        self._txn.add(target.partition, target.producer_id, key, positioned)
            errors.update({tp: None for tp in target.values})
        else:
            mapped = (
                _txn_append_error(error)
                if target.producer_id >= 0
                else coordinator_error_for_append(error)
            )
            errors.update({tp: mapped for tp in target.values})
        return (CommitReply(append_id, target.group_id, OffsetCommitResponse(errors)),)

    def complete_transaction(self, *, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` was appended to
        ``partition`` of __consumer_offsets: its pending offsets there become committed
        (unless a later record of the key holds it) or are dropped. A partition this
        coordinator does not own is ignored (its next owner replays the marker); one
        still loading applies the marker after the records it is reading."""
        status = self._partitions.get(partition)
        if status is None:
            return
        marker = ReplayedTxnMarker(producer_id, committed)
        if status is _Loading.LOADING:
            self._load_buffers[partition].markers.append(marker)
            return
        for (group_id, tp), positioned in self._txn.complete(partition, producer_id).items():
            # A group deleted meanwhile took its pending offsets with it (remove_key).
            if committed and group_id in self._groups:
                self._commit_offset(group_id, tp, positioned)

    def _append_tombstones(self, group_id: str, records: list[OffsetsRecord]) -> AppendRecords:
        append_id = self._allocate_append_id()
        self._inflight[append_id] = _TOMBSTONES
        return AppendRecords(append_id, group_id, self._partition_for(group_id), tuple(records))

    # -- admin -----------------------------------------------------------------------------

    def delete_groups(
        self, *, group_ids: tuple[str, ...], now_ms: int
    ) -> Decision[DeleteGroupsResponse]:
        results: dict[str, ErrorType] = {}
        outputs: list[GroupOutput] = []
        for group_id in group_ids:
            error = InvalidGroupIdError if not group_id else self._coordinator_error(group_id)
            group = self._groups.get(group_id)
            if error is not None:
                results[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                results[group_id] = GroupIdNotFoundError
            elif group.state is not GroupState.EMPTY:
                results[group_id] = NonEmptyGroupError
            else:
                outputs.extend(group.mark_dead(now_ms=now_ms))
                # Tombstones also for commits still in flight: their records precede ours.
                doomed = set(self._offsets.get(group_id, {}))
                for target in self._inflight.values():
                    if isinstance(target, _PendingCommit) and target.group is group:
                        doomed.update(target.values)
                # And for pending transactional offsets (Kafka's deleteAllOffsets): a
                # COMMIT after the deletion must not bring them back.
                doomed.update(self._pending_partitions(group_id))
                outputs.append(self._remove_group(group_id, sorted(doomed)))
                results[group_id] = None
        return Decision(DeleteGroupsResponse(results), tuple(outputs))

    def _remove_group(self, group_id: str, offsets: list[TopicPartition]) -> AppendRecords:
        """Forget a group and write tombstones for its metadata and ``offsets``."""
        del self._groups[group_id]
        committed = self._offsets.get(group_id, {})
        for tp in offsets:
            self._forget(group_id, tp)
        if not committed:
            self._offsets.pop(group_id, None)
        records = [
            offset_commit_record(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
            for tp in offsets
        ]
        records.append(group_metadata_record(GroupMetadataKey(group_id), None))
        return self._append_tombstones(group_id, records)

    def _pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with pending transactional offsets of ``group_id``."""
        keys = self._txn.pending_keys(self._partition_for(group_id))
        return {tp for g, tp in keys if g == group_id}

    def _forget(self, group_id: str, tp: TopicPartition) -> None:
        """A plain tombstone of (group, tp) is being written: drop what memory has of the
        key, committed and pending (txn_offsets: a tombstone ends pending values too)."""
        self._offsets.get(group_id, {}).pop(tp, None)
        self._positions.pop((group_id, tp), None)
        self._txn.remove_key(self._partition_for(group_id), (group_id, tp))

    def delete_offsets(
        self, *, group_id: str, partitions: tuple[TopicPartition, ...], now_ms: int
    ) -> Decision[OffsetDeleteResponse]:
        """Kafka's OffsetDelete: forget the group's committed offsets of ``partitions``
        (tombstones in __consumer_offsets). An Empty group's may all go; a consumer
        group with members keeps those of topics it subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC); another group with members: NON_EMPTY_GROUP. A
        partition without a committed offset is answered without error, as in Kafka."""
        error = InvalidGroupIdError if not group_id else self._coordinator_error(group_id)
        if error is not None:
            return Decision(OffsetDeleteResponse(error))
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return Decision(OffsetDeleteResponse(GroupIdNotFoundError))
        errors: dict[TopicPartition, ErrorType] = {}
        if group.state is GroupState.EMPTY:
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics() or frozenset()
            eligible = [tp for tp in partitions if tp.topic not in subscribed]
            errors.update(
                {tp: GroupSubscribedToTopicError for tp in partitions if tp.topic in subscribed}
            )
        else:
            return Decision(OffsetDeleteResponse(NonEmptyGroupError))
        errors.update({tp: None for tp in eligible})
        # Tombstones also for commits still in flight: their records precede ours.
        doomed = set(eligible) & (
            set(self._offsets.get(group_id, {})) | self._pending_partitions(group_id)
        )
        for target in self._inflight.values():
            if isinstance(target, _PendingCommit) and target.group is group:
                hit = set(eligible) & set(target.values)
                target.deleted.update(hit)
                doomed.update(hit)
        outputs = self._drop_offsets(group, sorted(doomed), now_ms) if doomed else ()
        return Decision(OffsetDeleteResponse(None, errors), tuple(outputs))

    def _drop_offsets(
        self, group: Group, offsets: list[TopicPartition], now_ms: int
    ) -> list[GroupOutput]:
        """Forget ``offsets`` of ``group`` with their tombstones; an Empty group left
        with no offsets (none committed, none in flight) is removed with them, as
        Kafka's cleanupGroupMetadata does."""
        group_id = group.group_id
        committed = self._offsets.get(group_id, {})
        remaining = set(committed) - set(offsets)
        busy = (
            group.has_pending_stores()
            or any(
                isinstance(t, _PendingCommit) and t.group_id == group_id
                for t in self._inflight.values()
            )
            or bool(self._pending_partitions(group_id) - set(offsets))
        )
        if (
            group.state is GroupState.EMPTY
            and not group.pending_members
            and not remaining
            and not busy
        ):
            outputs: list[GroupOutput] = list(group.mark_dead(now_ms=now_ms))
            outputs.append(self._remove_group(group_id, offsets))
            return outputs
        for tp in offsets:
            self._forget(group_id, tp)
        records = [
            offset_commit_record(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
            for tp in offsets
        ]
        return [self._append_tombstones(group_id, records)]

    def list_groups(self, *, states: frozenset[str] | None = None) -> ListGroupsResponse:
        """Loaded groups (in ``states`` if given: Kafka's state names)."""
        error: ErrorType = None
        if any(s is _Loading.LOADING for s in self._partitions.values()):
            error = CoordinatorLoadInProgressError
        groups = tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if states is None or g.state.value in states
        )
        return ListGroupsResponse(error, groups)

    def describe_groups(self, *, group_ids: tuple[str, ...]) -> tuple[DescribedGroup, ...]:
        return tuple(self._describe(group_id) for group_id in group_ids)

    def _describe(self, group_id: str) -> DescribedGroup:
        error = InvalidGroupIdError if not group_id else self._coordinator_error(group_id)
        group = self._groups.get(group_id)
        if error is not None or group is None:
            # Kafka answers an unknown group as a Dead one, without an error.
            return DescribedGroup(error, group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name if stable and group.protocol_name else ""
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(protocol) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            None, group_id, group.state.value, group.protocol_type or "", protocol, members
        )

    # -- time ------------------------------------------------------------------------------

    def tick(self, *, now_ms: int) -> tuple[Output, ...]:
        """Expire sessions and join phases; every retention interval, expire offsets."""
        outputs: list[Output] = []
        for group in list(self._groups.values()):
            outputs.extend(self._track(group, group.tick(now_ms=now_ms)))
        if now_ms >= self._next_retention_check_ms:
            self._next_retention_check_ms = (
                now_ms + self._config.offsets_retention_check_interval_ms
            )
            outputs.extend(self._expire_offsets(now_ms))
        return tuple(outputs)

    def next_deadline_ms(self) -> int:
        """When the driver should call ``tick`` next at the latest."""
        deadlines = [self._next_retention_check_ms]
        for group in self._groups.values():
            deadline = group.next_deadline_ms()
            if deadline is not None:
                deadlines.append(deadline)
        return min(deadlines)

    def _expire_offsets(self, now_ms: int) -> list[Output]:
        retention_ms = self._config.offsets_retention_minutes * _MINUTE_MS
        in_flight = {
            (t.group_id, tp)
            for t in self._inflight.values()
            if isinstance(t, _PendingCommit)
            for tp in t.values
        }
        outputs: list[Output] = []
        for group_id, group in list(self._groups.items()):
            if group.state is not GroupState.EMPTY or group.pending_members:
                continue
            if self._coordinator_error(group_id) is not None:
                continue
            committed = self._offsets.get(group_id, {})
            # Kafka's removeExpiredOffsets skips a partition with pending commits,
            # transactional ones included.
            pending = self._pending_partitions(group_id)
            expired = []
            for tp, value in committed.items():
                if (group_id, tp) in in_flight or tp in pending:
                    continue
                if value.expire_timestamp_ms is not None:
                    due = now_ms >= value.expire_timestamp_ms
                elif group.protocol_type is not None:
                    # A consumer group's offsets age from the moment it became empty.
                    due = now_ms >= group.state_timestamp_ms + retention_ms
                else:
                    due = now_ms >= value.commit_timestamp_ms + retention_ms
                if due:
                    expired.append(tp)
            if expired:
                outputs.extend(self._drop_offsets(group, expired, now_ms))
        return outputs

    # -- loading ---------------------------------------------------------------------------

    def begin_loading(self, *, partition: int) -> None:
        """This broker now leads ``partition`` of __consumer_offsets; its records follow."""
        assert partition not in self._partitions, f"partition {partition} already owned"
        self._partitions[partition] = _Loading.LOADING
        self._load_buffers[partition] = _LoadBuffer()

    def replay(
        self,
        *,
        partition: int,
        records: Iterable[OffsetsRecord | ReplayedTxnRecord | ReplayedTxnMarker],
    ) -> None:
        """Feed records of ``partition`` in log order (any number of calls): plain
        records, records of transactional batches (pending until their producer's
        marker) and the COMMIT/ABORT markers of the partition's control batches."""
        buffer = self._load_buffers[partition]
        for item in records:
            if isinstance(item, ReplayedTxnMarker):
                self._replay_marker(partition, buffer, item)
                continue
            producer_id = item.producer_id if isinstance(item, ReplayedTxnRecord) else -1
            record = item.record if isinstance(item, ReplayedTxnRecord) else item
            key = decode_key(record.key)
            if self._partition_for(key.group_id) != partition:
                raise OffsetsRecordError(
                    f"group {key.group_id!r} does not belong in partition {partition}"
                )
            position = self._allocate_position()
            if isinstance(key, GroupMetadataKey):
                buffer.groups[key.group_id] = (
                    None if record.value is None else decode_group_metadata_value(record.value)
                )
                continue
            offset_key = (key.group_id, TopicPartition(key.topic, key.partition))
            value = None if record.value is None else decode_offset_commit_value(record.value)
            if producer_id < 0:
                buffer.offsets[offset_key] = None if value is None else Positioned(value, position)
                if value is None:
                    self._txn.remove_key(partition, offset_key)
            elif value is None:
                self._txn.discard(partition, producer_id, offset_key)
            else:
                self._txn.add(partition, producer_id, offset_key, Positioned(value, position))

    def _replay_marker(
        self, partition: int, buffer: _LoadBuffer, marker: ReplayedTxnMarker
    ) -> None:
        """A marker read from the log (or reported during the load): Kafka's
        doLoadGroupsAndOffsets, with the later record of a key winning."""
        for key, positioned in self._txn.complete(partition, marker.producer_id).items():
            if marker.committed and newer(positioned, buffer.offsets.get(key)):
                buffer.offsets[key] = positioned

    def complete_loading(self, *, partition: int, now_ms: int) -> None:
        """Build the partition's groups from what was replayed and start serving them."""
        assert self._partitions.get(partition) is _Loading.LOADING
        buffer = self._load_buffers.pop(partition)
        # Markers the leader wrote after the load took its end offset follow every
        # record the load read.
        for marker in buffer.markers:
            self._replay_marker(partition, buffer, marker)
        for (group_id, tp), positioned in buffer.offsets.items():
            if positioned is not None:
                self._offsets.setdefault(group_id, {})[tp] = positioned.value
                self._positions[(group_id, tp)] = positioned.position
        group_ids = [g for g, v in buffer.groups.items() if v is not None]
        group_ids += [
            g for g in self._offsets if g not in buffer.groups or buffer.groups[g] is None
        ]
        # A group with only pending transactional offsets exists too (Kafka loads it).
        group_ids += sorted({g for g, _ in self._txn.pending_keys(partition)})
        for group_id in group_ids:
            if self._partition_for(group_id) != partition or group_id in self._groups:
                continue
            group = self._new_group(group_id, now_ms)
            stored = buffer.groups.get(group_id)
            if stored is not None:
                group.restore(stored, now_ms=now_ms)
        self._partitions[partition] = _Loading.LOADED

    def unload(self, *, partition: int, now_ms: int) -> tuple[Output, ...]:
        """This broker lost ``partition``: drop its groups, answer what waits."""
        status = self._partitions.pop(partition, None)
        self._load_buffers.pop(partition, None)
        if status is None:
            return ()
        outputs: list[Output] = []
        for group_id, group in list(self._groups.items()):
            if group.partition != partition:
                continue
            outputs.extend(group.unload(now_ms=now_ms))
            del self._groups[group_id]
            for tp in self._offsets.pop(group_id, {}):
                self._positions.pop((group_id, tp), None)
        self._txn.drop_partition(partition)
        for append_id, target in list(self._inflight.items()):
            if isinstance(target, _PendingCommit) and target.partition == partition:
                errors = dict(target.refused)
                errors.update({tp: NotCoordinatorError for tp in target.values})
                outputs.append(
                    CommitReply(append_id, target.group_id, OffsetCommitResponse(errors))
                )
                del self._inflight[append_id]
            elif isinstance(target, Group) and target.partition == partition:
                del self._inflight[append_id]
        return tuple(outputs)
