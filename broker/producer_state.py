"""Producer state of one partition: the idempotent producer's de-duplication table.

(Over 700 lines: the idempotence table, the open transactions and the last stable offset
are one state that every append and every marker changes together, and its snapshot
format writes them as one file; split, each part would need the others' invariants.)

Theory of operation
-------------------
An idempotent producer stamps every batch with its producer id, its producer epoch and
the sequence number of the batch's first record, counted per partition. The leader of a
partition keeps, per producer id, the metadata of the last ``NUM_BATCHES_TO_RETAIN``
batches it appended (sequence range, offset range, timestamp). Before appending a batch
it asks :meth:`ProducerStateManager.validate_and_prepare`, which answers one of:

* :class:`Append`: the batch continues the producer's sequence (or needs no check);
  append it, then call :meth:`ProducerStateManager.update` with the offsets it got.
* :class:`Duplicate`: the batch is a retry of one of the retained batches (same epoch,
  same first and last sequence). Do not append; answer the producer with success and
  the original offsets, as Kafka does for a duplicate.
* :class:`Rejected`: carries OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
  UNKNOWN_PRODUCER_ID (only in the legacy mode, see below) or INVALID_RECORD.

Decision table for an idempotent batch (producer_id >= 0), in the order it is applied:

=========================================  ==========================================
state of the producer id                   batch
=========================================  ==========================================
same epoch, (first, last seq) retained      Duplicate(original offsets)
batch epoch < current epoch                 INVALID_PRODUCER_EPOCH
no state at all                             Append, any sequence (Kafka >= 2.5, KIP-360)
batch epoch > current epoch                 Append if base sequence == 0, else
                                            OUT_OF_ORDER_SEQUENCE_NUMBER
same epoch, base seq == last seq + 1        Append (wrapping 2^31-1 -> 0)
same epoch, anything else                   OUT_OF_ORDER_SEQUENCE_NUMBER
=========================================  ==========================================

Unknown producers: Kafka before 2.5 refused a batch with base sequence != 0 from a
producer id it had no state for, with UNKNOWN_PRODUCER_ID; since KIP-360 (2.5) the
broker accepts any sequence there, because the state of a live producer disappears
legitimately (retention or DeleteRecords removed all its batches, or it expired) and
the producer cannot know. raftka follows current Kafka by default;
``ProducerStateConfig(unknown_producer_id_strict=True)`` restores the old rule.

Followers and recovery apply batches through :meth:`update_from_follower_batch` /
:meth:`rebuild_from` without validation (Kafka's replication/loading path) but with the
same window arithmetic, so a follower that becomes leader de-duplicates exactly as the
old leader did. Both paths share :meth:`_apply`, which is what makes them agree.

Time: an entry's ``last_timestamp`` is the batch's max timestamp, as in Kafka, not a
clock read: it is in the log, so a follower or a restarted broker rebuilds the same
value. Expiry compares it with the ``now_ms`` given to :meth:`remove_expired_producers`.

Transactions (KIP-98, the partition side): a producer's transaction on this partition
starts at the first transactional batch it appends after its last marker; the entry's
``current_txn_first_offset`` holds that offset until a COMMIT or ABORT control batch of
the same producer ends it (:meth:`ProducerStateManager.validate_end_txn_marker` then
:meth:`ProducerStateManager.update_end_txn_marker`, which answers a :class:`CompletedTxn`
so the caller can append an aborted-transaction entry to the segment's ``.txnindex``).
Kafka's rules, leader path only (followers and recovery apply what the log holds),
in the order they are applied:

=========================================  ==========================================
input                                      answer
=========================================  ==========================================
marker, transaction version 2, same         Duplicate(the last marker's offset): the
epoch and type as the producer's last       coordinator retried a marker whose answer
marker, nothing written since               it lost; no second marker is written
marker, epoch < the producer's epoch        INVALID_PRODUCER_EPOCH (Kafka >= 2.7 answers
(version 2: epoch <= it, KIP-890 part 2)    this rather than PRODUCER_FENCED; the
                                            coordinator treats it as being fenced)
marker, coordinator epoch < the last one    TRANSACTION_COORDINATOR_FENCED
non-transactional batch while the           INVALID_TXN_STATE
producer's transaction is open
=========================================  ==========================================

The version-2 rules are those the coordinator's simulation
(``tests/property/test_txn_coordinator_sim.py``) gives its partition leaders.
KIP-890 part 1 (a leader verifies a producer's first transactional batch with the
coordinator before appending it) needs a network call, so only its two pure parts
are here: :meth:`ProducerStateManager.needs_verification` (does this batch start a
transaction?) and :meth:`ProducerStateManager.verification_guard` (taken before the
call, compared before the append); the call is the shell's
(``broker/txn_verification.py``).

A marker of a producer with no open transaction here is accepted and returns no
:class:`CompletedTxn` (Kafka's rule: an empty transaction leaves nothing to index).

The last stable offset is ``min(first_unstable_offset, high watermark)``: the first
unstable offset is the oldest first offset of the open transactions and of completed
ones whose marker is not yet below the high watermark (Kafka's "unreplicated"
transactions: until the marker is replicated, a leader change may lose it, so what the
transaction wrote must stay unreadable for read_committed). The caller reports the high
watermark with :meth:`ProducerStateManager.on_high_watermark_updated`.

Pure: no I/O, no clock. Not thread-safe: one partition's appends are serialised by the
caller (the partition lock), as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from raftka.common.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from raftka.common.record.batch import DecodedBatch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    end_transaction_marker,
)
from raftka.common.record.header import NO_PRODUCER_ID, BatchHeader

# Kafka's producer caps max.in.flight.requests.per.connection at 5 with idempotence, so
# every retry it can send is one of the last 5 batches the leader appended for it.
NUM_BATCHES_TO_RETAIN: Final = 5
# Kafka's producer.id.expiration.ms default (1 day, KIP-854).
PRODUCER_ID_EXPIRATION_MS_DEFAULT: Final = 86_400_000
SEQUENCE_MAX: Final = 2**31 - 1  # Integer.MAX_VALUE: the next sequence after it is 0
EPOCH_MAX: Final = 2**15 - 1
NO_SEQUENCE: Final = -1
NO_EPOCH: Final = -1
NO_OFFSET: Final = -1
NO_COORDINATOR_EPOCH: Final = -1


def next_sequence(sequence: int, increment: int = 1) -> int:
    """``sequence + increment`` wrapping past 2^31-1 to 0, as Kafka counts sequences."""
    assert 0 <= sequence <= SEQUENCE_MAX, sequence
    assert increment >= 0, increment
    return (sequence + increment) % (SEQUENCE_MAX + 1)


def in_sequence(last_sequence: int, next_base_sequence: int) -> bool:
    """True if a batch starting at ``next_base_sequence`` directly follows ``last_sequence``."""
    return next_base_sequence == next_sequence(last_sequence)


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT
    # True: refuse base sequence != 0 from an unknown producer id (Kafka < 2.5).
    unknown_producer_id_strict: bool = False

    def __post_init__(self) -> None:
        if self.producer_id_expiration_ms <= 0:
            raise ValueError(
                f"producer_id_expiration_ms must be positive, got {self.producer_id_expiration_ms}"
            )


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The header fields of a batch that producer state reads."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int  # record count - 1
    max_timestamp: int
    is_transactional: bool = False

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        return next_sequence(self.base_sequence, self.last_offset_delta)

    @classmethod
    def from_header(cls, header: BatchHeader) -> ProducerBatch:
        return cls(
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            last_offset_delta=header.last_offset_delta,
            max_timestamp=header.max_timestamp,
            is_transactional=header.is_transactional,
        )


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch: enough to recognise a retry and answer it."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp

    def __post_init__(self) -> None:
        assert 0 <= self.first_sequence <= SEQUENCE_MAX, self
        assert 0 <= self.last_sequence <= SEQUENCE_MAX, self
        assert 0 <= self.first_offset <= self.last_offset, self
        # The sequence range and the offset range have the same length (mod wrap).
        assert self.last_sequence == next_sequence(
            self.first_sequence, self.last_offset - self.first_offset
        ), self

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(frozen=True, slots=True)
class LastMarker:
    """The producer's last COMMIT/ABORT marker here: what a repeat of it is answered."""

    producer_epoch: int
    control_type: ControlRecordType
    offset: int
    timestamp: int

    def __post_init__(self) -> None:
        assert 0 <= self.producer_epoch <= EPOCH_MAX, self
        assert self.control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT), self
        assert self.offset >= 0, self


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """What the partition knows of one producer id. Immutable: updates replace it."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]  # oldest first, at most NUM_BATCHES_TO_RETAIN
    last_timestamp: int
    is_transactional: bool = False
    # The epoch of the coordinator that wrote this producer's last marker here.
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    # First offset of the producer's open transaction on this partition, or NO_OFFSET.
    current_txn_first_offset: int = NO_OFFSET
    last_marker: LastMarker | None = None

    def __post_init__(self) -> None:
        assert self.producer_id >= 0, self
        assert 0 <= self.producer_epoch <= EPOCH_MAX, self
        assert len(self.batches) <= NUM_BATCHES_TO_RETAIN, self
        for older, newer in zip(self.batches, self.batches[1:], strict=False):
            # Retained batches of one epoch are contiguous in sequence, increasing in offset.
            assert in_sequence(older.last_sequence, newer.first_sequence), self
            assert older.last_offset < newer.first_offset, self

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.producer_epoch:
            return None
        last_sequence = batch.last_sequence
        for cached in self.batches:
            if (
                cached.first_sequence == batch.base_sequence
                and cached.last_sequence == last_sequence
            ):
                return cached
        return None


@dataclass(frozen=True, slots=True)
class Append:
    """Append the batch, then call ``update`` with its offsets."""

    producer_id: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer success with these offsets."""

    producer_id: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """Refuse the batch with ``error`` (Kafka's name and code travel with it)."""

    producer_id: int
    error: KafkaError = field(compare=False)
    error_name: str = ""  # compared instead of the exception instance

    def __post_init__(self) -> None:
        object.__setattr__(self, "error_name", self.error.name)


