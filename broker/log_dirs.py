"""DescribeLogDirs on a broker: which partitions each log dir holds, and their sizes.

One function answers both of the broker's faces: raftka's ``POST
/v1/describe-log-dirs`` (the admin client, ``raftka log-dirs describe``) and the Kafka
listener's DescribeLogDirs (``kafka-log-dirs``). Every log dir is listed, empty or
not, as Kafka's answer does; a dir whose usage cannot be read says
KAFKA_STORAGE_ERROR. A partition whose log is not open (being deleted, or not yet
placed) has no size and is left out.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from raftka.common.errors import KafkaStorageError
from raftka.common.messages import decode, encode
from raftka.common.messages.broker import error_object
from raftka.common.messages.log_dirs import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    LogDirPartition,
    LogDirResult,
)
from raftka.storage.log_manager import LogManager, PartitionKey

__all__ = ["describe_log_dirs", "log_dirs_routes"]


def describe_log_dirs(
    logs: LogManager, wanted: Collection[PartitionKey] | None = None
) -> list[LogDirResult]:
    """Every log dir of ``logs`` with the partitions it stores (those in ``wanted``
    only, when given)."""
    results = []
    for log_dir, stored in logs.stored_by_dir().items():
        partitions = []
        for tp in stored:
            opened = logs.get(tp)
            if (wanted is not None and tp not in wanted) or opened is None:
                continue
            partitions.append(
                LogDirPartition(
                    topic=tp[0],
                    partition=tp[1],
                    size=opened.size_bytes,
                    # Kafka's lag of a current (not future) log: HW - LEO, >= 0.
                    offset_lag=max(0, opened.high_watermark - opened.log_end_offset),
                )
            )
        try:
            usage = shutil.disk_usage(log_dir)
        except OSError as e:
            error = error_object(KafkaStorageError(f"{log_dir}: {e}"))
            total, usable = -1, -1
        else:
            error, total, usable = None, usage.total, usage.free
        results.append(
            LogDirResult(
                log_dir=str(log_dir),
                error=error,
                total_bytes=total,
                usable_bytes=usable,
                partitions=tuple(partitions),
            )
        )
    return results


def log_dirs_routes(logs_of: Callable[[web.Request], LogManager]) -> list[web.RouteDef]:
    """The broker's ``POST /v1/describe-log-dirs`` route (``logs_of`` finds the
    request's log manager)."""

    async def handle(request: web.Request) -> web.Response:
        body = decode(await request.read(), DescribeLogDirsRequest)
        wanted = (
            None
            if body.topics is None
            else {(t.topic, p) for t in body.topics for p in t.partitions}
        )
        answer = DescribeLogDirsResponse(results=tuple(describe_log_dirs(logs_of(request), wanted)))
        return web.Response(body=encode(answer), content_type="application/json")

    route: Callable[[web.Request], Awaitable[web.Response]] = handle
    return [web.post("/v1/describe-log-dirs", route)]
