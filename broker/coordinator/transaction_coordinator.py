"""The transaction coordinator of one broker: a pure core over ``__transaction_state``.

(Over 700 lines: the commands, the marker bookkeeping and the load from
__transaction_state share one pending-write rule and one set of epoch rules.)

Theory of operation
-------------------
A broker coordinates the ``transactional.id`` s whose ``__transaction_state`` partition
it leads (``abs(hashCode(id)) % transaction.state.log.num.partitions``, placed as the
group coordinator places groups). Per partition the core is *loading* (the broker feeds
the partition's records to :meth:`TransactionCoordinator.replay`; requests get
COORDINATOR_LOAD_IN_PROGRESS) or *loaded*; a partition it does not lead answers
NOT_COORDINATOR. The partition's leader epoch is the *coordinator epoch* that every
WriteTxnMarkers carries, so a partition leader can refuse markers of a deposed
coordinator (TRANSACTION_COORDINATOR_FENCED).

**Write first, act after (Kafka's pending transition).** A command never changes the
metadata in memory. It computes the next :class:`TransactionMetadata`, checked against
the transition table of :mod:`~raftka.broker.coordinator.transaction_state`, and returns
a :class:`TxnDecision` whose outputs hold an :class:`AppendTransactionRecord` (append
with acks=all). Only :meth:`TransactionCoordinator.append_completed` without an error
applies the written value (the same code replay uses) and releases what waits on it:
the client's answer (:class:`TxnReply`) and the markers to send
(:class:`SendTxnMarkers`). A failed append changes nothing and the client is told
NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE; one write per id is in flight at a time
(another request meanwhile gets CONCURRENT_TRANSACTIONS).

**Commands** (Kafka's request names; errors are Kafka's):

* ``init_producer_id``: a new id gets a producer id (from ``allocate_producer_id``: on
  a broker the controller-allocated blocks) at epoch 0; a known idle id gets its epoch
  bumped, which fences every holder of an older epoch (PRODUCER_FENCED). An id whose
  transaction is Ongoing is first aborted with a bumped epoch (PrepareEpochFence, then
  PrepareAbort) and the caller is told CONCURRENT_TRANSACTIONS until that abort is
  complete; its retry then bumps again. KIP-360: a producer that passes its current
  producer id and epoch gets them bumped (recovery); one that passes the id and epoch
  it held before the last bump is answered the current ones (a retry whose answer was
  lost); anything else is fenced. When the epoch is exhausted (int16) the id moves to
  a new producer id at epoch 0.
* ``add_partitions_to_txn`` / ``add_offsets_to_txn``: begin the transaction or add to
  it (AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition).
* ``verify_partitions`` (AddPartitionsToTxn with ``verify_only``, KIP-890 part 1): a
  partition leader asks before it accepts the first transactional batch of a producer:
  is this partition in that producer's *ongoing* transaction at this epoch? Nothing is
  written.
* ``end_txn``: Ongoing -> PrepareCommit / PrepareAbort; once durable the client is
  answered and markers go to every partition of the transaction; once every marker is
  written (:meth:`TransactionCoordinator.markers_written`) CompleteCommit /
  CompleteAbort is written. With transaction version 2 (KIP-890 part 2: the client's
  version, EndTxn v5+ or raftka's client, capped by the broker's
  ``transaction.version``; kept per transaction) the Prepare record carries the
  epoch + 1, the markers carry it and EndTxn answers it: the finished transaction's
  epoch is dead, so its late EndTxn, marker or produce is fenced instead of landing in
  the next transaction. A retry of a finished
  EndTxn (the producer id and epoch held before the bump) is answered as it was.
* ``tick``: aborts transactions older than their ``transaction.timeout.ms`` (the same
  fencing abort as InitProducerId, but the producer may recover with KIP-360 since
  nobody else took its id), and writes a tombstone for ids idle longer than
  ``transactional.id.expiration.ms``. It also re-writes the Complete record of a
  transaction whose markers are all written but whose Complete append failed.

Loading (:meth:`begin_loading`, :meth:`replay`, :meth:`complete_loading`): latest
value per key wins, a tombstone forgets; transactions found in PrepareCommit /
PrepareAbort get their markers sent again (markers are idempotent at the partitions),
Ongoing ones are left to their timeout, as in Kafka.

Everything is pure: ``now_ms`` comes in, decisions and outputs go out; the driver
appends records in the order emitted and reports each with :meth:`append_completed`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, TypeAlias, TypeVar

from raftka.broker.coordinator.group import ErrorType, coordinator_error_for_append
from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.coordinator.transaction_records import (
    TransactionLogRecord,
    TransactionRecordError,
    decode_transaction_key,
    decode_transaction_value,
    transaction_record,
)
from raftka.broker.coordinator.transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PRODUCER_EPOCH_MAX,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
)
from raftka.common.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from raftka.common.structs import TopicPartition

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnResponse",
    "AppendTransactionRecord",
    "DescribedTransaction",
    "EndTxnResponse",
    "InitProducerIdResponse",
    "SendTxnMarkers",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TxnDecision",
    "TxnOutput",
    "TxnReply",
    "TxnResponse",
]

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
CONSUMER_OFFSETS_TOPIC: Final = "__consumer_offsets"

_S = TransactionState
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    """Broker settings of the transaction coordinator (Kafka's names and defaults)."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 50
    #: AddOffsetsToTxn adds the group's partition of __consumer_offsets.
    offsets_topic_num_partitions: int = 50
    #: The broker's ``transaction.version``: the highest version a transaction gets (the
    #: client's EndTxn decides below it). 2 bumps the epoch on every EndTxn (KIP-890
    #: part 2); 1 is the classic protocol.
    transaction_version: int = 2
    #: The largest producer epoch (int16). Not a Kafka setting: tests lower it to reach
    #: the producer-id rotation without 32767 transactions.
    producer_epoch_max: int = PRODUCER_EPOCH_MAX

    def __post_init__(self) -> None:
        for name in (
            "transaction_max_timeout_ms",
            "transactional_id_expiration_ms",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
            "transaction_remove_expired_transaction_cleanup_interval_ms",
            "transaction_state_log_num_partitions",
            "offsets_topic_num_partitions",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '.')} must be >= 1")
        if self.transaction_version not in (1, 2):
            raise ValueError(
                f"transaction.version {self.transaction_version} is not supported (1 or 2)"
            )
        if not 2 <= self.producer_epoch_max <= PRODUCER_EPOCH_MAX:
            raise ValueError(f"producer_epoch_max must be in 2..{PRODUCER_EPOCH_MAX}")


