"""Unit tests for the segment log (raftka.storage): config, checkpoints, indexes,
epoch cache, segments and the Log API. Real files under tmp_path; time is injected."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from raftka.common.errors import (
    CorruptMessageError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from raftka.common.record.batch import Record, build_batch, decode_batch
from raftka.common.record.header import TimestampType, crc_valid, iter_batches, peek_batch_size
from raftka.storage import (
    Log,
    LogConfig,
    UnexpectedAppendOffsetError,
)
from raftka.storage import log as log_module
from raftka.storage import segment as segment_module
from raftka.storage.checkpoint import read_checkpoint, write_checkpoint
from raftka.storage.epoch_cache import LeaderEpochFileCache
from raftka.storage.index import OffsetIndex, TimeIndex


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(n: int = 1, ts: int = 1_000_000, size: int = 10, base: int = 0, epoch: int = -1) -> bytes:
    return build_batch(
        [Record(b"v" * size, timestamp_ms=ts + i) for i in range(n)],
        base_offset=base,
        partition_leader_epoch=epoch,
    )


def offsets(data: bytes) -> list[tuple[int, int]]:
    """(base, last) of every batch; raises on a partial batch (iter_batches is strict)."""
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def whole(data: bytes) -> bytes:
    """The whole batches at the front of a read: what a consumer keeps when a fetch
    ends in a partial batch."""
    pos = 0
    while (size := peek_batch_size(data, pos)) is not None and pos + size <= len(data):
        pos += size
    return data[:pos]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> Iterator[object]:
    logs: list[Log] = []

    def _open(**props: str | int) -> Log:
        cfg = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
        log = Log.open(tmp_path / "topic-0", cfg, clock_ms=clock)
        logs.append(log)
        return log

    yield _open
    for log in logs:
        log.close()


# ------------------------------------------------------------------------ config


def test_config_defaults_are_kafkas() -> None:
    """LogConfig() carries Kafka's topic-level defaults."""
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == 604_800_000
    assert c.segment_index_bytes == 10 << 20
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604_800_000
    assert c.retention_bytes == -1
    assert c.flush_messages == c.flush_ms == 2**63 - 1
    assert c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime"
    assert c.file_delete_delay_ms == 60_000


def test_config_from_properties_parses_and_rejects() -> None:
    """Dotted names with str or int values parse; bad values and unknown keys raise
    InvalidConfigError naming the key; other layers' topic keys are ignored."""
    c = LogConfig.from_properties(
        {"segment.bytes": "2048", "retention.ms": -1, "min.insync.replicas": "2"}
    )
    assert (c.segment_bytes, c.retention_ms) == (2048, -1)
    assert LogConfig.from_properties(c.to_properties()) == c
    for props in (
        {"segment.bytes": "abc"},
        {"segment.bytes": 1},
        {"retention.ms": -2},
        {"flush.messages": 0},
        {"message.timestamp.type": "Whenever"},
        {"cleanup.policy": "shred"},
        {"segment.bites": 1},
    ):
        key = next(iter(props))
        with pytest.raises(InvalidConfigError, match=key.split(".")[0]):
            LogConfig.from_properties(props)


# ------------------------------------------------------------------- checkpoints


def test_checkpoint_roundtrip_and_garbage(tmp_path: Path) -> None:
    """write_checkpoint produces Kafka's text format and leaves no temp file;
    read_checkpoint returns None for missing, torn or malformed files."""
    p = tmp_path / "ck"
    write_checkpoint(p, 0, [[1, 5], [3, 9]])
    assert p.read_text() == "0\n2\n1 5\n3 9\n"
    assert not (tmp_path / "ck.tmp").exists()
    assert read_checkpoint(p, 0, 2) == [[1, 5], [3, 9]]
    assert read_checkpoint(tmp_path / "none", 0, 2) is None
    for bad in ("0\n2\n1 5\n", "0\n1\n1 5", "1\n0\n", "0\nx\n", "0\n1\n1\n"):
        p.write_text(bad)
        assert read_checkpoint(p, 0, 2) is None, bad


# ------------------------------------------------------------------------ indexes


