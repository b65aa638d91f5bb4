"""Property: compacting a ``__consumer_offsets`` log with transactional offset commits
does not change what a coordinator loads from it.

How: hypothesis draws plain commits, transactional commits of two producers, their
COMMIT/ABORT markers and plain tombstones (OffsetDelete) for two keys, written as the
group coordinator and the partition leader write them (one batch each, markers with the
control-batch codec) into a real segment log with small segments. The log is loaded
into a GroupManager (visible offsets and pending transactional offsets), cleaned by the
broker's LogCleaner with tombstones past delete.retention.ms, and loaded again: both
loads must agree. The cleaner must not clean at or past an open transaction (its
records are pending offsets), must drop only aborted transactional records, and must not
let a tombstone go while an older committed record of its key survives.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import log_batches

from raftka.broker.coordinator import GroupCoordinatorConfig, GroupManager
from raftka.broker.coordinator.group_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    offset_commit_record,
)
from raftka.broker.coordinator.service import replay_items
from raftka.common.record.batch import Record, build_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.structs import TopicPartition
from raftka.storage import Log, LogConfig
from raftka.storage.cleaner import LogCleaner

T0 = 1_700_000_000_000
RETENTION_MS = 1000
G = "g"
TPS = (TopicPartition("t", 0), TopicPartition("t", 1))
FILLER = TopicPartition("filler", 0)

Op = tuple[str, int, int]  # (kind, key index or producer id, offset or committed flag)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(0, 1), st.integers(0, 999)),
        st.tuples(st.just("delete"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("txn"), st.sampled_from([7, 8]), st.integers(0, 1)),
        st.tuples(st.just("marker"), st.sampled_from([7, 8]), st.integers(0, 1)),
    ),
    min_size=1,
    max_size=40,
)


def _write(log: Log, ops: list[Op]) -> None:
    sequences: dict[int, int] = {}
    for i, (kind, a, b) in enumerate(ops):
        ts = T0 + i
        if kind == "marker":
            control = ControlRecordType.COMMIT if b else ControlRecordType.ABORT
            batch = build_end_transaction_batch(
                EndTransactionMarker(control, 0), producer_id=a, producer_epoch=0, timestamp_ms=ts
            )
        else:
            tp = FILLER if kind == "filler" else TPS[b if kind == "txn" else a]
            value = None if kind == "delete" else OffsetCommitValue(1000 + i, -1, "", ts)
            record = offset_commit_record(OffsetCommitKey(G, tp.topic, tp.partition), value)
            records = [Record(record.value, record.key, ts)]
            if kind == "txn":
                sequence = sequences.get(a, 0)
                sequences[a] = sequence + 1
                batch = build_batch(
                    records,
                    producer_id=a,
                    producer_epoch=0,
                    base_sequence=sequence,
                    is_transactional=True,
                )
            else:
                batch = build_batch(records)
        log.append_as_leader(batch, 0)
    log.update_high_watermark(log.log_end_offset)


def _load(log: Log) -> tuple[dict[TopicPartition, int], dict[int, dict[TopicPartition, int]]]:
    manager = GroupManager(
        config=GroupCoordinatorConfig(), rng=random.Random(1), partition_for=lambda g: 0
    )
    manager.begin_loading(partition=0)
    items = [item for batch, _ in log_batches(log) for item in replay_items(batch)]
    manager.replay(partition=0, records=items)
    manager.complete_loading(partition=0, now_ms=T0)
    visible = {tp: v.offset for tp, v in manager.committed(G).items() if tp != FILLER}
    pending = {
        pid: {tp: o for (_, tp), o in offsets.items()}
        for pid, offsets in manager.pending_transactional(0).items()
    }
    return visible, pending


def _check(ops: list[Op], segment_bytes: int) -> None:
    cfg = LogConfig(
        segment_bytes=segment_bytes,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION_MS,
    )
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "__consumer_offsets-0", cfg, clock_ms=lambda: T0)
        try:
            # Plain records of another key after the drawn ones roll segments so that
            # most of what was drawn lies below the active segment (cleanable).
            _write(log, [*ops, *[("filler", 0, i) for i in range(10)]])
            before = _load(log)
            LogCleaner().clean_once(log, T0 + 10 * RETENTION_MS)
            assert _load(log) == before
        finally:
            log.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops=ops_st, segment_bytes=st.integers(250, 700))
def test_cleaning_keeps_what_the_coordinator_loads(ops: list[Op], segment_bytes: int) -> None:
    _check(ops, segment_bytes)


def test_tombstone_after_a_pending_record_stays_deleted_after_cleaning() -> None:
    """A transactional record of key K, then K's tombstone (OffsetDelete while the
    transaction was open), then the COMMIT: K stays deleted after the cleaner drops
    the expired tombstone."""
    _check([("txn", 7, 0), ("delete", 0, 0), ("marker", 7, 1)], 250)
