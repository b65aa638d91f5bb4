"""The transaction state machine: every (from, to) pair of states against Kafka's table
(plus transaction version 2's empty abort), and what a transition does to the fields."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from raftka.broker.coordinator.transaction_state import (
    IllegalTransactionTransitionError,
    TransactionMetadata,
    TransactionState,
    is_legal_transition,
    metadata_problem,
)
from raftka.common.structs import TopicPartition

S = TransactionState
TP = TopicPartition("t", 0)

# Written out independently of the module: Kafka's TransactionState.validPreviousStates,
# with PrepareAbort also reachable from the idle states (KIP-890 part 2's empty abort).
EXPECTED_LEGAL = {
    (S.EMPTY, S.EMPTY),
    (S.COMPLETE_COMMIT, S.EMPTY),
    (S.COMPLETE_ABORT, S.EMPTY),
    (S.EMPTY, S.ONGOING),
    (S.ONGOING, S.ONGOING),
    (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
    (S.EMPTY, S.DEAD),
    (S.COMPLETE_COMMIT, S.DEAD),
    (S.COMPLETE_ABORT, S.DEAD),
}


def metadata_in(state: TransactionState) -> TransactionMetadata:
    open_ = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE)
    return TransactionMetadata(
        transactional_id="tx",
        producer_id=7,
        last_producer_id=-1,
        producer_epoch=3,
        last_producer_epoch=-1,
        transaction_timeout_ms=60_000,
        state=state,
        partitions=frozenset({TP}) if open_ else frozenset(),
        transaction_start_time_ms=100 if open_ else -1,
        transaction_last_update_time_ms=100,
    )


@pytest.mark.parametrize(
    ("source", "target"),
    list(itertools.product(S, S)),
    ids=lambda s: s.value,
)
def test_every_pair_of_states_follows_the_table(
    source: TransactionState, target: TransactionState
) -> None:
    """All 64 pairs: a legal edge transitions (and stamps the time), an illegal one raises
    IllegalTransactionTransitionError, which is an AssertionError (a coordinator bug)."""
    legal = (source, target) in EXPECTED_LEGAL
    assert is_legal_transition(source, target) is legal
    before = metadata_in(source)
    if legal:
        after = before.transition(target, now_ms=200, transaction_start_time_ms=150)
        assert after.state is target
        assert after.transaction_last_update_time_ms == 200
    else:
        with pytest.raises(IllegalTransactionTransitionError, match="not a legal") as info:
            before.transition(target, now_ms=200)
        assert isinstance(info.value, AssertionError)


def test_entering_an_idle_state_forgets_the_transaction() -> None:
    """Complete*/Empty/Dead hold no partitions and no start time; other fields stay."""
    prepared = metadata_in(S.PREPARE_COMMIT)
    done = prepared.transition(S.COMPLETE_COMMIT, now_ms=300)
    assert done.partitions == frozenset()
    assert done.transaction_start_time_ms == -1
    assert (done.producer_id, done.producer_epoch) == (7, 3)
    added = done.transition(
        S.ONGOING, now_ms=400, partitions=frozenset({TP}), transaction_start_time_ms=400
    )
    assert added.partitions == {TP} and added.transaction_start_time_ms == 400


def test_an_epoch_never_goes_down_for_one_producer_id() -> None:
    """A transition that would lower the epoch of the same producer id is a bug; a new
    producer id (rotation) may start again at 0."""
    empty = metadata_in(S.EMPTY)
    with pytest.raises(AssertionError):
        empty.transition(S.EMPTY, now_ms=1, producer_epoch=2)
    rotated = empty.transition(S.EMPTY, now_ms=1, producer_id=8, producer_epoch=0)
    assert (rotated.producer_id, rotated.producer_epoch) == (8, 0)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"producer_epoch": 32768}, "out of range"),
        ({"last_producer_epoch": -2}, "out of range"),
        ({"producer_id": -2}, "producer id"),
        ({"transaction_timeout_ms": 0}, "timeout"),
        ({"state": S.ONGOING, "transaction_start_time_ms": -1}, "start time"),
        ({"partitions": {TP}}, "partitions in state Empty"),
        ({"client_transaction_version": 3}, "transaction version 3"),
    ],
)
def test_inconsistent_metadata_is_named(changes: dict[str, object], problem: str) -> None:
    """metadata_problem names what is wrong (the constructor asserts it finds nothing, a
    decoded record is refused with it)."""
    fields: dict[str, object] = {
        "state": S.EMPTY,
        "producer_id": 1,
        "producer_epoch": 0,
        "last_producer_epoch": -1,
        "transaction_timeout_ms": 1000,
        "transaction_start_time_ms": -1,
        "partitions": frozenset(),
        "client_transaction_version": 2,
    }
    assert metadata_problem(SimpleNamespace(**fields)) is None  # type: ignore[arg-type]
    found = metadata_problem(SimpleNamespace(**{**fields, **changes}))  # type: ignore[arg-type]
    assert found is not None and problem in found
    with pytest.raises(AssertionError, match=problem):
        TransactionMetadata(
            transactional_id="t",
            last_producer_id=-1,
            transaction_last_update_time_ms=0,
            **{**fields, **changes},
        )  # type: ignore[arg-type]
