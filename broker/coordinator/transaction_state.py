"""The transaction metadata of one ``transactional.id`` and its state machine.

Theory of operation
-------------------
A transactional producer's ``transactional.id`` maps to one :class:`TransactionMetadata`
at its transaction coordinator (KIP-98): the producer id and epoch it currently holds,
the epoch (and producer id) it held before the last bump, its ``transaction.timeout.ms``,
the transaction's state and the partitions the ongoing transaction has touched. The
coordinator writes the whole of it as one record to ``__transaction_state`` on every
change, so the latest record of a key *is* the metadata (see
:mod:`raftka.broker.coordinator.transaction_records`).

States (Kafka's names) and the commands that move between them::

    (new id)                 --InitProducerId-->   Empty          (epoch -1 -> 0)
    Empty, Complete*         --InitProducerId-->   Empty          (epoch + 1)
    Empty, Complete*, Ongoing --AddPartitions/AddOffsetsToTxn--> Ongoing
    Ongoing                  --EndTxn(commit)-->   PrepareCommit --markers--> CompleteCommit
    Ongoing                  --EndTxn(abort)-->    PrepareAbort  --markers--> CompleteAbort
    Ongoing   --InitProducerId or timeout--> PrepareEpochFence --> PrepareAbort  (epoch + 1)
    Empty, Complete*         --EndTxn(abort), version 2-->  PrepareAbort  (no partitions)
    Empty, Complete*         --transactional.id.expiration.ms-->  Dead  (tombstone)

* **Empty**: the id has a producer id and epoch and no transaction is open.
* **Ongoing**: partitions were added; data may be written to them.
* **PrepareCommit / PrepareAbort**: the outcome is decided and durable; the
  coordinator is writing the markers to every partition of the transaction.
* **CompleteCommit / CompleteAbort**: every marker is written; the next transaction
  may begin (like Empty).
* **PrepareEpochFence**: the in-memory step "bump the epoch to fence the producer that
  holds it", taken when InitProducerId or the timeout finds a transaction Ongoing. It
  is never written: the PrepareAbort record that immediately follows carries the bumped
  epoch.
* **Dead**: the id expired (``transactional.id.expiration.ms``); its record is a
  tombstone and the metadata is forgotten once the tombstone is durable.

With transaction version 2 (KIP-890 part 2, Kafka's ``transaction.version`` feature)
every PrepareCommit/PrepareAbort carries an epoch one above the transaction's, and
EndTxn(abort) may also start from Empty or a Complete state (a producer aborting a
transaction to which it added nothing, to get a fresh epoch), as in Kafka 4.

``_LEGAL_PREVIOUS`` below is the whole table, in one place: every change of state goes
through :meth:`TransactionMetadata.transition`, which refuses an edge not in it with
:class:`IllegalTransactionTransitionError` (a bug in the coordinator, never the
client's fault: the coordinator turns bad client requests into Kafka errors before it
transitions).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from raftka.common.structs import TopicPartition

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_EPOCH_MAX",
    "IllegalTransactionTransitionError",
    "MetadataFields",
    "TransactionMetadata",
    "TransactionResult",
    "TransactionState",
    "is_legal_transition",
    "metadata_problem",
]

#: RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH: "none yet".
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
#: Producer epochs are int16 on the wire (Short.MAX_VALUE).
PRODUCER_EPOCH_MAX: Final = 32767


class TransactionState(enum.Enum):
    """Kafka's transaction states; the values are Kafka's names, as stored."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_idle(self) -> bool:
        """No transaction open: a new one may begin, the id may expire."""
        return self is TransactionState.EMPTY or self.is_complete


class TransactionResult(enum.Enum):
    """What EndTxn asks for and what a marker says (Kafka's TransactionResult)."""

    COMMIT = "COMMIT"
    ABORT = "ABORT"


_S = TransactionState

# to-state -> the states it may be entered from. THE transition table (see the module
# docstring); nothing else decides whether a state change is legal.
_LEGAL_PREVIOUS: Final[Mapping[TransactionState, frozenset[TransactionState]]] = {
    # InitProducerId bumps the epoch of an idle id (a new id starts Empty at epoch -1).
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # AddPartitionsToTxn / AddOffsetsToTxn begin a transaction or add to the open one.
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # EndTxn(abort) or the timeout from Ongoing; a fencing abort via PrepareEpochFence;
    # transaction version 2's epoch-bumping abort of an empty transaction.
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
}


def is_legal_transition(source: TransactionState, target: TransactionState) -> bool:
    return source in _LEGAL_PREVIOUS[target]


_OPEN_STATES: Final = frozenset(
    {_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE}
)


class MetadataFields(Protocol):
    """What :func:`metadata_problem` reads: a :class:`TransactionMetadata`, or a decoded
    record value before it becomes one."""

    @property
    def state(self) -> TransactionState: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def last_producer_epoch(self) -> int: ...
    @property
    def transaction_timeout_ms(self) -> int: ...
    @property
    def transaction_start_time_ms(self) -> int: ...
    @property
    def partitions(self) -> Collection[object]: ...
    @property
    def client_transaction_version(self) -> int: ...


