"""What a read_committed consumer hands out of fetched batches, as Kafka's consumer does.

Theory of operation: a fetch with ``isolation_level=read_committed`` returns batches
below the partition's last stable offset plus the aborted transactions that overlap
the fetched range, each as Kafka's ``AbortedTransaction`` (producer id, first offset).
The consumer (Kafka's ``CompletedFetch``) then walks the batches in offset order:

* the aborted transactions wait in a queue ordered by first offset; before a batch of
  a producer is looked at, every aborted transaction that starts at or before the
  batch's last offset moves into the set of aborted producers;
* a transactional data batch of a producer in that set is dropped whole (a producer
  has at most one transaction open per partition, so its batches between the first
  offset and the ABORT marker are exactly that transaction's);
* an ABORT marker takes its producer out of the set (what follows is a new transaction);
* every control batch is dropped; records below the fetch position are skipped (a
  batch may start before the offset asked for).

The position moves past dropped batches too, so the next fetch does not ask for them
again. ``read_uncommitted`` needs none of this: it only drops control batches.

Pure: no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raftka.common.record.batch import DecodedBatch, DecodedRecord
from raftka.common.record.control import ControlRecordType, parse_control_key
from raftka.common.record.header import NO_PRODUCER_ID


@dataclass(frozen=True, slots=True, order=True)
class AbortedTransaction:
    """One entry of a fetch answer's ``aborted_transactions`` (Kafka's shape)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class ReadCommittedResult:
    records: tuple[DecodedRecord, ...]  # what the application gets, in offset order
    next_offset: int  # the consumer's position after these batches


def _is_abort_marker(batch: DecodedBatch) -> bool:
    if not batch.header.is_control or not batch.records:
        return False
    return parse_control_key(batch.records[0].key) == ControlRecordType.ABORT


def filter_read_committed(
    batches: Sequence[DecodedBatch],
    aborted: Iterable[AbortedTransaction],
    *,
    fetch_offset: int,
) -> ReadCommittedResult:
    """The records a read_committed consumer hands out of ``batches`` (one partition's
    fetched batches, in offset order) and its next position.

    Raises CorruptMessageError for a control batch whose key is malformed.
    """
    queue = [(t.first_offset, t.producer_id) for t in aborted]
    heapq.heapify(queue)
    aborted_producers: set[int] = set()
    out: list[DecodedRecord] = []
    position = fetch_offset
    for batch in batches:
        header = batch.header
        # Markers and aborts are tracked even in a batch wholly before the position (a
        # fetch may start a little earlier), as Kafka's consumer does.
        skip = header.is_control
        if header.producer_id != NO_PRODUCER_ID:
            while queue and queue[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(queue)[1])
            if _is_abort_marker(batch):
                aborted_producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_producers:
                skip = True
        if not skip:
            out.extend(r for r in batch.records if r.offset >= position)
        position = max(position, header.next_offset)
    return ReadCommittedResult(records=tuple(out), next_offset=position)
