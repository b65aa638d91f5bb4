"""The transactional producer's requests to its coordinators: the I/O shell around
:mod:`.transactions` (Kafka's TransactionManager, request side).

Theory of operation
-------------------
One :class:`TransactionManager` per producer with a ``transactional_id``, on the
producer's event loop.

- **Coordinators.** FindCoordinator with ``key_type`` 1 and the transactional id names
  the transaction coordinator (``key_type`` 0 and a group id, a group coordinator for
  TxnOffsetCommit). An answer is kept until a request to it fails with
  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a network error.
- **Retries** (:meth:`TransactionManager._call`): COORDINATOR_LOAD_IN_PROGRESS,
  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS and network
  errors are retried after ``retry_backoff_ms`` until the call's deadline
  (``max_block_ms`` for the application's calls), then ``KafkaTimeoutError``, which
  changes no state: the call may be made again.
- **Errors** are sorted as Kafka's TransactionManager sorts them
  (:func:`classify`): PRODUCER_FENCED and INVALID_PRODUCER_EPOCH (Kafka maps the latter
  to ProducerFencedException), TRANSACTION_COORDINATOR_FENCED, INVALID_TXN_STATE from
  the coordinator, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION and
  INVALID_TRANSACTION_TIMEOUT are *fatal*; anything else (TRANSACTION_ABORTABLE,
  INVALID_PRODUCER_ID_MAPPING, a failed batch, an offset commit refused for the
  group's generation, ...) is *abortable*.
- **Identity.** InitProducerId (to the coordinator, with the id and
  ``transaction_timeout_ms``) sets the :class:`IdempotenceState` the sender numbers
  batches with. With transaction version 2 (KIP-890 part 2) EndTxn answers a new
  epoch, adopted at once (sequences restart at 0 under it). A version-1 coordinator
  answers none: after an abort whose batches failed under the current epoch, an
  InitProducerId with the current id and epoch bumps it (KIP-360).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from raftka.client._transport import MetadataCache, Transport, error_from_message, monotonic_ms
from raftka.client.config import ProducerConfig
from raftka.client.consumer.listener import ConsumerGroupMetadata
from raftka.client.producer.idempotence import IdempotenceState
from raftka.client.producer.transactions import TransactionState
from raftka.common.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    NotCoordinatorError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from raftka.common.messages import Message
from raftka.common.messages import broker as broker_api
from raftka.common.messages import coordinator as coordinator_api
from raftka.common.messages import transactions as txn_api
from raftka.common.messages.broker import ErrorObject
from raftka.common.structs import OffsetAndMetadata, TopicPartition

__all__ = ["KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "TransactionManager", "classify"]

log = logging.getLogger(__name__)

KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
#: Backoff after CONCURRENT_TRANSACTIONS: the transaction in the way is finishing its
#: markers, usually within milliseconds (Kafka's client uses 20 ms for AddPartitions).
CONCURRENT_BACKOFF_MS: Final = 20
#: The least time worth giving one more attempt before a call's deadline.
ATTEMPT_MIN_MS: Final = 10
#: Errors retried against a (possibly new) coordinator until the call's deadline.
_RETRIED: Final = (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    ConcurrentTransactionsError,
    NetworkError,
    RequestTimedOutError,
    # A partition the metadata does not have yet (Kafka retries it too).
    UnknownTopicOrPartitionError,
)
#: Retried errors that mean the coordinator must be looked up again.
_LOOK_UP_AGAIN: Final = (
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NetworkError,
    RequestTimedOutError,
)
#: Errors after which the producer cannot continue (Kafka's fatalError cases). The
#: authorization error has no class in raftka's core (raftka has no ACLs), so it is
#: matched by name.
_FATAL: Final = (
    ProducerFencedError,
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
    InvalidTxnStateError,
    UnsupportedVersionError,
    InvalidTransactionTimeoutError,
)
_FATAL_NAMES: Final = frozenset({"TRANSACTIONAL_ID_AUTHORIZATION_FAILED"})

M = TypeVar("M")


def classify(error: KafkaError) -> tuple[bool, KafkaError]:
    """(fatal?, the error to keep). INVALID_PRODUCER_EPOCH becomes PRODUCER_FENCED, as
    in Kafka's client: either means a newer instance of the id took over."""
    if isinstance(error, InvalidProducerEpochError):
        return True, ProducerFencedError(
            f"there is a newer producer with the same transactional_id: {error}"
        )
    if isinstance(error, _FATAL) or error.name in _FATAL_NAMES:
        return True, error
    return False, error


def _first_error(errors: Mapping[TopicPartition, KafkaError]) -> KafkaError:
    """The error to report for a request with per-partition errors: a fatal one if
    any, else the first."""
    for error in errors.values():
        if classify(error)[0]:
            return error
    return next(iter(errors.values()))


