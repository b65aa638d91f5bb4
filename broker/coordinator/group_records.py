"""The record formats of the internal topic ``__consumer_offsets``.

Theory of operation
-------------------
The group coordinator keeps two kinds of state in its ``__consumer_offsets`` partition,
each as a keyed record so that log compaction keeps only the latest value per key and a
replay of the partition rebuilds the coordinator's memory:

* an **offset commit**: key (group, topic, partition), value (offset, leader epoch,
  metadata, commit timestamp, optional expire timestamp);
* a **group metadata** record: key (group), value (protocol type, generation, protocol,
  leader, state timestamp, members with their subscription and assignment).

A record whose value is ``None`` is a tombstone: it deletes the key on replay.

Keys are a fixed binary layout, so that one logical key always has exactly one byte
string (compaction and "latest value per key" compare key bytes)::

    int16 version | string group [| string topic | int32 partition]
    string = int16 byte length, then UTF-8 bytes        (big-endian throughout)

Key version 0 and 1 are offset-commit keys, version 2 is a group-metadata key, as in
Kafka, so a reader tells the two apart by the first two bytes. We write version 1 for
offset keys and read 0 or 1 (identical layout).

Values are JSON objects (orjson) carrying their own ``"version"``; byte fields
(subscription and assignment) are base64 text. JSON keeps values readable in a log dump
and lets a later version add fields: a reader takes a missing optional field as its
default and rejects a version above the one it writes. Decoding is strict otherwise
(wrong types, missing required fields, trailing key bytes), raising
:class:`OffsetsRecordError`, never a bare ``KeyError``/``struct.error``.

Every key exposes ``group_id``: the partition a record belongs to is a function of the
group id alone (the placement formula lives with the broker).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, TypeAlias

import orjson

from raftka.common.errors import CorruptMessageError

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsKey",
    "OffsetsRecord",
    "OffsetsRecordError",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "group_metadata_record",
    "offset_commit_record",
]

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 0
GROUP_METADATA_VALUE_VERSION: Final = 0

# An int16 length prefix bounds every key string.
_STRING_BYTES_MAX: Final = 0x7FFF
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


class OffsetsRecordError(CorruptMessageError):
    """A ``__consumer_offsets`` key or value that does not decode (Kafka's
    CORRUPT_MESSAGE: the bytes in the log are not what a coordinator writes)."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


OffsetsKey: TypeAlias = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset. ``leader_epoch`` -1 means unknown; ``expire_timestamp_ms`` is
    set only when the commit asked for its own retention (OffsetCommit v2-v4)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """One member as stored: ``subscription`` is its metadata for the group's chosen
    protocol, ``assignment`` what the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A group as stored after a rebalance (or when it became empty).

    ``protocol_type`` is None for a group that never had members (only manual offset
    commits). ``current_state_timestamp_ms`` is when the group entered its current
    state; offsets retention of an empty group counts from it.
    """

    protocol_type: str | None
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberMetadataValue, ...]


@dataclass(frozen=True, slots=True)
class OffsetsRecord:
    """A key/value record of ``__consumer_offsets`` as it is appended (value None is a
    tombstone)."""

    key: bytes
    value: bytes | None


# -- keys ------------------------------------------------------------------------------


