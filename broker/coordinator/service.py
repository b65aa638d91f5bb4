# Over 700 lines: the shell and its typed API (one method per route) are one class.
"""The group coordinator on a broker: the I/O shell around the pure :class:`GroupManager`.

Theory of operation
-------------------
* **Placement.** A group lives in partition ``abs(hash(group_id)) % N`` of the internal
  topic ``__consumer_offsets``; the leader of that partition is its coordinator. Any
  broker answers FindCoordinator from its metadata image. The first FindCoordinator
  that finds no such topic asks the active controller to create it
  (``offsets.topic.num.partitions``, ``offsets.topic.replication.factor``; refused by the
  controller while fewer brokers are usable, as in Kafka) and answers
  COORDINATOR_NOT_AVAILABLE until it shows up.
* **Ownership.** After every committed metadata change, :meth:`on_metadata` compares
  the offsets partitions this broker leads (the replica manager's view) with those the
  core owns. A newly led partition is *loaded*: its log is read from the start to the
  log end (ours: we are its leader) and replayed into the core, which answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile. A partition we no longer lead is *unloaded*:
  parked requests get NOT_COORDINATOR.
* **Appends.** The core's :class:`AppendRecords` become one RecordBatch produced to our
  own leader replica with acks=all; only when the high watermark passes it (or the
  append fails) does the core hear ``append_completed``, so a commit is acknowledged
  only once it is replicated to the ISR. Appends start in emission order: each
  ``produce`` call appends before its first await, and the tasks run in creation order.
* **Parked requests.** JoinGroup and SyncGroup answers that wait for a rebalance and
  OffsetCommit answers that wait for their append are futures keyed by (group, member)
  or append id; the core's outputs resolve them. No polling loop.
* **Transactions.** TxnOffsetCommit's records go out as a transactional batch of the
  producer (its id and epoch, and the next sequence of that producer at the partition,
  :meth:`GroupCoordinatorService._txn_sequence`), so the partition's producer state and
  last stable offset see the transaction. The partition leader's marker path calls
  :meth:`GroupCoordinatorService.complete_transaction` after it appended a COMMIT or
  ABORT marker here; a load replays the markers it reads in the log. The log cleaner
  does not clean at or past the partition's last stable offset (Kafka's
  firstUncleanableDirtyOffset), so the records of an open transaction survive until
  its marker; after it, it drops aborted records and keeps each key's latest record by
  offset, which is the visibility rule's answer too (txn_offsets). Not done: KIP-890
  part 1's verification of this partition with the transaction coordinator before the
  append (Kafka's group coordinator does it): an append here starts in emission order
  with no await before it, which the log-order positions of txn_offsets rely on.
* **Time.** One timer task calls ``tick`` at the core's next deadline (session expiry,
  join-phase delays, offset retention) or sooner when a request changed the deadlines.
  ``now_ms`` is the wall clock, as the core persists timestamps in records.

Everything runs on the broker's event loop; the core is called only from there.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from raftka.broker.config import BrokerConfig
from raftka.broker.coordinator.coordinator_topic import (
    LOAD_BUFFER_BYTES,
    CoordinatorLocation,
    CoordinatorTopic,
)
from raftka.broker.coordinator.group import (
    AppendRecords,
    Decision,
    ErrorType,
    GroupConfig,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinReply,
    LeaveGroupResponse,
    LeaveMember,
    SyncGroupRequest,
    SyncGroupResponse,
    SyncReply,
    coordinator_error_for_append,
)
from raftka.broker.coordinator.group_manager import (
    CommitReply,
    DeleteGroupsResponse,
    DescribedGroup,
    GroupCoordinatorConfig,
    GroupManager,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    Output,
    ReplayedTxnMarker,
    ReplayedTxnRecord,
    TxnOffsetCommitRequest,
)
from raftka.broker.coordinator.group_records import OffsetsRecord, OffsetsRecordError
from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.lifecycle import ControllerChannel
from raftka.broker.producer_state import next_sequence
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.errors import (
    CorruptMessageError,
    InvalidRequestError,
    KafkaError,
    NotCoordinatorError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages import coordinator as api
from raftka.common.messages import transactions as txn_api
from raftka.common.messages.broker import ErrorObject, error_object
from raftka.common.record import Record, build_batch, decode_batches
from raftka.common.record.batch import DecodedBatch
from raftka.common.record.control import ControlRecordType, end_transaction_marker
from raftka.common.structs import OffsetAndMetadata, TopicPartition
from raftka.common.time import wall_clock_ms
from raftka.server_common.metrics import add_remote

if TYPE_CHECKING:
    # The broker's verifier (broker/txn_verification.py imports this package).
    from raftka.broker.producer_state import VerificationGuard
    from raftka.broker.txn_verification import TxnVerifier
    from raftka.storage.log_manager import PartitionKey

    #: Verification guards per partition and producer (ReplicaManager.produce's).
    TxnGuards = Mapping[PartitionKey, Mapping[int, VerificationGuard]]

__all__ = [
    "OFFSETS_TOPIC",
    "CoordinatorLocation",
    "GroupCoordinatorService",
    "RequestContext",
    "replay_items",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"
#: Waiters parked on one (group, member) key: a client retrying its JoinGroup after a
#: timeout adds one; more than this is a misbehaving client.
WAITERS_PER_MEMBER_MAX: Final = 8
#: How long the timer sleeps at most when the core names no earlier deadline.
TIMER_IDLE_MS_MAX: Final = 1_000
#: Topic configs of __consumer_offsets, Kafka's: compacted (the broker's log cleaner
#: keeps the latest record of each group and offset key and drops what tombstones
#: delete, so a load after failover reads about one record per live key), and
#: ``offsets.topic.segment.bytes``' default of 100 MiB so segments roll and become
#: cleanable well before the 1 GiB log default. cleanup.policy=compact alone: time and
#: size retention never delete committed offsets. A cluster whose topic was created
#: before this with retention.ms=-1 keeps that config (a topic's configs are the
#: controller's, never rewritten by brokers): it grows without bound until an operator
#: sets cleanup.policy=compact on it (docs/operations.md).
OFFSETS_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact", "segment.bytes": "104857600"}

T = TypeVar("T")
V = TypeVar("V")
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a request brings besides its body."""

    #: Kafka's client host, ``/<address>``, as DescribeGroups shows it.
    client_host: str = "/unknown"


