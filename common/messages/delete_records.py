"""DeleteRecords (``POST /v1/delete-records``): the request the admin client sends to a
partition leader. Offsets and timeouts keep Kafka's ranges; what an offset *means*
(-1 for the high watermark, above it OFFSET_OUT_OF_RANGE) is the broker's per-partition
answer, not a decoding error, so any int64 offset decodes."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from raftka.common.messages import (
    INT64_MAX,
    Int32,
    Message,
    PartitionId,
    TopicName,
)

__all__ = [
    "DELETE_RECORDS_PARTITIONS_MAX",
    "DELETE_RECORDS_TIMEOUT_MS_DEFAULT",
    "DeleteRecordsPartition",
    "DeleteRecordsRequest",
]

#: Bound on the partitions of one request.
DELETE_RECORDS_PARTITIONS_MAX: Final = 10_000
#: The wait for the followers when the request names none (Kafka's admin default).
DELETE_RECORDS_TIMEOUT_MS_DEFAULT: Final = 30_000

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=INT64_MAX)]


class DeleteRecordsPartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: PartitionId
    # Delete every record before this offset; -1 means the high watermark.
    offset: Int64


class DeleteRecordsRequest(Message, frozen=True, kw_only=True):
    partitions: Annotated[
        tuple[DeleteRecordsPartition, ...], msgspec.Meta(max_length=DELETE_RECORDS_PARTITIONS_MAX)
    ]
    # How long to wait for the in-sync followers to follow (the broker caps it).
    timeout_ms: Int32 = DELETE_RECORDS_TIMEOUT_MS_DEFAULT