def test_offset_index_lookup_truncate_and_reload(tmp_path: Path) -> None:
    """The sparse offset index finds the greatest entry <= target, truncates, persists
    big-endian entries, and rejects a file that fails the sanity check."""
    idx = OffsetIndex(tmp_path / "x.index", 100, 1024)
    assert idx.lookup(150) == (100, 0)
    for rel, pos in ((4, 0), (9, 500), (20, 1200)):
        idx.append(100 + rel, pos)
    assert idx.lookup(103) == (100, 0)
    assert idx.lookup(109) == (109, 500)
    assert idx.lookup(119) == (109, 500)
    assert idx.lookup(10_000) == (120, 1200)
    idx.flush()
    assert (tmp_path / "x.index").read_bytes()[:8] == bytes.fromhex("0000000400000000")
    again = OffsetIndex(tmp_path / "x.index", 100, 1024)
    assert again.load(segment_size=2000) and again.lookup(119) == (109, 500)
    assert not OffsetIndex(tmp_path / "x.index", 100, 1024).load(segment_size=1000)
    idx.truncate_to_offset(109)
    idx.flush()
    assert len(idx) == 1 and (tmp_path / "x.index").stat().st_size == 8
    full = OffsetIndex(tmp_path / "y.index", 0, 16)
    full.append(1, 1)
    full.append(2, 2)
    assert full.is_full


def test_time_index_monotonic_lookup(tmp_path: Path) -> None:
    """The time index keeps only growing timestamps and lookup_below finds the greatest
    entry strictly below a timestamp."""
    t = TimeIndex(tmp_path / "x.timeindex", 0, 1200)
    t.maybe_append(10, 3)
    t.maybe_append(10, 5)  # not larger: ignored
    t.maybe_append(30, 8)
    assert len(t) == 2
    assert t.lookup_below(10) is None
    assert t.lookup_below(11) == 3
    assert t.lookup_below(31) == 8
    t.flush()
    u = TimeIndex(tmp_path / "x.timeindex", 0, 1200)
    assert u.load() and u.last_entry() == (30, 8)


# --------------------------------------------------------------------- epoch cache


def test_epoch_cache_assign_end_offset_and_truncation(tmp_path: Path) -> None:
    """assign keeps epochs and start offsets monotonic; end_offset_for answers as
    Kafka's OffsetsForLeaderEpoch; truncation at both ends; the checkpoint round-trips."""
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochFileCache(path)
    assert c.end_offset_for(0, 0) == (-1, -1)
    c.assign(1, 0)
    c.assign(1, 5)  # same epoch later: no-op
    c.assign(3, 10)
    c.assign(5, 20)
    assert c.entries() == [(1, 0), (3, 10), (5, 20)]
    assert path.read_text() == "0\n3\n1 0\n3 10\n5 20\n"
    assert c.end_offset_for(5, 30) == (5, 30)
    assert c.end_offset_for(3, 30) == (3, 20)
    assert c.end_offset_for(4, 30) == (3, 20)  # unknown epoch: the floor epoch
    assert c.end_offset_for(0, 30) == (0, 0)
    assert c.end_offset_for(6, 30) == (-1, -1)
    assert c.end_offset_for(-1, 30) == (-1, -1)
    loaded, ok = LeaderEpochFileCache.load(path)
    assert ok and loaded.entries() == c.entries()
    c.truncate_from_start(12)
    assert c.entries() == [(3, 12), (5, 20)]
    c.truncate_from_end(20)
    assert c.entries() == [(3, 12)]
    c.assign(4, 11)  # conflicts with (3, 12): replaced
    assert c.entries() == [(4, 11)]
    path.write_text("0\n2\n5 1\n3 2\n")  # not monotonic
    assert LeaderEpochFileCache.load(path)[1] is False


# ------------------------------------------------------------------------ log API


def test_append_as_leader_assigns_offsets_and_epochs(open_log: object) -> None:
    """Leader appends stamp contiguous offsets and the leader epoch, update the epoch
    cache, and read returns the stored batches whole and valid."""
    log = open_log()  # type: ignore[operator]
    a = log.append_as_leader(batch(3, base=77), leader_epoch=2)
    b = log.append_as_leader(batch(2) + batch(4), leader_epoch=4)
    assert (a.first_offset, a.last_offset, a.records_count) == (0, 2, 3)
    assert (b.first_offset, b.last_offset, b.batch_count) == (3, 8, 2)
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20)
    assert offsets(data) == [(0, 2), (3, 4), (5, 8)]
    assert [h.partition_leader_epoch for _, h in iter_batches(data)] == [2, 4, 4]
    assert log.leader_epoch_cache.entries() == [(2, 0), (4, 3)]
    assert log.end_offset_for_epoch(2) == (2, 3)
    assert log.end_offset_for_epoch(4) == (4, 9)
    with pytest.raises(FencedLeaderEpochError):
        log.append_as_leader(batch(), leader_epoch=3)


