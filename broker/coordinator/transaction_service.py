"""The transaction coordinator on a broker: the I/O shell around the pure
:class:`TransactionCoordinator` (modelled on the group coordinator's shell, service.py).

Theory of operation
-------------------
* **Placement.** A ``transactional.id`` lives in partition ``abs(hash(id)) % N`` of the
  compacted internal topic ``__transaction_state`` (N =
  ``transaction.state.log.num.partitions``, or the topic's own count once it exists);
  the leader of that partition is its coordinator. FindCoordinator with key_type 1 is
  answered from the metadata image by any broker; the first one that finds no topic
  asks the controller to create it (``transaction.state.log.replication.factor``,
  refused while fewer brokers are usable, as in Kafka; ``min.insync.replicas`` =
  ``transaction.state.log.min.isr``, which the config keeps at most the replication;
  ``segment.bytes`` = ``transaction.state.log.segment.bytes``).
* **Ownership.** After every committed metadata change :meth:`on_metadata` compares the
  partitions this broker leads (with their leader epochs) with those the core owns. A
  newly led partition is loaded: its log is replayed into the core, which answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile; the leader epoch is the *coordinator epoch*
  the markers carry. A partition we no longer lead, or now lead at another epoch, is
  unloaded (parked requests get NOT_COORDINATOR, its marker deliveries stop) and, in
  the second case, loaded again.
* **Outputs.** :class:`AppendTransactionRecord`: one record produced to our own leader
  replica with acks=all (``request.timeout.ms``), then ``append_completed``; appends
  start in emission order (each ``produce`` call appends before its first await).
  :class:`TxnReply`: the parked request's future is resolved. :class:`SendTxnMarkers`:
  the :class:`TxnMarkerSender` delivers them to the partition leaders and reports each
  partition written (``markers_written``).
* **Time.** One timer task calls ``tick`` at the core's next deadline (transaction
  timeouts every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, id
  expiry every ``transaction.remove.expired.transaction.cleanup.interval.ms``), at least
  once a second. ``now_ms`` is the wall clock: the core persists timestamps.
* **The next transaction waits for the last one's markers.** An AddPartitionsToTxn or
  AddOffsetsToTxn that the core refuses CONCURRENT_TRANSACTIONS because the id's
  previous transaction is still completing (markers in flight, or a write pending) is
  held here and asked again each time the core's state moves, for at most
  ``COMPLETION_WAIT_MAX_MS``, then answered whatever the core says. Kafka answers at
  once and its client polls (every 20 ms); holding answers when the Complete record is
  durable instead, which measured 12 ms of the ~39 ms a one-record transaction took
  (docs/benchmarks.md). Nothing else changes: the answer is the core's, only later.
* **Producer ids** come from the broker's controller-allocated blocks
  (broker/producer_ids.py). The core allocates synchronously: with no id at hand it is
  refused COORDINATOR_LOAD_IN_PROGRESS (Kafka's RPCProducerIdManager's answer), so
  InitProducerId of a new id first waits (bounded by its timeout) for a block.

Everything runs on the broker's event loop; the core is called only from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

import aiohttp

from raftka.broker.config import BrokerConfig
from raftka.broker.coordinator.coordinator_topic import CoordinatorLocation, CoordinatorTopic
from raftka.broker.coordinator.group import ErrorType
from raftka.broker.coordinator.service import OFFSETS_TOPIC, RequestContext
from raftka.broker.coordinator.transaction_coordinator import (
    TRANSACTION_STATE_TOPIC,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AppendTransactionRecord,
    EndTxnResponse,
    InitProducerIdResponse,
    SendTxnMarkers,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TxnDecision,
    TxnOutput,
    TxnReply,
    TxnResponse,
)
from raftka.broker.coordinator.transaction_records import (
    TransactionLogRecord,
    TransactionRecordError,
)
from raftka.broker.coordinator.transaction_state import TransactionResult, TransactionState
from raftka.broker.coordinator.txn_marker_sender import TxnMarkerSender
from raftka.broker.lifecycle import ControllerChannel
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    KafkaError,
    NotCoordinatorError,
    TransactionalIdNotFoundError,
    UnknownServerError,
)
from raftka.common.messages import broker as broker_api
from raftka.common.messages import coordinator as coordinator_api
from raftka.common.messages import transactions as api
from raftka.common.messages.broker import error_object
from raftka.common.structs import TopicPartition
from raftka.common.time import wall_clock_ms
from raftka.server_common.metrics import add_remote

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinatorService"]

log = logging.getLogger(__name__)

#: How long the timer sleeps at most when the core names no earlier deadline.
TIMER_IDLE_MS_MAX: Final = 1_000
#: How long an Add request is held while the id's previous transaction completes
#: (module docstring); past it the client's own retry takes over.
COMPLETION_WAIT_MAX_MS: Final = 1_000

R = TypeVar("R", bound=TxnResponse)


def _error(error: ErrorType) -> broker_api.ErrorObject | None:
    return None if error is None else error_object(error())


def _partitions(topics: Iterable[api.TxnTopic]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(t.name, p) for t in topics for p in t.partitions)


def _txn_topics(partitions: Iterable[TopicPartition]) -> tuple[api.TxnTopic, ...]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tuple(api.TxnTopic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items())


def _topic_results(
    errors: Iterable[tuple[TopicPartition, ErrorType]],
) -> tuple[api.TxnTopicResult, ...]:
    by_topic: dict[str, list[api.TxnPartitionResult]] = {}
    for tp, error in sorted(errors, key=lambda e: e[0]):
        by_topic.setdefault(tp.topic, []).append(
            api.TxnPartitionResult(partition_index=tp.partition, error=_error(error))
        )
    return tuple(api.TxnTopicResult(name=n, partitions=tuple(ps)) for n, ps in by_topic.items())


class TransactionCoordinatorService:
    """See the module docstring. Not thread-safe: the broker's event loop only."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        replicas: ReplicaManager,
        channel: Callable[[], ControllerChannel | None],
        producer_ids: Callable[[], ProducerIdManager | None],
        session: Callable[[], aiohttp.ClientSession | None],
        address_of: Callable[[int], str | None],
        clock_ms: Callable[[], int] = wall_clock_ms,
        marker_backoff_ms: int = 100,
        marker_backoff_max_ms: int = 5_000,
    ) -> None:
        self._config = config
        self._replicas = replicas
        self._producer_ids = producer_ids
        self._clock_ms = clock_ms
        self._tasks: set[asyncio.Task[None]] = set()
        self.topic = CoordinatorTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
            replication_factor=config.transaction_state_log_replication_factor,
            replication_setting="transaction.state.log.replication.factor",
            min_isr=config.transaction_state_log_min_isr,
            # Compacted: the latest record of each id is its state, so a load after a
            # failover reads about one record per live id (Kafka's topic configs).
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(config.transaction_state_log_segment_bytes),
            },
            replicas=replicas,
            channel=channel,
            request_timeout_ms=config.request_timeout_ms,
            spawn=self._spawn,
        )
        self._core_partitions = self.topic.num_partitions()
        self.core = self._new_core()
        self.markers = TxnMarkerSender(
            image=lambda: replicas.image,
            address_of=address_of,
            session=session,
            on_written=self._markers_written,
            request_timeout_ms=config.request_timeout_ms,
            backoff_ms=marker_backoff_ms,
            backoff_max_ms=marker_backoff_max_ms,
            http=config.http,
        )
        #: __transaction_state partitions the core owns -> the leader epoch loaded.
        self._owned: dict[int, int] = {}
        self._loading: set[int] = set()
        #: Led partitions beyond the count the core places ids in (never loaded).
        self._refused: set[int] = set()
        #: Requests parked on an append, by append id.
        self._waiting: dict[int, asyncio.Future[TxnResponse | type[KafkaError]]] = {}
        self._wake = asyncio.Event()
        # Set (and replaced) each time outputs are dispatched: the core's state may
        # have moved, so a request held on CONCURRENT_TRANSACTIONS asks again.
        self._changed = asyncio.Event()
        self._closed = False

    def _new_core(self) -> TransactionCoordinator:
        """A core placing ids by the topics' partition counts as they are now."""
        offsets = self._replicas.image.topics.topic_by_name(OFFSETS_TOPIC)
        offsets_partitions = (
            len(offsets.partitions)
            if offsets is not None and offsets.partitions
            else self._config.offsets_topic_num_partitions
        )
        c = self._config
        self._core_partitions = self.topic.num_partitions()
        return TransactionCoordinator(
            config=TransactionCoordinatorConfig(
                transaction_max_timeout_ms=c.transaction_max_timeout_ms,
                transactional_id_expiration_ms=c.transactional_id_expiration_ms,
                transaction_abort_timed_out_transaction_cleanup_interval_ms=(
                    c.transaction_abort_timed_out_transaction_cleanup_interval_ms
                ),
                transaction_remove_expired_transaction_cleanup_interval_ms=(
                    c.transaction_remove_expired_transaction_cleanup_interval_ms
                ),
                transaction_state_log_num_partitions=self._core_partitions,
                offsets_topic_num_partitions=offsets_partitions,
                transaction_version=c.transaction_version,
            ),
            allocate_producer_id=self._allocate_producer_id,
        )

    def _allocate_producer_id(self) -> int:
        ids = self._producer_ids()
        producer_id = None if ids is None else ids.producer_id_now()
        if producer_id is None:
            raise CoordinatorLoadInProgressError("no producer id block at hand yet")
        return producer_id

    # ------------------------------------------------------------------ ownership

    def on_metadata(self) -> None:
        """Committed metadata was applied: load what we now lead, unload what we lost."""
        if self._closed:
            return
        led = self.topic.led_partitions()
        if not self._owned and led and self.topic.num_partitions() != self._core_partitions:
            # Nothing loaded yet and the topic's count differs from the configured one
            # (created with another setting): place ids by the topic's.
            self.core = self._new_core()
        for partition, epoch in sorted(self._owned.items()):
            if led.get(partition) != epoch:
                self._unload(partition)
        for partition, epoch in sorted(led.items()):
            if partition in self._owned:
                continue
            if partition >= self._core_partitions:
                if partition in self._refused:
                    continue  # said once
                self._refused.add(partition)
                log.error(
                    "__transaction_state has more partitions than this coordinator places "
                    "ids in; not loading",
                    extra={"fields": {"partition": partition}},
                )
                continue
            self._owned[partition] = epoch
            self._loading.add(partition)
            self.core.begin_loading(partition=partition, coordinator_epoch=epoch)
            self._spawn(self._load(partition, epoch))

    def _unload(self, partition: int) -> None:
        del self._owned[partition]
        self._loading.discard(partition)
        log.info("unloading transactions", extra={"fields": {"partition": partition}})
        self.markers.cancel(lambda tid: self.core.partition_for(tid) == partition)
        self._dispatch(self.core.unload(partition=partition))

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.monotonic()
        records = 0

        def owned() -> bool:
            return self._owned.get(partition) == epoch and partition in self._loading

        async for step in self.topic.read_partition(partition, owned):
            for key, value in step:
                try:
                    self.core.replay(
                        partition=partition, records=(TransactionLogRecord(key, value),)
                    )
                except TransactionRecordError as e:
                    # A record we cannot read must not take the whole partition down.
                    log.error(
                        "skipping an unreadable __transaction_state record",
                        extra={"fields": {"partition": partition, "error": str(e)}},
                    )
            records += len(step)
        if not owned():
            return
        self._loading.discard(partition)
        self._dispatch(self.core.complete_loading(partition=partition, now_ms=self._clock_ms()))
        log.info(
            "loaded transactions",
            extra={
                "fields": {
                    "partition": partition,
                    "coordinator_epoch": epoch,
                    "records": records,
                    "elapsed_ms": int((time.monotonic() - started) * 1000),
                }
            },
        )

    # ------------------------------------------------------------------ outputs

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A load, append or topic creation that failed unexpectedly: say so (a load
            # that died leaves its partition loading until the leadership changes).
            log.error(
                "a transaction coordinator task failed",
                extra={"fields": {"error": repr(task.exception())}},
            )

    def _dispatch(self, outputs: Iterable[TxnOutput]) -> None:
        for out in outputs:
            if isinstance(out, TxnReply):
                waiter = self._waiting.pop(out.append_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(out.response)
            elif isinstance(out, SendTxnMarkers):
                if not self._closed:
                    self.markers.send(out)
            else:
                assert isinstance(out, AppendTransactionRecord)
                self._spawn(self._append(out))
        self._wake.set()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _append(self, out: AppendTransactionRecord) -> None:
        """Append ``out`` (acks=all) and tell the core."""
        record = out.record
        error: type[KafkaError] | None
        try:
            error = await self.topic.append(
                out.partition,
                [(record.key, record.value)],
                timeout_ms=self._config.request_timeout_ms,
            )
        except Exception as e:  # a bug or an OS error below: the core must still hear
            log.exception("a __transaction_state append raised", exc_info=e)
            error = UnknownServerError  # (or the id would wait on this write forever)
        if error is not None:
            log.warning(
                "a __transaction_state append failed",
                extra={
                    "fields": {
                        "transactional_id": out.transactional_id,
                        "partition": out.partition,
                        "error": error.name,
                    }
                },
            )
        if self._closed:
            return
        self._dispatch(
            self.core.append_completed(
                append_id=out.append_id, error=error, now_ms=self._clock_ms()
            )
        )

    def _markers_written(
        self, markers: SendTxnMarkers, partitions: frozenset[TopicPartition]
    ) -> None:
        if self._closed:
            return
        self._dispatch(
            self.core.markers_written(
                transactional_id=markers.transactional_id,
                producer_id=markers.producer_id,
                producer_epoch=markers.producer_epoch,
                partitions=partitions,
                now_ms=self._clock_ms(),
            )
        )

    async def _answer(
        self, decision: TxnDecision[R], expected: type[R], on_error: Callable[[type[KafkaError]], R]
    ) -> R:
        """The decision's answer: now, or once the append it is parked on completes."""
        if decision.response is not None:
            self._dispatch(decision.outputs)
            return decision.response
        (append,) = [o for o in decision.outputs if isinstance(o, AppendTransactionRecord)]
        future: asyncio.Future[TxnResponse | type[KafkaError]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[append.append_id] = future
        self._dispatch(decision.outputs)
        parked = time.perf_counter()
        try:
            answer = await future
        finally:
            # Kafka's purgatory wait: the request's remote time.
            add_remote(time.perf_counter() - parked)
        if isinstance(answer, expected):
            return answer
        assert isinstance(answer, type) and issubclass(answer, KafkaError), answer
        return on_error(answer)

    async def _answer_when_settled(
        self,
        transactional_id: str,
        decide: Callable[[], TxnDecision[R]],
        expected: type[R],
        on_error: Callable[[type[KafkaError]], R],
        concurrent: Callable[[R], bool],
    ) -> R:
        """``decide``'s answer; while it is only CONCURRENT_TRANSACTIONS because the id
        is completing its previous transaction, ask again when the state moves (module
        docstring), for at most COMPLETION_WAIT_MAX_MS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COMPLETION_WAIT_MAX_MS / 1000
        while True:
            decision = decide()
            response = decision.response
            remaining = deadline - loop.time()
            if (
                response is None
                or decision.outputs
                or not concurrent(response)
                or not self._completing(transactional_id)
                or remaining <= 0
            ):
                return await self._answer(decision, expected, on_error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
            self._check_open()

    def _completing(self, transactional_id: str) -> bool:
        """The id has a write in flight or a transaction whose markers are out: either
        settles without the client doing anything."""
        metadata = self.core.transaction(transactional_id)
        return self.core.has_pending_write(transactional_id) or (
            metadata is not None and metadata.state.is_prepare
        )

    def _check_open(self) -> None:
        if self._closed:
            raise NotCoordinatorError("the broker is shutting down")

    # ------------------------------------------------------------------ the API
    # One method per route (transaction_routes.py): a typed request message in, a typed
    # answer out.

    def find_coordinator(self, transactional_id: str) -> coordinator_api.FindCoordinatorResponse:
        """FindCoordinator with key_type 1 (transaction)."""
        found: CoordinatorLocation = self.topic.locate(transactional_id, "transactional id")
        return coordinator_api.FindCoordinatorResponse(
            error=error_object(found.error), node_id=found.node_id, host=found.host, port=found.port
        )

    async def init_producer_id(
        self, request: broker_api.InitProducerIdRequest
    ) -> broker_api.InitProducerIdResponse:
        self._check_open()
        tid = request.transactional_id
        assert tid is not None
        ids = self._producer_ids()
        (known,) = self.core.describe_transactions((tid,))
        if ids is not None and known.error is TransactionalIdNotFoundError:
            # A new id of ours needs a producer id now (the core allocates synchronously).
            # On timeout the core answers COORDINATOR_LOAD_IN_PROGRESS: the client retries.
            with contextlib.suppress(TimeoutError):
                await ids.wait_for_block(
                    timeout_ms=min(request.timeout_ms, self._config.request_timeout_ms)
                )
        decision = self.core.init_producer_id(
            transactional_id=tid,
            transaction_timeout_ms=request.transaction_timeout_ms,
            now_ms=self._clock_ms(),
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
        )
        response = await self._answer(decision, InitProducerIdResponse, InitProducerIdResponse)
        return broker_api.InitProducerIdResponse(
            error=_error(response.error),
            producer_id=response.producer_id,
            producer_epoch=response.producer_epoch,
        )

    async def add_partitions_to_txn(
        self, request: api.AddPartitionsToTxnRequest, context: RequestContext
    ) -> api.AddPartitionsToTxnResponse:
        self._check_open()
        wanted = _partitions(request.topics)
        if request.verify_only:
            response = self.core.verify_partitions(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                partitions=wanted,
            )
        else:
            response = await self._answer_when_settled(
                request.transactional_id,
                lambda: self.core.add_partitions_to_txn(
                    transactional_id=request.transactional_id,
                    producer_id=request.producer_id,
                    producer_epoch=request.producer_epoch,
                    partitions=wanted,
                    now_ms=self._clock_ms(),
                ),
                AddPartitionsToTxnResponse,
                lambda e: AddPartitionsToTxnResponse(dict.fromkeys(wanted, e)),
                lambda r: ConcurrentTransactionsError in r.errors.values(),
            )
        return api.AddPartitionsToTxnResponse(results=_topic_results(response.errors.items()))

    async def add_offsets_to_txn(
        self, request: api.AddOffsetsToTxnRequest, context: RequestContext
    ) -> api.AddOffsetsToTxnResponse:
        self._check_open()
        response = await self._answer_when_settled(
            request.transactional_id,
            lambda: self.core.add_offsets_to_txn(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                group_id=request.group_id,
                now_ms=self._clock_ms(),
            ),
            AddOffsetsToTxnResponse,
            AddOffsetsToTxnResponse,
            lambda r: r.error is ConcurrentTransactionsError,
        )
        return api.AddOffsetsToTxnResponse(error=_error(response.error))

    async def end_txn(
        self, request: api.EndTxnRequest, context: RequestContext
    ) -> api.EndTxnResponse:
        self._check_open()
        decision = self.core.end_txn(
            transactional_id=request.transactional_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            result=TransactionResult.COMMIT if request.committed else TransactionResult.ABORT,
            now_ms=self._clock_ms(),
            transaction_version=request.transaction_version,
        )
        response = await self._answer(decision, EndTxnResponse, EndTxnResponse)
        return api.EndTxnResponse(
            error=_error(response.error),
            producer_id=response.producer_id,
            producer_epoch=response.producer_epoch,
        )

    async def describe_transactions(
        self, request: api.DescribeTransactionsRequest, context: RequestContext
    ) -> api.DescribeTransactionsResponse:
        states = []
        for d in self.core.describe_transactions(request.transactional_ids):
            m = d.metadata
            if m is None:
                states.append(
                    api.DescribedTransactionState(
                        error=_error(d.error), transactional_id=d.transactional_id
                    )
                )
                continue
            states.append(
                api.DescribedTransactionState(
                    transactional_id=d.transactional_id,
                    transaction_state=m.state.value,
                    transaction_timeout_ms=m.transaction_timeout_ms,
                    transaction_start_time_ms=m.transaction_start_time_ms,
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    topics=_txn_topics(m.partitions),
                )
            )
        return api.DescribeTransactionsResponse(transaction_states=tuple(states))

    async def list_transactions(
        self, request: api.ListTransactionsRequest, context: RequestContext
    ) -> api.ListTransactionsResponse:
        """Kafka's TransactionStateManager.listTransactionStates: the ids this broker
        coordinates, filtered; COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
        if self._loading:
            return api.ListTransactionsResponse(
                error=error_object(CoordinatorLoadInProgressError("transactions are loading"))
            )
        known = {
            s.value: s for s in TransactionState if s is not TransactionState.PREPARE_EPOCH_FENCE
        }
        unknown = tuple(f for f in request.state_filters if f not in known)
        states = {known[f] for f in request.state_filters if f in known}
        producers = set(request.producer_id_filters)
        now = self._clock_ms()
        listed = []
        for tid in sorted(self.core.transactional_ids()):
            m = self.core.transaction(tid)
            if m is None or m.state is TransactionState.DEAD:
                continue
            if producers and m.producer_id not in producers:
                continue
            if request.state_filters and m.state not in states:
                continue
            if request.duration_filter_ms >= 0 and (
                m.transaction_start_time_ms < 0
                or now - m.transaction_start_time_ms <= request.duration_filter_ms
            ):
                continue
            listed.append(
                api.ListedTransaction(
                    transactional_id=tid, producer_id=m.producer_id, transaction_state=m.state.value
                )
            )
        return api.ListTransactionsResponse(
            unknown_state_filters=unknown, transaction_states=tuple(listed)
        )

    # ------------------------------------------------------------------ time

    async def run(self) -> None:
        """The timer task: tick the core at its next deadline."""
        while not self._closed:
            now = self._clock_ms()
            self._dispatch(self.core.tick(now_ms=now))
            # Dispatching sets the wake event; this loop recomputes its deadline anyway.
            self._wake.clear()
            wait_ms = min(max(self.core.next_deadline_ms() - now, 0), TIMER_IDLE_MS_MAX)
            if wait_ms > 0:
                try:
                    async with asyncio.timeout(wait_ms / 1000):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    async def close(self) -> None:
        """The broker stops: answer every parked request NOT_COORDINATOR (clients find
        the new coordinator) and stop the loads, appends and marker deliveries."""
        if self._closed:
            return
        self._closed = True
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result(NotCoordinatorError)
        self._waiting.clear()
        for task in self._tasks:
            task.cancel()
        await self.markers.close()
