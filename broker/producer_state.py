"""Producer state of one partition: the idempotent producer's de-duplication table.

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

Transactions are out of scope; the entry keeps the transactional flag, the coordinator
epoch and the first offset of the current transaction as placeholders so they slot in.

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
    KafkaError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
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
class ProducerStateEntry:
    """What the partition knows of one producer id. Immutable: updates replace it."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]  # oldest first, at most NUM_BATCHES_TO_RETAIN
    last_timestamp: int
    is_transactional: bool = False
    # Placeholders for transactions (not implemented yet); kept in snapshots.
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_OFFSET

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


@dataclass(slots=True)
class ProducerStateManager:
    """The producer-state table of one partition (see the module docstring)."""

    config: ProducerStateConfig = field(default_factory=ProducerStateConfig)
    _entries: dict[int, ProducerStateEntry] = field(default_factory=dict)

    # -- reading -------------------------------------------------------------------------

    @property
    def entries(self) -> Mapping[int, ProducerStateEntry]:
        """Producer id -> entry, read-only view."""
        return dict(self._entries)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._entries.get(producer_id)

    # -- leader --------------------------------------------------------------------------

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
            if batch.base_sequence == 0:
                return Append(producer_id=pid)
            return Rejected(
                producer_id=pid,
                error=OutOfOrderSequenceNumberError(
                    f"producer {pid}: new epoch {batch.producer_epoch} must start at "
                    f"sequence 0, got {batch.base_sequence}"
                ),
            )
        # An entry with no batches (a future transaction marker only) has no sequence to
        # continue; Kafka accepts any sequence there too.
        if not current.batches or in_sequence(current.last_sequence, batch.base_sequence):
            return Append(producer_id=pid)
        return Rejected(
            producer_id=pid,
            error=OutOfOrderSequenceNumberError(
                f"producer {pid}: base sequence {batch.base_sequence}, expected "
                f"{next_sequence(current.last_sequence)}"
            ),
        )

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

    def update_from_follower_batch(self, header: BatchHeader) -> None:
        """Apply a batch copied from the leader or read back from the log: no validation.

        Control batches (transaction markers) are skipped until transactions exist.
        """
        if header.is_control:
            return
        self._apply(
            ProducerBatch.from_header(header),
            first_offset=header.base_offset,
            last_offset=header.last_offset,
        )

    def rebuild_from(self, headers: Iterable[BatchHeader]) -> None:
        """Apply batch headers in log order (after a snapshot load or from empty)."""
        for header in headers:
            self.update_from_follower_batch(header)

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
        producers left with no batch.

        Exact only for what the window held: a producer whose batches all lie above
        ``offset`` is forgotten even if older batches of it remain below, and so accepts
        any sequence next (the unknown-producer rule). Where that matters, reload the
        newest snapshot at or below ``offset`` and :meth:`rebuild_from` the log after it.
        """
        assert offset >= 0, offset
        for pid, entry in list(self._entries.items()):
            kept = tuple(b for b in entry.batches if b.last_offset < offset)
            if kept == entry.batches:
                continue
            if not kept:
                del self._entries[pid]
                continue
            self._entries[pid] = replace(entry, batches=kept, last_timestamp=kept[-1].timestamp)

    def load_entries(self, entries: Iterable[ProducerStateEntry]) -> None:
        """Replace the whole table (from a decoded snapshot)."""
        self._entries = {}
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
        self._entries[batch.producer_id] = ProducerStateEntry(
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            batches=batches,
            last_timestamp=batch.max_timestamp,
            is_transactional=batch.is_transactional,
            coordinator_epoch=(
                current.coordinator_epoch if current is not None else NO_COORDINATOR_EPOCH
            ),
        )


def _malformed(batch: ProducerBatch) -> str:
    """Why an idempotent batch's header cannot be tracked, or "" if it can."""
    if not 0 <= batch.producer_epoch <= EPOCH_MAX:
        return f"producer {batch.producer_id}: invalid producer epoch {batch.producer_epoch}"
    if not 0 <= batch.base_sequence <= SEQUENCE_MAX:
        return f"producer {batch.producer_id}: invalid base sequence {batch.base_sequence}"
    if batch.last_offset_delta < 0:
        return f"producer {batch.producer_id}: invalid last offset delta {batch.last_offset_delta}"
    return ""
