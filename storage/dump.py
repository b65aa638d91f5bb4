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

Transactions: a control batch's marker is always shown (``endTxnMarker: COMMIT
coordinatorEpoch: 4``, as kafka-dump-log prints it), and a segment's ``.txnindex``
(Kafka's aborted-transaction index) is printed after the segment when it exists, or on
its own when given as a FILE. A torn last index entry is reported, not repaired: this
command never writes.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import click
import orjson

from raftka.common.errors import KafkaError
from raftka.common.record.batch import DecodedRecord, decode_batch
from raftka.common.record.control import (
    ControlRecordType,
    parse_control_key,
    parse_end_transaction_marker,
)
from raftka.common.record.header import (
    HEADER_SIZE,
    BatchHeader,
    crc_valid,
    parse_header,
    peek_batch_size,
)
from raftka.storage.cleaner import partition_of, read_cleaner_checkpoint
from raftka.storage.transaction_index import (
    ENTRY_BYTES,
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    decode_entries,
)


@dataclass(frozen=True, slots=True)
class DumpedBatch:
    position: int
    header: BatchHeader
    crc_ok: bool
    records: tuple[DecodedRecord, ...] | None  # None unless asked for and decodable
    error: str | None  # why the records could not be decoded
    # A control batch's record: its type name and, for COMMIT/ABORT, the coordinator
    # epoch (None for KRaft's own control types or a record that did not decode).
    control: tuple[str, int | None] | None = None


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
        control: tuple[str, int | None] | None = None
        # A control batch holds one small record: always decoded, to show the marker.
        if decode or header.is_control:
            if crc_ok:
                try:
                    records = decode_batch(view[pos : pos + size]).records
                except KafkaError as exc:
                    error = str(exc)
            else:
                error = "CRC mismatch: records not decoded"
        if header.is_control and records:
            control = _control_of(records[0])
        yield DumpedBatch(pos, header, crc_ok, records if decode else None, error, control)
        pos += size


def _control_of(record: DecodedRecord) -> tuple[str, int | None]:
    try:
        control_type = parse_control_key(record.key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return control_type.name, None
        marker = parse_end_transaction_marker(record.key, record.value)
    except KafkaError as exc:
        return f"unreadable ({exc})", None
    return marker.control_type.name, marker.coordinator_epoch


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
    if item.control is not None:
        out["control"] = {"type": item.control[0], "coordinator_epoch": item.control[1]}
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


def _control_line(b: DumpedBatch) -> str:
    assert b.control is not None
    kind, coordinator_epoch = b.control
    if coordinator_epoch is None:
        return f"| offset: {b.header.base_offset} controlType: {kind}"
    return (
        f"| offset: {b.header.base_offset} endTxnMarker: {kind} "
        f"coordinatorEpoch: {coordinator_epoch}"
    )


def _txn_entry_line(e: AbortedTxn) -> str:
    """kafka-dump-log's line for a .txnindex entry."""
    return (
        f"version: {e.version} producerId: {e.producer_id} firstOffset: {e.first_offset} "
        f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}"
    )


def _dump_txn_index(path: Path, *, as_json: bool, must_exist: bool) -> bool:
    """Print a .txnindex file's entries; False if it could not be read."""
    try:
        entries, partial = decode_entries(path.read_bytes())
    except FileNotFoundError:
        if must_exist:
            click.echo(f"error: cannot read {path}: no such file", err=True)
        return not must_exist
    except (OSError, KafkaError) as exc:
        click.echo(f"error: cannot read {path}: {exc}", err=True)
        return False
    if not as_json:
        click.echo(f"Dumping {path}")
    for entry in entries:
        if as_json:
            row = {
                "version": entry.version,
                "producer_id": entry.producer_id,
                "first_offset": entry.first_offset,
                "last_offset": entry.last_offset,
                "last_stable_offset": entry.last_stable_offset,
            }
            click.echo(orjson.dumps({"file": str(path), "aborted_txn": row}).decode())
        else:
            click.echo(_txn_entry_line(entry))
    if partial:
        if as_json:
            tail = {"position": len(entries) * ENTRY_BYTES, "size": partial, "reason": "torn entry"}
            click.echo(orjson.dumps({"file": str(path), "trailing_bytes": tail}).decode())
        else:
            click.echo(f"Found {partial} bytes at the end that are not a whole entry (torn)")
    return True


def _gap_line(first: int, last: int, where: str) -> str:
    return f"{where}Gap: offsets {first} to {last} absent (removed by the log cleaner)"


#: Prints one file of a kind a higher layer knows (``as_json``); False if it could not.
FileDumper = Callable[[Path, bool], bool]


def make_dump_log_command(dumpers: Mapping[str, FileDumper]) -> click.Command:
    """``raftka dump-log``, which also hands each file whose name ends with a key of
    ``dumpers`` to that dumper: the broker layer adds producer state snapshots this way,
    since their format is the broker's and storage may not import it."""

    @click.command("dump-log")
    @click.argument(
        "files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
    )
    @click.option(
        "--print-data", is_flag=True, help="Also print every record's key, value, headers."
    )
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per batch (JSON lines).")
    def command(files: tuple[Path, ...], print_data: bool, as_json: bool) -> None:
        """Print the record batches of segment FILES (*.log), the entries of aborted-
        transaction indexes (*.txnindex) and producer state snapshots (*.snapshot: open
        transactions and the LSO), like kafka-dump-log."""
        _dump_files(files, print_data=print_data, as_json=as_json, dumpers=dumpers)

    return command


def _dump_files(
    files: tuple[Path, ...], *, print_data: bool, as_json: bool, dumpers: Mapping[str, FileDumper]
) -> None:
    failed = False
    for path in files:
        if path.name.endswith(TXN_INDEX_SUFFIX):
            failed |= not _dump_txn_index(path, as_json=as_json, must_exist=True)
            continue
        dumper = next((d for suffix, d in dumpers.items() if path.name.endswith(suffix)), None)
        if dumper is not None:
            failed |= not dumper(path, as_json)
            continue
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
                if item.control is not None:
                    click.echo(_control_line(item))
                    continue
                next_record = item.header.base_offset
                for record in item.records or ():
                    if record.offset > next_record:
                        click.echo(_gap_line(next_record, record.offset - 1, "| "))
                    click.echo(_record_line(record, item.header))
                    next_record = record.offset + 1
                if item.records is not None and next_record <= item.header.last_offset:
                    click.echo(_gap_line(next_record, item.header.last_offset, "| "))
        if path.suffix == ".log":
            txn_index = path.with_suffix(TXN_INDEX_SUFFIX)
            failed |= not _dump_txn_index(txn_index, as_json=as_json, must_exist=False)
    if failed:
        raise SystemExit(1)


#: Segments and .txnindex files only (the broker layer's adds snapshots:
#: raftka.broker.dump_log).
dump_log_command = make_dump_log_command({})
