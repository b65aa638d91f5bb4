"""Producer-state snapshot files: ``<offset>.snapshot`` bytes and the choice of file.

Theory of operation: a partition writes its producer state to
``{offset:020d}.snapshot`` (Kafka's name) when it rolls a segment or shuts down; the
offset is the log end offset the state covers (every batch below it applied). On
recovery or follower truncation the broker loads the newest valid snapshot at or below
the point it needs and replays the log from that offset with
``ProducerStateManager.rebuild_from``. Decoding never trusts the bytes: any CRC
mismatch, truncation, trailing garbage or inconsistent field raises
:class:`CorruptMessageError`, and the caller tries the next older file, or rebuilds from
the log start.

Format, version 2 (big-endian)::

    version           int16   = 2 (1 is still read)
    crc               uint32  CRC-32C of every byte after this field
    snapshot_offset   int64   the offset in the file name (checked on load)
    producer_count    int32
    producer_count x:
      producer_id               int64
      producer_epoch            int16
      last_sequence             int32   -1 if no batch is retained
      last_offset               int64   -1 if no batch is retained
      offset_delta              int32   of the last batch; 0 if none
      timestamp                 int64   the entry's last timestamp
      coordinator_epoch         int32   of the producer's last marker here, or -1
      current_txn_first_offset  int64   first offset of its open transaction, or -1
      last_marker_epoch         int16   the producer's last marker here: its epoch,  (v2)
      last_marker_type          int8    0 ABORT, 1 COMMIT, -1 none (then all -1)     (v2)
      last_marker_offset        int64                                                (v2)
      last_marker_timestamp     int64                                                (v2)
      flags                     int8    bit 0: transactional
      batch_count               int8    0..5, oldest first:
        last_sequence  int32
        last_offset    int64
        offset_delta   int32
        timestamp      int64

The per-producer fields up to ``current_txn_first_offset`` are Kafka's v1 snapshot
entry. Kafka then stops: it keeps only the last batch, so after a restart a retry of
any of the other four in-flight batches gets OUT_OF_ORDER_SEQUENCE_NUMBER instead of
its original offsets (the producer then fails the batch although it is in the log).
raftka also stores the whole retained window (at most 5 x 24 bytes per producer) so
de-duplication after a restart or a leader change through recovery is exactly what it
was before. The redundant last-batch fields are kept and checked against the window:
they cost 34 bytes and catch a bug in either copy.

Versions: version 1 lacks the four ``last_marker`` fields and was written before
transactions existed, when the two transaction fields were always -1. Version 2 gives
them meaning (an open transaction's start survives a restart: the last stable offset
must not jump past it) and adds the last marker, so that after a restart a retried
marker is still answered as a duplicate instead of being fenced (transaction version
2). A raftka of the version 1 era refuses a version 2 file as unknown and rebuilds
from the log, instead of loading a transaction start it would never clear (it ignores
markers), which would hold that producer forever. Version 1 files are still read, with
no last marker. Decoding refuses an open transaction or a last marker at or above the
snapshot offset (the snapshot covers the log below it).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from typing import Final

import crc32c

from raftka.broker.producer_state import (
    EPOCH_MAX,
    NO_COORDINATOR_EPOCH,
    NO_EPOCH,
    NO_OFFSET,
    NO_SEQUENCE,
    NUM_BATCHES_TO_RETAIN,
    SEQUENCE_MAX,
    BatchMetadata,
    LastMarker,
    ProducerStateEntry,
    next_sequence,
)
from raftka.common.errors import CorruptMessageError
from raftka.common.record.control import ControlRecordType

SNAPSHOT_VERSION: Final = 2
_VERSIONS_READ: Final = frozenset({1, 2})
SNAPSHOT_SUFFIX: Final = ".snapshot"
_OFFSET_DIGITS: Final = 20
_NAME = re.compile(r"^(\d{20})\.snapshot$")

_HEADER = struct.Struct(">hI")  # version, crc
_BODY_HEADER = struct.Struct(">qi")  # snapshot_offset, producer_count
_ENTRY_V1 = struct.Struct(">qhiqiqiqbb")
_ENTRY = struct.Struct(">qhiqiqiqhbqqbb")  # v2: the last marker before flags
_NO_MARKER: Final = (NO_EPOCH, -1, NO_OFFSET, -1)
_BATCH = struct.Struct(">iqiq")
_TRANSACTIONAL_FLAG: Final = 0x01
_FLAGS_KNOWN: Final = _TRANSACTIONAL_FLAG


def snapshot_file_name(offset: int) -> str:
    """``00000000000000001234.snapshot`` for offset 1234, as Kafka names them."""
    assert offset >= 0, offset
    return f"{offset:0{_OFFSET_DIGITS}d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset a snapshot file name carries, or None if it is not a snapshot name."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def snapshots_to_try(names: Iterable[str], *, offset_max: int) -> list[str]:
    """Snapshot names at or below ``offset_max``, newest first: load the first that
    decodes; if none does, rebuild from the log start. Other names are ignored."""
    found = [(off, n) for n in names if (off := snapshot_offset(n)) is not None]
    return [n for off, n in sorted(found, reverse=True) if off <= offset_max]


def newest_snapshot(names: Iterable[str], *, offset_max: int) -> str | None:
    """The newest snapshot name at or below ``offset_max`` (validity of content unchecked)."""
    candidates = snapshots_to_try(names, offset_max=offset_max)
    return candidates[0] if candidates else None


def snapshots_to_delete(
    names: Iterable[str], *, log_start_offset: int, log_end_offset: int
) -> list[str]:
    """Snapshot names outside ``[log_start_offset, log_end_offset]``, oldest first.

    After a truncation to ``log_end_offset`` a snapshot above it describes batches that
    are gone; below the log start it describes batches retention removed. A snapshot
    exactly at the new log end is still right: it covers every batch below it.
    """
    assert 0 <= log_start_offset <= log_end_offset, (log_start_offset, log_end_offset)
    found = sorted((off, n) for n in names if (off := snapshot_offset(n)) is not None)
    return [n for off, n in found if not log_start_offset <= off <= log_end_offset]


def encode_snapshot(entries: Iterable[ProducerStateEntry], *, offset: int) -> bytes:
    """The snapshot bytes for ``entries`` covering the log below ``offset``."""
    assert offset >= 0, offset
    ordered = sorted(entries, key=lambda e: e.producer_id)  # deterministic bytes
    body = bytearray(_BODY_HEADER.pack(offset, len(ordered)))
    for entry in ordered:
        # The snapshot covers the log below ``offset``: no retained batch may lie above.
        assert entry.last_offset < offset, (entry, offset)
        assert entry.current_txn_first_offset < offset, (entry, offset)
        last = entry.batches[-1] if entry.batches else None
        marker = entry.last_marker
        assert marker is None or marker.offset < offset, (entry, offset)
        marker_fields = (
            _NO_MARKER
            if marker is None
            else (marker.producer_epoch, int(marker.control_type), marker.offset, marker.timestamp)
        )
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            last.last_sequence if last else NO_SEQUENCE,
            last.last_offset if last else NO_OFFSET,
            last.offset_delta if last else 0,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
            *marker_fields,
            _TRANSACTIONAL_FLAG if entry.is_transactional else 0,
            len(entry.batches),
        )
        for batch in entry.batches:
            body += _BATCH.pack(
                batch.last_sequence, batch.last_offset, batch.offset_delta, batch.timestamp
            )
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes, *, offset: int | None = None) -> list[ProducerStateEntry]:
    """Entries from snapshot bytes. Raises CorruptMessageError on anything wrong.

    ``offset``: the offset from the file name; a mismatch with the stored one is
    corruption (a renamed or misplaced file).
    """
    if len(data) < _HEADER.size + _BODY_HEADER.size:
        raise CorruptMessageError(f"producer snapshot truncated: {len(data)} bytes")
    version, crc = _HEADER.unpack_from(data, 0)
    if version not in _VERSIONS_READ:
        raise CorruptMessageError(f"producer snapshot version {version} unknown")
    body = memoryview(data)[_HEADER.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptMessageError("producer snapshot CRC mismatch")
    stored_offset, count = _BODY_HEADER.unpack_from(body, 0)
    if offset is not None and stored_offset != offset:
        raise CorruptMessageError(
            f"producer snapshot holds offset {stored_offset}, its name says {offset}"
        )
    pos = _BODY_HEADER.size
    entry_struct = _ENTRY if version == SNAPSHOT_VERSION else _ENTRY_V1
    # Bound the count by the bytes present before building anything.
    if count < 0 or count * entry_struct.size > len(body) - pos:
        raise CorruptMessageError(f"producer snapshot claims {count} producers")
    entries: list[ProducerStateEntry] = []
    seen: set[int] = set()
    for _ in range(count):
        entry, pos = _decode_entry(body, pos, stored_offset, entry_struct)
        if entry.producer_id in seen:
            raise CorruptMessageError(f"producer {entry.producer_id} twice in snapshot")
        seen.add(entry.producer_id)
        entries.append(entry)
    if pos != len(body):
        raise CorruptMessageError(f"producer snapshot has {len(body) - pos} trailing bytes")
    return entries


def _decode_entry(
    body: memoryview, pos: int, covered_offset: int, entry_struct: struct.Struct
) -> tuple[ProducerStateEntry, int]:
    if len(body) - pos < entry_struct.size:
        raise CorruptMessageError("producer snapshot truncated in an entry")
    fields = entry_struct.unpack_from(body, pos)
    pos += entry_struct.size
    # Version 1 has no last marker: read it as none.
    marker_fields = _NO_MARKER if entry_struct is _ENTRY_V1 else fields[8:12]
    (
        pid,
        epoch,
        last_sequence,
        last_offset,
        offset_delta,
        timestamp,
        coordinator_epoch,
        txn_first_offset,
    ) = fields[:8]
    flags, batch_count = fields[-2:]
    last_marker = _decode_last_marker(pid, marker_fields, covered_offset)
    if pid < 0 or not 0 <= epoch <= EPOCH_MAX:
        raise CorruptMessageError(f"producer snapshot entry: producer {pid} epoch {epoch}")
    if flags & ~_FLAGS_KNOWN or not 0 <= batch_count <= NUM_BATCHES_TO_RETAIN:
        raise CorruptMessageError(f"producer {pid}: flags {flags}, {batch_count} batches")
    if (
        coordinator_epoch < NO_COORDINATOR_EPOCH
        or txn_first_offset < NO_OFFSET
        or txn_first_offset >= covered_offset
    ):
        raise CorruptMessageError(f"producer {pid}: bad transaction fields")
    if len(body) - pos < batch_count * _BATCH.size:
        raise CorruptMessageError("producer snapshot truncated in a batch window")
    batches: list[BatchMetadata] = []
    for _ in range(batch_count):
        b_last_seq, b_last_offset, b_delta, b_timestamp = _BATCH.unpack_from(body, pos)
        pos += _BATCH.size
        first_offset = b_last_offset - b_delta
        if not (
            0 <= b_last_seq <= SEQUENCE_MAX
            and 0 <= b_delta <= SEQUENCE_MAX
            and first_offset >= 0
            and b_last_offset < covered_offset
            and (not batches or batches[-1].last_offset < first_offset)
        ):
            raise CorruptMessageError(f"producer {pid}: inconsistent batch in snapshot")
        first_sequence = (b_last_seq - b_delta) % (SEQUENCE_MAX + 1)
        if batches and next_sequence(batches[-1].last_sequence) != first_sequence:
            raise CorruptMessageError(f"producer {pid}: window not contiguous in snapshot")
        batches.append(
            BatchMetadata(
                first_sequence=first_sequence,
                last_sequence=b_last_seq,
                first_offset=first_offset,
                last_offset=b_last_offset,
                timestamp=b_timestamp,
            )
        )
    expected = (
        (batches[-1].last_sequence, batches[-1].last_offset, batches[-1].offset_delta)
        if batches
        else (NO_SEQUENCE, NO_OFFSET, 0)
    )
    if (last_sequence, last_offset, offset_delta) != expected:
        raise CorruptMessageError(f"producer {pid}: last batch disagrees with its window")
    entry = ProducerStateEntry(
        producer_id=pid,
        producer_epoch=epoch,
        batches=tuple(batches),
        last_timestamp=timestamp,
        is_transactional=bool(flags & _TRANSACTIONAL_FLAG),
        coordinator_epoch=coordinator_epoch,
        current_txn_first_offset=txn_first_offset,
        last_marker=last_marker,
    )
    return entry, pos


def _decode_last_marker(
    pid: int, fields: tuple[int, ...], covered_offset: int
) -> LastMarker | None:
    if tuple(fields) == _NO_MARKER:
        return None
    marker_epoch, marker_type, marker_offset, marker_timestamp = fields
    if not (
        0 <= marker_epoch <= EPOCH_MAX
        and marker_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)
        and 0 <= marker_offset < covered_offset
    ):
        raise CorruptMessageError(f"producer {pid}: bad last marker in snapshot")
    return LastMarker(marker_epoch, ControlRecordType(marker_type), marker_offset, marker_timestamp)


def load_newest(
    files: Sequence[tuple[str, bytes]], *, offset_max: int
) -> tuple[int, list[ProducerStateEntry]] | None:
    """From ``(name, bytes)`` pairs, the offset and entries of the newest snapshot at or
    below ``offset_max`` that decodes; None if none does (rebuild from the log start).

    Pure: the caller reads the files (it may read lazily by calling
    :func:`snapshots_to_try` and :func:`decode_snapshot` itself).
    """
    by_name = dict(files)
    for name in snapshots_to_try(by_name, offset_max=offset_max):
        off = snapshot_offset(name)
        assert off is not None
        try:
            return off, decode_snapshot(by_name[name], offset=off)
        except CorruptMessageError:
            continue
    return None
