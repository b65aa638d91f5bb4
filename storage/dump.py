"""``raftka dump-log``: print the record batches of segment files, like kafka-dump-log.

It walks the bytes of each file as Kafka's RecordBatch v2 framing defines them and
trusts nothing else, so it reads segments written by any Kafka-compatible producer
library and shows damage instead of stopping at it: a batch whose CRC fails is printed
with ``isvalid: false``; bytes at the end that cannot be a whole batch are reported
with their position.

For a compacted log it also shows what the cleaner left: the partition's entry in the
``cleaner-offset-checkpoint`` of the log directory above the segment (the first dirty
offset), and every gap in the offsets, between batches and (with ``--print-data``)
inside them, where the cleaner removed records. Offsets never change, so a gap is the
only trace of a removed record; a batch whose records were all removed but whose
producer state matters shows as ``count: 0``.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import orjson

from raftka.common.errors import KafkaError
from raftka.common.record.batch import DecodedRecord, decode_batch
from raftka.common.record.header import (
    HEADER_SIZE,
    BatchHeader,
    crc_valid,
    parse_header,
    peek_batch_size,
)
from raftka.storage.cleaner import partition_of, read_cleaner_checkpoint


@dataclass(frozen=True, slots=True)
class DumpedBatch:
    position: int
    header: BatchHeader
    crc_ok: bool
    records: tuple[DecodedRecord, ...] | None  # None unless asked for and decodable
    error: str | None  # why the records could not be decoded


@dataclass(frozen=True, slots=True)
class TrailingBytes:
    """Bytes at ``position`` that do not form a whole, parseable batch."""

    position: int
    size: int
    reason: str


def walk_segment(data: bytes | mmap.mmap, *, decode: bool) -> Iterator[DumpedBatch | TrailingBytes]:
    """Yield each batch of a segment's bytes in order, then any unreadable tail."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        size = peek_batch_size(view, pos)
        if size is None or size < HEADER_SIZE or pos + size > end:
            reason = "truncated batch" if size is not None and size >= HEADER_SIZE else "no batch"
            yield TrailingBytes(pos, end - pos, reason)
            return
        try:
            header = parse_header(view, pos)
        except KafkaError as exc:
            yield TrailingBytes(pos, end - pos, str(exc))
            return
        crc_ok = crc_valid(view, pos)
        records: tuple[DecodedRecord, ...] | None = None
        error: str | None = None
        if decode:
            if crc_ok:
                try:
                    records = decode_batch(view[pos : pos + size]).records
                except KafkaError as exc:
                    error = str(exc)
            else:
                error = "CRC mismatch: records not decoded"
        yield DumpedBatch(pos, header, crc_ok, records, error)
        pos += size


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def _batch_line(b: DumpedBatch) -> str:
    h = b.header
    ts_name = "LogAppendTime" if h.timestamp_type.value else "CreateTime"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} position: {b.position} "
        f"{ts_name}: {h.max_timestamp} size: {h.size_bytes} magic: {h.magic} "
        f"compresscodec: {h.compression.name.lower()} crc: {h.crc} "
        f"isvalid: {str(b.crc_ok).lower()}"
    )


def _record_line(r: DecodedRecord, header: BatchHeader) -> str:
    ts_name = "LogAppendTime" if header.timestamp_type.value else "CreateTime"
    sequence = -1
    if header.base_sequence >= 0:
        sequence = (header.base_sequence + r.offset - header.base_offset) % (2**31)
    keys = ",".join(k for k, _ in r.headers)
    return (
        f"| offset: {r.offset} {ts_name}: {r.timestamp_ms} "
        f"keySize: {-1 if r.key is None else len(r.key)} "
        f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {sequence} "
        f"headerKeys: [{keys}] key: {_text(r.key)} payload: {_text(r.value)}"
    )


