"""DescribeLogDirs (``POST /v1/describe-log-dirs``): what a broker stores where.

The request names the partitions to describe (``topics``), or none for every one. The
answer has one entry per log dir of the broker (every dir, empty or not, as Kafka's
does): its error (KAFKA_STORAGE_ERROR when the dir cannot be read), its total and
usable bytes, and per partition stored there its size and offset lag (Kafka's
``offsetLag`` of a current log: high watermark minus log end, never below 0)."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from raftka.common.messages import INT64_MAX, Message, PartitionId, TopicName
from raftka.common.messages.broker import ErrorObject

__all__ = [
    "DESCRIBE_LOG_DIRS_TOPICS_MAX",
    "DescribeLogDirsRequest",
    "DescribeLogDirsResponse",
    "DescribeLogDirsTopic",
    "LogDirPartition",
    "LogDirResult",
]

#: Bound on the topics of one request.
DESCRIBE_LOG_DIRS_TOPICS_MAX: Final = 10_000

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=INT64_MAX)]


class DescribeLogDirsTopic(Message, frozen=True, kw_only=True):
    topic: TopicName
    partitions: Annotated[tuple[PartitionId, ...], msgspec.Meta(max_length=100_000)]


class DescribeLogDirsRequest(Message, frozen=True, kw_only=True):
    # None: every partition the broker stores.
    topics: (
        Annotated[
            tuple[DescribeLogDirsTopic, ...], msgspec.Meta(max_length=DESCRIBE_LOG_DIRS_TOPICS_MAX)
        ]
        | None
    ) = None


class LogDirPartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: PartitionId
    size: Int64
    offset_lag: Int64
    is_future: bool = False  # raftka never moves a replica between dirs


class LogDirResult(Message, frozen=True, kw_only=True):
    log_dir: str
    error: ErrorObject | None
    total_bytes: Int64
    usable_bytes: Int64
    partitions: tuple[LogDirPartition, ...]


class DescribeLogDirsResponse(Message, frozen=True, kw_only=True):
    results: tuple[LogDirResult, ...]
