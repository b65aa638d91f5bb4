"""Property: a kill -9 at any step of a cleaning pass leaves a log that opens to either the
pre-clean or the post-clean content, key by key, and never moves an offset.

How: hypothesis draws a compacted log (keys from a small set so values supersede each
other, some tombstones, some records without a key, segments of a few hundred bytes), an
optional earlier clean (so the pass also rewrites a clean section), and a step N. The
cleaner's ``_crash_point`` hook, called before every durable file operation (append,
fsync, each rename, each unlink, the checkpoint write), raises at step N; nothing after
it runs and nothing is undone, which is what kill -9 leaves on disk (every write went to
the file with pwrite, so the page cache holds it). The test then drops the Log without
closing it, reopens the directory (recovery runs) and checks:

- the log end is unchanged and offsets strictly increase;
- every record read is a record of the original log at the same offset, same key, same
  value (no offset changed, nothing invented);
- every key's latest record is the original latest, except a tombstone that the
  cleaner may drop once delete.retention.ms has passed (then the key is gone whole);
- records without a key and everything in the active segment are all still there;
- each idempotent producer's last batch (offsets, last sequence) is still there, as a
  whole batch or an emptied header, so producer state rebuilt from the log survives;
- no .cleaned or .swap file is left;
- a full pass afterwards still ends in the compacted state (each key once below the
  cleaned end, its latest value).

fsync is a no-op during the test: a process kill, unlike a power cut, loses nothing
the page cache holds, so fsync cannot change the outcome here, and on a shared disk it
was most of the run time. (The real-SIGKILL unit test keeps real fsyncs.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import Row, latest_by_key, log_batches

from raftka.common.record.batch import Record, build_batch
from raftka.common.record.header import BatchHeader
from raftka.storage import Log, LogConfig
from raftka.storage import cleaner as cleaner_module
from raftka.storage.cleaner import LogCleaner

T0 = 1_700_000_000_000
RETENTION_MS = 1000


class SimulatedKillError(BaseException):
    """Raised at the chosen step; a BaseException so no ``except Exception`` in the
    code under test can swallow it (kill -9 cannot be caught either)."""


# (key, value, idempotent producer id or None). One record per batch.
Spec = tuple[bytes | None, bytes | None, int | None]
records_st = st.lists(
    st.tuples(
        st.one_of(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.none()),
        st.one_of(st.binary(min_size=1, max_size=40), st.none()),
        st.one_of(st.none(), st.sampled_from([1, 2])),
    ).filter(lambda kv: kv[0] is not None or kv[1] is not None),
    min_size=5,
    max_size=60,
)


def _append(log: Log, rows: list[Spec], ts: int, sequences: dict[int, int]) -> None:
    for i, (key, value, producer_id) in enumerate(rows):
        fields: dict[str, int] = {}
        if producer_id is not None:
            sequence = sequences.get(producer_id, 0)
            sequences[producer_id] = sequence + 1
            fields = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": sequence}
        batch = build_batch([Record(value=value, key=key, timestamp_ms=ts + i)], **fields)
        log.append_as_leader(batch, 0)
    log.update_high_watermark(log.log_end_offset)


def _last_producer_batches(log: Log) -> dict[int, tuple[int, int, int]]:
    """Producer id -> (base offset, last offset, last sequence) of its last batch: what
    producer state rebuilt from the log needs."""
    out: dict[int, tuple[int, int, int]] = {}
    for h in _headers(log):
        if h.producer_id >= 0:
            out[h.producer_id] = (h.base_offset, h.last_offset, h.last_sequence)
    return out


def _headers(log: Log) -> list[BatchHeader]:
    return [b.header for b, _ in log_batches(log)]


def _read_all(log: Log) -> list[Row]:
    return [
        (r.offset, r.key, r.value)
        for b, first in log_batches(log)
        for r in b.records
        if r.offset >= first
    ]


def _check(log: Log, original: list[Row], leo: int, active_base: int) -> list[Row]:
    rows = _read_all(log)
    assert log.log_end_offset == leo
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    by_offset = {r[0]: r for r in original}
    for row in rows:
        assert by_offset.get(row[0]) == row, f"record at offset {row[0]} changed: {row}"
    now_latest = latest_by_key(rows)
    for key, row in latest_by_key(original).items():
        if key in now_latest:
            assert now_latest[key] == row, f"key {key!r}: latest {now_latest[key]} != {row}"
        else:
            assert row[2] is None, f"key {key!r} lost its latest value {row}"
    kept = set(offsets)
    for row in original:
        if row[1] is None or row[0] >= active_base:
            assert row[0] in kept, f"record {row} must never be removed"
    return rows


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    first=records_st,
    second=records_st,
    clean_first=st.booleans(),
    segment_bytes=st.integers(250, 900),
    expire_tombstones=st.booleans(),
    crash_step=st.integers(1, 120),
)
def test_kill_at_any_step_of_a_pass_recovers_to_pre_or_post_clean(
    *,
    first: list[Spec],
    second: list[Spec],
    clean_first: bool,
    segment_bytes: int,
    expire_tombstones: bool,
    crash_step: int,
) -> None:
    cfg = LogConfig(
        segment_bytes=segment_bytes,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION_MS,
        index_interval_bytes=128,
    )
    now_ms = T0 + (10 * RETENTION_MS if expire_tombstones else RETENTION_MS // 2)
    real_fsync = os.fsync
    os.fsync = _no_fsync
    try:
        _run(first, second, clean_first=clean_first, cfg=cfg, now_ms=now_ms, crash_step=crash_step)
    finally:
        os.fsync = real_fsync


def _no_fsync(fd: int) -> None:
    del fd


def _run(
    first: list[Spec],
    second: list[Spec],
    *,
    clean_first: bool,
    cfg: LogConfig,
    now_ms: int,
    crash_step: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "topic-0"
        log = Log.open(path, cfg, clock_ms=lambda: T0)
        sequences: dict[int, int] = {}
        _append(log, first, T0, sequences)
        cleaner = LogCleaner()
        if clean_first:
            cleaner.clean_once(log, now_ms)  # no crash: the next pass has a clean section
        _append(log, second, T0 + 100, sequences)
        original = _read_all(log)
        producers = _last_producer_batches(log)
        leo, active_base = log.log_end_offset, log.active_segment_base_offset

        steps = 0

        def kill_at_step(name: str) -> None:
            nonlocal steps
            steps += 1
            if steps == crash_step:
                raise SimulatedKillError(name)

        saved = cleaner_module._crash_point
        cleaner_module._crash_point = kill_at_step
        try:
            cleaner.clean_once(log, now_ms)
        except SimulatedKillError:
            pass
        finally:
            cleaner_module._crash_point = saved
        log._close_files()  # kill -9: no flush, no checkpoints, no clean-shutdown marker

        log = Log.open(path, cfg, clock_ms=lambda: T0)
        try:
            _check(log, original, leo, active_base)
            assert _last_producer_batches(log) == producers
            leftovers = [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
            assert not leftovers, leftovers
            # A pass after recovery still compacts: each key once below its end.
            stats = cleaner.clean_once(log, now_ms)
            rows = _check(log, original, leo, active_base)
            assert _last_producer_batches(log) == producers
            if stats.cleaned:
                below = [r[1] for r in rows if r[0] < stats.end_offset and r[1] is not None]
                assert len(below) == len(set(below)), "a superseded record survived"
        finally:
            log.close()