def metadata_problem(fields: MetadataFields) -> str | None:
    """What makes these fields inconsistent, or None. One rule for the constructor's
    assertion and for a decoded record (which is refused, not asserted)."""
    if fields.producer_id < NO_PRODUCER_ID:
        return f"producer id {fields.producer_id}"
    for epoch in (fields.producer_epoch, fields.last_producer_epoch):
        if not NO_PRODUCER_EPOCH <= epoch <= PRODUCER_EPOCH_MAX:
            return f"producer epoch {epoch} out of range"
    if fields.transaction_timeout_ms <= 0:
        return f"transaction timeout {fields.transaction_timeout_ms} ms"
    if fields.client_transaction_version not in (1, 2):
        return f"transaction version {fields.client_transaction_version}"
    if fields.state in _OPEN_STATES:
        if fields.transaction_start_time_ms < 0:
            return f"state {fields.state.value} without a transaction start time"
    elif fields.partitions:
        return f"partitions in state {fields.state.value}"
    return None


class IllegalTransactionTransitionError(AssertionError):
    """The coordinator tried an edge the table does not have: a bug in raftka (like
    h11's LocalProtocolError), so it is an AssertionError and never reaches a client."""


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """What the coordinator knows of one ``transactional.id`` (Kafka's
    TransactionMetadata). Immutable: a change is a new value, written before it counts.

    ``last_producer_id``/``last_producer_epoch`` are what the producer held before the
    most recent bump (-1: nobody may claim it, e.g. after a fence): a request carrying
    them is a retry of the request that caused the bump and is answered as it was
    (KIP-360 InitProducerId retries, KIP-890 EndTxn retries, epoch-overflow rotation).
    """

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    #: When the ongoing transaction began (-1 when none is open); the timeout counts
    #: from here.
    transaction_start_time_ms: int
    #: When the metadata last changed; ``transactional.id.expiration.ms`` counts from here.
    transaction_last_update_time_ms: int
    #: The transaction version of the client's last EndTxn (Kafka 4's
    #: clientTransactionVersion): 2 bumps the epoch at EndTxn (KIP-890 part 2), 1 does
    #: not (EndTxn v0-4 clients never learn a bumped epoch). Markers carry it, so the
    #: partition leaders check the marker's epoch by the same rule.
    client_transaction_version: int = 2

    def __post_init__(self) -> None:
        # Invariants every value holds (TigerBeetle style: a bug stops here).
        problem = metadata_problem(self)
        assert problem is None, f"{problem}: {self}"

    @classmethod
    def new(
        cls, transactional_id: str, *, producer_id: int, timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        """A fresh id: Empty at epoch -1, so that its first InitProducerId bumps to 0."""
        return cls(
            transactional_id=transactional_id,
            producer_id=producer_id,
            last_producer_id=NO_PRODUCER_ID,
            producer_epoch=NO_PRODUCER_EPOCH,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            transaction_timeout_ms=timeout_ms,
            state=_S.EMPTY,
            partitions=frozenset(),
            transaction_start_time_ms=-1,
            transaction_last_update_time_ms=now_ms,
        )

    def transition(
        self,
        target: TransactionState,
        *,
        now_ms: int,
        producer_id: int | None = None,
        last_producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        transaction_timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        transaction_start_time_ms: int | None = None,
        client_transaction_version: int | None = None,
    ) -> TransactionMetadata:
        """This metadata moved to ``target`` (fields not given stay), checked against the
        table. Entering an idle state clears the partitions and the start time."""
        if not is_legal_transition(self.state, target):
            raise IllegalTransactionTransitionError(
                f"{self.transactional_id!r}: {self.state.value} -> {target.value} is not a "
                "legal transaction state transition"
            )
        idle = target.is_idle or target is _S.DEAD
        changes: dict[str, object] = {
            "state": target,
            "transaction_last_update_time_ms": now_ms,
            "partitions": frozenset() if idle else self.partitions,
            "transaction_start_time_ms": -1 if idle else self.transaction_start_time_ms,
        }
        for name, value in (
            ("producer_id", producer_id),
            ("last_producer_id", last_producer_id),
            ("producer_epoch", producer_epoch),
            ("last_producer_epoch", last_producer_epoch),
            ("transaction_timeout_ms", transaction_timeout_ms),
            ("partitions", partitions),
            ("transaction_start_time_ms", transaction_start_time_ms),
            ("client_transaction_version", client_transaction_version),
        ):
            if value is not None:
                changes[name] = value
        new = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        # Epochs only grow for one producer id (a new producer id may start at 0).
        if new.producer_id == self.producer_id:
            assert new.producer_epoch >= self.producer_epoch, (self, new)
        return new
