"""The __consumer_offsets record formats: round trips, the key layout, strict decoding."""

from __future__ import annotations

import struct

import orjson
import pytest

from raftka.broker.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    group_metadata_record,
    offset_commit_record,
)

GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation=4,
    protocol="range",
    leader="c-1",
    current_state_timestamp_ms=1234,
    members=(
        MemberMetadataValue(
            member_id="c-1",
            group_instance_id="i-1",
            client_id="c",
            client_host="/10.0.0.1",
            rebalance_timeout_ms=60_000,
            session_timeout_ms=10_000,
            subscription=b"\x00\x01topics",
            assignment=b"\xff\x00",
        ),
    ),
)


def test_keys_round_trip_and_use_kafkas_layout() -> None:
    """Offset keys are version 1 + group + topic + int32 partition, group keys version 2 +
    group (int16-length strings, big-endian); both decode back and expose the group id."""
    key = OffsetCommitKey("grp", "t\u00e9", 7)
    raw = encode_key(key)
    topic = "t\u00e9".encode()
    assert raw == struct.pack(">hh", 1, 3) + b"grp" + struct.pack(">h", 3) + topic + b"\0\0\0\7"
    assert decode_key(raw) == key
    gkey = GroupMetadataKey("grp")
    assert encode_key(gkey) == struct.pack(">hh", 2, 3) + b"grp"
    assert decode_key(encode_key(gkey)).group_id == "grp"
    # Version 0 offset keys have the same layout and are read too.
    assert decode_key(struct.pack(">h", 0) + raw[2:]) == key


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        struct.pack(">hh", 3, 1) + b"g",  # unknown version
        struct.pack(">hh", 2, 5) + b"g",  # string longer than the bytes
        struct.pack(">hh", 2, 1) + b"g" + b"x",  # trailing bytes
        struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + b"\0",  # short int32
        struct.pack(">hh", 2, 1) + b"\xff",  # not UTF-8
    ],
)
def test_bad_keys_raise(raw: bytes) -> None:
    """Truncated, trailing, unknown-version and non-UTF-8 keys raise OffsetsRecordError."""
    with pytest.raises(OffsetsRecordError):
        decode_key(raw)


def test_values_round_trip() -> None:
    """Offset and group values (with bytes, None fields, unicode) survive encode/decode."""
    offset = OffsetCommitValue(5, 3, "m\u00e9ta", 99, None)
    assert decode_offset_commit_value(encode_offset_commit_value(offset)) == offset
    offset2 = OffsetCommitValue(5, -1, "", 99, 1000)
    assert decode_offset_commit_value(encode_offset_commit_value(offset2)) == offset2
    assert decode_group_metadata_value(encode_group_metadata_value(GROUP)) == GROUP
    empty = GroupMetadataValue(None, 0, None, None, None, ())
    assert decode_group_metadata_value(encode_group_metadata_value(empty)) == empty


def test_values_are_strict() -> None:
    """A newer version, a bool for an int, a missing field or bad base64 is refused; a
    missing optional field reads as its default."""
    good = orjson.loads(encode_offset_commit_value(OffsetCommitValue(5, 3, "", 9, None)))
    for change in (
        {"version": 1},
        {"offset": True},
        {"metadata": 3},
    ):
        with pytest.raises(OffsetsRecordError):
            decode_offset_commit_value(orjson.dumps({**good, **change}))
    missing = {k: v for k, v in good.items() if k != "offset"}
    with pytest.raises(OffsetsRecordError):
        decode_offset_commit_value(orjson.dumps(missing))
    optional_gone = {k: v for k, v in good.items() if k != "expire_timestamp_ms"}
    assert decode_offset_commit_value(orjson.dumps(optional_gone)).expire_timestamp_ms is None
    with pytest.raises(OffsetsRecordError):
        decode_offset_commit_value(b"not json")
    group = orjson.loads(encode_group_metadata_value(GROUP))
    group["members"][0]["assignment"] = "***"
    with pytest.raises(OffsetsRecordError):
        decode_group_metadata_value(orjson.dumps(group))
    with pytest.raises(OffsetsRecordError):
        decode_group_metadata_value(orjson.dumps({**group, "members": [1]}))


def test_records_and_tombstones() -> None:
    """offset_commit_record / group_metadata_record carry the key bytes, and a None value
    is a tombstone."""
    record = offset_commit_record(OffsetCommitKey("g", "t", 0), None)
    assert record.value is None and decode_key(record.key) == OffsetCommitKey("g", "t", 0)
    record = group_metadata_record(GroupMetadataKey("g"), GROUP)
    assert record.value is not None
    assert decode_group_metadata_value(record.value) == GROUP