# -- responses -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error: ErrorType
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse:
    errors: Mapping[TopicPartition, ErrorType]


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse:
    error: ErrorType


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    """With transaction version 2 a successful EndTxn names the producer id and epoch
    the producer must use from now on."""

    error: ErrorType
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


TxnResponse: TypeAlias = (
    InitProducerIdResponse | AddPartitionsToTxnResponse | AddOffsetsToTxnResponse | EndTxnResponse
)
RT = TypeVar("RT", bound=TxnResponse)


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """DescribeTransactions' answer for one id (TRANSACTIONAL_ID_NOT_FOUND if unknown)."""

    error: ErrorType
    transactional_id: str
    metadata: TransactionMetadata | None = None


# -- outputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendTransactionRecord:
    """Append ``record`` to partition ``partition`` of __transaction_state with
    acks=all, then call ``append_completed(append_id=...)`` with the outcome."""

    append_id: int
    partition: int
    transactional_id: str
    record: TransactionLogRecord


@dataclass(frozen=True, slots=True)
class TxnReply:
    """Answer the request that was parked on append ``append_id``."""

    append_id: int
    transactional_id: str
    response: TxnResponse


@dataclass(frozen=True, slots=True)
class SendTxnMarkers:
    """Write a ``result`` control record (WriteTxnMarkers) for producer ``producer_id``
    at ``producer_epoch`` to each of ``partitions``, retrying each until its leader
    has written it, and report each with ``markers_written``. Markers are idempotent at
    a partition (a repeat of the last marker is answered without a second write)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]
    #: The partition leader checks the marker's epoch by this version's rule: with 2,
    #: the marker's epoch must be above the producer's (the EndTxn bump).
    transaction_version: int


TxnOutput: TypeAlias = AppendTransactionRecord | TxnReply | SendTxnMarkers


@dataclass(frozen=True, slots=True)
class TxnDecision(Generic[R]):
    """The answer to one request: ``response`` when known now, None when the request is
    parked on the append among ``outputs`` (its :class:`TxnReply` comes later)."""

    response: R | None
    outputs: tuple[TxnOutput, ...] = ()


# -- internals -------------------------------------------------------------------------


def _ended(metadata: TransactionMetadata, version: int) -> EndTxnResponse:
    """A successful EndTxn's answer: with version 2 the producer id and epoch to go on
    with; with version 1 none (-1), as EndTxn v0-4 answers, so a client never takes an
    unchanged epoch for a new one (and restarts its sequences under it)."""
    if version >= 2:
        return EndTxnResponse(None, metadata.producer_id, metadata.producer_epoch)
    return EndTxnResponse(None)


@functools.lru_cache(maxsize=4096)
def _partition_for(transactional_id: str, num_partitions: int) -> int:
    # Every request asks; the Java string hash is a Python loop over the id.
    return coordinator_partition(transactional_id, num_partitions)


# Builds the answer of a parked request once its append succeeded, from the metadata
# written (None: nobody waits for this append).
_ReplyBuilder: TypeAlias = Callable[[TransactionMetadata], TxnResponse] | None
# The answer of a parked request whose append failed, from the client-facing error.
_ErrorReply: TypeAlias = Callable[[type[KafkaError]], TxnResponse]


@dataclass(frozen=True, slots=True)
class _Pending:
    """The one write in flight for an id (Kafka's pendingState + TxnTransitMetadata)."""

    append_id: int
    partition: int
    target: TransactionMetadata
    on_success: _ReplyBuilder
    on_error: _ErrorReply | None
    #: Hold the success answer until the id's Complete record is durable.
    defer_success: bool = False


class _Status(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(slots=True)
class _Owned:
    status: _Status
    coordinator_epoch: int
    #: While loading: latest value per id (None: tombstone).
    buffer: dict[str, TransactionMetadata | None] = field(default_factory=dict)


class TransactionCoordinator:
    """Every transactional id this broker coordinates. Single-threaded: the driver
    serialises calls."""

    def __init__(
        self,
        *,
        config: TransactionCoordinatorConfig,
        allocate_producer_id: Callable[[], int],
    ) -> None:
        """``allocate_producer_id`` returns a producer id no one else got, or raises a
        KafkaError (e.g. COORDINATOR_LOAD_IN_PROGRESS while no id block is at hand),
        which the caller of InitProducerId is answered."""
        self._config = config
        self._allocate_producer_id = allocate_producer_id
        self._owned: dict[int, _Owned] = {}
        self._metadata: dict[str, TransactionMetadata] = {}
        self._pending: dict[str, _Pending] = {}
        self._append_owner: dict[int, str] = {}
        #: Partitions whose marker is not yet written, per id in PrepareCommit/Abort.
        self._markers_due: dict[str, set[TopicPartition]] = {}
        #: EndTxn answers held until the Complete record (a producer-id rotation).
        self._deferred_replies: dict[
            str, tuple[int, Callable[[TransactionMetadata], TxnResponse]]
        ] = {}
        self._next_append_id = 0
        self._next_timeout_check_ms = 0
        self._next_expiration_check_ms = 0

    # -- views -----------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return _partition_for(transactional_id, self._config.transaction_state_log_num_partitions)

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The durable metadata of an id this broker coordinates (None if unknown)."""
        return self._metadata.get(transactional_id)

    def transactional_ids(self) -> tuple[str, ...]:
        return tuple(self._metadata)

    def has_pending_write(self, transactional_id: str) -> bool:
        return transactional_id in self._pending

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> tuple[DescribedTransaction, ...]:
        out = []
        for tid in transactional_ids:
            error = self._coordinator_error(tid)
            metadata = self._metadata.get(tid)
            if error is None and metadata is None:
                error = TransactionalIdNotFoundError
            out.append(DescribedTransaction(error, tid, None if error else metadata))
        return tuple(out)

    # -- internals -------------------------------------------------------------------------

    def _coordinator_error(self, transactional_id: str) -> type[KafkaError] | None:
        owned = self._owned.get(self.partition_for(transactional_id))
        if owned is None:
            return NotCoordinatorError
        if owned.status is _Status.LOADING:
            return CoordinatorLoadInProgressError
        return None

    def _request_error(self, transactional_id: str) -> type[KafkaError] | None:
        """What every request about an id is refused with before its state is read."""
        if not transactional_id:
            return InvalidRequestError
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error
        if transactional_id in self._pending:
            return ConcurrentTransactionsError
        return None

    def _write(
        self,
        target: TransactionMetadata,
        *,
        on_success: _ReplyBuilder,
        on_error: _ErrorReply | None,
        defer_success: bool = False,
    ) -> AppendTransactionRecord:
        tid = target.transactional_id
        assert tid not in self._pending, f"a second write in flight for {tid!r}"
        self._next_append_id += 1
        append_id = self._next_append_id
        partition = self.partition_for(tid)
        self._pending[tid] = _Pending(
            append_id, partition, target, on_success, on_error, defer_success
        )
        self._append_owner[append_id] = tid
        return AppendTransactionRecord(append_id, partition, tid, transaction_record(target))

    def _bumped(self, metadata: TransactionMetadata) -> tuple[int, int]:
        """The producer id and epoch after one bump: epoch + 1, or a new producer id at
        epoch 0 once the epoch is exhausted (Kafka rotates at Short.MAX_VALUE - 1)."""
        if metadata.producer_epoch >= self._config.producer_epoch_max - 1:
            return self._allocate_producer_id(), 0
        return metadata.producer_id, metadata.producer_epoch + 1

    def _is_retry(self, metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        """The request carries what the producer held before the last bump: it repeats
        the request that bumped (whose answer was lost)."""
        return (
            metadata.last_producer_epoch != NO_PRODUCER_EPOCH
            and producer_id == metadata.last_producer_id
            and epoch == metadata.last_producer_epoch
        )

    # -- InitProducerId --------------------------------------------------------------------

    def init_producer_id(
        self,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
        now_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> TxnDecision[InitProducerIdResponse]:
        """InitProducerId for a transactional producer. ``producer_id``/``producer_epoch``
        are the KIP-360 recovery fields (-1: a new incarnation)."""

        def refuse(error: type[KafkaError]) -> TxnDecision[InitProducerIdResponse]:
            return TxnDecision(InitProducerIdResponse(error))

        error = self._request_error(transactional_id)
        if error is not None:
            return refuse(error)
        if not 0 < transaction_timeout_ms <= self._config.transaction_max_timeout_ms:
            return refuse(InvalidTransactionTimeoutError)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return refuse(InvalidRequestError)
        metadata = self._metadata.get(transactional_id)
        fresh = metadata is None
        if metadata is None:
            try:
                new_id = self._allocate_producer_id()
            except KafkaError as exc:
                return refuse(type(exc))
            metadata = TransactionMetadata.new(
                transactional_id,
                producer_id=new_id,
                timeout_ms=transaction_timeout_ms,
                now_ms=now_ms,
            )
        expected = producer_id != NO_PRODUCER_ID
        if expected and metadata.producer_epoch != NO_PRODUCER_EPOCH:
            current = (producer_id, producer_epoch) == (
                metadata.producer_id,
                metadata.producer_epoch,
            )
            if not current and not self._is_retry(metadata, producer_id, producer_epoch):
                return refuse(ProducerFencedError)
        else:
            current = True
        if metadata.state.is_prepare:
            return refuse(ConcurrentTransactionsError)
        if metadata.state is _S.ONGOING:
            # Abort the open transaction first, with a bumped epoch, and make the caller
            # come back. A new incarnation fences the old one for good (nobody may claim
            # the old epoch as "last"); a producer recovering its own current epoch
            # (KIP-360) may, and its retry is answered the bumped epoch.
            return self._fence_and_abort(
                metadata,
                now_ms=now_ms,
                recoverable=expected and current,
                reply=InitProducerIdResponse,
            )
        assert metadata.state.is_idle, metadata
        if expected and not current:
            # A retry of an InitProducerId (or EndTxn) that bumped: answer what it got.
            return TxnDecision(
                InitProducerIdResponse(None, metadata.producer_id, metadata.producer_epoch)
            )
        try:
            next_id, next_epoch = (metadata.producer_id, 0) if fresh else self._bumped(metadata)
        except KafkaError as exc:
            return refuse(type(exc))
        # A recovering producer (KIP-360) may retry this very call: remember what it held.
        last_id, last_epoch = (
            (producer_id, producer_epoch) if expected else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        )
        if fresh:
            target = metadata.transition(_S.EMPTY, now_ms=now_ms, producer_epoch=0)
        else:
            target = metadata.transition(
                _S.EMPTY,
                now_ms=now_ms,
                producer_id=next_id,
                producer_epoch=next_epoch,
                last_producer_id=last_id,
                last_producer_epoch=last_epoch,
                transaction_timeout_ms=transaction_timeout_ms,
            )
        append = self._write(
            target,
            on_success=lambda m: InitProducerIdResponse(None, m.producer_id, m.producer_epoch),
            on_error=InitProducerIdResponse,
        )
        return TxnDecision(None, (append,))

    def _fence_and_abort(
        self,
        metadata: TransactionMetadata,
        *,
        now_ms: int,
        recoverable: bool,
        reply: _ErrorReply | None,
    ) -> TxnDecision[InitProducerIdResponse]:
        """Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch bumped. The caller
        of InitProducerId is answered CONCURRENT_TRANSACTIONS once the abort is durable
        (it retries and bumps again); a timed-out producer may recover by KIP-360
        (``recoverable``: its id and epoch are kept as "last")."""
        assert metadata.state is _S.ONGOING, metadata
        fence = metadata.transition(
            _S.PREPARE_EPOCH_FENCE,
            now_ms=now_ms,
            producer_epoch=metadata.producer_epoch + 1,
            last_producer_id=metadata.producer_id if recoverable else NO_PRODUCER_ID,
            last_producer_epoch=metadata.producer_epoch if recoverable else NO_PRODUCER_EPOCH,
        )
        target = fence.transition(_S.PREPARE_ABORT, now_ms=now_ms)
        append = self._write(
            target,
            on_success=None if reply is None else (lambda m: reply(ConcurrentTransactionsError)),
            on_error=reply,
        )
        return TxnDecision(None, (append,))

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, type[KafkaError] | None]:
        """The id's metadata if (producer id, epoch) is its current one, else the error."""
        metadata = self._metadata.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return None, InvalidProducerIdMappingError
        if metadata.producer_epoch != producer_epoch:
            return None, ProducerFencedError
        return metadata, None

    def add_partitions_to_txn(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> TxnDecision[AddPartitionsToTxnResponse]:
        wanted = frozenset(partitions)

        def answer(error: ErrorType) -> AddPartitionsToTxnResponse:
            return AddPartitionsToTxnResponse({tp: error for tp in wanted})

        return self._add(
            transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            wanted=wanted,
            now_ms=now_ms,
            answer=answer,
        )

    def add_offsets_to_txn(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> TxnDecision[AddOffsetsToTxnResponse]:
        """Adds the group's ``__consumer_offsets`` partition: TxnOffsetCommit to the
        group coordinator then writes offsets that the markers make visible or drop."""
        if not group_id:
            return TxnDecision(AddOffsetsToTxnResponse(InvalidRequestError))
        offsets_partition = TopicPartition(
            CONSUMER_OFFSETS_TOPIC,
            coordinator_partition(group_id, self._config.offsets_topic_num_partitions),
        )
        return self._add(
            transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            wanted=frozenset({offsets_partition}),
            now_ms=now_ms,
            answer=AddOffsetsToTxnResponse,
        )

    def _add(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        wanted: frozenset[TopicPartition],
        now_ms: int,
        answer: Callable[[ErrorType], RT],
    ) -> TxnDecision[RT]:
        """The shared part of both Add requests; ``answer`` builds the response from its
        one error (now, or when the append completes)."""
        error = self._request_error(transactional_id)
        if error is None and not wanted:
            error = InvalidRequestError
        if error is not None:
            return TxnDecision(answer(error))
        metadata, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if metadata is None:
            return TxnDecision(answer(error))
        if metadata.state.is_prepare:
            return TxnDecision(answer(ConcurrentTransactionsError))
        if metadata.state is _S.ONGOING and wanted <= metadata.partitions:
            return TxnDecision(answer(None))  # already in the transaction: nothing to write
        target = metadata.transition(
            _S.ONGOING,
            now_ms=now_ms,
            partitions=metadata.partitions | wanted,
            transaction_start_time_ms=(
                metadata.transaction_start_time_ms if metadata.state is _S.ONGOING else now_ms
            ),
        )
        append = self._write(target, on_success=lambda m: answer(None), on_error=answer)
        return TxnDecision(None, (append,))

    def verify_partitions(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> AddPartitionsToTxnResponse:
        """AddPartitionsToTxn with ``verify_only`` (KIP-890 part 1): for each partition,
        None if it is in the producer's ongoing transaction at exactly this epoch, so
        its leader may accept the producer's first transactional batch. Only durable
        state counts; nothing is written."""
        wanted = tuple(partitions)

        def everyone(error: ErrorType) -> AddPartitionsToTxnResponse:
            return AddPartitionsToTxnResponse({tp: error for tp in wanted})

        if not transactional_id:
            return everyone(InvalidRequestError)
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return everyone(error)
        metadata, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if metadata is None:
            return everyone(error)
        pending = self._pending.get(transactional_id)
        if metadata.state.is_prepare or (
            pending is not None and pending.target.state is not _S.ONGOING
        ):
            # The outcome is (being) decided: no new data may join this transaction.
            return everyone(ConcurrentTransactionsError)
        in_txn = metadata.partitions if metadata.state is _S.ONGOING else frozenset()
        return AddPartitionsToTxnResponse(
            {tp: None if tp in in_txn else InvalidTxnStateError for tp in wanted}
        )

    # -- EndTxn ----------------------------------------------------------------------------

    def end_txn(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        now_ms: int,
        transaction_version: int = 2,
    ) -> TxnDecision[EndTxnResponse]:
        """``transaction_version`` is the client's (EndTxn v5+ and raftka's client: 2);
        the broker's ``transaction.version`` caps it. It decides this EndTxn's epoch
        rules and is kept with the transaction for its markers."""

        def refuse(error: type[KafkaError]) -> TxnDecision[EndTxnResponse]:
            return TxnDecision(EndTxnResponse(error))

        version = min(transaction_version, self._config.transaction_version)

        error = self._request_error(transactional_id)
        if error is not None:
            return refuse(error)
        metadata = self._metadata.get(transactional_id)
        if metadata is None:
            return refuse(InvalidProducerIdMappingError)
        commit = result is TransactionResult.COMMIT
        state = metadata.state
        same_result = (
            (_S.PREPARE_COMMIT, _S.COMPLETE_COMMIT)
            if commit
            else (_S.PREPARE_ABORT, _S.COMPLETE_ABORT)
        )
        current = (producer_id, producer_epoch) == (metadata.producer_id, metadata.producer_epoch)
        if version >= 2:
            # KIP-890 part 2: only the current epoch starts an EndTxn; the epoch held
            # before the bump may only repeat the EndTxn that bumped it.
            retry = self._is_retry(metadata, producer_id, producer_epoch)
        else:
            # The classic protocol: the epoch does not move, so a repeat carries the
            # current one (and so does a late EndTxn of the previous transaction).
            retry = current and (state.is_prepare or state.is_complete)
        if metadata.producer_id != producer_id and not retry:
            return refuse(InvalidProducerIdMappingError)
        if state is _S.ONGOING:
            if not current:
                return refuse(ProducerFencedError)
            return self._prepare(metadata, result, now_ms, version)
        if retry and (state.is_prepare or state.is_complete):
            if state not in same_result:
                return refuse(InvalidTxnStateError)
            if state.is_prepare:
                return refuse(ConcurrentTransactionsError)  # answered once Complete
            return TxnDecision(_ended(metadata, version))
        if not current:
            return refuse(ProducerFencedError)
        if state.is_prepare:
            return refuse(ConcurrentTransactionsError)
        # An idle id at the current epoch has nothing to commit; version 2 aborts it
        # anyway, to hand the producer a fresh epoch (Kafka 4's empty abort).
        if commit or version < 2:
            return refuse(InvalidTxnStateError)
        return self._prepare(metadata, result, now_ms, version)

    def _prepare(
        self, metadata: TransactionMetadata, result: TransactionResult, now_ms: int, version: int
    ) -> TxnDecision[EndTxnResponse]:
        bump = version >= 2
        target = metadata.transition(
            _S.PREPARE_COMMIT if result is TransactionResult.COMMIT else _S.PREPARE_ABORT,
            now_ms=now_ms,
            producer_epoch=metadata.producer_epoch + 1 if bump else None,
            last_producer_id=metadata.producer_id if bump else None,
            last_producer_epoch=metadata.producer_epoch if bump else None,
            transaction_start_time_ms=(
                metadata.transaction_start_time_ms if metadata.state is _S.ONGOING else now_ms
            ),
            client_transaction_version=version,
        )
        append = self._write(
            target,
            on_success=lambda m: _ended(m, version),
            on_error=EndTxnResponse,
            # When the Complete step moves the id to a new producer id, the producer is
            # answered only then: it must not go on with an exhausted epoch.
            defer_success=self._rotates(target),
        )
        return TxnDecision(None, (append,))

    def _rotates(self, prepared: TransactionMetadata) -> bool:
        """Completing ``prepared`` moves the id to a new producer id (its epoch is
        exhausted: the next bump would pass the int16 range)."""
        return prepared.producer_epoch >= self._config.producer_epoch_max - 1

    # -- appends and markers ---------------------------------------------------------------

    def append_completed(
        self, *, append_id: int, error: type[KafkaError] | None, now_ms: int
    ) -> tuple[TxnOutput, ...]:
        """The driver appended (``error`` None) or failed to append ``append_id``."""
        tid = self._append_owner.pop(append_id, None)
        if tid is None:
            return ()  # its partition was unloaded meanwhile (the waiter was answered then)
        pending = self._pending.pop(tid)
        assert pending.append_id == append_id, (pending, append_id)
        outputs: list[TxnOutput] = []
        if error is not None:
            # Nothing changes: memory still holds the last durable value.
            if pending.on_error is not None:
                mapped = coordinator_error_for_append(error)
                outputs.append(TxnReply(append_id, tid, pending.on_error(mapped)))
            return tuple(outputs)
        if pending.on_success is not None:
            if pending.defer_success:
                self._deferred_replies[tid] = (append_id, pending.on_success)
            else:
                outputs.append(TxnReply(append_id, tid, pending.on_success(pending.target)))
        outputs.extend(self._apply(pending.target, now_ms))
        return tuple(outputs)

    def _apply(self, metadata: TransactionMetadata, now_ms: int) -> list[TxnOutput]:
        """``metadata`` is durable: it is now the id's state; start what it implies."""
        tid = metadata.transactional_id
        if metadata.state is _S.DEAD:
            del self._metadata[tid]
            return []
        self._metadata[tid] = metadata
        outputs: list[TxnOutput] = []
        if metadata.state.is_prepare:
            self._markers_due[tid] = set(metadata.partitions)
            outputs.extend(self._markers_or_complete(metadata, now_ms))
        elif metadata.state.is_complete:
            self._markers_due.pop(tid, None)
            deferred = self._deferred_replies.pop(tid, None)
            if deferred is not None:
                append_id, build = deferred
                outputs.append(TxnReply(append_id, tid, build(metadata)))
        return outputs

    def _markers_or_complete(self, metadata: TransactionMetadata, now_ms: int) -> list[TxnOutput]:
        due = self._markers_due[metadata.transactional_id]
        if due:
            owned = self._owned[self.partition_for(metadata.transactional_id)]
            return [
                SendTxnMarkers(
                    transactional_id=metadata.transactional_id,
                    producer_id=metadata.producer_id,
                    producer_epoch=metadata.producer_epoch,
                    coordinator_epoch=owned.coordinator_epoch,
                    result=(
                        TransactionResult.COMMIT
                        if metadata.state is _S.PREPARE_COMMIT
                        else TransactionResult.ABORT
                    ),
                    partitions=frozenset(due),
                    transaction_version=metadata.client_transaction_version,
                )
            ]
        complete = self._write_complete(metadata, now_ms)
        return [] if complete is None else [complete]

    def _write_complete(
        self, prepared: TransactionMetadata, now_ms: int
    ) -> AppendTransactionRecord | None:
        """Every marker is written: write CompleteCommit/CompleteAbort (None: no producer
        id for a rotation now; ``tick`` tries again)."""
        target_state = (
            _S.COMPLETE_COMMIT if prepared.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        )
        if self._rotates(prepared):
            try:
                new_id = self._allocate_producer_id()
            except KafkaError:
                return None
            # The producer's pre-bump id and epoch stay "last": its EndTxn retry is
            # answered with the new producer id.
            target = prepared.transition(
                target_state, now_ms=now_ms, producer_id=new_id, producer_epoch=0
            )
        else:
            target = prepared.transition(target_state, now_ms=now_ms)
        return self._write(target, on_success=None, on_error=None)

    def markers_written(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> tuple[TxnOutput, ...]:
        """The leaders of ``partitions`` wrote the marker of ``SendTxnMarkers`` (or the
        partition no longer exists). Once every partition has it, Complete is written."""
        metadata = self._metadata.get(transactional_id)
        due = self._markers_due.get(transactional_id)
        if (
            metadata is None
            or due is None
            or not metadata.state.is_prepare
            or (metadata.producer_id, metadata.producer_epoch) != (producer_id, producer_epoch)
        ):
            return ()  # a late report for a transaction that already moved on
        had_due = bool(due)
        due.difference_update(partitions)
        if due or not had_due or transactional_id in self._pending:
            return ()
        return tuple(self._markers_or_complete(metadata, now_ms))

    # -- time ------------------------------------------------------------------------------

    def tick(self, *, now_ms: int) -> tuple[TxnOutput, ...]:
        """Abort timed-out transactions and retry failed Complete writes (every
        transaction.abort.timed.out.transaction.cleanup.interval.ms); expire idle ids
        (every transaction.remove.expired.transaction.cleanup.interval.ms)."""
        config = self._config
        outputs: list[TxnOutput] = []
        if now_ms >= self._next_timeout_check_ms:
            self._next_timeout_check_ms = (
                now_ms + config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            )
            for tid, metadata in list(self._metadata.items()):
                if tid in self._pending:
                    continue
                if metadata.state is _S.ONGOING and (
                    metadata.transaction_start_time_ms + metadata.transaction_timeout_ms < now_ms
                ):
                    decision = self._fence_and_abort(
                        metadata, now_ms=now_ms, recoverable=True, reply=None
                    )
                    outputs.extend(decision.outputs)
                elif metadata.state.is_prepare and not self._markers_due.get(tid):
                    complete = self._write_complete(metadata, now_ms)
                    if complete is not None:
                        outputs.append(complete)
        if now_ms >= self._next_expiration_check_ms:
            self._next_expiration_check_ms = (
                now_ms + config.transaction_remove_expired_transaction_cleanup_interval_ms
            )
            for tid, metadata in list(self._metadata.items()):
                if (
                    tid not in self._pending
                    and metadata.state.is_idle
                    and metadata.transaction_last_update_time_ms
                    + config.transactional_id_expiration_ms
                    <= now_ms
                ):
                    dead = metadata.transition(_S.DEAD, now_ms=now_ms)
                    outputs.append(self._write(dead, on_success=None, on_error=None))
        return tuple(outputs)

    def next_deadline_ms(self) -> int:
        """When the driver should call ``tick`` next at the latest."""
        return min(self._next_timeout_check_ms, self._next_expiration_check_ms)

    # -- loading ---------------------------------------------------------------------------

    def begin_loading(self, *, partition: int, coordinator_epoch: int) -> None:
        """This broker now leads ``partition`` of __transaction_state at leader epoch
        ``coordinator_epoch``; its records follow through :meth:`replay`."""
        assert partition not in self._owned, f"partition {partition} already owned"
        assert 0 <= partition < self._config.transaction_state_log_num_partitions, partition
        self._owned[partition] = _Owned(_Status.LOADING, coordinator_epoch)

    def replay(self, *, partition: int, records: Iterable[TransactionLogRecord]) -> None:
        """Feed records of ``partition`` in log order (any number of calls)."""
        owned = self._owned[partition]
        assert owned.status is _Status.LOADING, partition
        for record in records:
            tid = decode_transaction_key(record.key)
            if self.partition_for(tid) != partition:
                raise TransactionRecordError(
                    f"transactional id {tid!r} does not belong in partition {partition}"
                )
            owned.buffer[tid] = (
                None if record.value is None else decode_transaction_value(tid, record.value)
            )

    def complete_loading(self, *, partition: int, now_ms: int) -> tuple[TxnOutput, ...]:
        """Serve the replayed ids; finish the transactions whose outcome was decided."""
        owned = self._owned[partition]
        assert owned.status is _Status.LOADING, partition
        owned.status = _Status.LOADED
        outputs: list[TxnOutput] = []
        for metadata in owned.buffer.values():
            if metadata is not None:
                outputs.extend(self._apply(metadata, now_ms))
        owned.buffer = {}
        return tuple(outputs)

    def unload(self, *, partition: int) -> tuple[TxnOutput, ...]:
        """This broker lost ``partition``: forget its ids, answer whoever waits."""
        if self._owned.pop(partition, None) is None:
            return ()
        outputs: list[TxnOutput] = []
        for tid, pending in list(self._pending.items()):
            if pending.partition == partition:
                del self._pending[tid]
                del self._append_owner[pending.append_id]
                if pending.on_error is not None:
                    response = pending.on_error(NotCoordinatorError)
                    outputs.append(TxnReply(pending.append_id, tid, response))
        for tid, (append_id, _) in list(self._deferred_replies.items()):
            if self.partition_for(tid) == partition:
                del self._deferred_replies[tid]
                outputs.append(TxnReply(append_id, tid, EndTxnResponse(NotCoordinatorError)))
        for tid in list(self._metadata):
            if self.partition_for(tid) == partition:
                del self._metadata[tid]
                self._markers_due.pop(tid, None)
        return tuple(outputs)
