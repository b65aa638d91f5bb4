"""RecordBatch v2 encode/decode: byte layout, attribute bits, edge records, corruption.

Vectors are written out by hand from the layout in raftka.common.record.batch; the
CRC is checked against crc32c's published test vector and then the library itself.
"""

from __future__ import annotations

import struct

import crc32c
import pytest

from raftka.common.errors import CorruptMessageError
from raftka.common.record import (
    Compression,
    DecodedRecord,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_batches,
    iter_records,
    parse_header,
)
from raftka.common.record.header import compute_crc


def _recrc(buf: bytearray) -> bytes:
    """Restamp the CRC after a deliberate edit, so only the edit is under test."""
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_one_record_batch_bytes_by_hand() -> None:
    """A one-record batch encodes to exactly the bytes the layout table gives."""
    batch = build_batch(
        [Record(value=b"v", key=b"k", timestamp_ms=1000)],
        base_offset=5,
        producer_id=7,
        producer_epoch=2,
        base_sequence=9,
        partition_leader_epoch=3,
    )
    # record: attributes 0, tsDelta 0, offsetDelta 0, key len 1 -> 02 'k', value len 1
    # -> 02 'v', 0 headers; 8 bytes, so the length varint is zig-zag(8) = 0x10.
    record = bytes.fromhex("10000000026b027600")
    after_crc = bytes.fromhex(
        "0000"  # attributes
        "00000000"  # lastOffsetDelta
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003e8"  # maxTimestamp
        "0000000000000007"  # producerId
        "0002"  # producerEpoch
        "00000009"  # baseSequence
        "00000001"  # recordsCount
    )
    crc = crc32c.crc32c(after_crc + record)
    expected = (
        bytes.fromhex("00000000000000050000003a0000000302")  # batchLength 70-12
        + struct.pack(">I", crc)
        + after_crc
        + record
    )
    assert batch == expected
    decoded = decode_batch(batch)
    assert decoded.records == (DecodedRecord(5, 1000, b"k", b"v", ()),)
    assert decoded.header.crc == crc


def test_crc32c_library_vector() -> None:
    """The CRC library is CRC-32C (Castagnoli): its check value for '123456789' is
    0xE3069283 (plain CRC-32 would give 0xCBF43926)."""
    assert crc32c.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize(
    ("kwargs", "attributes", "prop"),
    [
        ({"compression": Compression.GZIP}, 0x0001, "compression"),
        ({"compression": Compression.SNAPPY}, 0x0002, "compression"),
        ({"compression": Compression.LZ4}, 0x0003, "compression"),
        ({"compression": Compression.ZSTD}, 0x0004, "compression"),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME}, 0x0008, "timestamp_type"),
        ({"is_transactional": True, "producer_id": 1, "producer_epoch": 0}, 0x0010, None),
        ({"is_control": True}, 0x0020, None),
    ],
)
def test_attribute_bits(kwargs: dict[str, object], attributes: int, prop: str | None) -> None:
    """Each option sets exactly its attribute bit at bytes 21-22, the header reads it
    back, and the batch still decodes."""
    batch = build_batch([Record(value=b"x")], **kwargs)  # type: ignore[arg-type]
    assert struct.unpack_from(">h", batch, 21)[0] == attributes
    header = parse_header(batch)
    assert header.is_transactional == bool(attributes & 0x10)
    assert header.is_control == bool(attributes & 0x20)
    if prop is not None:
        assert getattr(header, prop) == next(iter(kwargs.values()))
    assert decode_batch(batch).records[0].value == b"x"


def test_null_key_value_empty_value_and_null_header_value() -> None:
    """Null key and value encode as varint -1, an empty value as length 0, and a header
    value of None survives; all read back as written."""
    records = [
        Record(value=None, key=None),
        Record(value=b"", key=b""),
        Record(value=b"v", headers=(("h", None), ("", b""), ("\u00e9", b"\x00"))),
    ]
    batch = build_batch(records)
    # first record body: attrs 00, ts 00, offset 00, key 01 (-1), value 01 (-1), 00
    assert batch[61:68] == bytes.fromhex("0c000000010100")
    got = decode_batch(batch).records
    assert [(r.key, r.value, r.headers) for r in got] == [
        (None, None, ()),
        (b"", b"", ()),
        (None, b"v", (("h", None), ("", b""), ("\u00e9", b"\x00"))),
    ]


def test_base_timestamp_is_first_record_and_deltas_may_be_negative() -> None:
    """As Java's producer does: baseTimestamp is the first record's, a later smaller
    timestamp gets a negative delta (-500 zig-zags to 999 = e7 07), maxTimestamp is the
    largest."""
    batch = build_batch(
        [
            Record(b"a", timestamp_ms=1000),
            Record(b"b", timestamp_ms=500),
            Record(b"c", timestamp_ms=2000),
        ]
    )
    header = parse_header(batch)
    assert (header.base_timestamp, header.max_timestamp) == (1000, 2000)
    first_len = batch[61] >> 1  # one-byte length varint: zig-zag halves it
    second = batch[61 + 1 + first_len :]  # length, attributes, then tsDelta
    assert second[2:4] == bytes.fromhex("e707")
    assert [r.timestamp_ms for r in decode_batch(batch).records] == [1000, 500, 2000]


