"""The log cleaner (storage/cleaner.py): Kafka's compaction rules on real segment files.

Each test builds a small log in a temporary directory (segments of a few hundred bytes,
so a handful of records spans several segments), cleans it with an explicit ``now_ms``
and reads it back through ``Log.read``, the path a consumer takes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner
from log_helpers import Row, latest_by_key, log_batches

from raftka.common.errors import InvalidConfigError
from raftka.common.record.batch import Record, build_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.record.header import BatchHeader, Compression, iter_batches
from raftka.common.record.read_committed import filter_read_committed
from raftka.storage import Log, LogConfig
from raftka.storage import cleaner as cleaner_module
from raftka.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerConfig,
    CleanerStats,
    LogCleaner,
    read_cleaner_checkpoint,
)
from raftka.storage.dump import dump_log_command
from raftka.storage.transaction_index import AbortedTxn

T0 = 1_700_000_000_000
DAY_MS = 86_400_000


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def config(**kwargs: object) -> LogConfig:
    base: dict[str, object] = {
        "segment_bytes": 700,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.0,
        "index_interval_bytes": 100,
    }
    base.update(kwargs)
    return LogConfig(**base)  # type: ignore[arg-type]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "compacted-0"


@pytest.fixture
def opened(log_dir: Path) -> Iterator[list[Log]]:
    logs: list[Log] = []
    yield logs
    for log in logs:
        log.close()


def open_log(log_dir: Path, logs: list[Log], cfg: LogConfig, clock: Clock | None = None) -> Log:
    log = Log.open(log_dir, cfg, clock_ms=clock or Clock())
    logs.append(log)
    return log


def produce(
    log: Log, rows: list[tuple[bytes | None, bytes | None]], ts: int = T0, **kwargs: object
) -> int:
    """Append ``rows`` as one batch; returns its first offset. Moves the HW to the end."""
    data = build_batch(
        [Record(value=v, key=k, timestamp_ms=ts) for k, v in rows],
        **kwargs,  # type: ignore[arg-type]
    )
    info = log.append_as_leader(data, 0)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def produce_txn(log: Log, rows: list[tuple[bytes | None, bytes | None]], producer_id: int) -> int:
    """``rows`` as the first batch of a transaction of ``producer_id`` (epoch 0)."""
    return produce(
        log,
        rows,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def end_txn(log: Log, producer_id: int, kind: ControlRecordType) -> None:
    """The marker that ends ``producer_id``'s transaction (coordinator epoch 1)."""
    marker = build_end_transaction_batch(
        EndTransactionMarker(kind, 1), producer_id=producer_id, producer_epoch=0, timestamp_ms=T0
    )
    log.append_as_leader(marker, 0)


def read_all(log: Log) -> tuple[list[Row], list[BatchHeader]]:
    """Every record and batch header from the log start to the end, via Log.read."""
    rows: list[Row] = []
    headers: list[BatchHeader] = []
    for b, first in log_batches(log):
        headers.append(b.header)
        rows.extend((r.offset, r.key, r.value) for r in b.records if r.offset >= first)
    return rows, headers


def fill(log: Log, keys: int, rounds: int, ts: int = T0) -> list[Row]:
    """``rounds`` values for each of ``keys`` keys, one record per batch."""
    for r in range(rounds):
        for k in range(keys):
            produce(log, [(b"k%d" % k, b"v%d-%d" % (k, r))], ts=ts + r)
    return read_all(log)[0]


# ---------------------------------------------------------------------------- config


