"""The streaming sink's record of committed micro-batches, as raftka records.

Pure: encoding of one marker and the fold of markers into "last committed batch per
query". The driver's ``commit(messages, batchId)`` appends a marker (key: the query id,
value: JSON) to the internal topic :data:`SINK_COMMITS_TOPIC` once every task of the
batch has flushed its records with acks=all. Spark runs a query's batches one after
another and writes its own ``commits/<batchId>`` only after the sink commit, so a marker
for batch B of query Q means every batch <= B of Q reached the output: a task of a
replayed batch B that finds ``last_committed(Q) >= B`` writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import orjson

__all__ = [
    "COMMIT_MARKER_VERSION",
    "SINK_COMMITS_TOPIC",
    "CommitMarker",
    "decode_marker",
    "encode_marker",
    "last_committed",
]

#: The internal topic (one partition, created on demand by the first sink commit).
SINK_COMMITS_TOPIC: Final = "__raftka_spark_sink"
COMMIT_MARKER_VERSION: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitMarker:
    """Query ``query_id`` committed micro-batch ``batch_id`` (``records`` written)."""

    query_id: str
    batch_id: int
    records: int
    committed_ms: int

    def __post_init__(self) -> None:
        assert self.query_id and self.batch_id >= 0 and self.records >= 0


def encode_marker(marker: CommitMarker) -> tuple[bytes, bytes]:
    """(key, value) of the marker record."""
    value = orjson.dumps(
        {
            "version": COMMIT_MARKER_VERSION,
            "query_id": marker.query_id,
            "batch_id": marker.batch_id,
            "records": marker.records,
            "committed_ms": marker.committed_ms,
        }
    )
    return marker.query_id.encode(), value


def decode_marker(value: bytes | None) -> CommitMarker | None:
    """The marker in a record value; None for a record that is not one (skipped rather
    than fatal: the topic is internal, but a stray write must not stop every sink)."""
    if value is None:
        return None
    try:
        obj = orjson.loads(value)
        if not isinstance(obj, dict) or obj.get("version") != COMMIT_MARKER_VERSION:
            return None
        return CommitMarker(
            query_id=str(obj["query_id"]),
            batch_id=int(obj["batch_id"]),
            records=int(obj["records"]),
            committed_ms=int(obj["committed_ms"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AssertionError):
        return None


def last_committed(markers: Iterable[CommitMarker], into: dict[str, int]) -> dict[str, int]:
    """Fold markers into ``into`` (query id -> highest committed batch id)."""
    for m in markers:
        if into.get(m.query_id, -1) < m.batch_id:
            into[m.query_id] = m.batch_id
    return into
