"""Property tests for the segment log: a state machine against a plain list model, and
recovery from cut or bit-flipped segment files. Files go to /dev/shm when it exists
(tmpfs: rolls fsync, and fsync on a real disk would dominate the run time)."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from raftka.common.record.batch import Record, build_batch
from raftka.common.record.header import crc_valid, iter_batches, peek_batch_size
from raftka.storage import Log, LogConfig

_SHM = Path("/dev/shm")
CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=150, segment_index_bytes=240)


def _tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="raftka-log-", dir=_SHM if _SHM.is_dir() else None))


def _records(count: int, size: int, seed: int) -> list[Record]:
    return [Record(bytes([seed % 256]) * size, timestamp_ms=1000 + seed + i) for i in range(count)]


def _whole_batches(data: bytes) -> list[bytes]:
    """The whole batches of a read, dropping a trailing partial one (as a consumer does)."""
    out, pos = [], 0
    while (size := peek_batch_size(data, pos)) is not None and pos + size <= len(data):
        out.append(data[pos : pos + size])
        pos += size
    return out


def _read_all(log: Log) -> list[bytes]:
    """Every stored batch from the log start to the log end, read in small steps the
    way a consumer fetches: reads may end mid-batch; the next read starts there."""
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 300)
        batches = _whole_batches(data)
        assert batches, f"no whole batch at {offset} below the log end {log.log_end_offset}"
        for raw in batches:
            (_, h), *_ = iter_batches(raw)
            out.append(raw)
            offset = h.next_offset
    return out


class LogMachine(RuleBasedStateMachine):
    """Drives a Log with appends, reads, truncation, rolls, delete-records with
    retention, clean reopen and crash reopen; after each step the log must match a list
    of the batches the model expects (bytes as the leader stamped them)."""

    @initialize()
    def setup(self) -> None:
        self.dir = _tmpdir()
        self.log = Log.open(self.dir, CONFIG, clock_ms=lambda: 5000)
        self.batches: list[tuple[int, int, int, bytes]] = []  # base, last, epoch, bytes
        self.start = 0
        self.epoch = 0
        self.seed = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def leo(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.start

    @rule(
        sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 100)), min_size=1, max_size=3),
        bump=st.integers(0, 2),
    )
    def append(self, sizes: list[tuple[int, int]], bump: int) -> None:
        self.epoch += bump
        request, expected = b"", []
        base = self.leo
        for count, size in sizes:
            self.seed += 1
            recs = _records(count, size, self.seed)
            request += build_batch(recs, base_offset=999)
            expected.append(
                (
                    base,
                    base + count - 1,
                    self.epoch,
                    build_batch(recs, base_offset=base, partition_leader_epoch=self.epoch),
                )
            )
            base += count
        info = self.log.append_as_leader(request, self.epoch)
        assert info.first_offset == expected[0][0]
        self.batches.extend(expected)

    @precondition(lambda self: self.leo > self.start)
    @rule(data=st.data(), max_bytes=st.integers(0, 1000), whole_batches=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, whole_batches: bool) -> None:
        offset = data.draw(st.integers(self.start, self.leo - 1))
        max_offset = data.draw(st.none() | st.integers(offset, self.leo + 1))
        got = self.log.read(offset, max_bytes, max_offset=max_offset, whole_batches=whole_batches)
        first = next(i for i, b in enumerate(self.batches) if b[1] >= offset)
        # Batches readable under max_offset, from the one holding the offset: the read is
        # a prefix of their bytes (a prefix of one segment's, which the model does not
        # track), ending on a batch boundary if asked.
        below = self.batches[first:]
        if max_offset is not None:
            below = [b for b in below if b[1] < max_offset]
        if not below:
            assert got == b""
            return
        want = below[0][3]
        assert got[: len(want)] == want
        assert len(got) <= max(max_bytes, len(want))
        assert got == b"".join(b[3] for b in below)[: len(got)]
        if whole_batches:
            assert b"".join(_whole_batches(got)) == got

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo))
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b[1] < offset]
        if self.leo < self.start:  # the cut batch straddled the log start
            self.batches = []
        if self.batches:
            self.epoch = max(self.epoch, self.batches[-1][2])

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo))
        self.log.update_high_watermark(self.log.log_end_offset)
        self.log.maybe_increment_log_start_offset(offset)
        self.log.delete_retention_segments()
        self.start = offset

    @rule()
    def close_and_reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.dir, CONFIG, clock_ms=lambda: 5000)

    @rule()
    def crash_and_reopen(self) -> None:
        self.log._close_files()  # the process dies: no flush, no checkpoints, no marker
        self.log = Log.open(self.dir, CONFIG, clock_ms=lambda: 5000)

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.start, self.leo)
        visible = [b[3] for b in self.batches if b[1] >= self.start]
        assert _read_all(log) == visible
        live = [b for b in self.batches if b[1] >= self.start]
        if live:
            assert log.latest_epoch == live[-1][2]
            for i, (_, _, epoch, _) in enumerate(live):
                later = [b[0] for b in live[i:] if b[2] > epoch]
                assert log.end_offset_for_epoch(epoch) == (epoch, later[0] if later else self.leo)


LogMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 150)), min_size=1, max_size=25),
    seed=st.integers(0, 2**32 - 1),
    cut=st.booleans(),
    flips=st.integers(0, 4),
)
def test_recovery_yields_valid_prefix(
    specs: list[tuple[int, int]], seed: int, cut: bool, flips: int
) -> None:
    """Write batches, crash, drop the recovery-point checkpoint (so every segment is
    rescanned), then cut one segment file at a random byte and/or flip random bytes in
    it. Reopening must not raise, and the log must be a prefix of what was written:
    every batch readable with a valid CRC, offsets contiguous from 0, records as
    written; appends work afterwards."""
    rng = random.Random(seed)
    d = _tmpdir()
    try:
        log = Log.open(d, CONFIG, clock_ms=lambda: 5000)
        written: list[bytes] = []
        for i, (count, size) in enumerate(specs):
            log.append_as_leader(build_batch(_records(count, size, i)), i // 5)
        written = _read_all(log)
        log._close_files()
        # Absent if no open or close rewrote it (a new log writes it lazily).
        (d / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
        victim = rng.choice(sorted(d.glob("*.log")))
        data = bytearray(victim.read_bytes())
        if cut and data:
            del data[rng.randrange(len(data)) :]
        for _ in range(flips if data else 0):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(data))

        again = Log.open(d, CONFIG, clock_ms=lambda: 5000)
        got = _read_all(again)
        expected_offset = 0
        for raw, want in zip(got, written, strict=False):
            assert crc_valid(raw)
            (_, h), *_ = iter_batches(raw)
            assert h.base_offset == expected_offset
            assert raw[16:] == want[16:]  # all but offset, length, epoch: CRC-covered
            expected_offset = h.next_offset
        assert len(got) <= len(written)
        assert again.log_end_offset == expected_offset
        # The leader-epoch field lies outside the CRC (as in Kafka), so a flip there can
        # survive recovery and raise the latest epoch; append above whatever it is.
        info = again.append_as_leader(build_batch(_records(1, 5, 0)), (again.latest_epoch or 0) + 1)
        assert info.first_offset == expected_offset
        again.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 150), st.booleans(), st.integers(0, 2)),
        min_size=1,
        max_size=20,
    ),
    group=st.integers(2, 4),
)
def test_single_batch_fast_path_matches_general_path(
    specs: list[tuple[int, int, bool, int]], group: int
) -> None:
    """append_as_leader has a fast path for a request of exactly one batch. Append the
    same batches one per request (fast path) to one log and ``group`` per request
    (general path) to another, with epoch changes and batches without timestamps: both
    logs must hold the same bytes, index files, epoch cache and log end, and the
    per-batch infos must add up to the grouped infos. No rolls: a request lands whole
    in one segment, so grouping moves roll points (the state machine covers rolls on
    the fast path)."""
    batches = []
    for i, (count, size, stamped, bump) in enumerate(specs):
        records = _records(count, size, i)
        if not stamped:  # timestamp -1: no max timestamp, offset_of_max stays below
            records = [Record(r.value, timestamp_ms=-1) for r in records]
        batches.append((build_batch(records), bump))
    fast_dir, general_dir = _tmpdir(), _tmpdir()
    try:
        config = LogConfig(index_interval_bytes=150)
        fast = Log.open(fast_dir, config, clock_ms=lambda: 5000)
        general = Log.open(general_dir, config, clock_ms=lambda: 5000)
        epoch = 0
        for start in range(0, len(batches), group):
            chunk = batches[start : start + group]
            epoch += chunk[0][1]
            singles = [fast.append_as_leader(raw, epoch) for raw, _ in chunk]
            if len(chunk) > 1:
                # The general path, stored batch by batch the same way.
                grouped = general.append_as_leader(b"".join(raw for raw, _ in chunk), epoch)
                assert grouped.first_offset == singles[0].first_offset
                assert grouped.last_offset == singles[-1].last_offset
                assert grouped.records_count == sum(s.records_count for s in singles)
                assert grouped.valid_bytes == sum(s.valid_bytes for s in singles)
                assert grouped.batch_count == len(singles)
                best = max(singles, key=lambda s: (s.max_timestamp, -s.first_offset))
                assert grouped.max_timestamp == best.max_timestamp
                if best.max_timestamp >= 0:
                    assert grouped.offset_of_max_timestamp == best.offset_of_max_timestamp
            else:
                general.append_as_leader(chunk[0][0], epoch)
            for s in singles:
                assert s.batch_count == 1 and s.log_append_time_ms == -1
                if s.max_timestamp < 0:
                    assert s.offset_of_max_timestamp == s.first_offset - 1
                else:
                    assert s.offset_of_max_timestamp == s.last_offset
        assert fast.log_end_offset == general.log_end_offset
        assert fast.segment_base_offsets == general.segment_base_offsets == [0]
        assert fast.leader_epoch_cache.entries() == general.leader_epoch_cache.entries()
        assert _read_all(fast) == _read_all(general)
        for offset in range(fast.log_end_offset):
            assert fast.read(offset, 1) == general.read(offset, 1)
            for ts in (999, 1000 + offset):
                assert fast.offset_for_timestamp(ts) == general.offset_for_timestamp(ts)
        fast.close()
        general.close()
        for name in sorted(p.name for p in fast_dir.iterdir()):
            assert (fast_dir / name).read_bytes() == (general_dir / name).read_bytes(), name
    finally:
        shutil.rmtree(fast_dir, ignore_errors=True)
        shutil.rmtree(general_dir, ignore_errors=True)
