"""The 61-byte header of Kafka's RecordBatch v2 (magic 2).

Theory of operation: the log layer, the broker and the client all need to look at a
batch without decoding its records: to assign offsets, to check the CRC, to index it,
to stamp the leader epoch, to walk a segment file. This module is that view: bytes in,
a frozen :class:`BatchHeader` out, plus the two in-place edits Kafka allows without
recomputing the CRC (base offset and partition leader epoch lie before the CRC'd range).

Layout (big-endian), from the Kafka protocol guide::

    offset  size  field
    0       8     baseOffset
    8       4     batchLength        (bytes after this field)
    12      4     partitionLeaderEpoch
    16      1     magic              (2)
    17      4     crc                (CRC-32C of bytes 21..end)
    21      2     attributes
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records

No I/O here: callers own the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

import crc32c

from raftka.common.errors import CorruptMessageError

HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the part batchLength does not count
MAGIC_V2: Final = 2
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21  # the CRC covers from here to the end of the batch
PARTITION_LEADER_EPOCH_OFFSET: Final = 12

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1

# Attribute bits.
COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == HEADER_SIZE
_LENGTH = struct.Struct(">qi")
_INT32 = struct.Struct(">i")


class Compression(IntEnum):
    """Kafka's compression codec ids (attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str | None) -> Compression:
        """Kafka's ``compression.type`` value (``none``, ``gzip``, ...) to the codec id."""
        key = (name or "none").strip().upper()
        try:
            return cls[key]
        except KeyError:
            valid = ", ".join(c.name.lower() for c in cls)
            raise ValueError(
                f"unknown compression type {name!r}; expected one of {valid}"
            ) from None


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record, wrapping at 2^31-1 as Kafka does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def peek_batch_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at ``pos``, or None if fewer than 12 bytes remain.

    Reads only baseOffset and batchLength, so it works on a partial read of a file.
    """
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, batch_length = _LENGTH.unpack_from(buf, pos)
    return int(batch_length) + LOG_OVERHEAD


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. Raises CorruptMessageError if it cannot be a v2 batch.

    Checks framing only (sizes, magic, counts); :func:`crc_valid` checks the contents.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptMessageError(
            f"record batch header truncated: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptMessageError(f"unsupported record batch magic {header.magic}, expected 2")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptMessageError(f"record batch length {header.batch_length} is too small")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptMessageError("record batch has a negative offset delta or record count")
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of attributes..end for the batch of ``size`` bytes at ``pos``."""
    return int(crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))


def crc_valid(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    """True if the batch at ``pos`` is whole and its stored CRC matches its bytes."""
    size = peek_batch_size(buf, pos)
    if size is None or size < HEADER_SIZE or len(buf) - pos < size:
        return False
    (stored,) = struct.unpack_from(">I", buf, pos + CRC_OFFSET)
    return bool(stored == compute_crc(buf, pos, size))


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Stamp the base offset in place (outside the CRC'd range, as Kafka's leader does)."""
    struct.pack_into(">q", buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Stamp the partition leader epoch in place (outside the CRC'd range)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def iter_batches(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Walk concatenated batches, yielding (position, header) for each whole one.

    Raises CorruptMessageError at the first batch that is malformed, truncated or (with
    ``check_crc``) whose CRC does not match: a producer's request is accepted whole or
    not at all, so callers validate everything before appending anything.
    """
    pos, end = 0, len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        if pos + header.size_bytes > end:
            raise CorruptMessageError(
                f"record batch at byte {pos} is truncated: {end - pos} of "
                f"{header.size_bytes} bytes present"
            )
        if check_crc and not crc_valid(buf, pos):
            raise CorruptMessageError(f"record batch at byte {pos} fails its CRC-32C check")
        yield pos, header
        pos += header.size_bytes
