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

Varints are zig-zag encoded, as in protobuf (:mod:`.varint`). Bytes in, immutable
records out; no I/O.

Choices that follow Kafka's Java client:

* baseTimestamp is the *first* record's timestamp, so later deltas may be negative;
  maxTimestamp is the largest timestamp in the batch.
* A LOG_APPEND_TIME batch reads back with every record stamped at maxTimestamp (the
  broker's append time), whatever the per-record deltas say.
* A fetch response may end with a truncated batch; :func:`decode_batches` stops there
  quietly. A truncated batch anywhere else is corrupt.

Speed: this is the hot path of producers and consumers, so the record loops are written
out by hand. Records are NamedTuples (built with ``tuple.__new__``, several times
cheaper than a frozen dataclass); varints of one byte, the common case for deltas,
key lengths and header counts, are read inline through a lookup table, and longer ones
through :func:`.varint.read_unsigned`; the encoder takes small varints from a cache.
The readable definition of each field is the layout above and :mod:`.varint`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from raftka.common.errors import CorruptMessageError
from raftka.common.record.compression import (
    DECOMPRESSED_BYTES_MAX_DEFAULT,
    compress,
    decompress,
)
from raftka.common.record.header import (
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
    peek_batch_size,
)
from raftka.common.record.varint import (
    SMALL_NONNEGATIVE,
    VARINT_BYTES_MAX,
    VARLONG_BYTES_MAX,
    ZIGZAG_ONE_BYTE,
    encode_length,
    encode_varint,
    encode_varlong,
    read_bytes,
    read_unsigned,
    read_varint,
)

Header = tuple[str, bytes | None]
Buffer = bytes | bytearray | memoryview

RECORDS_PER_BATCH_MAX: Final = 2**31 - 1  # offset deltas and the count are int32

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_NULL: Final = b"\x01"  # varint -1: a null key, value or header value
_NO_HEADERS: Final = b"\x00"
_ATTRIBUTES: Final = b"\x00"


class Record(NamedTuple):
    """One record as a producer hands it over: no offset yet."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = 0
    headers: tuple[Header, ...] = ()


class DecodedRecord(NamedTuple):
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


# --------------------------------------------------------------------------- encode


def _encode_headers(headers: tuple[Header, ...]) -> bytes:
    out = bytearray(encode_varint(len(headers)))
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        out += encode_length(len(kb))
        out += kb
        if hvalue is None:
            out += _NULL
        else:
            out += encode_length(len(hvalue))
            out += hvalue
    return bytes(out)


def encode_records(records: Sequence[Record], base_timestamp: int) -> bytes:
    """The uncompressed records section of a batch (what follows the 61-byte header)."""
    # The producer's hottest loop: small varints come from a table, not a call.
    small = SMALL_NONNEGATIVE
    n_small = len(small)
    parts: list[bytes] = []
    extend = parts.extend
    for offset_delta, (value_or_none, key_or_none, timestamp_ms, headers) in enumerate(records):
        delta = timestamp_ms - base_timestamp
        ts_b = small[delta] if 0 <= delta < n_small else encode_varlong(delta)
        od_b = small[offset_delta] if offset_delta < n_small else encode_varint(offset_delta)
        if key_or_none is None:
            key_b, key = _NULL, b""
        else:
            key = key_or_none
            n = len(key)
            key_b = small[n] if n < n_small else encode_length(n)
        if value_or_none is None:
            value_b, value = _NULL, b""
        else:
            value = value_or_none
            n = len(value)
            value_b = small[n] if n < n_small else encode_length(n)
        headers_b = _encode_headers(headers) if headers else _NO_HEADERS
        size = (
            1
            + len(ts_b)
            + len(od_b)
            + len(key_b)
            + len(key)
            + len(value_b)
            + len(value)
            + len(headers_b)
        )
        # One extend of a tuple costs less than nine appends.
        extend(
            (
                small[size] if size < n_small else encode_length(size),
                _ATTRIBUTES,
                ts_b,
                od_b,
                key_b,
                key,
                value_b,
                value,
                headers_b,
            )
        )
    return b"".join(parts)


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
    if len(records) > RECORDS_PER_BATCH_MAX:
        raise ValueError(f"a record batch holds at most {RECORDS_PER_BATCH_MAX} records")
    base_ts = records[0].timestamp_ms
    max_ts = max(r.timestamp_ms for r in records)
    payload = compress(compression, encode_records(records, base_ts))
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
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, size))
    return bytes(buf)


# --------------------------------------------------------------------------- decode


def _read_headers(payload: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    count, pos = read_varint(payload, pos)
    if count < 0:
        raise CorruptMessageError(f"record has a negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        hkey, pos = read_bytes(payload, pos)
        hvalue, pos = read_bytes(payload, pos)
        if hkey is None:
            raise CorruptMessageError("record header with a null key")
        headers.append((hkey.decode("utf-8"), hvalue))
    return tuple(headers), pos


def decode_records(
    payload: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    *,
    log_append_time: int | None = None,
) -> list[DecodedRecord]:
    """Decode ``count`` records from an uncompressed records section.

    ``log_append_time``, when given, replaces every record's timestamp (the reading of
    a LOG_APPEND_TIME batch). Raises CorruptMessageError if the records do not exactly
    fill ``payload``.
    """
    records: list[DecodedRecord] = []
    append = records.append
    new = tuple.__new__
    cls = DecodedRecord
    zz = ZIGZAG_ONE_BYTE
    end_of_payload = len(payload)
    pos = 0
    try:
        for _ in range(count):
            # Each varint inline: one byte (< 0x80) through the zig-zag table, two
            # bytes by hand, longer ones through the general reader.
            b = payload[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif payload[pos + 1] < 0x80:
                u = (b & 0x7F) | (payload[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                u, pos = read_unsigned(payload, pos, VARINT_BYTES_MAX)
                length = (u >> 1) ^ -(u & 1)
            end = pos + length
            pos += 1  # attributes: unused in v2
            b = payload[pos]
            if b < 0x80:
                ts_delta = zz[b]
                pos += 1
            elif payload[pos + 1] < 0x80:
                u = (b & 0x7F) | (payload[pos + 1] << 7)
                ts_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                u, pos = read_unsigned(payload, pos, VARLONG_BYTES_MAX)
                ts_delta = (u >> 1) ^ -(u & 1)
            b = payload[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif payload[pos + 1] < 0x80:
                u = (b & 0x7F) | (payload[pos + 1] << 7)
                offset_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                u, pos = read_unsigned(payload, pos, VARINT_BYTES_MAX)
                offset_delta = (u >> 1) ^ -(u & 1)
            b = payload[pos]
            if b < 0x80:
                key_len = zz[b]
                pos += 1
            elif payload[pos + 1] < 0x80:
                u = (b & 0x7F) | (payload[pos + 1] << 7)
                key_len = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                u, pos = read_unsigned(payload, pos, VARINT_BYTES_MAX)
                key_len = (u >> 1) ^ -(u & 1)
            if key_len >= 0:
                key: bytes | None = payload[pos : pos + key_len]
                pos += key_len
            elif key_len == -1:
                key = None
            else:
                raise CorruptMessageError(f"record key length {key_len}")
            b = payload[pos]
            if b < 0x80:
                value_len = zz[b]
                pos += 1
            elif payload[pos + 1] < 0x80:
                u = (b & 0x7F) | (payload[pos + 1] << 7)
                value_len = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                u, pos = read_unsigned(payload, pos, VARINT_BYTES_MAX)
                value_len = (u >> 1) ^ -(u & 1)
            if value_len >= 0:
                value: bytes | None = payload[pos : pos + value_len]
                pos += value_len
            elif value_len == -1:
                value = None
            else:
                raise CorruptMessageError(f"record value length {value_len}")
            if payload[pos] == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(payload, pos)
            # A slice past the end comes back short but moves pos past end_of_payload.
            if pos != end or end > end_of_payload:
                raise CorruptMessageError(f"record length {length} does not match its contents")
            append(
                new(
                    cls,
                    (
                        base_offset + offset_delta,
                        base_timestamp + ts_delta if log_append_time is None else log_append_time,
                        key,
                        value,
                        headers,
                    ),
                )
            )
    except IndexError:
        raise CorruptMessageError("record runs past the end of its batch") from None
    except UnicodeDecodeError as exc:
        raise CorruptMessageError(f"record header key is not UTF-8: {exc}") from None
    if pos != end_of_payload:
        raise CorruptMessageError("record batch has bytes after its last record")
    return records


def decode_batch(
    buf: Buffer,
    *,
    check_crc: bool = True,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
) -> DecodedBatch:
    """Decode the one batch that starts at the beginning of ``buf``.

    Records carry absolute offsets (baseOffset + offsetDelta) and timestamps. Bytes
    after the batch are ignored. Raises CorruptMessageError on any framing, CRC,
    decompression or record-level inconsistency, and on a truncated batch.
    """
    header = parse_header(buf)
    size = header.size_bytes
    if len(buf) < size:
        raise CorruptMessageError(f"record batch is truncated: {len(buf)} of {size} bytes present")
    if check_crc and not crc_valid(buf):
        raise CorruptMessageError("record batch fails its CRC-32C check")
    codec_id = header.attributes & COMPRESSION_MASK
    try:
        codec = Compression(codec_id)
    except ValueError:
        raise CorruptMessageError(f"record batch names unknown codec {codec_id}") from None
    payload = decompress(
        codec,
        memoryview(buf)[HEADER_SIZE:size],
        decompressed_bytes_max=decompressed_bytes_max,
    )
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    records = decode_records(
        payload,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time=log_append_time,
    )
    return DecodedBatch(header=header, records=tuple(records))


def decode_batches(
    buf: Buffer,
    *,
    check_crc: bool = True,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
) -> Iterator[DecodedBatch]:
    """Decode concatenated batches, as a fetch response or a log segment holds them.

    Stops quietly at a trailing partial batch (a fetch response is cut at the byte
    limit, often mid-batch; Kafka's consumers skip that remainder). A whole batch that
    is corrupt raises CorruptMessageError.
    """
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        size = peek_batch_size(view, pos)
        if size is None or pos + max(size, HEADER_SIZE) > end:
            return  # trailing partial batch
        yield decode_batch(
            view[pos : pos + size],
            check_crc=check_crc,
            decompressed_bytes_max=decompressed_bytes_max,
        )
        pos += size


def iter_records(
    buf: Buffer,
    *,
    check_crc: bool = True,
    include_control: bool = False,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
) -> Iterator[DecodedRecord]:
    """Every record of the concatenated batches in ``buf``, in order.

    Control batches (transaction markers) are skipped unless ``include_control``, as a
    Kafka consumer never hands them to the application. A trailing partial batch is
    skipped as in :func:`decode_batches`.
    """
    for batch in decode_batches(
        buf, check_crc=check_crc, decompressed_bytes_max=decompressed_bytes_max
    ):
        if include_control or not batch.header.is_control:
            yield from batch.records