def test_config_accepts_kafkas_cleanup_policies_and_compaction_settings() -> None:
    """cleanup.policy takes delete, compact or both (any order, stored sorted); the
    compaction settings carry Kafka's defaults and are validated as Kafka does."""
    c = LogConfig()
    assert (c.cleanup_policy, c.delete_retention_ms, c.min_cleanable_dirty_ratio) == (
        "delete",
        86_400_000,
        0.5,
    )
    assert (c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (0, 2**63 - 1)
    assert (c.compact, c.delete) == (False, True)
    both = LogConfig.from_properties(
        {"cleanup.policy": "delete, compact", "min.cleanable.dirty.ratio": "0.25"}
    )
    assert (both.cleanup_policy, both.compact, both.delete) == ("compact,delete", True, True)
    assert both.min_cleanable_dirty_ratio == 0.25
    assert LogConfig.from_properties(both.to_properties()) == both
    compact = LogConfig.from_properties({"cleanup.policy": "compact", "delete.retention.ms": 5})
    assert (compact.compact, compact.delete, compact.delete_retention_ms) == (True, False, 5)
    for props in (
        {"cleanup.policy": "shred"},
        {"cleanup.policy": ""},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "x"},
        {"delete.retention.ms": -1},
        {"max.compaction.lag.ms": 0},
        {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
    ):
        with pytest.raises(InvalidConfigError):
            LogConfig.from_properties(props)  # type: ignore[arg-type]


def test_retention_by_time_applies_to_compact_delete_not_to_compact(
    tmp_path: Path, opened: list[Log]
) -> None:
    """Time retention deletes old segments under compact,delete and delete, never under
    compact alone (Kafka's rule)."""
    for policy, expect_deleted in (("compact", False), ("compact,delete", True)):
        clock = Clock()
        log = open_log(
            tmp_path / policy.replace(",", "_"),
            opened,
            config(cleanup_policy=policy, retention_ms=1000),
            clock,
        )
        fill(log, keys=4, rounds=4)
        clock.now_ms = T0 + 10_000
        assert (log.delete_retention_segments() > 0) is expect_deleted, policy


# ---------------------------------------------------------------------------- compaction


def test_latest_value_of_every_key_kept_at_its_offset_and_active_untouched(
    log_dir: Path, opened: list[Log]
) -> None:
    """After a pass every key still reads its latest value, every record read is at its
    original offset with its original key and value, superseded records are gone below
    the active segment, and the active segment's file is byte for byte unchanged."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    assert log.segment_count >= 4
    active = log_dir / f"{log.active_segment_base_offset:020d}.log"
    active_bytes = active.read_bytes()
    leo = log.log_end_offset

    stats = LogCleaner().clean_once(log, T0)

    assert stats.cleaned, stats.reason
    assert stats.end_offset == log.active_segment_base_offset
    after, _ = read_all(log)
    original = {row[0]: row for row in before}
    assert all(original[row[0]] == row for row in after), "an offset changed"
    assert latest_by_key(after) == latest_by_key(before)
    below_active = [r for r in after if r[0] < log.active_segment_base_offset]
    assert len({r[1] for r in below_active}) == len(below_active), "a superseded record stayed"
    assert active.read_bytes() == active_bytes
    assert log.log_end_offset == leo
    assert stats.records_kept < stats.records_read
    assert read_cleaner_checkpoint(log_dir.parent) == {("compacted", 0): stats.end_offset}


def test_cleaned_log_reopens_with_gaps_after_clean_and_unclean_shutdown(
    log_dir: Path, opened: list[Log]
) -> None:
    """A cleaned log has offset gaps; reopening it (cleanly, then with a full recovery
    scan forced by a missing epoch checkpoint) keeps every record: recovery allows gaps."""
    log = open_log(log_dir, opened, config())
    fill(log, keys=3, rounds=8)
    assert LogCleaner().clean_once(log, T0).cleaned
    expected = read_all(log)[0]
    log.close()
    log = open_log(log_dir, opened, config())
    assert read_all(log)[0] == expected
    log._close_files()  # as a crash: no clean-shutdown marker
    opened.remove(log)
    (log_dir / "leader-epoch-checkpoint").unlink(missing_ok=True)
    log = open_log(log_dir, opened, config())
    assert read_all(log)[0] == expected


def test_tombstones_removed_only_after_delete_retention(log_dir: Path, opened: list[Log]) -> None:
    """A tombstone and the values it deletes: the values go at the first pass, the
    tombstone stays until its segment's newest record is older than delete.retention.ms."""
    log = open_log(log_dir, opened, config(delete_retention_ms=DAY_MS))
    produce(log, [(b"gone", b"v1")])
    produce(log, [(b"gone", b"v2")])
    tomb = produce(log, [(b"gone", None)])
    fill(log, keys=4, rounds=3, ts=T0 + 10)
    cleaner = LogCleaner()

    assert cleaner.clean_once(log, T0 + DAY_MS).cleaned  # exactly the retention: kept
    rows = read_all(log)[0]
    assert [r for r in rows if r[1] == b"gone"] == [(tomb, b"gone", None)]

    fill(log, keys=1, rounds=2, ts=T0 + 20)  # new dirty data for another pass
    log.roll()
    stats = cleaner.clean_once(log, T0 + DAY_MS + 1_000)
    assert stats.cleaned and stats.tombstones_removed == 1
    assert [r for r in read_all(log)[0] if r[1] == b"gone"] == []


def test_dirty_ratio_and_min_compaction_lag_are_honoured(log_dir: Path, opened: list[Log]) -> None:
    """No pass while the dirty ratio is at or below min.cleanable.dirty.ratio; segments
    younger than min.compaction.lag.ms are not cleaned."""
    log = open_log(log_dir, opened, config(min_cleanable_dirty_ratio=0.9))
    fill(log, keys=4, rounds=4)
    cleaner = LogCleaner()
    stats = cleaner.clean_once(log, T0)
    assert stats.cleaned and stats.dirty_ratio == 1.0  # never cleaned: all dirty
    fill(log, keys=4, rounds=3)
    stats = cleaner.clean_once(log, T0)
    assert not stats.cleaned and "dirty ratio" in stats.reason, stats
    assert 0 < stats.dirty_ratio <= 0.9
    assert stats.dirty_ratio == cleaner.dirty_ratio(log, T0)

    lag_dir = log_dir.with_name("lagged-0")
    log = open_log(lag_dir, opened, config(min_compaction_lag_ms=1000))
    fill(log, keys=4, rounds=2, ts=T0)  # old
    log.roll()
    old_end = log.log_end_offset
    fill(log, keys=4, rounds=2, ts=T0 + 5000)  # young at now = T0 + 5500
    log.roll()
    cleaner = LogCleaner()
    stats = cleaner.clean_once(log, T0 + 5500)
    assert stats.cleaned
    assert stats.end_offset == old_end  # stops at the first young segment
    young = [r for r in read_all(log)[0] if r[0] >= stats.end_offset]
    assert len(young) == log.log_end_offset - stats.end_offset  # untouched: no gaps
    assert not cleaner.clean_once(log, T0 + 5500).cleaned


def test_max_compaction_lag_forces_a_pass(log_dir: Path, opened: list[Log]) -> None:
    """With a dirty ratio that never triggers, max.compaction.lag.ms forces the pass
    once the first dirty segment's first batch is older than it."""
    cfg = config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000)
    log = open_log(log_dir, opened, cfg)
    fill(log, keys=3, rounds=5)
    cleaner = LogCleaner()
    assert not cleaner.needs_cleaning(log, T0 + 1000)
    assert not cleaner.clean_once(log, T0 + 1000).cleaned
    assert cleaner.needs_cleaning(log, T0 + 120_000)
    stats = cleaner.clean_once(log, T0 + 120_000)
    assert stats.cleaned and stats.forced_by_max_lag


