"""Producer-state snapshots on disk (broker/producer_state_store.py), with a real segment
log in a temporary directory: the state loaded from a snapshot plus the log after it
equals the state rebuilt from the whole log; a corrupt newest snapshot falls back to an
older one; snapshots above the log end (after a truncation) or below the log start are
deleted."""

from __future__ import annotations

import os
from pathlib import Path

from raftka.broker.producer_state import ProducerBatch, ProducerStateManager
from raftka.broker.producer_state_snapshot import snapshot_offset
from raftka.broker.producer_state_store import (
    load_producer_state,
    prune_snapshots,
    write_producer_snapshot,
)
from raftka.common.record import Record, build_batch
from raftka.common.record.header import parse_header
from raftka.storage import Log, LogConfig


def _append(log: Log, producers: ProducerStateManager, pid: int, seq: int, n: int) -> None:
    data = build_batch(
        [Record(value=b"x" * 100, timestamp_ms=1_000) for _ in range(n)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )
    info = log.append_as_leader(data, 0)
    producers.update(
        ProducerBatch.from_header(parse_header(data)),
        first_offset=info.first_offset,
        last_offset=info.last_offset,
    )


def _snapshots(log: Log) -> list[int]:
    return sorted(o for n in os.listdir(log.path) if (o := snapshot_offset(n)) is not None)


def _fill(tmp_path: Path) -> tuple[Log, ProducerStateManager]:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2_000))
    producers = ProducerStateManager()
    seqs = {7: 0, 8: 0, 9: 0}
    for i in range(60):
        pid = 7 + i % 3
        _append(log, producers, pid, seqs[pid], 3)
        seqs[pid] += 3
        if i in (20, 40):
            write_producer_snapshot(log, producers)
    return log, producers


def test_snapshot_plus_replay_equals_the_state_of_the_whole_log(tmp_path: Path) -> None:
    """Two snapshots mid-log, then more batches: loading uses the newest snapshot and
    replays the rest, giving exactly the live table (every producer's window)."""
    log, producers = _fill(tmp_path)
    assert len(_snapshots(log)) == 2
    loaded = load_producer_state(log)
    assert loaded.entries == producers.entries
    log.close()


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    """Flip a byte in the newest snapshot: the load skips it and still ends equal."""
    log, producers = _fill(tmp_path)
    newest = max(_snapshots(log))
    path = next(p for p in log.path.iterdir() if snapshot_offset(p.name) == newest)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert load_producer_state(log).entries == producers.entries
    log.close()


def test_truncation_prunes_snapshots_above_the_log_end(tmp_path: Path) -> None:
    """After truncating below the newest snapshot, that snapshot is deleted on load and
    the state equals a rebuild of the truncated log from nothing."""
    log, _ = _fill(tmp_path)
    older, newest = _snapshots(log)
    log.truncate_to(older + 1)
    loaded = load_producer_state(log)
    assert _snapshots(log) == [older]
    for name in os.listdir(log.path):
        if snapshot_offset(name) is not None:
            os.unlink(log.path / name)
    assert load_producer_state(log).entries == loaded.entries
    assert newest > older
    log.close()


def test_snapshots_below_the_log_start_are_deleted(tmp_path: Path) -> None:
    """A log start moved past a snapshot (DeleteRecords, retention) makes it useless."""
    log, _ = _fill(tmp_path)
    older, newest = _snapshots(log)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(older + 1)
    prune_snapshots(log)
    assert _snapshots(log) == [newest]
    log.close()
