"""Rebuilding a segment's aborted-transaction index from its batches (recovery).

Theory of operation: the ``.txnindex`` entry of an aborted transaction is written when
its ABORT marker is appended, from the ``CompletedTxn`` producer state answers and the
LSO right after it. Recovery does the same thing again: starting from producer state as
of the segment's first offset (a snapshot plus the log before the segment), it applies
the segment's batches in order and turns every aborted ``CompletedTxn`` into an entry,
exactly as the append path did, so a rebuilt index equals the one written live.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from raftka.broker.producer_state import CompletedTxn, ProducerStateManager
from raftka.common.record.batch import DecodedBatch, decode_batch
from raftka.common.record.control import end_transaction_marker
from raftka.common.record.header import iter_batches
from raftka.storage.transaction_index import AbortedTxn


def aborted_entry(producers: ProducerStateManager, completed: CompletedTxn) -> AbortedTxn | None:
    """The ``.txnindex`` entry for a transaction a marker just ended (None for a commit).

    Call right after the marker was applied to ``producers``: the entry's last stable
    offset is read from the transactions still open then."""
    if not completed.is_aborted:
        return None
    return AbortedTxn(
        producer_id=completed.producer_id,
        first_offset=completed.first_offset,
        last_offset=completed.last_offset,
        last_stable_offset=producers.last_stable_offset_for(completed),
    )


def rebuild_aborted(
    producers: ProducerStateManager, batches: Iterable[DecodedBatch]
) -> list[AbortedTxn]:
    """Apply one segment's ``batches`` (in log order) to ``producers`` and return the
    segment's ``.txnindex`` entries. ``producers`` must hold the state as of the
    segment's first offset; it holds the state after the segment on return."""
    entries = []
    for batch in batches:
        completed = producers.apply_batch(batch)
        if completed is not None and (entry := aborted_entry(producers, completed)):
            entries.append(entry)
    return entries


def apply_stored_batches(
    producers: ProducerStateManager,
    data: bytes | bytearray | memoryview,
    *,
    skip_below: int = -1,
    on_aborted: Callable[[AbortedTxn], None] | None = None,
) -> int:
    """Apply ``data`` (whole batches as a log stores them: a follower's fetched
    records, or the log read back on open) to ``producers``, markers included, and hand
    each aborted transaction's ``.txnindex`` entry to ``on_aborted``. Batches ending
    below ``skip_below`` are skipped (a snapshot covers them). Only control batches
    are decoded: a data batch's header is all producer state reads. Returns the offset
    after the last batch applied (-1: none).

    Raises CorruptMessageError for a control batch with a malformed record."""
    next_offset = -1
    for pos, header in iter_batches(data, check_crc=False):
        if header.last_offset < skip_below:
            continue
        marker = None
        if header.is_control:
            decoded = decode_batch(data[pos : pos + header.size_bytes], check_crc=False)
            marker = end_transaction_marker(decoded)
        completed = producers.update_from_follower_batch(header, marker)
        if completed is not None and on_aborted is not None:
            entry = aborted_entry(producers, completed)
            if entry is not None:
                on_aborted(entry)
        next_offset = header.next_offset
    return next_offset
