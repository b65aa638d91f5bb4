"""The replica state of one partition on one broker (Kafka's Partition/Replica), pure.

(Over 700 lines: one state machine whose transitions share its invariants in _check;
split, they would be checked apart.)

Theory of operation. A broker holds a ``PartitionState`` for each partition replica it
stores. Committed cluster metadata (from the controller's log) makes the replica a
leader or a follower; everything else is driven by the replication traffic:

- As **leader** it serves fetches. A follower's fetch offset is that follower's log end
  offset (LEO); from those the leader computes the high watermark (HW), the offset below
  which every in-sync replica (ISR) holds the records. It proposes ISR changes to the
  controller (AlterPartition) when a follower catches up or falls behind for longer than
  ``replica.lag.time.max.ms``, one proposal in flight at a time. The ISR itself changes
  only when the controller's answer (the AlterPartition response, or the committed
  metadata) comes back.
- As **follower** it learns the leader's HW and log start offset from fetch responses
  and truncates its log when the leader reports a diverging epoch (KIP-101, KIP-320).

While an ISR change is in flight (KIP-497) the leader keeps two ISRs: the *committed*
one (from metadata) and the *maximal* one (committed plus a replica being added; equal
to the committed one while a shrink is pending). The HW is computed over the maximal
ISR, so a replica the controller may already count as in sync (and could elect) holds
the HW back; min.insync.replicas is checked against the committed ISR before an
acks=all append, and against the maximal ISR when the append completes, as Kafka does.

The log is seen only through :class:`LogOffsets`: its log start and log end offsets
and the leader-epoch cache's "where does epoch E end?". Those two offsets are *read*
from the log, never copied: the partition core (:mod:`.partition`) changes the log
first (append, truncate, move the start) and then tells this state, which checks that
the log agrees and moves the HW. The HW is held here and only here (the log is told it
for the checkpoint). Built from bare numbers instead (``log_end_offset=``, the unit
tests of these rules), the state keeps them in a :class:`_NumbersOnly` stand-in and
moves them itself. No clock, no I/O: ``now_ms`` comes in, frozen decisions go out.
Not thread safe: drive one state from one task.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Final, Protocol

from raftka.common.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    KafkaError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
)
from raftka.common.structs import EpochEndOffset

# Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET (OffsetsForLeaderEpoch), as the
# leader-epoch cache defines them.
from raftka.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

#: Kafka's replica.lag.time.max.ms default.
REPLICA_LAG_TIME_MAX_MS_DEFAULT: Final = 30_000
#: Kafka's min.insync.replicas default.
MIN_INSYNC_REPLICAS_DEFAULT: Final = 1
#: Bound on the replicas of one partition (a sanity bound on metadata we are handed;
#: Kafka has no explicit one, and real assignments are a handful).
REPLICAS_MAX: Final = 128
#: Kafka's UnifiedLog.UnknownOffset: a follower whose LEO this leader has not learned.
UNKNOWN_OFFSET: Final = -1
#: A fetch that carries no broker epoch (older fetchers).
NO_BROKER_EPOCH: Final = -1
#: Produce acks values Kafka accepts.
ACKS_ALL: Final = -1
VALID_ACKS: Final = frozenset({0, 1, ACKS_ALL})

# Errors of an AlterPartition response, by Kafka name. Matched by name so that the
# same error defined in another module (metadata/controller.py defines
# INVALID_UPDATE_VERSION) is recognised.
# The controller says the request was not applied and our partition epoch is current:
# safe to fall back to the committed ISR.
_ALTER_NOT_APPLIED: Final = frozenset({"OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA"})
# Our view is out of date: keep the proposal pending until newer metadata replaces it.
_ALTER_AWAIT_METADATA: Final = frozenset(
    {
        "FENCED_LEADER_EPOCH",
        "INVALID_UPDATE_VERSION",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UNKNOWN_TOPIC_ID",
        "NEW_LEADER_ELECTED",
        "INVALID_REQUEST",
    }
)


class ReplicaRole(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


class EpochEndOffsets(Protocol):
    """The leader-epoch cache's answer to OffsetsForLeaderEpoch.

    ``end_offset_for(E, leo)`` returns ``(epoch, end_offset)``: the largest epoch <= E
    the log knows and the offset where it ends (the start of the next epoch, or ``leo``
    for the latest); ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when E is undefined
    or above every known epoch. ``raftka.storage.epoch_cache.LeaderEpochFileCache``
    satisfies it.
    """

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...


class LogOffsets(EpochEndOffsets, Protocol):
    """The log as the replication rules read it (``PartitionLog`` satisfies it)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...