def _json_item(item: DumpedBatch | TrailingBytes) -> dict[str, object]:
    if isinstance(item, TrailingBytes):
        return {
            "trailing_bytes": {"position": item.position, "size": item.size, "reason": item.reason}
        }
    h = item.header
    out: dict[str, object] = {
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "position": item.position,
        "size": h.size_bytes,
        "partition_leader_epoch": h.partition_leader_epoch,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "compression": h.compression.name.lower(),
        "timestamp_type": h.timestamp_type.name,
        "base_timestamp": h.base_timestamp,
        "max_timestamp": h.max_timestamp,
        "crc": h.crc,
        "crc_valid": item.crc_ok,
    }
    if item.error is not None:
        out["error"] = item.error
    if item.records is not None:
        out["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "key": _text(r.key) if r.key is not None else None,
                "value": _text(r.value) if r.value is not None else None,
                "headers": [[k, _text(v) if v is not None else None] for k, v in r.headers],
            }
            for r in item.records
        ]
    return out


def _open_bytes(path: Path) -> bytes | mmap.mmap:
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        # mmap: a 1 GiB segment is walked without reading it all into memory.
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def cleaner_checkpoint_for(segment: Path) -> int | None:
    """The first dirty offset the cleaner checkpointed for the segment's partition."""
    log_dir = segment.resolve().parent
    return read_cleaner_checkpoint(log_dir.parent).get(partition_of(log_dir))


def _gap_line(first: int, last: int, where: str) -> str:
    return f"{where}Gap: offsets {first} to {last} absent (removed by the log cleaner)"


@click.command("dump-log")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--print-data", is_flag=True, help="Also print every record's key, value, headers.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch (JSON lines).")
def dump_log_command(files: tuple[Path, ...], print_data: bool, as_json: bool) -> None:
    """Print the record batches of segment FILES (*.log), like kafka-dump-log."""
    failed = False
    for path in files:
        try:
            data = _open_bytes(path)
        except OSError as exc:
            click.echo(f"error: cannot read {path}: {exc.strerror or exc}", err=True)
            failed = True
            continue
        checkpoint = cleaner_checkpoint_for(path)
        base = path.name.partition(".")[0]
        expected = int(base) if base.isdigit() else None  # the next offset if no gap
        if as_json:
            if checkpoint is not None:
                click.echo(
                    orjson.dumps({"file": str(path), "cleaner_checkpoint": checkpoint}).decode()
                )
        else:
            click.echo(f"Dumping {path}")
            if expected is not None:
                click.echo(f"Log starting offset: {expected}")
            if checkpoint is not None:
                click.echo(f"Cleaner checkpoint (first dirty offset): {checkpoint}")
        for item in walk_segment(data, decode=print_data):
            if isinstance(item, DumpedBatch):
                if expected is not None and item.header.base_offset > expected:
                    gap = (expected, item.header.base_offset - 1)
                    if as_json:
                        gap_item = {"first_offset": gap[0], "last_offset": gap[1]}
                        click.echo(orjson.dumps({"file": str(path), "gap": gap_item}).decode())
                    else:
                        click.echo(_gap_line(*gap, ""))
                expected = item.header.last_offset + 1
            if as_json:
                click.echo(orjson.dumps({"file": str(path), **_json_item(item)}).decode())
            elif isinstance(item, TrailingBytes):
                click.echo(
                    f"Found {item.size} bytes at position {item.position} that do not form a "
                    f"valid batch ({item.reason})"
                )
            else:
                click.echo(_batch_line(item))
                if item.error is not None:
                    click.echo(f"| error: {item.error}")
                next_record = item.header.base_offset
                for record in item.records or ():
                    if record.offset > next_record:
                        click.echo(_gap_line(next_record, record.offset - 1, "| "))
                    click.echo(_record_line(record, item.header))
                    next_record = record.offset + 1
                if item.records is not None and next_record <= item.header.last_offset:
                    click.echo(_gap_line(next_record, item.header.last_offset, "| "))
    if failed:
        raise SystemExit(1)
