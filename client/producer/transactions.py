"""The transactional producer's state machine (Kafka's TransactionManager states). Pure.

Theory of operation
-------------------
A producer with a ``transactional_id`` moves through Kafka's states::

    UNINITIALIZED --init_transactions--> INITIALIZING --InitProducerId--> READY
    READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING_TRANSACTION --EndTxn--> READY
    IN_TRANSACTION, ABORTABLE_ERROR --abort_transaction--> ABORTING_TRANSACTION --EndTxn--> READY
    ABORTING_TRANSACTION --(a batch failed: new epoch needed)--> INITIALIZING
    IN_TRANSACTION, COMMITTING_TRANSACTION, INITIALIZING --abortable error--> ABORTABLE_ERROR
    any --fatal error--> FATAL_ERROR (final)

The table of legal previous states is :data:`LEGAL_PREVIOUS` (Kafka's
``TransactionManager.isTransitionValid``); every transition goes through
:meth:`TransactionState._transition`, so an edge outside the table is an
``IllegalStateError`` naming both states, never a silent change.

What each public method does, as Kafka's producer does:

- an application call in the wrong state raises ``IllegalStateError`` (kafka-python's
  and Kafka's name) and changes nothing;
- in FATAL_ERROR every call raises the fatal error again (``ProducerFencedError`` for
  a producer that a newer instance with the same id fenced): only ``close`` is left;
- in ABORTABLE_ERROR ``send``, ``send_offsets_to_transaction`` and
  ``commit_transaction`` raise the error (a new exception of the same class, naming
  the cause); ``abort_transaction`` is the way out, after which the producer is READY.

A commit or abort whose call timed out may be called again: the state stays
COMMITTING/ABORTING until the coordinator answered, and the same call resumes it
(Kafka 3.x allows this too). Anything else needs the state table.

Partitions: ``send`` registers its partition (:meth:`TransactionState.add_partition`);
the sender asks for the pending ones (:meth:`pending_partitions`), sends one
AddPartitionsToTxn for all of them (Kafka batches this too), and only drains a
partition's batches once it is in the transaction (:meth:`is_added`).

Thread safety: every method takes the instance's lock; the blocking producer's ``send``
checks the state in its caller's thread while the sender updates it on the loop thread.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from typing import Final

from raftka.common.errors import IllegalStateError, KafkaError
from raftka.common.structs import TopicPartition

__all__ = ["LEGAL_PREVIOUS", "TransactionState", "TxnState"]


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
#: Kafka's TransactionManager.isTransitionValid: target -> the states it may follow.
#: FATAL_ERROR may follow any state (None).
LEGAL_PREVIOUS: Final[dict[TxnState, frozenset[TxnState] | None]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset(
        {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}
    ),
    S.FATAL_ERROR: None,
}


def legal(source: TxnState, target: TxnState) -> bool:
    allowed = LEGAL_PREVIOUS[target]
    return allowed is None or source in allowed


class TransactionState:
    """One transactional producer's state, error and partitions (module docstring)."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._lock = threading.Lock()
        self._state = TxnState.UNINITIALIZED
        self._last_error: KafkaError | None = None
        #: Partitions in the current transaction (the coordinator knows them).
        self._added: set[TopicPartition] = set()
        #: Partitions sent to and not yet added (next AddPartitionsToTxn).
        self._pending: set[TopicPartition] = set()
        #: Consumer groups whose offsets joined the transaction (AddOffsetsToTxn done).
        self._groups: set[str] = set()
        #: An AddPartitionsToTxn or AddOffsetsToTxn was sent in this transaction (it may
        #: have reached the coordinator even if its answer was lost): EndTxn is needed.
        self._started = False

    # ------------------------------------------------------------------ views

    @property
    def state(self) -> TxnState:
        return self._state

    @property
    def last_error(self) -> KafkaError | None:
        return self._last_error

    @property
    def in_error(self) -> bool:
        return self._state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    def is_added(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._added

    def pending_partitions(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._pending)

    def partitions(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._added)

    @property
    def started(self) -> bool:
        return self._started

    def mark_started(self) -> None:
        with self._lock:
            self._started = True

    def raise_if_error(self, what: str) -> None:
        """The fatal error, or the abortable one (as in ``commit_transaction`` after a
        batch failed during its flush)."""
        with self._lock:
            self._fail_if_error(what)

    def group_added(self, group_id: str) -> bool:
        with self._lock:
            return group_id in self._groups

    # ------------------------------------------------------------------ transitions

    def _transition(self, target: TxnState) -> None:
        if not legal(self._state, target):
            raise IllegalStateError(
                f"transactional_id {self.transactional_id!r}: invalid transition attempted "
                f"from state {self._state.value} to state {target.value}"
            )
        self._state = target

    def _fail_if_fatal(self) -> None:
        if self._state is TxnState.FATAL_ERROR:
            assert self._last_error is not None
            raise self._last_error

    def _fail_if_error(self, what: str) -> None:
        """Kafka's maybeFailWithError: a fatal error again, or an abortable one as a
        new exception of its class that says what to do."""
        self._fail_if_fatal()
        if self._state is TxnState.ABORTABLE_ERROR:
            cause = self._last_error
            assert cause is not None
            error = type(cause)(
                f"cannot {what}: the transaction hit an error and must be aborted "
                f"(abort_transaction): {cause}"
            )
            raise error from cause

    def begin_init(self) -> None:
        """``init_transactions``: UNINITIALIZED -> INITIALIZING. Also accepted while
        INITIALIZING: the previous call timed out and is retried."""
        with self._lock:
            self._fail_if_fatal()
            if self._state is TxnState.INITIALIZING:
                return
            if self._state is not TxnState.UNINITIALIZED:
                # The table allows ABORTING too: that is the epoch bump's edge.
                raise IllegalStateError(
                    f"init_transactions() was already called (state {self._state.value})"
                )
            self._transition(TxnState.INITIALIZING)

    def init_done(self) -> None:
        """InitProducerId answered: INITIALIZING -> READY."""
        with self._lock:
            self._fail_if_fatal()
            if self._state is not TxnState.INITIALIZING:
                raise IllegalStateError(
                    f"no InitProducerId is pending in state {self._state.value}"
                )
            self._transition(TxnState.READY)

    def begin_transaction(self) -> None:
        with self._lock:
            self._fail_if_error("begin a transaction")
            if self._state is TxnState.UNINITIALIZED or self._state is TxnState.INITIALIZING:
                raise IllegalStateError(
                    "cannot begin a transaction before init_transactions() has completed"
                )
            if self._state is not TxnState.READY:
                raise IllegalStateError(
                    f"cannot begin a transaction in state {self._state.value}: "
                    "commit or abort the current one first"
                )
            self._transition(TxnState.IN_TRANSACTION)

    def check_send(self) -> None:
        """Kafka's failIfNotReadyForSend: records go only into an ongoing transaction."""
        with self._lock:
            self._check_in_transaction("send")

    def _check_in_transaction(self, what: str) -> None:
        self._fail_if_error(what)
        if self._state in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise IllegalStateError(
                f"cannot {what} before init_transactions() has completed (transactional_id is set)"
            )
        if self._state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(
                f"cannot {what} in state {self._state.value}: call begin_transaction() first"
            )

    def add_partition(self, tp: TopicPartition) -> None:
        """A record for ``tp`` is about to be queued: the partition joins the
        transaction (AddPartitionsToTxn before its first batch is sent)."""
        with self._lock:
            self._check_in_transaction("send")
            if tp not in self._added:
                self._pending.add(tp)

    def partitions_added(self, tps: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn answered null for ``tps``."""
        with self._lock:
            for tp in tps:
                self._pending.discard(tp)
                self._added.add(tp)

    def begin_send_offsets(self) -> None:
        """``send_offsets_to_transaction``: only inside an ongoing transaction."""
        with self._lock:
            self._check_in_transaction("send offsets to the transaction")

    def group_joined(self, group_id: str) -> None:
        with self._lock:
            self._groups.add(group_id)

    def begin_commit(self) -> bool:
        """``commit_transaction``: IN_TRANSACTION -> COMMITTING_TRANSACTION; True if
        the call resumes a commit whose previous call timed out."""
        with self._lock:
            self._fail_if_error("commit the transaction")
            if self._state is TxnState.COMMITTING_TRANSACTION:
                return True
            self._transition(TxnState.COMMITTING_TRANSACTION)
            return False

    def begin_abort(self) -> bool:
        """``abort_transaction``: IN_TRANSACTION or ABORTABLE_ERROR ->
        ABORTING_TRANSACTION; True if it resumes an abort that timed out."""
        with self._lock:
            self._fail_if_fatal()
            if self._state is TxnState.ABORTING_TRANSACTION:
                return True
            self._transition(TxnState.ABORTING_TRANSACTION)
            self._pending.clear()  # nothing more is sent in this transaction
            return False

    def end_done(self) -> None:
        """EndTxn answered: the transaction is over, READY for the next."""
        with self._lock:
            self._fail_if_fatal()
            if self._state not in (
                TxnState.COMMITTING_TRANSACTION,
                TxnState.ABORTING_TRANSACTION,
            ):
                raise IllegalStateError(f"no transaction is ending in state {self._state.value}")
            self._transition(TxnState.READY)
            self._forget_transaction()

    def _forget_transaction(self) -> None:
        self._added.clear()
        self._pending.clear()
        self._groups.clear()
        self._started = False

    def begin_epoch_bump(self) -> None:
        """After an abort whose batches failed under the current epoch (their
        sequences left a hole): ABORTING_TRANSACTION -> INITIALIZING, then
        InitProducerId with the current id and epoch (KIP-360) -> READY."""
        with self._lock:
            self._fail_if_fatal()
            if self._state is not TxnState.ABORTING_TRANSACTION:
                # The table allows UNINITIALIZED too: that is init_transactions' edge.
                raise IllegalStateError(
                    f"an epoch bump follows an abort, not state {self._state.value}"
                )
            self._transition(TxnState.INITIALIZING)
            self._forget_transaction()

    # ------------------------------------------------------------------ errors

    def abortable_error(self, error: KafkaError) -> None:
        """A request of the transaction failed in a way an abort recovers from. Ignored
        where Kafka ignores it: while aborting (the abort is the recovery), in READY or
        UNINITIALIZED (nothing to abort), and after a fatal error."""
        with self._lock:
            if self._state in (
                TxnState.ABORTING_TRANSACTION,
                TxnState.FATAL_ERROR,
                TxnState.READY,
                TxnState.UNINITIALIZED,
            ):
                return
            self._transition(TxnState.ABORTABLE_ERROR)
            self._last_error = error

    def fatal_error(self, error: KafkaError) -> None:
        """The producer cannot go on (fenced by a newer instance, or the coordinator
        refused the transactional id): every later call raises ``error``. The first
        fatal error is kept."""
        with self._lock:
            if self._state is TxnState.FATAL_ERROR:
                return
            self._transition(TxnState.FATAL_ERROR)
            self._last_error = error
