"""The hanging-transaction rule of ``raftka transactions find-hanging`` (pure)."""

from __future__ import annotations

from raftka.client.transaction_admin import (
    OpenTransaction,
    ProducerDescription,
    TransactionDescription,
    _hanging_reason,
)
from raftka.common.errors import TransactionalIdNotFoundError
from raftka.common.structs import TopicPartition

TP = TopicPartition("t", 0)
NOW = 1_000_000_000
MAX = 900_000


def _open(pid: int = 7, last_timestamp: int = NOW - 1_000) -> OpenTransaction:
    return OpenTransaction(TP, ProducerDescription(pid, 3, 0, last_timestamp, 2, 10))


def _described(
    state: str = "Ongoing", pid: int = 7, partitions: tuple[TopicPartition, ...] = (TP,)
) -> TransactionDescription:
    return TransactionDescription("tid", 1, state, pid, 3, 60_000, NOW - 1_000, partitions)


def test_a_transaction_its_coordinator_owns_is_not_hanging() -> None:
    for state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
        assert _hanging_reason(_open(), "tid", _described(state), MAX, NOW) is None


def test_each_reason_to_call_a_transaction_hanging() -> None:
    cases = {
        "no coordinator knows": _hanging_reason(_open(), None, None, MAX, NOW),
        "does not have": _hanging_reason(
            _open(), "tid", TransactionalIdNotFoundError("gone"), MAX, NOW
        ),
        "now has producer id 8": _hanging_reason(_open(), "tid", _described(pid=8), MAX, NOW),
        "is CompleteCommit": _hanging_reason(
            _open(), "tid", _described("CompleteCommit"), MAX, NOW
        ),
        "does not include t-0": _hanging_reason(
            _open(), "tid", _described(partitions=(TopicPartition("t", 1),)), MAX, NOW
        ),
        "above transaction.max.timeout.ms": _hanging_reason(
            _open(last_timestamp=NOW - MAX - 1), "tid", _described(), MAX, NOW
        ),
    }
    for expected, reason in cases.items():
        assert reason is not None and expected in reason, (expected, reason)


def test_exactly_at_the_max_timeout_is_not_yet_hanging() -> None:
    assert _hanging_reason(_open(last_timestamp=NOW - MAX), "tid", _described(), MAX, NOW) is None
