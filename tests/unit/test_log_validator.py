"""The leader's validation of a producer's batches (Kafka's LogValidator).

Each test builds a batch with the real codec, breaks exactly one thing (re-computing the
CRC where the point is that a right CRC is not enough) and checks Kafka's error name;
valid batches of every codec pass and report their counts.
"""

from __future__ import annotations

import struct

import pytest

from raftka.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
)
from raftka.common.record import Compression, Record, build_batch
from raftka.common.record.header import CRC_OFFSET, HEADER_SIZE, compute_crc
from raftka.common.record.varint import encode_varint, encode_varlong
from raftka.storage.log_validator import ValidationConfig, validate_client_batches

NOW = 1_700_000_000_000
CONFIG = ValidationConfig()


def records(n: int, *, ts: int = NOW, key: bytes | None = b"k") -> list[Record]:
    return [Record(b"v%d" % i, key, ts + i, ()) for i in range(n)]


def recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def raw_record(offset_delta: int, ts_delta: int = 0, key: bytes = b"k") -> bytes:
    body = (
        b"\x00"
        + encode_varlong(ts_delta)
        + encode_varint(offset_delta)
        + encode_varint(len(key))
        + key
        + encode_varint(1)
        + b"v"
        + encode_varint(0)
    )
    return encode_varint(len(body)) + body


def with_payload(template: bytes, payload: bytes, count: int) -> bytes:
    """The header of ``template`` over another records section, lengths and CRC fixed."""
    buf = bytearray(template[:HEADER_SIZE] + payload)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", buf, 57, count)
    return recrc(buf)


def error_of(buf: bytes, config: ValidationConfig = CONFIG) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        validate_client_batches(buf, now_ms=NOW, config=config)
    return info.value


@pytest.mark.parametrize("codec", list(Compression))
def test_valid_batches_of_every_codec_pass(codec: Compression) -> None:
    two = build_batch(records(3), compression=codec) + build_batch(records(2), compression=codec)
    summary = validate_client_batches(two, now_ms=NOW, config=CONFIG)
    assert (summary.batches, summary.records) == (2, 5)


def test_a_control_batch_from_a_client_is_invalid_record() -> None:
    batch = build_batch(records(1), is_control=True)
    error = error_of(batch)
    assert isinstance(error, InvalidRecordError)
    assert "control batch" in str(error)


def test_a_transactional_batch_is_accepted_with_a_producer_id() -> None:
    """Whether it may open a transaction is producer state's and the coordinator's
    question (the leader asks them); the validator only checks its shape."""
    batch = build_batch(records(2), producer_id=5, producer_epoch=0, is_transactional=True)
    assert validate_client_batches(batch, now_ms=NOW, config=CONFIG).records == 2


def test_a_transactional_batch_without_a_producer_id_is_invalid_record() -> None:
    """No marker could end its transaction."""
    batch = build_batch(records(1), is_transactional=True)
    error = error_of(batch)
    assert isinstance(error, InvalidRecordError)
    assert "no producer id" in str(error)


def test_garbage_gzip_with_a_right_crc_is_corrupt_message() -> None:
    """The issue's case: the CRC covers the garbage, so only decoding finds it."""
    template = build_batch(records(2), compression=Compression.GZIP)
    buf = with_payload(template, b"\x1f\x8b" + b"garbage-not-deflate" * 4, 2)
    error = error_of(buf)
    assert isinstance(error, CorruptMessageError)
    assert "byte 0" in str(error)


def test_a_wrong_crc_is_corrupt_message() -> None:
    buf = bytearray(build_batch(records(2)))
    buf[-1] ^= 0xFF
    assert isinstance(error_of(bytes(buf)), CorruptMessageError)


def test_a_record_count_that_does_not_match_the_offsets_is_invalid_record() -> None:
    buf = bytearray(build_batch(records(3)))
    struct.pack_into(">i", buf, 57, 2)  # recordsCount 2, lastOffsetDelta still 2
    assert isinstance(error_of(recrc(buf)), InvalidRecordError)


def test_offset_deltas_out_of_order_are_invalid_record() -> None:
    template = build_batch(records(2))
    payload = raw_record(0) + raw_record(5)
    error = error_of(with_payload(template, payload, 2))
    assert isinstance(error, InvalidRecordError)
    assert "offset delta 5" in str(error)


