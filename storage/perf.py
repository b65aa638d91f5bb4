"""``raftka perf log``: the segment log's own performance tool.

Like Kafka's producer perf-test, but against storage alone: it appends records of a
fixed size in batches of about ``--batch-size`` bytes to a fresh log, then reads the log
back from the start the way a fetch does (whole batches as bytes), and prints
throughput for each phase. It is the quickest way to see what a disk and this Python
can do before any network is involved; ``bench/log_bench.py`` holds the comparisons
against raw file I/O that ``docs/benchmarks.md`` quotes.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from raftka.common.record.batch import Record, build_batch
from raftka.common.record.header import HEADER_SIZE, Compression, parse_header
from raftka.storage.log import Log
from raftka.storage.log_config import LogConfig

_READ_BYTES_MAX = 1 << 20  # per read call, as a fetch's max.partition.fetch.bytes


def _make_batch(record_size: int, batch_bytes: int, compression: Compression) -> bytes:
    """One batch of about ``batch_bytes`` of records; the tool appends it repeatedly."""
    value = os.urandom(record_size // 2).hex().encode()[:record_size].ljust(record_size, b"x")
    per_record = record_size + 8  # varint framing of a record with no key or headers
    count = max(1, batch_bytes // per_record)
    now_ms = int(time.time() * 1000)
    return build_batch([Record(value=value, timestamp_ms=now_ms)] * count, compression=compression)


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


@click.group("perf")
def perf_command() -> None:
    """Performance tools."""


@perf_command.command("log")
@click.option("--num-records", default=1_000_000, show_default=True, help="Records to append.")
@click.option("--record-size", default=100, show_default=True, help="Bytes per record value.")
@click.option("--batch-size", default=16_384, show_default=True, help="Bytes per batch.")
@click.option(
    "--compression",
    type=click.Choice([c.name.lower() for c in Compression]),
    default="none",
    show_default=True,
)
@click.option("--segment-bytes", default=1 << 30, show_default=True, help="segment.bytes")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Log directory (default: a temporary one, removed afterwards).",
)
def perf_log(
    *,
    num_records: int,
    record_size: int,
    batch_size: int,
    compression: str,
    segment_bytes: int,
    directory: Path | None,
) -> None:
    """Append records to a segment log, read them back, and print throughput."""
    if num_records <= 0 or record_size <= 0 or batch_size <= 0:
        raise click.BadParameter("--num-records, --record-size and --batch-size must be > 0")
    batch = _make_batch(record_size, batch_size, Compression.from_name(compression))
    per_batch = parse_header(batch).records_count
    batches = -(-num_records // per_batch)
    total_records = batches * per_batch
    owned = directory is None
    path = Path(tempfile.mkdtemp(prefix="raftka-perf-log-")) if owned else directory
    assert path is not None
    config = LogConfig.from_properties({"segment.bytes": segment_bytes})
    try:
        log = Log.open(path / "perf-0", config)
        start = time.perf_counter()
        with click.progressbar(
            range(batches),
            label="append",
            file=sys.stderr,
            update_min_steps=64,  # redraw every 64 batches, not every append
        ) as bar:
            for _ in bar:
                log.append_as_leader(batch, leader_epoch=0)
        append_s = time.perf_counter() - start
        flush_start = time.perf_counter()
        log.flush()
        flush_s = time.perf_counter() - flush_start
        written = log.size_bytes

        start = time.perf_counter()
        offset, read_bytes, end = 0, 0, log.log_end_offset
        while offset < end:
            data = log.read(offset, _READ_BYTES_MAX)
            # Next offset: after the last whole batch returned (a read may end in a
            # partial batch, as a Kafka fetch does; it is read again next time).
            pos = 0
            while pos + HEADER_SIZE <= len(data):
                header = parse_header(data, pos)
                if pos + header.size_bytes > len(data):
                    break
                pos += header.size_bytes
                offset = header.next_offset
            read_bytes += pos
        read_s = time.perf_counter() - start
        segments = log.segment_count
        log.close()
    finally:
        if owned:
            shutil.rmtree(path, ignore_errors=True)

    mb = 1024 * 1024
    click.echo(
        f"{total_records} records appended in {batches} batches of {per_batch} "
        f"({len(batch)} bytes, {compression}): "
        f"{_rate(total_records, append_s):,.0f} records/sec "
        f"({_rate(written / mb, append_s):.1f} MB/sec), fsync {flush_s * 1000:.0f} ms, "
        f"{segments} segment(s)"
    )
    click.echo(
        f"{total_records} records read back: {_rate(total_records, read_s):,.0f} records/sec "
        f"({_rate(read_bytes / mb, read_s):.1f} MB/sec)"
    )
