"""The ReplicaManager: every partition replica of this broker, and the data plane.

(Over 700 lines: it is the shell of every data-plane request; the decisions are in
partition.py, the shapes in data_plane.py.)

Theory of operation
-------------------
A :class:`Partition` is the partition core (:class:`Replica`, :mod:`.partition`: replica
state, producer state, and the segment log behind :class:`SegmentPartitionLog`) plus
the shell's own per-partition things: the topic id and a wake-up signal for parked
fetches. The manager is a thin shell: it turns requests into core calls and carries
out the :class:`Ready` each returns (purgatory completions, fetch wake-ups,
AlterPartition proposals, fetcher changes, producer snapshots). Everything but the
disk jobs below runs on one asyncio loop and every method that touches a partition is
synchronous, so a core and the purgatory change together between two awaits (no locks
needed).

- **Metadata** (:meth:`apply_metadata`): committed local changes, in log order. Deletes
  first (a topic deleted and recreated under the same name reuses the directory name),
  then leaders, then followers (``Replica.on_metadata_change``; the fetchers are told
  where to fetch).
- **Produce** (:meth:`produce`): ``Replica.append_as_leader`` (acks, leadership,
  min.insync.replicas, de-duplication, append), inline or on an I/O worker (see
  *Where appends run* below); acks=all parks a future in the
  :class:`ProducePurgatory`, completed when the HW passes the batch
  (``on_hw_advanced``), failed when leadership is lost, or REQUEST_TIMED_OUT from a
  timer armed at the purgatory's next deadline. No polling anywhere. A transaction
  marker (:meth:`write_txn_markers`, ``Replica.write_txn_marker``) takes the same
  path with acks=all, so it keeps its place among the partition's appends.
- **Fetch** (:meth:`fetch`): consumers read up to the HW (``read_for_consumer``;
  read_committed up to the last stable offset, with the aborted transactions);
  followers (``replica_id`` >= 0) up to the LEO (``on_follower_fetch``: follower
  progress, HW, ISR expansion, diverging epoch). A fetch with fewer than ``min_bytes``
  parks on the partitions' signals (fired on every append and HW move) until
  ``max_wait_ms``.
- **ISR changes** go to the controller as AlterPartition (one in flight per partition,
  as the core allows); a timer calls ``Replica.tick``.
- **Follower side**: the replica fetchers (:mod:`.fetcher`) await
  :meth:`on_follower_records` / :meth:`on_follower_diverging` /
  :meth:`on_follower_out_of_range`, which hand the leader's answer to the core (the
  append or truncation, inline or on an I/O worker, as a produce's).
- **Where appends run** (:class:`~raftka.broker.io_workers.AppendModes`,
  ``self.appends``). Appends (leader and follower) and truncations run **inline**, on
  the loop, by default: a hop to a worker and back costs ~0.1 ms and a GIL hand-over,
  ~10% of produce throughput (docs/benchmarks.md). Each is timed (the core call's
  wall time less the time its thread waited for a CPU: ``WriteTimer``); one slower
  than ``INLINE_APPEND_SLOW_MS`` (10 ms), or a worker's fsync job (a roll's,
  flush.ms's) slower than ``WORKER_FSYNC_SLOW_MS`` (100 ms), puts that partition's log
  dir in **worker mode** for ``APPEND_HOLD_DOWN_MS`` (5 s) from the last slow write,
  renewed by every slow one: its appends and truncations then run on the workers, in
  the partition's strand, holding the log (the rest of this docstring). The first
  slow write of a spell blocks the loop once (it cannot be known before it runs); the
  next ones do not. Order: an append runs inline only when nothing of its partition is
  ahead of it (:meth:`_inline_ok`: no job running or in line in its strand, the log
  not held); otherwise it takes its place in the strand at once (``Strand.reserve``,
  before its task runs) and runs when its turn comes, inline then if its log dir is
  fast again. So a partition's appends keep their arrival order across mode switches.

- **Held logs: the cleaner and the I/O workers.** A thread may own a partition's log for
  a while: one exclusive step of a cleaner pass (:meth:`hold_for_cleaner` /
  :meth:`release_cleaner`: the pass's start, each swap of cleaned segments, its
  checkpoint write; short) or an I/O worker's job (:meth:`_on_worker`: the fsync and
  producer-state snapshot after a roll, a flush.ms flush, a retention delete;
  :meth:`_append_on_worker` and :meth:`_follower_job` in worker mode: an append or a
  truncation;
  :mod:`raftka.broker.io_workers`). Meanwhile that ``Log`` belongs to the thread and
  the loop does not touch it (no append, read, truncation, retention, close).
  Produces to it wait for the hold (and the partition's earlier jobs) to end, bounded
  by their timeout; a fetch first waits (up to its max_wait_ms) for the worker jobs
  holding its partitions to end, then reads; a log held after that (a cleaner's step,
  a job begun meanwhile) gives nothing and the fetch parks until it is given back; a
  follower's fetched records for a log the cleaner holds are dropped and fetched
  again; a ListOffsets by timestamp answers OFFSET_NOT_AVAILABLE (retriable); a stop
  or delete waits for it. A job that runs a core call (``CORE_JOBS``: appends,
  truncations) owns the replica's state too, not only its log: the ISR tick, producer
  expiry, an AlterPartition answer and a topic config change wait for it (skip it
  until the next tick, or apply when it ends). Worker jobs of one partition run in
  submission order (its strand), one at a time, never beside another hold; a job's
  ``prepare`` runs on the loop once the log is held (it reads the state the job
  writes, e.g. the producer state to snapshot) and its ``finish`` tells the core what
  changed (a new log start) before the log is given back. Ownership is handed over on
  the loop, so the flags need no lock. Metadata changes and DeleteRecords wait for
  the worker jobs on their partitions (short), not for a cleaner's step.
- **A cleaner pass between its steps** (:meth:`begin_clean` / :meth:`end_clean`,
  :mod:`raftka.broker.log_cleaning`) holds nothing: it reads the segments below the
  active one through descriptors of its own and writes ``.cleaned`` files while
  appends, reads, follower credit, HW moves and truncations go on (storage/cleaner.py
  says what each change does to the pass). What the manager does for it: retention
  skips the partition until the pass ends (Kafka's rule; DeleteRecords moves the log
  start but leaves the segments); a stop or delete (or a recreate under the same name)
  sets the pass's abort event and waits for :meth:`end_clean`.
- **Start-up recovery** (:meth:`on_metadata`): the logs a metadata change makes new
  here are opened (recovered, producer state loaded) on the I/O workers,
  ``num.recovery.threads.per.data.dir`` per log dir at once, before the change
  applies, so the loop keeps answering and heartbeating.
- **What still runs on the loop**: parsing, routing, answering, the core's decisions
  that do not write the log (fetch bookkeeping, HW, ISR, metadata), the purgatory,
  reads for fetches and ListOffsets (from the page cache as a rule; Kafka cannot tell
  a miss either, and a 1 MB read from the cache takes about as long as one hop to a
  worker and back, ~0.1 ms each, measured in docs/operations.md), and appends and
  truncations while their log dir is fast (with the fsync flush.messages asks for and
  the leader-epoch file a follower's append writes). The fsyncs a roll or flush.ms
  asks for always run on the workers; appends and truncations of a log dir in worker
  mode too.

LEO and log start live in the log only; the HW in the core, which tells the log (see
:mod:`.partition`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from raftka.broker.config import BrokerConfig
from raftka.broker.io_workers import AppendModes, IoWorkers, Strand, WriteTimer
from raftka.broker.producer_state import ProducerStateConfig, VerificationGuard
from raftka.broker.producer_state_store import encode_producer_snapshot, write_encoded_snapshot
from raftka.broker.replication.data_plane import (
    AlterPartitionSender,
    DescribeProducersResult,
    EpochEndOffsetResult,
    FetchPartition,
    FetchResult,
    FetchTargets,
    ListOffsetsResult,
    Partition,
    ProduceResult,
    TxnMarkerWrite,
)
from raftka.broker.replication.partition import (
    READ_COMMITTED,
    ConsumerRead,
    FetchAnswer,
    FollowerRead,
    MetadataOutcome,
    ProduceOutcome,
    Ready,
    Replica,
)
from raftka.broker.replication.partition_log import SegmentPartitionLog
from raftka.broker.replication.partition_state import (
    VALID_ACKS,
    IsrChangeKind,
    IsrProposal,
)
from raftka.broker.replication.purgatory import Completion, ProducePurgatory, PurgatoryFullError
from raftka.broker.replication.quota import ReplicationQuotas
from raftka.common.errors import (
    CorruptMessageError,
    InvalidRequiredAcksError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages.controller import AlterPartitionRequest, AlterPartitionResponse
from raftka.common.structs import EpochEndOffset
from raftka.common.time import monotonic_ms
from raftka.metadata.delta import LocalReplicaChanges
from raftka.metadata.image import MetadataImage, PartitionRegistration, TopicIdPartition
from raftka.metadata.metadata_records import NO_LEADER
from raftka.server_common.metrics import add_remote
from raftka.storage import Log
from raftka.storage.log_manager import LogManager, PartitionKey

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "DescribeProducersResult",
    "FetchPartition",
    "FetchResult",
    "ListOffsetsResult",
    "Partition",
    "ProduceResult",
    "ReplicaManager",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ListOffsets' special timestamps (Kafka's).
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
#: Bound on how long a produce may wait for acks=all, whatever the request asks.
PRODUCE_TIMEOUT_MS_MAX: Final = 300_000
#: Bound on a fetch's long poll.
FETCH_WAIT_MS_MAX: Final = 30_000
#: Bound on partitions in one produce or fetch request.
REQUEST_PARTITIONS_MAX: Final = 10_000
#: Who holds a log during a cleaner pass (the I/O workers' jobs name themselves).
CLEANER: Final = "the log cleaner"
#: The I/O workers' jobs that run a core call (they change the replica's state, not
#: only its log: the loop leaves that state alone until they end, see _core_held).
APPEND: Final = "an append"
FOLLOWER_APPEND: Final = "a follower append"
TRUNCATION: Final = "a truncation"
CORE_JOBS: Final = frozenset({APPEND, FOLLOWER_APPEND, TRUNCATION})
#: Backoff between AlterPartition attempts the core asks to retry.
ALTER_RETRY_BACKOFF_MS: Final = 100


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        logs: LogManager,
        clock_ms: Callable[[], int] = monotonic_ms,
        io: IoWorkers | None = None,
    ) -> None:
        self.config = config
        self._producer_config = ProducerStateConfig(
            producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        self.broker_id = config.node_id
        self.logs = logs
        self.image = MetadataImage.EMPTY
        self.partitions: dict[PartitionKey, Partition] = {}
        self.purgatory: ProducePurgatory[PartitionKey] = ProducePurgatory()
        self.fetch_targets: FetchTargets | None = None
        self.alter_partition: AlterPartitionSender | None = None
        self.broker_epoch: Callable[[], int] = lambda: -1
        self._clock_ms = clock_ms
        self._request_ids = itertools.count(1)
        self._waiting: dict[tuple[int, PartitionKey], asyncio.Future[KafkaError | None]] = {}
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at_ms: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        # Fetches parked in their long poll now (Kafka's fetch purgatory size).
        self.fetch_waiters = 0
        # ISR changes the controller accepted (Kafka's IsrShrinksPerSec/IsrExpandsPerSec;
        # read by broker/metrics.py).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # The replication throttles (quota.py), from committed configs; the leader side
        # is applied in _read_for_follower, the follower side by the replica fetchers.
        self.quotas = ReplicationQuotas(self.broker_id, now_ms=clock_ms())
        # Partitions whose log a thread (the cleaner, an I/O worker) holds now -> done
        # when it gives it back; and who holds it.
        self._held: dict[PartitionKey, asyncio.Future[None]] = {}
        self._holders: dict[PartitionKey, str] = {}
        # Partitions a cleaner pass works on now (it holds them only for its short
        # exclusive steps) -> set to ask the pass to abort (a stop, a delete).
        self._cleaning: dict[PartitionKey, threading.Event] = {}
        # Within on_metadata: the partitions whose new leader epoch a worker writes.
        self._epoch_writes: list[Partition] | None = None
        # Partitions opened on the I/O workers for the metadata change being applied.
        self._prepared: dict[PartitionKey, Partition] = {}
        # Disk work off the loop (broker/io_workers.py); owned and closed here.
        self.io = io or IoWorkers(
            num_io_threads=config.num_io_threads,
            queued_max_requests=config.queued_max_requests,
        )
        # stop_replica calls that waited for a held log: tp -> delete?
        self._stop_after_hold: dict[PartitionKey, tuple[bool, str | None]] = {}
        # Topic configs that changed while a worker's core call held the partition.
        self._reconfigure_after_hold: set[PartitionKey] = set()
        # Where appends run, per log dir: inline while its writes are fast, on the
        # workers for a while after a slow one (broker/io_workers.py, AppendModes).
        self.appends = AppendModes(clock_ms=clock_ms)

    def now_ms(self) -> int:
        """This broker's clock (the quotas' and the partition cores' time)."""
        return self._clock_ms()

    # ================================================================ metadata

    def apply_metadata(self, image: MetadataImage, changes: LocalReplicaChanges) -> None:
        """Committed metadata: the new image and what this broker must do, in log order."""
        configs_changed = image.configs is not self.image.configs
        self.image = image
        if configs_changed:
            # A topic's configs apply to its open logs from now on (``topics alter``):
            # min.insync.replicas to the next produce, the log's settings to the next
            # append, roll, flush and retention pass, the validator's to the next batch.
            for p in self.partitions.values():
                if self._core_held(p.tp):
                    self._reconfigure_after_hold.add(p.tp)  # a worker appends: see _release
                else:
                    self._configure(p, image.configs.topic_config(p.topic))
            self.quotas.configure(
                {
                    **image.configs.broker_config(None),
                    **image.configs.broker_config(self.broker_id),
                },
                {r.name: keys for r, keys in image.configs.resources.items() if r.type == "topic"},
                self._clock_ms(),
            )
        if changes.is_empty():
            return
        now = self._clock_ms()
        for tip in sorted(changes.deletes):
            self.stop_replica((tip.topic, tip.partition), delete=True, topic_id=tip.topic_id)
        for tip, reg in sorted(changes.leaders.items()):
            self._become_leader(tip, reg, now)
        for tip, reg in sorted(changes.followers.items()):
            self._become_follower(tip, reg, now)

    def _configure(self, p: Partition, topic_config: Mapping[str, str]) -> None:
        log_config = self.config.log_config(topic_config)
        p.state.config = self.config.replication_config(topic_config)
        p.replica.validation = self.config.validation_config(log_config, topic_config)
        if p.log.config != log_config:
            p.log.reconfigure(log_config)
            log.info(
                "topic config applied",
                extra={"fields": {"partition": _name(p.tp), "config": str(log_config)}},
            )

    def _partition_for(self, tip: TopicIdPartition) -> Partition:
        tp = (tip.topic, tip.partition)
        existing = self.partitions.get(tp)
        if existing is not None and existing.topic_id != tip.topic_id:
            # The topic was deleted and recreated under its name: the old replica goes.
            self.stop_replica(tp, delete=True, topic_id=existing.topic_id)
            existing = None
        if existing is not None:
            return existing
        prepared = self._prepared.pop(tp, None)
        if prepared is not None and prepared.topic_id == tip.topic_id:
            partition = prepared  # opened by an I/O worker (prepare_metadata)
        else:
            opened = self.logs.get(tp)
            if opened is not None:
                partition = self._partition_builder(tip, self.image, opened)()
            else:
                path = self.logs.place(tp)
                partition = self._partition_builder(tip, self.image, path)()
                self.logs.adopt(tp, partition.log)
        self.partitions[tp] = partition
        return partition

    def _partition_builder(
        self, tip: TopicIdPartition, image: MetadataImage, log_or_path: Log | Path
    ) -> Callable[[], Partition]:
        """A call that opens (recovers) the partition's log at ``log_or_path`` (unless
        it is open already) and builds its core (loading the producer state): the slow
        part of a new partition, which touches nothing but that log, so an I/O worker
        may run it. Settings are read now, on the loop."""
        tp = (tip.topic, tip.partition)
        topic_config = image.configs.topic_config(tip.topic)
        log_config = self.config.log_config(topic_config)
        high_watermark = self.logs.checkpointed_high_watermark(tp)
        replication = self.config.replication_config(topic_config)
        validation = self.config.validation_config(log_config, topic_config)

        def build() -> Partition:
            if isinstance(log_or_path, Log):
                opened = log_or_path
            else:
                opened = self.logs.open_detached(log_or_path, log_config)
            # Rolled segments are fsynced by a worker (the snapshot job at a roll).
            opened.defer_flushes = True
            try:
                replica = Replica(
                    topic=tip.topic,
                    partition=tip.partition,
                    local_broker_id=self.broker_id,
                    log=SegmentPartitionLog(
                        opened,
                        on_truncate=self._on_truncate,
                        held=lambda: tp in self._held or tp in self._cleaning,
                        defer_epoch_writes=True,  # see _persist_epochs
                    ),
                    high_watermark=high_watermark,
                    config=replication,
                    producer_config=self._producer_config,
                    validation=validation,
                )
            except BaseException:
                if opened is not log_or_path:
                    with contextlib.suppress(Exception):
                        opened.close()
                raise
            return Partition(tip.topic_id, tip.topic, tip.partition, replica, opened)

        return build

    async def prepare_metadata(self, image: MetadataImage, changes: LocalReplicaChanges) -> None:
        """Before :meth:`apply_metadata`: open (recover) the logs of the partitions
        ``changes`` makes new here, on the I/O workers (num.recovery.threads.per.data.dir
        per log dir at once), so a broker
        recovering hundreds of logs keeps answering and heartbeating meanwhile. A log
        that fails to open here is opened again by apply_metadata, which reports it."""
        gone = {(tip.topic, tip.partition) for tip in changes.deletes}
        new = [
            tip
            for tip in sorted({*changes.leaders, *changes.followers})
            if (tp := (tip.topic, tip.partition)) not in gone
            and tp not in self.partitions
            and tp not in self._prepared
            and self.logs.get(tp) is None
        ]
        if not new:
            return
        started = self._clock_ms()
        # num.recovery.threads.per.data.dir logs per dir at once (Kafka's bound).
        at_once = asyncio.Semaphore(
            self.config.num_recovery_threads_per_data_dir * len(self.logs.log_dirs)
        )

        async def bounded(tip: TopicIdPartition) -> None:
            async with at_once:
                await self._prepare_one(tip, image)

        outcomes = await asyncio.gather(*(bounded(tip) for tip in new), return_exceptions=True)
        failed = sum(1 for o in outcomes if isinstance(o, BaseException))
        log.info(
            "logs opened on the I/O workers",
            extra={
                "fields": {
                    "logs": len(new) - failed,
                    "failed": failed,
                    "ms": self._clock_ms() - started,
                }
            },
        )

    async def _prepare_one(self, tip: TopicIdPartition, image: MetadataImage) -> None:
        tp = (tip.topic, tip.partition)
        build = self._partition_builder(tip, image, self.logs.place(tp))
        try:
            partition = await self.io.run(build)
        except Exception as e:
            log.warning(
                "opening a log on an I/O worker failed",
                extra={"fields": {"partition": _name(tp), "error": str(e)}},
            )
            raise
        if self.logs.get(tp) is not None or self._stopping:
            with contextlib.suppress(Exception):
                partition.log.close()  # opened meanwhile on the loop (cannot today)
            return
        self.logs.adopt(tp, partition.log)
        self._prepared[tp] = partition

    async def on_metadata(self, image: MetadataImage, changes: LocalReplicaChanges) -> None:
        """Committed metadata, with the disk work off the loop: new logs are opened on
        the I/O workers, and the changes wait for the worker jobs holding the logs they
        touch; then :meth:`apply_metadata`."""
        await self.prepare_metadata(image, changes)
        await self.wait_io_released(
            (tip.topic, tip.partition)
            for tip in (*changes.deletes, *changes.leaders, *changes.followers)
        )
        self._epoch_writes = []
        try:
            self.apply_metadata(image, changes)
        finally:
            # Prepared but not taken (a role change held back by the cleaner): the log
            # stays open in the log manager, and the replica is built again from it.
            self._prepared.clear()
            held, self._epoch_writes = self._epoch_writes, None
            await self._write_epochs(held)

    def _take_role(
        self, tip: TopicIdPartition, reg: PartitionRegistration, leader_id: int, now: int
    ) -> tuple[Partition, MetadataOutcome] | None:
        """The partition (opened if new) and what its replica made of ``reg`` with
        ``leader_id`` leading; None while the cleaner holds it (its stop waits for the
        cleaner; end_clean takes the role after it)."""
        if self._held_back(tip):
            return None
        p = self._partition_for(tip)
        change = p.replica.on_metadata_change(
            leader_id=leader_id,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            replicas=reg.replicas,
            isr=reg.isr,
            now_ms=now,
        )
        return p, change

    def _become_leader(self, tip: TopicIdPartition, reg: PartitionRegistration, now: int) -> None:
        taken = self._take_role(tip, reg, self.broker_id, now)
        if taken is None:
            return
        p, change = taken
        if not change.applied:
            log.log(
                logging.ERROR if change.reason.startswith("cannot") else logging.DEBUG,
                "leader change not applied",
                extra={"fields": {"partition": _name(p.tp), "reason": change.reason}},
            )
            return
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
        self._persist_epochs(p)
        self.carry_out(p, change.ready)

    def _become_follower(self, tip: TopicIdPartition, reg: PartitionRegistration, now: int) -> None:
        taken = self._take_role(tip, reg, reg.leader, now)
        if taken is None or not taken[1].applied:
            return
        p, change = taken
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
        self.carry_out(p, change.ready)
        if self.fetch_targets is not None:
            if reg.leader == NO_LEADER:
                self.fetch_targets.remove(p.tp)
            elif change.ready.fetch_from_leader is not None:
                self.fetch_targets.set_leader(p.tp, change.ready.fetch_from_leader)

    def stop_replica(self, tp: PartitionKey, *, delete: bool, topic_id: str | None = None) -> None:
        if tp in self._held or tp in self._cleaning:
            # A thread holds the log, or a cleaner pass reads it: stop when the hold or
            # the pass ends (the pass is asked to abort, Kafka's abortAndPauseCleaning).
            # Until then the partition stays registered, so nothing reopens its log.
            previous = self._stop_after_hold.get(tp, (False, None))
            self._defer_stop(tp, delete or previous[0], topic_id)
            return
        p = self.partitions.get(tp)
        if p is not None and (topic_id is None or p.topic_id == topic_id):
            self.carry_out(p, p.replica.go_offline())
            del self.partitions[tp]
            if self.fetch_targets is not None:
                self.fetch_targets.remove(tp)
        elif p is not None:
            return  # a newer topic of the same name lives here now
        if delete:
            self.io.forget(tp)
            self.logs.delete(tp)
            log.info("deleted replica", extra={"fields": {"partition": _name(tp)}})
        else:
            self.logs.close(tp)

    def carry_out(self, p: Partition, ready: Ready) -> None:
        """Do what a core call asked (everything but fetcher changes, which depend on
        the metadata the caller holds)."""
        done: list[Completion[PartitionKey]] = []
        if ready.leadership_lost:
            done += self.purgatory.on_leadership_lost(partition=p.tp)
        if ready.high_watermark_moved:
            done += self.purgatory.on_hw_advanced(
                partition=p.tp, status=p.state.replication_status()
            )
        if ready.isr_changed:
            done += self.purgatory.on_isr_changed(
                partition=p.tp, status=p.state.replication_status()
            )
        self._deliver(done)
        if ready.snapshot_due:
            # The log rolled: fsync the rolled segment and write the producer-state
            # snapshot on an I/O worker, holding the log (appends to it wait).
            self._spawn(self._snapshot_on_worker(p))
        if ready.isr_proposal is not None:
            self._propose(p, ready.isr_proposal)
        if ready.wake_fetches:
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
        self,
        *,
        acks: int,
        timeout_ms: int,
        entries: Sequence[tuple[str, int, bytes]],
        txn_guards: Mapping[PartitionKey, Mapping[int, VerificationGuard]] | None = None,
    ) -> list[ProduceResult]:
        """Append each (topic, partition, batches) as leader; answer per partition.

        ``txn_guards``: KIP-890 part 1's verified producers per partition (see
        ``Replica.append_as_leader``); None when verification is off."""
        if len(entries) > REQUEST_PARTITIONS_MAX:
            raise CorruptMessageError(
                f"more than {REQUEST_PARTITIONS_MAX} partitions in one produce"
            )
        if acks not in VALID_ACKS:
            err = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {acks}")
            return [ProduceResult(t, i, err) for t, i, _ in entries]
        local = f" on broker {self.broker_id}"

        def append(topic: str, index: int, data: bytes) -> _CoreWrite:
            guards = None if txn_guards is None else txn_guards.get((topic, index), {})
            return lambda p: p.replica.append_as_leader(
                data, acks=acks, local=local, txn_guards=guards
            )

        writes = [(topic, index, append(topic, index, data)) for topic, index, data in entries]
        return await self._write(writes, timeout_ms=timeout_ms)

    async def write_txn_markers(
        self, markers: Sequence[TxnMarkerWrite], *, timeout_ms: int
    ) -> list[ProduceResult]:
        """WriteTxnMarkers on this broker's leader partitions (``Replica.write_txn_marker``),
        each answered once the HW passed it (acks=all), through the same strands as
        produces so a marker keeps its place among the partition's appends."""

        def write(m: TxnMarkerWrite) -> _CoreWrite:
            return lambda p: p.replica.write_txn_marker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                committed=m.committed,
                coordinator_epoch=m.coordinator_epoch,
                transaction_version=m.transaction_version,
            )

        return await self._write(
            [(m.topic, m.partition, write(m)) for m in markers], timeout_ms=timeout_ms
        )

    async def _write(
        self, entries: Sequence[tuple[str, int, _CoreWrite]], *, timeout_ms: int
    ) -> list[ProduceResult]:
        """Run each partition's core write (a produce's append, a marker), inline or on
        an I/O worker in the partition's strand; answer per partition, after the acks=all
        waits the writes asked for."""
        request_id = next(self._request_ids)
        now = self._clock_ms()
        deadline_ms = now + max(0, min(timeout_ms, PRODUCE_TIMEOUT_MS_MAX))
        # Each partition appends inline when it may (_inline_ok), else on an I/O worker
        # in its strand; the worker-bound partitions of one request append concurrently
        # (a task each, unless there is only one).
        appended: list[_Appended | None] = []
        # The entries that wait for their partition's strand, each in line from the
        # moment it is decided (Strand.reserve), before its task starts: an append that
        # arrives later, inline or not, cannot overtake it.
        queued: list[tuple[int, _Place]] = []
        try:
            for topic, index, call in entries:
                p = self.partitions.get((topic, index))
                if p is None:
                    appended.append((self._not_appended(topic, index), None))
                elif self._inline_ok(p):
                    appended.append(self._append_inline(request_id, p, call, deadline_ms))
                else:
                    strand = self.io.strand(p.tp)
                    queued.append((len(appended), _Place(strand, strand.reserve())))
                    appended.append(None)
        except BaseException:
            for _, place in queued:
                place.strand.abandon(place.ticket)
            raise
        if len(queued) == 1:
            at, place = queued[0]
            topic, index, call = entries[at]
            appended[at] = await self._append_on_worker(
                request_id, topic, index, call, place, deadline_ms=deadline_ms
            )
        elif queued:
            tasks = []
            for at, place in queued:
                topic, index, call = entries[at]
                task = asyncio.ensure_future(
                    self._append_on_worker(
                        request_id, topic, index, call, place, deadline_ms=deadline_ms
                    )
                )
                # A task cancelled before its first step never runs its coroutine: its
                # place in line is given up here.
                task.add_done_callback(place.give_up_unless_taken)
                tasks.append(task)
            for (at, _), result in zip(queued, await asyncio.gather(*tasks), strict=True):
                appended[at] = result
        done = [a for a in appended if a is not None]
        results = [result for result, _ in done]
        pending = [
            (at, (result.topic, result.partition), future)
            for at, (result, future) in enumerate(done)
            if future is not None
        ]
        if pending:
            self._arm_expiry()
            parked = time.perf_counter()
            try:
                for at, tp, future in pending:
                    error = await future
                    if error is not None:
                        results[at] = ProduceResult(
                            tp[0], tp[1], error, current_leader=self._leader_info(tp, error)
                        )
            finally:
                # acks=all's wait for the followers: Kafka's RemoteTimeMs.
                add_remote(time.perf_counter() - parked)
        return results

    def _leader_info(self, tp: PartitionKey, error: KafkaError) -> dict[str, Any] | None:
        if isinstance(error, NotLeaderOrFollowerError | UnknownTopicOrPartitionError):
            return self.current_leader(*tp)
        return None

    # ------------------------------------------------------------ where appends run

    def _inline_ok(self, p: Partition) -> bool:
        """True if an append (or truncation) of ``p`` may run on the loop now: its log
        dir's writes are fast, and nothing is ahead of it (no job running or in line in
        its strand, appends sent there included; no thread holding its log), so running
        it now keeps the partition's arrival order."""
        tp = p.tp
        return (
            tp not in self._held
            and self.io.strand_idle(tp)
            and self.appends.inline(p.log.path.parent)
        )

    def _run_inline(self, p: Partition, call: Callable[[], T]) -> T:
        """``call`` (a core call that writes the log) on the loop, timed: a slow one
        moves its log dir's appends to the workers."""
        timer = WriteTimer()
        try:
            return call()
        finally:
            self.appends.appended(p.log.path.parent, timer.ms(), on_worker=False)

    def _append_inline(
        self, request_id: int, p: Partition, call: _CoreWrite, deadline_ms: int
    ) -> _Appended:
        outcome = self._run_inline(p, lambda: call(p))
        return self._appended(request_id, p, outcome, deadline_ms)

    async def _append_on_worker(
        self,
        request_id: int,
        topic: str,
        index: int,
        call: _CoreWrite,
        place: _Place,
        *,
        deadline_ms: int,
    ) -> _Appended:
        """One partition of a produce that may not append inline: in the partition's
        strand (appends of one partition run one at a time, in the order they took the
        strand: arrival order, since nothing awaits before it), after any hold of its
        log; then inline if its log dir is fast again, else the core's
        ``append_as_leader`` on an I/O worker while the log is held. Its Ready and the
        purgatory on the loop, before the log is given back."""
        tp = (topic, index)
        place.taken = True
        strand = place.strand
        if not await self._turn_taken(place, deadline_ms):
            busy = RequestTimedOutError(f"{topic}-{index}: its earlier disk jobs did not end")
            return ProduceResult(topic, index, busy), None
        try:
            if tp not in self.partitions:
                return self._not_appended(topic, index), None
            if tp in self._held and not await self._clean_ended(tp, deadline_ms):
                held = RequestTimedOutError(f"{topic}-{index}: {self._holder_of(tp)}")
                return ProduceResult(topic, index, held), None
            p = self.partitions.get(tp)
            if p is not None and self.appends.inline(p.log.path.parent):
                # First in the strand and nothing holds the log: inline keeps the order.
                return self._append_inline(request_id, p, call, deadline_ms)
            if not self._hold(tp, APPEND):
                return self._not_appended(topic, index), None
            try:
                p = self.partitions[tp]
                try:
                    outcome = await self._run_core_job(p, lambda: call(p), _ready_of)
                except KafkaStorageError as e:
                    return ProduceResult(topic, index, e), None
                return self._appended(request_id, p, outcome, deadline_ms)
            finally:
                self._release(tp)
        finally:
            strand.release()

    async def _turn_taken(self, place: _Place, deadline_ms: int) -> bool:
        """Until ``place``'s turn in its strand, unless ``deadline_ms`` passes first: a
        produce waits for the partition's earlier jobs (a slow fsync) no longer than its
        timeout; its place is given up then (or when it is cancelled)."""
        if place.ticket.done():
            return not place.ticket.cancelled()
        remaining_s = max(0, deadline_ms - self._clock_ms()) / 1000
        try:
            await asyncio.wait_for(place.ticket, remaining_s)
        except TimeoutError:
            place.strand.abandon(place.ticket)
            return False
        except asyncio.CancelledError:
            place.strand.abandon(place.ticket)
            raise
        return True

    async def _run_core_job(
        self, p: Partition, call: Callable[[], T], ready_of: Callable[[T], Ready]
    ) -> T:
        """``call`` (a core call that writes the log) on an I/O worker. Cancelled while
        it runs, the caller still carries out what the core asked (the job cannot be
        undone); an unexpected error is logged and raised as KAFKA_STORAGE_ERROR (the
        core turns the log's own errors into its answer)."""
        done: list[T] = []
        elapsed_ms: list[float] = []
        try:
            await self.io.run(_timed(lambda: done.append(call()), elapsed_ms))
        except asyncio.CancelledError:
            if done:
                self.carry_out(p, ready_of(done[0]))
            raise
        except Exception as e:
            log.error(
                "core job on an I/O worker failed",
                extra={"fields": {"partition": _name(p.tp), "error": repr(e)}},
            )
            raise KafkaStorageError(f"{_name(p.tp)}: {e}") from e
        finally:
            if elapsed_ms:
                self.appends.appended(p.log.path.parent, elapsed_ms[0], on_worker=True)
        return done[0]

    def _not_appended(self, topic: str, index: int) -> ProduceResult:
        found = self._leading(topic, index)
        error = found if isinstance(found, KafkaError) else self._missing(topic, index)
        return ProduceResult(topic, index, error, current_leader=self.current_leader(topic, index))

    def _appended(
        self, request_id: int, p: Partition, outcome: ProduceOutcome, deadline_ms: int
    ) -> _Appended:
        """What the loop does after a leader append: carry out its Ready, answer, and
        park acks=all in the purgatory."""
        topic, index = p.tp
        self.carry_out(p, outcome.ready)
        if outcome.error is not None:
            return ProduceResult(
                topic, index, outcome.error, current_leader=self._leader_info(p.tp, outcome.error)
            ), None
        ok = ProduceResult(
            topic,
            index,
            None,
            base_offset=outcome.base_offset,
            log_append_time_ms=outcome.log_append_time_ms,
            log_start_offset=outcome.log_start_offset,
        )
        wait_for_offset = outcome.wait_for_offset
        if wait_for_offset is None:
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

    def _deliver(self, completions: Iterable[Completion[PartitionKey]]) -> None:
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
        isolation_level: int = 0,
    ) -> list[FetchResult]:
        """A consumer (``replica_id`` < 0) or follower fetch, long-polled;
        ``isolation_level`` 1 (read_committed) reads only below the LSO."""
        if len(partitions) > REQUEST_PARTITIONS_MAX:
            raise CorruptMessageError(f"more than {REQUEST_PARTITIONS_MAX} partitions in one fetch")
        deadline_ms = self._clock_ms() + max(0, min(max_wait_ms, FETCH_WAIT_MS_MAX))
        loop = asyncio.get_running_loop()
        while True:
            await self._worker_jobs_ended(partitions, deadline_ms)
            # Watched before reading, so a change in between is not missed.
            changed: asyncio.Future[None] = loop.create_future()
            signals = {
                p.signal
                for req in partitions
                if (p := self.partitions.get((req.topic, req.partition))) is not None
            }
            for signal in signals:
                signal.watch(changed)
            try:
                results = self._read_all(
                    replica_id, broker_epoch, max_bytes, partitions, isolation_level
                )
                size = sum(len(r.records) for r in results)
                urgent = any(r.error is not None or r.diverging_epoch is not None for r in results)
                remaining_ms = deadline_ms - self._clock_ms()
                if (
                    size >= min_bytes
                    or urgent
                    or remaining_ms <= 0
                    or not signals
                    or self._stopping
                ):
                    return results
                self.fetch_waiters += 1
                parked = time.perf_counter()
                try:
                    await asyncio.wait((changed,), timeout=remaining_ms / 1000)
                finally:
                    self.fetch_waiters -= 1
                    # The long poll's wait for min_bytes: Kafka's RemoteTimeMs.
                    add_remote(time.perf_counter() - parked)
            finally:
                for signal in signals:
                    signal.unwatch(changed)
                changed.cancel()  # resolved or not, nobody waits on it any more

    async def _worker_jobs_ended(
        self, partitions: Sequence[FetchPartition], deadline_ms: int
    ) -> None:
        """Until the I/O worker jobs holding any of ``partitions`` now have ended (an
        append, an fsync: short), or ``deadline_ms``: a fetch then reads what they
        wrote rather than answering nothing for those partitions. A cleaner's pass is
        long: not waited for (the fetch parks on the partition's signal instead)."""
        jobs = {
            done
            for req in partitions
            if (done := self._held.get((req.topic, req.partition))) is not None
            and self._holders.get((req.topic, req.partition)) != CLEANER
        }
        if jobs:
            remaining_s = max(0, deadline_ms - self._clock_ms()) / 1000
            await asyncio.wait(jobs, timeout=remaining_s)

    def _read_all(
        self,
        replica_id: int,
        broker_epoch: int,
        max_bytes: int,
        partitions: Sequence[FetchPartition],
        isolation_level: int = 0,
    ) -> list[FetchResult]:
        budget = max_bytes
        out: list[FetchResult] = []
        now = self._clock_ms()
        for req in partitions:
            p = self.partitions.get((req.topic, req.partition))
            if p is not None and p.tp in self._held:
                # Nothing from a log a thread holds (the cleaner, or a worker job that
                # began after _worker_jobs_ended); _release fires the signal this fetch
                # parks on, so it reads again as soon as the hold ends. A consumer's
                # errors (not leader, fenced epoch, out of range) come from the core's
                # state alone, so they are answered at once.
                if replica_id < 0:
                    bounds = p.state.check_consumer_fetch(
                        fetch_offset=req.fetch_offset,
                        current_leader_epoch=req.current_leader_epoch,
                    )
                    if bounds.error is not None:
                        error = bounds.error(f"{_name(p.tp)} offset {req.fetch_offset}")
                        out.append(self._fetch_error(req, error, p))
                        continue
                out.append(
                    FetchResult(
                        req.topic,
                        req.partition,
                        None,
                        high_watermark=p.state.high_watermark,
                        log_start_offset=p.state.log_start_offset,
                        last_stable_offset=p.replica.last_stable_offset,
                        aborted_transactions=() if isolation_level == READ_COMMITTED else None,
                    )
                )
                continue
            if replica_id >= 0:
                result = self._read_for_follower(replica_id, broker_epoch, req, budget, now)
            else:
                result = self._read_for_consumer(
                    req, budget, first=budget == max_bytes, isolation_level=isolation_level
                )
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

    def _read_for_consumer(
        self, req: FetchPartition, budget: int, *, first: bool, isolation_level: int = 0
    ) -> FetchResult:
        found = self._leading(req.topic, req.partition)
        if isinstance(found, KafkaError):
            return self._fetch_error(req, found, None)
        p = found
        read = p.replica.read_for_consumer(
            fetch_offset=req.fetch_offset,
            max_bytes=_room(req, budget),
            min_one_batch=first,
            current_leader_epoch=req.current_leader_epoch,
            isolation_level=isolation_level,
        )
        return self._read_result(req, read, p)

    def _read_for_follower(
        self, replica_id: int, broker_epoch: int, req: FetchPartition, budget: int, now: int
    ) -> FetchResult:
        found = self._leading(req.topic, req.partition)
        if isinstance(found, KafkaError):
            return self._fetch_error(req, found, None)
        p = found
        # Kafka's shouldLeaderThrottle: a throttled replica outside the ISR is sent no
        # records while the leader's quota is exceeded (its fetch offset still counts);
        # what is sent to a throttled replica is recorded against the quota.
        throttled = self.quotas.leader_throttled(*p.tp)
        held_back = (
            throttled
            and replica_id not in p.state.committed_isr
            and self.quotas.leader.exceeded(now)
        )
        r = p.replica.on_follower_fetch(
            replica_id=replica_id,
            fetch_offset=req.fetch_offset,
            last_fetched_epoch=req.last_fetched_epoch,
            broker_epoch=broker_epoch,
            # (supervise) the follower's current registration, from committed metadata
            registered_epoch=self._registered_epoch(replica_id),
            now_ms=now,
            max_bytes=None if held_back else _room(req, budget),
            current_leader_epoch=req.current_leader_epoch,
            follower_log_start_offset=req.log_start_offset,
        )
        self.carry_out(p, r.ready)
        if throttled and r.records:
            self.quotas.leader.record(len(r.records), now)
        return self._read_result(req, r, p)

    def _read_result(
        self, req: FetchPartition, read: ConsumerRead | FollowerRead, p: Partition
    ) -> FetchResult:
        """The fetch answer for one partition from what its replica read (or refused)."""
        if read.error is not None:
            return self._fetch_error(req, read.error, p)
        return FetchResult(
            req.topic,
            req.partition,
            None,
            high_watermark=read.high_watermark,
            log_start_offset=read.log_start_offset,
            diverging_epoch=read.diverging_epoch if isinstance(read, FollowerRead) else None,
            records=read.records,
            last_stable_offset=read.last_stable_offset if isinstance(read, ConsumerRead) else -1,
            aborted_transactions=(
                read.aborted_transactions if isinstance(read, ConsumerRead) else None
            ),
        )

    # (supervise) begin: the broker epoch a follower fetch must carry (KIP-903)
    def _registered_epoch(self, broker_id: int) -> int | None:
        """The epoch of ``broker_id``'s current registration; None when it is not
        registered or fenced (a fenced broker's fetches are not credited)."""
        reg = self.image.cluster.broker(broker_id)
        return None if reg is None or reg.fenced else reg.epoch

    # (supervise) end

    # ================================================================ list offsets

    def list_offsets(
        self,
        entries: Sequence[tuple[str, int, int]],
        *,
        current_leader_epoch: int | None = None,
        isolation_level: int = 0,
    ) -> list[ListOffsetsResult]:
        """ListOffsets on this leader; with ``isolation_level`` 1 (read_committed)
        "latest" is the last stable offset and a timestamp finds offsets below it."""
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
            if isolation_level == READ_COMMITTED:
                hw = p.replica.last_stable_offset  # Kafka: the upper bound is the LSO
            if timestamp == EARLIEST_TIMESTAMP:
                out.append(
                    ListOffsetsResult(topic, index, None, p.state.log_start_offset, -1, epoch)
                )
            elif timestamp == LATEST_TIMESTAMP:
                out.append(ListOffsetsResult(topic, index, None, hw, -1, epoch))
            elif p.tp in self._held:
                err = OffsetNotAvailableError(f"{_name(p.tp)}: {self._holder_of(p.tp)}")
                out.append(ListOffsetsResult(topic, index, err))
            else:
                found_ts = p.replica.log.offset_for_timestamp(timestamp)
                if found_ts is None or found_ts.offset >= hw:
                    out.append(ListOffsetsResult(topic, index, None, -1, -1, epoch))
                else:
                    out.append(
                        ListOffsetsResult(
                            topic, index, None, found_ts.offset, found_ts.timestamp_ms, epoch
                        )
                    )
        return out

    def describe_producers(
        self, entries: Sequence[tuple[str, int]]
    ) -> list[DescribeProducersResult]:
        """Kafka's DescribeProducers: each ``(topic, partition)``'s active producers
        from its producer state, on its leader only (NOT_LEADER_OR_FOLLOWER elsewhere,
        UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not know)."""
        out: list[DescribeProducersResult] = []
        for topic, index in entries:
            found = self._leading(topic, index)
            if isinstance(found, KafkaError):
                out.append(DescribeProducersResult(topic, index, found))
            elif not found.state.is_leader:
                error = NotLeaderOrFollowerError(_name(found.tp))
                out.append(DescribeProducersResult(topic, index, error))
            else:
                entries_ = found.producers.entries
                producers = tuple(entries_[pid] for pid in sorted(entries_))
                out.append(DescribeProducersResult(topic, index, None, producers))
        return out

    def offsets_for_leader_epoch(
        self, entries: Sequence[tuple[str, int, int, int]]
    ) -> list[EpochEndOffsetResult]:
        """OffsetForLeaderEpoch for each ``(topic, partition, current_leader_epoch,
        leader_epoch)`` on this leader (the rule is the partition core's)."""
        out: list[EpochEndOffsetResult] = []
        for topic, index, current_leader_epoch, leader_epoch in entries:
            found = self._leading(topic, index)
            if isinstance(found, KafkaError):
                out.append(EpochEndOffsetResult(topic, index, found))
                continue
            error, end = found.state.end_offset_for_epoch(
                leader_epoch=leader_epoch, current_leader_epoch=current_leader_epoch
            )
            if error is not None:
                out.append(EpochEndOffsetResult(topic, index, error(_name(found.tp))))
            else:
                out.append(EpochEndOffsetResult(topic, index, None, end.epoch, end.end_offset))
        return out

    # ================================================================ ISR changes

    def maybe_shrink_isrs(self) -> None:
        """The ISR-shrink timer's work: propose dropping followers that lag too long."""
        now = self._clock_ms()
        for p in list(self.partitions.values()):
            if self._core_held(p.tp):
                continue  # a worker's core call owns the state: the next tick sees it
            ready = p.replica.tick(now)
            if ready.isr_proposal is not None:
                log.info(
                    "proposing an ISR shrink",
                    extra={
                        "fields": {
                            "partition": _name(p.tp),
                            "new_isr": list(ready.isr_proposal.new_isr),
                        }
                    },
                )
            self.carry_out(p, ready)

    def _propose(self, p: Partition, proposal: IsrProposal) -> None:
        if self.alter_partition is None or self._stopping:
            return
        self._spawn(self._alter(p, proposal))

    def _persist_epochs(self, p: Partition) -> None:
        """Write the leader-epoch checkpoint a new leadership changed. Within
        :meth:`on_metadata` the log is held now and the write (an fsync) is left to a
        worker (:meth:`_write_epochs`), so nothing appends under the new epoch before
        the file is durable and a broker taking the leadership of hundreds of
        partitions does not fsync hundreds of files on the loop. Otherwise (a direct
        apply_metadata, or the cleaner holds the log: it does not touch the epochs) it
        is written here, as before."""
        plog = p.replica.log
        if not isinstance(plog, SegmentPartitionLog) or not plog.epoch_write_due:
            return
        plog.epoch_write_due = False
        if self._epoch_writes is not None and self._hold(p.tp, "a leader-epoch checkpoint"):
            self._epoch_writes.append(p)
        else:
            p.log.leader_epoch_cache.flush()

    async def _write_epochs(self, held: list[Partition]) -> None:
        """The epoch checkpoints :meth:`_persist_epochs` left, in parallel on the
        workers; each log is given back when its file is written."""

        async def one(p: Partition) -> None:
            try:
                await self.io.run(p.log.leader_epoch_cache.flush)
            except (OSError, KafkaError) as e:
                # Recovery rebuilds the epochs of the records it keeps from the batches.
                log.error(
                    "leader-epoch checkpoint failed",
                    extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
                )
            finally:
                self._release(p.tp)

        await asyncio.gather(*(one(p) for p in held))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alter(self, p: Partition, proposal: IsrProposal) -> None:
        assert self.alter_partition is not None
        while not self._stopping:
            if self.partitions.get(p.tp) is not p or p.state.pending_isr_change != proposal:
                return  # superseded (new metadata, lost leadership)
            request = AlterPartitionRequest(
                broker_id=self.broker_id,
                broker_epoch=self.broker_epoch(),
                topic_id=p.topic_id,
                partition=p.index,
                leader_epoch=proposal.leader_epoch,
                partition_epoch=proposal.partition_epoch,
                new_isr=list(proposal.new_isr),
            )
            answer: AlterPartitionResponse | KafkaError
            try:
                answer = await self.alter_partition(
                    request, timeout_ms=self.config.request_timeout_ms
                )
            except KafkaError as e:
                answer = e
            if not isinstance(answer, KafkaError):
                # Committed by the controller: counted as Kafka does, on its answer, and
                # before the checks below (the metadata may have brought the new ISR here
                # first and ended the proposal: the change still happened).
                if proposal.kind is IsrChangeKind.SHRINK:
                    self.isr_shrinks += 1
                else:
                    self.isr_expands += 1
            # An append on a worker reads the ISR: apply the answer between two jobs.
            await self._core_jobs_ended(p.tp)
            if self.partitions.get(p.tp) is not p or p.state.pending_isr_change != proposal:
                return
            if isinstance(answer, KafkaError):
                outcome, ready = p.replica.on_alter_partition_response(
                    proposal=proposal, error=type(answer)
                )
            else:
                outcome, ready = p.replica.on_alter_partition_response(
                    proposal=proposal,
                    error=None,
                    leader_epoch=answer.leader_epoch,
                    partition_epoch=answer.partition_epoch,
                    isr=answer.isr,
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
            self.carry_out(p, ready)
            if outcome.retry is None:
                return
            await asyncio.sleep(ALTER_RETRY_BACKOFF_MS / 1000)  # retry backoff

    # ================================================================ follower side

    async def on_follower_records(
        self,
        p: Partition,
        *,
        records: bytes,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        current: Callable[[], bool] = lambda: True,
    ) -> None:
        """Our leader's records for ``p`` (whole batches from our LEO): append them, on
        an I/O worker (flush.messages' fsync with them). ``current`` tells, once the
        partition's strand is ours, whether the fetch is still the partition's (no
        metadata change or other answer moved it meanwhile)."""
        await self._follower_job(
            p,
            FOLLOWER_APPEND,
            current,
            lambda: p.replica.on_fetch_answer(
                records=records,
                leader_high_watermark=leader_high_watermark,
                leader_log_start_offset=leader_log_start_offset,
            ),
        )

    async def on_follower_diverging(
        self,
        p: Partition,
        *,
        diverging: EpochEndOffset,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        current: Callable[[], bool] = lambda: True,
    ) -> None:
        """Our leader says our log diverges: truncate (log and epoch cache) on an I/O
        worker and refetch."""
        answer = await self._follower_job(
            p,
            TRUNCATION,
            current,
            lambda: p.replica.on_fetch_answer(
                records=b"",
                leader_high_watermark=leader_high_watermark,
                leader_log_start_offset=leader_log_start_offset,
                diverging_epoch=diverging,
            ),
        )
        if answer is not None and answer.truncated is not None:
            log.warning(
                "truncated a diverging log",
                extra={
                    "fields": {
                        "partition": _name(p.tp),
                        "from": answer.truncated[0],
                        "to": answer.truncated[1],
                        "leader_epoch": diverging.epoch,
                    }
                },
            )

    async def on_follower_out_of_range(
        self,
        p: Partition,
        *,
        leader_log_start_offset: int,
        current: Callable[[], bool] = lambda: True,
    ) -> None:
        """Our fetch offset is below the leader's log start: restart empty there (the
        truncation on an I/O worker)."""
        await self._follower_job(
            p,
            TRUNCATION,
            current,
            lambda: FetchAnswer(
                ready=p.replica.on_fetch_out_of_range(
                    leader_log_start_offset=leader_log_start_offset
                )
            ),
        )

    async def _follower_job(
        self,
        p: Partition,
        holder: str,
        current: Callable[[], bool],
        call: Callable[[], FetchAnswer],
    ) -> FetchAnswer | None:
        """A follower's core call: inline when it may (:meth:`_inline_ok`), else in the
        partition's strand, then inline if its log dir is fast again or on an I/O
        worker holding the log; its Ready carried out on the loop (before the log is
        given back). None (the answer dropped: the fetcher asks again from the same
        LEO) if a cleaner holds the log, the partition changed meanwhile, or the disk
        failed."""
        tp = p.tp
        if self._inline_ok(p):
            if self.partitions.get(tp) is not p or not current():
                return None
            return self._follow_inline(p, call)
        async with self.io.strand(tp):
            if self.partitions.get(tp) is not p or not current() or tp in self._held:
                return None
            if self.appends.inline(p.log.path.parent):
                return self._follow_inline(p, call)
            if not self._hold(tp, holder):
                return None
            try:
                answer = await self._run_core_job(p, call, _ready_of)
            except KafkaError as e:
                log.error(
                    "follower append failed",
                    extra={"fields": {"partition": _name(tp), "error": str(e)}},
                )
                return None
            else:
                self.carry_out(p, answer.ready)
                return answer
            finally:
                self._release(tp)

    def _follow_inline(self, p: Partition, call: Callable[[], FetchAnswer]) -> FetchAnswer:
        answer = self._run_inline(p, call)
        self.carry_out(p, answer.ready)
        return answer

    def enforce_retention(self) -> int:
        """Delete the segments retention.ms / retention.bytes allow (Kafka's retention
        check), and the producer-state snapshots below the new log starts; returns the
        number of segments deleted."""
        return sum(
            p.replica.enforce_retention()
            for p in list(self.partitions.values())
            # Its turn comes at the next check (a log being cleaned too: Kafka's
            # retention skips a log whose cleaning is in progress).
            if p.tp not in self._held and p.tp not in self._cleaning
        )

    async def enforce_retention_on_workers(self) -> int:
        """:meth:`enforce_retention` with the deletes on the I/O workers, one partition
        at a time (each holds its log meanwhile); returns the segments deleted."""
        total = 0
        for tp in list(self.partitions):
            if tp in self._cleaning:
                continue  # its turn comes at the next check (a worker's job: wait for it)
            deleted = await self._on_worker(
                tp,
                "log retention",
                lambda p: p.replica.log.delete_retention_segments,
                finish=lambda p, deleted: p.replica.on_log_start_moved() if deleted else None,
            )
            total += deleted or 0
        return total

    async def flush_due_logs(self) -> int:
        """fsync, on the I/O workers, every log whose flush.ms has passed with records
        unflushed (the flush.ms timer: an idle partition is flushed by time too);
        returns how many were flushed."""
        flushed = 0
        for tp, p in list(self.partitions.items()):
            if self._holders.get(tp) == CLEANER or not p.log.flush_due():
                continue
            if await self._on_worker(tp, "a flush", _flush_job, fsync=True):
                flushed += 1
        return flushed

    async def checkpoint_high_watermarks_on_workers(self) -> None:
        """:meth:`checkpoint_high_watermarks` with the file writes (fsyncs) on a worker."""
        by_dir = self.logs.high_watermarks_by_dir()
        await self.io.run_in_strand(
            "hw-checkpoint", lambda: self.logs.write_high_watermarks(by_dir)
        )

    async def _snapshot_on_worker(self, p: Partition) -> None:
        def prepare(q: Partition) -> Callable[[], None]:
            flush_to = q.log.active_segment_base_offset  # the segments the roll left
            offset, data = encode_producer_snapshot(q.log, q.producers)

            def job() -> None:
                q.log.flush(up_to_offset=flush_to)
                write_encoded_snapshot(q.log, offset, data)

            return job

        try:
            await self._on_worker(p.tp, "a producer-state snapshot", prepare, fsync=True)
        except (OSError, KafkaError) as e:
            # Only recovery time suffers: it replays from an older snapshot or the start
            # (and from the older recovery point if the flush failed).
            log.error(
                "roll flush or producer-state snapshot failed",
                extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
            )

    def expire_producers(self, *, now_ms: int) -> int:
        """Forget idle producers (producer.id.expiration.ms) on every replica."""
        return sum(
            p.replica.expire_producers(now_ms)
            for p in self.partitions.values()
            if not self._core_held(p.tp)  # its turn comes at the next check
        )

    def _snapshot_producers(self, p: Partition) -> None:
        try:
            p.replica.snapshot_producers()
        except OSError as e:
            # Only recovery time suffers: it replays from an older snapshot or the start.
            log.error(
                "producer-state snapshot failed",
                extra={"fields": {"partition": _name(p.tp), "error": str(e)}},
            )

    # ====================================================== holds: cleaner and I/O workers
    # The exclusion between the event loop and a thread that owns a partition's log for
    # a while (the cleaner's pass, an I/O worker's job; see the module docstring), the
    # truncation notice and the reopen after a storage error.

    def _hold(self, tp: PartitionKey, holder: str) -> bool:
        """Hand ``tp``'s log to a thread (``holder`` names it in errors); False if it is
        not here, already held, or the manager stops."""
        if self.partitions.get(tp) is None or tp in self._held or self._stopping:
            return False
        self._held[tp] = asyncio.get_running_loop().create_future()
        self._holders[tp] = holder
        return True

    def _release(self, tp: PartitionKey) -> None:
        """The thread gave ``tp``'s log back: wake what waited for it."""
        done = self._held.pop(tp, None)
        self._holders.pop(tp, None)
        if done is not None and not done.done():
            done.set_result(None)
        # A stop waits for the whole cleaner pass, not one of its steps (end_clean).
        stop = None if tp in self._cleaning else self._stop_after_hold.pop(tp, None)
        if stop is not None:
            self.stop_replica(tp, delete=stop[0], topic_id=stop[1])
            # A leader or follower change that came meanwhile (a topic recreated under
            # the same name) was held back by _become_*: take it now.
            self._take_role_from_image(tp)
        p = self.partitions.get(tp)
        if p is not None and tp in self._reconfigure_after_hold:
            self._reconfigure_after_hold.discard(tp)
            self._configure(p, self.image.configs.topic_config(p.topic))
        if p is not None:
            p.signal.fire()  # parked fetches read again

    def _holder_of(self, tp: PartitionKey) -> str:
        return f"the log is held by {self._holders.get(tp, 'a worker')}"

    def begin_clean(self, tp: PartitionKey) -> tuple[Log, dict[int, int], threading.Event] | None:
        """Start a cleaner pass over ``tp``'s log: the log, the active producers
        (producer id -> last offset of the batch holding its state) and the event that asks the pass
        to abort. The pass runs beside appends, reads and truncations and takes the log
        only for its exclusive steps (:meth:`hold_for_cleaner`). None if ``tp`` is not
        here, a pass runs on it, or an I/O worker holds it (the cleaner chooses again
        later)."""
        if (
            self.partitions.get(tp) is None
            or tp in self._held
            or tp in self._cleaning
            or self._stopping
        ):
            return None
        p = self.partitions[tp]
        # The batch holding each producer's state: its last data batch, or, when a
        # marker's epoch bump emptied its batches, that marker (Kafka's LastRecord).
        active = {
            pid: entry.last_marker.offset if entry.last_marker and not entry.batches else last
            for pid, entry in p.producers.entries.items()
            if (last := entry.last_offset) >= 0 or entry.last_marker is not None
        }
        stop = self._cleaning[tp] = threading.Event()
        return p.log, active, stop

    async def hold_for_cleaner(self, tp: PartitionKey) -> bool:
        """Take ``tp``'s log for one exclusive step of a pass (its start, a swap, the
        checkpoint), after any I/O worker's job on it; False if the pass must abort
        (asked to, the partition gone, the manager stopping). Give it back with
        :meth:`release_cleaner`."""
        while tp in self._held:
            await self.wait_clean_ended(tp)
        stop = self._cleaning.get(tp)
        if stop is None or stop.is_set():
            return False
        return self._hold(tp, CLEANER)

    def release_cleaner(self, tp: PartitionKey) -> None:
        """The end of an exclusive step of a pass: produces and fetches go on."""
        if self._holders.get(tp) == CLEANER:
            self._release(tp)

    def end_clean(self, tp: PartitionKey) -> None:
        """The cleaner pass over ``tp`` ended: a stop that waited for it happens now."""
        self._cleaning.pop(tp, None)
        if tp not in self._held or self._holders.get(tp) == CLEANER:
            self._release(tp)
        # else an I/O worker's job holds the log: its release runs the deferred stop.

    def _defer_stop(self, tp: PartitionKey, delete: bool, topic_id: str | None) -> None:
        self._stop_after_hold[tp] = (delete, topic_id)
        stop = self._cleaning.get(tp)
        if stop is not None:
            stop.set()

    async def _on_worker(
        self,
        tp: PartitionKey,
        holder: str,
        prepare: Callable[[Partition], Callable[[], T]],
        finish: Callable[[Partition, T], object] | None = None,
        *,
        fsync: bool = False,
    ) -> T | None:
        """Run a disk job for ``tp`` on an I/O worker while it holds the log: after the
        jobs submitted before it for ``tp`` (the partition's strand) and after a
        cleaner's pass. ``prepare`` runs on the loop once the log is held (so it sees a
        state no append changes until the job ends) and returns the job; ``finish``
        runs on the loop with the job's result before the log is given back (to tell
        the core what the job changed). None if the partition went away (or the
        manager stops) before its turn. An ``fsync`` job is timed: a slow one moves its
        log dir's appends to the workers."""
        async with self.io.strand(tp):
            while tp in self._held:
                await self.wait_clean_ended(tp)
            if not self._hold(tp, holder):
                return None
            try:
                p = self.partitions[tp]
                took_ms: list[float] = []
                job = prepare(p)
                result = await self.io.run(_timed(job, took_ms) if fsync else job)
                if took_ms:
                    self.appends.fsynced(p.log.path.parent, took_ms[0])
                if finish is not None:
                    finish(p, result)
                return result
            finally:
                self._release(tp)

    def _held_back(self, tip: TopicIdPartition) -> bool:
        """True if a role change for ``tip`` must wait for a held log: the replica's
        stop is already deferred, or ``tip`` is a new topic of the same name as the
        one whose log a thread holds (the old replica is deleted first)."""
        tp = (tip.topic, tip.partition)
        existing = self.partitions.get(tp)
        busy = tp in self._held or tp in self._cleaning
        if busy and existing is not None and existing.topic_id != tip.topic_id:
            self._defer_stop(tp, True, existing.topic_id)
        return tp in self._stop_after_hold

    def is_cleaning(self, tp: PartitionKey) -> bool:
        """True while a thread (the cleaner or an I/O worker) holds ``tp``'s log or a
        cleaner pass works on it."""
        return tp in self._held or tp in self._cleaning

    async def wait_clean_ended(self, tp: PartitionKey) -> None:
        """Until no thread holds ``tp``'s log (at once if none does)."""
        while (done := self._held.get(tp)) is not None:
            await asyncio.shield(done)

    async def _clean_ended(self, tp: PartitionKey, deadline_ms: int) -> bool:
        """Until no thread holds ``tp``'s log; False if ``deadline_ms`` passes first."""
        while (done := self._held.get(tp)) is not None:
            remaining_s = max(0, deadline_ms - self._clock_ms()) / 1000
            try:
                await asyncio.wait_for(asyncio.shield(done), remaining_s)
            except TimeoutError:
                return False
        return True

    async def wait_io_released(self, tps: Iterable[PartitionKey]) -> None:
        """Until no I/O worker holds any of ``tps`` (a metadata change then applies to
        logs only the loop touches; the cleaner's holds are handled as before)."""
        # Until one look finds none held: appends take holds all the time now, so a
        # partition checked earlier may be held again by the time a later one ends.
        wanted = list(tps)
        while True:
            busy = next(
                (
                    done
                    for tp in wanted
                    if (done := self._held.get(tp)) is not None and self._holders.get(tp) != CLEANER
                ),
                None,
            )
            if busy is None:
                return
            await asyncio.shield(busy)

    def _core_held(self, tp: PartitionKey) -> bool:
        """True while a worker runs a core call of ``tp`` (an append, a truncation): the
        replica's state is the thread's until it ends, not only its log."""
        return self._holders.get(tp) in CORE_JOBS

    async def _core_jobs_ended(self, tp: PartitionKey) -> None:
        """Until no worker runs a core call of ``tp``."""
        while self._core_held(tp) and (done := self._held.get(tp)) is not None:
            await asyncio.shield(done)

    def _on_truncate(self, segment_log: Log, offset: int) -> None:
        cleaner = self.logs.cleaner
        if cleaner is None:
            return
        try:
            cleaner.truncate_checkpoint(segment_log, offset)
        except OSError as e:
            # Left above the log end, the checkpoint is clamped to the log start by the
            # cleaner: the next pass redoes clean work, nothing is lost.
            log.error(
                "cleaner checkpoint truncation failed",
                extra={"fields": {"path": str(segment_log.path), "error": str(e)}},
            )

    def reopen_log(self, tp: PartitionKey) -> None:
        """After the cleaner raised KafkaStorageError on ``tp``: its files may be
        mid-swap, so close the log and open it again (``Log.open`` finishes or rolls back
        the swap), then take the partition's role from the current metadata again."""
        p = self.partitions.get(tp)
        if p is None or tp in self._held:
            return
        # The reopened replica starts from the checkpointed HW: write the current one
        # first, so consumers do not see it move back.
        with contextlib.suppress(OSError):
            self.logs.checkpoint_high_watermarks()
        self.carry_out(p, p.replica.go_offline())
        del self.partitions[tp]
        if self.fetch_targets is not None:
            self.fetch_targets.remove(tp)
        try:
            self.logs.close(tp)
        except Exception as e:  # the files are what Log.open will repair
            log.warning(
                "closing a log after a cleaner error failed",
                extra={"fields": {"partition": _name(tp), "error": str(e)}},
            )
        self._take_role_from_image(tp)

    def _take_role_from_image(self, tp: PartitionKey) -> None:
        """Lead or follow ``tp`` as the current image says (after a reopen, or after a
        metadata change that waited for a clean)."""
        topic = self.image.topics.topic_by_name(tp[0])
        reg = None if topic is None else topic.partitions.get(tp[1])
        if topic is None or reg is None:
            return
        tip = TopicIdPartition(topic.topic_id, tp[0], tp[1])
        if reg.leader == self.broker_id:
            self._become_leader(tip, reg, self._clock_ms())
        elif self.broker_id in reg.replicas:
            self._become_follower(tip, reg, self._clock_ms())

    # ================================================================ lifecycle

    def checkpoint_high_watermarks(self) -> None:
        self.logs.checkpoint_high_watermarks()

    async def close(self) -> None:
        """Fail waiting produces, stop AlterPartition tasks, close the logs cleanly."""
        self._stopping = True
        for stop in self._cleaning.values():
            stop.set()  # a pass still running aborts at its next batch or step
        for done in list(self._held.values()):
            # The log cleaner service is closed first (server.stop); this is a backstop
            # so no log is closed under a running pass.
            with contextlib.suppress(Exception):
                await asyncio.shield(done)
        if self._expiry is not None:
            self._expiry.cancel()
        for tp in list(self.partitions):
            self._deliver(self.purgatory.on_leadership_lost(partition=tp))
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Every hold has ended and nothing takes one any more (_stopping): the logs are
        # the worker's now. The clean shutdown's snapshots, then every log closed.
        await self.io.run(self._close_logs)
        self.partitions.clear()
        await self.io.close()

    def _close_logs(self) -> None:
        for p in self.partitions.values():
            self._snapshot_producers(p)  # a clean shutdown's snapshot
        self.logs.close_all()


def _room(req: FetchPartition, budget: int) -> int | None:
    """What one partition may add to a fetch response; None once the response's budget
    is spent (a partition limit of 0 still reads: the log may return one batch)."""
    return min(req.partition_max_bytes, budget) if budget > 0 else None


#: A produce's answer for one partition, and the future acks=all waits on.
_Appended = tuple[ProduceResult, "asyncio.Future[KafkaError | None] | None"]
#: A core call that writes a leader's log (an append, a transaction marker).
_CoreWrite = Callable[[Partition], ProduceOutcome]


@dataclass(slots=True)
class _Place:
    """An append's place in its partition's strand, taken when it was decided."""

    strand: Strand
    ticket: asyncio.Future[None]
    taken: bool = False  # its coroutine started (and gives the place up itself)

    def give_up_unless_taken(self, _task: object) -> None:
        if not self.taken:
            self.strand.abandon(self.ticket)


def _ready_of(outcome: ProduceOutcome | FetchAnswer) -> Ready:
    return outcome.ready


def _timed(job: Callable[[], T], took_ms: list[float]) -> Callable[[], T]:
    """``job``, appending to ``took_ms`` how long it took on its worker (WriteTimer);
    the loop reads it once the job has ended."""

    def timed() -> T:
        timer = WriteTimer()
        try:
            return job()
        finally:
            took_ms.append(timer.ms())

    return timed


def _flush_job(p: Partition) -> Callable[[], bool]:
    def job() -> bool:
        p.log.flush()
        return True

    return job


def _name(tp: PartitionKey) -> str:
    return f"{tp[0]}-{tp[1]}"
