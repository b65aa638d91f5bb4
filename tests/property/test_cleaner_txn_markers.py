"""Property: the log cleaner's marker removal (Kafka's rule, KIP-534 horizon) never
changes what a read_committed reader sees, beyond compaction.

How: hypothesis draws a log of plain records and transactions of three producers (each
COMMIT or ABORT, interleaved, keys from a small set so values supersede each other),
the partition's ``.txnindex`` entries appended after each ABORT marker as the broker
does; then several passes with the clock moving by draws around delete.retention.ms,
each after a new dirty segment, with ``active_producers`` either none or each
producer's last batch. After every pass:

- a read_committed read of the cleaned log (``Log.read``, ``collect_aborted``,
  ``filter_read_committed``, the consumer's path) returns only records the uncleaned
  log's read_committed read returned, at the same offsets, and the same latest value
  of every key: no aborted record reappears, no committed record is hidden;
- every transactional batch still in the log still has the marker that ended it, and
  producer state rebuilt from the cleaned log (a restart, a new replica) has no
  transaction open;
- a marker that is gone had been stamped with a delete horizon at or before the pass's
  time (none goes before delete.retention.ms from when a pass found it removable).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import Row, latest_by_key, log_batches

from raftka.broker.producer_state import ProducerStateManager
from raftka.common.record.batch import Record, build_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.record.read_committed import filter_read_committed
from raftka.storage import Log, LogConfig
from raftka.storage.cleaner import LogCleaner, delete_horizon_ms
from raftka.storage.transaction_index import AbortedTxn

T0 = 1_700_000_000_000
RETENTION_MS = 1000
PRODUCERS = (1, 2, 3)

# ("plain", key) | ("txn", producer, key) | ("end", producer, commit?)
Op = tuple[str, int, bool]
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(0, 3), st.just(False)),
        st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), st.booleans()),
        st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
    ),
    min_size=3,
    max_size=40,
)


class _Writer:
    """Appends as a partition leader would, .txnindex entries included."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.open: dict[int, int] = {}  # producer -> its transaction's first offset
        self.sequences: dict[int, int] = {}
        self.closing: dict[int, int] = {}  # transactional batch offset -> its marker's
        self._batches: dict[int, list[int]] = {}
        self.counter = 0

    def _value(self) -> bytes:
        self.counter += 1
        return b"v%d" % self.counter

    def plain(self, key: int) -> Row:
        value = self._value()
        batch = build_batch([Record(value, key=b"k%d" % key, timestamp_ms=T0)])
        return self.log.append_as_leader(batch, 0).first_offset, b"k%d" % key, value

    def txn(self, pid: int, key: int) -> None:
        sequence = self.sequences.get(pid, 0)
        self.sequences[pid] = sequence + 1
        batch = build_batch(
            [Record(self._value(), key=b"k%d" % key, timestamp_ms=T0)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=sequence,
            is_transactional=True,
        )
        at = self.log.append_as_leader(batch, 0).first_offset
        self.open.setdefault(pid, at)
        self._batches.setdefault(pid, []).append(at)

    def end(self, pid: int, commit: bool) -> None:
        if pid not in self.open:
            return
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        marker = build_end_transaction_batch(
            EndTransactionMarker(kind, 1), producer_id=pid, producer_epoch=0, timestamp_ms=T0
        )
        at = self.log.append_as_leader(marker, 0).first_offset
        first = self.open.pop(pid)
        for offset in self._batches.pop(pid):
            self.closing[offset] = at
        if not commit:
            lso = min([*self.open.values(), self.log.log_end_offset])
            self.log.append_aborted_txn(AbortedTxn(pid, first, at, lso))

    def dirty_segment(self) -> Row:
        """A committed record in a segment of its own: the next pass has work."""
        self.log.roll()
        row = self.plain(9)
        self.log.roll()
        self.log.update_high_watermark(self.log.log_end_offset)
        return row


def _read_committed(log: Log) -> list[Row]:
    start, end = log.log_start_offset, log.log_end_offset
    batches = [b for b, _ in log_batches(log)]
    aborted = log.collect_aborted(start, end)
    result = filter_read_committed(batches, aborted, fetch_offset=start)
    return [(r.offset, r.key, r.value) for r in result.records]


def _last_batches(log: Log) -> dict[int, int]:
    out: dict[int, int] = {}
    for b, _ in log_batches(log):
        if b.header.producer_id >= 0 and not b.header.is_control:
            out[b.header.producer_id] = b.header.last_offset
    return out


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops=ops_st,
    steps=st.lists(st.integers(0, 2 * RETENTION_MS), min_size=2, max_size=5),
    name_producers=st.booleans(),
    segment_bytes=st.integers(250, 900),
)
def test_marker_removal_keeps_the_read_committed_view(
    *, ops: list[Op], steps: list[int], name_producers: bool, segment_bytes: int
) -> None:
    cfg = LogConfig(
        segment_bytes=segment_bytes,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION_MS,
        index_interval_bytes=128,
    )
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "topic-0", cfg, clock_ms=lambda: T0)
        try:
            w = _Writer(log)
            for kind, a, b in ops:
                if kind == "plain":
                    w.plain(a)
                elif kind == "txn":
                    w.txn(a, int(b))
                else:
                    w.end(a, b)
            for pid in list(w.open):  # every transaction ends: the whole log is stable
                w.end(pid, commit=pid % 2 == 0)
            w.dirty_segment()
            before = _read_committed(log)
            by_offset = {r[0]: r for r in before}
            horizons: dict[int, int] = {}
            cleaner = LogCleaner()
            now = T0
            for step in steps:
                now += step
                active = _last_batches(log) if name_producers else {}
                cleaner.clean_once(log, now, active_producers=active)
                after = _read_committed(log)
                for row in after:
                    assert by_offset.get(row[0]) == row, f"{row} was not read committed before"
                assert latest_by_key(after) == latest_by_key(before)
                batches = [b for b, _ in log_batches(log)]
                # Producer state rebuilt from the cleaned log (a restart, a new
                # replica) finds no transaction left open by a removed marker.
                rebuilt = ProducerStateManager()
                rebuilt.rebuild_from_batches(batches)
                assert dict(rebuilt.ongoing_txns) == {}
                headers = [b.header for b in batches]
                present = {h.base_offset for h in headers}
                for h in headers:
                    if h.is_transactional and not h.is_control:
                        closing = w.closing[h.base_offset]
                        assert closing in present, f"batch {h.base_offset} lost marker {closing}"
                    horizon = delete_horizon_ms(h) if h.is_control else None
                    if horizon is not None:
                        assert horizon == horizons.setdefault(h.base_offset, horizon)
                        assert horizon <= now + RETENTION_MS
                for marker in set(w.closing.values()) - present:
                    assert horizons.get(marker, now + 1) <= now, f"marker {marker} went early"
                row = w.dirty_segment()
                before.append(row)
                by_offset[row[0]] = row
        finally:
            log.close()
