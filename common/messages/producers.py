"""DescribeProducers (KIP-664) as JSON over raftka's HTTP API: a partition leader's
producer state, what ``raftka transactions find-hanging`` reads
(``POST /v1/describe-producers``, :mod:`raftka.broker.describe_producers`). Field
names are Kafka's DescribeProducers schema in snake case."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from raftka.common.messages import Message
from raftka.common.messages.broker import ErrorObject
from raftka.common.messages.transactions import TxnTopic

__all__ = [
    "DESCRIBE_PRODUCERS_TOPICS_MAX",
    "DescribeProducersPartition",
    "DescribeProducersRequest",
    "DescribeProducersResponse",
    "DescribeProducersTopic",
    "ProducerState",
]

#: Topics of one request.
DESCRIBE_PRODUCERS_TOPICS_MAX: Final = 100_000


class DescribeProducersRequest(Message, frozen=True, kw_only=True):
    topics: Annotated[tuple[TxnTopic, ...], msgspec.Meta(max_length=DESCRIBE_PRODUCERS_TOPICS_MAX)]


class ProducerState(Message, frozen=True, kw_only=True):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    #: First offset of the producer's open transaction here; -1 when none is open.
    current_txn_start_offset: int


class DescribeProducersPartition(Message, frozen=True, kw_only=True):
    partition_index: int
    error: ErrorObject | None = None
    active_producers: tuple[ProducerState, ...] = ()


class DescribeProducersTopic(Message, frozen=True, kw_only=True):
    name: str
    partitions: tuple[DescribeProducersPartition, ...] = ()


class DescribeProducersResponse(Message, frozen=True, kw_only=True):
    topics: tuple[DescribeProducersTopic, ...] = ()
