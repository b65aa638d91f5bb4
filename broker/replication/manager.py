"""The ReplicaManager: every partition replica of this broker, and the data plane.

Theory of operation
-------------------
A :class:`Partition` is the pure replica state (:class:`PartitionState`: role, LEO, HW,
ISR, epochs) plus its segment log and a wake-up signal. The manager is the shell the
pure cores' docstrings describe; everything runs on one asyncio loop and every method
that touches a partition is synchronous, so a partition's state, its log and the
purgatory change together between two awaits (no locks needed).

- **Metadata** (:meth:`apply_metadata`): committed local changes, in log order. Deletes
  first (a topic deleted and recreated under the same name reuses the directory name),
  then leaders (``make_leader``; the epoch start it returns goes into the log's epoch
  cache), then followers (``make_follower``; the fetchers are told where to fetch).
- **Produce** (:meth:`produce`): ``check_produce`` (acks, leadership,
  min.insync.replicas against the committed ISR), ``append_as_leader``,
  ``on_leader_append``; acks=all parks a future in the :class:`ProducePurgatory`,
  completed when the HW passes the batch (``on_hw_advanced``), failed when leadership
  is lost, or REQUEST_TIMED_OUT from a timer armed at the purgatory's next deadline.
  No polling anywhere.
- **Fetch** (:meth:`fetch`): consumers read up to the HW (``check_consumer_fetch``);
  followers (``replica_id`` >= 0) up to the LEO, and their fetch offset is their LEO
  for the leader (``on_follower_fetch``: follower progress, HW, ISR expansion,
  diverging epoch). A fetch with fewer than ``min_bytes`` parks on the partitions'
  signals (fired on every append and HW move) until ``max_wait_ms``.
- **ISR changes** go to the controller as AlterPartition (one in flight per partition,
  as the core allows); a timer calls ``maybe_shrink_isr``.
- **Follower side**: the replica fetchers (:mod:`.fetcher`) call
  :meth:`on_follower_records` / :meth:`on_follower_diverging` with the leader's answer.

A high watermark move is always applied to the log too (``update_high_watermark``),
so the HW checkpoint and retention see the value the state holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from raftka.broker.config import BrokerConfig
from raftka.broker.producer_state import (
    Append,
    Duplicate,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateManager,
    Rejected,
    in_sequence,
)
from raftka.broker.producer_state_store import (
    load_producer_state,
    prune_snapshots,
    write_producer_snapshot,
)
from raftka.broker.replication.partition_state import (
    ACKS_ALL,
    VALID_ACKS,
    IsrProposal,
    PartitionState,
    ReplicaRole,
    StateChange,
)
from raftka.broker.replication.purgatory import Completion, ProducePurgatory, PurgatoryFullError
from raftka.common.errors import (
    CorruptMessageError,
    DuplicateSequenceNumberError,
    InvalidRequiredAcksError,
    KafkaError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from raftka.common.record.header import iter_batches
from raftka.common.structs import EpochEndOffset
from raftka.common.time import monotonic_ms
from raftka.metadata.delta import LocalReplicaChanges
from raftka.metadata.image import MetadataImage, PartitionRegistration, TopicIdPartition
from raftka.metadata.metadata_records import NO_LEADER
from raftka.storage import Log
from raftka.storage.log_manager import LogManager, TopicPartition

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "FetchPartition",
    "FetchResult",
    "ListOffsetsResult",
    "Partition",
    "ProduceResult",
    "ReplicaManager",
]

log = logging.getLogger(__name__)

#: ListOffsets' special timestamps (Kafka's).
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
#: Bound on how long a produce may wait for acks=all, whatever the request asks.
PRODUCE_TIMEOUT_MS_MAX: Final = 300_000
#: Bound on a fetch's long poll.
FETCH_WAIT_MS_MAX: Final = 30_000
#: Bound on partitions in one produce or fetch request.
REQUEST_PARTITIONS_MAX: Final = 10_000
#: Backoff between AlterPartition attempts the core asks to retry.
ALTER_RETRY_BACKOFF_MS: Final = 100


class _Signal:
    """Wakes every task waiting on "this partition changed" (an append, a HW move)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        """Take it before reading, so a change in between is not missed."""
        return self._event

    def fire(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()


@dataclass(slots=True)
class Partition:
    topic_id: str
    topic: str
    index: int
    state: PartitionState
    log: Log
    # The idempotent producers' de-duplication table, kept on every replica (leader
    # appends, follower appends, recovery) so a new leader de-duplicates at once.
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    signal: _Signal = field(default_factory=_Signal)
    # The active segment when the producer state was last snapshotted: a roll since
    # then writes the next snapshot (broker/producer_state_store.py).
    snapshot_segment_base: int = -1

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.index)


