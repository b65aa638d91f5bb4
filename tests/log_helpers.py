"""Reading a segment log back, for the storage tests (unit and property). Test modules
cannot import each other (``--import-mode=importlib``), so what they share lives here,
on pytest's ``pythonpath``."""

from __future__ import annotations

from collections.abc import Iterator

from raftka.common.record import DecodedBatch, decode_batches
from raftka.storage import Log

#: A record as the cleaner tests compare them: (offset, key, value).
Row = tuple[int, bytes | None, bytes | None]


def log_batches(log: Log) -> Iterator[tuple[DecodedBatch, int]]:
    """Every batch from the log start to the end (via Log.read), each once, with the
    first offset still wanted from it (a read may start inside a batch)."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # bounded: offset grows every round
        data = log.read(offset, 1 << 20, whole_batches=True)
        if not data:
            break
        for b in decode_batches(data):
            if b.header.last_offset >= offset:
                yield b, offset
                offset = b.header.last_offset + 1


def latest_by_key(rows: list[Row]) -> dict[bytes, Row]:
    """The last row of each key (what compaction must keep); keyless rows are skipped."""
    out: dict[bytes, Row] = {}
    for row in rows:
        if row[1] is not None:
            out[row[1]] = row
    return out
