"""The partition core: one replica of one partition, pure of network, clock and files.

(Over 700 lines: one core for the leader and the follower role, whose every method
returns the same Ready; the state machine itself is in partition_state.py.)

Theory of operation
-------------------
A :class:`Replica` owns everything one partition replica decides: the replication
state (:class:`PartitionState`: role, HW, ISR, epochs, follower progress), the
idempotent producers' de-duplication table (:class:`ProducerStateManager`) and its log,
seen only through the small :class:`PartitionLog` interface (the segment log on a
broker, :class:`MemoryPartitionLog` in tests and the replication simulation).

Its methods are the events a partition sees, each with the inputs it needs (and
``now_ms`` where time matters): committed metadata (:meth:`on_metadata_change`), a
produce (:meth:`append_as_leader`), a transaction marker (:meth:`write_txn_marker`), a
follower's fetch (:meth:`on_follower_fetch`), a consumer's fetch (:meth:`read_for_consumer`,
read_committed below the last stable offset), the leader's answer to our own fetch
(:meth:`on_fetch_answer`, :meth:`on_fetch_out_of_range`), DeleteRecords
(:meth:`delete_records`), the controller's AlterPartition answer
(:meth:`on_alter_partition_response`), retention, producer expiry and the ISR timer
(:meth:`tick`). Each returns a small frozen result whose :class:`Ready` says what the
shell (the ``ReplicaManager``) must carry out, in the etcd-raft style: complete or fail
the produce purgatory's waiters, wake parked fetches, send an AlterPartition, start or
stop fetching from a leader, snapshot the producer state.

Where the numbers live. The log is the single source of truth for the log start and
log end offsets: the core changes the log first (append, truncate, move the start) and
the replication state reads both offsets from it, so no copy can drift and nothing
re-syncs the state from outside. The HW is the core's own
(``PartitionState.high_watermark``); after every change the core tells the log
(``persist_high_watermark``) so that the HW checkpoint and retention see it.

Log calls are synchronous here (the segment log's appends are); when they move to I/O
workers, the calls stay behind :class:`PartitionLog` and the change is local to this
module and the shell. Not thread safe: one replica is driven from one task.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from raftka.broker.producer_state import (
    Append,
    Duplicate,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateManager,
    Rejected,
    VerificationGuard,
    in_sequence,
)
from raftka.broker.replication.partition_log import PartitionLog
from raftka.broker.replication.partition_state import (
    ACKS_ALL,
    UNKNOWN_OFFSET,
    AlterPartitionOutcome,
    IsrProposal,
    PartitionState,
    ReplicaRole,
    ReplicationConfig,
    StateChange,
)
from raftka.broker.transaction_recovery import aborted_entry, apply_stored_batches
from raftka.common.errors import (
    CorruptMessageError,
    DuplicateSequenceNumberError,
    InvalidTxnStateError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
)
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.record.header import iter_batches, parse_header, peek_batch_size
from raftka.common.record.read_committed import AbortedTransaction
from raftka.common.structs import EpochEndOffset
from raftka.common.time import wall_clock_ms
from raftka.storage.log import LogAppendInfo
from raftka.storage.log_validator import ValidationConfig, recompress, validate_client_batches

__all__ = [
    "HIGH_WATERMARK",
    "READ_COMMITTED",
    "ConsumerRead",
    "FetchAnswer",
    "FetchPosition",
    "FollowerRead",
    "MetadataOutcome",
    "ProduceOutcome",
    "Ready",
    "Replica",
    "low_watermark",
    "target_offset",
]

#: The DeleteRecords offset that means "up to the high watermark" (Kafka's -1).
HIGH_WATERMARK: Final = -1
#: Kafka's isolation_level for a fetch or ListOffsets: data only below the LSO.
READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class Ready:
    """What the shell must do after a core call (all of it may be empty)."""

    # The HW moved (the log has been told): complete the produce purgatory's waiters.
    high_watermark_moved: bool = False
    # The ISR the purgatory's checks use changed: re-check its waiters.
    isr_changed: bool = False
    # This replica led and no longer does: fail the purgatory's waiters.
    leadership_lost: bool = False
    # Records, HW or log start changed: wake fetches parked on this partition.
    wake_fetches: bool = False
    # Send this AlterPartition to the controller (one in flight per partition).
    isr_proposal: IsrProposal | None = None
    # (Re)start fetching from this leader.
    fetch_from_leader: int | None = None
    # The active segment rolled: snapshot the producer state (:meth:`Replica.snapshot_producers`).
    snapshot_due: bool = False

    def __or__(self, other: Ready) -> Ready:
        return Ready(
            high_watermark_moved=self.high_watermark_moved or other.high_watermark_moved,
            isr_changed=self.isr_changed or other.isr_changed,
            leadership_lost=self.leadership_lost or other.leadership_lost,
            wake_fetches=self.wake_fetches or other.wake_fetches,
            isr_proposal=self.isr_proposal or other.isr_proposal,
            fetch_from_leader=(
                self.fetch_from_leader
                if other.fetch_from_leader is None
                else other.fetch_from_leader
            ),
            snapshot_due=self.snapshot_due or other.snapshot_due,
        )


NOTHING: Final = Ready()


@dataclass(frozen=True, slots=True)
class MetadataOutcome:
    applied: bool
    reason: str
    ready: Ready = NOTHING


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    """A produce on the leader: an error, or where the records went and, for acks=all,
    the offset the HW must reach before the answer (``wait_for_offset``)."""

    error: KafkaError | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    wait_for_offset: int | None = None
    # A retry of batches already in the log: answered with their original offsets.
    duplicate: bool = False
    ready: Ready = NOTHING


@dataclass(frozen=True, slots=True)
class FollowerRead:
    """The leader's answer to a follower's fetch."""

    error: KafkaError | None = None
    diverging_epoch: EpochEndOffset | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    ready: Ready = NOTHING


@dataclass(frozen=True, slots=True)
class ConsumerRead:
    error: KafkaError | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    # read_committed only: the aborted transactions overlapping the records (Kafka's
    # answer has null for read_uncommitted).
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """Where this follower fetches from next (the replica fetcher's request)."""

    fetch_offset: int
    last_fetched_epoch: int | None
    log_start_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """A follower's handling of its leader's answer."""

    # (from, to) when the log was cut back (a diverging epoch), for the shell's log line.
    truncated: tuple[int, int] | None = None
    ready: Ready = NOTHING


def target_offset(state: PartitionState, requested: int) -> int | KafkaError:
    """The log start offset a DeleteRecords of ``requested`` moves to, or its error."""
    name = f"{state.topic}-{state.partition}"
    if not state.is_leader:
        return NotLeaderOrFollowerError(f"this broker does not lead {name}")
    if requested == HIGH_WATERMARK:
        return state.high_watermark
    if requested < 0 or requested > state.high_watermark:
        return OffsetOutOfRangeError(
            f"cannot delete records of {name} before offset {requested}: it must be in "
            f"[0, {state.high_watermark}] (the high watermark), or -1"
        )
    return requested


def low_watermark(state: PartitionState) -> int:
    """The smallest log start among the leader and its in-sync followers (a follower
    not heard from yet counts as 0: it has not shown that it moved)."""
    starts = [state.log_start_offset]
    for replica in state.committed_isr:
        if replica == state.local_broker_id:
            continue
        progress = state.follower(replica)
        starts.append(0 if progress is None else max(progress.log_start_offset, 0))
    return min(starts)


class Replica:
    """One partition replica. See the module docstring."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        local_broker_id: int,
        log: PartitionLog,
        high_watermark: int = 0,
        config: ReplicationConfig | None = None,
        producer_config: ProducerStateConfig | None = None,
        validation: ValidationConfig | None = None,
        wall_clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.log = log
        # What a producer's batches are checked against before any is appended (Kafka's
        # LogValidator); the shell replaces it when the topic's configs change.
        self.validation = validation or ValidationConfig()
        # Record timestamps are wall-clock times, so their window is checked against
        # the wall clock, not the monotonic now_ms every other decision takes.
        self._wall_clock_ms = wall_clock_ms
        self.producer_config = producer_config or ProducerStateConfig()
        self.state = PartitionState(
            topic=topic,
            partition=partition,
            local_broker_id=local_broker_id,
            high_watermark=high_watermark,
            config=config,
            log=log,
        )
        self.producers = log.load_producer_state(self.producer_config)
        # The active segment when the producer state was last snapshotted: a roll since
        # then makes the next snapshot due (broker/producer_state_store.py).
        self._snapshot_segment_base = log.active_segment_base_offset
        self._persist_hw()

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def name(self) -> str:
        return f"{self.state.topic}-{self.state.partition}"

    def _persist_hw(self) -> None:
        high_watermark = self.state.high_watermark
        self.log.persist_high_watermark(high_watermark)
        # Completed transactions whose marker is now committed stop holding the last
        # stable offset back (producer state's "unreplicated" transactions).
        self.producers.on_high_watermark_updated(high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: read_committed consumers read only below it. Never below the log
        start (Kafka's rule): DeleteRecords may remove an open transaction's first
        batches, and replicas that rebuilt their state since disagree on where it
        started, but not on this."""
        state = self.state
        return max(state.log_start_offset, self.producers.last_stable_offset(state.high_watermark))

    def _after_state_change(self, change: StateChange) -> Ready:
        if change.high_watermark_moved:
            self._persist_hw()
        return Ready(
            high_watermark_moved=change.high_watermark_moved,
            isr_changed=change.isr_changed,
            leadership_lost=change.leadership_lost,
            wake_fetches=True,
        )

    def _snapshot_due(self) -> bool:
        base = self.log.active_segment_base_offset
        if base == self._snapshot_segment_base:
            return False
        self._snapshot_segment_base = base
        return True

    def _reload_producers(self) -> None:
        """Rebuild producer state from the log (after a truncation). The replay counts
        every transaction it completed as unreplicated: those below the HW are not."""
        self.producers = self.log.load_producer_state(self.producer_config)
        self.producers.on_high_watermark_updated(self.state.high_watermark)

    def snapshot_producers(self) -> None:
        """Write the producer-state snapshot (may raise OSError: only recovery time
        suffers, it replays from an older snapshot)."""
        self.log.snapshot_producer_state(self.producers)

    # ================================================================ metadata

    def on_metadata_change(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Collection[int],
        isr: Collection[int],
        now_ms: int,
    ) -> MetadataOutcome:
        """Committed metadata for this partition: lead or follow ``leader_id``."""
        if leader_id == self.state.local_broker_id:
            try:
                change = self.state.make_leader(
                    leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch,
                    replicas=replicas,
                    isr=isr,
                    now_ms=now_ms,
                )
            except ValueError as e:
                return MetadataOutcome(applied=False, reason=f"cannot become leader: {e}")
            if change.applied and change.assign_epoch_start_offset is not None:
                epoch, start = change.assign_epoch_start_offset
                self.log.assign_epoch(epoch, start)
        else:
            change = self.state.make_follower(
                leader_id=leader_id,
                leader_epoch=leader_epoch,
                partition_epoch=partition_epoch,
                replicas=replicas,
                isr=isr,
                now_ms=now_ms,
            )
        if not change.applied:
            return MetadataOutcome(applied=False, reason=change.reason)
        ready = self._after_state_change(change)
        if change.fetch_from_leader is not None:
            ready = ready | Ready(fetch_from_leader=change.fetch_from_leader)
        return MetadataOutcome(applied=True, reason=change.reason, ready=ready)

    def go_offline(self) -> Ready:
        """The partition was deleted or its log directory failed: serve nothing."""
        return self._after_state_change(self.state.make_offline())

    def on_alter_partition_response(
        self,
        *,
        proposal: IsrProposal,
        error: type[KafkaError] | None,
        leader_epoch: int = -1,
        partition_epoch: int = -1,
        isr: Collection[int] = (),
    ) -> tuple[AlterPartitionOutcome, Ready]:
        outcome = self.state.on_alter_partition_response(
            proposal=proposal,
            error=error,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            isr=isr,
        )
        if outcome.high_watermark_moved:
            self._persist_hw()
        ready = Ready(
            high_watermark_moved=outcome.high_watermark_moved,
            isr_changed=outcome.isr_changed,
            wake_fetches=outcome.high_watermark_moved,
        )
        return outcome, ready

    # ================================================================ leader side

    def append_as_leader(
        self,
        data: bytes,
        *,
        acks: int,
        local: str = "",
        txn_guards: Mapping[int, VerificationGuard] | None = None,
    ) -> ProduceOutcome:
        """A produce of ``data`` (record batches) with ``acks``: check, de-duplicate,
        append. ``local`` names this broker in error messages.

        ``txn_guards`` is KIP-890 part 1 (None: ``transaction.partition.verification.
        enable`` is off): a transactional batch that would start its producer's
        transaction here is appended only if the shell verified it with the
        coordinator and holds the guard it took before asking, unchanged since (no
        marker of that producer was written meanwhile); else INVALID_TXN_STATE."""
        state = self.state
        error_type = state.check_produce(acks=acks)
        if error_type is not None:
            return ProduceOutcome(error=error_type(f"{self.name}{local}"))
        if not data:
            return ProduceOutcome(error=CorruptMessageError("no record batch"))
        validation = self.validation
        try:
            validate_client_batches(data, now_ms=self._wall_clock_ms(), config=validation)
            if validation.compression is not None:
                data = recompress(data, validation.compression)
        except KafkaError as e:
            return ProduceOutcome(error=e)
        try:
            batches = [ProducerBatch.from_header(h) for _, h in iter_batches(data, check_crc=False)]
        except KafkaError as e:
            return ProduceOutcome(error=e)
        decision = _check_producers(self.producers, batches)
        if isinstance(decision, Append) and txn_guards is not None:
            decision = _check_verified(self.producers, batches, txn_guards)
        if isinstance(decision, Rejected):
            return ProduceOutcome(error=decision.error)
        if isinstance(decision, Duplicate):
            # A retry of batches already in the log: the original offsets, and (acks=all)
            # the same wait for them to be replicated.
            return self._duplicate(decision, acks=acks)
        try:
            info = self.log.append_as_leader(data, state.leader_epoch)
        except KafkaError as e:
            return ProduceOutcome(error=e)
        if info.records_count == 0:
            return ProduceOutcome(error=CorruptMessageError("no record batch"))
        first = info.first_offset
        for batch in batches:
            last = first + batch.last_offset_delta
            if batch.is_idempotent:
                self.producers.update(batch, first_offset=first, last_offset=last)
            first = last + 1
        return self._appended(info, acks=acks)

    def _duplicate(self, decision: Duplicate, *, acks: int) -> ProduceOutcome:
        """The answer to a write already in the log (a producer's retry, a repeated
        marker): its original offsets and, with acks=all, the same wait for them."""
        return self._settle(
            ProduceOutcome(
                base_offset=decision.first_offset,
                log_start_offset=self.state.log_start_offset,
                wait_for_offset=decision.last_offset + 1 if acks == ACKS_ALL else None,
                duplicate=True,
            ),
            NOTHING,
        )

    def _appended(self, info: LogAppendInfo, *, acks: int) -> ProduceOutcome:
        """After a leader append (producer state updated): move the HW if it may, and
        the answer with what the shell must do."""
        append = self.state.on_leader_append(last_offset=info.last_offset, acks=acks)
        if append.high_watermark_moved:
            self._persist_hw()
        ready = Ready(
            high_watermark_moved=append.high_watermark_moved,
            wake_fetches=True,  # parked follower fetches
            snapshot_due=self._snapshot_due(),
        )
        outcome = ProduceOutcome(
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
            wait_for_offset=append.wait_for_offset,
        )
        return self._settle(outcome, ready)

    def _settle(self, outcome: ProduceOutcome, ready: Ready) -> ProduceOutcome:
        """``outcome`` with ``ready``, its acks=all wait dropped if the HW already
        passed it (or its error if the wait has already failed)."""
        if outcome.wait_for_offset is not None:
            done, error = self.state.replication_status().check(outcome.wait_for_offset)
            if done:
                if error is not None:
                    return ProduceOutcome(error=error(self.name), ready=ready)
                outcome = replace(outcome, wait_for_offset=None)
        return replace(outcome, ready=ready)

    def on_follower_fetch(
        self,
        *,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        broker_epoch: int,
        registered_epoch: int | None,
        now_ms: int,
        max_bytes: int | None,
        current_leader_epoch: int | None = None,
        follower_log_start_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerRead:
        """A follower fetches from ``fetch_offset`` (its LEO); answer with up to
        ``max_bytes`` of whole batches (None: the response has no room left, send
        none), or where its log diverges. ``registered_epoch`` is the broker epoch of
        ``replica_id``'s current registration (None: fenced or unregistered); a fetch
        with any other ``broker_epoch`` is refused (STALE_BROKER_EPOCH) and changes
        nothing (KIP-903)."""
        r = self.state.on_follower_fetch(
            replica_id=replica_id,
            fetch_offset=fetch_offset,
            last_fetched_epoch=last_fetched_epoch,
            broker_epoch=broker_epoch,
            registered_epoch=registered_epoch,
            now_ms=now_ms,
            current_leader_epoch=current_leader_epoch,
            follower_log_start_offset=follower_log_start_offset,
        )
        if r.high_watermark_moved:
            self._persist_hw()
        ready = Ready(
            high_watermark_moved=r.high_watermark_moved,
            wake_fetches=r.high_watermark_moved,
            isr_proposal=r.isr_proposal,
        )
        if r.error is not None:
            return FollowerRead(
                error=r.error(f"{self.name} follower {replica_id}"),
                high_watermark=self.state.high_watermark,
                log_start_offset=self.state.log_start_offset,
                ready=ready,
            )
        if r.diverging_epoch is not None:
            return FollowerRead(
                diverging_epoch=r.diverging_epoch,
                high_watermark=r.high_watermark,
                log_start_offset=r.log_start_offset,
                ready=ready,
            )
        records = b""
        if max_bytes is not None and fetch_offset < r.read_up_to:
            records = self.log.read(
                fetch_offset, max_bytes, max_offset=r.read_up_to, whole_batches=True
            )
        return FollowerRead(
            high_watermark=self.state.high_watermark,
            log_start_offset=self.state.log_start_offset,
            records=records,
            ready=ready,
        )

    def read_for_consumer(
        self,
        *,
        fetch_offset: int,
        max_bytes: int | None,
        min_one_batch: bool,
        current_leader_epoch: int | None = None,
        isolation_level: int = 0,
    ) -> ConsumerRead:
        """A consumer reads from ``fetch_offset`` up to the HW (``max_bytes`` as for
        :meth:`on_follower_fetch`); with ``isolation_level`` READ_COMMITTED only below
        the last stable offset, with the aborted transactions of what it returns."""
        state = self.state
        bounds = state.check_consumer_fetch(
            fetch_offset=fetch_offset, current_leader_epoch=current_leader_epoch
        )
        last_stable = self.last_stable_offset
        if bounds.error is not None:
            return ConsumerRead(
                error=bounds.error(f"{self.name} offset {fetch_offset}"),
                high_watermark=state.high_watermark,
                log_start_offset=state.log_start_offset,
                last_stable_offset=last_stable,
            )
        read_committed = isolation_level == READ_COMMITTED
        read_up_to = min(bounds.read_up_to, last_stable) if read_committed else bounds.read_up_to
        records = b""
        aborted: tuple[AbortedTransaction, ...] | None = () if read_committed else None
        if max_bytes is not None and fetch_offset < read_up_to:
            try:
                records = self.log.read(
                    fetch_offset,
                    max_bytes,
                    max_offset=read_up_to,
                    min_one_batch=min_one_batch,
                )
                if read_committed and records:
                    # Kafka bounds the search by the end of what is returned: the last
                    # batch's next offset (every returned batch lies below the LSO).
                    end = min(_next_offset_after(records), read_up_to)
                    aborted = tuple(self.log.collect_aborted(fetch_offset, end))
            except KafkaError as e:
                return ConsumerRead(
                    error=e,
                    high_watermark=state.high_watermark,
                    log_start_offset=state.log_start_offset,
                    last_stable_offset=last_stable,
                )
        return ConsumerRead(
            high_watermark=state.high_watermark,
            log_start_offset=state.log_start_offset,
            records=records,
            last_stable_offset=last_stable,
            aborted_transactions=aborted,
        )

    def write_txn_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        transaction_version: int,
    ) -> ProduceOutcome:
        """WriteTxnMarkers for this partition, as its leader: check the marker against
        producer state (fenced epochs, an older coordinator; a version-2 repeat of the
        last marker is answered with its offset, no second write), append the control
        batch, apply it, and index an abort in the segment's ``.txnindex``. Markers are
        written with acks=all (Kafka's): ``wait_for_offset`` is set until the HW passes
        the marker."""
        state = self.state
        error_type = state.check_produce(acks=ACKS_ALL)
        if error_type is not None:
            return ProduceOutcome(error=error_type(self.name))
        marker = EndTransactionMarker(
            ControlRecordType.COMMIT if committed else ControlRecordType.ABORT, coordinator_epoch
        )
        decision = self.producers.validate_end_txn_marker(
            producer_id, producer_epoch, marker, transaction_version=transaction_version
        )
        if isinstance(decision, Rejected):
            return ProduceOutcome(error=decision.error)
        if isinstance(decision, Duplicate):
            return self._duplicate(decision, acks=ACKS_ALL)
        data = build_end_transaction_batch(
            marker,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp_ms=self._wall_clock_ms(),
        )
        try:
            info = self.log.append_as_leader(data, state.leader_epoch)
            # The log stamps the offset in its copy; producer state needs it too.
            header = replace(parse_header(data), base_offset=info.first_offset)
            completed = self.producers.update_end_txn_marker(
                header, marker, transaction_version=transaction_version
            )
            entry = None if completed is None else aborted_entry(self.producers, completed)
            if entry is not None:
                self.log.append_aborted_txn(entry)
        except KafkaError as e:
            return ProduceOutcome(error=e)
        return self._appended(info, acks=ACKS_ALL)

    def delete_records(self, requested: int) -> tuple[int | KafkaError, Ready]:
        """DeleteRecords on the leader: move the log start to ``requested`` (-1: the HW);
        the target, or why not."""
        target = target_offset(self.state, requested)
        if isinstance(target, KafkaError):
            return target, NOTHING
        # Only committed records go (target <= HW), so every replica keeps what survives.
        self.log.delete_records_below(target)
        self.state.on_log_start_offset(log_start_offset=target)
        return target, Ready(wake_fetches=True)

    def low_watermark(self) -> int:
        return low_watermark(self.state)

    def tick(self, now_ms: int) -> Ready:
        """The ISR timer: propose dropping followers that lagged too long."""
        if not self.state.is_leader:
            return NOTHING
        return Ready(isr_proposal=self.state.maybe_shrink_isr(now_ms=now_ms))

    def enforce_retention(self) -> int:
        """Delete the segments retention allows; returns how many."""
        deleted = self.log.delete_retention_segments()
        if deleted:
            self.on_log_start_moved()
        return deleted

    def on_log_start_moved(self) -> None:
        """The log's start moved under the core (retention run by the shell on a worker
        while it held the log): take the new log start."""
        self.state.on_log_start_offset(log_start_offset=self.log.log_start_offset)

    def expire_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        return len(self.producers.remove_expired_producers(now_ms=now_ms))

    # ================================================================ follower side

    def follows(self, leader_id: int) -> bool:
        """Whether this replica fetches from ``leader_id`` now."""
        return self.state.role is ReplicaRole.FOLLOWER and self.state.leader_id == leader_id

    def fetch_position(self) -> FetchPosition:
        return FetchPosition(
            fetch_offset=self.log.log_end_offset,
            last_fetched_epoch=self.log.latest_epoch,
            log_start_offset=self.log.log_start_offset,
            leader_epoch=self.state.leader_epoch,
        )

    def on_fetch_answer(
        self,
        *,
        records: bytes,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        diverging_epoch: EpochEndOffset | None = None,
    ) -> FetchAnswer:
        """Our leader answered our fetch: whole batches from our LEO (appended here), or
        a diverging epoch (our log is cut back to where it agrees)."""
        state = self.state
        assert state.role is ReplicaRole.FOLLOWER, "only a follower handles fetch answers"
        if diverging_epoch is not None:
            before = self.log.log_end_offset
            outcome = state.on_fetch_response(
                leader_high_watermark=leader_high_watermark,
                leader_log_start_offset=leader_log_start_offset,
                diverging_epoch=diverging_epoch,
                appended_up_to=before,
            )
            assert outcome.truncate_to is not None
            self.log.truncate_to(outcome.truncate_to)
            # The log may keep less than asked (a cut inside a batch): it is the truth.
            state.on_log_truncated()
            self._persist_hw()
            # The window may have lost batches below the cut: rebuild it from the log.
            self._reload_producers()
            return FetchAnswer(
                truncated=(before, self.log.log_end_offset), ready=Ready(wake_fetches=True)
            )
        snapshot_due = False
        if records:
            before = self.log.log_end_offset
            cut = self._make_room_for(records)
            if cut is not None and self.log.log_end_offset != cut:
                # Our own batch straddled the cut, so our log now ends below the
                # leader's batch: fetch again from where it ends.
                return FetchAnswer(
                    truncated=(before, self.log.log_end_offset), ready=Ready(wake_fetches=True)
                )
            self.log.append_as_follower(records)
            # Markers included: a follower that becomes leader has the same open
            # transactions, LSO and .txnindex as its leader (Kafka's follower append).
            apply_stored_batches(self.producers, records, on_aborted=self.log.append_aborted_txn)
            snapshot_due = self._snapshot_due()
        outcome = state.on_fetch_response(
            leader_high_watermark=leader_high_watermark,
            leader_log_start_offset=leader_log_start_offset,
            diverging_epoch=None,
            appended_up_to=self.log.log_end_offset,
        )
        self._persist_hw()
        if outcome.log_start_offset >= 0:
            # The leader's log start moved (DeleteRecords, retention): follow it.
            self.log.delete_records_below(outcome.log_start_offset)
            state.on_log_start_offset(log_start_offset=outcome.log_start_offset)
        return FetchAnswer(
            ready=Ready(
                wake_fetches=bool(records) or outcome.high_watermark_moved,
                snapshot_due=snapshot_due,
            )
        )

    def _make_room_for(self, records: bytes) -> int | None:
        # The leader answers with whole batches, from the one holding our LEO. When that
        # batch starts below our LEO, our log and the leader's disagree on batch
        # boundaries there, which the epoch check cannot see when the leader's
        # DeleteRecords dropped the epochs involved: (a) an empty log restarted at the
        # leader's log start, inside a batch (Kafka's
        # Partition.appendRecordsToFollowerOrFutureReplica restarts the log at the
        # batch's base); (b) a suffix of ours from an epoch the leader deleted. Both
        # times the leader's whole batch is the truth: cut ours back to its base.
        # Committed records are identical on every replica, so this never loses one.
        end = self.log.log_end_offset
        _, first = next(iter_batches(records, check_crc=False))
        if not first.base_offset < end <= first.last_offset:
            return None
        if first.base_offset >= self.log.log_start_offset:
            self.log.truncate_to(first.base_offset)
        else:
            self.log.truncate_fully_and_start_at(first.base_offset)
        self.state.on_log_truncated()
        self._persist_hw()
        self._reload_producers()
        return first.base_offset

    def on_fetch_out_of_range(self, *, leader_log_start_offset: int) -> Ready:
        """Our fetch offset is below the leader's log start: restart empty there."""
        if self.log.log_end_offset >= leader_log_start_offset:
            return NOTHING
        self.log.truncate_fully_and_start_at(leader_log_start_offset)
        self.producers = ProducerStateManager(config=self.producer_config)
        self.state.on_log_truncated()
        self._persist_hw()
        return Ready(wake_fetches=True)


def _next_offset_after(records: bytes) -> int:
    """The offset after the last of ``records``' whole batches: hops from batch to batch
    by their length fields and parses only the last header (a 1 MiB read holds
    thousands of batches; parsing each header cost a read_committed fetch ~20 times a
    read_uncommitted one)."""
    pos = last = 0
    while (size := peek_batch_size(records, pos)) is not None and pos + size <= len(records):
        last, pos = pos, pos + size
    return parse_header(records, last).next_offset


def _check_verified(
    producers: ProducerStateManager,
    batches: Sequence[ProducerBatch],
    guards: Mapping[int, VerificationGuard],
) -> Append | Rejected:
    """KIP-890 part 1 at the append (see :meth:`Replica.append_as_leader`)."""
    for batch in batches:
        if not producers.needs_verification(batch):
            continue
        pid = batch.producer_id
        guard = guards.get(pid)
        if guard is None:
            why = "its first transactional batch here was not verified with the coordinator"
        elif guard != producers.verification_guard(pid):
            why = "a transaction marker was written since it was verified"
        else:
            continue
        return Rejected(producer_id=pid, error=InvalidTxnStateError(f"producer {pid}: {why}"))
    return Append(producer_id=-1)


def _check_producers(
    producers: ProducerStateManager, batches: Sequence[ProducerBatch]
) -> Append | Duplicate | Rejected:
    """The idempotence decision for one partition's batches of a produce. raftka's
    producer sends up to 5 batches of a partition in a first attempt and a retried batch
    alone, so a retry is a single Duplicate. With several batches, each producer's must
    follow on each other, and a duplicate among them refuses the request
    (DUPLICATE_SEQUENCE_NUMBER) rather than half-append it."""
    if not batches:
        return Rejected(producer_id=-1, error=CorruptMessageError("no record batch"))
    seen: dict[int, ProducerBatch] = {}
    for batch in batches:
        if not batch.is_idempotent:
            continue
        previous = seen.get(batch.producer_id)
        if previous is None:
            decision = producers.validate_and_prepare(batch)
            if isinstance(decision, Duplicate) and len(batches) > 1:
                return Rejected(
                    producer_id=batch.producer_id,
                    error=DuplicateSequenceNumberError(
                        f"producer {batch.producer_id}: a duplicate batch among several"
                    ),
                )
            if not isinstance(decision, Append):
                return decision
        elif previous.producer_epoch != batch.producer_epoch or not in_sequence(
            previous.last_sequence, batch.base_sequence
        ):
            return Rejected(
                producer_id=batch.producer_id,
                error=OutOfOrderSequenceNumberError(
                    f"producer {batch.producer_id}: batches of one request out of sequence"
                ),
            )
        seen[batch.producer_id] = batch
    return Append(producer_id=-1)