class FetchTargets(Protocol):
    """Where followers fetch from (the replica fetcher manager)."""

    def set_leader(self, tp: TopicPartition, leader_id: int) -> None: ...

    def remove(self, tp: TopicPartition) -> None: ...


class AlterPartitionSender(Protocol):
    async def __call__(self, body: dict[str, Any], *, timeout_ms: int) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ProduceResult:
    topic: str
    partition: int
    error: KafkaError | None = None
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
class FetchResult:
    topic: str
    partition: int
    error: KafkaError | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    records: bytes = b""
    current_leader: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    topic: str
    partition: int
    error: KafkaError | None = None
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        logs: LogManager,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.config = config
        self._producer_config = ProducerStateConfig(
            producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        self.broker_id = config.node_id
        self.logs = logs
        self.image = MetadataImage.EMPTY
        self.partitions: dict[TopicPartition, Partition] = {}
        self.purgatory: ProducePurgatory[TopicPartition] = ProducePurgatory()
        self.fetch_targets: FetchTargets | None = None
        self.alter_partition: AlterPartitionSender | None = None
        self.broker_epoch: Callable[[], int] = lambda: -1
        self._clock_ms = clock_ms
        self._request_ids = itertools.count(1)
        self._waiting: dict[tuple[int, TopicPartition], asyncio.Future[KafkaError | None]] = {}
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at_ms: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        # Fetches parked in their long poll now (Kafka's fetch purgatory size).
        self.fetch_waiters = 0

    # ================================================================ metadata

    def apply_metadata(self, image: MetadataImage, changes: LocalReplicaChanges) -> None:
        """Committed metadata: the new image and what this broker must do, in log order."""
        configs_changed = image.configs is not self.image.configs
        self.image = image
        if configs_changed:
            # A topic's min.insync.replicas applies to produces from now on.
            for p in self.partitions.values():
                p.state.config = self.config.replication_config(image.configs.topic_config(p.topic))
        if changes.is_empty():
            return
        now = self._clock_ms()
        for tip in sorted(changes.deletes):
            self.stop_replica((tip.topic, tip.partition), delete=True, topic_id=tip.topic_id)
        for tip, reg in sorted(changes.leaders.items()):
            self._become_leader(tip, reg, now)
        for tip, reg in sorted(changes.followers.items()):
            self._become_follower(tip, reg, now)

    def _partition_for(self, tip: TopicIdPartition) -> Partition:
        tp = (tip.topic, tip.partition)
        existing = self.partitions.get(tp)
        if existing is not None and existing.topic_id != tip.topic_id:
            # The topic was deleted and recreated under its name: the old replica goes.
            self.stop_replica(tp, delete=True, topic_id=existing.topic_id)
            existing = None
        if existing is not None:
            return existing
        topic_config = self.image.configs.topic_config(tip.topic)
        opened = self.logs.get_or_open(tp, self.config.log_config(topic_config))
        state = PartitionState(
            topic=tip.topic,
            partition=tip.partition,
            local_broker_id=self.broker_id,
            epochs=opened.leader_epoch_cache,
            log_end_offset=opened.log_end_offset,
            log_start_offset=opened.log_start_offset,
            high_watermark=self.logs.checkpointed_high_watermark(tp),
            config=self.config.replication_config(topic_config),
        )
        opened.update_high_watermark(state.high_watermark)
        producers = load_producer_state(opened, self._producer_config)
        partition = Partition(tip.topic_id, tip.topic, tip.partition, state, opened, producers)
        partition.snapshot_segment_base = opened.active_segment_base_offset
        self.partitions[tp] = partition
        return partition

    def _become_leader(self, tip: TopicIdPartition, reg: PartitionRegistration, now: int) -> None:
        p = self._partition_for(tip)
        try:
            change = p.state.make_leader(
                leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch,
                replicas=reg.replicas,
                isr=reg.isr,
                now_ms=now,
            )
        except ValueError as e:
            log.error(
                "cannot become leader",
                extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
            )
            return
        if not change.applied:
            log.debug(
                "leader change not applied",
                extra={"fields": {"partition": _name(p.tp), "reason": change.reason}},
            )
            return
        if change.assign_epoch_start_offset is not None:
            epoch, start = change.assign_epoch_start_offset
            p.log.leader_epoch_cache.assign(epoch, start)
        if self.fetch_targets is not None:
            self.fetch_targets.remove(p.tp)
        log.info(
            change.reason,
            extra={
                "fields": {
                    "partition": _name(p.tp),
                    "leader_epoch": reg.leader_epoch,
                    "isr": list(reg.isr),
                    "leo": p.state.log_end_offset,
                }
            },
        )
        self._after_change(p, change)

    def _become_follower(self, tip: TopicIdPartition, reg: PartitionRegistration, now: int) -> None:
        p = self._partition_for(tip)
        change = p.state.make_follower(
            leader_id=reg.leader,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            replicas=reg.replicas,
            isr=reg.isr,
            now_ms=now,
        )
        if not change.applied:
            return
        log.info(
            change.reason,
            extra={
                "fields": {
                    "partition": _name(p.tp),
                    "leader": reg.leader,
                    "leader_epoch": reg.leader_epoch,
                }
            },
        )
        self._after_change(p, change)
        if self.fetch_targets is not None:
            if reg.leader == NO_LEADER:
                self.fetch_targets.remove(p.tp)
            elif change.fetch_from_leader is not None:
                self.fetch_targets.set_leader(p.tp, change.fetch_from_leader)

    def stop_replica(
        self, tp: TopicPartition, *, delete: bool, topic_id: str | None = None
    ) -> None:
        p = self.partitions.get(tp)
        if p is not None and (topic_id is None or p.topic_id == topic_id):
            self._after_change(p, p.state.make_offline())
            del self.partitions[tp]
            if self.fetch_targets is not None:
                self.fetch_targets.remove(tp)
        elif p is not None:
            return  # a newer topic of the same name lives here now
        if delete:
            self.logs.delete(tp)
            log.info("deleted replica", extra={"fields": {"partition": _name(tp)}})
        else:
            self.logs.close(tp)

    def _after_change(self, p: Partition, change: StateChange) -> None:
        done: list[Completion[TopicPartition]] = []
        if change.leadership_lost:
            done += self.purgatory.on_leadership_lost(partition=p.tp)
        if change.high_watermark_moved:
            p.log.update_high_watermark(p.state.high_watermark)
            done += self.purgatory.on_hw_advanced(
                partition=p.tp, status=p.state.replication_status()
            )
        if change.isr_changed:
            done += self.purgatory.on_isr_changed(
                partition=p.tp, status=p.state.replication_status()
            )
        self._deliver(done)
        p.signal.fire()

    def _hw_moved(self, p: Partition) -> None:
        p.log.update_high_watermark(p.state.high_watermark)
        self._deliver(
            self.purgatory.on_hw_advanced(partition=p.tp, status=p.state.replication_status())
        )
        p.signal.fire()

    # ================================================================ errors

    def _registration(self, topic: str, index: int) -> PartitionRegistration | None:
        return self.image.topics.partition_by_name(topic, index)

    def current_leader(self, topic: str, index: int) -> dict[str, Any] | None:
        """Who leads the partition as far as our metadata knows (for NOT_LEADER errors)."""
        reg = self._registration(topic, index)
        if reg is None:
            return None
        broker = self.image.cluster.broker(reg.leader) if reg.leader != NO_LEADER else None
        address = None
        if broker is not None and broker.endpoints:
            address = f"{broker.endpoints[0].host}:{broker.endpoints[0].port}"
        return {"leader_id": reg.leader, "leader_epoch": reg.leader_epoch, "address": address}

    def _missing(self, topic: str, index: int) -> KafkaError:
        if self._registration(topic, index) is None:
            return UnknownTopicOrPartitionError(
                f"{topic}-{index} is not in the metadata of broker {self.broker_id}"
            )
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} holds no replica of {topic}-{index}"
        )

    def _leading(self, topic: str, index: int) -> Partition | KafkaError:
        p = self.partitions.get((topic, index))
        if p is None:
            return self._missing(topic, index)
        return p

    # ================================================================ produce

    async def produce(
        self, *, acks: int, timeout_ms: int, entries: Sequence[tuple[str, int, bytes]]
    ) -> list[ProduceResult]:
        """Append each (topic, partition, batches) as leader; answer per partition."""
        if len(entries) > REQUEST_PARTITIONS_MAX:
            raise CorruptMessageError(
                f"more than {REQUEST_PARTITIONS_MAX} partitions in one produce"
            )
        if acks not in VALID_ACKS:
            err = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {acks}")
            return [ProduceResult(t, i, err) for t, i, _ in entries]
        request_id = next(self._request_ids)
        now = self._clock_ms()
        deadline_ms = now + max(0, min(timeout_ms, PRODUCE_TIMEOUT_MS_MAX))
        results: list[ProduceResult] = []
        pending: list[tuple[int, TopicPartition, asyncio.Future[KafkaError | None]]] = []
        for topic, index, data in entries:
            result, future = self._produce_one(
                request_id, topic, index, data, acks=acks, deadline_ms=deadline_ms
            )
            if future is not None:
                pending.append((len(results), (topic, index), future))
            results.append(result)
        if pending:
            self._arm_expiry()
            for at, tp, future in pending:
                error = await future
                if error is not None:
                    results[at] = ProduceResult(
                        tp[0], tp[1], error, current_leader=self._leader_info(tp, error)
                    )
        return results

    def _leader_info(self, tp: TopicPartition, error: KafkaError) -> dict[str, Any] | None:
        if isinstance(error, NotLeaderOrFollowerError | UnknownTopicOrPartitionError):
            return self.current_leader(*tp)
        return None

    def _produce_one(
        self,
        request_id: int,
        topic: str,
        index: int,
        data: bytes,
        *,
        acks: int,
        deadline_ms: int,
    ) -> tuple[ProduceResult, asyncio.Future[KafkaError | None] | None]:
        found = self._leading(topic, index)
        if isinstance(found, KafkaError):
            return ProduceResult(
                topic, index, found, current_leader=self.current_leader(topic, index)
            ), None
        p = found
        error_type = p.state.check_produce(acks=acks)
        if error_type is not None:
            err = error_type(f"{topic}-{index} on broker {self.broker_id}")
            return ProduceResult(
                topic, index, err, current_leader=self._leader_info(p.tp, err)
            ), None
        if not data:
            return ProduceResult(topic, index, CorruptMessageError("no record batch")), None
        try:
            batches = [ProducerBatch.from_header(h) for _, h in iter_batches(data, check_crc=False)]
        except KafkaError as e:
            return ProduceResult(topic, index, e), None
        decision = _check_producers(p.producers, batches)
        if isinstance(decision, Rejected):
            return ProduceResult(topic, index, decision.error), None
        if isinstance(decision, Duplicate):
            # A retry of batches already in the log: the original offsets, and (acks=all)
            # the same wait for them to be replicated.
            ok = ProduceResult(
                topic,
                index,
                None,
                base_offset=decision.first_offset,
                log_start_offset=p.state.log_start_offset,
            )
            wait_for_offset = decision.last_offset + 1 if acks == ACKS_ALL else None
        else:
            try:
                info = p.log.append_as_leader(data, p.state.leader_epoch)
            except KafkaError as e:
                return ProduceResult(topic, index, e), None
            if info.records_count == 0:
                return ProduceResult(topic, index, CorruptMessageError("no record batch")), None
            first = info.first_offset
            for batch in batches:
                last = first + batch.last_offset_delta
                if batch.is_idempotent:
                    p.producers.update(batch, first_offset=first, last_offset=last)
                first = last + 1
            self._maybe_snapshot_producers(p)
            append = p.state.on_leader_append(last_offset=info.last_offset, acks=acks)
            p.signal.fire()  # parked follower fetches
            if append.high_watermark_moved:
                self._hw_moved(p)
            ok = ProduceResult(
                topic,
                index,
                None,
                base_offset=info.first_offset,
                log_append_time_ms=info.log_append_time_ms,
                log_start_offset=info.log_start_offset,
            )
            wait_for_offset = append.wait_for_offset
        if wait_for_offset is None:
            return ok, None
        done, error = p.state.replication_status().check(wait_for_offset)
        if done:
            if error is not None:
                err = error(f"{topic}-{index}")
                return ProduceResult(
                    topic, index, err, current_leader=self._leader_info(p.tp, err)
                ), None
            return ok, None
        try:
            self.purgatory.add(
                request_id=request_id,
                partition=p.tp,
                required_offset=wait_for_offset,
                deadline_ms=deadline_ms,
            )
        except PurgatoryFullError as e:
            return ProduceResult(topic, index, RequestTimedOutError(str(e))), None
        future: asyncio.Future[KafkaError | None] = asyncio.get_running_loop().create_future()
        self._waiting[(request_id, p.tp)] = future
        return ok, future

    def _deliver(self, completions: Iterable[Completion[TopicPartition]]) -> None:
        for c in completions:
            future = self._waiting.pop((c.request_id, c.partition), None)
            if future is not None and not future.done():
                future.set_result(None if c.error is None else c.error(f"{_name(c.partition)}"))

    def _arm_expiry(self) -> None:
        """A timer at the purgatory's next deadline (no polling loop)."""
        next_ms = self.purgatory.next_deadline_ms()
        if next_ms is None:
            return
        if (
            self._expiry is not None
            and self._expiry_at_ms is not None
            and self._expiry_at_ms <= next_ms
        ):
            return
        if self._expiry is not None:
            self._expiry.cancel()
        delay_s = max(0, next_ms - self._clock_ms()) / 1000
        self._expiry_at_ms = next_ms
        self._expiry = asyncio.get_running_loop().call_later(delay_s, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        self._expiry_at_ms = None
        self._deliver(self.purgatory.expire(now_ms=self._clock_ms()))
        self._arm_expiry()

    # ================================================================ fetch

    async def fetch(
        self,
        *,
        replica_id: int,
        broker_epoch: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partitions: Sequence[FetchPartition],
    ) -> list[FetchResult]:
        """A consumer (``replica_id`` < 0) or follower fetch, long-polled."""
        if len(partitions) > REQUEST_PARTITIONS_MAX:
            raise CorruptMessageError(f"more than {REQUEST_PARTITIONS_MAX} partitions in one fetch")
        deadline_ms = self._clock_ms() + max(0, min(max_wait_ms, FETCH_WAIT_MS_MAX))
        while True:
            waiters = [
                p.signal.waiter()
                for req in partitions
                if (p := self.partitions.get((req.topic, req.partition))) is not None
            ]
            results = self._read_all(replica_id, broker_epoch, max_bytes, partitions)
            size = sum(len(r.records) for r in results)
            urgent = any(r.error is not None or r.diverging_epoch is not None for r in results)
            remaining_ms = deadline_ms - self._clock_ms()
            if size >= min_bytes or urgent or remaining_ms <= 0 or not waiters or self._stopping:
                return results
            self.fetch_waiters += 1
            try:
                await _wait_any(waiters, remaining_ms)
            finally:
                self.fetch_waiters -= 1

    def _read_all(
        self,
        replica_id: int,
        broker_epoch: int,
        max_bytes: int,
        partitions: Sequence[FetchPartition],
    ) -> list[FetchResult]:
        budget = max_bytes
        out: list[FetchResult] = []
        now = self._clock_ms()
        for req in partitions:
            if replica_id >= 0:
                result = self._read_for_follower(replica_id, broker_epoch, req, budget, now)
            else:
                result = self._read_for_consumer(req, budget, first=budget == max_bytes)
            budget -= len(result.records)
            out.append(result)
        return out

    def _fetch_error(
        self, req: FetchPartition, error: KafkaError, p: Partition | None
    ) -> FetchResult:
        return FetchResult(
            req.topic,
            req.partition,
            error,
            high_watermark=-1 if p is None else p.state.high_watermark,
            log_start_offset=-1 if p is None else p.state.log_start_offset,
            current_leader=self._leader_info((req.topic, req.partition), error),
        )

    def _read_for_consumer(self, req: FetchPartition, budget: int, *, first: bool) -> FetchResult:
        found = self._leading(req.topic, req.partition)
        if isinstance(found, KafkaError):
            return self._fetch_error(req, found, None)
        p = found
        bounds = p.state.check_consumer_fetch(
            fetch_offset=req.fetch_offset, current_leader_epoch=req.current_leader_epoch
        )
        if bounds.error is not None:
            return self._fetch_error(
                req, bounds.error(f"{_name(p.tp)} offset {req.fetch_offset}"), p
            )
        records = b""
        if budget > 0 and req.fetch_offset < bounds.read_up_to:
            try:
                records = p.log.read(
                    req.fetch_offset,
                    min(req.partition_max_bytes, budget),
                    max_offset=bounds.read_up_to,
                    min_one_batch=first,
                )
            except KafkaError as e:
                return self._fetch_error(req, e, p)
        return FetchResult(
            req.topic,
            req.partition,
            None,
            high_watermark=p.state.high_watermark,
            log_start_offset=p.state.log_start_offset,
            records=records,
        )

    def _read_for_follower(
        self, replica_id: int, broker_epoch: int, req: FetchPartition, budget: int, now: int
    ) -> FetchResult:
        found = self._leading(req.topic, req.partition)
        if isinstance(found, KafkaError):
            return self._fetch_error(req, found, None)
        p = found
        r = p.state.on_follower_fetch(
            replica_id=replica_id,
            fetch_offset=req.fetch_offset,
            last_fetched_epoch=req.last_fetched_epoch,
            broker_epoch=broker_epoch,
            now_ms=now,
            current_leader_epoch=req.current_leader_epoch,
            follower_log_start_offset=req.log_start_offset,
        )
        if r.high_watermark_moved:
            self._hw_moved(p)
        if r.isr_proposal is not None:
            self._propose(p, r.isr_proposal)
        if r.error is not None:
            return self._fetch_error(req, r.error(f"{_name(p.tp)} follower {replica_id}"), p)
        if r.diverging_epoch is not None:
            return FetchResult(
                req.topic,
                req.partition,
                None,
                high_watermark=r.high_watermark,
                log_start_offset=r.log_start_offset,
                diverging_epoch=r.diverging_epoch,
            )
        records = b""
        if budget > 0 and req.fetch_offset < r.read_up_to:
            records = p.log.read(
                req.fetch_offset,
                min(req.partition_max_bytes, budget),
                max_offset=r.read_up_to,
                whole_batches=True,
            )
        return FetchResult(
            req.topic,
            req.partition,
            None,
            high_watermark=p.state.high_watermark,
            log_start_offset=p.state.log_start_offset,
            records=records,
        )

    # ================================================================ list offsets

    def list_offsets(
        self, entries: Sequence[tuple[str, int, int]], *, current_leader_epoch: int | None = None
    ) -> list[ListOffsetsResult]:
        out: list[ListOffsetsResult] = []
        for topic, index, timestamp in entries:
            found = self._leading(topic, index)
            if isinstance(found, KafkaError):
                out.append(ListOffsetsResult(topic, index, found))
                continue
            p = found
            if not p.state.is_leader:
                out.append(ListOffsetsResult(topic, index, NotLeaderOrFollowerError(_name(p.tp))))
                continue
            epoch = p.state.leader_epoch
            hw = p.state.high_watermark
            if timestamp == EARLIEST_TIMESTAMP:
                out.append(
                    ListOffsetsResult(topic, index, None, p.state.log_start_offset, -1, epoch)
                )
            elif timestamp == LATEST_TIMESTAMP:
                out.append(ListOffsetsResult(topic, index, None, hw, -1, epoch))
            else:
                found_ts = p.log.offset_for_timestamp(timestamp)
                if found_ts is None or found_ts.offset >= hw:
                    out.append(ListOffsetsResult(topic, index, None, -1, -1, epoch))
                else:
                    out.append(
                        ListOffsetsResult(
                            topic, index, None, found_ts.offset, found_ts.timestamp_ms, epoch
                        )
                    )
        return out

    # ================================================================ ISR changes

    def maybe_shrink_isrs(self) -> None:
        """The ISR-shrink timer's work: propose dropping followers that lag too long."""
        now = self._clock_ms()
        for p in list(self.partitions.values()):
            if p.state.is_leader:
                proposal = p.state.maybe_shrink_isr(now_ms=now)
                if proposal is not None:
                    log.info(
                        "proposing an ISR shrink",
                        extra={
                            "fields": {"partition": _name(p.tp), "new_isr": list(proposal.new_isr)}
                        },
                    )
                    self._propose(p, proposal)

    def _propose(self, p: Partition, proposal: IsrProposal) -> None:
        if self.alter_partition is None or self._stopping:
            return
        task = asyncio.get_running_loop().create_task(self._alter(p, proposal))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alter(self, p: Partition, proposal: IsrProposal) -> None:
        assert self.alter_partition is not None
        while not self._stopping:
            if self.partitions.get(p.tp) is not p or p.state.pending_isr_change != proposal:
                return  # superseded (new metadata, lost leadership)
            body = {
                "broker_id": self.broker_id,
                "broker_epoch": self.broker_epoch(),
                "topic_id": p.topic_id,
                "partition": p.index,
                "leader_epoch": proposal.leader_epoch,
                "partition_epoch": proposal.partition_epoch,
                "new_isr": list(proposal.new_isr),
            }
            try:
                answer = await self.alter_partition(body, timeout_ms=self.config.request_timeout_ms)
            except KafkaError as e:
                outcome = p.state.on_alter_partition_response(proposal=proposal, error=type(e))
            else:
                try:
                    outcome = p.state.on_alter_partition_response(
                        proposal=proposal,
                        error=None,
                        leader_epoch=int(answer["leader_epoch"]),
                        partition_epoch=int(answer["partition_epoch"]),
                        isr=[int(r) for r in answer["isr"]],
                    )
                except (KeyError, TypeError, ValueError) as e:
                    log.error("bad AlterPartition answer", extra={"fields": {"error": str(e)}})
                    outcome = p.state.on_alter_partition_response(
                        proposal=proposal, error=UnknownServerError
                    )
            log.info(
                "AlterPartition answered",
                extra={
                    "fields": {
                        "partition": _name(p.tp),
                        "applied": outcome.applied,
                        "reason": outcome.reason,
                    }
                },
            )
            if outcome.high_watermark_moved:
                self._hw_moved(p)
            if outcome.isr_changed:
                self._deliver(
                    self.purgatory.on_isr_changed(
                        partition=p.tp, status=p.state.replication_status()
                    )
                )
            if outcome.retry is None:
                return
            await asyncio.sleep(ALTER_RETRY_BACKOFF_MS / 1000)  # retry backoff

    # ================================================================ follower side

    def on_follower_records(
        self,
        p: Partition,
        *,
        records: bytes,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> None:
        """Our leader's records for ``p`` (whole batches from our LEO): append them."""
        assert p.state.role is ReplicaRole.FOLLOWER
        if records:
            p.log.append_as_follower(records)
            for _, header in iter_batches(records, check_crc=False):
                p.producers.update_from_follower_batch(header)
            self._maybe_snapshot_producers(p)
        outcome = p.state.on_fetch_response(
            leader_high_watermark=leader_high_watermark,
            leader_log_start_offset=leader_log_start_offset,
            diverging_epoch=None,
            appended_up_to=p.log.log_end_offset,
        )
        p.log.update_high_watermark(p.state.high_watermark)
        if p.state.log_start_offset > p.log.log_start_offset:
            # The leader's log start moved (DeleteRecords): follow it on disk too.
            p.log.maybe_increment_log_start_offset(p.state.log_start_offset)
            p.log.delete_retention_segments()
        if records or outcome.high_watermark_moved:
            p.signal.fire()

    def on_follower_diverging(
        self,
        p: Partition,
        *,
        diverging: EpochEndOffset,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> None:
        """Our leader says our log diverges: truncate (log and epoch cache) and refetch."""
        assert p.state.role is ReplicaRole.FOLLOWER
        outcome = p.state.on_fetch_response(
            leader_high_watermark=leader_high_watermark,
            leader_log_start_offset=leader_log_start_offset,
            diverging_epoch=diverging,
            appended_up_to=p.state.log_end_offset,
        )
        if outcome.truncate_to is not None:
            before = p.log.log_end_offset
            p.log.truncate_to(outcome.truncate_to)
            # The window may have lost batches below the cut: rebuild it from the log.
            p.producers = load_producer_state(p.log, self._producer_config)
            if p.log.log_end_offset != p.state.log_end_offset:
                # The cut fell inside a batch, so the log kept less than the core
                # assumed: the log is the truth (the next fetch starts from it).
                self._resync_follower(p)
            log.warning(
                "truncated a diverging log",
                extra={
                    "fields": {
                        "partition": _name(p.tp),
                        "from": before,
                        "to": p.log.log_end_offset,
                        "leader_epoch": diverging.epoch,
                    }
                },
            )
        p.log.update_high_watermark(p.state.high_watermark)
        p.signal.fire()

    def enforce_retention(self) -> int:
        """Delete the segments retention.ms / retention.bytes allow (Kafka's retention
        check), and the producer-state snapshots below the new log starts; returns the
        number of segments deleted."""
        deleted = 0
        for p in list(self.partitions.values()):
            count = p.log.delete_retention_segments()
            if count:
                deleted += count
                prune_snapshots(p.log)
                if p.state.log_start_offset < p.log.log_start_offset:
                    p.state.on_log_start_offset(log_start_offset=p.log.log_start_offset)
        return deleted

    def expire_producers(self, *, now_ms: int) -> int:
        """Forget idle producers (producer.id.expiration.ms) on every replica."""
        return sum(
            len(p.producers.remove_expired_producers(now_ms=now_ms))
            for p in self.partitions.values()
        )

    def _maybe_snapshot_producers(self, p: Partition) -> None:
        """After an append: if the log rolled, snapshot the producer state at its end."""
        base = p.log.active_segment_base_offset
        if base == p.snapshot_segment_base:
            return
        p.snapshot_segment_base = base
        try:
            write_producer_snapshot(p.log, p.producers)
        except OSError as e:
            # Only recovery time suffers: it replays from an older snapshot or the start.
            log.error(
                "producer-state snapshot failed",
                extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
            )

    def on_follower_out_of_range(self, p: Partition, *, leader_log_start_offset: int) -> None:
        """Our fetch offset is below the leader's log start: restart empty there."""
        if p.log.log_end_offset < leader_log_start_offset:
            p.log.truncate_fully_and_start_at(leader_log_start_offset)
            p.producers = ProducerStateManager(config=self._producer_config)
            self._resync_follower(p)

    def _resync_follower(self, p: Partition) -> None:
        # Rebuild the replica state from the log, keeping the role and assignment.
        state = p.state
        state.log_end_offset = p.log.log_end_offset
        state.log_start_offset = min(
            max(state.log_start_offset, p.log.log_start_offset), state.log_end_offset
        )
        state.high_watermark = max(
            state.log_start_offset, min(state.high_watermark, state.log_end_offset)
        )

    # ================================================================ lifecycle

    def checkpoint_high_watermarks(self) -> None:
        self.logs.checkpoint_high_watermarks()

    async def close(self) -> None:
        """Fail waiting produces, stop AlterPartition tasks, close the logs cleanly."""
        self._stopping = True
        if self._expiry is not None:
            self._expiry.cancel()
        for tp in list(self.partitions):
            self._deliver(self.purgatory.on_leadership_lost(partition=tp))
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for p in self.partitions.values():
            try:
                write_producer_snapshot(p.log, p.producers)  # a clean shutdown's snapshot
            except OSError as e:
                log.error(
                    "producer-state snapshot failed",
                    extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
                )
        self.logs.close_all()
        self.partitions.clear()


async def _wait_any(events: Sequence[asyncio.Event], timeout_ms: int) -> None:
    """Until one of ``events`` is set or ``timeout_ms`` passes."""
    tasks = [asyncio.ensure_future(e.wait()) for e in dict.fromkeys(events)]
    try:
        await asyncio.wait(tasks, timeout=timeout_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _check_producers(
    producers: ProducerStateManager, batches: Sequence[ProducerBatch]
) -> Append | Duplicate | Rejected:
    """The idempotence decision for one partition's batches of a produce. raftka's
    producer sends up to 5 batches of a partition in a first attempt and a retried batch
    alone, so a retry is a single Duplicate. With several batches, each producer's must
    follow on each other, and a duplicate among them refuses the request
    (DUPLICATE_SEQUENCE_NUMBER) rather than half-append it."""
    if not batches:
        return Rejected(producer_id=-1, error=CorruptMessageError("no record batch"))
    seen: dict[int, ProducerBatch] = {}
    for batch in batches:
        if not batch.is_idempotent:
            continue
        previous = seen.get(batch.producer_id)
        if previous is None:
            decision = producers.validate_and_prepare(batch)
            if isinstance(decision, Duplicate) and len(batches) > 1:
                return Rejected(
                    producer_id=batch.producer_id,
                    error=DuplicateSequenceNumberError(
                        f"producer {batch.producer_id}: a duplicate batch among several"
                    ),
                )
            if not isinstance(decision, Append):
                return decision
        elif previous.producer_epoch != batch.producer_epoch or not in_sequence(
            previous.last_sequence, batch.base_sequence
        ):
            return Rejected(
                producer_id=batch.producer_id,
                error=OutOfOrderSequenceNumberError(
                    f"producer {batch.producer_id}: batches of one request out of sequence"
                ),
            )
        seen[batch.producer_id] = batch
    return Append(producer_id=-1)


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"
