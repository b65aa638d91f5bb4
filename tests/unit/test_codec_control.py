"""Control records (transaction markers): key and value layouts by hand, build/parse,
and interop with kafka-python's ControlRecord reader."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from raftka.common.errors import CorruptMessageError
from raftka.common.record import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    build_batch,
    build_end_transaction_batch,
    decode_batch,
    end_transaction_marker,
    parse_control_key,
    parse_end_transaction_marker,
)
from raftka.common.record.control import encode_end_transaction_marker


def test_marker_bytes_by_hand() -> None:
    """COMMIT with coordinator epoch 258: key 0000 0001 (version 0, type 1); value
    0000 00000102 (version 0, epoch 258)."""
    key, value = encode_end_transaction_marker(EndTransactionMarker(ControlRecordType.COMMIT, 258))
    assert key.hex() == "00000001"
    assert value.hex() == "000000000102"
    abort_key, _ = encode_end_transaction_marker(EndTransactionMarker(ControlRecordType.ABORT, 0))
    assert abort_key.hex() == "00000000"


@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_end_transaction_batch_round_trip(control_type: ControlRecordType) -> None:
    """A marker batch has the control and transactional bits, the producer's id and
    epoch, no sequence, and parses back to the same marker."""
    marker = EndTransactionMarker(control_type, coordinator_epoch=17)
    buf = build_end_transaction_batch(
        marker, producer_id=55, producer_epoch=3, timestamp_ms=1234, base_offset=9
    )
    batch = decode_batch(buf)
    h = batch.header
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (55, 3, -1)
    assert end_transaction_marker(batch) == marker
    assert batch.records[0].offset == 9


@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_kafka_python_reads_our_marker(control_type: ControlRecordType) -> None:
    """kafka-python's reader sees our batch as a control batch whose ControlRecord has
    the right type."""
    buf = build_end_transaction_batch(
        EndTransactionMarker(control_type, 1), producer_id=1, producer_epoch=0, timestamp_ms=0
    )
    theirs = DefaultRecordBatch(bytearray(buf))
    assert theirs.validate_crc() and theirs.is_control_batch
    (record,) = list(theirs)
    assert record.type == int(control_type)
    assert record.commit is (control_type is ControlRecordType.COMMIT)


def test_non_control_batch_has_no_marker() -> None:
    """end_transaction_marker of an ordinary batch is None."""
    assert end_transaction_marker(decode_batch(build_batch([Record(b"x")]))) is None


def test_kraft_control_type_is_not_a_marker_and_unknown_type_reads_unknown() -> None:
    """A LEADER_CHANGE control record is recognised but is not a marker; type 99 reads
    as UNKNOWN rather than failing (forward compatibility, as Kafka does)."""
    buf = build_batch([Record(b"\x00\x00", key=b"\x00\x00\x00\x02")], is_control=True)
    assert end_transaction_marker(decode_batch(buf)) is None
    assert parse_control_key(b"\x00\x00\x00\x02") is ControlRecordType.LEADER_CHANGE
    assert parse_control_key(b"\x00\x01\x00\x63") is ControlRecordType.UNKNOWN


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),  # key too short
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),  # negative version
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x01"),  # value too short
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # LEADER_CHANGE: not a marker
    ],
)
def test_malformed_markers_raise(key: bytes | None, value: bytes | None) -> None:
    """Malformed or wrong-type control records raise CorruptMessageError."""
    with pytest.raises(CorruptMessageError):
        parse_end_transaction_marker(key, value)


def test_newer_marker_version_reads_its_version_zero_fields() -> None:
    """A version-1 marker value with extra trailing bytes still yields its epoch."""
    marker = parse_end_transaction_marker(b"\x00\x00\x00\x00", b"\x00\x01\x00\x00\x00\x07extra")
    assert marker == EndTransactionMarker(ControlRecordType.ABORT, 7)


def test_marker_type_must_be_abort_or_commit() -> None:
    """EndTransactionMarker refuses a type other than ABORT or COMMIT."""
    with pytest.raises(ValueError, match="ABORT or COMMIT"):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 0)
