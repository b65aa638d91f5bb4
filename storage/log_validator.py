"""Kafka's LogValidator: what a leader checks in a producer's batches before it stores
any of them.

Theory of operation. The segment log (``log.py``) checks what it needs to store a batch
safely: framing, magic, CRC, size, and that the record count matches the offsets the
batch spans. That is not enough to keep a partition readable: a batch whose CRC is
right but whose compressed payload is garbage, or whose records carry offset deltas out
of order, is stored fine and then fails every consumer that reads it, forever. So, as
Kafka's ``LogValidator`` does for a client's produce (``AppendOrigin.CLIENT``), the
leader decodes every record of every batch once, before the append, and refuses the
whole request when any batch is bad:

==============================================  =====================  ===============
what                                            Kafka's error          why it matters
==============================================  =====================  ===============
a control batch (transaction marker) from a     INVALID_RECORD         only a partition's
client                                                                 leader writes them
a transactional batch without a producer id     INVALID_RECORD         no marker could
                                                                       ever end it
CRC mismatch, a payload that does not           CORRUPT_MESSAGE        no consumer could
decompress, records that do not fill their                             decode it
batch exactly
record count != lastOffsetDelta + 1; a          INVALID_RECORD         offsets are the
record whose offset delta is not its index                             partition's truth
a record timestamp above the batch's            INVALID_RECORD         the time index and
maxTimestamp                                                           retention use it
a CreateTime timestamp more than                INVALID_TIMESTAMP      KIP-937's bounds
``message.timestamp.before.max.ms`` before or
``message.timestamp.after.max.ms`` after now
a record without a key on a compacted topic     INVALID_RECORD         compaction keys
                                                                       on it
==============================================  =====================  ===============

A topic whose ``compression.type`` names a codec (not ``producer``) stores every batch in
that codec: :func:`recompress` rebuilds a batch whose codec differs, as Kafka's
validator does, keeping its producer id, epoch, sequence, transactional flag and every
record (keys, values, headers, timestamps, offset deltas).

Nothing is appended when any check fails (the caller validates before it appends), and
the error names the batch by its byte position so a producer's author can find it. The
module is pure: bytes and ``now_ms`` in, an exception or a summary out.

Cost: one decompression and one record walk per batch on the produce path, as in Kafka
(which skips the walk only for uncompressed batches from new clients with no timestamp
checks; raftka does it always, so that every stored batch is known to decode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from raftka.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
)
from raftka.common.record import DECOMPRESSED_BYTES_MAX_DEFAULT, Compression
from raftka.common.record.batch import Record, build_batch, decode_records
from raftka.common.record.compression import decompress
from raftka.common.record.header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    crc_valid,
    parse_header,
    peek_batch_size,
)

__all__ = [
    "COMPRESSION_TYPES",
    "TIMESTAMP_AFTER_MAX_MS_DEFAULT",
    "TIMESTAMP_BEFORE_MAX_MS_DEFAULT",
    "ValidationConfig",
    "ValidationSummary",
    "compression_for",
    "recompress",
    "validate_client_batches",
]

LONG_MAX: Final = 2**63 - 1
#: message.timestamp.before.max.ms: Kafka's default accepts any age.
TIMESTAMP_BEFORE_MAX_MS_DEFAULT: Final = LONG_MAX
#: message.timestamp.after.max.ms: Kafka 4.0's default (KIP-1030), one hour ahead.
TIMESTAMP_AFTER_MAX_MS_DEFAULT: Final = 3_600_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationConfig:
    """The topic settings the validator honours (Kafka's keys in snake_case)."""

    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    timestamp_before_max_ms: int = TIMESTAMP_BEFORE_MAX_MS_DEFAULT
    timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS_DEFAULT
    compacted: bool = False  # cleanup.policy includes compact
    # compression.type: the codec batches are stored in; None keeps the producer's.
    compression: Compression | None = None
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT

    def __post_init__(self) -> None:
        assert self.timestamp_before_max_ms >= 0 and self.timestamp_after_max_ms >= 0
        assert self.decompressed_bytes_max > 0


#: Kafka's topic ``compression.type`` values and the codec each stores in.
COMPRESSION_TYPES: Final[dict[str, Compression | None]] = {
    "producer": None,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def compression_for(value: str | None) -> Compression | None:
    """The codec a ``compression.type`` value stores batches in (None: the producer's);
    an unknown value keeps the producer's (the controller refuses unknown values)."""
    return COMPRESSION_TYPES.get((value or "producer").strip().lower())


@dataclass(frozen=True, slots=True)
class ValidationSummary:
    batches: int
    records: int


def validate_client_batches(
    buf: bytes | bytearray | memoryview, *, now_ms: int, config: ValidationConfig
) -> ValidationSummary:
    """Check every batch of a producer's request; raise Kafka's error for the first bad
    one (see the module's table), else say how many batches and records there are."""
    view = memoryview(buf)
    end = len(view)
    if end == 0:
        raise InvalidRecordError("the produce request holds no record batch")
    pos = 0
    batches = records = 0
    while pos < end:
        size = peek_batch_size(view, pos)
        if size is None or size < HEADER_SIZE or pos + size > end:
            raise CorruptMessageError(f"record batch at byte {pos} is truncated or mis-sized")
        records += _validate_batch(view[pos : pos + size], pos, now_ms, config)
        batches += 1
        pos += size
    return ValidationSummary(batches, records)


def _validate_batch(batch: memoryview, pos: int, now_ms: int, config: ValidationConfig) -> int:
    header = parse_header(batch)
    where = f"record batch at byte {pos}"
    if header.magic != MAGIC_V2:
        raise CorruptMessageError(f"{where} has magic {header.magic}; only v2 is accepted")
    if header.batch_length + LOG_OVERHEAD != len(batch):
        raise CorruptMessageError(f"{where} has an inconsistent length")
    if not crc_valid(batch):
        raise CorruptMessageError(f"{where} fails its CRC-32C check")
    if header.attributes & CONTROL_BIT:
        raise InvalidRecordError(f"{where} is a control batch: clients may not write them")
    if header.attributes & TRANSACTIONAL_BIT and header.producer_id < 0:
        # A marker ends a producer's transaction: without a producer id none could.
        # (Whether the transaction may start here is producer state's and the
        # coordinator's question, asked by the leader: broker/txn_verification.py.)
        raise InvalidRecordError(f"{where} is transactional but has no producer id")
    count = header.records_count
    if count < 1 or count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where} holds {count} records but spans {header.last_offset_delta + 1} offsets"
        )
    codec_id = header.attributes & COMPRESSION_MASK
    try:
        codec = Compression(codec_id)
    except ValueError:
        raise CorruptMessageError(f"{where} names unknown codec {codec_id}") from None
    try:
        payload = decompress(
            codec,
            batch[HEADER_SIZE:],
            decompressed_bytes_max=config.decompressed_bytes_max,
        )
        # Offsets relative to 0 so that a record's offset is its offset delta.
        decoded = decode_records(payload, count, 0, header.base_timestamp)
    except CorruptMessageError as error:
        raise CorruptMessageError(f"{where}: {error}") from None
    except Exception as error:  # a codec library's own error on garbage input
        raise CorruptMessageError(f"{where} does not decompress: {error}") from None
    create_time = not config.log_append_time and not header.attributes & TIMESTAMP_TYPE_BIT
    low = now_ms - config.timestamp_before_max_ms
    high = now_ms + config.timestamp_after_max_ms
    max_timestamp = header.max_timestamp
    for index, record in enumerate(decoded):
        if record.offset != index:
            raise InvalidRecordError(
                f"{where}: record {index} has offset delta {record.offset}, not {index}"
            )
        if config.compacted and record.key is None:
            raise InvalidRecordError(
                f"{where}: record {index} has no key; a compacted topic needs one"
            )
        if not create_time:
            continue
        timestamp = record.timestamp_ms
        if timestamp > max_timestamp:
            raise InvalidRecordError(
                f"{where}: record {index} has timestamp {timestamp} above the batch's "
                f"maxTimestamp {max_timestamp}"
            )
        if timestamp != NO_TIMESTAMP and not low <= timestamp <= high:
            raise InvalidTimestampError(
                f"{where}: record {index} has timestamp {timestamp}, outside "
                f"[{low}, {high}] (message.timestamp.before.max.ms / after.max.ms)"
            )
    return count


def recompress(buf: bytes, codec: Compression) -> bytes:
    """``buf``'s batches, each in ``codec`` (a batch already in it is kept byte for
    byte). Call after :func:`validate_client_batches` accepted ``buf``."""
    out: list[bytes] = []
    view = memoryview(buf)
    pos, end = 0, len(view)
    changed = False
    while pos < end:
        size = peek_batch_size(view, pos)
        assert size is not None and pos + size <= end, "validate before recompressing"
        batch = view[pos : pos + size]
        header = parse_header(batch)
        if header.compression is codec:
            out.append(bytes(batch))
        else:
            changed = True
            payload = decompress(header.compression, batch[HEADER_SIZE:])
            decoded = decode_records(payload, header.records_count, 0, header.base_timestamp)
            out.append(
                build_batch(
                    [Record(r.value, r.key, r.timestamp_ms, r.headers) for r in decoded],
                    compression=codec,
                    timestamp_type=header.timestamp_type,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    base_sequence=header.base_sequence,
                    is_transactional=header.is_transactional,
                )
            )
        pos += size
    return b"".join(out) if changed else buf
