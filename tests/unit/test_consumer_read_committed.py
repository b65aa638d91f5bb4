"""The consumer's read_committed filter over fetched batches (client/consumer/fetcher.py):
aborted transactions' records and markers are dropped, but their batches stay (empty)
so that taking records moves the position past them."""

from __future__ import annotations

from raftka.client.consumer.fetcher import _committed_only
from raftka.common.messages import broker as api
from raftka.common.record import Record, build_batch
from raftka.common.record.batch import decode_batches
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)


def _log() -> bytes:
    def txn(value: bytes, base: int, pid: int) -> bytes:
        return build_batch(
            [Record(value=value)],
            base_offset=base,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )

    def end(kind: ControlRecordType, base: int, pid: int) -> bytes:
        return build_end_transaction_batch(
            EndTransactionMarker(kind, 0),
            producer_id=pid,
            producer_epoch=0,
            timestamp_ms=0,
            base_offset=base,
        )

    return b"".join(
        [
            txn(b"aborted", 0, 1),
            txn(b"committed", 1, 2),
            end(ControlRecordType.ABORT, 2, 1),
            end(ControlRecordType.COMMIT, 3, 2),
            build_batch([Record(value=b"plain")], base_offset=4),
        ]
    )


def test_only_committed_and_plain_records_are_kept_and_every_batch_stays() -> None:
    batches = list(decode_batches(_log()))
    kept = _committed_only(batches, (api.AbortedTransaction(producer_id=1, first_offset=0),), 0)
    assert [b.header.base_offset for b in kept] == [0, 1, 2, 3, 4]
    values = [r.value for b in kept if not b.header.is_control for r in b.records]
    assert values == [b"committed", b"plain"]


def test_without_aborted_transactions_every_data_record_is_kept() -> None:
    batches = list(decode_batches(_log()))
    kept = _committed_only(batches, None, 0)
    values = [r.value for b in kept if not b.header.is_control for r in b.records]
    assert values == [b"aborted", b"committed", b"plain"]
