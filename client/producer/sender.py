"""The producer's sender: one asyncio task that drains ready batches to their leaders.

Theory of operation, one turn of :meth:`Sender.run`:

1. Fail batches that waited ``delivery_timeout_ms`` (KafkaTimeoutError).
2. Ask the accumulator which partitions are ready, skipping *muted* ones (a partition
   with a batch in flight). Muting keeps records in order across retries: at most one
   batch per partition is in flight, so a retried batch can never land behind a later
   one (Kafka gets the same order from sequence numbers with up to 5 in flight; here
   the per-partition limit is 1 and ``max_in_flight_requests_per_connection`` bounds
   the requests per broker). With idempotence, a batch gets its producer id, epoch and
   sequence on its first drain (:mod:`.idempotence`), and nothing is drained before
   InitProducerId has answered or while a reset waits.
3. Group the ready partitions by leader broker (the metadata cache, or the
   ``current_leader`` a NOT_LEADER_OR_FOLLOWER answer named); partitions without a
   known leader trigger a metadata refresh and wait.
4. Per broker with fewer than ``max_in_flight_requests_per_connection`` requests in
   flight, drain the ready partitions up to ``max_request_size`` into one
   ``POST /v1/produce`` frame, sent as its own task: per partition its first batch,
   and, if that batch is on its first attempt, up to ``BATCHES_PER_PARTITION_MAX``
   full batches behind it (appended together, in order). A retried batch always goes
   alone, so a broker sees a retry exactly as it first saw the batch.
5. Sleep until woken (a new batch, an answer, a flush, a refresh) or until the next
   partition's linger or backoff ends.

An answer completes each record's future with its offset (``base_offset`` + index).
A retriable error puts the batch back with backoff while ``retries`` and
``delivery_timeout_ms`` allow; NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION
refresh the metadata. A network error or a client-side timeout is retried the same way
(the outcome is unknown: without idempotence a retry may duplicate, as in Kafka; with
it the broker recognises the retry by its sequence and answers the original offsets);
it also marks the broker suspect (asked last for metadata). A request its leader sits
on for LEADER_CHECK_MS makes the sender look up the leader (every LEADER_CHECK_MS
while it waits) and give up on the request once another broker leads: the batches
are retried there under their sequences (``await_unless_leader_moved``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from raftka.client._transport import (
    LEADER_CHECK_MS,
    MetadataCache,
    Transport,
    await_unless_leader_moved,
    error_from_message,
    monotonic_ms,
)
from raftka.client.config import ProducerConfig
from raftka.client.producer._future import FutureGroup
from raftka.client.producer.accumulator import ProducerBatch, RecordAccumulator
from raftka.client.producer.idempotence import IdempotenceState
from raftka.client.producer.transaction_manager import TransactionManager
from raftka.client.producer.transactions import TransactionState, TxnState
from raftka.client.structs import RecordMetadata, TopicPartition
from raftka.common.errors import (
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from raftka.common.messages import broker as api
from raftka.common.record import build_batch
from raftka.common.time import wait_event

__all__ = ["CompletableFuture", "DeliveryCallback", "Handle", "PendingRecord", "Sender"]

log = logging.getLogger(__name__)

#: Margin on top of the broker-side timeout_ms before the client gives up on an
#: answer: the broker answers REQUEST_TIMED_OUT itself at timeout_ms.
CLIENT_TIMEOUT_MARGIN_MS: Final = 2_000
#: Batches of one partition in one request. With one request in flight per partition,
#: this is what keeps the pipe full (Kafka gets it from up to 5 requests in flight);
#: 5 is also how many batches per producer a broker remembers, so a retried request
#: could still be recognised batch by batch.
BATCHES_PER_PARTITION_MAX: Final = 5
#: Errors after which a numbered batch cannot be retried under the same sequence: the
#: batch fails and the producer resets its sequences (see :mod:`.idempotence`).
_SEQUENCE_ERRORS: Final = (
    OutOfOrderSequenceNumberError,
    InvalidProducerEpochError,
    UnknownProducerIdError,
)
#: A transactional batch's errors that end the producer (Kafka's Sender and
#: TransactionManager.handleFailedBatch); any other failed batch is abortable.
_FATAL_BATCH_ERRORS: Final = (
    InvalidProducerEpochError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    UnsupportedVersionError,
)


DeliveryCallback = Callable[[RecordMetadata | None, BaseException | None], None]


class CompletableFuture(Protocol):
    """What the sender needs of a record's future: an ``asyncio.Future`` (the async
    face, on the sender's own loop). The blocking face's futures are completed per
    batch instead (see ``Sender(future_group=...)``)."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> RecordMetadata: ...
    def exception(self) -> BaseException | None: ...
    def set_result(self, result: RecordMetadata, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass(slots=True)
class PendingRecord:
    """What the sender needs to complete one record's future and run its callback.

    The callback is called directly by the sender (not as a done-callback of the
    future): a done-callback costs an ``add_done_callback`` per record and a
    ``call_soon`` handle per completion, a large share of the producer's CPU.

    The blocking face's records have no ``future`` here (their futures read the
    batch's result) and no PendingRecord at all without a callback: a batch's handle
    is then None."""

    future: CompletableFuture | None
    timestamp_ms: int
    key_size: int
    value_size: int
    callback: DeliveryCallback | None = None


Handle = PendingRecord | None
Batch = ProducerBatch[Handle]


class Sender:
    def __init__(
        self,
        *,
        config: ProducerConfig,
        accumulator: RecordAccumulator[Handle],
        metadata: MetadataCache,
        transport: Transport,
        on_release: Callable[[], None],
        future_group: FutureGroup | None = None,
        transaction_state: TransactionState | None = None,
    ) -> None:
        """``future_group``: the blocking face's, whose futures read their batch's
        result (:mod:`._future`): a batch is then completed with one call, where
        the async face's futures are completed one by one (``PendingRecord.future``).
        ``transaction_state``: the producer's, when it has a ``transactional_id``."""
        self._config = config
        self._future_group = future_group
        self._acc = accumulator
        self._metadata = metadata
        self._transport = transport
        self._on_release = on_release
        self._wake = asyncio.Event()
        self._muted: set[TopicPartition] = set()
        self._in_flight: dict[int, int] = {}
        self._requests: set[asyncio.Task[None]] = set()
        #: Leaders named by NOT_LEADER_OR_FOLLOWER answers, until the next refresh.
        self._leader_hints: dict[TopicPartition, tuple[int, str]] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._aborted = False
        #: flush() waiters per unreleased batch: (future, batches still unreleased).
        self._flush_waiters: dict[Batch, list[_FlushWaiter]] = {}
        self._idempotence = IdempotenceState() if config.enable_idempotence else None
        self._init_task: asyncio.Task[None] | None = None
        #: The transactional producer's requests (None without a transactional_id):
        #: it owns the producer id and epoch then, not the sender's InitProducerId.
        self.transactions: TransactionManager | None = None
        if transaction_state is not None:
            assert self._idempotence is not None, "transactions imply idempotence"
            self.transactions = TransactionManager(
                config=config,
                transport=transport,
                metadata=metadata,
                idempotence=self._idempotence,
                state=transaction_state,
                wake=self.wake,
            )

    def wake(self) -> None:
        self._wake.set()

    def flush_waiter(self) -> asyncio.Future[None] | None:
        """A future done once every batch unreleased now (queued or in flight) is
        acknowledged or failed, so every record sent before has its outcome and its
        callback has run; None if there is none. One future per flush, not one per
        record."""
        batches = self._acc.unreleased_batches()
        if not batches:
            return None
        waiter = _FlushWaiter(asyncio.get_running_loop().create_future(), len(batches))
        for batch in batches:
            self._flush_waiters.setdefault(batch, []).append(waiter)
        return waiter.future

    def stop(self) -> None:
        """Finish what is queued and in flight, then return from run()."""
        self._stopping = True
        self._acc.begin_close()
        self._wake.set()

    @property
    def idle(self) -> bool:
        return not self._requests and not self._acc.has_queued()

    async def run(self) -> None:
        try:
            while not (self._stopping and self.idle):
                self._wake.clear()
                timeout_ms = self._turn(monotonic_ms())
                if self._stopping and self.idle:
                    break
                await wait_event(self._wake, None if timeout_ms is None else timeout_ms / 1000)
        finally:
            for task in list(self._requests):
                task.cancel()
            if self._refresh_task is not None:
                self._refresh_task.cancel()
            if self._init_task is not None:
                self._init_task.cancel()
            if self.transactions is not None:
                self.transactions.cancel()

    # ------------------------------------------------------------------ one turn

    def _turn(self, now_ms: int) -> int | None:
        for batch in self._acc.expire(now_ms):
            self._fail(
                batch,
                KafkaTimeoutError(
                    f"{len(batch.records)} record(s) for {batch.tp} expired: "
                    f"{self._config.delivery_timeout_ms} ms passed since batch creation"
                ),
            )
        idem = self._idempotence
        txn = self.transactions
        if txn is not None:
            self._advance_transaction(txn)
        elif idem is not None:
            self._advance_identity(idem)
        check = self._acc.ready(now_ms, self._muted)
        by_broker: dict[tuple[int, str], list[TopicPartition]] = {}
        unknown_leader = False
        for tp in check.ready:
            if txn is not None and not txn.state.is_added(tp):
                continue  # waits for AddPartitionsToTxn (which wakes the sender)
            leader = self._leader_hints.get(tp) or self._metadata.view.leader_address(tp)
            if leader is None:
                unknown_leader = True
                continue
            by_broker.setdefault(leader, []).append(tp)
        if unknown_leader or self._metadata.needs_refresh(now_ms):
            self._start_refresh()
        for (broker_id, address), tps in by_broker.items():
            if (
                self._in_flight.get(broker_id, 0)
                >= self._config.max_in_flight_requests_per_connection
            ):
                continue
            groups: list[list[Batch]] = []
            request_bytes = 0
            for tp in tps:
                queue_head = self._acc.head_size(tp)
                if groups and request_bytes + queue_head > self._config.max_request_size:
                    break
                if idem is not None and not idem.can_number():
                    head = self._acc.head(tp)
                    if head is None or head.base_sequence < 0:
                        continue  # an unnumbered batch waits for the producer id
                drained = self._acc.drain(tp)
                if drained is None:
                    continue
                group = [drained]
                request_bytes += drained.size_bytes
                if drained.attempts == 1:
                    while len(group) < BATCHES_PER_PARTITION_MAX and (
                        idem is None or idem.can_number()
                    ):
                        more = self._acc.drain_more(
                            tp, self._config.max_request_size - request_bytes
                        )
                        if more is None:
                            break
                        group.append(more)
                        request_bytes += more.size_bytes
                if idem is not None:
                    for batch in group:
                        if batch.base_sequence < 0:
                            batch.producer_id = idem.producer_id
                            batch.producer_epoch = idem.producer_epoch
                            batch.base_sequence = idem.number(tp, len(batch.records))
                groups.append(group)
                self._muted.add(tp)
            if groups:
                self._in_flight[broker_id] = self._in_flight.get(broker_id, 0) + 1
                task = asyncio.create_task(self._send(broker_id, address, groups))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
        # Never sleep past next_ready_ms: appends from other threads skip waking the
        # sender when it will look by then anyway (RecordAccumulator.append).
        next_ms = None if check.next_ready_ms is None else max(check.next_ready_ms - now_ms, 0)
        if unknown_leader:
            # Look again after a backoff even if the refresh does not wake us.
            backoff_ms = self._config.retry_backoff_ms
            return backoff_ms if next_ms is None else min(backoff_ms, next_ms)
        return next_ms

    def _advance_transaction(self, txn: TransactionManager) -> None:
        """Add the partitions sent to since the last turn to the transaction; once it
        must be aborted, fail every batch not yet sent (Kafka's
        abortUndrainedBatches): they must not reach a partition."""
        state = txn.state.state
        if state is TxnState.ABORTING_TRANSACTION:
            error: KafkaError | None = TransactionAbortedError(
                f"transactional_id {txn.transactional_id!r}: the transaction was aborted "
                "before the record was sent"
            )
        elif state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            error = txn.state.last_error
        else:
            txn.maybe_add_partitions()
            return
        assert error is not None
        for batch in self._acc.abort_all():
            self._fail(batch, error)

    def _advance_identity(self, idem: IdempotenceState) -> None:
        """Reset when it is safe, and fetch a producer id when there is none."""
        if idem.ready_to_reset():
            reason = idem.reset_reason
            if idem.bump_epoch():
                log.info(
                    "idempotent producer %d: epoch bumped to %d after %s",
                    idem.producer_id,
                    idem.producer_epoch,
                    reason,
                )
            else:
                idem.forget()
        if not idem.has_identity and (self._init_task is None or self._init_task.done()):
            self._init_task = asyncio.create_task(self._init_producer_id(idem))

    async def _init_producer_id(self, idem: IdempotenceState) -> None:
        """InitProducerId from any broker, retried with backoff until it answers (the
        batches waiting for it expire on their own delivery timeout)."""
        timeout_ms = self._config.request_timeout_ms
        while not self._aborted:
            for address in self._metadata.broker_addresses():
                try:
                    answer = await self._transport.request_message(
                        address,
                        "POST",
                        "/v1/init-producer-id",
                        api.InitProducerIdResponse,
                        message=api.InitProducerIdRequest(timeout_ms=timeout_ms),
                        timeout_ms=timeout_ms + CLIENT_TIMEOUT_MARGIN_MS,
                    )
                except KafkaError as e:
                    log.debug("InitProducerId at %s failed: %s", address, e)
                    continue
                if answer.error is not None:
                    log.debug("InitProducerId at %s failed: %s", address, answer.error)
                    continue
                idem.set_identity(answer.producer_id, answer.producer_epoch)
                log.debug("idempotent producer id %d", idem.producer_id)
                self._wake.set()
                return
            self._wake.set()  # let the sender expire batches that waited too long
            await asyncio.sleep(self._config.retry_backoff_ms / 1000)  # backoff

    def _start_refresh(self) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            await self._metadata.refresh_with_backoff()
            self._leader_hints.clear()
            self._wake.set()

        self._refresh_task = asyncio.create_task(refresh())

    # ------------------------------------------------------------------ a request

    async def _send(self, broker_id: int, address: str, groups: list[list[Batch]]) -> None:
        try:
            await self._send_unguarded(broker_id, address, groups)
        except asyncio.CancelledError:
            for group in groups:
                for batch in group:
                    self._fail(batch, KafkaError("the producer closed before an answer"))
            raise
        except Exception as e:  # a bug must not leave futures pending forever
            log.exception("produce request failed")
            for group in groups:
                for batch in group:
                    if not self._done(batch):
                        self._fail(batch, UnknownServerError(f"{type(e).__name__}: {e}"))
        finally:
            self._in_flight[broker_id] -= 1
            for group in groups:
                self._muted.discard(group[0].tp)
            # Leave _requests now, not in a done-callback a loop turn later: run()
            # must see the sender idle once this wake-up reaches it (close would
            # otherwise wait for a wake-up that never comes).
            self._requests.discard(asyncio.current_task())
            self._wake.set()

    async def _send_unguarded(
        self, broker_id: int, address: str, groups: list[list[Batch]]
    ) -> None:
        config = self._config
        transactional = self.transactions is not None
        payloads = [
            b"".join(
                build_batch(
                    batch.records,
                    compression=config.compression,
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence,
                    is_transactional=transactional,
                )
                for batch in group
            )
            for group in groups
        ]
        header = api.ProduceRequest(
            acks=int(config.acks),  # normalised to -1, 0 or 1 by the config
            timeout_ms=config.request_timeout_ms,
            transactional_id=config.transactional_id,
            partitions=tuple(
                api.ProducePartition(
                    topic=g[0].tp.topic, partition=g[0].tp.partition, records_bytes=len(payload)
                )
                for g, payload in zip(groups, payloads, strict=True)
            ),
        )
        frame = api.encode_frame(header, payloads)
        try:
            # A leader that sits on the request (cut off, paused) is left as soon as the
            # metadata names its successor, not after request_timeout_ms.
            answer = await await_unless_leader_moved(
                self._transport.request_frame(
                    address,
                    "/v1/produce",
                    api.ProduceResponse,
                    frame_body=frame,
                    timeout_ms=config.request_timeout_ms + CLIENT_TIMEOUT_MARGIN_MS,
                ),
                metadata=self._metadata,
                broker_id=broker_id,
                address=address,
                partitions=[g[0].tp for g in groups],
                check_after_ms=LEADER_CHECK_MS,
            )
        except KafkaError as e:
            self._metadata.invalidate()
            for group in groups:
                self._retry_or_fail_group(group, e)
            return
        if answer is None:  # acks=0: the broker says nothing
            for group in groups:
                for batch in group:
                    self._complete(batch, -1, -1)
            return
        responses = {(r.topic, r.partition): r for r in answer[0].responses}
        for group in groups:
            tp = group[0].tp
            r = responses.get((tp.topic, tp.partition))
            if r is None:
                self._retry_or_fail_group(group, UnknownServerError(f"no answer for {tp}"))
            elif r.error is None:
                # The group was appended as one run of offsets, in order.
                base_offset = r.base_offset
                append_time = r.log_append_time_ms
                for batch in group:
                    self._complete(batch, base_offset, append_time)
                    if base_offset >= 0:
                        base_offset += len(batch.records)
            else:
                error = error_from_message(r.error)
                if isinstance(error, NotLeaderOrFollowerError | UnknownTopicOrPartitionError):
                    self._metadata.invalidate()
                    hint = r.current_leader
                    if hint is not None and hint.address:
                        self._leader_hints[tp] = (hint.leader_id, hint.address)
                    else:
                        self._leader_hints.pop(tp, None)
                self._retry_or_fail_group(group, error)

    def _retry_or_fail_group(self, group: list[Batch], error: KafkaError) -> None:
        """Each batch of a partition's group, last first: retried batches go back to the
        head of the queue one by one, so they must be put back in reverse to keep their
        order. Failures are then reported in record order."""
        failed: list[Batch] = []
        for batch in reversed(group):
            if not self._retry(batch, error):
                failed.append(batch)
        for batch in reversed(failed):
            self._fail(batch, error)

    # ------------------------------------------------------------------ outcomes

    def _retry(self, batch: Batch, error: KafkaError) -> bool:
        """Put the batch back for another attempt if the error and the limits allow;
        False if it must fail instead."""
        now = monotonic_ms()
        if isinstance(error, _SEQUENCE_ERRORS):
            # Retrying under the same sequence cannot succeed, and under a new one
            # could write the batch twice: fail it (see the idempotence module).
            return False
        if (
            error.retriable
            and batch.attempts <= self._config.retries
            and not self._acc.delivery_expired(batch, now)
            and not self._aborted
        ):
            log.debug("retrying %s after %s (attempt %d)", batch.tp, error, batch.attempts)
            self._acc.reenqueue(batch, now)
            return True
        return False

    def abort(self) -> None:
        """Fail everything queued (close with a timeout that ran out)."""
        self._aborted = True
        for batch in self._acc.abort_all():
            self._fail(batch, KafkaError("the producer closed before the record was sent"))
        self._wake.set()

    def _done(self, batch: Batch) -> bool:
        """Whether every record of the batch has its outcome already."""
        if self._future_group is not None:
            return batch.result.done
        return all(
            p is not None and p.future is not None and p.future.done() for p in batch.handles
        )

    def _complete(self, batch: Batch, base_offset: int, log_append_time_ms: int) -> None:
        if batch.base_sequence >= 0 and self._idempotence is not None:
            self._idempotence.resolved()
        self._settle(batch, base_offset, log_append_time_ms, None)

    def _fail(self, batch: Batch, error: KafkaError) -> None:
        if batch.base_sequence >= 0 and self._idempotence is not None:
            self._idempotence.resolved()
            self._idempotence.request_reset(f"{error.name} for {batch.tp}")
        txn = self.transactions
        if txn is not None and not txn.state.in_error:
            # A transaction with a lost record must not commit: abortable, or fatal
            # when a newer instance of the transactional id fenced this one.
            if isinstance(error, _FATAL_BATCH_ERRORS):
                txn.state.fatal_error(
                    ProducerFencedError(f"{error.name} for {batch.tp}: {error}")
                    if isinstance(error, InvalidProducerEpochError)
                    else error
                )
            elif not isinstance(error, TransactionAbortedError):
                txn.state.abortable_error(error)
        self._settle(batch, -1, -1, error)

    def _settle(
        self, batch: Batch, base_offset: int, log_append_time_ms: int, error: KafkaError | None
    ) -> None:
        """Give every record of the batch its outcome (offsets from ``base_offset``, or
        ``error``), then finish it. A record whose future is already done (its caller
        cancelled it) keeps that outcome, and its callback gets it."""
        group = self._future_group
        if group is not None and not batch.result.done:
            group.complete(batch.result, base_offset, log_append_time_ms, error)
        callbacks: list[tuple[DeliveryCallback, RecordMetadata | None, BaseException | None]] = []
        # The blocking face without callbacks: every handle is None, nothing per record.
        if group is None or any(batch.handles):
            topic, partition = batch.tp
            metadata: RecordMetadata | None = None
            for i, pending in enumerate(batch.handles):
                if pending is None:
                    continue
                if error is None:
                    metadata = RecordMetadata(  # positional: the per-record hot path
                        topic,
                        partition,
                        -1 if base_offset < 0 else base_offset + i,
                        log_append_time_ms if log_append_time_ms >= 0 else pending.timestamp_ms,
                        pending.key_size,
                        pending.value_size,
                    )
                future = pending.future
                if future is None or not future.done():
                    if future is not None and metadata is not None:
                        future.set_result(metadata)
                    elif future is not None and error is not None:
                        future.set_exception(error)
                    if pending.callback is not None:
                        callbacks.append((pending.callback, metadata, error))
                elif pending.callback is not None:
                    callbacks.append((pending.callback, *_outcome(future)))
        self._finish(batch, callbacks)

    def _finish(
        self,
        batch: Batch,
        callbacks: list[tuple[DeliveryCallback, RecordMetadata | None, BaseException | None]],
    ) -> None:
        """Release the batch, then run the callbacks in record order, then wake the
        flushes that waited for it (a flush returns after the callbacks ran)."""
        self._acc.release(batch)
        self._on_release()
        for callback, metadata, error in callbacks:
            try:
                callback(metadata, error)
            except Exception:  # a user's callback must not stop the sender
                log.exception("a delivery callback raised")
        for waiter in self._flush_waiters.pop(batch, ()):
            waiter.remaining -= 1
            if waiter.remaining == 0 and not waiter.future.done():
                waiter.future.set_result(None)


@dataclass(slots=True)
class _FlushWaiter:
    future: asyncio.Future[None]
    remaining: int


def _outcome(
    future: CompletableFuture,
) -> tuple[RecordMetadata | None, BaseException | None]:
    """What a callback gets for a record whose future was already done (the caller
    cancelled it): the future's own outcome."""
    if future.cancelled():
        return None, asyncio.CancelledError()
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)