def test_only_compacted_logs_below_the_high_watermark_are_cleaned(
    log_dir: Path, opened: list[Log]
) -> None:
    """cleanup.policy=delete: no pass. Compacted: nothing at or above the high watermark
    is cleaned (it may still be truncated)."""
    log = open_log(log_dir, opened, config(cleanup_policy="delete"))
    fill(log, keys=3, rounds=4)
    assert not LogCleaner().clean_once(log, T0).cleaned
    log = open_log(log_dir.with_name("hw-0"), opened, config())
    fill(log, keys=3, rounds=6)
    log.update_high_watermark(3)
    stats = LogCleaner().clean_once(log, T0)
    assert not stats.cleaned or stats.end_offset <= 3


def test_control_batches_empty_producer_batches_and_transactions(
    log_dir: Path, opened: list[Log]
) -> None:
    """Kafka's batch rules: an idempotent producer's emptied batch keeps its header (same
    offsets, producer id, epoch, sequence, no records); a plain emptied batch goes;
    markers stay (with active_producers None every transaction keeps a header); records
    of an aborted transaction go; a committed transaction's records count as the
    latest; an open transaction caps the cleaned range."""
    log = open_log(log_dir, opened, config(segment_bytes=400))
    idem = produce(
        log, [(b"a", b"a1"), (b"b", b"b1")], producer_id=7, producer_epoch=2, base_sequence=0
    )
    produce(log, [(b"a", b"a2")])  # plain: will be emptied and removed
    produce(log, [(b"b", b"b2"), (b"a", b"a3")])
    aborted = produce_txn(log, [(b"a", b"aborted")], producer_id=9)
    end_txn(log, 9, ControlRecordType.ABORT)
    committed = produce_txn(log, [(b"b", b"b-txn")], producer_id=11)
    end_txn(log, 11, ControlRecordType.COMMIT)
    for i in range(6):
        produce(log, [(b"x%d" % i, b"filler" * 20)])
    log.roll()
    log.update_high_watermark(log.log_end_offset)

    stats = LogCleaner().clean_once(log, T0)
    assert stats.cleaned, stats.reason
    rows, headers = read_all(log)
    by_key = latest_by_key(rows)
    assert by_key[b"a"][2] == b"a3"
    assert by_key[b"b"] == (committed, b"b", b"b-txn")
    assert all(r[2] != b"aborted" for r in rows)
    assert stats.aborted_records_removed == 1
    empty = [h for h in headers if h.records_count == 0]
    assert [(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch) for h in empty] == [
        (idem, idem + 1, 7, 2),
        (aborted, aborted, 9, 0),
    ]
    assert empty[0].base_sequence == 0 and empty[0].last_sequence == 1
    assert sum(1 for h in headers if h.is_control) == 2
    assert not any(h.base_offset == idem + 2 for h in headers), "plain emptied batch removed"

    # The broker's producer state may say which batches are producers' last: others go.
    log2 = open_log(log_dir.with_name("producers-0"), opened, config(segment_bytes=400))
    first = produce(log2, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    last = produce(log2, [(b"a", b"2")], producer_id=7, producer_epoch=0, base_sequence=1)
    produce(log2, [(b"a", b"3")])
    for i in range(6):
        produce(log2, [(b"y%d" % i, b"filler" * 20)])
    stats = LogCleaner().clean_once(log2, T0, active_producers={7: last})
    headers = read_all(log2)[1]
    assert [h.base_offset for h in headers if h.records_count == 0] == [last]
    assert not any(h.base_offset == first for h in headers)

    # An open transaction: nothing from its first batch on is cleaned.
    log3 = open_log(log_dir.with_name("open-0"), opened, config(segment_bytes=400))
    produce(log3, [(b"k", b"1")])
    open_txn = produce_txn(log3, [(b"k", b"2")], producer_id=5)
    for i in range(8):
        produce(log3, [(b"k", b"v%d" % i)])
    stats = LogCleaner().clean_once(log3, T0)
    assert not stats.cleaned or stats.end_offset <= open_txn
    assert (open_txn, b"k", b"2") in read_all(log3)[0]


def test_compressed_batches_are_recompressed_with_their_codec(
    log_dir: Path, opened: list[Log]
) -> None:
    """A batch that loses some records is rebuilt with its own codec, the kept records
    at their original offsets, the batch's base and last offset unchanged."""
    log = open_log(log_dir, opened, config(segment_bytes=2000))
    first = produce(
        log, [(b"k%d" % i, b"value-%d" % i * 10) for i in range(6)], compression=Compression.GZIP
    )
    produce(log, [(b"k0", b"new"), (b"k2", b"new")])
    for i in range(20):
        produce(log, [(b"f%d" % i, b"filler" * 20)])
    assert LogCleaner().clean_once(log, T0).cleaned
    rows, headers = read_all(log)
    h = headers[0]
    assert (h.base_offset, h.last_offset, h.compression) == (first, first + 5, Compression.GZIP)
    assert h.records_count == 4
    assert [r[0] for r in rows[:4]] == [first + 1, first + 3, first + 4, first + 5]


def test_offset_map_bound_moves_the_end_down(log_dir: Path, opened: list[Log]) -> None:
    """A dedupe buffer too small for the dirty section cleans what fits and leaves the
    rest for the next pass; passes repeat until the whole dirty section is clean."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=12, rounds=4)
    cleaner = LogCleaner(
        CleanerConfig(dedupe_buffer_bytes=(cleaner_module.MAP_ENTRY_OVERHEAD_BYTES + 3) * 10)
    )
    ends = []
    for _ in range(log.segment_count + 1):  # bounded: each pass moves the end up
        stats = cleaner.clean_once(log, T0)
        if not stats.cleaned:
            break
        ends.append(stats.end_offset)
    assert len(ends) >= 2 and ends == sorted(ends)
    assert latest_by_key(read_all(log)[0]) == latest_by_key(before)


def test_follower_copies_a_cleaned_log_with_its_gaps(log_dir: Path, opened: list[Log]) -> None:
    """A follower fetching a cleaned leader's log appends batches across the gaps on a
    compacted log and ends with the same records at the same offsets; a log without
    compact still refuses a gap."""
    leader = open_log(log_dir, opened, config())
    fill(leader, keys=3, rounds=6)
    assert LogCleaner().clean_once(leader, T0).cleaned
    follower = open_log(log_dir.with_name("follower-0"), opened, config())
    offset = 0
    while offset < leader.log_end_offset:  # bounded: the follower's end grows each round
        data = leader.read(offset, 1 << 20, whole_batches=True)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    assert read_all(follower)[0] == read_all(leader)[0]
    strict = open_log(log_dir.with_name("strict-0"), opened, config(cleanup_policy="delete"))
    with pytest.raises(Exception, match="log end"):
        strict.append_as_follower(leader.read(5, 1 << 20, whole_batches=True))


def test_compacted_log_rolls_by_max_compaction_lag(log_dir: Path, opened: list[Log]) -> None:
    """On a compacted log the active segment rolls after min(segment.ms,
    max.compaction.lag.ms), so the cleaner can honour the maximum lag (Kafka's
    maxSegmentMs); segment.ms alone otherwise."""
    cfg = config(segment_bytes=1 << 20, max_compaction_lag_ms=1000)
    assert cfg.max_segment_ms == 1000
    assert config(cleanup_policy="delete", max_compaction_lag_ms=1000).max_segment_ms == (
        LogConfig().segment_ms
    )
    log = open_log(log_dir, opened, cfg)
    produce(log, [(b"k", b"1")], ts=T0)
    produce(log, [(b"k", b"2")], ts=T0 + 999)
    assert log.segment_count == 1
    produce(log, [(b"k", b"3")], ts=T0 + 1001)
    assert log.segment_count == 2


def test_cleaner_checkpoint_file_is_kafkas_format_shared_by_a_directory(
    tmp_path: Path, opened: list[Log]
) -> None:
    """One cleaner-offset-checkpoint per log directory, Kafka's text format (version,
    count, ``topic partition offset`` lines, sorted); truncation lowers an entry above
    the new end, forget drops it; a torn or malformed file reads as empty (every log is
    then cleaned from its start)."""
    data = tmp_path / "data"
    cleaner = LogCleaner()
    logs = []
    for name in ("orders-1", "orders-0", "users-12"):
        log = open_log(data / name, opened, config())
        fill(log, keys=3, rounds=5)
        assert cleaner.clean_once(log, T0).cleaned
        logs.append(log)
    text = (data / CLEANER_OFFSET_CHECKPOINT).read_text()
    lines = text.splitlines()
    assert lines[:2] == ["0", "3"]
    assert [line.rsplit(" ", 1)[0] for line in lines[2:]] == [
        "orders 0",
        "orders 1",
        "users 12",
    ]
    end = read_cleaner_checkpoint(data)[("orders", 1)]
    cleaner.truncate_checkpoint(logs[0], end - 1)
    assert read_cleaner_checkpoint(data)[("orders", 1)] == end - 1
    cleaner.truncate_checkpoint(logs[0], end + 5)  # above: unchanged
    assert read_cleaner_checkpoint(data)[("orders", 1)] == end - 1
    cleaner.forget(data / "users-12")
    assert set(read_cleaner_checkpoint(data)) == {("orders", 0), ("orders", 1)}
    (data / CLEANER_OFFSET_CHECKPOINT).write_text(text[:-3])
    assert read_cleaner_checkpoint(data) == {}
    assert cleaner.first_dirty_offset(logs[1]) == logs[1].log_start_offset


# ---------------------------------------------------------------------------- crashes


def _crash_at(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    class CrashError(Exception):
        pass

    def hook(name: str) -> None:
        if name.startswith(step):
            raise CrashError(name)

    monkeypatch.setattr(cleaner_module, "_crash_point", hook)


@pytest.mark.parametrize(
    "step",
    ["append to .cleaned", "rename", "unlink", "fsync dir after delete", "fsync dir after final"],
)
def test_crash_at_a_named_step_recovers_on_open(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A crash before the commit point leaves .cleaned files that open deletes; after
    it, a .swap that open completes. Either way every key reads its latest value at its
    original offset and the log end is unchanged."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=4, rounds=5)
    leo = log.log_end_offset
    _crash_at(monkeypatch, step)
    with pytest.raises(Exception, match=step.split(maxsplit=1)[0]):
        LogCleaner().clean_once(log, T0)
    log._close_files()  # kill -9: no flush, no marker
    opened.remove(log)
    monkeypatch.undo()
    log = open_log(log_dir, opened, config())
    after = read_all(log)[0]
    assert log.log_end_offset == leo
    original = {row[0]: row for row in before}
    assert all(original[row[0]] == row for row in after)
    assert latest_by_key(after) == latest_by_key(before)
    assert not [p for p in os.listdir(log_dir) if p.endswith((".cleaned", ".swap", ".deleted"))]


_KILL_CHILD = """
import os, signal, sys
from pathlib import Path
from raftka.storage import Log, LogConfig
from raftka.storage import cleaner
steps = 0
def kill_at(name):
    global steps
    steps += 1
    if steps == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
