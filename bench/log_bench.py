"""Segment-log benchmarks (not timed tests): append and read against a raw file, and
offset / timestamp lookup cost with 10 vs 1000 segments.

    python bench/log_bench.py [--quick] [--dir DIR]

Prints one JSON line per result, then a table. Each figure is the median of several
repeats. Neither side fsyncs; reads are of a warm (page-cached) file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _report import print_results

from raftka.common.record.batch import Record, build_batch
from raftka.storage import Log, LogConfig

BATCH_BYTES = 16 * 1024
RECORD_BYTES = 100


def make_batch() -> bytes:
    # Real timestamps: segment.ms rolls on the first batch's timestamp, as Kafka does.
    count = BATCH_BYTES // (RECORD_BYTES + 10)
    now_ms = time.time_ns() // 1_000_000
    return build_batch([Record(b"x" * RECORD_BYTES, timestamp_ms=now_ms) for _ in range(count)])


def paired_median_times(
    baseline: Callable[[], None], subject: Callable[[], None], repeats: int
) -> tuple[float, float]:
    """Median times of baseline and subject, run alternately: on a shared, noisy machine
    load drifts, and alternating exposes both sides to the same drift."""
    base_times, subject_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        baseline()
        t1 = time.perf_counter()
        subject()
        t2 = time.perf_counter()
        base_times.append(t1 - t0)
        subject_times.append(t2 - t1)
    return statistics.median(base_times), statistics.median(subject_times)


def median_time(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_append(root: Path, n: int, repeats: int) -> dict[str, object]:
    batch = make_batch()
    total = len(batch) * n

    def raw() -> None:
        p = root / "raw.bin"
        with p.open("wb") as f:
            for _ in range(n):
                f.write(batch)
        p.unlink()

    def log() -> None:
        d = root / "append"
        lg = Log.open(d, LogConfig())
        for _ in range(n):
            lg.append_as_leader(batch, 0)
        lg._close_files()  # no fsync, as the raw side
        shutil.rmtree(d)

    t_raw, t_log = paired_median_times(raw, log, repeats)
    return {
        "bench": "append_16k_batches",
        "batches": n,
        "raw_mb_s": round(total / t_raw / 1e6, 1),
        "log_mb_s": round(total / t_log / 1e6, 1),
        "ratio": round(t_raw / t_log, 3),
        "goal": 0.6,
    }


def bench_read(root: Path, n: int, repeats: int, fetch_bytes: int) -> dict[str, object]:
    batch = make_batch()
    d = root / "read"
    lg = Log.open(d, LogConfig())
    for _ in range(n):
        lg.append_as_leader(batch, 0)
    seg = next(d.glob("*.log"))
    total = lg.size_bytes

    def raw() -> None:
        fd = os.open(seg, os.O_RDONLY)
        pos = 0
        while pos < total:
            pos += len(os.pread(fd, fetch_bytes, pos))
        os.close(fd)

    # The fetch offsets a consumer would use, found once so the timed loop measures
    # Log.read alone (the consumer's own header walk is not the log's cost).
    fetch_offsets, off = [], 0
    while off < lg.log_end_offset:
        fetch_offsets.append(off)
        off = _next_offset(lg.read(off, fetch_bytes))

    def log_read() -> None:
        for off in fetch_offsets:
            lg.read(off, fetch_bytes)

    raw()
    log_read()
    t_raw, t_log = paired_median_times(raw, log_read, repeats)
    lg.close()
    shutil.rmtree(d)
    return {
        "bench": "sequential_read",
        "fetch_bytes": fetch_bytes,
        "bytes": total,
        "raw_mb_s": round(total / t_raw / 1e6, 1),
        "log_mb_s": round(total / t_log / 1e6, 1),
        "ratio": round(t_raw / t_log, 3),
        "goal": 0.6,
    }


def _next_offset(data: bytes) -> int:
    """The offset after the last whole batch of a read (a read may end mid-batch, as
    Kafka's fetch responses do; the consumer fetches that batch again)."""
    from raftka.common.record.header import parse_header, peek_batch_size

    pos, last = 0, 0
    while (size := peek_batch_size(data, pos)) is not None and pos + size <= len(data):
        last = parse_header(data, pos).next_offset
        pos += size
    return last


def bench_lookup(root: Path, segments: int, lookups: int, repeats: int) -> dict[str, object]:
    batch = build_batch([Record(b"y" * 200, timestamp_ms=1)])
    per_segment = 4
    d = root / f"lookup{segments}"
    clock = [10_000]
    lg = Log.open(
        d,
        LogConfig(segment_bytes=len(batch) * per_segment, index_interval_bytes=0),
        clock_ms=lambda: clock[0],
    )
    for i in range(segments * per_segment):
        lg.append_as_leader(build_batch([Record(b"y" * 200, timestamp_ms=10_000 + i)]), 0)
    assert lg.segment_count == segments, lg.segment_count
    end = lg.log_end_offset
    step = max(1, end // lookups)
    targets = [(i * step * 7919) % end for i in range(lookups)]

    def offsets() -> None:
        for t in targets:
            lg.read(t, 1)

    def stamps() -> None:
        for t in targets:
            lg.offset_for_timestamp(10_000 + t)

    t_off = median_time(offsets, repeats) / lookups
    t_ts = median_time(stamps, repeats) / lookups
    lg.close()
    shutil.rmtree(d)
    return {
        "bench": "lookup",
        "segments": segments,
        "read_one_batch_us": round(t_off * 1e6, 2),
        "offset_for_timestamp_us": round(t_ts * 1e6, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    n, repeats = (500, 3) if args.quick else (4000, 7)
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="raftka-bench-", dir=args.dir or shm))
    try:
        results = [
            bench_append(root, n, repeats),
            bench_read(root, n, repeats, 1024 * 1024),
            bench_read(root, n, repeats, 64 * 1024),
            bench_lookup(root, 10, 500 if args.quick else 2000, repeats),
            bench_lookup(root, 1000, 500 if args.quick else 2000, repeats),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_results(results)


if __name__ == "__main__":
    main()
