"""The read_committed filter (raftka.common.record.read_committed): Kafka's consumer rules
on hand-built fetches. The model-based test is tests/property/test_read_committed_model.py."""

from __future__ import annotations

import pytest

from raftka.common.errors import CorruptMessageError
from raftka.common.record.batch import DecodedBatch, Record, build_batch, decode_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.record.read_committed import AbortedTransaction, filter_read_committed


def _data(base: int, pid: int, values: list[bytes], *, txn: bool = True) -> DecodedBatch:
    return decode_batch(
        build_batch(
            [Record(value=v) for v in values],
            base_offset=base,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=0 if pid >= 0 else -1,
            is_transactional=txn,
        )
    )


def _marker(base: int, pid: int, kind: ControlRecordType) -> DecodedBatch:
    marker = EndTransactionMarker(kind, coordinator_epoch=0)
    return decode_batch(
        build_end_transaction_batch(
            marker, producer_id=pid, producer_epoch=0, timestamp_ms=0, base_offset=base
        )
    )


ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def test_abort_then_commit_of_one_producer_in_one_fetch() -> None:
    """The ABORT marker ends the aborted transaction: the same producer's next
    transaction (committed) is handed out; markers never are."""
    log = [
        _data(0, 5, [b"a0", b"a1"]),
        _data(2, -1, [b"plain"], txn=False),
        _marker(3, 5, ABORT),
        _data(4, 5, [b"c0"]),
        _marker(5, 5, COMMIT),
    ]
    result = filter_read_committed(log, [AbortedTransaction(5, 0)], fetch_offset=0)
    assert [(r.offset, r.value) for r in result.records] == [(2, b"plain"), (4, b"c0")]
    assert result.next_offset == 6


def test_position_mid_batch_and_after_dropped_batches() -> None:
    """Records below the fetch offset are skipped; the position moves past an aborted
    batch and a marker at the end although nothing is handed out for them."""
    log = [_data(0, 1, [b"x0", b"x1", b"x2"]), _data(3, 2, [b"y"]), _marker(4, 2, ABORT)]
    result = filter_read_committed(log, [AbortedTransaction(2, 3)], fetch_offset=1)
    assert [r.offset for r in result.records] == [1, 2]
    assert result.next_offset == 5
    empty = filter_read_committed([], [], fetch_offset=7)
    assert (empty.records, empty.next_offset) == ((), 7)


def test_a_malformed_control_record_is_corrupt_message() -> None:
    bad = decode_batch(
        build_batch(
            [Record(value=b"", key=b"\x00")],
            producer_id=1,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
    )
    with pytest.raises(CorruptMessageError, match="shorter than 4 bytes"):
        filter_read_committed([bad], [], fetch_offset=0)