cleaner._crash_point = kill_at
cfg = LogConfig(segment_bytes=700, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                index_interval_bytes=100)
log = Log.open(Path(sys.argv[1]), cfg)
log.update_high_watermark(log.log_end_offset)
cleaner.LogCleaner().clean_once(log, %d)
print("finished", steps)
"""


def test_real_kill_9_of_a_cleaning_process_recovers(log_dir: Path, opened: list[Log]) -> None:
    """The same check as the property test with a real SIGKILL: a child process opens
    the log and cleans it, killing itself at step N of the pass (early, around the
    commit point, late); the parent reopens the directory and finds every key's latest
    value at its original offset, the log end unchanged and no temporary file left."""
    import subprocess
    import sys

    log = open_log(log_dir, opened, config())
    before = fill(log, keys=4, rounds=5)
    leo = log.log_end_offset
    log.close()
    opened.remove(log)
    original = {row[0]: row for row in before}
    for step in (2, 12, 20, 10_000):
        child = subprocess.run(
            [sys.executable, "-c", _KILL_CHILD % T0, str(log_dir), str(step)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert child.returncode == (0 if step == 10_000 else -9), child.stderr
        log = open_log(log_dir, opened, config())
        after = read_all(log)[0]
        assert log.log_end_offset == leo
        assert all(original[row[0]] == row for row in after)
        assert latest_by_key(after) == latest_by_key(before)
        assert not [p for p in os.listdir(log_dir) if p.endswith((".cleaned", ".swap"))]
        log.close()
        opened.remove(log)
    assert child.returncode == 0 and "finished" in child.stdout  # the last pass completes


# ---------------------------------------------------------------------------- dump-log


def test_dump_log_shows_checkpoint_and_offset_gaps(log_dir: Path, opened: list[Log]) -> None:
    """dump-log prints the cleaner checkpoint of the partition and each offset gap the
    cleaner left, in text and JSON."""
    log = open_log(log_dir, opened, config())
    fill(log, keys=3, rounds=5)
    stats = LogCleaner().clean_once(log, T0)
    assert stats.cleaned
    assert (log_dir.parent / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[2] == (
        f"compacted 0 {stats.end_offset}"
    )
    first_segment = log_dir / f"{0:020d}.log"
    out = CliRunner().invoke(dump_log_command, [str(first_segment), "--print-data"])
    assert out.exit_code == 0, out.output
    assert f"Cleaner checkpoint (first dirty offset): {stats.end_offset}" in out.output
    assert "Gap: offsets" in out.output
    out = CliRunner().invoke(dump_log_command, [str(first_segment), "--json"])
    assert '"gap"' in out.output and '"cleaner_checkpoint"' in out.output
    assert sum(1 for _ in iter_batches(first_segment.read_bytes())) > 0


# ------------------------------------------------------------------- beside the owner
# A pass runs on its own thread and takes the log (here: a lock the test also takes)
# only for its start, each swap and the checkpoint. It is stopped once its first group's
# .cleaned file is written (before its swap, outside every exclusive step), while the
# test changes the log.

_T = TypeVar("_T")


class _PausedPass:
    """``LogCleaner.clean_once`` on a thread, stopped before the fsync of its first
    group's ``.cleaned`` file (nothing swapped yet) until :meth:`resume`."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        log: Log,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.reached = threading.Event()
        self._go = threading.Event()
        self._result: list[CleanerStats] = []

        def point(step: str) -> None:
            if step == "fsync .cleaned" and not self.reached.is_set():
                self.reached.set()
                assert self._go.wait(10), "the test never resumed the pass"

        monkeypatch.setattr(cleaner_module, "_crash_point", point)

        def exclusive(step: Callable[[], _T]) -> _T:
            with self.lock:
                return step()

        def run() -> None:
            stats = LogCleaner().clean_once(
                log, T0, exclusive=exclusive, stop_requested=stop_requested
            )
            self._result.append(stats)

        self._thread = threading.Thread(target=run, name="cleaner-test")
        self._thread.start()
        assert self.reached.wait(10), "the pass never reached its rewrite"

    def resume(self) -> CleanerStats:
        self._go.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the pass did not end"
        assert self._result, "the pass raised (see the thread's traceback)"
        return self._result[0]


