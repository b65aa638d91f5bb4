"""Snapshot files of the metadata log (KIP-630), next to its segments.

A snapshot is the state machine's bytes as of an offset: it covers every entry below
``end_offset``, and ``epoch`` is the epoch of the last entry it covers. Each lives in
``<20-digit end offset>-<10-digit epoch>.checkpoint`` (Kafka's naming) with a small
header in front of the opaque data::

    magic     4 bytes  b"RKSN"
    version   int16    0
    reserved  int16    0
    end       int64    end offset (must match the file name)
    epoch     int32    epoch (must match the file name)
    length    int64    data length in bytes
    crc       uint32   CRC-32C of the 28 bytes above and the data
    data      length bytes

Writes are atomic: a temp file (``.tmp``, which the segment log also sweeps away on
open) is written, fsynced, renamed into place and the directory fsynced, so a crash
leaves either no snapshot or a whole one. On open, the newest snapshot whose header
and CRC check out wins; a damaged one is ignored with a warning, never trusted.
"""

from __future__ import annotations

import logging
import re
import struct
from pathlib import Path
from typing import Final

import crc32c

from raftka.raft.quorum.messages import SnapshotId
from raftka.storage.checkpoint import fsync_dir, write_file_durably

SNAPSHOT_SUFFIX: Final = ".checkpoint"
TMP_SUFFIX: Final = ".tmp"
MAGIC: Final = b"RKSN"
VERSION: Final = 0
_HEADER = struct.Struct(">4shhqiq")  # magic, version, reserved, end, epoch, length
_CRC = struct.Struct(">I")
HEADER_BYTES: Final = _HEADER.size + _CRC.size
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

logger = logging.getLogger("raftka.raft.quorum")


class SnapshotCorruptError(Exception):
    """A snapshot file whose header, length or CRC does not check out."""


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def encode_snapshot(snapshot_id: SnapshotId, data: bytes) -> bytes:
    head = _HEADER.pack(MAGIC, VERSION, 0, snapshot_id.end_offset, snapshot_id.epoch, len(data))
    crc = crc32c.crc32c(data, crc32c.crc32c(head))
    return head + _CRC.pack(crc) + data


def decode_snapshot(snapshot_id: SnapshotId, raw: bytes) -> bytes:
    """The data of a snapshot file's bytes; SnapshotCorruptError if anything is off."""
    if len(raw) < HEADER_BYTES:
        raise SnapshotCorruptError(f"snapshot {snapshot_id} is {len(raw)} bytes: no header")
    magic, version, _, end, epoch, length = _HEADER.unpack_from(raw)
    if magic != MAGIC or version != VERSION:
        raise SnapshotCorruptError(f"snapshot {snapshot_id}: bad magic/version {magic!r}/{version}")
    if SnapshotId(end, epoch) != snapshot_id:
        raise SnapshotCorruptError(f"snapshot file {snapshot_id} holds {SnapshotId(end, epoch)}")
    if len(raw) != HEADER_BYTES + length:
        raise SnapshotCorruptError(
            f"snapshot {snapshot_id}: {len(raw) - HEADER_BYTES} data bytes, header says {length}"
        )
    (crc,) = _CRC.unpack_from(raw, _HEADER.size)
    data = raw[HEADER_BYTES:]
    if crc32c.crc32c(data, crc32c.crc32c(raw[: _HEADER.size])) != crc:
        raise SnapshotCorruptError(f"snapshot {snapshot_id} fails its CRC-32C check")
    return data


class SnapshotStore:
    """The snapshot files in one directory. Not thread safe (one driver task)."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._latest: SnapshotId | None = None
        self._latest_size = 0

    @property
    def latest_id(self) -> SnapshotId | None:
        return self._latest

    def path_of(self, snapshot_id: SnapshotId) -> Path:
        return self._dir / snapshot_file_name(snapshot_id)

    def load(self) -> SnapshotId | None:
        """Find the newest valid snapshot (checking its CRC); sweep temp files."""
        self._dir.mkdir(parents=True, exist_ok=True)
        found: list[SnapshotId] = []
        for p in self._dir.iterdir():
            if p.name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
                p.unlink(missing_ok=True)  # a write that never finished
                continue
            snapshot_id = parse_snapshot_file_name(p.name)
            if snapshot_id is not None:
                found.append(snapshot_id)
        self._latest = None
        for snapshot_id in sorted(found, reverse=True):
            try:
                data = decode_snapshot(snapshot_id, self.path_of(snapshot_id).read_bytes())
            except (SnapshotCorruptError, OSError) as e:
                logger.warning("ignoring snapshot %s: %s", snapshot_id, e)
                continue
            self._latest, self._latest_size = snapshot_id, len(data)
            break
        return self._latest

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Write a snapshot durably and make it the latest (ids only grow)."""
        assert self._latest is None or snapshot_id >= self._latest, (snapshot_id, self._latest)
        write_file_durably(self.path_of(snapshot_id), encode_snapshot(snapshot_id, data))
        self._latest, self._latest_size = snapshot_id, len(data)

    def read(self, snapshot_id: SnapshotId) -> bytes:
        """The whole data of a snapshot (checked); SnapshotCorruptError or OSError."""
        return decode_snapshot(snapshot_id, self.path_of(snapshot_id).read_bytes())

    def read_chunk(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int] | None:
        """Up to ``max_bytes`` of the latest snapshot's data from ``position`` and its
        size; ``None`` when ``snapshot_id`` is not the latest (it may be deleted)."""
        if snapshot_id != self._latest or position < 0 or max_bytes <= 0:
            return None
        size = self._latest_size
        position = min(position, size)
        with open(self.path_of(snapshot_id), "rb") as f:
            f.seek(HEADER_BYTES + position)
            return f.read(min(max_bytes, size - position)), size

    def delete_older_than(self, snapshot_id: SnapshotId) -> int:
        """Remove every snapshot file below ``snapshot_id`` (it must be durable)."""
        count = 0
        for p in self._dir.iterdir():
            other = parse_snapshot_file_name(p.name)
            if other is not None and other < snapshot_id:
                p.unlink(missing_ok=True)
                count += 1
        if count:
            fsync_dir(self._dir)
        return count
