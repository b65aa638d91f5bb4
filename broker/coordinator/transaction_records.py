"""The record format of the internal topic ``__transaction_state``.

Theory of operation
-------------------
The transaction coordinator keeps one keyed record per ``transactional.id``: the key
is the id, the value the id's whole :class:`TransactionMetadata` after a change. Log
compaction keeps the latest value per key, and replaying a partition (latest value
wins) rebuilds the coordinator's memory. A record whose value is ``None`` is a
tombstone: the id expired (state Dead) and replay forgets it.

The conventions are those of ``__consumer_offsets``
(:mod:`raftka.broker.coordinator.group_records`):

* Keys are a fixed binary layout, so one id has exactly one key byte string (compaction
  compares key bytes)::

      int16 version (0) | int16 byte length | UTF-8 transactional id   (big-endian)

  as Kafka's TransactionLogKey version 0.
* Values are JSON objects carrying their own ``"version"``, readable in a log dump; a
  reader ignores fields it does not know and takes a missing optional field as its
  default, and rejects a version above the one it writes. Here the value is a
  ``msgspec`` struct (as raftka's typed messages are), so the types and bounds of every
  field are declared once and checked while decoding.

Decoding is strict otherwise (wrong types, out-of-range epochs, an unknown state,
trailing key bytes) and raises :class:`TransactionRecordError` (Kafka's
CORRUPT_MESSAGE), never a bare ``struct.error`` or ``msgspec`` exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Annotated, Any, Final

import msgspec

from raftka.broker.coordinator.transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PRODUCER_EPOCH_MAX,
    TransactionMetadata,
    TransactionState,
    metadata_problem,
)
from raftka.common.errors import CorruptMessageError
from raftka.common.messages import INT64_MAX, Message, PartitionId, TopicName
from raftka.common.structs import TopicPartition

__all__ = [
    "TRANSACTION_KEY_VERSION",
    "TRANSACTION_VALUE_VERSION",
    "TransactionLogRecord",
    "TransactionRecordError",
    "decode_transaction_key",
    "decode_transaction_value",
    "encode_transaction_key",
    "encode_transaction_value",
    "transaction_record",
    "transaction_tombstone",
]

TRANSACTION_KEY_VERSION: Final = 0
TRANSACTION_VALUE_VERSION: Final = 0

_STRING_BYTES_MAX: Final = 0x7FFF
_INT16: Final = struct.Struct(">h")


class TransactionRecordError(CorruptMessageError):
    """A ``__transaction_state`` key or value that does not decode (CORRUPT_MESSAGE: the
    bytes in the log are not what a coordinator writes)."""


@dataclass(frozen=True, slots=True)
class TransactionLogRecord:
    """A key/value record of ``__transaction_state`` as it is appended (value None is a
    tombstone)."""

    key: bytes
    value: bytes | None


# -- keys ------------------------------------------------------------------------------


def encode_transaction_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    if not raw or len(raw) > _STRING_BYTES_MAX:
        raise TransactionRecordError(
            f"transactional id of {len(raw)} bytes: must be 1..{_STRING_BYTES_MAX}"
        )
    return _INT16.pack(TRANSACTION_KEY_VERSION) + _INT16.pack(len(raw)) + raw


def decode_transaction_key(data: bytes) -> str:
    """The transactional id ``encode_transaction_key`` wrote; TransactionRecordError
    otherwise."""
    if len(data) < 4:
        raise TransactionRecordError(f"key of {len(data)} bytes is shorter than its header")
    (version,) = _INT16.unpack_from(data, 0)
    if version != TRANSACTION_KEY_VERSION:
        raise TransactionRecordError(f"unknown transaction key version {version}")
    (length,) = _INT16.unpack_from(data, 2)
    if length <= 0 or 4 + length != len(data):
        raise TransactionRecordError(
            f"key string length {length} does not match the key's {len(data) - 4} bytes"
        )
    try:
        return data[4:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TransactionRecordError(f"transactional id is not UTF-8: {exc}") from None


# -- values ----------------------------------------------------------------------------

_ProducerId = Annotated[int, msgspec.Meta(ge=NO_PRODUCER_ID, le=INT64_MAX)]
_Epoch = Annotated[int, msgspec.Meta(ge=NO_PRODUCER_EPOCH, le=PRODUCER_EPOCH_MAX)]
_TimeMs = Annotated[int, msgspec.Meta(ge=-1, le=INT64_MAX)]
_TimeoutMs = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]


class _Versioned(Message, frozen=True):
    version: int


class _TopicPartitions(Message, frozen=True):
    topic: TopicName
    # A topic is listed only with partitions (so "any entries" means "any partitions").
    partitions: Annotated[list[PartitionId], msgspec.Meta(min_length=1)]


class _ValueV0(Message, frozen=True):
    version: int
    producer_id: _ProducerId
    last_producer_id: _ProducerId
    producer_epoch: _Epoch
    last_producer_epoch: _Epoch
    transaction_timeout_ms: _TimeoutMs
    state: TransactionState
    partitions: list[_TopicPartitions]
    transaction_start_time_ms: _TimeMs
    transaction_last_update_time_ms: _TimeMs
    # Added later, like a Kafka tagged field: an older reader ignores it, and a value
    # written before it existed came from a coordinator that ran version 2 for everyone.
    client_transaction_version: Annotated[int, msgspec.Meta(ge=1, le=2)] = 2


#: The fields a value holds exactly as the metadata does (the id is the key, and the
#: partitions are grouped by topic).
_SAME_FIELDS: Final = (
    "producer_id",
    "last_producer_id",
    "producer_epoch",
    "last_producer_epoch",
    "transaction_timeout_ms",
    "state",
    "transaction_start_time_ms",
    "transaction_last_update_time_ms",
    "client_transaction_version",
)
# Checked at import (not with assert, which -O strips): a field added to either type
# without being added here would otherwise be silently dropped by encode or decode.
if set(_ValueV0.__struct_fields__) != {"version", "partitions", *_SAME_FIELDS} or {
    f.name for f in fields(TransactionMetadata)
} != {"transactional_id", "partitions", *_SAME_FIELDS}:
    raise ImportError("transaction_records: _SAME_FIELDS no longer matches the two types")

_ENCODER: Final = msgspec.json.Encoder()


def _same_fields(source: TransactionMetadata | _ValueV0) -> dict[str, Any]:
    return {name: getattr(source, name) for name in _SAME_FIELDS}


def encode_transaction_value(metadata: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(metadata.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return _ENCODER.encode(
        _ValueV0(
            version=TRANSACTION_VALUE_VERSION,
            partitions=[_TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
            **_same_fields(metadata),
        )
    )


def decode_transaction_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    """The metadata of ``transactional_id`` stored in ``data``; TransactionRecordError
    if ``data`` is not a value a coordinator writes."""
    try:
        version = msgspec.json.decode(data, type=_Versioned).version
        if not 0 <= version <= TRANSACTION_VALUE_VERSION:
            raise TransactionRecordError(f"transaction value version {version} is not supported")
        value = msgspec.json.decode(data, type=_ValueV0)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise TransactionRecordError(f"transaction value: {exc}") from None
    partitions = frozenset(
        TopicPartition(entry.topic, p) for entry in value.partitions for p in entry.partitions
    )
    if value.state in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE):
        # Dead is written as a tombstone and PrepareEpochFence never (see transaction_state).
        raise TransactionRecordError(f"state {value.state.value} is never stored as a value")
    problem = metadata_problem(value)
    if problem is not None:
        raise TransactionRecordError(f"inconsistent transaction value: {problem}")
    return TransactionMetadata(
        transactional_id=transactional_id, partitions=partitions, **_same_fields(value)
    )


def transaction_record(metadata: TransactionMetadata) -> TransactionLogRecord:
    """The record to append for ``metadata`` (a Dead one is written as the tombstone)."""
    if metadata.state is TransactionState.DEAD:
        return transaction_tombstone(metadata.transactional_id)
    return TransactionLogRecord(
        key=encode_transaction_key(metadata.transactional_id),
        value=encode_transaction_value(metadata),
    )


def transaction_tombstone(transactional_id: str) -> TransactionLogRecord:
    return TransactionLogRecord(key=encode_transaction_key(transactional_id), value=None)
