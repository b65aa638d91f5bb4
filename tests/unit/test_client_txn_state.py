"""The transactional producer's pure state machine (client/producer/transactions.py).

Checks: the transition table is Kafka's TransactionManager.isTransitionValid, edge for
edge; and, by hypothesis over arbitrary call sequences, every call does what an
independent spec written from Kafka's producer says for the state it is made in (the
new state, or IllegalStateError / the fatal error / the abortable error's class), a
call that raises changes nothing, a fatal error is final and raised by every later
call, and partitions are only registered inside a transaction and forgotten with it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.client.producer.transactions import LEGAL_PREVIOUS, TransactionState, TxnState
from raftka.common.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from raftka.common.structs import TopicPartition

S = TxnState
TP = TopicPartition("t", 0)

#: Kafka's TransactionManager.isTransitionValid (clients/.../TransactionManager.java),
#: transcribed independently of the module: target <- sources.
KAFKA_TABLE = {
    S.UNINITIALIZED: {S.READY, S.ABORTABLE_ERROR},
    S.INITIALIZING: {S.UNINITIALIZED, S.ABORTING_TRANSACTION},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR},
    S.ABORTABLE_ERROR: {
        S.IN_TRANSACTION,
        S.COMMITTING_TRANSACTION,
        S.ABORTABLE_ERROR,
        S.INITIALIZING,
    },
}


def test_the_table_is_kafkas() -> None:
    for target, sources in KAFKA_TABLE.items():
        assert LEGAL_PREVIOUS[target] == sources, target
    assert LEGAL_PREVIOUS[S.FATAL_ERROR] is None  # from anywhere


FATAL = "fatal"
ABORTABLE = "abortable"
ILLEGAL = "illegal"
SAME = "same"

#: The spec: per call, per state, the resulting state or what it raises. States not
#: listed: IllegalStateError, except FATAL_ERROR (the fatal error) where noted.
_IN_TXN_ONLY = {S.IN_TRANSACTION: S.IN_TRANSACTION, S.ABORTABLE_ERROR: ABORTABLE}
SPEC: dict[str, dict[TxnState, object]] = {
    "begin_init": {S.UNINITIALIZED: S.INITIALIZING, S.INITIALIZING: S.INITIALIZING},
    "init_done": {S.INITIALIZING: S.READY},
    "begin_transaction": {S.READY: S.IN_TRANSACTION, S.ABORTABLE_ERROR: ABORTABLE},
    "check_send": _IN_TXN_ONLY,
    "add_partition": _IN_TXN_ONLY,
    "begin_send_offsets": _IN_TXN_ONLY,
    "begin_commit": {
        S.IN_TRANSACTION: S.COMMITTING_TRANSACTION,
        S.COMMITTING_TRANSACTION: S.COMMITTING_TRANSACTION,
        S.ABORTABLE_ERROR: ABORTABLE,
    },
    "begin_abort": {
        S.IN_TRANSACTION: S.ABORTING_TRANSACTION,
        S.ABORTABLE_ERROR: S.ABORTING_TRANSACTION,
        S.ABORTING_TRANSACTION: S.ABORTING_TRANSACTION,
    },
    "end_done": {S.COMMITTING_TRANSACTION: S.READY, S.ABORTING_TRANSACTION: S.READY},
    "begin_epoch_bump": {S.ABORTING_TRANSACTION: S.INITIALIZING},
}
#: Errors reported by the I/O shell: never raise; abortable only where Kafka applies it.
ERROR_SPEC: dict[str, dict[TxnState, TxnState]] = {
    "abortable_error": {
        S.IN_TRANSACTION: S.ABORTABLE_ERROR,
        S.COMMITTING_TRANSACTION: S.ABORTABLE_ERROR,
        S.ABORTABLE_ERROR: S.ABORTABLE_ERROR,
        S.INITIALIZING: S.ABORTABLE_ERROR,
    },
    "fatal_error": {s: S.FATAL_ERROR for s in S},
}


def _call(state: TransactionState, op: str) -> None:
    calls: dict[str, Callable[[], object]] = {
        "begin_init": state.begin_init,
        "init_done": state.init_done,
        "begin_transaction": state.begin_transaction,
        "check_send": state.check_send,
        "add_partition": lambda: state.add_partition(TP),
        "begin_send_offsets": state.begin_send_offsets,
        "begin_commit": state.begin_commit,
        "begin_abort": state.begin_abort,
        "end_done": state.end_done,
        "begin_epoch_bump": state.begin_epoch_bump,
        "abortable_error": lambda: state.abortable_error(KafkaTimeoutError("lost record")),
        "fatal_error": lambda: state.fatal_error(ProducerFencedError("newer instance")),
    }
    calls[op]()


OPS = sorted([*SPEC, *ERROR_SPEC])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(OPS), max_size=40))
def test_every_call_sequence_follows_kafkas_rules(ops: list[str]) -> None:
    txn = TransactionState("tid")
    fatal: KafkaError | None = None
    for op in ops:
        before = txn.state
        last_error = txn.last_error
        if op in ERROR_SPEC:
            _call(txn, op)
            expected_state = ERROR_SPEC[op].get(before, before)
            assert txn.state is expected_state, (op, before)
            if op == "fatal_error" and fatal is None:
                fatal = txn.last_error
            if before is S.FATAL_ERROR:
                assert txn.last_error is fatal, "the first fatal error is kept"
        else:
            expected = SPEC[op].get(before, FATAL if before is S.FATAL_ERROR else ILLEGAL)
            if isinstance(expected, TxnState):
                _call(txn, op)
                assert txn.state is expected, (op, before)
            else:
                with pytest.raises(KafkaError) as info:
                    _call(txn, op)
                if expected == FATAL:
                    assert info.value is fatal
                elif expected == ABORTABLE:
                    assert last_error is not None
                    assert type(info.value) is type(last_error)
                    assert "abort_transaction" in str(info.value)
                else:
                    assert isinstance(info.value, IllegalStateError), (op, before)
                assert txn.state is before, "a call that raises changes nothing"
        if txn.state is not before:
            allowed = LEGAL_PREVIOUS[txn.state]
            assert allowed is None or before in allowed, (before, txn.state)
        if txn.state in (S.READY, S.INITIALIZING, S.UNINITIALIZED):
            assert not txn.partitions() and not txn.pending_partitions() and not txn.started
        if txn.pending_partitions() and txn.state is S.IN_TRANSACTION:
            assert TP in txn.pending_partitions()


def test_partitions_move_from_pending_to_added_and_leave_with_the_transaction() -> None:
    txn = TransactionState("tid")
    txn.begin_init()
    txn.init_done()
    txn.begin_transaction()
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    txn.add_partition(a)
    txn.add_partition(b)
    assert txn.pending_partitions() == {a, b} and not txn.is_added(a)
    txn.partitions_added([a])
    txn.add_partition(a)  # already in: not pending again
    assert txn.pending_partitions() == {b} and txn.is_added(a)
    txn.begin_commit()
    txn.end_done()
    assert not txn.partitions() and not txn.pending_partitions()
    txn.begin_transaction()
    assert not txn.is_added(a)


def test_fenced_producer_raises_the_same_error_for_every_call() -> None:
    txn = TransactionState("tid")
    txn.begin_init()
    txn.init_done()
    txn.begin_transaction()
    fenced = ProducerFencedError("a newer producer with the same transactional_id")
    txn.fatal_error(fenced)
    for call in (
        txn.begin_transaction,
        txn.check_send,
        txn.begin_commit,
        txn.begin_abort,
        txn.begin_init,
    ):
        with pytest.raises(ProducerFencedError) as info:
            call()
        assert info.value is fenced