Decision = Append | Duplicate | Rejected


@dataclass(frozen=True, slots=True)
class VerificationGuard:
    """The producer's last marker on the partition when verification began (see
    :meth:`ProducerStateManager.verification_guard`)."""

    producer_id: int
    last_marker: LastMarker | None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended on this partition: ``first_offset`` is its first
    batch's offset, ``last_offset`` the marker's (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateManager:
    """The producer-state table of one partition (see the module docstring)."""

    config: ProducerStateConfig = field(default_factory=ProducerStateConfig)
    _entries: dict[int, ProducerStateEntry] = field(default_factory=dict)
    # Completed transactions whose marker is at or above the high watermark, oldest first.
    _unreplicated: list[CompletedTxn] = field(default_factory=list)

    # -- reading -------------------------------------------------------------------------

    @property
    def entries(self) -> Mapping[int, ProducerStateEntry]:
        """Producer id -> entry, read-only view."""
        return dict(self._entries)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._entries.get(producer_id)

    @property
    def ongoing_txns(self) -> Mapping[int, int]:
        """Producer id -> first offset of its open transaction here."""
        return {
            pid: e.current_txn_first_offset
            for pid, e in self._entries.items()
            if e.current_txn_first_offset != NO_OFFSET
        }

    @property
    def first_unstable_offset(self) -> int | None:
        """The oldest first offset of an open transaction or of a completed one whose
        marker is not yet below the high watermark; None if there is none."""
        firsts = [*self.ongoing_txns.values(), *(t.first_offset for t in self._unreplicated)]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's last stable offset: read_committed fetches stop below it."""
        first_unstable = self.first_unstable_offset
        if first_unstable is None:
            return high_watermark
        return min(first_unstable, high_watermark)

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The ``last_stable_offset`` field of the .txnindex entry for ``completed``,
        computed right after its marker was applied (Kafka's rule): the first offset of
        the oldest transaction of another producer still open, else the offset after
        the marker. A consumer that has read past it has seen every abort before it."""
        others = [first for pid, first in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    # -- leader --------------------------------------------------------------------------

    def needs_verification(self, batch: ProducerBatch) -> bool:
        """KIP-890 part 1: True if ``batch`` would start its producer's transaction here
        (transactional, and no transaction of that producer open on this partition), so
        the leader must first ask the coordinator whether the partition is in it."""
        if not batch.is_transactional or not batch.is_idempotent:
            return False
        entry = self._entries.get(batch.producer_id)
        return entry is None or entry.current_txn_first_offset == NO_OFFSET

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """What the leader takes before it asks the coordinator, and compares again just
        before the append: any marker of the producer written meanwhile changes it, so
        a verification answered for the transaction that marker ended cannot let a
        batch start the next one (Kafka's VerificationGuard)."""
        entry = self._entries.get(producer_id)
        return VerificationGuard(producer_id, None if entry is None else entry.last_marker)

    def validate_and_prepare(self, batch: ProducerBatch) -> Decision:
        """Classify a batch before the leader appends it. Does not change state."""
        pid = batch.producer_id
        if not batch.is_idempotent:
            return Append(producer_id=pid)
        bad = _malformed(batch)
        if bad:
            return Rejected(producer_id=pid, error=InvalidRecordError(bad))
        current = self._entries.get(pid)
        if current is None:
            if batch.base_sequence != 0 and self.config.unknown_producer_id_strict:
                return Rejected(
                    producer_id=pid,
                    error=UnknownProducerIdError(
                        f"no state for producer {pid} and base sequence {batch.base_sequence} != 0"
                    ),
                )
            return Append(producer_id=pid)
        duplicate = current.find_duplicate(batch)
        if duplicate is not None:
            return Duplicate(
                producer_id=pid,
                first_offset=duplicate.first_offset,
                last_offset=duplicate.last_offset,
                timestamp=duplicate.timestamp,
            )
        if batch.producer_epoch < current.producer_epoch:
            return Rejected(
                producer_id=pid,
                error=InvalidProducerEpochError(
                    f"producer {pid}: epoch {batch.producer_epoch} is older than "
                    f"the current epoch {current.producer_epoch}"
                ),
            )
        if batch.producer_epoch > current.producer_epoch:
            if batch.base_sequence != 0:
                return Rejected(
                    producer_id=pid,
                    error=OutOfOrderSequenceNumberError(
                        f"producer {pid}: new epoch {batch.producer_epoch} must start at "
                        f"sequence 0, got {batch.base_sequence}"
                    ),
                )
        # An entry with no batches (only a transaction marker) has no sequence to
        # continue; Kafka accepts any sequence there too.
        elif current.batches and not in_sequence(current.last_sequence, batch.base_sequence):
            return Rejected(
                producer_id=pid,
                error=OutOfOrderSequenceNumberError(
                    f"producer {pid}: base sequence {batch.base_sequence}, expected "
                    f"{next_sequence(current.last_sequence)}"
                ),
            )
        if current.current_txn_first_offset != NO_OFFSET and not batch.is_transactional:
            # Kafka: a plain write in the middle of the producer's transaction means the
            # producer lost track of it; appending would mix it into the transaction.
            return Rejected(
                producer_id=pid,
                error=InvalidTxnStateError(
                    f"producer {pid}: non-transactional batch while its transaction from "
                    f"offset {current.current_txn_first_offset} is open"
                ),
            )
        return Append(producer_id=pid)

    def update(self, batch: ProducerBatch, *, first_offset: int, last_offset: int) -> None:
        """Record a batch the leader appended at ``first_offset..last_offset``.

        Call only after :meth:`validate_and_prepare` answered :class:`Append` for it and
        with no other update for the same producer in between.
        """
        assert last_offset - first_offset == batch.last_offset_delta, (batch, first_offset)
        decision = self.validate_and_prepare(batch)
        assert isinstance(decision, Append), decision
        self._apply(batch, first_offset=first_offset, last_offset=last_offset)

    # -- follower / recovery -------------------------------------------------------------

    def update_from_follower_batch(
        self, header: BatchHeader, marker: EndTransactionMarker | None = None
    ) -> CompletedTxn | None:
        """Apply a batch copied from the leader or read back from the log: no validation.

        A control batch needs its decoded ``marker`` (see :meth:`apply_batch`); given
        the header alone it is skipped, which is right only while no transaction
        reaches this partition (the header does not say COMMIT or ABORT).
        """
        if header.is_control:
            if marker is None or header.producer_id < 0:
                return None
            return self._apply_marker(header, marker)
        self._apply(
            ProducerBatch.from_header(header),
            first_offset=header.base_offset,
            last_offset=header.last_offset,
        )
        return None

    def apply_batch(self, batch: DecodedBatch) -> CompletedTxn | None:
        """:meth:`update_from_follower_batch` for a decoded batch, markers included.

        Raises CorruptMessageError for a control batch with a malformed record."""
        return self.update_from_follower_batch(batch.header, end_transaction_marker(batch))

    def rebuild_from(self, headers: Iterable[BatchHeader]) -> None:
        """Apply batch headers in log order (after a snapshot load or from empty).

        Headers carry no marker: use :meth:`rebuild_from_batches` where transactional
        batches may be in the log."""
        for header in headers:
            self.update_from_follower_batch(header)

    def rebuild_from_batches(self, batches: Iterable[DecodedBatch]) -> list[CompletedTxn]:
        """Apply decoded batches in log order, markers included; the transactions their
        markers completed, in log order (recovery rebuilds the .txnindex from them).

        They also count as unreplicated until :meth:`on_high_watermark_updated`."""
        completed = []
        for batch in batches:
            done = self.apply_batch(batch)
            if done is not None:
                completed.append(done)
        return completed

    # -- transaction markers -------------------------------------------------------------

    def validate_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        marker: EndTransactionMarker,
        *,
        transaction_version: int = 1,
    ) -> Decision:
        """Classify a COMMIT/ABORT marker the coordinator asks the leader to write: Append
        it, answer a repeat of the last marker as a Duplicate (no second write), or refuse
        it. ``transaction_version`` is the coordinator's (KIP-890): with 2 the marker's
        epoch must be above the producer's, since EndTxn bumped it. Does not change state.
        """
        if producer_id < 0 or not 0 <= producer_epoch <= EPOCH_MAX:
            return Rejected(
                producer_id=producer_id,
                error=InvalidRecordError(
                    f"marker of producer {producer_id} epoch {producer_epoch}: invalid"
                ),
            )
        current = self._entries.get(producer_id)
        if current is None:
            return Append(producer_id=producer_id)
        last = current.last_marker
        if (
            transaction_version >= 2
            and last is not None
            and (last.producer_epoch, last.control_type) == (producer_epoch, marker.control_type)
            and last.producer_epoch == current.producer_epoch
            and current.current_txn_first_offset == NO_OFFSET
            and marker.coordinator_epoch >= current.coordinator_epoch
        ):
            # The coordinator retries a marker whose answer it lost; nothing was written
            # since, so the same outcome stands.
            return Duplicate(
                producer_id=producer_id,
                first_offset=last.offset,
                last_offset=last.offset,
                timestamp=last.timestamp,
            )
        fenced = (
            producer_epoch <= current.producer_epoch
            if transaction_version >= 2
            else producer_epoch < current.producer_epoch
        )
        if fenced:
            return Rejected(
                producer_id=producer_id,
                error=InvalidProducerEpochError(
                    f"producer {producer_id}: marker epoch {producer_epoch} is not "
                    f"{'above' if transaction_version >= 2 else 'at or above'} the current "
                    f"epoch {current.producer_epoch} (transaction version {transaction_version})"
                ),
            )
        if marker.coordinator_epoch < current.coordinator_epoch:
            return Rejected(
                producer_id=producer_id,
                error=TransactionCoordinatorFencedError(
                    f"producer {producer_id}: marker from coordinator epoch "
                    f"{marker.coordinator_epoch}, the last was {current.coordinator_epoch}"
                ),
            )
        return Append(producer_id=producer_id)

    def update_end_txn_marker(
        self, header: BatchHeader, marker: EndTransactionMarker, *, transaction_version: int = 1
    ) -> CompletedTxn | None:
        """Record the control batch (``header``, holding ``marker``) the leader appended;
        the transaction it ended, or None if the producer had none open here.

        Call only after :meth:`validate_end_txn_marker` answered Append for it."""
        assert header.is_control, header
        decision = self.validate_end_txn_marker(
            header.producer_id,
            header.producer_epoch,
            marker,
            transaction_version=transaction_version,
        )
        assert isinstance(decision, Append), decision
        return self._apply_marker(header, marker)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark:
        they no longer hold the last stable offset back."""
        self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    @classmethod
    def rebuilt_from(
        cls, headers: Iterable[BatchHeader], *, config: ProducerStateConfig | None = None
    ) -> ProducerStateManager:
        manager = cls(config=config or ProducerStateConfig())
        manager.rebuild_from(headers)
        return manager

    # -- maintenance ---------------------------------------------------------------------

    def remove_expired_producers(self, *, now_ms: int) -> tuple[int, ...]:
        """Forget producers idle for producer.id.expiration.ms or longer; returns their ids.

        Idle is measured from the max timestamp of the producer's last batch (Kafka's
        rule). A producer with an open transaction never expires.
        """
        expired = tuple(
            pid
            for pid, entry in self._entries.items()
            if entry.current_txn_first_offset == NO_OFFSET
            and now_ms - entry.last_timestamp >= self.config.producer_id_expiration_ms
        )
        for pid in expired:
            del self._entries[pid]
        return expired

    def truncate_to(self, offset: int) -> None:
        """Drop retained batches at or above ``offset`` (the log was truncated there), and
        producers left with no batch and no open transaction; a transaction that started
        at or above ``offset`` is no longer open.

        Exact only for what the window held: a producer whose batches all lie above
        ``offset`` is forgotten even if older batches of it remain below, and so accepts
        any sequence next (the unknown-producer rule); a marker above ``offset`` that
        ended a transaction begun below it is not undone. Where that matters, reload the
        newest snapshot at or below ``offset`` and :meth:`rebuild_from_batches` the log
        after it.
        """
        assert offset >= 0, offset
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]
        for pid, entry in list(self._entries.items()):
            kept = tuple(b for b in entry.batches if b.last_offset < offset)
            txn_first = entry.current_txn_first_offset
            if txn_first >= offset:
                txn_first = NO_OFFSET
            last_marker = entry.last_marker
            if last_marker is not None and last_marker.offset >= offset:
                last_marker = None
            if (kept, txn_first, last_marker) == (
                entry.batches,
                entry.current_txn_first_offset,
                entry.last_marker,
            ):
                continue
            if not kept and txn_first == NO_OFFSET and last_marker is None:
                del self._entries[pid]
                continue
            self._entries[pid] = replace(
                entry,
                batches=kept,
                last_timestamp=kept[-1].timestamp if kept else entry.last_timestamp,
                current_txn_first_offset=txn_first,
                last_marker=last_marker,
            )

    def load_entries(self, entries: Iterable[ProducerStateEntry]) -> None:
        """Replace the whole table (from a decoded snapshot)."""
        self._entries = {}
        self._unreplicated = []
        for entry in entries:
            assert entry.producer_id not in self._entries, entry.producer_id
            self._entries[entry.producer_id] = entry

    # -- shared by leader and follower ---------------------------------------------------

    def _apply(self, batch: ProducerBatch, *, first_offset: int, last_offset: int) -> None:
        if not batch.is_idempotent:
            return
        assert not _malformed(batch), (_malformed(batch), batch)
        assert last_offset - first_offset == batch.last_offset_delta, (batch, first_offset)
        metadata = BatchMetadata(
            first_sequence=batch.base_sequence,
            last_sequence=batch.last_sequence,
            first_offset=first_offset,
            last_offset=last_offset,
            timestamp=batch.max_timestamp,
        )
        current = self._entries.get(batch.producer_id)
        if current is None or current.producer_epoch != batch.producer_epoch:
            # A new epoch starts a new sequence: the old epoch's window cannot match a
            # retry of the new one (duplicates require the same epoch), so drop it.
            batches: tuple[BatchMetadata, ...] = (metadata,)
        elif current.batches and not in_sequence(current.last_sequence, batch.base_sequence):
            # Only reachable on the follower path (the leader refuses such a batch): a gap
            # in what we saw, e.g. the state expired in between. The window must stay
            # contiguous to mean anything, so restart it here.
            batches = (metadata,)
        else:
            batches = (*current.batches, metadata)[-NUM_BATCHES_TO_RETAIN:]
        txn_first = current.current_txn_first_offset if current is not None else NO_OFFSET
        if batch.is_transactional and txn_first == NO_OFFSET:
            txn_first = first_offset  # the producer's transaction starts here
        self._entries[batch.producer_id] = ProducerStateEntry(
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            batches=batches,
            last_timestamp=batch.max_timestamp,
            is_transactional=batch.is_transactional,
            coordinator_epoch=(
                current.coordinator_epoch if current is not None else NO_COORDINATOR_EPOCH
            ),
            current_txn_first_offset=txn_first,
            last_marker=current.last_marker if current is not None else None,
        )

    def _apply_marker(
        self, header: BatchHeader, marker: EndTransactionMarker
    ) -> CompletedTxn | None:
        producer_id, producer_epoch = header.producer_id, header.producer_epoch
        offset, timestamp = header.base_offset, header.max_timestamp
        current = self._entries.get(producer_id)
        if current is None:
            # Kafka keeps an entry for a marker-only producer: its epoch and coordinator
            # epoch fence older markers and batches from then on.
            current = ProducerStateEntry(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                batches=(),
                last_timestamp=timestamp,
                is_transactional=True,
            )
        # Never lower the epoch: the leader refuses an older marker, so in any log a
        # leader wrote the marker's epoch is >= the entry's and max() is Kafka's "set if
        # different"; on a damaged log it keeps fencing by the newest epoch seen.
        epoch = max(current.producer_epoch, producer_epoch)
        completed = None
        if current.current_txn_first_offset != NO_OFFSET:
            completed = CompletedTxn(
                producer_id=producer_id,
                first_offset=current.current_txn_first_offset,
                last_offset=offset,
                is_aborted=marker.control_type == ControlRecordType.ABORT,
            )
            self._unreplicated.append(completed)
        self._entries[producer_id] = replace(
            current,
            producer_epoch=epoch,
            # A new epoch starts new sequences: the old window cannot match a retry.
            batches=current.batches if epoch == current.producer_epoch else (),
            last_timestamp=timestamp,
            coordinator_epoch=max(current.coordinator_epoch, marker.coordinator_epoch),
            current_txn_first_offset=NO_OFFSET,
            last_marker=LastMarker(epoch, marker.control_type, offset, timestamp),
        )
        return completed


def _malformed(batch: ProducerBatch) -> str:
    """Why an idempotent batch's header cannot be tracked, or "" if it can."""
    if not 0 <= batch.producer_epoch <= EPOCH_MAX:
        return f"producer {batch.producer_id}: invalid producer epoch {batch.producer_epoch}"
    if not 0 <= batch.base_sequence <= SEQUENCE_MAX:
        return f"producer {batch.producer_id}: invalid base sequence {batch.base_sequence}"
    if batch.last_offset_delta < 0:
        return f"producer {batch.producer_id}: invalid last offset delta {batch.last_offset_delta}"
    return ""