def test_log_append_time_batch_reads_max_timestamp() -> None:
    """In a LOG_APPEND_TIME batch every record reads back with maxTimestamp, as Kafka's
    clients do."""
    batch = build_batch(
        [Record(b"a", timestamp_ms=1), Record(b"b", timestamp_ms=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert [r.timestamp_ms for r in decode_batch(batch).records] == [9, 9]


def test_absolute_offsets_and_producer_fields() -> None:
    """Records carry baseOffset + offsetDelta; producer fields and last offset land in
    the header."""
    batch = build_batch(
        [Record(b"a"), Record(b"b"), Record(b"c")],
        base_offset=100,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
    )
    decoded = decode_batch(batch)
    assert [r.offset for r in decoded.records] == [100, 101, 102]
    h = decoded.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 7)
    assert (h.last_offset_delta, h.records_count, h.last_sequence) == (2, 3, 9)


def test_empty_batch_is_refused() -> None:
    """build_batch with no records raises ValueError: Kafka never writes an empty batch
    from a producer."""
    with pytest.raises(ValueError, match="at least one"):
        build_batch([])


def test_corrupt_crc_raises() -> None:
    """Changing one byte of a record without fixing the CRC raises CorruptMessageError;
    check_crc=False skips the check and decodes the altered value."""
    buf = bytearray(build_batch([Record(value=b"hello")]))
    buf[-2] ^= 0x01  # the last value byte ('o'); the final byte is the header count
    with pytest.raises(CorruptMessageError, match="CRC"):
        decode_batch(buf)
    assert decode_batch(buf, check_crc=False).records[0].value == b"helln"


@pytest.mark.parametrize("cut", [1, 10, 60, 70])
def test_truncated_batch_raises(cut: int) -> None:
    """A batch missing its last ``cut`` bytes raises CorruptMessageError in
    decode_batch."""
    batch = build_batch([Record(value=b"x" * 20)])
    with pytest.raises(CorruptMessageError):
        decode_batch(batch[: len(batch) - cut])


@pytest.mark.parametrize("delta", [-1, 1])
def test_record_length_that_lies_raises(delta: int) -> None:
    """A record whose length varint is one off (with a CRC that matches the lie) raises
    CorruptMessageError."""
    buf = bytearray(build_batch([Record(value=b"abc"), Record(value=b"def")]))
    buf[61] += 2 * delta  # zig-zag: +2 is +1 in length
    with pytest.raises(CorruptMessageError):
        decode_batch(_recrc(buf))


def test_record_count_that_lies_raises() -> None:
    """A recordsCount one more or one less than the records present raises."""
    for count in (1, 3):
        buf = bytearray(build_batch([Record(value=b"abc"), Record(value=b"def")]))
        struct.pack_into(">i", buf, 57, count)
        with pytest.raises(CorruptMessageError):
            decode_batch(_recrc(buf))


def test_negative_key_length_other_than_minus_one_raises() -> None:
    """A key length of -2 is not 'null' and raises CorruptMessageError."""
    buf = bytearray(build_batch([Record(value=b"abc", key=None)]))
    assert buf[65] == 0x01  # key length -1
    buf[65] = 0x03  # -2
    with pytest.raises(CorruptMessageError):
        decode_batch(_recrc(buf))


def test_unknown_codec_id_raises_corrupt() -> None:
    """Codec id 5 (unassigned) in the attributes raises CorruptMessageError."""
    buf = bytearray(build_batch([Record(value=b"abc")]))
    buf[22] = 0x05
    with pytest.raises(CorruptMessageError, match="codec"):
        decode_batch(_recrc(buf))


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_compressed_payload_raises(codec: Compression) -> None:
    """A batch whose compressed payload is garbage (CRC valid) raises
    CorruptMessageError for every codec."""
    buf = bytearray(build_batch([Record(value=b"abc" * 50)], compression=codec))
    for i in range(61, len(buf)):
        buf[i] = 0x5A
    with pytest.raises(CorruptMessageError):
        decode_batch(_recrc(buf))


def test_decode_batches_skips_trailing_partial_batch() -> None:
    """decode_batches and iter_records read whole batches and stop quietly at a
    trailing partial one (as a fetch response is cut), whatever the cut point."""
    one = build_batch([Record(b"a"), Record(b"b")], base_offset=0)
    two = build_batch([Record(b"c")], base_offset=2)
    three = build_batch([Record(b"d")], base_offset=3)
    for cut in (0, 1, 11, 12, 60, 61, len(three) - 1):
        buf = one + two + three[:cut]
        assert [b.header.base_offset for b in decode_batches(buf)] == [0, 2]
        assert [r.value for r in iter_records(buf)] == [b"a", b"b", b"c"]
    assert [r.offset for r in iter_records(one + two + three)] == [0, 1, 2, 3]


def test_decode_batches_raises_on_corrupt_whole_batch() -> None:
    """A whole batch in the middle that fails its CRC raises; it is not skipped."""
    bad = bytearray(build_batch([Record(b"b")], base_offset=1))
    bad[-1] ^= 0xFF
    buf = build_batch([Record(b"a")]) + bytes(bad) + build_batch([Record(b"c")], base_offset=2)
    with pytest.raises(CorruptMessageError):
        list(decode_batches(buf))


def test_iter_records_skips_control_batches() -> None:
    """iter_records leaves out control batches unless include_control is set."""
    buf = (
        build_batch([Record(b"a")], base_offset=0)
        + build_batch(
            [Record(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")],
            base_offset=1,
            is_control=True,
        )
        + build_batch([Record(b"c")], base_offset=2)
    )
    assert [r.offset for r in iter_records(buf)] == [0, 2]
    assert [r.offset for r in iter_records(buf, include_control=True)] == [0, 1, 2]


def test_decode_accepts_memoryview_and_ignores_trailing_bytes() -> None:
    """decode_batch reads a memoryview in place and ignores bytes after the batch."""
    batch = build_batch([Record(b"a", key=b"k")])
    got = decode_batch(memoryview(batch + b"junk"))
    assert got.records[0] == DecodedRecord(0, 0, b"k", b"a", ())
    assert type(got.records[0].value) is bytes