def test_records_that_do_not_fill_the_batch_are_corrupt_message() -> None:
    template = build_batch(records(2))
    payload = raw_record(0) + raw_record(1) + b"\x00\x00"
    assert isinstance(error_of(with_payload(template, payload, 2)), CorruptMessageError)


def test_a_timestamp_above_max_timestamp_is_invalid_record() -> None:
    buf = bytearray(build_batch(records(2)))
    struct.pack_into(">q", buf, 35, NOW - 10)  # maxTimestamp below the records'
    assert isinstance(error_of(recrc(buf)), InvalidRecordError)


def test_timestamps_outside_the_configured_window_are_invalid_timestamp() -> None:
    config = ValidationConfig(timestamp_before_max_ms=60_000, timestamp_after_max_ms=1_000)
    old = build_batch(records(1, ts=NOW - 60_001))
    future = build_batch(records(1, ts=NOW + 1_001))
    assert isinstance(error_of(old, config), InvalidTimestampError)
    assert isinstance(error_of(future, config), InvalidTimestampError)
    # On the bounds themselves: accepted.
    edge = build_batch(records(1, ts=NOW - 60_000)) + build_batch(records(1, ts=NOW + 1_000))
    assert validate_client_batches(edge, now_ms=NOW, config=config).records == 2
    # LogAppendTime topics overwrite the timestamp: no window applies.
    stamped = ValidationConfig(log_append_time=True, timestamp_after_max_ms=0)
    assert validate_client_batches(future, now_ms=NOW, config=stamped).records == 1


def test_kafka_default_window_refuses_records_over_an_hour_ahead() -> None:
    ahead = build_batch(records(1, ts=NOW + 3_600_001))
    assert isinstance(error_of(ahead), InvalidTimestampError)
    ancient = build_batch(records(1, ts=0))
    assert validate_client_batches(ancient, now_ms=NOW, config=CONFIG).records == 1


def test_a_compacted_topic_refuses_a_record_without_a_key() -> None:
    keyless = build_batch(records(2, key=None))
    compacted = ValidationConfig(compacted=True)
    error = error_of(keyless, compacted)
    assert isinstance(error, InvalidRecordError)
    assert "no key" in str(error)
    assert validate_client_batches(keyless, now_ms=NOW, config=CONFIG).records == 2


def test_a_bad_second_batch_fails_the_whole_request_naming_its_position() -> None:
    good = build_batch(records(2))
    bad = build_batch(records(1), is_control=True)
    error = error_of(good + bad)
    assert f"byte {len(good)}" in str(error)


@pytest.mark.parametrize("cut", [0, 1, 11, 60, -1])
def test_truncated_or_empty_input_is_refused(cut: int) -> None:
    batch = build_batch(records(2))
    error = error_of(batch[:cut])
    assert isinstance(error, CorruptMessageError | InvalidRecordError)


@pytest.mark.parametrize("target", list(Compression))
def test_recompress_stores_every_record_and_producer_field_in_the_topic_codec(
    target: Compression,
) -> None:
    """A topic's compression.type re-encodes a batch in another codec and keeps its
    records, producer id/epoch/sequence and transactional flag; a batch already in the
    codec is kept byte for byte."""
    from raftka.common.record import decode_batches
    from raftka.storage.log_validator import recompress

    original = build_batch(
        [Record(b"v1", b"k1", NOW, (("h", b"x"),)), Record(None, b"k2", NOW + 5, ())],
        compression=Compression.GZIP,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
    ) + build_batch(records(2), compression=target)
    out = recompress(original, target)
    before = list(decode_batches(original))
    after = list(decode_batches(out))
    assert [b.header.compression for b in after] == [target, target]
    for old, new in zip(before, after, strict=True):
        assert new.records == old.records
        h0, h1 = old.header, new.header
        assert (h1.producer_id, h1.producer_epoch, h1.base_sequence, h1.is_transactional) == (
            h0.producer_id,
            h0.producer_epoch,
            h0.base_sequence,
            h0.is_transactional,
        )
        assert h1.last_offset_delta == h0.last_offset_delta
    assert out.endswith(build_batch(records(2), compression=target))
    if target is Compression.GZIP:
        assert out is original