def _put_string(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    if len(raw) > _STRING_BYTES_MAX:
        raise OffsetsRecordError(f"key string of {len(raw)} bytes exceeds {_STRING_BYTES_MAX}")
    out += _INT16.pack(len(raw))
    out += raw


def _take_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(data):
        raise OffsetsRecordError("key truncated in a string length")
    (length,) = _INT16.unpack_from(data, pos)
    pos += 2
    if length < 0 or pos + length > len(data):
        raise OffsetsRecordError(f"key string length {length} out of range")
    try:
        text = data[pos : pos + length].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OffsetsRecordError(f"key string is not UTF-8: {exc}") from None
    return text, pos + length


def encode_key(key: OffsetsKey) -> bytes:
    """The canonical key bytes of an offset-commit or group-metadata key."""
    out = bytearray()
    if isinstance(key, OffsetCommitKey):
        if not -(2**31) <= key.partition < 2**31:
            raise OffsetsRecordError(f"partition {key.partition} is not an int32")
        out += _INT16.pack(OFFSET_COMMIT_KEY_VERSION)
        _put_string(out, key.group_id)
        _put_string(out, key.topic)
        out += _INT32.pack(key.partition)
    else:
        out += _INT16.pack(GROUP_METADATA_KEY_VERSION)
        _put_string(out, key.group_id)
    return bytes(out)


def decode_key(data: bytes) -> OffsetsKey:
    """The key that ``encode_key`` wrote; raises OffsetsRecordError otherwise."""
    if len(data) < 2:
        raise OffsetsRecordError("key shorter than its version")
    (version,) = _INT16.unpack_from(data, 0)
    group_id, pos = _take_string(data, 2)
    key: OffsetsKey
    if version in (0, 1):
        topic, pos = _take_string(data, pos)
        if pos + 4 > len(data):
            raise OffsetsRecordError("offset key truncated in its partition")
        (partition,) = _INT32.unpack_from(data, pos)
        pos += 4
        key = OffsetCommitKey(group_id=group_id, topic=topic, partition=partition)
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(group_id=group_id)
    else:
        raise OffsetsRecordError(f"unknown key version {version}")
    if pos != len(data):
        raise OffsetsRecordError(f"{len(data) - pos} trailing bytes after the key")
    return key


# -- values ----------------------------------------------------------------------------


def _field(obj: Mapping[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    if name not in obj:
        if optional:
            return None
        raise OffsetsRecordError(f"value lacks field {name!r}")
    value = obj[name]
    if value is None and optional:
        return None
    # bool is an int in Python; a stored int field must never be a JSON true/false.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise OffsetsRecordError(f"field {name!r} is {type(value).__name__}, not {kind.__name__}")
    return value


def _load_object(data: bytes, version_max: int, what: str) -> Mapping[str, Any]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise OffsetsRecordError(f"{what} value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise OffsetsRecordError(f"{what} value is not a JSON object")
    version = _field(obj, "version", int)
    if not 0 <= version <= version_max:
        raise OffsetsRecordError(f"{what} value version {version} is not supported")
    return obj


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(obj: Mapping[str, Any], name: str) -> bytes:
    text = _field(obj, name, str)
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise OffsetsRecordError(f"field {name!r} is not base64: {exc}") from None


def _as_object(
    value: OffsetCommitValue | GroupMetadataValue | MemberMetadataValue,
) -> dict[str, Any]:
    """A stored value's fields as its JSON object has them, by the same names and in
    the same order (not recursive: nested values are the caller's)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    return orjson.dumps({"version": OFFSET_COMMIT_VALUE_VERSION, **_as_object(value)})


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    obj = _load_object(data, OFFSET_COMMIT_VALUE_VERSION, "offset commit")
    return OffsetCommitValue(
        offset=_field(obj, "offset", int),
        leader_epoch=_field(obj, "leader_epoch", int),
        metadata=_field(obj, "metadata", str),
        commit_timestamp_ms=_field(obj, "commit_timestamp_ms", int),
        expire_timestamp_ms=_field(obj, "expire_timestamp_ms", int, optional=True),
    )


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    return orjson.dumps(
        {
            "version": GROUP_METADATA_VALUE_VERSION,
            **_as_object(value),
            # Bytes are stored as base64 strings (JSON has no bytes).
            "members": [
                {
                    **_as_object(m),
                    "subscription": _b64(m.subscription),
                    "assignment": _b64(m.assignment),
                }
                for m in value.members
            ],
        }
    )


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    obj = _load_object(data, GROUP_METADATA_VALUE_VERSION, "group metadata")
    members = []
    for raw in _field(obj, "members", list):
        if not isinstance(raw, dict):
            raise OffsetsRecordError("a group member is not a JSON object")
        members.append(
            MemberMetadataValue(
                member_id=_field(raw, "member_id", str),
                group_instance_id=_field(raw, "group_instance_id", str, optional=True),
                client_id=_field(raw, "client_id", str),
                client_host=_field(raw, "client_host", str),
                rebalance_timeout_ms=_field(raw, "rebalance_timeout_ms", int),
                session_timeout_ms=_field(raw, "session_timeout_ms", int),
                subscription=_unb64(raw, "subscription"),
                assignment=_unb64(raw, "assignment"),
            )
        )
    return GroupMetadataValue(
        protocol_type=_field(obj, "protocol_type", str, optional=True),
        generation=_field(obj, "generation", int),
        protocol=_field(obj, "protocol", str, optional=True),
        leader=_field(obj, "leader", str, optional=True),
        current_state_timestamp_ms=_field(obj, "current_state_timestamp_ms", int, optional=True),
        members=tuple(members),
    )


def offset_commit_record(key: OffsetCommitKey, value: OffsetCommitValue | None) -> OffsetsRecord:
    """The record to append for a commit (or, with None, the tombstone deleting it)."""
    return OffsetsRecord(
        key=encode_key(key),
        value=None if value is None else encode_offset_commit_value(value),
    )


def group_metadata_record(key: GroupMetadataKey, value: GroupMetadataValue | None) -> OffsetsRecord:
    """The record to append for a group's metadata (None: the group's tombstone)."""
    return OffsetsRecord(
        key=encode_key(key),
        value=None if value is None else encode_group_metadata_value(value),
    )
