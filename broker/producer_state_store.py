"""Producer state of a partition on disk: snapshots written at segment roll and clean
shutdown, loaded (then the log replayed from them) when a replica opens or truncates.

The file format and the choice of file are :mod:`.producer_state_snapshot`'s (pure);
this module does the I/O in the partition's log directory.

When a snapshot is written: after an append that rolled a segment (the state then
covers every batch below the log end, so the snapshot's offset is the log end, which
is at or just above the new segment's base), and when the partition's log closes
cleanly. Recovery then replays at most about one segment of batch headers instead of
the whole log (Kafka's reason for the same files). The replay decodes control batches
too, so a transaction marker closes its producer's transaction as it did live, and an
ABORT marker whose ``.txnindex`` entry a crash kept from being written gets it back.

Snapshots outside ``[log start, log end]`` are deleted after each write and each load:
above the log end they describe batches a truncation removed; below the log start,
batches retention or DeleteRecords removed. A snapshot that does not decode is skipped
(the next older one or the log start is used) and logged.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from typing import Final

from raftka.broker.producer_state import ProducerStateConfig, ProducerStateManager
from raftka.broker.producer_state_snapshot import (
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
    snapshot_offset,
    snapshots_to_delete,
    snapshots_to_try,
)
from raftka.broker.transaction_recovery import apply_stored_batches
from raftka.common.errors import CorruptMessageError
from raftka.storage import Log
from raftka.storage.checkpoint import write_file_durably
from raftka.storage.transaction_index import AbortedTxn

__all__ = [
    "encode_producer_snapshot",
    "load_producer_state",
    "prune_snapshots",
    "write_encoded_snapshot",
    "write_producer_snapshot",
]

log = logging.getLogger(__name__)

#: Bytes of log read per step when replaying batch headers after a snapshot.
REPLAY_READ_BYTES: Final = 1024 * 1024


def _snapshot_names(log_: Log) -> list[str]:
    try:
        return [n for n in os.listdir(log_.path) if snapshot_offset(n) is not None]
    except FileNotFoundError:
        return []


def write_producer_snapshot(log_: Log, producers: ProducerStateManager) -> int:
    """Write ``<log end>.snapshot`` for ``producers`` (which must cover every batch
    below the log end), then prune; returns the snapshot's offset."""
    offset, data = encode_producer_snapshot(log_, producers)
    write_encoded_snapshot(log_, offset, data)
    return offset


def encode_producer_snapshot(log_: Log, producers: ProducerStateManager) -> tuple[int, bytes]:
    """The snapshot of ``producers`` at the log end, encoded (memory only): the part
    that must see the state no append changes, before a worker writes it."""
    offset = log_.log_end_offset
    return offset, encode_snapshot(producers.entries.values(), offset=offset)


def write_encoded_snapshot(log_: Log, offset: int, data: bytes) -> None:
    """Write an :func:`encode_producer_snapshot` durably, then prune (the disk part)."""
    write_file_durably(log_.path / snapshot_file_name(offset), data)
    prune_snapshots(log_)


def prune_snapshots(log_: Log) -> None:
    """Delete snapshots outside [log start, log end] (see the module docstring)."""
    for name in snapshots_to_delete(
        _snapshot_names(log_),
        log_start_offset=log_.log_start_offset,
        log_end_offset=log_.log_end_offset,
    ):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log_.path / name)


def load_producer_state(
    log_: Log, config: ProducerStateConfig | None = None
) -> ProducerStateManager:
    """The partition's producer state: the newest valid snapshot at or below the log
    end (and at or above the log start), then the log's batches from its offset."""
    prune_snapshots(log_)
    producers = ProducerStateManager(config=config or ProducerStateConfig())
    start = log_.log_start_offset
    for name in snapshots_to_try(_snapshot_names(log_), offset_max=log_.log_end_offset):
        offset = snapshot_offset(name)
        assert offset is not None
        if offset < log_.log_start_offset:
            break
        try:
            entries = decode_snapshot((log_.path / name).read_bytes(), offset=offset)
        except (CorruptMessageError, OSError) as e:
            log.warning(
                "producer-state snapshot skipped",
                extra={"fields": {"file": str(log_.path / name), "error": str(e)}},
            )
            continue
        producers.load_entries(entries)
        start = offset
        break
    offset = start
    repair = _TxnIndexRepair(log_)
    while offset < log_.log_end_offset:
        data = log_.read(offset, REPLAY_READ_BYTES, whole_batches=True)
        after = apply_stored_batches(producers, data, skip_below=start, on_aborted=repair)
        if after < 0:
            break
        offset = after
    return producers


class _TxnIndexRepair:
    """Re-appends the ``.txnindex`` entries of ABORT markers the replay met that their
    segment's index lacks: the marker was written and the broker stopped before its
    entry was (the two are separate files). Entries follow the markers' order, so an
    entry is missing exactly when its marker lies past the segment's last entry."""

    def __init__(self, log_: Log) -> None:
        self._log = log_

    def __call__(self, entry: AbortedTxn) -> None:
        segments = self._log.segments_for_cleaner()
        bases = [s.base_offset for s in segments]
        seg = segments[max(0, bisect.bisect_right(bases, entry.last_offset) - 1)]
        entries = seg.txn_index.entries
        if entries and entries[-1].last_offset >= entry.last_offset:
            return
        log.info(
            "txnindex entry re-appended",
            extra={"fields": {"log": str(self._log.path), "marker_offset": entry.last_offset}},
        )
        self._log.append_aborted_txn(entry)
