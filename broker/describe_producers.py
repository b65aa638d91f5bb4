"""DescribeProducers over raftka's HTTP API (``POST /v1/describe-producers``).

The same answer the Kafka listener gives (broker/kafka/apis.py): each asked partition's
producer state on its leader, from ``ReplicaManager.describe_producers``
(NOT_LEADER_OR_FOLLOWER on a follower, UNKNOWN_TOPIC_OR_PARTITION for a partition the
metadata does not know). ``raftka transactions find-hanging`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from raftka.broker.producer_state import ProducerStateEntry
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.messages import decode, encode
from raftka.common.messages.broker import error_object
from raftka.common.messages.producers import (
    DescribeProducersPartition,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersTopic,
    ProducerState,
)

__all__ = ["describe_producers", "describe_producers_route", "producer_state_fields"]


def producer_state_fields(e: ProducerStateEntry) -> dict[str, int]:
    """DescribeProducers' ProducerState fields of one producer state entry (this route
    and the Kafka listener's answer)."""
    return {
        "producer_id": e.producer_id,
        "producer_epoch": e.producer_epoch,
        "last_sequence": e.last_sequence,
        "last_timestamp": e.last_timestamp,
        "coordinator_epoch": e.coordinator_epoch,
        "current_txn_start_offset": e.current_txn_first_offset,
    }


def describe_producers(
    manager: ReplicaManager, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    entries = [(t.name, p) for t in request.topics for p in t.partitions]
    by_topic: dict[str, list[DescribeProducersPartition]] = {}
    for r in manager.describe_producers(entries):
        by_topic.setdefault(r.topic, []).append(
            DescribeProducersPartition(
                partition_index=r.partition,
                error=error_object(r.error),
                active_producers=tuple(
                    ProducerState(**producer_state_fields(e)) for e in r.producers
                ),
            )
        )
    return DescribeProducersResponse(
        topics=tuple(
            DescribeProducersTopic(name=name, partitions=tuple(ps)) for name, ps in by_topic.items()
        )
    )


def describe_producers_route(manager: Callable[[web.Request], ReplicaManager]) -> web.RouteDef:
    """``POST /v1/describe-producers``: HTTP 200 with Kafka errors per partition."""

    async def handle(request: web.Request) -> web.Response:
        body = decode(await request.read(), DescribeProducersRequest)
        answer = describe_producers(manager(request), body)
        return web.Response(body=encode(answer), status=200, content_type="application/json")

    return web.post("/v1/describe-producers", handle)
