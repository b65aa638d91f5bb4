"""The data plane's shapes: the shell's handle on one partition (:class:`Partition`:
its core, its segment log, a wake-up signal for parked fetches), the requests and
results of produce, fetch and ListOffsets, and the protocols of the shell's
collaborators (the fetcher manager, the AlterPartition channel)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftka.broker.producer_state import ProducerStateEntry, ProducerStateManager
from raftka.broker.replication.partition import Replica
from raftka.broker.replication.partition_state import PartitionState
from raftka.common.errors import KafkaError
from raftka.common.messages.controller import AlterPartitionRequest, AlterPartitionResponse
from raftka.common.record.read_committed import AbortedTransaction
from raftka.common.structs import EpochEndOffset
from raftka.storage import Log
from raftka.storage.log_manager import PartitionKey

__all__ = [
    "AlterPartitionSender",
    "DescribeProducersResult",
    "EpochEndOffsetResult",
    "FetchPartition",
    "FetchResult",
    "FetchTargets",
    "ListOffsetsResult",
    "Partition",
    "PartitionResult",
    "ProduceResult",
    "Signal",
    "TxnMarkerWrite",
]


class Signal:
    """Wakes every fetch waiting on "this partition changed" (an append, a HW move).

    A parked fetch hands the same future to the signal of each partition it reads
    (``watch``) and takes it back when it wakes (``unwatch``): two set operations per
    partition, where a task per partition waiting on an event cost a task's creation,
    scheduling and cancellation each time a follower's fetch of idle partitions parked
    (docs/benchmarks.md, idle partitions)."""

    __slots__ = ("_futures",)

    def __init__(self) -> None:
        self._futures: set[asyncio.Future[None]] = set()

    def watch(self, future: asyncio.Future[None]) -> None:
        """Resolve ``future`` at the next change. Call it before reading, so a change
        in between is not missed."""
        self._futures.add(future)

    def unwatch(self, future: asyncio.Future[None]) -> None:
        self._futures.discard(future)

    @property
    def watchers(self) -> int:
        """How many parked fetches this partition would wake now."""
        return len(self._futures)

    def fire(self) -> None:
        futures, self._futures = self._futures, set()
        for future in futures:
            if not future.done():
                future.set_result(None)


@dataclass(slots=True)
class Partition:
    """The shell's handle on one partition: its core and what only the shell needs."""

    topic_id: str
    topic: str
    index: int
    replica: Replica
    # The segment log under the core's SegmentPartitionLog. Read-only for the shell's
    # readers that predate the core (the group coordinator loads its partitions from
    # it); replication never changes it except through the core.
    log: Log
    signal: Signal = field(default_factory=Signal)

    @property
    def tp(self) -> PartitionKey:
        return (self.topic, self.index)

    @property
    def state(self) -> PartitionState:
        return self.replica.state

    @property
    def producers(self) -> ProducerStateManager:
        """The idempotent producers' de-duplication table, kept on every replica (leader
        appends, follower appends, recovery) so a new leader de-duplicates at once."""
        return self.replica.producers


class FetchTargets(Protocol):
    """Where followers fetch from (the replica fetcher manager)."""

    def set_leader(self, tp: PartitionKey, leader_id: int) -> None: ...

    def remove(self, tp: PartitionKey) -> None: ...


class AlterPartitionSender(Protocol):
    async def __call__(
        self, request: AlterPartitionRequest, *, timeout_ms: int
    ) -> AlterPartitionResponse: ...


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What every per-partition answer of the data plane starts with: the partition,
    and its error (None on success). Subclasses add the request's own fields."""

    topic: str
    partition: int
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ProduceResult(PartitionResult):
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    current_leader: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1024 * 1024
    current_leader_epoch: int | None = None
    last_fetched_epoch: int | None = None  # followers: the epoch of their last record
    log_start_offset: int = -1  # followers: their log start


@dataclass(frozen=True, slots=True)
class FetchResult(PartitionResult):
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    records: bytes = b""
    current_leader: dict[str, Any] | None = None
    # Kafka's LSO (-1 where unknown: an error, a follower's fetch).
    last_stable_offset: int = -1
    # read_committed only: the aborted transactions overlapping ``records``.
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None


@dataclass(frozen=True, slots=True)
class TxnMarkerWrite:
    """One partition of one WriteTxnMarkers marker (broker/txn_markers.py)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transaction_version: int


@dataclass(frozen=True, slots=True)
class DescribeProducersResult(PartitionResult):
    #: The partition's producer state, by producer id (the de-duplication table).
    producers: tuple[ProducerStateEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class EpochEndOffsetResult(PartitionResult):
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResult(PartitionResult):
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1