def _error(error: ErrorType) -> ErrorObject | None:
    """The core names errors by class; the wire carries an instance's fields."""
    return None if error is None else error_object(error())


def _by_topic(
    answers: Mapping[TopicPartition, V], partition: Callable[[TopicPartition, V], P]
) -> list[tuple[str, tuple[P, ...]]]:
    """Per-partition ``answers`` as ``partition`` builds them, grouped by topic (topics
    sorted by name, partitions in the answers' order)."""
    topics: dict[str, list[P]] = {}
    for tp, answer in answers.items():
        topics.setdefault(tp.topic, []).append(partition(tp, answer))
    return [(name, tuple(ps)) for name, ps in sorted(topics.items())]


def replay_items(
    batch: DecodedBatch,
) -> list[OffsetsRecord | ReplayedTxnRecord | ReplayedTxnMarker]:
    """What the core replays of one batch of the log: its offsets records (marked with
    their producer when the batch is transactional), or its COMMIT/ABORT marker."""
    header = batch.header
    if header.is_control:
        marker = end_transaction_marker(batch)  # None: another control type, skipped
        if marker is None:
            return []
        committed = marker.control_type is ControlRecordType.COMMIT
        return [ReplayedTxnMarker(header.producer_id, committed)]
    records = [OffsetsRecord(r.key, r.value) for r in batch.records if r.key is not None]
    if not header.is_transactional:
        return list(records)
    return [ReplayedTxnRecord(r, header.producer_id) for r in records]


def _partitions(topics: Iterable[api.OffsetFetchTopic]) -> tuple[TopicPartition, ...]:
    """The partitions an OffsetFetch or OffsetDelete names, in request order."""
    return tuple(TopicPartition(t.name, p.partition) for t in topics for p in t.partitions)


