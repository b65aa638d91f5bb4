"""Encode and decode Kafka RecordBatch v2 (magic 2) with its records.

Theory of operation: a batch is the 61-byte header of :mod:`.header` followed by
``recordsCount`` records, compressed together when the attributes name a codec. Each
record is::

    length: varint                 (bytes after this field)
    attributes: int8               (unused, 0)
    timestampDelta: varlong        (from the batch's baseTimestamp)
    offsetDelta: varint            (from the batch's baseOffset)
    keyLength: varint, key         (-1 for a null key)
    valueLength: varint, value     (-1 for a null value)
    headersCount: varint
    headers: [keyLength: varint, key (UTF-8), valueLength: varint, value]

Varints are zig-zag encoded, as in protobuf. Bytes in, frozen records out; no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from raftka.client.errors import CorruptMessageError
from raftka.client.records import varint
from raftka.client.records.compression import compress, decompress
from raftka.client.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Compression,
    TimestampType,
    compute_crc,
    crc_valid,
    parse_header,
)

Header = tuple[str, bytes | None]

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a producer hands it over: no offset yet."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = 0
    headers: tuple[Header, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """One record read back from a batch, with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: tuple[DecodedRecord, ...]


def _encode_record(out: bytearray, rec: Record, offset_delta: int, base_ts: int) -> None:
    body = bytearray(b"\x00")  # attributes
    varint.write_varlong(body, rec.timestamp_ms - base_ts)
    varint.write_varint(body, offset_delta)
    varint.write_bytes(body, rec.key)
    varint.write_bytes(body, rec.value)
    varint.write_varint(body, len(rec.headers))
    for hkey, hvalue in rec.headers:
        varint.write_bytes(body, hkey.encode("utf-8"))
        varint.write_bytes(body, hvalue)
    varint.write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode ``records`` as one RecordBatch v2 with a valid CRC."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    max_ts = max(r.timestamp_ms for r in records)
    base_ts = min(r.timestamp_ms for r in records)
    body = bytearray()
    for delta, rec in enumerate(records):
        _encode_record(body, rec, delta, base_ts)
    payload = compress(compression, bytes(body))
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    size = HEADER_SIZE + len(payload)
    buf = bytearray(size)
    _PREFIX.pack_into(buf, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2)
    _HEADER_AFTER_CRC.pack_into(
        buf,
        ATTRIBUTES_OFFSET,
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, size))
    return bytes(buf)


def decode_batch(buf: bytes | bytearray | memoryview, *, check_crc: bool = True) -> DecodedBatch:
    """Decode the one batch that starts at the beginning of ``buf``.

    Raises CorruptMessageError on any framing, CRC or record-level inconsistency.
    """
    header = parse_header(buf)
    if len(buf) < header.size_bytes:
        raise CorruptMessageError("record batch is truncated")
    if check_crc and not crc_valid(buf):
        raise CorruptMessageError("record batch fails its CRC-32C check")
    payload = decompress(header.compression, bytes(buf[HEADER_SIZE : header.size_bytes]))
    records: list[DecodedRecord] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = varint.read_varint(payload, pos)
            end = pos + length
            pos += 1  # attributes
            ts_delta, pos = varint.read_varlong(payload, pos)
            offset_delta, pos = varint.read_varint(payload, pos)
            key, pos = varint.read_bytes(payload, pos)
            value, pos = varint.read_bytes(payload, pos)
            count, pos = varint.read_varint(payload, pos)
            headers: list[Header] = []
            for _ in range(count):
                hkey, pos = varint.read_bytes(payload, pos)
                hvalue, pos = varint.read_bytes(payload, pos)
                if hkey is None:
                    raise CorruptMessageError("record header with a null key")
                headers.append((hkey.decode("utf-8"), hvalue))
            if pos != end or end > len(payload):
                raise CorruptMessageError("record length does not match its contents")
            records.append(
                DecodedRecord(
                    offset=header.base_offset + offset_delta,
                    timestamp_ms=header.base_timestamp + ts_delta,
                    key=key,
                    value=value,
                    headers=tuple(headers),
                )
            )
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        raise CorruptMessageError(f"malformed record in batch: {exc}") from exc
    if pos != len(payload):
        raise CorruptMessageError("record batch has bytes after its last record")
    return DecodedBatch(header=header, records=tuple(records))
