"""WriteTxnMarkers (``POST /v1/write-txn-markers``): the transaction coordinator asks a
partition leader to end a producer's transaction on its partitions.

Theory of operation. Each marker names a producer, its epoch, the outcome (COMMIT or
ABORT), the coordinator's epoch, the coordinator's ``transaction_version`` and the
partitions. For every partition, this broker must lead it (else
NOT_LEADER_OR_FOLLOWER; UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does
not know, which the coordinator counts as done, as Kafka's marker channel does); the
partition core (``Replica.write_txn_marker``) then checks the marker against producer
state, appends the control batch, applies it and indexes an abort, and the partition is
answered once the high watermark passed the marker (acks=all, Kafka's) or with the
error. The append uses the produce path's strands, so a marker never overtakes a
produce of the same partition that arrived before it.

After a marker is in a ``__consumer_offsets`` partition, the broker's
``on_txn_marker(topic, partition, producer_id, committed)`` runs, so the group
coordinator makes that producer's pending transactional offsets visible or drops them.
It runs once the partition answered success (the marker is below the high watermark,
so no leader change can lose it); a repeat answered without a second marker calls it
again, which the group coordinator must take as a no-op. A failure of the hook is
logged and does not fail the marker, which is in the log either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from aiohttp import web

from raftka.broker.replication.data_plane import ProduceResult, TxnMarkerWrite
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.messages import decode, encode
from raftka.common.messages.broker import error_object
from raftka.common.messages.transactions import (
    TxnPartitionResult,
    TxnTopicResult,
    WritableTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

__all__ = [
    "OFFSETS_TOPIC",
    "TXN_MARKER_TIMEOUT_MS",
    "TxnMarkerHook",
    "write_txn_markers",
    "write_txn_markers_route",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"
#: How long a marker waits for its acks=all (Kafka's coordinator sends markers with
#: request.timeout.ms; the coordinator retries a partition that timed out).
TXN_MARKER_TIMEOUT_MS: Final = 30_000

#: (topic, partition, producer_id, committed): a marker was appended there.
TxnMarkerHook = Callable[[str, int, int, bool], None]


async def write_txn_markers(
    manager: ReplicaManager,
    request: WriteTxnMarkersRequest,
    *,
    on_txn_marker: TxnMarkerHook,
    timeout_ms: int = TXN_MARKER_TIMEOUT_MS,
) -> WriteTxnMarkersResponse:
    """Write every marker of ``request`` (see the module docstring)."""
    writes = [
        TxnMarkerWrite(
            topic=topic.name,
            partition=index,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            committed=marker.transaction_result,
            coordinator_epoch=marker.coordinator_epoch,
            transaction_version=marker.transaction_version,
        )
        for marker in request.markers
        for topic in marker.topics
        for index in topic.partitions
    ]
    results = await manager.write_txn_markers(writes, timeout_ms=timeout_ms)
    for write, result in zip(writes, results, strict=True):
        if write.topic == OFFSETS_TOPIC and result.error is None:
            _call_hook(on_txn_marker, write)
    answers = iter(results)
    return WriteTxnMarkersResponse(
        markers=tuple(
            WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=tuple(
                    TxnTopicResult(
                        name=topic.name,
                        partitions=tuple(
                            _partition_result(index, next(answers)) for index in topic.partitions
                        ),
                    )
                    for topic in marker.topics
                ),
            )
            for marker in request.markers
        )
    )


def _partition_result(index: int, result: ProduceResult) -> TxnPartitionResult:
    return TxnPartitionResult(partition_index=index, error=error_object(result.error))


def _call_hook(hook: TxnMarkerHook, write: TxnMarkerWrite) -> None:
    try:
        hook(write.topic, write.partition, write.producer_id, write.committed)
    except Exception as e:  # the marker is durable; the group coordinator's bug is logged
        log.error(
            "on_txn_marker failed",
            extra={
                "fields": {
                    "partition": f"{write.topic}-{write.partition}",
                    "producer_id": write.producer_id,
                    "error": repr(e),
                }
            },
        )


def write_txn_markers_route(
    manager: Callable[[web.Request], ReplicaManager],
    hook: Callable[[web.Request], TxnMarkerHook],
) -> web.RouteDef:
    """``POST /v1/write-txn-markers``: HTTP 200 with Kafka errors per partition."""

    async def handle(request: web.Request) -> web.Response:
        body = decode(await request.read(), WriteTxnMarkersRequest)
        answer = await write_txn_markers(manager(request), body, on_txn_marker=hook(request))
        return web.Response(body=encode(answer), status=200, content_type="application/json")

    return web.post("/v1/write-txn-markers", handle)