class GroupCoordinatorService:
    """See the module docstring. Not thread-safe: the broker's event loop only."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        replicas: ReplicaManager,
        channel: Callable[[], ControllerChannel | None],
        clock_ms: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._replicas = replicas
        self._channel = channel
        self._clock_ms = clock_ms
        group_config = GroupConfig(
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            group_max_size=config.group_max_size,
        )
        self.core = GroupManager(
            config=GroupCoordinatorConfig(
                group=group_config,
                offsets_retention_minutes=config.offsets_retention_minutes,
                offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
                offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            ),
            # Member ids need uniqueness, not secrecy: a per-process seed suffices.
            rng=rng if rng is not None else random.Random(),
            partition_for=self.partition_for,
        )
        self._topic = CoordinatorTopic(
            name=OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            replication_setting="offsets.topic.replication.factor",
            configs=OFFSETS_TOPIC_CONFIGS,
            replicas=replicas,
            channel=channel,
            request_timeout_ms=config.request_timeout_ms,
            spawn=self._spawn,
        )
        #: Offsets partitions the core owns (loading or loaded) -> load generation.
        self._owned: dict[int, int] = {}
        self._load_generation = 0
        self._joins: dict[tuple[str, str], list[asyncio.Future[JoinGroupResponse]]] = {}
        self._syncs: dict[tuple[str, str], list[asyncio.Future[SyncGroupResponse]]] = {}
        self._commits: dict[int, asyncio.Future[OffsetCommitResponse]] = {}
        #: (offsets partition, producer id) -> (epoch, next sequence) of the
        #: transactional batches this coordinator writes (see _txn_sequence).
        self._sequences: dict[tuple[int, int], tuple[int, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._closed = False
        #: FindCoordinator with key_type 1: the transaction coordinator's answer (set by
        #: the broker; None: transactions are not served here).
        self.find_transaction_coordinator: Callable[[str], api.FindCoordinatorResponse] | None = (
            None
        )
        #: KIP-890 part 1 for TxnOffsetCommit: the broker's verifier when
        #: transaction.partition.verification.enable is on (set by the broker).
        self.txn_verifier: TxnVerifier | None = None
        #: One transactional append at a time per (offsets partition, producer): the
        #: verification awaits, and the batches must reach the log in sequence order.
        #: (the lock, how many appends hold or wait for it: the entry goes at zero).
        self._txn_locks: dict[tuple[int, int], tuple[asyncio.Lock, int]] = {}

    # ------------------------------------------------------------------ placement

    def num_partitions(self) -> int:
        """The partition count of __consumer_offsets: the topic's own once it exists
        (so that placement never changes under a group), else the configured one."""
        return self._topic.num_partitions()

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.num_partitions())

    async def _find_coordinator(self, group_id: str) -> CoordinatorLocation:
        return self._topic.locate(group_id, "group")

    # ------------------------------------------------------------------ ownership

    def _led_partitions(self) -> set[int]:
        return set(self._topic.led_partitions())

    def on_metadata(self) -> None:
        """Committed metadata was applied: load what we now lead, unload what we lost."""
        if self._closed:
            return
        led = self._led_partitions()
        now = self._clock_ms()
        for partition in sorted(set(self._owned) - led):
            del self._owned[partition]
            log.info("unloading groups", extra={"fields": {"partition": partition}})
            self._dispatch(self.core.unload(partition=partition, now_ms=now))
        for partition in sorted(led - set(self._owned)):
            # Another leader may have written this partition meanwhile: the sequences
            # of its transactional producers come from producer state again. (A stale
            # next sequence could even match a batch it wrote and be answered as that
            # duplicate, with nothing appended.)
            for key in [k for k in self._sequences if k[0] == partition]:
                del self._sequences[key]
            self._load_generation += 1
            self._owned[partition] = self._load_generation
            self.core.begin_loading(partition=partition)
            self._spawn(self._load(partition, self._load_generation))

    async def _load(self, partition: int, generation: int) -> None:
        """Replay the partition's log into the core. Reads yield between steps so a
        large partition does not stall the broker."""
        started = time.monotonic()
        p = self._replicas.partitions.get((OFFSETS_TOPIC, partition))
        records = 0
        if p is not None:
            end = p.log.log_end_offset
            offset = p.log.log_start_offset
            while offset < end:
                # The log cleaner may hold this log (broker/log_cleaning.py): wait for it
                # to give it back before every read (each step yields to the loop).
                await self._replicas.wait_clean_ended(p.tp)
                if self._owned.get(partition) != generation:
                    return  # unloaded (and maybe reloaded) meanwhile
                current = self._replicas.partitions.get(p.tp)
                if current is None:
                    return  # stopped meanwhile; on_metadata unloads it
                p = current  # reopened after a cleaner error: the same log, a new object
                data = p.log.read(offset, LOAD_BUFFER_BYTES, max_offset=end, min_one_batch=True)
                batches = list(decode_batches(data))
                if not batches:
                    break
                replayed: list[OffsetsRecord | ReplayedTxnRecord | ReplayedTxnMarker] = []
                for batch in batches:
                    offset = batch.header.next_offset
                    try:
                        replayed.extend(replay_items(batch))
                    except CorruptMessageError as e:
                        log.error(
                            "skipping an unreadable control batch",
                            extra={"fields": {"partition": partition, "error": str(e)}},
                        )
                try:
                    self.core.replay(partition=partition, records=replayed)
                except OffsetsRecordError as e:
                    # A record we cannot read must not take the whole partition down.
                    log.error(
                        "skipping unreadable offsets records",
                        extra={"fields": {"partition": partition, "error": str(e)}},
                    )
                records += len(replayed)
                await asyncio.sleep(0)  # let requests in between steps
        if self._owned.get(partition) != generation:
            return
        self.core.complete_loading(partition=partition, now_ms=self._clock_ms())
        self._wake.set()
        log.info(
            "loaded groups",
            extra={
                "fields": {
                    "partition": partition,
                    "records": records,
                    "elapsed_ms": int((time.monotonic() - started) * 1000),
                }
            },
        )

    # ------------------------------------------------------------------ outputs

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _dispatch(self, outputs: Iterable[Output]) -> None:
        for out in outputs:
            if isinstance(out, JoinReply):
                for f in self._joins.pop((out.group_id, out.member_id), []):
                    if not f.done():
                        f.set_result(out.response)
            elif isinstance(out, SyncReply):
                for g in self._syncs.pop((out.group_id, out.member_id), []):
                    if not g.done():
                        g.set_result(out.response)
            elif isinstance(out, CommitReply):
                c = self._commits.pop(out.append_id, None)
                if c is not None and not c.done():
                    c.set_result(out.response)
            else:
                assert isinstance(out, AppendRecords)
                self._spawn(self._append(out))
        self._wake.set()

    async def _append(self, out: AppendRecords) -> type[KafkaError] | None:
        """Append ``out`` (acks=all) and tell the core; the append's error, if any."""
        now = wall_clock_ms()
        records = [Record(r.value, r.key, now) for r in out.records]
        if out.producer_id < 0:
            batch = build_batch(records)
        else:
            batch = build_batch(
                records,
                producer_id=out.producer_id,
                producer_epoch=out.producer_epoch,
                base_sequence=self._txn_sequence(out),
                is_transactional=True,
            )
        error: type[KafkaError] | None
        try:
            if out.producer_id >= 0:
                # Taken before the first await, so appends keep their sequence order.
                key = (out.partition, out.producer_id)
                lock, users = self._txn_locks.get(key, (asyncio.Lock(), 0))
                self._txn_locks[key] = (lock, users + 1)
                try:
                    async with lock:
                        error = await self._append_transactional(out, batch)
                finally:
                    lock, users = self._txn_locks[key]
                    if users == 1:
                        del self._txn_locks[key]  # nobody else waits: forget the producer
                    else:
                        self._txn_locks[key] = (lock, users - 1)
            else:
                error = await self._produce(out.partition, batch)
        except KafkaError as e:
            error = type(e)
        if error is not None and out.producer_id >= 0:
            # Whether the batch is in the log is unknown: ask producer state next time.
            self._sequences.pop((out.partition, out.producer_id), None)
        if self._closed:
            return error
        self._dispatch(
            self.core.append_completed(
                append_id=out.append_id, error=error, now_ms=self._clock_ms()
            )
        )
        return error

    async def _append_transactional(
        self, out: AppendRecords, batch: bytes
    ) -> type[KafkaError] | None:
        """A TxnOffsetCommit's batch: verified first (KIP-890 part 1, as the produce path
        verifies a producer's first batch at a partition: is this offsets partition in
        the producer's ongoing transaction, which AddOffsetsToTxn added?), then appended
        with the verification guard, so a marker written meanwhile voids it."""
        if self.txn_verifier is None or not out.transactional_id:
            return await self._produce(out.partition, batch)
        verified = await self.txn_verifier.verify(
            out.transactional_id,
            [(OFFSETS_TOPIC, out.partition, batch)],
            self._replicas.partitions,
            timeout_ms=self._config.offsets_commit_timeout_ms,
        )
        refused = verified.errors.get((OFFSETS_TOPIC, out.partition))
        if refused is not None:
            return type(refused)
        return await self._produce(out.partition, batch, verified.guards)

    async def _produce(
        self, partition: int, batch: bytes, guards: TxnGuards | None = None
    ) -> type[KafkaError] | None:
        """One batch to ``partition`` of __consumer_offsets, acks=all; its error."""
        (result,) = await self._replicas.produce(
            acks=-1,
            timeout_ms=self._config.offsets_commit_timeout_ms,
            entries=[(OFFSETS_TOPIC, partition, batch)],
            txn_guards=guards,
        )
        return None if result.error is None else type(result.error)

    def _txn_sequence(self, out: AppendRecords) -> int:
        """The base sequence of ``out``'s transactional batch, allocated now, in the
        order the appends reach the log (each ``_append`` asks before its first await).

        The partition's producer state checks sequences as for any producer's batch: a
        new epoch starts at 0, the same epoch continues after the producer's last batch
        there. The first append of a producer (or the first after a failed one, or
        after this broker became leader) starts from what producer state holds."""
        key = (out.partition, out.producer_id)
        known = self._sequences.get(key)
        if known is not None and known[0] == out.producer_epoch:
            base = known[1]
        else:
            base = 0
            p = self._replicas.partitions.get((OFFSETS_TOPIC, out.partition))
            entry = None if p is None else p.producers.entry(out.producer_id)
            if entry is not None and entry.producer_epoch == out.producer_epoch and entry.batches:
                base = next_sequence(entry.last_sequence)
        self._sequences[key] = (out.producer_epoch, next_sequence(base, len(out.records)))
        return base

    def _park(
        self,
        table: dict[tuple[str, str], list[asyncio.Future[T]]],
        key: tuple[str, str],
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiters = table.setdefault(key, [])
        if len(waiters) >= WAITERS_PER_MEMBER_MAX:
            stale = waiters.pop(0)
            if not stale.done():
                stale.cancel()
        waiters.append(future)
        return future

    # ------------------------------------------------------------------ requests

    def _check_open(self) -> None:
        if self._closed:
            raise NotCoordinatorError("the broker is shutting down")

    async def _join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        self._check_open()
        decision = self.core.join_group(request, now_ms=self._clock_ms())
        member_id = request.member_id
        if decision.response is None and not member_id and request.group_instance_id is not None:
            # A static member joins without a member id and is parked under the new one.
            group = self.core.group(request.group_id)
            assert group is not None
            member_id = group.static_members[request.group_instance_id]
        return await self._settle(decision, self._joins, (request.group_id, member_id))

    async def _sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        self._check_open()
        decision = self.core.sync_group(request, now_ms=self._clock_ms())
        return await self._settle(decision, self._syncs, (request.group_id, request.member_id))

    async def _settle(
        self,
        decision: Decision[T],
        table: dict[tuple[str, str], list[asyncio.Future[T]]],
        key: tuple[str, str],
    ) -> T:
        if decision.response is not None:
            self._dispatch(decision.outputs)
            return decision.response
        future = self._park(table, key)
        self._dispatch(decision.outputs)
        return await _parked(future)

    def _heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        self._check_open()
        response = self.core.heartbeat(request, now_ms=self._clock_ms())
        self._wake.set()
        return response

    def _leave_group(self, group_id: str, members: tuple[LeaveMember, ...]) -> LeaveGroupResponse:
        self._check_open()
        decision = self.core.leave_group(
            group_id=group_id, members=members, now_ms=self._clock_ms()
        )
        self._dispatch(decision.outputs)
        assert decision.response is not None
        return decision.response

    async def _offset_commit(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        self._check_open()
        return await self._committed(self.core.offset_commit(request, now_ms=self._clock_ms()))

    async def _txn_offset_commit(self, request: TxnOffsetCommitRequest) -> OffsetCommitResponse:
        self._check_open()
        decision = self.core.txn_offset_commit(request, now_ms=self._clock_ms())
        return await self._committed(decision)

    async def _committed(self, decision: Decision[OffsetCommitResponse]) -> OffsetCommitResponse:
        """The answer of a commit: now, or once its records are appended."""
        if decision.response is not None:
            self._dispatch(decision.outputs)
            return decision.response
        (append,) = [o for o in decision.outputs if isinstance(o, AppendRecords)]
        future: asyncio.Future[OffsetCommitResponse] = asyncio.get_running_loop().create_future()
        self._commits[append.append_id] = future
        self._dispatch(decision.outputs)
        return await _parked(future)

    def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """The partition leader appended a COMMIT (``committed``) or ABORT marker of
        ``producer_id`` to ``partition`` of __consumer_offsets (the broker's
        ``on_txn_marker``, docs/protocol.md): that producer's pending offsets there
        become visible or are dropped. Called on the event loop."""
        if self._closed:
            return
        self.core.complete_transaction(
            partition=partition, producer_id=producer_id, committed=committed
        )

    def _offset_fetch(
        self,
        group_id: str,
        partitions: tuple[TopicPartition, ...] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        self._check_open()
        return self.core.offset_fetch(
            group_id=group_id, partitions=partitions, require_stable=require_stable
        )

    def _list_groups(self, states: frozenset[str] | None) -> ListGroupsResponse:
        return self.core.list_groups(states=states)

    def _describe_groups(self, group_ids: tuple[str, ...]) -> tuple[DescribedGroup, ...]:
        return self.core.describe_groups(group_ids=group_ids)

    def _delete_groups(self, group_ids: tuple[str, ...]) -> DeleteGroupsResponse:
        self._check_open()
        decision = self.core.delete_groups(group_ids=group_ids, now_ms=self._clock_ms())
        self._dispatch(decision.outputs)
        assert decision.response is not None
        return decision.response

    async def _delete_offsets(
        self, group_id: str, partitions: tuple[TopicPartition, ...]
    ) -> OffsetDeleteResponse:
        # As Kafka's KafkaApis: a partition the metadata does not know is answered
        # UNKNOWN_TOPIC_OR_PARTITION here; the core decides for the others. The answer
        # waits for the tombstones (acks=all), as Kafka's group coordinator runtime
        # answers a write once it is committed: a deletion answered survives a
        # coordinator failover.
        self._check_open()
        topics = self._replicas.image.topics
        unknown = {
            tp for tp in partitions if topics.partition_by_name(tp.topic, tp.partition) is None
        }
        known = tuple(tp for tp in partitions if tp not in unknown)
        decision = self.core.delete_offsets(
            group_id=group_id, partitions=known, now_ms=self._clock_ms()
        )
        appends = [o for o in decision.outputs if isinstance(o, AppendRecords)]
        self._dispatch(o for o in decision.outputs if not isinstance(o, AppendRecords))
        response = decision.response
        assert response is not None
        if response.error is not None:
            return response
        for append in appends:
            error = await self._append(append)
            if error is not None:
                return OffsetDeleteResponse(coordinator_error_for_append(error))
        errors: dict[TopicPartition, ErrorType] = dict.fromkeys(
            unknown, UnknownTopicOrPartitionError
        )
        errors.update(response.errors)
        return OffsetDeleteResponse(None, {tp: errors[tp] for tp in partitions})

    # ------------------------------------------------------------------ the API
    # One method per route (broker/coordinator/routes.py): a typed request message in,
    # a typed answer out. They translate between the wire's messages and the core's
    # types; the work is in the private methods above.

    async def find_coordinator(
        self, request: api.FindCoordinatorRequest, context: RequestContext
    ) -> api.FindCoordinatorResponse:
        if request.key_type == 1 and self.find_transaction_coordinator is not None:
            return self.find_transaction_coordinator(request.key)
        if request.key_type != 0:
            raise InvalidRequestError("key_type: only 0 (group) and 1 (transaction) are supported")
        found = await self._find_coordinator(request.key)
        return api.FindCoordinatorResponse(
            error=error_object(found.error), node_id=found.node_id, host=found.host, port=found.port
        )

    async def join_group(
        self, request: api.JoinGroupRequest, context: RequestContext
    ) -> api.JoinGroupResponse:
        rebalance_ms = request.rebalance_timeout_ms
        response = await self._join_group(
            JoinGroupRequest(
                group_id=request.group_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.session_timeout_ms
                if rebalance_ms is None
                else rebalance_ms,
                protocol_type=request.protocol_type,
                protocols=tuple((p.name, p.metadata) for p in request.protocols),
                client_id=request.client_id,
                client_host=context.client_host,
            )
        )
        return api.JoinGroupResponse(
            error=_error(response.error),
            generation_id=response.generation_id,
            protocol_type=response.protocol_type,
            protocol_name=response.protocol_name,
            leader=response.leader_id,
            member_id=response.member_id,
            skip_assignment=response.skip_assignment,
            members=tuple(
                api.JoinGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in response.members
            ),
        )

    async def sync_group(
        self, request: api.SyncGroupRequest, context: RequestContext
    ) -> api.SyncGroupResponse:
        response = await self._sync_group(
            SyncGroupRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                assignments={a.member_id: a.assignment for a in request.assignments},
                protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
            )
        )
        return api.SyncGroupResponse(
            error=_error(response.error),
            protocol_type=response.protocol_type,
            protocol_name=response.protocol_name,
            assignment=response.assignment,
        )

    async def heartbeat(
        self, request: api.HeartbeatRequest, context: RequestContext
    ) -> api.HeartbeatResponse:
        response = self._heartbeat(
            HeartbeatRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
            )
        )
        return api.HeartbeatResponse(error=_error(response.error))

    async def leave_group(
        self, request: api.LeaveGroupRequest, context: RequestContext
    ) -> api.LeaveGroupResponse:
        response = self._leave_group(
            request.group_id,
            tuple(LeaveMember(m.member_id, m.group_instance_id) for m in request.members),
        )
        return api.LeaveGroupResponse(
            error=_error(response.error),
            members=tuple(
                api.LeaveGroupMemberResponse(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    error=_error(m.error),
                )
                for m in response.members
            ),
        )

    async def offset_commit(
        self, request: api.OffsetCommitRequest, context: RequestContext
    ) -> api.OffsetCommitResponse:
        offsets = {
            TopicPartition(t.name, p.partition): OffsetAndMetadata(
                p.offset, p.metadata, p.leader_epoch
            )
            for t in request.topics
            for p in t.partitions
        }
        response = await self._offset_commit(
            OffsetCommitRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                offsets=offsets,
                group_instance_id=request.group_instance_id,
                retention_time_ms=request.retention_time_ms,
            )
        )
        topics = _by_topic(
            response.errors,
            lambda tp, error: api.OffsetCommitPartitionResponse(
                partition=tp.partition, error=_error(error)
            ),
        )
        return api.OffsetCommitResponse(
            topics=tuple(api.OffsetCommitTopicResponse(name=n, partitions=ps) for n, ps in topics)
        )

    async def txn_offset_commit(
        self, request: txn_api.TxnOffsetCommitRequest, context: RequestContext
    ) -> txn_api.TxnOffsetCommitResponse:
        offsets = {
            TopicPartition(t.name, p.partition_index): OffsetAndMetadata(
                p.committed_offset,
                p.committed_metadata or "",
                None if p.committed_leader_epoch < 0 else p.committed_leader_epoch,
            )
            for t in request.topics
            for p in t.partitions
        }
        response = await self._txn_offset_commit(
            TxnOffsetCommitRequest(
                group_id=request.group_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                offsets=offsets,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                transactional_id=request.transactional_id,
            )
        )
        topics = _by_topic(
            response.errors,
            lambda tp, error: txn_api.TxnPartitionResult(
                partition_index=tp.partition, error=_error(error)
            ),
        )
        return txn_api.TxnOffsetCommitResponse(
            topics=tuple(txn_api.TxnTopicResult(name=n, partitions=ps) for n, ps in topics)
        )

    async def offset_fetch(
        self, request: api.OffsetFetchRequest, context: RequestContext
    ) -> api.OffsetFetchResponse:
        wanted = None if request.topics is None else _partitions(request.topics)
        response = self._offset_fetch(request.group_id, wanted, request.require_stable)
        topics = _by_topic(
            response.offsets,
            lambda tp, committed: api.OffsetFetchPartitionResponse(
                partition=tp.partition,
                offset=committed.offset,
                leader_epoch=committed.leader_epoch,
                metadata=committed.metadata,
                error=_error(response.errors.get(tp)),
            ),
        )
        return api.OffsetFetchResponse(
            error=_error(response.error),
            topics=tuple(api.OffsetFetchTopicResponse(name=n, partitions=ps) for n, ps in topics),
        )

    async def list_groups(
        self, request: api.ListGroupsRequest, context: RequestContext
    ) -> api.ListGroupsResponse:
        states = request.states_filter
        response = self._list_groups(frozenset(states) if states else None)
        return api.ListGroupsResponse(
            error=_error(response.error),
            groups=tuple(
                api.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, state=g.state)
                for g in response.groups
            ),
        )

    async def describe_groups(
        self, request: api.DescribeGroupsRequest, context: RequestContext
    ) -> api.DescribeGroupsResponse:
        return api.DescribeGroupsResponse(
            groups=tuple(
                api.DescribedGroup(
                    error=_error(g.error),
                    group_id=g.group_id,
                    state=g.state,
                    protocol_type=g.protocol_type,
                    protocol=g.protocol,
                    members=tuple(
                        api.DescribedMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in g.members
                    ),
                )
                for g in self._describe_groups(request.groups)
            )
        )

    async def delete_groups(
        self, request: api.DeleteGroupsRequest, context: RequestContext
    ) -> api.DeleteGroupsResponse:
        response = self._delete_groups(request.groups)
        return api.DeleteGroupsResponse(
            results=tuple(
                api.DeleteGroupsResult(group_id=g, error=_error(e))
                for g, e in response.results.items()
            )
        )

    async def offset_delete(
        self, request: api.OffsetDeleteRequest, context: RequestContext
    ) -> api.OffsetDeleteResponse:
        response = await self._delete_offsets(request.group_id, _partitions(request.topics))
        topics = _by_topic(
            response.errors,
            lambda tp, error: api.OffsetCommitPartitionResponse(
                partition=tp.partition, error=_error(error)
            ),
        )
        return api.OffsetDeleteResponse(
            error=_error(response.error),
            topics=tuple(api.OffsetCommitTopicResponse(name=n, partitions=ps) for n, ps in topics),
        )

    # ------------------------------------------------------------------ time

    async def run(self) -> None:
        """The timer task: tick the core at its next deadline."""
        while not self._closed:
            now = self._clock_ms()
            self._dispatch_quietly(self.core.tick(now_ms=now))
            wait_ms = min(max(self.core.next_deadline_ms() - now, 0), TIMER_IDLE_MS_MAX)
            self._wake.clear()
            if wait_ms > 0:
                try:
                    async with asyncio.timeout(wait_ms / 1000):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    def _dispatch_quietly(self, outputs: tuple[Output, ...]) -> None:
        # Dispatch without re-arming the wake event: the loop recomputes its deadline.
        self._dispatch(outputs)
        self._wake.clear()

    def close(self) -> None:
        """The broker stops: answer every parked request (clients find the new
        coordinator) and stop the loads and appends."""
        if self._closed:
            return
        self._closed = True
        for waiters in self._joins.values():
            for f in waiters:
                if not f.done():
                    f.set_result(JoinGroupResponse(NotCoordinatorError))
        for sync_waiters in self._syncs.values():
            for g in sync_waiters:
                if not g.done():
                    g.set_result(SyncGroupResponse(NotCoordinatorError))
        for c in self._commits.values():
            if not c.done():
                c.set_exception(NotCoordinatorError("the broker is shutting down"))
        self._joins.clear()
        self._syncs.clear()
        self._commits.clear()
        for task in self._tasks:
            task.cancel()


async def _parked(future: asyncio.Future[T]) -> T:
    """Await a delayed answer (a join or sync waiting for the rebalance, a commit for
    its append to __consumer_offsets): Kafka's purgatory wait, the request's remote
    time."""
    parked = time.perf_counter()
    try:
        return await future
    finally:
        add_remote(time.perf_counter() - parked)
