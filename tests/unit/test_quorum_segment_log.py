"""Unit tests of SegmentRaftLog (the Raft log over the segment log) and snapshot files.

Real files in pytest's tmp_path. Round trips check append/read/truncate/epoch lookups
and control entries, including truncation inside a stored batch; reopening checks
durability, and a simulated crash (the segment file cut back to a size between the
last fsync and the end, the clean-shutdown marker removed) checks that flushed entries
survive and unflushed ones come back as a prefix at most. A seeded random sequence of
operations is checked step by step against InMemoryRaftLog, the reference model.
Snapshot files: write/read, a CRC failure, a torn temp file, the newest valid wins.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from raftka.raft.quorum import Entry, EpochEndOffset, InMemoryRaftLog, SnapshotId
from raftka.raft.quorum.segment_raft_log import SegmentRaftLog
from raftka.raft.quorum.snapshots import (
    HEADER_BYTES,
    SnapshotCorruptError,
    SnapshotStore,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)

CLEAN_MARKER = ".kafka_cleanshutdown"


def entries(first: int, epoch: int, count: int, *, control: bool = False) -> list[Entry]:
    return [Entry(first + i, epoch, f"p{first + i}".encode(), control) for i in range(count)]


def test_append_read_epochs_and_control_entries(tmp_path: Path) -> None:
    """Entries come back exactly (offset, epoch, payload, control); reads start inside
    a batch; end_offset_for_epoch answers from the epoch cache like the model."""
    log = SegmentRaftLog.open(tmp_path)
    written = [*entries(0, 1, 3), Entry(3, 2, b"leader-change", True), *entries(4, 2, 2)]
    written += entries(6, 5, 2)
    log.append(written)
    assert log.end_offset == 8 and log.last_epoch == 5
    assert list(log.read(0, 100)) == written
    assert list(log.read(2, 3)) == written[2:5]
    assert list(log.read(8, 10)) == []
    assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 3)
    assert log.end_offset_for_epoch(3) == EpochEndOffset(2, 6)
    assert log.end_offset_for_epoch(9) == EpochEndOffset(5, 8)
    assert log.end_offset_for_epoch(0) == EpochEndOffset(0, 0)
    log.close()
    reopened = SegmentRaftLog.open(tmp_path)
    assert list(reopened.read(0, 100)) == written  # read from disk, not the tail cache
    assert reopened.end_offset_for_epoch(3) == EpochEndOffset(2, 6)
    reopened.close()


def test_truncate_inside_a_batch_is_exact_and_durable(tmp_path: Path) -> None:
    """Truncating to an offset inside one stored batch keeps the entries below it (the
    segment log would drop the whole batch); they survive a reopen."""
    log = SegmentRaftLog.open(tmp_path)
    log.append(entries(0, 1, 10))  # one batch
    log.flush()
    log.truncate_to(4)
    assert log.end_offset == 4 and log.flushed_end_offset == 4
    assert list(log.read(0, 100)) == entries(0, 1, 4)
    log.append(entries(4, 3, 2))
    assert log.end_offset_for_epoch(2) == EpochEndOffset(1, 4)
    log.truncate_to(4)
    assert log.last_epoch == 1
    log.close()
    reopened = SegmentRaftLog.open(tmp_path)
    assert list(reopened.read(0, 100)) == entries(0, 1, 4)
    reopened.close()


def _crash(directory: Path, log: SegmentRaftLog, keep_bytes: int) -> None:
    """Close, then undo the clean shutdown: cut the segment back and drop the marker."""
    log.close()
    (directory / CLEAN_MARKER).unlink()
    segment = directory / f"{0:020d}.log"
    os.truncate(segment, keep_bytes)


@pytest.mark.parametrize("seed", range(5))
def test_crash_loses_only_unflushed_entries(tmp_path: Path, seed: int) -> None:
    """After a crash, every flushed entry is there; unflushed ones survive as a prefix."""
    rng = random.Random(seed)
    log = SegmentRaftLog.open(tmp_path)
    flushed = entries(0, 1, 7)
    log.append(flushed[:3])
    log.append(flushed[3:])
    log.flush()
    durable_bytes = (tmp_path / f"{0:020d}.log").stat().st_size
    unflushed = entries(7, 2, 5)
    for e in unflushed:
        log.append([e])
    full_bytes = (tmp_path / f"{0:020d}.log").stat().st_size
    _crash(tmp_path, log, rng.randint(durable_bytes, full_bytes))
    reopened = SegmentRaftLog.open(tmp_path)
    got = list(reopened.read(0, 100))
    assert got[:7] == flushed
    assert got[7:] == unflushed[: len(got) - 7]
    assert reopened.end_offset == len(got)
    assert reopened.last_epoch == (2 if len(got) > 7 else 1)
    reopened.append([Entry(len(got), 3, b"after")])  # the log is usable
    reopened.close()


def test_snapshot_create_drops_prefix_and_survives_reopen(tmp_path: Path) -> None:
    """create_snapshot writes the file, moves the log start and keeps the suffix; the
    snapshot answers epoch lookups below the log; a reopen keeps all of it."""
    log = SegmentRaftLog.open(tmp_path)
    log.append(entries(0, 1, 5) + entries(5, 2, 5))
    snapshot_id = log.create_snapshot(6, b"state@6")
    assert snapshot_id == SnapshotId(6, 2)
    assert log.start_offset == 6 and log.end_offset == 10
    assert list(log.read(6, 100)) == entries(6, 2, 4)
    assert log.read_snapshot(snapshot_id, 2, 3) == (b"ate", 7)
    assert log.read_snapshot(SnapshotId(5, 1), 0, 10) is None
    assert log.end_offset_for_epoch(1) == EpochEndOffset(0, 0)
    log.close()
    reopened = SegmentRaftLog.open(tmp_path)
    assert reopened.latest_snapshot_id == snapshot_id
    assert reopened.start_offset == 6 and reopened.end_offset == 10
    assert reopened.read_snapshot_data(snapshot_id) == b"state@6"
    second = reopened.create_snapshot(10, b"state@10")
    assert not (tmp_path / snapshot_file_name(snapshot_id)).exists()  # older one deleted
    assert reopened.last_epoch == 2 and reopened.latest_snapshot_id == second
    assert reopened.end_offset_for_epoch(7) == EpochEndOffset(2, 10)
    reopened.close()


def test_install_snapshot_resets_the_log(tmp_path: Path) -> None:
    """install_snapshot replaces everything: start == end == snapshot end, durably."""
    log = SegmentRaftLog.open(tmp_path)
    log.append(entries(0, 1, 3))
    log.install_snapshot(SnapshotId(50, 4), b"leader-state")
    assert (log.start_offset, log.end_offset, log.last_epoch) == (50, 50, 4)
    assert log.end_offset_for_epoch(4) == EpochEndOffset(4, 50)
    assert log.end_offset_for_epoch(3) == EpochEndOffset(0, 0)
    log.append(entries(50, 5, 2))
    log.close()
    reopened = SegmentRaftLog.open(tmp_path)
    assert (reopened.start_offset, reopened.end_offset) == (50, 52)
    assert reopened.read_snapshot_data(SnapshotId(50, 4)) == b"leader-state"
    reopened.close()


def test_open_reapplies_snapshot_cut_after_a_crash_mid_install(tmp_path: Path) -> None:
    """A snapshot file whose end is above the log start (a crash between the file and
    the log reset) is applied on open: a log that disagrees with it is reset."""
    log = SegmentRaftLog.open(tmp_path)
    log.append(entries(0, 1, 3))
    log.close()
    SnapshotStore(tmp_path).write(SnapshotId(20, 3), b"s")
    reopened = SegmentRaftLog.open(tmp_path)
    assert (reopened.start_offset, reopened.end_offset) == (20, 20)
    reopened.close()


class TestAgainstModel:
    """A seeded random walk of appends, truncations, flushes, snapshots and reopens; after
    each step SegmentRaftLog and InMemoryRaftLog must answer every query alike."""

    @staticmethod
    def check(real: SegmentRaftLog, model: InMemoryRaftLog) -> None:
        assert (real.start_offset, real.end_offset) == (model.start_offset, model.end_offset)
        assert real.last_epoch == model.last_epoch
        assert real.latest_snapshot_id == model.latest_snapshot_id
        assert list(real.read(real.start_offset, 10_000)) == list(model.entries)
        for epoch in range(0, model.last_epoch + 2):
            assert real.end_offset_for_epoch(epoch) == model.end_offset_for_epoch(epoch), epoch

    @pytest.mark.parametrize("seed", range(8))
    def test_random_operations(self, tmp_path: Path, seed: int) -> None:
        rng = random.Random(seed)
        real = SegmentRaftLog.open(tmp_path)
        model = InMemoryRaftLog()
        epoch = 1
        try:
            for _ in range(60):
                op = rng.random()
                if op < 0.5:
                    epoch += rng.random() < 0.3
                    count = rng.randint(1, 6)
                    new = [
                        Entry(
                            model.end_offset + i,
                            epoch,
                            rng.randbytes(rng.randint(0, 20)),
                            rng.random() < 0.1,
                        )
                        for i in range(count)
                    ]
                    real.append(new)
                    model.append(new)
                elif op < 0.7 and model.end_offset > model.start_offset:
                    target = rng.randint(model.start_offset, model.end_offset)
                    real.truncate_to(target)
                    model.truncate_to(target)
                elif op < 0.8:
                    model.flush(real.flush())
                elif op < 0.9 and model.end_offset > model.start_offset:
                    model.flush(real.flush())
                    end = rng.randint(model.start_offset + 1, model.end_offset)
                    data = rng.randbytes(8)
                    assert real.create_snapshot(end, data) == model.create_snapshot(end, data)
                else:
                    real.close()
                    real = SegmentRaftLog.open(tmp_path)  # a clean restart keeps all
                self.check(real, model)
        finally:
            real.close()


def test_snapshot_file_format_and_crc(tmp_path: Path) -> None:
    """Round trip; a flipped data byte or a wrong name fails; header fields checked."""
    raw = encode_snapshot(SnapshotId(7, 2), b"hello")
    assert len(raw) == HEADER_BYTES + 5
    assert decode_snapshot(SnapshotId(7, 2), raw) == b"hello"
    flipped = raw[:-1] + bytes([raw[-1] ^ 1])
    with pytest.raises(SnapshotCorruptError, match="CRC"):
        decode_snapshot(SnapshotId(7, 2), flipped)
    with pytest.raises(SnapshotCorruptError):
        decode_snapshot(SnapshotId(8, 2), raw)
    with pytest.raises(SnapshotCorruptError):
        decode_snapshot(SnapshotId(7, 2), raw[:-2])


def test_newest_valid_snapshot_wins_and_torn_temp_is_ignored(tmp_path: Path) -> None:
    """The newest snapshot whose CRC checks out is loaded; a corrupt newer one and a
    torn temp file (a write that never finished) are ignored; the temp is swept."""
    store = SnapshotStore(tmp_path)
    store.write(SnapshotId(10, 1), b"ten")
    store.write(SnapshotId(20, 2), b"twenty")
    newest = tmp_path / snapshot_file_name(SnapshotId(30, 3))
    newest.write_bytes(encode_snapshot(SnapshotId(30, 3), b"thirty")[:-1] + b"X")
    torn = tmp_path / (snapshot_file_name(SnapshotId(40, 4)) + ".tmp")
    torn.write_bytes(encode_snapshot(SnapshotId(40, 4), b"forty")[:10])
    fresh = SnapshotStore(tmp_path)
    assert fresh.load() == SnapshotId(20, 2)
    assert fresh.read(SnapshotId(20, 2)) == b"twenty"
    assert not torn.exists()
    assert fresh.read_chunk(SnapshotId(20, 2), 3, 100) == (b"nty", 6)
    assert fresh.delete_older_than(SnapshotId(20, 2)) == 1
    assert SnapshotStore(tmp_path / "empty").load() is None
