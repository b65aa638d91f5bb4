"""Kafka's aborted-transaction index: the ``.txnindex`` file beside each segment.

Theory of operation: when a partition appends an ABORT marker that ends a transaction
(producer state answers a ``CompletedTxn`` with ``is_aborted``), it appends one entry
to the ``.txnindex`` of the segment holding the marker. A read_committed fetch asks
:func:`collect_aborted` for the aborted transactions overlapping the range it returns
and sends them as ``AbortedTransaction(producer_id, first_offset)``; the consumer drops
those transactions' records (``raftka.common.record.read_committed``). Commits need no
entry: a consumer reads everything not aborted.

Entry, 34 bytes big-endian (Kafka's ``AbortedTxn``, version 0)::

    version             int16  = 0
    producer_id         int64
    first_offset        int64  the transaction's first batch on this partition
    last_offset         int64  the ABORT marker's offset
    last_stable_offset  int64  the LSO right after the marker was appended

``last_stable_offset`` lets a fetch stop scanning: every transaction aborted before an
offset the LSO has passed has an entry at or before the first entry whose LSO is past
the fetch's upper bound, so the search of later segments can stop there.

Entries are in ``last_offset`` order (markers are appended in log order). The file is
appended to, never rewritten except by :meth:`TransactionIndex.truncate_to`. Crash
safety: a crash can leave a partial last entry (not a whole 34 bytes); opening the
index cuts it off. The entry it would have been is not lost for good: recovery replays
the segment's batches through producer state and rebuilds the index of every segment
past the recovery point (:func:`raftka.broker.transaction_recovery.rebuild_aborted`),
and a segment below it was flushed, index included, before the recovery point moved.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from raftka.common.errors import CorruptMessageError
from raftka.common.record.read_committed import AbortedTransaction

TXN_INDEX_SUFFIX: Final = ".txnindex"
ABORTED_TXN_VERSION: Final = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES: Final = _ENTRY.size
assert ENTRY_BYTES == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def __post_init__(self) -> None:
        assert self.producer_id >= 0, self
        assert 0 <= self.first_offset <= self.last_offset, self

    def encode(self) -> bytes:
        return _ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    def as_aborted_transaction(self) -> AbortedTransaction:
        """The fetch answer's shape of this entry."""
        return AbortedTransaction(producer_id=self.producer_id, first_offset=self.first_offset)


def decode_entries(data: bytes | memoryview) -> tuple[list[AbortedTxn], int]:
    """The whole entries in ``data`` and the count of trailing bytes that do not make
    one. Raises CorruptMessageError for an entry no writer produces."""
    whole = len(data) - len(data) % ENTRY_BYTES
    entries: list[AbortedTxn] = []
    for pos in range(0, whole, ENTRY_BYTES):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != ABORTED_TXN_VERSION or pid < 0 or not 0 <= first <= last:
            raise CorruptMessageError(
                f"txnindex entry at byte {pos}: version {version} producer {pid} "
                f"offsets {first}..{last}"
            )
        entries.append(AbortedTxn(pid, first, last, lso, version))
    return entries, len(data) - whole


def txn_index_file_name(base_offset: int) -> str:
    """``00000000000000001234.txnindex`` for the segment based at 1234."""
    assert base_offset >= 0, base_offset
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    aborted: tuple[AbortedTxn, ...]
    is_complete: bool  # True: no later segment can hold an entry the fetch needs


def search_entries(
    entries: Iterable[AbortedTxn], *, fetch_offset: int, upper_bound: int
) -> TxnIndexSearchResult:
    """The entries of one index a fetch of ``[fetch_offset, upper_bound)`` needs
    (Kafka's ``TransactionIndex.collectAbortedTxns``)."""
    found: list[AbortedTxn] = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return TxnIndexSearchResult(tuple(found), is_complete=True)
    return TxnIndexSearchResult(tuple(found), is_complete=False)


def collect_aborted(
    segment_indexes: Iterable[Sequence[AbortedTxn]], *, fetch_offset: int, upper_bound: int
) -> list[AbortedTransaction]:
    """The aborted transactions a read_committed fetch of ``[fetch_offset, upper_bound)``
    answers with, from the indexes of the segments in offset order starting with the
    segment that holds ``fetch_offset`` (Kafka's ``collectAbortedTransactions``).

    A transaction aborted later than its segment can still overlap the fetch, which is
    why later segments are searched until one entry's LSO shows nothing more can."""
    assert 0 <= fetch_offset <= upper_bound, (fetch_offset, upper_bound)
    out: list[AbortedTransaction] = []
    for entries in segment_indexes:
        result = search_entries(entries, fetch_offset=fetch_offset, upper_bound=upper_bound)
        out.extend(e.as_aborted_transaction() for e in result.aborted)
        if result.is_complete:
            break
    return out


class TransactionIndex:
    """One segment's ``.txnindex`` file, its entries cached in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.partial_bytes_dropped = 0  # what opening cut off (a crash mid-append)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        self._entries, partial = decode_entries(data)
        if partial:
            self.partial_bytes_dropped = partial
            self._truncate_file(len(data) - partial)

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry; its marker must come after the last entry's (log order)."""
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise ValueError(
                f"txnindex {self.path.name}: last offset {entry.last_offset} does not follow "
                f"{self._entries[-1].last_offset}"
            )
        with self.path.open("ab") as f:
            f.write(entry.encode())
        self._entries.append(entry)

    def search(self, *, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        return search_entries(self._entries, fetch_offset=fetch_offset, upper_bound=upper_bound)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or above ``offset`` (the log was truncated)."""
        kept = [e for e in self._entries if e.last_offset < offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._truncate_file(len(kept) * ENTRY_BYTES)

    def reset(self, entries: Iterable[AbortedTxn] = ()) -> None:
        """Replace every entry (recovery rebuilt them from the segment)."""
        new = list(entries)
        for older, newer in itertools.pairwise(new):
            assert older.last_offset < newer.last_offset, (older, newer)
        data = b"".join(e.encode() for e in new)
        with self.path.open("wb") as f:
            f.write(data)
        self._entries = new

    def flush(self) -> None:
        """fsync the file (the segment is flushed with it)."""
        if not self.path.exists():
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []

    def rename(self, path: Path) -> None:
        """Move the file (if there is one) to ``path`` (the log cleaner's swap)."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete_cache(self) -> None:
        """Forget the entries (the segment removes the file itself, via ``.deleted``)."""
        self._entries = []

    def _truncate_file(self, size: int) -> None:
        with self.path.open("r+b") as f:
            f.truncate(size)
