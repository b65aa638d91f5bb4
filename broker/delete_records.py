"""DeleteRecords: move a partition's log start offset up (``POST /v1/delete-records``).

Theory of operation
-------------------
Kafka's DeleteRecords, on the partition leader. For each partition asked:

1. :func:`target_offset` (pure) checks the request against the replica state: only
   the leader deletes (NOT_LEADER_OR_FOLLOWER), ``-1`` means the high watermark, an
   offset above the high watermark (or another negative one) is OFFSET_OUT_OF_RANGE.
   Only committed records can be deleted, so every replica holds what survives.
2. The leader moves its log start (the segment log's checkpointed
   ``log-start-offset``, then the replica state, which ListOffsets(earliest) and
   consumer fetches read) and deletes the segments now wholly below it. A consumer
   fetching below the new start gets OFFSET_OUT_OF_RANGE and resets by its
   ``auto_offset_reset``.
3. Followers learn the new start from the ``log_start_offset`` of every fetch
   response and move their own logs' start (the replica manager does this on each
   fetch answer); their next fetch reports it back.
4. The answer waits until the *low watermark* reaches the target: the smallest log
   start among the leader and the followers in the committed ISR (Kafka waits for the
   alive replicas; raftka for the in-sync ones, so a follower that fell out of the
   ISR does not stall the call). Past ``timeout_ms`` the partition answers
   REQUEST_TIMED_OUT; the start has moved on the leader anyway, and a retry is
   harmless (moving the start to where it is is a no-op).

The follower progress the wait reads changes on follower fetches, which fire no
signal here, so the wait re-checks every :data:`LOW_WATERMARK_CHECK_MS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web

from raftka.broker.replication.manager import Partition, ReplicaManager
from raftka.broker.replication.partition_state import PartitionState
from raftka.common.errors import (
    InvalidRequestError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from raftka.common.time import monotonic_ms
from raftka.server_common.http_errors import json_response

__all__ = [
    "DELETE_RECORDS_TIMEOUT_MS_MAX",
    "HIGH_WATERMARK",
    "DeleteRecordsResult",
    "delete_records",
    "delete_records_routes",
    "low_watermark",
    "target_offset",
]

#: The offset that means "up to the high watermark" (Kafka's DeleteRecords -1).
HIGH_WATERMARK: Final = -1
#: Bound on how long one request waits for the followers, whatever it asks.
DELETE_RECORDS_TIMEOUT_MS_MAX: Final = 300_000
#: Bound on the partitions of one request.
DELETE_RECORDS_PARTITIONS_MAX: Final = 10_000
#: How often the wait for the low watermark re-checks the followers' progress.
LOW_WATERMARK_CHECK_MS: Final = 50


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    topic: str
    partition: int
    error: KafkaError | None = None
    low_watermark: int = -1


# ------------------------------------------------------------------ pure core


def target_offset(state: PartitionState, requested: int) -> int | KafkaError:
    """The log start offset a DeleteRecords of ``requested`` moves to, or its error."""
    name = f"{state.topic}-{state.partition}"
    if not state.is_leader:
        return NotLeaderOrFollowerError(f"this broker does not lead {name}")
    if requested == HIGH_WATERMARK:
        return state.high_watermark
    if requested < 0 or requested > state.high_watermark:
        return OffsetOutOfRangeError(
            f"cannot delete records of {name} before offset {requested}: it must be in "
            f"[0, {state.high_watermark}] (the high watermark), or -1"
        )
    return requested


def low_watermark(state: PartitionState) -> int:
    """The smallest log start among the leader and its in-sync followers (a follower
    not heard from yet counts as 0: it has not shown that it moved)."""
    starts = [state.log_start_offset]
    for replica in state.committed_isr:
        if replica == state.local_broker_id:
            continue
        progress = state.follower(replica)
        starts.append(0 if progress is None else max(progress.log_start_offset, 0))
    return min(starts)


# ------------------------------------------------------------------ shell


def _move_log_start(p: Partition, target: int) -> None:
    if target > p.log.log_start_offset:
        p.log.maybe_increment_log_start_offset(target)
    p.state.on_log_start_offset(log_start_offset=target)
    p.log.delete_retention_segments()
    p.signal.fire()


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
        p = manager.partitions.get((topic, index))
        if p is None:
            error: KafkaError = (
                UnknownTopicOrPartitionError(f"{topic}-{index} does not exist")
                if manager.image.topics.partition_by_name(topic, index) is None
                else NotLeaderOrFollowerError(f"this broker holds no replica of {topic}-{index}")
            )
            results.append(DeleteRecordsResult(topic, index, error))
            continue
        target = target_offset(p.state, requested)
        if isinstance(target, KafkaError):
            results.append(DeleteRecordsResult(topic, index, target))
            continue
        _move_log_start(p, target)
        results.append(None)
        waiting[i] = (p, target)
    while waiting:
        for i, (p, target) in list(waiting.items()):
            if manager.partitions.get(p.tp) is not p or not p.state.is_leader:
                results[i] = DeleteRecordsResult(
                    p.topic, p.index, NotLeaderOrFollowerError(f"lost the leadership of {p.tp}")
                )
                del waiting[i]
            elif (low := low_watermark(p.state)) >= target:
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
                f"{target} in time (low watermark {low_watermark(p.state)})"
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
        entries, timeout_ms = _parse(await request.read())
        results = await delete_records(manager_of(request), entries, timeout_ms=timeout_ms)
        return json_response({"responses": [_result_json(r) for r in results]})

    route: Callable[[web.Request], Awaitable[web.Response]] = handle
    return [web.post("/v1/delete-records", route)]


def _parse(raw: bytes) -> tuple[list[tuple[str, int, int]], int]:
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"delete-records: the body is not JSON: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("partitions"), list):
        raise InvalidRequestError("delete-records needs a JSON object with a list 'partitions'")
    timeout_ms = body.get("timeout_ms", 30_000)
    if type(timeout_ms) is not int:
        raise InvalidRequestError(f"timeout_ms: expected an integer, got {timeout_ms!r}")
    items = body["partitions"]
    if len(items) > DELETE_RECORDS_PARTITIONS_MAX:
        raise InvalidRequestError(f"more than {DELETE_RECORDS_PARTITIONS_MAX} partitions")
    entries: list[tuple[str, int, int]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequestError(f"partitions[{i}]: expected an object")
        topic, index, offset = item.get("topic"), item.get("partition"), item.get("offset")
        if type(topic) is not str or type(index) is not int or type(offset) is not int:
            raise InvalidRequestError(
                f"partitions[{i}]: expected topic (string), partition and offset (integers)"
            )
        entries.append((topic, index, offset))
    return entries, timeout_ms


def _result_json(r: DeleteRecordsResult) -> dict[str, object]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "error": None if r.error is None else r.error.to_wire(),
        "low_watermark": r.low_watermark,
    }
