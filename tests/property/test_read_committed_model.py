"""Model-based property test of the partition side of transactions, end to end.

How: hypothesis draws a schedule for two transactional producers and plain
(non-idempotent) writers sharing one partition: transactional batches, COMMIT or ABORT
markers (some of them for an empty transaction, some bumping the producer epoch as
KIP-890 does), plain batches. The log is real RecordBatch v2 bytes, decoded. The
schedule ends every transaction still open, so the whole log is stable. The log is cut
into segments at random batch boundaries; each segment's ``.txnindex`` is rebuilt by
replaying it through producer state (the recovery path).

Checks: after every batch, producer state's first unstable offset is the oldest start
of a transaction the model has open. Then a read_committed consumer reads the log from
a random position in fetches of random size: each fetch gets the aborted transactions
``collect_aborted`` answers for its range (searching the segments from the one holding
the position) and ``filter_read_committed`` decides what the consumer hands out. The
records handed out, in order, are exactly the model's: every data record at or after
the start position that is not transactional or whose transaction committed; the
position ends at the log end.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.producer_state import ProducerStateManager
from raftka.broker.transaction_recovery import rebuild_aborted
from raftka.common.record.batch import DecodedBatch, Record, build_batch, decode_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.record.read_committed import filter_read_committed
from raftka.storage.transaction_index import collect_aborted

PIDS = (1, 2)

# ("send", pid, count, transactional), ("end", pid, commit, bump epoch), ("plain", count)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.sampled_from(PIDS), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans(), st.booleans()),
        st.tuples(st.just("plain"), st.integers(1, 2)),
    ),
    max_size=40,
)


@dataclass
class Model:
    log: list[DecodedBatch] = field(default_factory=list)
    epoch: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PIDS, 0))
    seq: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PIDS, 0))
    open_first: dict[int, int] = field(default_factory=dict)  # pid -> txn first offset
    # Offsets of each open transaction's records, then (offsets, committed) once ended.
    open_offsets: dict[int, list[int]] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)  # transactional offsets committed
    plain: set[int] = field(default_factory=set)  # non-transactional data offsets
    value_at: dict[int, bytes] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.log[-1].header.next_offset if self.log else 0

    def data(self, pid: int, count: int, txn: bool) -> DecodedBatch:
        base = self.end
        if pid in self.open_first:
            txn = True  # a plain batch inside a transaction is refused (INVALID_TXN_STATE)
        values = [b"%d" % (base + i) for i in range(count)]
        batch = decode_batch(
            build_batch(
                [Record(value=v, timestamp_ms=0) for v in values],
                base_offset=base,
                producer_id=pid,
                producer_epoch=self.epoch[pid],
                base_sequence=self.seq[pid],
                is_transactional=txn,
            )
        )
        self.seq[pid] += count
        offsets = list(range(base, base + count))
        self.value_at.update(zip(offsets, values, strict=True))
        if txn:
            self.open_first.setdefault(pid, base)
            self.open_offsets.setdefault(pid, []).extend(offsets)
        else:
            self.plain.update(offsets)
        return batch

    def marker(self, pid: int, commit: bool, bump: bool) -> DecodedBatch:
        if bump:  # KIP-890 part 2: the coordinator ends with a bumped epoch
            self.epoch[pid] += 1
            self.seq[pid] = 0
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = decode_batch(
            build_end_transaction_batch(
                EndTransactionMarker(kind, coordinator_epoch=0),
                producer_id=pid,
                producer_epoch=self.epoch[pid],
                timestamp_ms=0,
                base_offset=self.end,
            )
        )
        self.open_first.pop(pid, None)
        offsets = self.open_offsets.pop(pid, [])
        if commit:
            self.committed.update(offsets)
        return batch

    def plain_batch(self, count: int) -> DecodedBatch:
        base = self.end
        values = [b"%d" % (base + i) for i in range(count)]
        self.plain.update(range(base, base + count))
        self.value_at.update(zip(range(base, base + count), values, strict=True))
        return decode_batch(
            build_batch([Record(value=v, timestamp_ms=0) for v in values], base_offset=base)
        )


@settings(max_examples=300, deadline=None)
@given(
    schedule=ops,
    closing=st.lists(st.booleans(), min_size=len(PIDS), max_size=len(PIDS)),
    data=st.data(),
)
def test_read_committed_hands_out_exactly_the_committed_records(
    schedule: list[tuple[object, ...]], closing: list[bool], data: st.DataObject
) -> None:
    model = Model()
    producers = ProducerStateManager()

    def append(batch: DecodedBatch) -> None:
        model.log.append(batch)
        producers.apply_batch(batch)
        producers.on_high_watermark_updated(model.end)  # every replica caught up
        expected = min(model.open_first.values(), default=None)
        assert producers.first_unstable_offset == expected
        assert producers.last_stable_offset(model.end) == (
            model.end if expected is None else expected
        )

    for op in schedule:
        if op[0] == "send":
            _, pid, count, txn = op
            assert isinstance(pid, int) and isinstance(count, int) and isinstance(txn, bool)
            append(model.data(pid, count, txn))
        elif op[0] == "end":
            _, pid, commit, bump = op
            assert isinstance(pid, int) and isinstance(commit, bool) and isinstance(bump, bool)
            append(model.marker(pid, commit, bump))
        else:
            count = op[1]
            assert isinstance(count, int)
            append(model.plain_batch(count))
    for pid, commit in zip(PIDS, closing, strict=True):
        if pid in model.open_first:
            append(model.marker(pid, commit, bump=False))
    end = model.end

    # Segments at random batch boundaries; each .txnindex rebuilt by recovery's path.
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(model.log) - 1)), max_size=4))))
    bounds = [0, *(c for c in cuts if c < len(model.log)), len(model.log)]
    segments = [model.log[a:b] for a, b in itertools.pairwise(bounds)]
    replay = ProducerStateManager()
    indexes = [rebuild_aborted(replay, segment) for segment in segments]
    assert replay.entries == producers.entries
    segment_bases = [s[0].header.base_offset if s else 0 for s in segments]

    start = data.draw(st.integers(0, end))
    position = start
    handed: list[tuple[int, bytes | None]] = []
    while position < end:
        # The broker answers from the batch holding the position up to a batch boundary.
        first = next(i for i, b in enumerate(model.log) if b.header.last_offset >= position)
        # Often the whole rest: one fetch then spans several transactions of a producer.
        last = data.draw(st.just(len(model.log) - 1) | st.integers(first, len(model.log) - 1))
        fetched = model.log[first : last + 1]
        upper = fetched[-1].header.next_offset
        holding = bisect.bisect_right(segment_bases, position) - 1
        aborted = collect_aborted(indexes[holding:], fetch_offset=position, upper_bound=upper)
        result = filter_read_committed(fetched, aborted, fetch_offset=position)
        handed.extend((r.offset, r.value) for r in result.records)
        assert result.next_offset == upper
        position = result.next_offset

    visible = sorted(o for o in model.plain | model.committed if o >= start)
    assert handed == [(o, model.value_at[o]) for o in visible]