def _error_of(error: ErrorObject | None) -> KafkaError | None:
    return None if error is None else error_from_message(error)


class TransactionManager:
    """See the module docstring. Not thread-safe: the producer's event loop only
    (the :class:`TransactionState` it holds has its own lock)."""

    def __init__(
        self,
        *,
        config: ProducerConfig,
        transport: Transport,
        metadata: MetadataCache,
        idempotence: IdempotenceState,
        state: TransactionState,
        wake: Callable[[], None],
    ) -> None:
        assert config.transactional_id is not None
        self.transactional_id: str = config.transactional_id
        self.state = state
        self._config = config
        self._transport = transport
        self._metadata = metadata
        self._idem = idempotence
        self._wake = wake
        #: Coordinator addresses by (key_type, key).
        self._coordinators: dict[tuple[int, str], str] = {}
        self._add_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ requests

    async def _find_coordinator(self, key_type: int, key: str, deadline_ms: int) -> str:
        known = self._coordinators.get((key_type, key))
        if known is not None:
            return known
        last: KafkaError = CoordinatorNotAvailableError("no broker answered FindCoordinator")
        while True:
            for address in self._metadata.broker_addresses():
                try:
                    answer = await self._transport.request_message(
                        address,
                        "POST",
                        "/v1/find-coordinator",
                        coordinator_api.FindCoordinatorResponse,
                        message=coordinator_api.FindCoordinatorRequest(key=key, key_type=key_type),
                        timeout_ms=self._timeout(deadline_ms),
                    )
                except KafkaError as e:
                    if not e.retriable:
                        raise  # the broker refused the request itself (INVALID_REQUEST)
                    last = e
                    continue
                error = _error_of(answer.error)
                if error is None:
                    found = self._coordinators[key_type, key] = f"{answer.host}:{answer.port}"
                    return found
                last = error
                if not error.retriable:
                    raise error
                break  # a broker answered: it knows; wait before asking again
            await self._backoff(deadline_ms, last)

    def _timeout(self, deadline_ms: int) -> int:
        return max(1, min(self._config.request_timeout_ms, deadline_ms - monotonic_ms()))

    async def _backoff(self, deadline_ms: int, last: KafkaError) -> None:
        """Wait before the next attempt; KafkaTimeoutError naming ``last`` when the
        deadline leaves no time for one after the wait (an attempt with a timeout of
        a few milliseconds would only hide ``last`` behind its own timeout)."""
        backoff = (
            CONCURRENT_BACKOFF_MS
            if isinstance(last, ConcurrentTransactionsError)
            else self._config.retry_backoff_ms
        )
        remaining = deadline_ms - monotonic_ms()
        if remaining - backoff < ATTEMPT_MIN_MS:
            raise KafkaTimeoutError(
                f"transactional_id {self.transactional_id!r}: no answer in time; last: "
                f"{last.name}: {last}"
            )
        await asyncio.sleep(backoff / 1000)

    async def _call(
        self,
        path: str,
        message: Message,
        answer_type: type[M],
        error_of: Callable[[M], KafkaError | None],
        deadline_ms: int,
        *,
        key_type: int = KEY_TYPE_TRANSACTION,
        key: str | None = None,
    ) -> M:
        """One coordinator request, retried (module docstring) until it answers
        without a retriable error; a non-retriable error is raised as it came."""
        coordinator_key = (key_type, self.transactional_id if key is None else key)
        while True:
            address = await self._find_coordinator(*coordinator_key, deadline_ms)
            try:
                answer = await self._transport.request_message(
                    address,
                    "POST",
                    path,
                    answer_type,
                    message=message,
                    timeout_ms=self._timeout(deadline_ms),
                )
                error = error_of(answer)
            except (NetworkError, RequestTimedOutError) as e:
                error = e
            if error is None:
                return answer
            if not isinstance(error, _RETRIED):
                raise error
            if isinstance(error, _LOOK_UP_AGAIN):
                self._coordinators.pop(coordinator_key, None)
            log.debug("%s for %r: %s; retrying", path, self.transactional_id, error)
            await self._backoff(deadline_ms, error)

    def _fail(self, error: KafkaError) -> KafkaError:
        """Record ``error`` in the state (fatal or abortable) and return what to raise."""
        fatal, kept = classify(error)
        if fatal:
            self.state.fatal_error(kept)
        else:
            self.state.abortable_error(kept)
        return kept

    # ------------------------------------------------------------------ InitProducerId

    async def init_transactions(self, deadline_ms: int) -> None:
        """``init_transactions()``: a producer id and epoch from the coordinator
        (fencing every older instance of the id, and aborting its open transaction)."""
        self.state.begin_init()
        await self._init_producer_id(deadline_ms, bump=False)
        self.state.init_done()

    async def _init_producer_id(self, deadline_ms: int, *, bump: bool) -> None:
        idem = self._idem
        request = broker_api.InitProducerIdRequest(
            transactional_id=self.transactional_id,
            timeout_ms=self._config.request_timeout_ms,
            transaction_timeout_ms=self._config.transaction_timeout_ms,
            producer_id=idem.producer_id if bump else -1,
            producer_epoch=idem.producer_epoch if bump else -1,
        )
        try:
            answer = await self._call(
                "/v1/init-producer-id",
                request,
                broker_api.InitProducerIdResponse,
                lambda a: _error_of(a.error),
                deadline_ms,
            )
        except KafkaTimeoutError:
            raise  # no state change: init_transactions may be called again
        except KafkaError as e:
            # Kafka's InitProducerIdHandler: anything but a retriable coordinator error
            # is fatal (fenced, refused id, a timeout above the broker's maximum, ...).
            fatal = classify(e)[1]
            self.state.fatal_error(fatal)
            raise fatal from None
        if idem.has_identity:
            idem.forget()
        idem.set_identity(answer.producer_id, answer.producer_epoch)
        log.info(
            "transactional_id %r: producer id %d, epoch %d",
            self.transactional_id,
            answer.producer_id,
            answer.producer_epoch,
        )
        self._wake()

    # ------------------------------------------------------------------ AddPartitionsToTxn

    def maybe_add_partitions(self) -> None:
        """The sender's turn: start one AddPartitionsToTxn for every partition sent to
        and not yet in the transaction, unless one is in flight already."""
        if self._add_task is not None and not self._add_task.done():
            return
        if self.state.in_error or not self.state.pending_partitions():
            return
        self._add_task = asyncio.create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        pending = sorted(self.state.pending_partitions())
        idem = self._idem
        by_topic: dict[str, list[int]] = {}
        for tp in pending:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        self.state.mark_started()
        request = txn_api.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=idem.producer_id,
            producer_epoch=idem.producer_epoch,
            topics=tuple(
                txn_api.TxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        # Bounded like the batches that wait for it: they expire on their delivery
        # timeout (an abortable error) if the coordinator never answers.
        deadline_ms = monotonic_ms() + self._config.delivery_timeout_ms
        try:
            await self._call(
                "/v1/add-partitions-to-txn",
                request,
                txn_api.AddPartitionsToTxnResponse,
                _add_partitions_error,
                deadline_ms,
            )
        except KafkaError as e:
            log.info("AddPartitionsToTxn for %r failed: %s", self.transactional_id, e)
            self._fail(e)
        else:
            self.state.partitions_added(pending)
        finally:
            self._wake()

    def cancel(self) -> None:
        """The sender stops: no AddPartitionsToTxn outlives it."""
        if self._add_task is not None:
            self._add_task.cancel()

    async def wait_for_add(self) -> None:
        """Wait for the AddPartitionsToTxn in flight, if any (an abort or close must
        not race it)."""
        task = self._add_task
        if task is not None and not task.done():
            await asyncio.wait([task])

    # ------------------------------------------------------------------ offsets

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
        deadline_ms: int,
    ) -> None:
        """``send_offsets_to_transaction``: AddOffsetsToTxn to the transaction
        coordinator, then TxnOffsetCommit to the group's coordinator; the offsets
        become the group's committed offsets only if the transaction commits."""
        self.state.begin_send_offsets()
        idem = self._idem
        try:
            if not self.state.group_added(group.group_id):
                self.state.mark_started()
                await self._call(
                    "/v1/add-offsets-to-txn",
                    txn_api.AddOffsetsToTxnRequest(
                        transactional_id=self.transactional_id,
                        producer_id=idem.producer_id,
                        producer_epoch=idem.producer_epoch,
                        group_id=group.group_id,
                    ),
                    txn_api.AddOffsetsToTxnResponse,
                    lambda a: _error_of(a.error),
                    deadline_ms,
                )
                self.state.group_joined(group.group_id)
            by_topic: dict[str, list[txn_api.TxnOffsetCommitPartition]] = {}
            for tp, om in sorted(offsets.items()):
                by_topic.setdefault(tp.topic, []).append(
                    txn_api.TxnOffsetCommitPartition(
                        partition_index=tp.partition,
                        committed_offset=om.offset,
                        committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                        committed_metadata=om.metadata or "",
                    )
                )
            await self._call(
                "/v1/txn-offset-commit",
                txn_api.TxnOffsetCommitRequest(
                    transactional_id=self.transactional_id,
                    group_id=group.group_id,
                    producer_id=idem.producer_id,
                    producer_epoch=idem.producer_epoch,
                    generation_id=group.generation_id,
                    member_id=group.member_id,
                    group_instance_id=group.group_instance_id,
                    topics=tuple(
                        txn_api.TxnOffsetCommitTopic(name=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                ),
                txn_api.TxnOffsetCommitResponse,
                _txn_offset_commit_error,
                deadline_ms,
                key_type=KEY_TYPE_GROUP,
                key=group.group_id,
            )
        except KafkaTimeoutError:
            raise  # the transaction may go on: the call can be made again
        except KafkaError as e:
            raise self._fail(e) from None

    # ------------------------------------------------------------------ EndTxn

    async def end_transaction(self, *, committed: bool, deadline_ms: int) -> None:
        """EndTxn(commit|abort) once the caller flushed or failed every batch; then
        adopt the new epoch (transaction version 2) or bump it if an aborted batch
        left a sequence hole (version 1)."""
        idem = self._idem
        if not self.state.started and idem.reset_reason is None:
            # Nothing reached the coordinator: there is no transaction to end (Kafka's
            # client skips EndTxn too; a commit of nothing is INVALID_TXN_STATE).
            self.state.end_done()
            return
        try:
            answer = await self._call(
                "/v1/end-txn",
                txn_api.EndTxnRequest(
                    transactional_id=self.transactional_id,
                    producer_id=idem.producer_id,
                    producer_epoch=idem.producer_epoch,
                    committed=committed,
                ),
                txn_api.EndTxnResponse,
                lambda a: _error_of(a.error),
                deadline_ms,
            )
        except KafkaTimeoutError:
            raise  # still COMMITTING/ABORTING: the same call resumes it
        except KafkaError as e:
            if committed:
                raise self._fail(e) from None
            # An abort that failed cannot be aborted again: fatal, as in Kafka.
            fatal = classify(e)[1]
            self.state.fatal_error(fatal)
            raise fatal from None
        bumped = answer.producer_id >= 0 and answer.producer_epoch >= 0
        if bumped and (answer.producer_id, answer.producer_epoch) == (
            idem.producer_id,
            idem.producer_epoch,
        ):
            # Not a new epoch (a coordinator capped at transaction version 1 that still
            # named it): the sequences must go on, or the next batch would repeat
            # sequence 0 and be dropped as a duplicate.
            bumped = False
        if bumped:
            # KIP-890 part 2: the coordinator bumped the epoch for the next transaction.
            idem.forget()
            idem.set_identity(answer.producer_id, answer.producer_epoch)
            self.state.end_done()
        elif not committed and idem.reset_reason is not None:
            # (A commit never gets here with a hole: a failed batch made it abortable.)
            # If this InitProducerId times out the state stays INITIALIZING:
            # init_transactions() then finishes it (the coordinator bumps the epoch).
            self.state.begin_epoch_bump()
            await self._init_producer_id(deadline_ms, bump=True)
            self.state.init_done()
        else:
            self.state.end_done()
        self._wake()


def _add_partitions_error(answer: txn_api.AddPartitionsToTxnResponse) -> KafkaError | None:
    """The answer's error: the request's, else a retriable one per partition (retried
    as a whole), else the first fatal or abortable one (OPERATION_NOT_ATTEMPTED means
    another partition's error stopped it)."""
    error = _error_of(answer.error)
    if error is not None:
        return error
    errors = _partition_errors(answer.results)
    if not errors:
        return None
    for e in errors.values():
        if isinstance(e, _RETRIED):
            return e
    meaningful = {tp: e for tp, e in errors.items() if e.name != "OPERATION_NOT_ATTEMPTED"}
    return _first_error(meaningful or errors)


def _partition_errors(
    topics: tuple[txn_api.TxnTopicResult, ...],
) -> dict[TopicPartition, KafkaError]:
    """The partitions an answer names an error for, with it."""
    errors: dict[TopicPartition, KafkaError] = {}
    for topic in topics:
        for p in topic.partitions:
            e = _error_of(p.error)
            if e is not None:
                errors[TopicPartition(topic.name, p.partition_index)] = e
    return errors


def _txn_offset_commit_error(answer: txn_api.TxnOffsetCommitResponse) -> KafkaError | None:
    errors = _partition_errors(answer.topics)
    if not errors:
        return None
    for e in errors.values():
        if isinstance(e, _RETRIED):
            return e
    first = _first_error(errors)
    if first.name in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_INSTANCE_ID"):
        # Kafka's CommitFailedException: the consumer lost its partitions meanwhile;
        # abortable (the transaction's output must not be committed with them).
        return CommitFailedError(
            f"the group rejected the transaction's offsets ({first.name}: {first}); "
            "its partitions were reassigned: abort the transaction"
        )
    return first
