"""Cross-compatibility with kafka-python's own RecordBatch v2 code, both directions,
for every codec: an independent implementation of the same format."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftka.common.record import Compression, Record, build_batch, decode_batch

RECORDS = [
    Record(value=b"v0" * 60, key=b"k0", timestamp_ms=1_700_000_000_000),
    Record(value=None, key=None, timestamp_ms=1_699_999_999_000),  # negative delta
    Record(value=b"", key=b"", timestamp_ms=1_700_000_000_500),
    Record(
        value=b"\x00\xff" * 5000,
        key=b"k3",
        timestamp_ms=1_700_000_000_100,
        headers=(("trace", b"abc"), ("nullable", None), ("\u00fcml", b"")),
    ),
    *[Record(value=bytes([i]) * 100, timestamp_ms=1_700_000_000_000 + i) for i in range(200)],
]


def _kafka_python_batch(codec: Compression, *, transactional: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=1234 if transactional else -1,
        producer_epoch=5 if transactional else -1,
        base_sequence=77 if transactional else -1,
        batch_size=2**24,
    )
    for offset, r in enumerate(RECORDS):
        meta = builder.append(offset, r.timestamp_ms, r.key, r.value, list(r.headers))
        assert meta is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("transactional", [False, True])
def test_raftka_reads_kafka_python(codec: Compression, transactional: bool) -> None:
    """A batch built by kafka-python's DefaultRecordBatchBuilder decodes with raftka to
    the same records and header fields, CRC checked."""
    buf = _kafka_python_batch(codec, transactional=transactional)
    batch = decode_batch(buf)
    h = batch.header
    assert h.compression is codec
    assert h.is_transactional is transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        (1234, 5, 77) if transactional else (-1, -1, -1)
    )
    assert h.base_timestamp == RECORDS[0].timestamp_ms
    assert h.max_timestamp == max(r.timestamp_ms for r in RECORDS)
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in batch.records] == [
        (i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_raftka(codec: Compression) -> None:
    """A batch built by raftka validates (CRC) and reads back with kafka-python's
    DefaultRecordBatch: same header fields and records."""
    buf = build_batch(
        RECORDS,
        base_offset=1000,
        compression=codec,
        producer_id=99,
        producer_epoch=1,
        base_sequence=10,
        partition_leader_epoch=4,
        is_transactional=True,
    )
    theirs = DefaultRecordBatch(bytearray(buf))
    assert theirs.validate_crc()
    assert theirs.compression_type == int(codec)
    assert (theirs.base_offset, theirs.leader_epoch, theirs.producer_id) == (1000, 4, 99)
    assert (theirs.producer_epoch, theirs.base_sequence) == (1, 10)
    assert theirs.is_transactional and not theirs.is_control_batch
    assert theirs.first_timestamp == RECORDS[0].timestamp_ms
    assert theirs.max_timestamp == max(r.timestamp_ms for r in RECORDS)
    assert theirs.last_offset_delta == len(RECORDS) - 1
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == [
        (1000 + i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_same_bytes_as_kafka_python_before_compression(codec: Compression) -> None:
    """Uncompressed, the two encoders agree byte for byte on the records section (both
    take the first record's timestamp as the base); compressed, they agree after
    decompression."""
    ours = decode_batch(build_batch(RECORDS, compression=codec))
    theirs = decode_batch(_kafka_python_batch(codec, transactional=False))
    assert ours.records == theirs.records
    if codec is Compression.NONE:
        assert (
            build_batch(RECORDS, partition_leader_epoch=0)[61:]
            == _kafka_python_batch(codec, transactional=False)[61:]
        )