def _strays(log_dir: Path) -> list[str]:
    return [n for n in os.listdir(log_dir) if n.endswith((".cleaned", ".swap", ".deleted"))]


def _reopened(log: Log, log_dir: Path, opened: list[Log]) -> list[Row]:
    """The records of ``log`` as a fresh open (recovery included) reads them."""
    log.close()
    return read_all(open_log(log_dir, opened, log.config))[0]


def test_appends_rolls_and_reads_go_on_during_a_pass(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the pass rewrites, the owner appends (rolling new segments above the
    range) and reads: the appends land at the log end and the pass still swaps in."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    paused = _PausedPass(monkeypatch, log)
    with paused.lock:
        end = log.log_end_offset
        for r in range(4):
            produce(log, [(b"k0", b"during-%d" % r)], ts=T0 + 10)
            log.roll()
        during = read_all(log)[0]
    assert during == before + [(end + r, b"k0", b"during-%d" % r) for r in range(4)]
    stats = paused.resume()
    assert stats.cleaned and not stats.aborted, stats.reason
    after = read_all(log)[0]
    assert latest_by_key(after) == latest_by_key(during)
    assert after[-4:] == during[-4:]
    assert len(after) < len(during), "superseded records went"
    assert _strays(log_dir) == []
    assert _reopened(log, log_dir, opened) == after


def test_a_truncation_below_the_cleaned_range_aborts_the_pass(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower truncating into the segments being cleaned: the pass aborts before
    its swap, its .cleaned files go, and the log holds every offset below the cut."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    paused = _PausedPass(monkeypatch, log)
    with paused.lock:
        cut = log.segment_base_offsets[2] + 1
        log.truncate_to(cut)
    stats = paused.resume()
    assert stats.aborted and not stats.cleaned
    assert "truncated" in stats.reason, stats.reason
    kept = [row for row in before if row[0] < cut]
    assert read_all(log)[0] == kept
    assert _strays(log_dir) == []
    assert read_cleaner_checkpoint(log_dir.parent) == {}, "no progress recorded"
    assert _reopened(log, log_dir, opened) == kept


def test_retention_deleting_segments_being_cleaned_aborts_the_pass(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords then retention delete segments the pass is rewriting: the swap
    finds them gone and aborts; nothing deleted comes back."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    paused = _PausedPass(monkeypatch, log)
    with paused.lock:
        start = log.segment_base_offsets[2]
        assert log.maybe_increment_log_start_offset(start)
        assert log.delete_retention_segments() == 2
    stats = paused.resume()
    assert stats.aborted and "deleted" in stats.reason, stats.reason
    kept = [row for row in before if row[0] >= start]
    assert read_all(log)[0] == kept
    assert _strays(log_dir) == []
    assert _reopened(log, log_dir, opened) == kept


def test_delete_records_alone_does_not_stop_a_pass(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords moves the log start inside the range (segments stay until
    retention): the pass swaps in and the log start holds."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    paused = _PausedPass(monkeypatch, log)
    with paused.lock:
        start = log.segment_base_offsets[1] + 1
        assert log.maybe_increment_log_start_offset(start)
    stats = paused.resume()
    assert stats.cleaned, stats.reason
    assert log.log_start_offset == start
    after = read_all(log)[0]
    assert all(row[0] >= start for row in after)
    assert latest_by_key(after) == latest_by_key([row for row in before if row[0] >= start])


def test_a_change_to_cleanup_policy_delete_lets_the_pass_finish(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """cleanup.policy changed to delete during a pass: the pass finishes with the
    settings it started with (its output is a valid log under either policy); the next
    pass skips the log."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    paused = _PausedPass(monkeypatch, log)
    with paused.lock:
        log.reconfigure(config(cleanup_policy="delete"))
    stats = paused.resume()
    assert stats.cleaned, stats.reason
    assert latest_by_key(read_all(log)[0]) == latest_by_key(before)
    assert not LogCleaner().clean_once(log, T0).cleaned


def test_a_stop_request_aborts_the_pass_and_removes_its_files(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner asks the pass to stop (a partition being deleted): it stops at the
    next batch, removes its .cleaned files and leaves the log as it was."""
    log = open_log(log_dir, opened, config())
    before = fill(log, keys=5, rounds=6)
    stop = threading.Event()
    paused = _PausedPass(monkeypatch, log, stop_requested=stop.is_set)
    stop.set()
    stats = paused.resume()
    assert stats.aborted and "stopping" in stats.reason, stats.reason
    assert read_all(log)[0] == before
    assert _strays(log_dir) == []


class _KilledError(Exception):
    pass


def test_kill_at_any_step_of_a_pass_beside_appends_leaves_a_valid_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass during which the owner appends and rolls (at its first step, before any
    swap), killed at each of its steps in turn: the log opens with every appended
    record at its offset, every key's latest value, and no .cleaned/.swap left."""
    saved = cleaner_module._crash_point
    # A kill here loses no page cache, so fsyncs change nothing but the test's time.
    monkeypatch.setattr(os, "fsync", lambda fd: None)

    def run(crash_step: int) -> int:
        path = tmp_path / f"kill{crash_step}" / "compacted-0"
        log = Log.open(path, config(), clock_ms=Clock())
        before = fill(log, keys=5, rounds=6)
        appended: list[Row] = []
        steps = 0

        def point(step: str) -> None:
            nonlocal steps
            steps += 1
            if steps == 1:  # the owner's appends, beside the pass
                for r in range(3):
                    offset = produce(log, [(b"k1", b"late-%d" % r)], ts=T0 + 10)
                    appended.append((offset, b"k1", b"late-%d" % r))
                    log.roll()
            if steps == crash_step:
                raise _KilledError(step)

        cleaner_module._crash_point = point
        try:
            LogCleaner().clean_once(log, T0)
        except _KilledError:
            pass
        finally:
            cleaner_module._crash_point = saved
        log._close_files()  # kill -9: nothing flushed, no checkpoints, no marker
        reopened = Log.open(path, config(), clock_ms=Clock())
        try:
            rows = read_all(reopened)[0]
            assert latest_by_key(rows) == latest_by_key(before + appended), crash_step
            assert rows[-3:] == appended, crash_step
            assert _strays(path) == [], crash_step
        finally:
            reopened.close()
        return steps

    total = run(0)  # no kill: how many steps a pass has
    assert total > 5
    for crash_step in range(1, total + 1):
        run(crash_step)


def _log_with_aborts(log_dir: Path, opened: list[Log]) -> tuple[Log, list[AbortedTxn]]:
    """Aborted transactions in several segments, their .txnindex entries appended as
    the partition does after each ABORT marker."""
    log = open_log(log_dir, opened, config(segment_bytes=400))
    entries = []
    for pid in (21, 22, 23):
        first = produce_txn(log, [(b"k", b"aborted%d" % pid)], producer_id=pid)
        end_txn(log, pid, ControlRecordType.ABORT)
        entry = AbortedTxn(pid, first, log.log_end_offset - 1, log.log_end_offset)
        log.append_aborted_txn(entry)
        entries.append(entry)
        for i in range(3):
            produce(log, [(b"f%d" % i, b"filler" * 20)])
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    # Room for the cleaner to merge the small segments: entries of several old segments
    # then land in one cleaned segment.
    log.reconfigure(config(segment_bytes=4_000))
    return log, entries


def _aborted(log: Log) -> list[tuple[int, int]]:
    return [(a.producer_id, a.first_offset) for a in log.collect_aborted(0, log.log_end_offset)]


def test_cleaned_segments_keep_the_aborted_transaction_index(
    log_dir: Path, opened: list[Log]
) -> None:
    """The cleaner removes aborted records but keeps markers, so the .txnindex entries
    go with the cleaned segment: a read_committed fetch gets the same aborted list."""
    log, entries = _log_with_aborts(log_dir, opened)
    before = _aborted(log)
    assert before == [(e.producer_id, e.first_offset) for e in entries]
    segments_before = log.segment_count
    stats = LogCleaner().clean_once(log, T0)
    assert stats.cleaned, stats.reason
    assert log.segment_count < segments_before
    assert _aborted(log) == before
    log.close()
    opened.remove(log)
    log = open_log(log_dir, opened, config(segment_bytes=4_000))
    assert _aborted(log) == before


@pytest.mark.parametrize("step", ["rename", "unlink", "fsync dir after delete"])
def test_a_crash_mid_swap_keeps_the_aborted_transaction_index(
    log_dir: Path, opened: list[Log], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    log, _ = _log_with_aborts(log_dir, opened)
    before = _aborted(log)
    _crash_at(monkeypatch, step)
    with pytest.raises(Exception, match=step.split(maxsplit=1)[0]):
        LogCleaner().clean_once(log, T0)
    log._close_files()
    opened.remove(log)
    monkeypatch.undo()
    log = open_log(log_dir, opened, config(segment_bytes=4_000))
    assert _aborted(log) == before
    assert not [p for p in os.listdir(log_dir) if p.endswith((".cleaned", ".swap", ".deleted"))]


# ------------------------------------------------------------ transaction markers


def _markers(log: Log) -> dict[int, BatchHeader]:
    """Marker offset -> its header, as Log.read returns them."""
    return {h.base_offset: h for h in read_all(log)[1] if h.is_control}


def _dirty_again(log: Log) -> None:
    """A record in a new segment, then a roll: the next pass has a dirty segment."""
    produce(log, [(b"filler", b"f" * 300)])
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def test_markers_go_after_their_transaction_and_delete_retention(
    log_dir: Path, opened: list[Log]
) -> None:
    """Kafka's rule (LogCleaner, KIP-534): a marker whose transaction has no batch left
    is stamped with a delete horizon (now + delete.retention.ms) by the pass that finds
    it so, stays until a pass at or past that horizon, then goes, and an aborted
    transaction's .txnindex entry goes with its data. A marker whose transaction keeps
    a record stays whatever the time."""
    retention = 1000
    log = open_log(log_dir, opened, config(segment_bytes=400, delete_retention_ms=retention))
    aborted_first = produce_txn(log, [(b"a", b"aborted")], producer_id=9)
    end_txn(log, 9, ControlRecordType.ABORT)
    abort_at = log.log_end_offset - 1
    log.append_aborted_txn(AbortedTxn(9, aborted_first, abort_at, log.log_end_offset))
    produce_txn(log, [(b"b", b"b-old")], producer_id=11)
    end_txn(log, 11, ControlRecordType.COMMIT)
    commit_gone_at = log.log_end_offset - 1
    kept_txn = produce_txn(log, [(b"c", b"c-latest")], producer_id=12)
    end_txn(log, 12, ControlRecordType.COMMIT)
    commit_kept_at = log.log_end_offset - 1
    produce(log, [(b"b", b"b-new")])  # supersedes the first commit's only record
    _dirty_again(log)
    assert set(_markers(log)) == {abort_at, commit_gone_at, commit_kept_at}
    assert _aborted(log) == [(9, aborted_first)]

    cleaner = LogCleaner()
    stats = cleaner.clean_once(log, T0, active_producers={})
    assert stats.cleaned, stats.reason
    assert stats.marker_horizons_set == 2 and stats.markers_removed == 0
    markers = _markers(log)
    assert set(markers) == {abort_at, commit_gone_at, commit_kept_at}
    for at in (abort_at, commit_gone_at):
        assert cleaner_module.delete_horizon_ms(markers[at]) == T0 + retention
        assert markers[at].max_timestamp == T0, "the marker's own time is unchanged"
    assert cleaner_module.delete_horizon_ms(markers[commit_kept_at]) is None
    assert _aborted(log) == [], "no aborted record left: its entry went with it"
    assert (kept_txn, b"c", b"c-latest") in read_all(log)[0]
    # A stamped marker is a valid batch to recovery (kill -9, then the CRC scan).
    log._close_files()
    opened.remove(log)
    log = open_log(log_dir, opened, config(segment_bytes=400, delete_retention_ms=retention))
    assert _markers(log) == markers and _aborted(log) == []

    # Before the horizon the markers stay, a pass later still.
    _dirty_again(log)
    stats = cleaner.clean_once(log, T0 + retention - 1, active_producers={})
    assert stats.cleaned and stats.markers_removed == 0 and stats.marker_horizons_set == 0
    assert set(_markers(log)) == {abort_at, commit_gone_at, commit_kept_at}

    # At the horizon they go; the one whose transaction keeps a record stays.
    _dirty_again(log)
    stats = cleaner.clean_once(log, T0 + retention, active_producers={})
    assert stats.cleaned and stats.markers_removed == 2
    assert set(_markers(log)) == {commit_kept_at}
    assert (kept_txn, b"c", b"c-latest") in read_all(log)[0]

    # Reopened (recovery replays the log): same markers, no aborted transaction.
    log.close()
    opened.remove(log)
    log = open_log(log_dir, opened, config(segment_bytes=400, delete_retention_ms=retention))
    assert set(_markers(log)) == {commit_kept_at} and _aborted(log) == []


def test_a_marker_holding_its_producers_state_or_with_unknown_producers_stays(
    log_dir: Path, opened: list[Log]
) -> None:
    """A marker the broker names as its producer's last batch (its epoch bump emptied
    the producer's batches) stays: producer state rebuilt from the log needs its
    epoch. Without ``active_producers`` every emptied producer batch keeps its header,
    so every transaction keeps a batch and every marker stays."""
    log = open_log(log_dir, opened, config(segment_bytes=400, delete_retention_ms=0))
    produce_txn(log, [(b"a", b"1")], producer_id=7)
    end_txn(log, 7, ControlRecordType.COMMIT)
    marker_at = log.log_end_offset - 1
    produce(log, [(b"a", b"2")])
    _dirty_again(log)
    cleaner = LogCleaner()
    for now in (T0, T0 + 1):
        _dirty_again(log)
        stats = cleaner.clean_once(log, now, active_producers={7: marker_at})
        assert stats.cleaned and stats.markers_removed == 0 and stats.marker_horizons_set == 0
    assert marker_at in _markers(log)
    for now in (T0 + 2, T0 + 3):
        _dirty_again(log)
        cleaner.clean_once(log, now)
    assert marker_at in _markers(log)
    # Once the producer moved on (the broker names no batch of it), the marker goes.
    for now in (T0 + 4, T0 + 5):
        _dirty_again(log)
        cleaner.clean_once(log, now, active_producers={})
    assert marker_at not in _markers(log)
    assert not [h for h in read_all(log)[1] if h.producer_id == 7], "stale header removed"


def test_a_removed_abort_markers_entry_never_hides_its_producers_later_commit(
    log_dir: Path, opened: list[Log]
) -> None:
    """The .txnindex entry of an aborted transaction goes with its data: left behind
    after its marker went, it would make a read_committed reader drop every later
    transaction of the same producer (nothing would end the abort)."""
    log = open_log(log_dir, opened, config(segment_bytes=400, delete_retention_ms=0))
    first = produce_txn(log, [(b"a", b"aborted")], producer_id=9)
    end_txn(log, 9, ControlRecordType.ABORT)
    log.append_aborted_txn(AbortedTxn(9, first, log.log_end_offset - 1, log.log_end_offset))
    committed = produce(
        log,
        [(b"b", b"committed")],
        producer_id=9,
        producer_epoch=0,
        base_sequence=1,
        is_transactional=True,
    )
    end_txn(log, 9, ControlRecordType.COMMIT)
    cleaner = LogCleaner()
    for now in (T0, T0 + 1):
        _dirty_again(log)
        cleaner.clean_once(log, now, active_producers={})
    assert len(_markers(log)) == 1, "the abort marker went, the commit marker stays"
    batches = [b for b, _ in log_batches(log)]
    result = filter_read_committed(
        batches, log.collect_aborted(0, log.log_end_offset), fetch_offset=0
    )
    assert (committed, b"b", b"committed") in [(r.offset, r.key, r.value) for r in result.records]
