"""DeleteRecords: move a partition's log start offset up (``POST /v1/delete-records``).

Theory of operation
-------------------
Kafka's DeleteRecords, on the partition leader. For each partition asked:

1. The partition core (``Replica.delete_records``, with :func:`target_offset`) checks
   the request against the replica state: only
   the leader deletes (NOT_LEADER_OR_FOLLOWER), ``-1`` means the high watermark, an
   offset above the high watermark (or another negative one) is OFFSET_OUT_OF_RANGE.
   Only committed records can be deleted, so every replica holds what survives.
2. The core moves its log's start (the segment log's checkpointed
   ``log-start-offset``, which ListOffsets(earliest) and consumer fetches read) and
   deletes the segments now wholly below it. A consumer
   fetching below the new start gets OFFSET_OUT_OF_RANGE and resets by its
   ``auto_offset_reset``.
3. Followers learn the new start from the ``log_start_offset`` of every fetch
   response and move their own logs' start (their core does this on each fetch
   answer); their next fetch reports it back.
4. The answer waits until the *low watermark* reaches the target: the smallest log
   start among the leader and the followers in the committed ISR (Kafka waits for the
   alive replicas; raftka for the in-sync ones, so a follower that fell out of the
   ISR does not stall the call). Past ``timeout_ms`` the partition answers
   REQUEST_TIMED_OUT; the start has moved on the leader anyway, and a retry is
   harmless (moving the start to where it is is a no-op).

The follower progress the wait reads changes on follower fetches, which fire no
signal here, so the wait re-checks every :data:`LOW_WATERMARK_CHECK_MS`. The request
body is the typed :class:`DeleteRecordsRequest` (bad input answers INVALID_REQUEST
naming the field).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from raftka.broker.replication.data_plane import PartitionResult
from raftka.broker.replication.manager import Partition, ReplicaManager
from raftka.broker.replication.partition import HIGH_WATERMARK, low_watermark, target_offset
from raftka.common.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages import decode
from raftka.common.messages.delete_records import (
    DELETE_RECORDS_PARTITIONS_MAX,
    DeleteRecordsRequest,
)
from raftka.common.time import monotonic_ms
from raftka.server_common.http_errors import json_response

__all__ = [
    "DELETE_RECORDS_PARTITIONS_MAX",
    "DELETE_RECORDS_TIMEOUT_MS_MAX",
    "HIGH_WATERMARK",
    "DeleteRecordsResult",
    "delete_records",
    "delete_records_routes",
    "low_watermark",
    "target_offset",
]

#: Bound on how long one request waits for the followers, whatever it asks.
DELETE_RECORDS_TIMEOUT_MS_MAX: Final = 300_000
#: How often the wait for the low watermark re-checks the followers' progress.
LOW_WATERMARK_CHECK_MS: Final = 50


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult(PartitionResult):
    low_watermark: int = -1


# ------------------------------------------------------------------ shell


async def delete_records(
    manager: ReplicaManager,
    entries: Sequence[tuple[str, int, int]],
    *,
    timeout_ms: int,
    clock_ms: Callable[[], int] | None = None,
) -> list[DeleteRecordsResult]:
    """Delete the records before each ``(topic, partition, offset)`` (see the module
    docstring); one result per entry, in order."""
    clock = clock_ms or monotonic_ms
    deadline_ms = clock() + max(0, min(timeout_ms, DELETE_RECORDS_TIMEOUT_MS_MAX))
    results: list[DeleteRecordsResult | None] = []
    waiting: dict[int, tuple[Partition, int]] = {}
    for i, (topic, index, requested) in enumerate(entries):
        # An I/O worker's job (retention, a flush) moves the log start too: after it.
        await manager.wait_io_released([(topic, index)])
        p = manager.partitions.get((topic, index))
        if p is None:
            error: KafkaError = (
                UnknownTopicOrPartitionError(f"{topic}-{index} does not exist")
                if manager.image.topics.partition_by_name(topic, index) is None
                else NotLeaderOrFollowerError(f"this broker holds no replica of {topic}-{index}")
            )
            results.append(DeleteRecordsResult(topic, index, error))
            continue
        target, ready = p.replica.delete_records(requested)
        manager.carry_out(p, ready)
        if isinstance(target, KafkaError):
            results.append(DeleteRecordsResult(topic, index, target))
            continue
        results.append(None)
        waiting[i] = (p, target)
    while waiting:
        for i, (p, target) in list(waiting.items()):
            if manager.partitions.get(p.tp) is not p or not p.replica.is_leader:
                results[i] = DeleteRecordsResult(
                    p.topic, p.index, NotLeaderOrFollowerError(f"lost the leadership of {p.tp}")
                )
                del waiting[i]
            elif (low := p.replica.low_watermark()) >= target:
                results[i] = DeleteRecordsResult(p.topic, p.index, None, low)
                del waiting[i]
        remaining_ms = deadline_ms - clock()
        if not waiting or remaining_ms <= 0:
            break
        await asyncio.sleep(min(LOW_WATERMARK_CHECK_MS, remaining_ms) / 1000)  # re-check
    for i, (p, target) in waiting.items():
        results[i] = DeleteRecordsResult(
            p.topic,
            p.index,
            RequestTimedOutError(
                f"the in-sync replicas of {p.tp[0]}-{p.tp[1]} did not reach log start "
                f"{target} in time (low watermark {p.replica.low_watermark()})"
            ),
        )
    out = [r for r in results if r is not None]
    assert len(out) == len(entries)
    return out


# ------------------------------------------------------------------ route


def delete_records_routes(
    manager_of: Callable[[web.Request], ReplicaManager],
) -> list[web.RouteDef]:
    """The broker's ``POST /v1/delete-records`` route (``manager_of`` finds the
    request's replica manager)."""

    async def handle(request: web.Request) -> web.Response:
        body = decode(await request.read(), DeleteRecordsRequest)
        entries = [(e.topic, e.partition, e.offset) for e in body.partitions]
        results = await delete_records(manager_of(request), entries, timeout_ms=body.timeout_ms)
        return json_response({"responses": [_result_json(r) for r in results]})

    route: Callable[[web.Request], Awaitable[web.Response]] = handle
    return [web.post("/v1/delete-records", route)]


def _result_json(r: DeleteRecordsResult) -> dict[str, object]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "error": None if r.error is None else r.error.to_wire(),
        "low_watermark": r.low_watermark,
    }
