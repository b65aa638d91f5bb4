"""Rebuilding a segment's aborted-transaction index from its batches (recovery).

Theory of operation: the ``.txnindex`` entry of an aborted transaction is written when
its ABORT marker is appended, from the ``CompletedTxn`` producer state answers and the
LSO right after it. Recovery does the same thing again: starting from producer state as
of the segment's first offset (a snapshot plus the log before the segment), it applies
the segment's batches in order and turns every aborted ``CompletedTxn`` into an entry,
exactly as the append path did, so a rebuilt index equals the one written live.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftka.broker.producer_state import CompletedTxn, ProducerStateManager
from raftka.common.record.batch import DecodedBatch
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
