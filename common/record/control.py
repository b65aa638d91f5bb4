"""Control records: the transaction markers a coordinator writes into partitions.

Theory of operation: a control batch has the control bit (and, for transaction
markers, the transactional bit) set in its attributes and holds one record that is
never handed to applications. Its key says what kind of control record it is::

    version: int16   (0)
    type:    int16   (0 ABORT, 1 COMMIT; KRaft adds 2.. for its own log)

and for ABORT and COMMIT the value is the EndTransactionMarker::

    version:           int16  (0)
    coordinatorEpoch:  int32

Both are big-endian. Readers take keys and values of a higher version as long as the
version-0 fields come first, as Kafka's do; an unknown type reads as ``UNKNOWN``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from raftka.common.errors import CorruptMessageError
from raftka.common.record.batch import DecodedBatch, Record, build_batch
from raftka.common.record.header import NO_PARTITION_LEADER_EPOCH, Compression

CONTROL_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0

_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    """The ``type`` field of a control record's key."""

    UNKNOWN = -1  # a type this version does not know: skip it, as Kafka does
    ABORT = 0
    COMMIT = 1
    # Types KRaft uses in its own logs; recognised here, their values not parsed.
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the epoch of the coordinator that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(
                f"an end-transaction marker is ABORT or COMMIT, not {self.control_type!r}"
            )


def encode_control_key(control_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record (version 0)."""
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def parse_control_key(key: bytes | None) -> ControlRecordType:
    """The type named by a control record's key; CorruptMessageError if it is malformed."""
    if key is None or len(key) < _KEY.size:
        raise CorruptMessageError("control record key is shorter than 4 bytes")
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptMessageError(f"control record key has negative version {version}")
    try:
        return ControlRecordType(control_type)
    except ValueError:
        return ControlRecordType.UNKNOWN


def encode_end_transaction_marker(marker: EndTransactionMarker) -> tuple[bytes, bytes]:
    """The (key, value) of the control record carrying ``marker``."""
    return (
        encode_control_key(marker.control_type),
        _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, marker.coordinator_epoch),
    )


def parse_end_transaction_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """Read a COMMIT or ABORT control record; CorruptMessageError if it is not one."""
    control_type = parse_control_key(key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise CorruptMessageError(
            f"control record of type {control_type.name} is not an end-transaction marker"
        )
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptMessageError("end-transaction marker value is shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptMessageError(f"end-transaction marker has negative version {version}")
    return EndTransactionMarker(control_type, coordinator_epoch)


def build_end_transaction_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A control batch holding one end-transaction marker, as a coordinator writes it.

    Transactional and control bits set, no compression, base sequence -1 (markers take
    no sequence number), one record at offset delta 0.
    """
    key, value = encode_end_transaction_marker(marker)
    return build_batch(
        [Record(value=value, key=key, timestamp_ms=timestamp_ms)],
        base_offset=base_offset,
        compression=Compression.NONE,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def end_transaction_marker(batch: DecodedBatch) -> EndTransactionMarker | None:
    """The marker of a decoded control batch; None if it is not a control batch or holds
    a control record of another type (KRaft's own).

    Raises CorruptMessageError if a control batch has no record or a malformed one.
    """
    if not batch.header.is_control:
        return None
    if not batch.records:
        raise CorruptMessageError("control batch holds no record")
    record = batch.records[0]
    if parse_control_key(record.key) not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    return parse_end_transaction_marker(record.key, record.value)