def test_bad_batches_append_nothing(open_log: object) -> None:
    """A bad CRC in any batch of a request, a torn batch, or a batch over
    max.message.bytes raises and leaves the log exactly as it was."""
    log = open_log(max_message_bytes=500)  # type: ignore[operator]
    log.append_as_leader(batch(), 0)
    before = (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20))
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(batch(1) + bytes(corrupt), 0)
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(batch(1) + batch(1)[:-3], 0)
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(batch(1) + batch(1, size=600), 0)
    assert (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20)) == before


def test_single_batch_requests_are_validated_like_any(open_log: object) -> None:
    """The one-batch fast path of append_as_leader rejects what the general path
    rejects: a bad CRC, a bad magic, a size over max.message.bytes, a record count that
    disagrees with the offset span, a torn batch; each appends nothing."""
    log = open_log(max_message_bytes=500)  # type: ignore[operator]
    log.append_as_leader(batch(), 0)
    before = (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20))
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    bad_magic = bytearray(batch(2))
    bad_magic[16] = 1
    miscounted = bytearray(batch(2))
    miscounted[57:61] = (3).to_bytes(4, "big")  # recordsCount, inside the CRC: re-CRC it
    miscounted[17:21] = crc32c.crc32c(bytes(miscounted[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(bytes(corrupt), 0)
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(bytes(bad_magic), 0)
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(batch(1, size=600), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(bytes(miscounted), 0)
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(batch(2)[:-1], 0)
    assert (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20)) == before
    info = log.append_as_leader(batch(2), 0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (1, 2, 1)


def test_open_rewrites_only_changed_checkpoints(tmp_path: Path, clock: Clock) -> None:
    """Opening a log writes a checkpoint only when a reopen would read something else
    from it: a clean reopen leaves all three files untouched (same inode: a write
    replaces the file), a reopen after a crash rewrites the recovery point (a new inode), and every
    reopen sees the offsets and epochs it should."""
    log = Log.open(tmp_path, LogConfig(), clock_ms=clock)
    log.append_as_leader(batch(3), 2)
    log.close()
    names = [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "leader-epoch-checkpoint",
    ]
    inodes = {n: (tmp_path / n).stat().st_ino for n in names}
    again = Log.open(tmp_path, LogConfig(), clock_ms=clock)
    assert {n: (tmp_path / n).stat().st_ino for n in names} == inodes
    assert (again.log_end_offset, again.recovery_point) == (3, 3)
    again.append_as_leader(batch(2), 2)
    again._close_files()  # crash: the recovery point on disk is still 3
    third = Log.open(tmp_path, LogConfig(), clock_ms=clock)
    assert (third.log_end_offset, third.recovery_point) == (5, 5)
    assert read_checkpoint(tmp_path / names[0], 0, 1) == [[5]]
    assert (tmp_path / names[0]).stat().st_ino != inodes[names[0]]
    assert read_checkpoint(tmp_path / names[1], 0, 1) == [[0]]
    assert third.leader_epoch_cache.entries() == [(2, 0)]
    third.close()


def test_append_as_follower_keeps_offsets(open_log: object) -> None:
    """Follower appends keep the batches' offsets, must start at the log end and be
    contiguous, and feed the epoch cache from the batches' epochs."""
    log = open_log()  # type: ignore[operator]
    log.append_as_follower(batch(2, base=0, epoch=1) + batch(3, base=2, epoch=3))
    assert log.log_end_offset == 5
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 2)]
    with pytest.raises(UnexpectedAppendOffsetError) as err:
        log.append_as_follower(batch(1, base=7, epoch=3))
    assert (err.value.first_offset, err.value.log_end_offset) == (7, 5)
    with pytest.raises(Exception, match="contiguous"):
        log.append_as_follower(batch(1, base=5, epoch=3) + batch(1, base=9, epoch=3))
    assert log.log_end_offset == 5


def test_read_limits(open_log: object) -> None:
    """read starts at the batch holding start_offset and returns it whole; honours
    max_bytes as Kafka's fetch does (a file slice that may end mid-batch) or, with
    whole_batches=True, on batch boundaries; returns a first batch larger than max_bytes
    only with min_one_batch; stops at a batch boundary below max_offset; and raises
    OffsetOutOfRangeError outside [start, end]."""
    log = open_log()  # type: ignore[operator]
    for _ in range(5):
        log.append_as_leader(batch(4, size=50), 0)  # offsets 0-3, 4-7, ...
    one = len(batch(4, size=50))
    everything = log.read(0, 1 << 20)
    assert offsets(log.read(5, 1)) == [(4, 7)]
    assert log.read(5, 1, min_one_batch=False) == b""
    assert offsets(log.read(0, 2 * one + one // 2, whole_batches=True)) == [(0, 3), (4, 7)]
    sliced = log.read(0, 2 * one + one // 2)  # Kafka's semantics: ends mid-batch
    assert sliced == everything[: 2 * one + one // 2]
    assert offsets(whole(sliced)) == [(0, 3), (4, 7)]
    assert log.read(5, one + 10) == everything[one : 2 * one + 10]
    assert offsets(log.read(0, 1 << 20, max_offset=12)) == [(0, 3), (4, 7), (8, 11)]
    assert offsets(log.read(0, 1 << 20, max_offset=11)) == [(0, 3), (4, 7)]
    # max_offset cuts at a batch boundary even where max_bytes would reach further.
    assert offsets(log.read(0, 2 * one + one // 2, max_offset=7)) == [(0, 3)]
    assert log.read(0, one + one // 2, max_offset=12) == everything[: one + one // 2]
    assert log.read(5, 1 << 20, max_offset=7) == b""
    assert log.read(20, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    for _, h in iter_batches(everything):
        assert h.records_count == 4


@pytest.mark.parametrize("interval", [0, 150, 4096])
def test_read_matches_file_slices(open_log: object, interval: int) -> None:
    """For every start offset, several max_bytes, each max_offset and both flags, read
    equals the slice computed from the segment files directly (batch holding the
    offset, max(max_bytes, first batch) bytes within its segment, cut before the first
    batch reaching max_offset, trimmed to whole batches if asked). Dense, sparse and
    default index intervals exercise both the speculative and the walking lookup."""
    log = open_log(segment_bytes=1500, index_interval_bytes=interval)  # type: ignore[operator]
    for i in range(30):
        log.append_as_leader(batch(1 + i % 3, size=10 + 17 * (i % 5)), 0)
    table: list[tuple[int, int, int, bytes]] = []  # base, last, segment index, bytes
    for k, path in enumerate(sorted(log.path.glob("*.log"))):
        data = path.read_bytes()
        table += [
            (h.base_offset, h.last_offset, k, data[p : p + h.size_bytes])
            for p, h in iter_batches(data)
        ]
    assert table[-1][1] == log.log_end_offset - 1 and log.segment_count > 2

    def expected(
        offset: int, max_bytes: int, max_offset: int | None, min_one: bool, trim: bool
    ) -> bytes:
        i = next(i for i, t in enumerate(table) if t[1] >= offset)
        rest = [t for t in table[i:] if t[2] == table[i][2]]
        if max_offset is not None:
            rest = [t for t in rest if t[1] < max_offset]
        if not rest:
            return b""
        if len(rest[0][3]) > max_bytes:
            return rest[0][3] if min_one else b""
        out = b"".join(t[3] for t in rest)[:max_bytes]
        if trim:
            out = whole(out)
        return out

    end = log.log_end_offset
    for offset in range(end):
        for max_bytes in (0, 1, 60, 150, 333, 1 << 20):
            for max_offset in (None, offset + 1, offset + 4, end - 2):
                for min_one, trim in ((True, False), (False, False), (True, True)):
                    got = log.read(
                        offset,
                        max_bytes,
                        max_offset=max_offset,
                        min_one_batch=min_one,
                        whole_batches=trim,
                    )
                    want = expected(offset, max_bytes, max_offset, min_one, trim)
                    assert got == want, (offset, max_bytes, max_offset, min_one, trim)


def test_roll_by_size_time_and_index_and_lookup(open_log: object, clock: Clock) -> None:
    """Segments roll at segment.bytes, at segment.ms after the first batch's timestamp,
    and when an index is full; reads across many segments find the right batch."""
    one = len(batch(1, size=100))
    log = open_log(segment_bytes=3 * one, index_interval_bytes=0)  # type: ignore[operator]
    for _ in range(7):
        log.append_as_leader(batch(1, size=100), 0)
    assert log.segment_base_offsets == [0, 3, 6]
    for off in range(7):
        assert offsets(log.read(off, 1)) == [(off, off)]
    log2_dir = log.path.parent / "t2"
    timed = Log.open(log2_dir, LogConfig(segment_ms=1000), clock_ms=clock)
    timed.append_as_leader(batch(ts=clock.now_ms), 0)
    clock.now_ms += 1000
    timed.append_as_leader(batch(ts=clock.now_ms), 0)
    assert timed.segment_count == 1
    clock.now_ms += 1
    timed.append_as_leader(batch(ts=clock.now_ms), 0)
    assert timed.segment_base_offsets == [0, 2]
    timed.close()
    small = Log.open(
        log.path.parent / "t3",
        LogConfig(segment_index_bytes=24, index_interval_bytes=0),
        clock_ms=clock,
    )
    for i in range(4):
        small.append_as_leader(batch(ts=clock.now_ms + i), 0)
    assert small.segment_count == 2  # 2 time-index entries of 12 bytes fill the index
    small.close()


def test_time_roll_follows_record_timestamps_not_the_wall_clock(
    tmp_path: Path, clock: Clock
) -> None:
    """Kafka's segment.ms rule compares record timestamps: a producer sending old (or
    zero) timestamps does not roll a segment per append however far the wall clock is
    ahead, and a batch whose timestamp is segment.ms past the first batch's rolls even
    if the wall clock has not moved."""
    clock.now_ms = 10**12  # the wall clock is far ahead of every record below
    log = Log.open(tmp_path / "old", LogConfig(segment_ms=1000), clock_ms=clock)
    for _ in range(5):
        log.append_as_leader(batch(ts=0), 0)
    assert log.segment_count == 1
    log.append_as_leader(batch(ts=1000), 0)  # waited exactly segment.ms: no roll
    assert log.segment_count == 1
    log.append_as_leader(batch(ts=1001), 0)
    assert log.segment_base_offsets == [0, 6]
    log.close()


def test_offset_for_timestamp(open_log: object) -> None:
    """offset_for_timestamp returns the first record (in offset order) whose timestamp
    is >= the target, with its timestamp, across segments; None past the largest."""
    log = open_log(segment_bytes=400, index_interval_bytes=0)  # type: ignore[operator]
    for i in range(10):
        log.append_as_leader(batch(3, ts=1000 + 10 * i), 0)  # ts 1000+10i .. +2
    assert log.segment_count > 2
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1001)
    assert log.offset_for_timestamp(1003) == (3, 1010)
    assert log.offset_for_timestamp(1092) == (29, 1092)
    assert log.offset_for_timestamp(1093) is None


def test_truncate_to_and_fully(open_log: object) -> None:
    """truncate_to removes whole batches from the end, deletes later segments, fixes
    the epoch cache and lets appends continue; truncate_fully_and_start_at empties."""
    log = open_log(segment_bytes=300)  # type: ignore[operator]
    for epoch in range(6):
        log.append_as_leader(batch(2, size=80), epoch)
    assert log.segment_count >= 3 and log.log_end_offset == 12
    assert log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.latest_epoch == 2
    assert offsets(log.read(0, 1 << 20))[-1] == (4, 5) or log.read(4, 1 << 20)
    assert not log.truncate_to(100)
    assert log.truncate_to(5)  # inside batch 4-5: the whole batch goes
    assert log.log_end_offset == 4
    info = log.append_as_leader(batch(1), 7)
    assert info.first_offset == 4
    assert log.end_offset_for_epoch(1) == (1, 4)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (50, 50, 1)
    assert log.leader_epoch_cache.entries() == []
    assert log.append_as_leader(batch(), 8).first_offset == 50


def test_retention_by_time_bytes_and_log_start(open_log: object, clock: Clock) -> None:
    """delete_retention_segments removes whole old segments by retention.ms (largest
    timestamp), retention.bytes and the log start, never past the high watermark;
    delete-records moves the log start and reads below it fail."""
    one = len(batch(1, size=100))
    log = open_log(segment_bytes=2 * one, retention_ms=10_000)  # type: ignore[operator]
    for i in range(8):
        log.append_as_leader(batch(1, size=100, ts=clock.now_ms + i), 0)
    assert log.segment_base_offsets == [0, 2, 4, 6]
    clock.now_ms += 20_000
    assert log.delete_retention_segments() == 0  # high watermark still at 0
    log.update_high_watermark(5)
    assert log.delete_retention_segments() == 2  # segments [0,2) and [2,4) end below 5
    assert log.log_start_offset == 4
    log.update_high_watermark(8)
    assert log.delete_retention_segments() == 2  # all: an empty active segment remains
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (8, 8, 1)

    size_log = Log.open(
        log.path.parent / "bytes",
        LogConfig(segment_bytes=2 * one, retention_bytes=3 * one),
        clock_ms=clock,
    )
    for _ in range(8):
        size_log.append_as_leader(batch(1, size=100, ts=clock.now_ms), 0)
    size_log.update_high_watermark(8)
    assert size_log.delete_retention_segments() == 2
    assert size_log.size_bytes == 4 * one
    with pytest.raises(OffsetOutOfRangeError):
        size_log.maybe_increment_log_start_offset(9)
    assert size_log.maybe_increment_log_start_offset(7)
    with pytest.raises(OffsetOutOfRangeError):
        size_log.read(6, 100)
    assert offsets(size_log.read(7, 100)) == [(7, 7)]
    assert size_log.delete_retention_segments() == 1
    assert size_log.segment_base_offsets == [6]
    size_log.close()


def test_flush_policy_and_recovery_point(open_log: object, clock: Clock) -> None:
    """flush.messages and flush.ms trigger flushes that move the recovery point; by
    default nothing flushes until roll or close."""
    log = open_log(flush_messages=3)  # type: ignore[operator]
    log.append_as_leader(batch(2), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0)
    assert log.recovery_point == 3
    log.close()
    timed = Log.open(log.path.parent / "ms", LogConfig(flush_ms=100), clock_ms=clock)
    timed.append_as_leader(batch(), 0)
    assert timed.recovery_point == 0
    clock.now_ms += 100
    assert timed.maybe_flush() and timed.recovery_point == 1
    timed.flush(up_to_offset=0)
    timed.close()


def test_reopen_after_clean_shutdown(tmp_path: Path, clock: Clock) -> None:
    """close() writes the marker and checkpoints; reopening loads segments and
    indexes without recovery and yields the same state."""
    cfg = LogConfig(segment_bytes=500, index_interval_bytes=100)
    log = Log.open(tmp_path, cfg, clock_ms=clock)
    for e in range(10):
        log.append_as_leader(batch(2, size=60, ts=1000 + e), e // 3)
    log.update_high_watermark(20)
    log.maybe_increment_log_start_offset(3)
    before = log.read(3, 1 << 20), log.leader_epoch_cache.entries(), log.segment_base_offsets
    log.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    again = Log.open(tmp_path, cfg, clock_ms=clock)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert (again.log_start_offset, again.log_end_offset, again.recovery_point) == (3, 20, 20)
    after = again.read(3, 1 << 20), again.leader_epoch_cache.entries(), again.segment_base_offsets
    assert after == before
    assert again.offset_for_timestamp(1005) == (9, 1005)  # batch 8-9: ts 1004, 1005
    assert again.append_as_leader(batch(), 3).first_offset == 20
    again.close()


def test_reopen_after_crash_cuts_torn_tail_and_rebuilds(tmp_path: Path) -> None:
    """A crash (no close) with a torn last batch, a missing index and a stale epoch
    checkpoint: open truncates at the torn batch, rebuilds indexes and the epoch cache
    from the surviving batches, and removes stray temp files."""
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=0)
    log = Log.open(tmp_path, cfg)
    for e in range(9):
        log.append_as_leader(batch(1, size=100), e)
    last = sorted(tmp_path.glob("*.log"))[-1]
    base = int(last.stem)
    del log  # crash: nothing flushed or closed beyond what rolls did
    with last.open("r+b") as f:
        f.truncate(last.stat().st_size - 5)
    for p in tmp_path.glob("*.index"):
        p.unlink()
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    for stray in ("00000000000000000000.log.deleted", "x.cleaned", "y.swap"):
        (tmp_path / stray).write_bytes(b"junk")
    again = Log.open(tmp_path, cfg)
    assert again.log_end_offset == 8
    assert again.segment_base_offsets[-1] == base
    assert again.leader_epoch_cache.entries()[-1] == (7, 7)
    assert offsets(again.read(0, 1 << 20))[0] == (0, 0)
    for off in range(8):
        assert offsets(again.read(off, 1)) == [(off, off)]
    assert not list(tmp_path.glob("*.deleted")) and not list(tmp_path.glob("*.swap"))
    again.close()


def test_log_append_time(tmp_path: Path, clock: Clock) -> None:
    """With message.timestamp.type=LogAppendTime the leader stamps the broker time as
    the batch max timestamp with a valid CRC, and timestamp lookups use it."""
    log = Log.open(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    info = log.append_as_leader(batch(2, ts=5), 0)
    assert info.log_append_time_ms == clock.now_ms
    raw = log.read(0, 1 << 20)
    assert crc_valid(raw)
    decoded = decode_batch(raw)
    assert decoded.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert decoded.header.max_timestamp == clock.now_ms
    assert log.offset_for_timestamp(clock.now_ms) == (0, clock.now_ms)
    log.close()


# ------------------------------------------------------------------------- ENOSPC


def test_enospc_injected_leaves_no_partial_batch(
    open_log: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError(ENOSPC) after a partial write at the file layer raises
    KafkaStorageError, leaves the file and log end as before, and once space returns
    the log appends and reads normally."""
    log = open_log()  # type: ignore[operator]
    log.append_as_leader(batch(), 0)
    size_before = log.size_bytes
    real = segment_module.write_all

    def half_then_fail(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        os.pwrite(fd, bytes(data)[: len(data) // 2], position)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module, "write_all", half_then_fail)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch(3), 0)
    assert log.log_end_offset == 1 and log.size_bytes == size_before
    seg_file = sorted(log.path.glob("*.log"))[0]
    assert seg_file.stat().st_size == size_before
    monkeypatch.setattr(segment_module, "write_all", real)
    assert log.append_as_leader(batch(3), 0).first_offset == 1
    assert offsets(log.read(0, 1 << 20)) == [(0, 0), (1, 3)]


def test_enospc_on_small_tmpfs() -> None:
    """On a real 1 MiB tmpfs: fill it until an append fails with KafkaStorageError,
    check nothing partial is visible and recovery agrees, free space, append again."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = Path(tempfile.mkdtemp(prefix="raftka-enospc-"))
    try:
        if subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=False
        ).returncode:
            pytest.skip("mount -t tmpfs failed (no CAP_SYS_ADMIN in this container)")
        try:
            log = Log.open(mnt / "p", LogConfig(segment_bytes=512 * 1024))
            ballast = mnt / "ballast"
            ballast.write_bytes(b"\0" * 200 * 1024)
            big = batch(1, size=50_000)
            with pytest.raises(KafkaStorageError):
                for _ in range(100):
                    log.append_as_leader(big, 0)
            leo, size = log.log_end_offset, log.size_bytes
            assert leo > 0
            assert offsets(log.read(leo - 1, 1 << 30))[-1][1] == leo - 1
            assert sum(p.stat().st_size for p in (mnt / "p").glob("*.log")) == size
            ballast.unlink()
            assert log.append_as_leader(batch(1, size=1000), 0).first_offset == leo
            log._close_files()  # crash: descriptors go, nothing is flushed or checkpointed
            again = Log.open(mnt / "p", LogConfig(segment_bytes=512 * 1024))
            assert again.log_end_offset == leo + 1
            again.close()
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)  # -l: even if a fd lingers
    finally:
        mnt.rmdir()


def test_public_api_pinned() -> None:
    """raftka.storage exports exactly the curated names."""
    import raftka.storage as pkg

    assert sorted(pkg.__all__) == sorted(
        [
            "UNDEFINED_EPOCH",
            "UNDEFINED_EPOCH_OFFSET",
            "LeaderEpochFileCache",
            "Log",
            "LogAppendInfo",
            "LogConfig",
            "OffsetAndTimestamp",
            "UnexpectedAppendOffsetError",
        ]
    )
    assert log_module.Log is pkg.Log
