"""The aborted-transaction index (raftka.storage.transaction_index): Kafka's bytes, the
file (append, reopen, truncate, torn last entry) and the fetch-time search."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from raftka.common.errors import CorruptMessageError
from raftka.common.record.read_committed import AbortedTransaction
from raftka.storage.transaction_index import (
    ENTRY_BYTES,
    AbortedTxn,
    TransactionIndex,
    collect_aborted,
    decode_entries,
    search_entries,
    txn_index_file_name,
)


def test_entry_bytes_are_kafkas_layout() -> None:
    """version int16, producer id, first, last, last stable offset as int64, big-endian."""
    entry = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    assert ENTRY_BYTES == 34
    assert entry.encode() == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    assert decode_entries(entry.encode() * 2) == ([entry, entry], 0)
    assert entry.as_aborted_transaction() == AbortedTransaction(producer_id=7, first_offset=10)
    assert txn_index_file_name(1234) == "00000000000000001234.txnindex"


def test_an_entry_no_writer_produces_is_corrupt() -> None:
    for fields in ((1, 7, 10, 20, 21), (0, -2, 10, 20, 21), (0, 7, 30, 20, 21)):
        with pytest.raises(CorruptMessageError, match="txnindex entry at byte 0"):
            decode_entries(struct.pack(">hqqqq", *fields))


def test_file_append_reopen_truncate_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / txn_index_file_name(0)
    index = TransactionIndex(path)
    assert len(index) == 0 and not path.exists()
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(1, 11, 12, 13)]
    for entry in entries:
        index.append(entry)
    with pytest.raises(ValueError, match="does not follow"):
        index.append(AbortedTxn(3, 4, 12, 13))
    index.flush()
    assert TransactionIndex(path).entries == tuple(entries)
    # A crash in the middle of the next append: 20 of its 34 bytes reached the file.
    with path.open("ab") as f:
        f.write(AbortedTxn(4, 14, 15, 16).encode()[:20])
    reopened = TransactionIndex(path)
    assert reopened.partial_bytes_dropped == 20
    assert reopened.entries == tuple(entries)
    assert path.stat().st_size == 3 * ENTRY_BYTES  # the torn bytes are cut off
    reopened.append(AbortedTxn(4, 14, 15, 16))  # and appends land on an entry boundary
    assert TransactionIndex(path).entries[-1] == AbortedTxn(4, 14, 15, 16)
    reopened.truncate_to(9)  # markers at 9 and above are gone from the log
    assert TransactionIndex(path).entries == (entries[0],)
    reopened.reset(entries[1:])
    assert TransactionIndex(path).entries == tuple(entries[1:])
    reopened.delete()
    assert not path.exists() and len(reopened) == 0


def test_search_and_collect_follow_kafkas_rules() -> None:
    """An entry is in a fetch of [fetch, upper) when its marker is at or after fetch and
    it starts before upper; the search stops at the first entry whose LSO reached upper,
    so a later segment is read only while that has not happened."""
    seg0 = [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 6, 7)]
    seg1 = [AbortedTxn(3, 8, 12, 13), AbortedTxn(4, 14, 20, 21)]
    seg2 = [AbortedTxn(5, 22, 23, 24)]
    found = search_entries(seg0, fetch_offset=5, upper_bound=7)
    assert found.aborted == (seg0[1],) and found.is_complete
    assert not search_entries(seg0, fetch_offset=0, upper_bound=8).is_complete
    assert collect_aborted([seg0, seg1, seg2], fetch_offset=5, upper_bound=15) == [
        AbortedTransaction(2, 2),
        AbortedTransaction(3, 8),
        AbortedTransaction(4, 14),
    ]
    # Stops in seg1 at the entry with LSO 21 >= 16: the next segment is not read. (Its
    # entry here could not exist beside that LSO; it only shows it is never looked at.)
    never_read = [AbortedTxn(9, 15, 22, 23)]
    assert collect_aborted([seg0, seg1, never_read], fetch_offset=13, upper_bound=16) == [
        AbortedTransaction(4, 14)
    ]
    assert collect_aborted([seg0], fetch_offset=7, upper_bound=7) == []