class _NumbersOnly:
    """A log reduced to its two offsets, for a state driven without a log (the unit
    tests of the replication rules): the state moves these numbers itself."""

    __slots__ = ("epochs", "log_end_offset", "log_start_offset")

    def __init__(self, epochs: EpochEndOffsets, log_start_offset: int, log_end_offset: int):
        self.epochs = epochs
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(requested_epoch, log_end_offset)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT
    min_insync_replicas: int = MIN_INSYNC_REPLICAS_DEFAULT

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms <= 0:
            raise ValueError("replica_lag_time_max_ms must be positive")
        if self.min_insync_replicas < 1:
            raise ValueError("min_insync_replicas must be at least 1")


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    # The leader's LEO when this follower last fetched: reaching it counts as caught up
    # as of that fetch's time, so a follower chasing a steady trickle of produces still
    # counts as in sync.
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = NO_BROKER_EPOCH

    def is_caught_up(self, *, leader_log_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= lag_max_ms
        )


class IsrChangeKind(enum.Enum):
    EXPAND = "expand"
    SHRINK = "shrink"


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition request to send to the controller (the shell adds the topic id
    and this broker's id and epoch)."""

    topic: str
    partition: int
    kind: IsrChangeKind
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    # The replicas added (EXPAND) or removed (SHRINK).
    changed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StateChange:
    """The result of a metadata-driven transition."""

    applied: bool
    reason: str
    # (epoch, start_offset) for the shell to write into the leader-epoch cache.
    assign_epoch_start_offset: tuple[int, int] | None = None
    # This replica led and no longer does: fail the purgatory's waiters.
    leadership_lost: bool = False
    # The HW moved: try to complete the purgatory's waiters.
    high_watermark_moved: bool = False
    # The ISR the HW and produce checks use changed: re-check the purgatory.
    isr_changed: bool = False
    # (Re)start fetching from this leader at our LEO (a follower's new leader/epoch).
    fetch_from_leader: int | None = None


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    """The leader's decision on a follower's fetch."""

    error: type[KafkaError] | None = None
    diverging_epoch: EpochEndOffset | None = None
    high_watermark: int = 0
    log_start_offset: int = 0
    # Records to send are [fetch_offset, read_up_to) (the leader's LEO for a follower).
    read_up_to: int = 0
    high_watermark_moved: bool = False
    isr_proposal: IsrProposal | None = None


@dataclass(frozen=True, slots=True)
class FetchBounds:
    """A consumer fetch: an error, or the records [fetch_offset, read_up_to)."""

    error: type[KafkaError] | None
    read_up_to: int = 0


@dataclass(frozen=True, slots=True)
class AppendResult:
    """After a leader's local append of a produce: what to do with the request."""

    high_watermark_moved: bool
    # acks=1: answer now. acks=0: never answer. acks=all: park until HW >= wait_for_offset.
    respond_now: bool
    wait_for_offset: int | None


@dataclass(frozen=True, slots=True)
class ReplicationStatus:
    """What the purgatory needs to decide an acks=all waiter (Kafka's
    checkEnoughReplicasReachOffset inputs)."""

    is_leader: bool
    high_watermark: int
    maximal_isr_size: int
    min_insync_replicas: int

    def check(self, required_offset: int) -> tuple[bool, type[KafkaError] | None]:
        """(done, error) for a produce waiting for HW >= required_offset."""
        if not self.is_leader:
            return True, NotLeaderOrFollowerError
        # Appended, but the ISR shrank below the minimum meanwhile: the durability
        # promise is not kept, and the HW stays put until the ISR is back (KIP-966's
        # strict min ISR), so the answer comes now rather than at the request's timeout.
        if self.maximal_isr_size < self.min_insync_replicas:
            return True, NotEnoughReplicasAfterAppendError
        if self.high_watermark < required_offset:
            return False, None
        return True, None


@dataclass(frozen=True, slots=True)
class AlterPartitionOutcome:
    applied: bool
    reason: str
    high_watermark_moved: bool = False
    isr_changed: bool = False
    # Send this proposal again (a retriable error such as NOT_CONTROLLER).
    retry: IsrProposal | None = None


@dataclass(frozen=True, slots=True)
class FollowerFetchOutcome:
    """A follower's handling of its leader's fetch response."""

    # Truncate the local log (and its epoch cache) to this offset, then fetch from it.
    truncate_to: int | None
    high_watermark_moved: bool
    # The log start to move the log to (the leader's, within our log); -1: unchanged.
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class _PendingIsr:
    proposal: IsrProposal


class PartitionState:
    """One replica of one partition. See the module docstring."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        local_broker_id: int,
        epochs: EpochEndOffsets | None = None,
        log_end_offset: int | None = None,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        config: ReplicationConfig | None = None,
        log: LogOffsets | None = None,
    ) -> None:
        if log is None:
            if epochs is None or log_end_offset is None:
                raise ValueError("a state needs a log, or epochs and a log end offset")
            if not 0 <= log_start_offset <= log_end_offset:
                raise ValueError(f"log start {log_start_offset} must be in [0, {log_end_offset}]")
            log = _NumbersOnly(epochs, log_start_offset, log_end_offset)
        elif epochs is not None or log_end_offset is not None or log_start_offset != 0:
            raise ValueError("with a log, its offsets and epochs come from the log")
        self._log: LogOffsets = log
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.config = config or ReplicationConfig()
        self.role = ReplicaRole.NONE
        self.leader_id: int | None = None
        self.leader_epoch = UNDEFINED_EPOCH
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.committed_isr: frozenset[int] = frozenset()
        self._pending: _PendingIsr | None = None
        # A checkpointed HW may lag the log but never exceeds it.
        self.high_watermark = max(self.log_start_offset, min(high_watermark, self.log_end_offset))
        self.leader_epoch_start_offset: int | None = None
        self._followers: dict[int, FollowerProgress] = {}
        # For the invariants: the largest leader epoch seen, and (epoch, HW) as last led.
        self._epoch_seen = UNDEFINED_EPOCH
        self._led: tuple[int, int] | None = None
        self._check()

    # ------------------------------------------------------------------ views

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    def _numbers(self) -> _NumbersOnly | None:
        return self._log if isinstance(self._log, _NumbersOnly) else None

    @property
    def is_leader(self) -> bool:
        return self.role is ReplicaRole.LEADER

    @property
    def pending_isr_change(self) -> IsrProposal | None:
        return None if self._pending is None else self._pending.proposal

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR the HW is computed over: committed plus a replica being added."""
        if self._pending is not None and self._pending.proposal.kind is IsrChangeKind.EXPAND:
            return self.committed_isr | frozenset(self._pending.proposal.changed)
        return self.committed_isr

    def follower(self, replica_id: int) -> FollowerProgress | None:
        return self._followers.get(replica_id)

    def replication_status(self) -> ReplicationStatus:
        return ReplicationStatus(
            is_leader=self.is_leader,
            high_watermark=self.high_watermark,
            maximal_isr_size=len(self.maximal_isr),
            min_insync_replicas=self.config.min_insync_replicas,
        )

    # ------------------------------------------------------ metadata transitions

    def _stale_reason(
        self, leader_epoch: int, partition_epoch: int, role: ReplicaRole
    ) -> str | None:
        if leader_epoch < self.leader_epoch:
            return f"leader epoch {leader_epoch} is older than ours {self.leader_epoch}"
        if partition_epoch < self.partition_epoch:
            return f"partition epoch {partition_epoch} is older than ours {self.partition_epoch}"
        if (
            leader_epoch == self.leader_epoch
            and partition_epoch == self.partition_epoch
            and self.role is role
        ):
            return f"already at leader epoch {leader_epoch}, partition epoch {partition_epoch}"
        return None

    def _set_assignment(self, replicas: Collection[int], isr: Collection[int]) -> None:
        if len(replicas) > REPLICAS_MAX:
            raise ValueError(f"{len(replicas)} replicas exceed REPLICAS_MAX={REPLICAS_MAX}")
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"replicas {list(replicas)} repeat a broker")
        if not set(isr) <= set(replicas):
            raise ValueError(f"ISR {sorted(isr)} is not within replicas {list(replicas)}")
        self.replicas = tuple(replicas)
        self.committed_isr = frozenset(isr)

    def make_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Collection[int],
        isr: Collection[int],
        now_ms: int,
    ) -> StateChange:
        """Committed metadata names this broker leader. Applied only if not stale."""
        stale = self._stale_reason(leader_epoch, partition_epoch, ReplicaRole.LEADER)
        if stale is not None:
            return StateChange(applied=False, reason=stale)
        if self.local_broker_id not in isr:
            raise ValueError(f"leader {self.local_broker_id} is not in the ISR {sorted(isr)}")
        was_leader = self.is_leader
        new_epoch = leader_epoch > self.leader_epoch
        if not was_leader and not new_epoch:
            # Every leader change bumps the leader epoch; leading in an epoch we did not
            # lead from its start would leave followers' divergence undetectable.
            return StateChange(
                applied=False, reason=f"leader epoch {leader_epoch} is not new for a new leader"
            )
        before_isr = self.maximal_isr if was_leader else frozenset()
        self._set_assignment(replicas, isr)
        self.partition_epoch = partition_epoch
        self._pending = None
        self.role = ReplicaRole.LEADER
        self.leader_id = self.local_broker_id
        assign: tuple[int, int] | None = None
        remotes = [r for r in self.replicas if r != self.local_broker_id]
        if new_epoch:
            self.leader_epoch = leader_epoch
            # Records of this epoch start here; followers holding a suffix from a later
            # epoch of a deposed leader find their divergence through this entry.
            self.leader_epoch_start_offset = self.log_end_offset
            assign = (leader_epoch, self.log_end_offset)
            self._followers = {
                r: self._reset_follower(r, now_ms=now_ms, new_leader=not was_leader)
                for r in remotes
            }
        else:
            # Same epoch, new assignment or ISR: keep what we know, add new replicas.
            self._followers = {
                r: self._followers.get(r) or FollowerProgress(replica_id=r) for r in remotes
            }
        moved = self._maybe_increment_high_watermark()
        self._check()
        return StateChange(
            applied=True,
            reason="became leader" if not was_leader else "leader state updated",
            assign_epoch_start_offset=assign,
            high_watermark_moved=moved,
            isr_changed=was_leader and self.maximal_isr != before_isr,
        )

    def _reset_follower(
        self, replica_id: int, *, now_ms: int, new_leader: bool
    ) -> FollowerProgress:
        # ISR members start as just caught up so the new leader does not drop them
        # before they had a chance to fetch; others start at 0 so they do not hold the
        # HW back.
        in_sync = replica_id in self.committed_isr
        caught_up_ms = now_ms if in_sync else 0
        old = self._followers.get(replica_id)
        if new_leader or old is None:
            return FollowerProgress(replica_id=replica_id, last_caught_up_time_ms=caught_up_ms)
        # Re-elected leader: what we learned of the follower's log still holds.
        return replace(
            old,
            last_fetch_leader_log_end_offset=self.log_end_offset,
            last_fetch_time_ms=now_ms if in_sync else 0,
            last_caught_up_time_ms=caught_up_ms,
        )

    def make_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Collection[int],
        isr: Collection[int],
        now_ms: int,
    ) -> StateChange:
        """Committed metadata names another broker leader. Applied only if not stale."""
        del now_ms  # Kept for symmetry with make_leader; a follower tracks no peer times.
        stale = self._stale_reason(leader_epoch, partition_epoch, ReplicaRole.FOLLOWER)
        if stale is not None:
            return StateChange(applied=False, reason=stale)
        if leader_id == self.local_broker_id:
            raise ValueError("make_follower names this broker as the leader")
        was_leader = self.is_leader
        restart = (
            self.role is not ReplicaRole.FOLLOWER
            or leader_epoch > self.leader_epoch
            or (self.leader_id != leader_id)
        )
        self._set_assignment(replicas, isr)
        self.partition_epoch = partition_epoch
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self._pending = None
        self.role = ReplicaRole.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch_start_offset = None
        self._followers = {}
        self._check()
        return StateChange(
            applied=True,
            reason="became follower" if restart else "follower state updated",
            leadership_lost=was_leader,
            fetch_from_leader=leader_id if restart else None,
        )

    def make_offline(self) -> StateChange:
        """The log directory failed (or the partition was deleted): serve nothing."""
        was_leader = self.is_leader
        self.role = ReplicaRole.OFFLINE
        self.leader_id = None
        self._pending = None
        self._followers = {}
        self.leader_epoch_start_offset = None
        return StateChange(applied=True, reason="offline", leadership_lost=was_leader)

    # ------------------------------------------------------------- leader side

    def _epoch_error(self, current_leader_epoch: int | None) -> type[KafkaError] | None:
        # KIP-320: a client that knows an older epoch is fenced; one that knows a newer
        # epoch than ours means our metadata is behind.
        if current_leader_epoch is None or current_leader_epoch == UNDEFINED_EPOCH:
            return None
        if current_leader_epoch < self.leader_epoch:
            return FencedLeaderEpochError
        if current_leader_epoch > self.leader_epoch:
            return UnknownLeaderEpochError
        return None

    def _maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        # KIP-966's strict min ISR: below min.insync.replicas the HW stays where it is,
        # so every replica that left the ISR meanwhile still holds every record below
        # it and the controller may elect it (the ELR, metadata/election.py). acks=0/1
        # records written meanwhile become visible once the ISR is back.
        if len(self.committed_isr) < min(self.config.min_insync_replicas, len(self.replicas)):
            return False
        new_hw = self.log_end_offset
        for replica_id in self.maximal_isr:
            if replica_id != self.local_broker_id:
                progress = self._followers.get(replica_id)
                new_hw = min(
                    new_hw, UNKNOWN_OFFSET if progress is None else progress.log_end_offset
                )
        # Forward only: a new leader's HW may trail until its followers fetch again.
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def on_follower_fetch(
        self,
        *,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        broker_epoch: int,
        registered_epoch: int | None,
        now_ms: int,
        current_leader_epoch: int | None = None,
        follower_log_start_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerFetchResult:
        """A follower fetches from ``fetch_offset``; its last record has epoch
        ``last_fetched_epoch`` (None when its log is empty). ``registered_epoch`` is the
        broker epoch of that broker's current registration in the metadata image (None:
        fenced or not registered)."""
        # --- follower identity (KIP-903, DESIGN invariant 9) ----------------------------
        # A fetch is credited only from a replica of this partition whose broker epoch is
        # exactly its current registration's: anything else (another incarnation, an
        # impostor, a fetch without an epoch) is refused before any state is touched, so
        # it can neither move the HW nor keep a replica in the ISR.
        error = self._epoch_error(current_leader_epoch)
        if error is None and not self.is_leader:
            error = NotLeaderOrFollowerError
        if error is None and (replica_id not in self._followers):
            error = NotLeaderOrFollowerError
        if error is None and (registered_epoch is None or broker_epoch != registered_epoch):
            # Kafka's controller answers STALE_BROKER_EPOCH to any epoch other than the
            # registration's (older, newer, or -1); the fetcher backs off and retries.
            error = StaleBrokerEpochError
        progress = self._followers.get(replica_id)
        if error is None and progress is not None and broker_epoch < progress.broker_epoch:
            # Older than one already credited (the image cannot go back, but be strict).
            error = StaleBrokerEpochError
        if error is not None or progress is None:
            return self._fetch_result(error=error or NotLeaderOrFollowerError)
        new_incarnation = (
            progress.broker_epoch != NO_BROKER_EPOCH and broker_epoch > progress.broker_epoch
        )
        if new_incarnation:
            # The broker restarted (maybe with an empty disk): what we knew of its log
            # belongs to the old incarnation. Forget it, so its caught-up time counts
            # from now on only, not from before the restart.
            progress = FollowerProgress(replica_id=replica_id, broker_epoch=broker_epoch)
        # --- end of follower identity ---------------------------------------------------
        if last_fetched_epoch is not None and last_fetched_epoch != UNDEFINED_EPOCH:
            epoch, end_offset = self._log.end_offset_for(last_fetched_epoch, self.log_end_offset)
            if end_offset < fetch_offset or epoch < last_fetched_epoch:
                # The follower holds records we do not: tell it where our log of that
                # epoch ends; no progress is recorded from a diverging fetch.
                return self._fetch_result(diverging=EpochEndOffset(epoch, end_offset))
        if not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            return self._fetch_result(error=OffsetOutOfRangeError)
        previous_leo = progress.log_end_offset
        if fetch_offset >= self.log_end_offset:
            caught_up_ms = max(progress.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_log_end_offset:
            caught_up_ms = max(progress.last_caught_up_time_ms, progress.last_fetch_time_ms)
        else:
            caught_up_ms = progress.last_caught_up_time_ms
        progress = FollowerProgress(
            replica_id=replica_id,
            log_end_offset=fetch_offset,
            log_start_offset=follower_log_start_offset,
            last_fetch_leader_log_end_offset=max(
                self.log_end_offset, progress.last_fetch_leader_log_end_offset
            ),
            last_fetch_time_ms=now_ms,
            last_caught_up_time_ms=caught_up_ms,
            broker_epoch=broker_epoch,
        )
        self._followers[replica_id] = progress
        moved = previous_leo != fetch_offset and self._maybe_increment_high_watermark()
        proposal = self._maybe_expand_isr(progress)
        if (
            proposal is None
            and new_incarnation
            and self._pending is None
            and replica_id in self.committed_isr
            and fetch_offset < self.high_watermark
        ):
            # A new incarnation in the ISR without all committed records (restarted on
            # an empty or damaged disk): out of the ISR at once, not after
            # replica.lag.time.max.ms; it comes back through an expand once caught up.
            proposal = self._propose(
                IsrChangeKind.SHRINK, self.committed_isr - {replica_id}, (replica_id,)
            )
        self._check()
        return self._fetch_result(moved=moved, proposal=proposal)

    def _fetch_result(
        self,
        *,
        error: type[KafkaError] | None = None,
        diverging: EpochEndOffset | None = None,
        moved: bool = False,
        proposal: IsrProposal | None = None,
    ) -> FollowerFetchResult:
        return FollowerFetchResult(
            error=error,
            diverging_epoch=diverging,
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            read_up_to=self.log_end_offset if error is None and diverging is None else 0,
            high_watermark_moved=moved,
            isr_proposal=proposal,
        )

    def _propose(
        self, kind: IsrChangeKind, new_isr: Iterable[int], changed: Iterable[int]
    ) -> IsrProposal:
        assert self._pending is None, "one AlterPartition in flight at a time"
        proposal = IsrProposal(
            topic=self.topic,
            partition=self.partition,
            kind=kind,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr=tuple(sorted(new_isr)),
            changed=tuple(sorted(changed)),
        )
        self._pending = _PendingIsr(proposal)
        return proposal

    def _maybe_expand_isr(self, progress: FollowerProgress) -> IsrProposal | None:
        if self._pending is not None or progress.replica_id in self.committed_isr:
            return None
        start = self.leader_epoch_start_offset
        # In sync: holds everything committed, and something of this leader's epoch, so
        # its log cannot still carry a suffix a previous leader wrote and we lack.
        if (
            start is None
            or progress.log_end_offset < self.high_watermark
            or progress.log_end_offset < start
        ):
            return None
        return self._propose(
            IsrChangeKind.EXPAND,
            self.committed_isr | {progress.replica_id},
            (progress.replica_id,),
        )

    def maybe_shrink_isr(self, *, now_ms: int) -> IsrProposal | None:
        """Propose an ISR without the followers that have not caught up within
        replica.lag.time.max.ms. The leader itself is never removed."""
        if not self.is_leader or self._pending is not None:
            return None
        lag_max_ms = self.config.replica_lag_time_max_ms
        out_of_sync = sorted(
            r
            for r in self.committed_isr
            if r != self.local_broker_id
            and not (
                (p := self._followers.get(r)) is not None
                and p.is_caught_up(
                    leader_log_end_offset=self.log_end_offset, now_ms=now_ms, lag_max_ms=lag_max_ms
                )
            )
        )
        if not out_of_sync:
            return None
        return self._propose(
            IsrChangeKind.SHRINK, self.committed_isr - set(out_of_sync), out_of_sync
        )

    def on_alter_partition_response(
        self,
        *,
        proposal: IsrProposal,
        error: type[KafkaError] | None,
        leader_epoch: int = UNDEFINED_EPOCH,
        partition_epoch: int = -1,
        isr: Collection[int] = (),
    ) -> AlterPartitionOutcome:
        """The controller answered ``proposal``: an error, or the partition's committed
        leader epoch, partition epoch and ISR."""
        if self._pending is None or self._pending.proposal != proposal:
            return AlterPartitionOutcome(applied=False, reason="not the proposal in flight")
        if error is not None:
            if error.name in _ALTER_NOT_APPLIED:
                self._pending = None
                return AlterPartitionOutcome(
                    applied=False,
                    reason=f"{error.name}: not applied, back to the committed ISR",
                    isr_changed=proposal.kind is IsrChangeKind.EXPAND,
                )
            if error.name in _ALTER_AWAIT_METADATA:
                # Whether it applied is unknown: falling back to the smaller ISR could
                # let the HW pass a replica the controller may elect. Wait for metadata.
                return AlterPartitionOutcome(
                    applied=False, reason=f"{error.name}: awaiting newer metadata"
                )
            return AlterPartitionOutcome(
                applied=False, reason=f"{error.name}: retrying", retry=proposal
            )
        if leader_epoch != self.leader_epoch:
            return AlterPartitionOutcome(
                applied=False, reason=f"response leader epoch {leader_epoch} is not ours"
            )
        if partition_epoch < self.partition_epoch:
            return AlterPartitionOutcome(
                applied=False, reason=f"response partition epoch {partition_epoch} is stale"
            )
        before = self.maximal_isr
        if self.local_broker_id not in isr:
            raise ValueError(f"committed ISR {sorted(isr)} lacks the leader")
        self._set_assignment(self.replicas, isr)
        self.partition_epoch = partition_epoch
        self._pending = None
        moved = self._maybe_increment_high_watermark()
        self._check()
        return AlterPartitionOutcome(
            applied=True,
            reason="ISR committed",
            high_watermark_moved=moved,
            isr_changed=self.maximal_isr != before,
        )

    def check_produce(
        self, *, acks: int, current_leader_epoch: int | None = None
    ) -> type[KafkaError] | None:
        """Before appending a produce: may it be appended at all?"""
        if acks not in VALID_ACKS:
            return InvalidRequiredAcksError
        error = self._epoch_error(current_leader_epoch)
        if error is not None:
            return error
        if not self.is_leader:
            return NotLeaderOrFollowerError
        # The committed ISR: only it is known to the controller as durable company.
        if acks == ACKS_ALL and len(self.committed_isr) < self.config.min_insync_replicas:
            return NotEnoughReplicasError
        return None

    def on_leader_append(self, *, last_offset: int, acks: int) -> AppendResult:
        """The shell appended a produce's records up to ``last_offset`` on the leader."""
        assert self.is_leader, "only a leader appends produced records"
        assert acks in VALID_ACKS, acks
        numbers = self._numbers()
        if numbers is not None:
            assert last_offset >= numbers.log_end_offset, "appends extend the log"
            numbers.log_end_offset = last_offset + 1
        assert self.log_end_offset == last_offset + 1, "the log holds the append"
        moved = self._maybe_increment_high_watermark()
        self._check()
        return AppendResult(
            high_watermark_moved=moved,
            respond_now=acks == 1,
            wait_for_offset=last_offset + 1 if acks == ACKS_ALL else None,
        )

    def check_consumer_fetch(
        self, *, fetch_offset: int, current_leader_epoch: int | None = None
    ) -> FetchBounds:
        """A consumer fetch: readable up to the HW, from an offset in [log start, LEO]."""
        error = self._epoch_error(current_leader_epoch)
        if error is None and not self.is_leader:
            error = NotLeaderOrFollowerError
        if error is None and not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            error = OffsetOutOfRangeError
        if error is not None:
            return FetchBounds(error=error)
        return FetchBounds(error=None, read_up_to=max(fetch_offset, self.high_watermark))

    def end_offset_for_epoch(
        self, *, leader_epoch: int, current_leader_epoch: int | None = None
    ) -> tuple[type[KafkaError] | None, EpochEndOffset]:
        """OffsetForLeaderEpoch from a client (Kafka's lastOffsetForLeaderEpoch with
        fetchOnlyFromLeader): the epoch checks and leader check of a consumer fetch,
        then where the largest epoch <= ``leader_epoch`` ends in this log."""
        error = self._epoch_error(current_leader_epoch)
        if error is None and not self.is_leader:
            error = NotLeaderOrFollowerError
        if error is not None:
            return error, EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        epoch, end_offset = self._log.end_offset_for(leader_epoch, self.log_end_offset)
        return None, EpochEndOffset(epoch, end_offset)

    def on_log_start_offset(self, *, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start (never past the HW)."""
        assert log_start_offset <= self.high_watermark, "only committed records are deleted"
        numbers = self._numbers()
        if numbers is not None:
            numbers.log_start_offset = max(numbers.log_start_offset, log_start_offset)
        assert self.log_start_offset >= log_start_offset, "the log start moved first"
        self._check()

    def on_log_truncated(self) -> None:
        """The log was cut (a diverging follower) or restarted elsewhere (a follower
        below its leader's log start): bring the HW within it."""
        assert not self.is_leader, "a leader never truncates"
        self.high_watermark = max(
            self.log_start_offset, min(self.high_watermark, self.log_end_offset)
        )
        self._check()

    # ----------------------------------------------------------- follower side

    def on_fetch_response(
        self,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        diverging_epoch: EpochEndOffset | None,
        appended_up_to: int,
    ) -> FollowerFetchOutcome:
        """The leader answered our fetch; the shell has appended its records, so our LEO
        is now ``appended_up_to`` (unchanged when the answer was a diverging epoch)."""
        assert self.role is ReplicaRole.FOLLOWER, "only a follower handles fetch responses"
        numbers = self._numbers()
        if diverging_epoch is not None:
            assert appended_up_to == self.log_end_offset, "a diverging answer has no records"
            target = self.truncation_offset(diverging_epoch)
            if numbers is not None:
                numbers.log_end_offset = min(numbers.log_end_offset, target)
                numbers.log_start_offset = min(numbers.log_start_offset, numbers.log_end_offset)
                self.on_log_truncated()
            # With a real log the core truncates it, then calls on_log_truncated.
            return FollowerFetchOutcome(truncate_to=target, high_watermark_moved=False)
        if numbers is not None:
            assert appended_up_to >= numbers.log_end_offset, "appends extend the log"
            numbers.log_end_offset = appended_up_to
        assert self.log_end_offset == appended_up_to, "the log holds the append"
        # The leader's log start only moves forward and we never start past our own end.
        new_start = max(self.log_start_offset, min(leader_log_start_offset, self.log_end_offset))
        new_hw = max(
            self.high_watermark, new_start, min(leader_high_watermark, self.log_end_offset)
        )
        moved = new_hw != self.high_watermark
        self.high_watermark = new_hw
        if numbers is not None:
            numbers.log_start_offset = new_start
        self._check()
        return FollowerFetchOutcome(
            truncate_to=None,
            high_watermark_moved=moved,
            log_start_offset=new_start if new_start != self.log_start_offset else -1,
        )

    def fetch_response_is_idle(
        self, *, leader_high_watermark: int, leader_log_start_offset: int
    ) -> bool:
        """Whether an answer with no records and no diverging epoch would change
        nothing here (:meth:`on_fetch_response` would move neither the HW nor the log
        start): the case of every idle partition in a follower's fetch, which the
        follower may then skip."""
        leo = self.log_end_offset
        return (
            min(leader_log_start_offset, leo) <= self.log_start_offset
            and min(leader_high_watermark, leo) <= self.high_watermark
        )

    def truncation_offset(self, diverging: EpochEndOffset) -> int:
        """Where a follower cuts its log when its leader reports ``diverging``."""
        leo = self.log_end_offset
        if diverging.end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader knows no epoch at or below ours: keep only what is committed.
            return self.high_watermark
        epoch, end_offset = self._log.end_offset_for(diverging.epoch, leo)
        if epoch == UNDEFINED_EPOCH:
            # We track no epoch that old: the leader's end offset is the best bound.
            return min(diverging.end_offset, leo)
        if epoch != diverging.epoch:
            # We never had the leader's epoch: cut back to the end of our largest epoch
            # below it; the next fetch names that epoch and converges further.
            return min(end_offset, leo)
        return min(end_offset, diverging.end_offset, leo)

    # -------------------------------------------------------------- invariants

    def _check(self) -> None:
        assert 0 <= self.log_start_offset <= self.high_watermark <= self.log_end_offset, (
            self.log_start_offset,
            self.high_watermark,
            self.log_end_offset,
        )
        if self.is_leader:
            assert self.local_broker_id in self.committed_isr, "the ISR contains the leader"
            assert self.maximal_isr >= self.committed_isr
            assert self.maximal_isr <= set(self.replicas)
            assert self.leader_epoch_start_offset is not None
            if self._led is not None and self._led[0] == self.leader_epoch:
                assert self.high_watermark >= self._led[1], "a leader's HW never falls"
            self._led = (self.leader_epoch, self.high_watermark)
        assert self.leader_epoch >= self._epoch_seen, "leader epochs only grow"
        self._epoch_seen = self.leader_epoch
