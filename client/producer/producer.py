"""``AsyncProducer`` and ``Producer``: Kafka's producer over raftka's broker API.

One core, two faces (as httpx does): :class:`AsyncProducer` is the implementation, on
the caller's event loop; :class:`Producer` runs an ``AsyncProducer`` on a background
loop thread (:mod:`raftka.client._sync`).

``send`` serialises the key and value, waits (at most ``max_block_ms``) for the topic's
metadata and for room in ``buffer_memory``, picks the partition (Kafka's built-in
partitioner: murmur2 of the key, else sticky), appends to the accumulator and returns a
future of :class:`RecordMetadata` that the sender task completes. Errors that concern
the record itself (serialisation, size, unknown topic, closed producer) are raised by
``send``; delivery errors arrive through the future.

Idempotence: ``enable_idempotence`` defaults to True as in Kafka (acks must be "all",
at most 5 requests in flight per broker). The producer takes a producer id from a
broker (InitProducerId) before its first batch and numbers its batches per partition;
retries keep their numbers, so a broker never appends one twice, and order is kept
(one request in flight per partition, see :mod:`.sender` and :mod:`.idempotence`). With
``enable_idempotence=False`` a retry after an unknown outcome (timeout, lost
connection) may duplicate a batch, as in Kafka.

Thread safety: ``AsyncProducer`` belongs to one event loop and is not thread-safe.
``Producer`` is thread-safe: any thread may call ``send``/``flush``/``close``.
``send`` runs in the caller's thread and takes no thread hop per record (see
:class:`Producer`); ``flush``, ``close`` and ``partitions_for`` run on the producer's
own loop thread. Do not call a blocking ``Producer`` method from inside a ``callback``
(it runs on that loop thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Unpack

from raftka.client._closing import AsyncStartedOnEnter
from raftka.client._sync import ClosingOnExit, LoopThread
from raftka.client._transport import (
    MetadataCache,
    TopicView,
    Transport,
    monotonic_ms,
    open_connection,
)
from raftka.client.config import (
    INT32_MAX,
    ClientConfigError,
    ProducerConfig,
    SecurityOptions,
    Serializer,
)
from raftka.client.consumer.listener import ConsumerGroupMetadata
from raftka.client.interceptors import (
    ProducerInterceptor,
    ProducerRecord,
    check_interceptors,
)
from raftka.client.interceptors import close_all as close_interceptors
from raftka.client.interceptors import on_acknowledgement as interceptors_on_acknowledgement
from raftka.client.interceptors import on_send as interceptors_on_send
from raftka.client.producer._future import FutureGroup, RecordFuture
from raftka.client.producer.accumulator import (
    RECORD_OVERHEAD_MAX,
    RecordAccumulator,
    record_size,
)
from raftka.client.producer.partitioner import BuiltInPartitioner, PartitionChoice
from raftka.client.producer.sender import DeliveryCallback, Handle, PendingRecord, Sender
from raftka.client.producer.transaction_manager import TransactionManager
from raftka.client.producer.transactions import TransactionState, TxnState
from raftka.client.structs import OffsetAndMetadata, RecordMetadata, TopicPartition
from raftka.common.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    SerializationError,
)
from raftka.common.record import Record
from raftka.common.record.header import HEADER_SIZE

__all__ = ["AsyncProducer", "DeliveryCallback", "Producer"]

log = logging.getLogger(__name__)

HeadersArg = Iterable[tuple[str, bytes | None]] | None
#: Topics whose TopicPartition objects a producer keeps for reuse (then it starts over).
TOPICS_CACHED_MAX: Final = 10_000
#: ``partitioner(key_bytes, all_partitions, available_partitions) -> partition`` (the
#: shape kafka-python's ``partitioner`` option takes); called for every record sent
#: without an explicit partition. None: Kafka's built-in partitioner (murmur2 of the
#: key, sticky for null keys).
Partitioner = Callable[[bytes | None, Sequence[int], Sequence[int]], int]


def _serialize(what: str, fn: Serializer | None, data: Any) -> bytes | None:
    if fn is None:
        if data is None or isinstance(data, bytes):
            return data
        if isinstance(data, bytearray | memoryview):
            return bytes(data)
        raise SerializationError(
            f"{what} of type {type(data).__name__} needs bytes or a {what}_serializer"
        )
    try:
        out = fn(data)
    except Exception as e:
        raise SerializationError(f"{what}_serializer failed: {type(e).__name__}: {e}") from e
    if out is not None and not isinstance(out, bytes | bytearray):
        raise SerializationError(f"{what}_serializer returned {type(out).__name__}, not bytes")
    return None if out is None else bytes(out)


class AsyncProducer(AsyncStartedOnEnter):
    """Kafka's producer on asyncio. ``async with AsyncProducer(...) as p:`` or call
    ``start()``/``close()``; the first ``send`` starts it too. Not thread-safe."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "raftka-python",
        acks: Literal["all", -1, 0, 1] | str = "all",
        linger_ms: int = 5,
        batch_size: int = 16_384,
        buffer_memory: int = 33_554_432,
        max_block_ms: int = 60_000,
        compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none",
        max_in_flight_requests_per_connection: int = 5,
        retries: int = INT32_MAX,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_request_size: int = 1_048_576,
        enable_idempotence: bool = True,
        partitioner_ignore_keys: bool = False,
        metadata_max_age_ms: int = 300_000,
        connections_max_idle_ms: int = 540_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        interceptors: Sequence[ProducerInterceptor] = (),
        partitioner: Partitioner | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        rng: random.Random | None = None,
        **security: Unpack[SecurityOptions],
    ) -> None:
        self.config = ProducerConfig(
            bootstrap_servers=bootstrap_servers,  # type: ignore[arg-type]  # normalised
            client_id=client_id,
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            compression_type=compression_type,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_request_size=max_request_size,
            enable_idempotence=enable_idempotence,
            partitioner_ignore_keys=partitioner_ignore_keys,
            metadata_max_age_ms=metadata_max_age_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            send_buffer_bytes=send_buffer_bytes,
            receive_buffer_bytes=receive_buffer_bytes,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            **security,
        )
        #: The transaction state machine (None without a transactional_id); created
        #: here so that a call in the wrong state fails the same before start().
        self._txn: TransactionState | None = (
            None if transactional_id is None else TransactionState(transactional_id)
        )
        self._interceptors: tuple[ProducerInterceptor, ...] = check_interceptors(
            "interceptors", interceptors, ProducerInterceptor
        )
        if partitioner is not None and not callable(partitioner):
            raise ClientConfigError(f"partitioner={partitioner!r}: expected a callable")
        self._custom_partitioner = partitioner
        self._rng = rng or random.Random()
        self._partitioner = BuiltInPartitioner(
            batch_size=max(batch_size, 1), partitioner_ignore_keys=partitioner_ignore_keys
        )
        self._accumulator: RecordAccumulator[Handle] = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
        )
        self._transport: Transport | None = None
        self._metadata: MetadataCache | None = None
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._room: asyncio.Event | None = None
        self._closed = False
        #: Set by the blocking face before start: its futures are completed per batch.
        self._future_group: FutureGroup | None = None
        #: Per topic, one TopicPartition per partition, reused by every record (a named
        #: tuple's constructor is a Python-level call).
        self._tps: dict[str, list[TopicPartition]] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the sender task (idempotent). No request is sent until ``send``."""
        if self._closed:
            raise IllegalStateError("cannot start a producer that was closed")
        if self._sender_task is not None:
            return
        config = self.config
        self._transport, self._metadata = open_connection(config)
        self._room = asyncio.Event()
        self._sender = Sender(
            config=config,
            accumulator=self._accumulator,
            metadata=self._metadata,
            transport=self._transport,
            on_release=self._on_release,
            future_group=self._future_group,
            transaction_state=self._txn,
        )
        self._sender_task = asyncio.create_task(self._sender.run(), name="raftka-producer-sender")

    def _on_release(self) -> None:
        if self._room is not None:
            self._room.set()

    async def close(self, *, timeout_ms: int | None = None) -> None:
        """Send what is buffered (waiting at most ``timeout_ms``; None: until
        delivered or expired), then stop. Records not sent by then fail. Idempotent.
        A transaction still open is aborted first, within the same bound.
        ``timeout_ms`` is keyword-only: other Python clients take seconds there, and a
        positional number must fail loudly rather than change its unit silently."""
        if self._closed:
            return
        if timeout_ms is not None:
            deadline_ms = monotonic_ms() + max(timeout_ms, 0)
            await self._abort_on_close(timeout_ms)
            timeout_ms = deadline_ms - monotonic_ms()  # one bound for the whole close
        else:
            await self._abort_on_close(None)
        self._closed = True
        sender, task = self._sender, self._sender_task
        if sender is None or task is None:
            close_interceptors(self._interceptors)
            return
        sender.stop()
        try:
            if timeout_ms is None:
                await asyncio.shield(task)
            else:
                await asyncio.wait_for(asyncio.shield(task), max(timeout_ms, 0) / 1000)
        except TimeoutError:
            sender.abort()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            if self._transport is not None:
                await self._transport.close()
            close_interceptors(self._interceptors)

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersArg = None,
        callback: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; a future of where it landed. Waits at most
        ``max_block_ms`` for metadata and buffer room (then KafkaTimeoutError).
        ``callback(metadata, exception)`` runs on the event loop once delivered."""
        if self._closed:
            raise IllegalStateError("cannot send after the producer has been closed")
        if self._txn is not None:
            self._txn.check_send()
        if self._interceptors:
            topic, value, key, partition, timestamp_ms, headers, callback = self._intercept(
                topic, value, key, partition, timestamp_ms, headers, callback
            )
        if self._sender_task is None:
            await self.start()
        metadata, sender = self._metadata, self._sender
        assert metadata is not None and sender is not None and self._room is not None
        config = self.config
        start_ms = monotonic_ms()
        deadline = start_ms + config.max_block_ms
        if (
            headers is None
            and config.key_serializer is None
            and config.value_serializer is None
            and (key is None or type(key) is bytes)
            and (value is None or type(value) is bytes)
        ):
            # The hot path (bytes in, no headers, no serializers): the size without a
            # call; anything over a limit takes _serialize_record for its error.
            key_bytes, value_bytes = key, value
            header_tuple: tuple[tuple[str, bytes | None], ...] = ()
            size = (
                RECORD_OVERHEAD_MAX
                + (0 if key is None else len(key))
                + (0 if value is None else len(value))
            )
            if size + HEADER_SIZE > config.max_request_size or size > config.buffer_memory:
                self._serialize_record(key, value, headers)
        else:
            key_bytes, value_bytes, header_tuple, size = self._serialize_record(key, value, headers)
        # Fast path: fresh cached metadata needs no waiting machinery per record.
        topic_view = cached = metadata.cached_topic(topic, start_ms)
        if topic_view is None:
            topic_view = await self._wait_for_topic(topic, deadline)
        if partition is None and self._custom_partitioner is not None:
            partition = self._choose_partition(topic, key_bytes, topic_view)
        try:
            choice = self._partitioner.partition(
                topic=topic,
                key_bytes=key_bytes,
                num_partitions=len(topic_view.partitions),
                available_partitions=topic_view.available_partitions,
                rng=self._rng,
                partition=partition,
            )
        except ValueError as e:
            raise KafkaError(str(e)) from None
        room_was_free = self._accumulator.has_room(size)
        if not room_was_free:
            await self._wait_for_room(size, deadline)
            if self._closed:
                raise IllegalStateError("the producer was closed while send waited")
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        # The sender completes the future and calls the callback itself (no
        # done-callbacks: see PendingRecord); flush waits per batch, not per record.
        pending = PendingRecord(
            future,
            ts,
            -1 if key_bytes is None else len(key_bytes),
            -1 if value_bytes is None else len(value_bytes),
            callback,
        )
        tp = self._topic_partition(topic, choice.partition)
        if self._txn is not None:
            self._txn.add_partition(tp)  # before the append: the sender waits for it
        # start_ms is recent enough for the batch's linger clock unless send waited.
        now_ms = start_ms if topic_view is cached and room_was_free else monotonic_ms()
        result, _, _ = self._accumulator.append(
            tp, Record(value_bytes, key_bytes, ts, header_tuple), size, pending, now_ms
        )
        if choice.sticky:
            self._partitioner.on_append(
                topic=topic, appended_bytes=size, enable_switch=result.batch_full
            )
        if result.new_batch or result.batch_full:
            sender.wake()
        return future

    def _serialize_record(
        self, key: Any, value: Any, headers: HeadersArg
    ) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]:
        """Key and value bytes, headers and the record's size bound, checked against
        ``max_request_size`` and ``buffer_memory``. Touches no producer state: the
        blocking face calls it in its caller's thread."""
        config = self.config
        # bytes (or None) without a serializer is the common case: no call for it.
        key_bytes = (
            key
            if config.key_serializer is None and (key is None or type(key) is bytes)
            else _serialize("key", config.key_serializer, key)
        )
        value_bytes = (
            value
            if config.value_serializer is None and (value is None or type(value) is bytes)
            else _serialize("value", config.value_serializer, value)
        )
        header_tuple: tuple[tuple[str, bytes | None], ...] = (
            ()
            if headers is None
            else tuple((str(k), None if v is None else bytes(v)) for k, v in headers)
        )
        size = (
            record_size(key_bytes, value_bytes, header_tuple)
            if header_tuple
            else RECORD_OVERHEAD_MAX
            + (0 if key_bytes is None else len(key_bytes))
            + (0 if value_bytes is None else len(value_bytes))
        )
        if size + HEADER_SIZE > config.max_request_size:
            raise MessageTooLargeError(
                f"the record is {size + HEADER_SIZE} bytes serialized, larger than "
                f"max_request_size={config.max_request_size}"
            )
        if size > config.buffer_memory:
            raise MessageTooLargeError(
                f"the record is {size} bytes serialized, larger than "
                f"buffer_memory={config.buffer_memory}"
            )
        return key_bytes, value_bytes, header_tuple, size

    async def _wait_for_topic(self, topic: str, deadline_ms: int) -> TopicView:
        """The metadata miss: wait (on the loop) for the topic's metadata until
        ``deadline_ms``."""
        assert self._metadata is not None
        view = await self._metadata.wait_for_topic(topic, deadline_ms)
        if self._closed:
            raise IllegalStateError("the producer was closed while send waited")
        return view

    def _topic_partition(self, topic: str, partition: int) -> TopicPartition:
        """The record's TopicPartition (``partition`` is valid: the partitioner
        checked it). The blocking face calls this under its send lock."""
        tps = self._tps.get(topic)
        if tps is None:
            if len(self._tps) >= TOPICS_CACHED_MAX:
                self._tps.clear()  # a bound; the common case is a few topics
            tps = self._tps[topic] = []
        if partition >= len(tps):
            tps.extend(TopicPartition(topic, p) for p in range(len(tps), partition + 1))
        return tps[partition]

    def _builtin_partition(
        self, topic: str, key_bytes: bytes | None, view: TopicView, partition: int | None
    ) -> PartitionChoice:
        """Kafka's built-in partitioner (or ``partition`` checked). Its sticky state is
        not thread-safe: the blocking face calls this under its send lock."""
        try:
            return self._partitioner.partition(
                topic=topic,
                key_bytes=key_bytes,
                num_partitions=len(view.partitions),
                available_partitions=view.available_partitions,
                rng=self._rng,
                partition=partition,
            )
        except ValueError as e:
            raise KafkaError(str(e)) from None

    def _choose_partition(self, topic: str, key_bytes: bytes | None, view: TopicView) -> int:
        """The application's partitioner (Kafka's ``partitioner.class``), checked."""
        assert self._custom_partitioner is not None
        all_partitions = [p.partition for p in view.partitions]
        try:
            chosen = self._custom_partitioner(key_bytes, all_partitions, view.available_partitions)
        except Exception as e:
            raise KafkaError(f"the partitioner failed for topic {topic!r}: {e!r}") from e
        if type(chosen) is not int or not 0 <= chosen < len(all_partitions):
            raise KafkaError(
                f"the partitioner chose {chosen!r} for topic {topic!r}, which has "
                f"partitions 0..{len(all_partitions) - 1}"
            )
        return chosen

    def _intercept(  # noqa: PLR0917  (send's arguments, in send's order)
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: HeadersArg,
        callback: DeliveryCallback | None,
    ) -> tuple[str, Any, Any, int | None, int | None, HeadersArg, DeliveryCallback | None]:
        """A send's arguments after every interceptor's on_send, and a callback that
        runs their on_acknowledgement before the application's own (for the async and
        the blocking send alike)."""
        interceptors = self._interceptors
        record = ProducerRecord(
            topic, value, key, partition, timestamp_ms, None if headers is None else tuple(headers)
        )
        out = interceptors_on_send(interceptors, record)

        def acknowledged(metadata: RecordMetadata | None, exception: BaseException | None) -> None:
            interceptors_on_acknowledgement(interceptors, metadata, exception)
            if callback is not None:
                callback(metadata, exception)

        return (
            out.topic,
            out.value,
            out.key,
            out.partition,
            out.timestamp_ms,
            out.headers,
            acknowledged,
        )

    async def _wait_for_room(self, size: int, deadline_ms: int) -> None:
        # Every release sets the event; waiters clear it and check again.
        assert self._room is not None
        while not self._accumulator.has_room(size):
            remaining = deadline_ms - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"failed to allocate {size} bytes within max_block_ms="
                    f"{self.config.max_block_ms} (buffer_memory={self.config.buffer_memory}"
                    " is full)"
                )
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), remaining / 1000)

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersArg = None,
    ) -> RecordMetadata:
        """``send`` and wait for the acknowledgement."""
        future = await self.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await future

    async def flush(self, *, timeout_ms: int | None = None) -> None:
        """Send every buffered record now and wait until each is acknowledged or
        failed (KafkaTimeoutError past ``timeout_ms``; keyword-only, as in ``close``)."""
        if self._sender is None:
            return
        waiter = self._sender.flush_waiter()
        self._accumulator.begin_flush()
        self._sender.wake()
        try:
            if waiter is not None:
                try:
                    await asyncio.wait_for(
                        waiter, None if timeout_ms is None else timeout_ms / 1000
                    )
                except TimeoutError:
                    raise KafkaTimeoutError(
                        f"flush did not complete within {timeout_ms} ms"
                    ) from None
        finally:
            self._accumulator.end_flush()

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition numbers (waits for metadata up to max_block_ms)."""
        await self.start()
        assert self._metadata is not None
        view = await self._metadata.wait_for_topic(topic, monotonic_ms() + self.config.max_block_ms)
        return {p.partition for p in view.partitions}

    # ------------------------------------------------------------------ transactions

    def _transactions(self) -> TransactionState:
        if self._txn is None:
            raise IllegalStateError(
                "transactional methods need a transactional_id (the producer has none)"
            )
        if self._closed:
            raise IllegalStateError("the producer has been closed")
        return self._txn

    def _deadline(self, timeout_ms: int | None) -> int:
        return monotonic_ms() + (self.config.max_block_ms if timeout_ms is None else timeout_ms)

    async def _manager(self) -> TransactionManager:
        await self.start()
        assert self._sender is not None and self._sender.transactions is not None
        return self._sender.transactions

    async def init_transactions(self, *, timeout_ms: int | None = None) -> None:
        """Kafka's ``initTransactions``: a producer id and epoch for the
        transactional_id from its coordinator, which fences every older producer with
        the same id (their next call raises ProducerFencedError) and aborts a
        transaction such a producer left open. Once per producer, before
        ``begin_transaction``; waits at most ``timeout_ms`` (default max_block_ms),
        then KafkaTimeoutError, after which it may be called again."""
        self._transactions()
        manager = await self._manager()
        await manager.init_transactions(self._deadline(timeout_ms))

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator learns of it with the first
        partition or offsets added). IllegalStateError unless the producer is ready."""
        self._transactions().begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit the consumer's ``offsets`` (the next offsets to read) as part of the
        transaction: they become the group's committed offsets only if it commits.
        ``group_metadata`` is ``consumer.group_metadata()`` (KIP-447: a zombie member
        is refused); a group id string is accepted as Kafka's older overload."""
        txn = self._transactions()
        txn.begin_send_offsets()  # the state first, as Kafka checks it
        group = (
            ConsumerGroupMetadata(group_metadata, -1, "", None)
            if isinstance(group_metadata, str)
            else group_metadata
        )
        if not isinstance(group, ConsumerGroupMetadata) or not group.group_id:
            raise ValueError(
                f"group_metadata={group_metadata!r}: expected consumer.group_metadata() "
                "or a group id"
            )
        checked: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            value = OffsetAndMetadata(om) if type(om) is int else om
            if not isinstance(value, OffsetAndMetadata) or value.offset < 0:
                raise ValueError(f"offsets[{tp}]={om!r}: expected an OffsetAndMetadata >= 0")
            checked[TopicPartition(tp.topic, tp.partition)] = value
        manager = await self._manager()
        await manager.send_offsets(checked, group, self._deadline(timeout_ms))

    async def commit_transaction(self, *, timeout_ms: int | None = None) -> None:
        """Kafka's ``commitTransaction``: flush every record of the transaction, then
        EndTxn(commit). A record that failed (or an earlier abortable error) raises
        that error instead, and the transaction must be aborted
        (``abort_transaction``); ProducerFencedError is fatal (close the producer).
        KafkaTimeoutError after ``timeout_ms`` (default max_block_ms): calling it
        again resumes the commit."""
        txn = self._transactions()
        deadline = self._deadline(timeout_ms)
        txn.begin_commit()
        manager = await self._manager()
        await self._flush_until(deadline)
        await manager.wait_for_add()
        txn.raise_if_error("commit the transaction")
        await manager.end_transaction(committed=True, deadline_ms=deadline)

    async def abort_transaction(self, *, timeout_ms: int | None = None) -> None:
        """Kafka's ``abortTransaction``: records not yet sent fail with
        TransactionAbortedError, records in flight get their answers, then
        EndTxn(abort); the producer is then ready for ``begin_transaction``.
        KafkaTimeoutError after ``timeout_ms`` (default max_block_ms): calling it
        again resumes the abort."""
        txn = self._transactions()
        deadline = self._deadline(timeout_ms)
        txn.begin_abort()
        manager = await self._manager()
        assert self._sender is not None
        self._sender.wake()  # fails the batches not yet sent
        await manager.wait_for_add()
        await self._flush_until(deadline)
        await manager.end_transaction(committed=False, deadline_ms=deadline)

    async def _flush_until(self, deadline_ms: int) -> None:
        """Flush until no batch is left: a blocking ``send`` that passed its state
        check just before the commit or abort began may append after a flush took its
        list of batches, and EndTxn must follow every batch of the transaction."""
        while True:
            await self.flush(timeout_ms=max(deadline_ms - monotonic_ms(), 0))
            if not self._accumulator.unreleased_batches():
                return

    async def _abort_on_close(self, timeout_ms: int | None) -> None:
        """Kafka's producer aborts an open transaction when it closes (its records
        must not wait for the transaction timeout to become abortable); a failure
        is logged, not raised: close still closes."""
        txn = self._txn
        if txn is None or self._sender is None:
            return
        if txn.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            return
        try:
            await self.abort_transaction(timeout_ms=timeout_ms)
        except KafkaError as e:
            log.warning("close: aborting the open transaction failed: %s", e)


class Producer(ClosingOnExit):
    """The blocking producer over an :class:`AsyncProducer` core whose sender runs on
    the producer's own loop thread. Same keyword arguments as ``AsyncProducer``.

    Thread safety: every method may be called from any thread, except from inside a
    delivery ``callback`` (which runs on the loop thread), where ``flush``, ``close``
    and a ``send`` that would block raise IllegalStateError or deadlock.

    ``send`` does its work in the caller's thread, as Kafka's Java producer does:
    interceptors' ``on_send``, serialization, the partitioner (with cached metadata),
    and the append to the accumulator under its lock. It wakes the sender (with
    ``loop.call_soon_threadsafe``) only when its record opened a batch or filled one,
    not per record. It waits on the loop thread only for a metadata miss, and in its own
    thread for buffer room; both at most ``max_block_ms``. Records of concurrent
    callers take the partitioner and the accumulator one at a time (``_send_lock``).

    Its futures are completed per batch, not per record: each points to its batch's
    result and its index in the batch (:mod:`._future`), so the loop thread's share of
    the work per record is the encoding alone, and a ``RecordMetadata`` is built only
    when a caller asks for it. A ``PendingRecord`` is kept only for a record with a
    ``callback``.
    """

    def __init__(self, **config: Any) -> None:
        self._async = AsyncProducer(**config)
        self.config = self._async.config
        self._thread = LoopThread(f"raftka-producer-{self.config.client_id}")
        #: Serialises callers over the partitioner's sticky state and the wait for
        #: buffer room (first come, first served); the accumulator has its own lock.
        self._send_lock = threading.Lock()
        self._start_lock = threading.Lock()
        #: The condition every future of this producer shares, and what completes
        #: them a batch at a time (see RecordFuture).
        self._futures = self._async._future_group = FutureGroup()
        #: The loop thread's loop once the core started (set once, read without lock).
        self._loop: asyncio.AbstractEventLoop | None = None

    def _timeout_s(self) -> float:
        # A safety net over the async core's own bounds.
        return (self.config.max_block_ms + self.config.request_timeout_ms) / 1000 + 5

    def _start(self) -> asyncio.AbstractEventLoop:
        """Start the core's sender on the loop thread, once (the first ``send``)."""
        with self._start_lock:
            if self._loop is None:
                self._thread.run(self._async.start(), self._timeout_s())
                self._loop = self._thread.loop
            return self._loop

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersArg = None,
        callback: DeliveryCallback | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue one record; a future of where it landed (``.result()`` waits).
        Blocks at most ``max_block_ms`` for metadata and buffer room (then
        KafkaTimeoutError); record errors raise here. ``callback(metadata, exception)``
        runs on the producer's loop thread once delivered. Any thread."""
        core = self._async
        if core._closed:
            raise IllegalStateError("cannot send after the producer has been closed")
        if core._txn is not None:
            core._txn.check_send()
        if core._interceptors:
            topic, value, key, partition, timestamp_ms, headers, callback = core._intercept(
                topic, value, key, partition, timestamp_ms, headers, callback
            )
        loop = self._loop or self._start()
        metadata, sender, accumulator = core._metadata, core._sender, core._accumulator
        assert metadata is not None and sender is not None
        start_ms = monotonic_ms()
        deadline = start_ms + self.config.max_block_ms
        key_bytes, value_bytes, header_tuple, size = core._serialize_record(key, value, headers)
        # The loop thread owns the metadata cache but replaces its immutable view
        # whole, so reading the cached view here is safe; only a miss (unknown or
        # stale topic) hops to the loop to wait for a refresh.
        topic_view = cached = metadata.cached_topic(topic, start_ms)
        if topic_view is None:
            topic_view = self._thread.run(core._wait_for_topic(topic, deadline), self._timeout_s())
        if partition is None and core._custom_partitioner is not None:
            partition = core._choose_partition(topic, key_bytes, topic_view)
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        key_size = -1 if key_bytes is None else len(key_bytes)
        value_size = -1 if value_bytes is None else len(value_bytes)
        # The sender completes the record's future with its batch; it needs a handle
        # per record only to run a callback.
        pending = (
            None if callback is None else PendingRecord(None, ts, key_size, value_size, callback)
        )
        record = Record(value_bytes, key_bytes, ts, header_tuple)
        with self._send_lock:
            choice = core._builtin_partition(topic, key_bytes, topic_view, partition)
            now_ms = start_ms if topic_view is cached else monotonic_ms()
            if not accumulator.has_room(size):
                if self._thread.in_loop_thread():
                    # Only the loop thread frees room: waiting here would deadlock.
                    raise IllegalStateError(
                        "send from a delivery callback found buffer_memory full"
                    )
                remaining_ms = deadline - monotonic_ms()
                if not accumulator.wait_for_room(size, max(remaining_ms, 0) / 1000):
                    raise KafkaTimeoutError(
                        f"failed to allocate {size} bytes within max_block_ms="
                        f"{self.config.max_block_ms} (buffer_memory="
                        f"{self.config.buffer_memory} is full)"
                    )
                now_ms = monotonic_ms()
            tp = core._topic_partition(topic, choice.partition)
            if core._txn is not None:
                core._txn.add_partition(tp)  # before the append: the sender waits for it
            # Raises IllegalStateError if close began meanwhile.
            result, batch, index = accumulator.append(tp, record, size, pending, now_ms)
            if choice.sticky:
                core._partitioner.on_append(
                    topic=topic, appended_bytes=size, enable_switch=result.batch_full
                )
        if result.wake_sender:
            # The first record of a linger window, or a full batch, that the sender
            # would not otherwise look at in time: about once per batch at most, not
            # per record (see RecordAccumulator.append). A loop already closed means
            # close() ran to the end after this append, so the sender drained it.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(sender.wake)
        # A concurrent.futures.Future, RUNNING (the record is queued: no cancel), built
        # without the per-future condition the garbage collector would pay for, and
        # read from the batch's result (it may be complete already).
        return RecordFuture(self._futures, batch.result, index, ts, key_size, value_size)

    def flush(self, *, timeout_ms: int | None = None) -> None:
        """Send every buffered record now and wait until each is acknowledged or
        failed, and its callback ran (KafkaTimeoutError past ``timeout_ms``,
        keyword-only). Any thread but the producer's loop thread."""
        if self._loop is None:
            return
        safety = None if timeout_ms is None else timeout_ms / 1000 + 5
        self._thread.run(self._async.flush(timeout_ms=timeout_ms), safety)

    def partitions_for(self, topic: str) -> set[int]:
        return self._thread.run(self._async.partitions_for(topic), self._timeout_s())

    # ------------------------------------------------------------------ transactions

    def _run_transactional(
        self, call: Callable[[], Coroutine[Any, Any, None]], timeout_ms: int | None
    ) -> None:
        """Run a transactional call of the core on the loop thread (starting it)."""
        self._async._transactions()  # IllegalStateError before any thread is started
        self._start()
        # A safety net over the core's own deadline (which raises KafkaTimeoutError).
        safety_s = (self.config.max_block_ms if timeout_ms is None else timeout_ms) / 1000 + 10
        self._thread.run(call(), safety_s)

    def init_transactions(self, *, timeout_ms: int | None = None) -> None:
        """See :meth:`AsyncProducer.init_transactions`. Any thread."""
        self._run_transactional(
            lambda: self._async.init_transactions(timeout_ms=timeout_ms), timeout_ms
        )

    def begin_transaction(self) -> None:
        """See :meth:`AsyncProducer.begin_transaction`."""
        self._async.begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """See :meth:`AsyncProducer.send_offsets_to_transaction`."""
        self._run_transactional(
            lambda: self._async.send_offsets_to_transaction(
                offsets, group_metadata, timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def commit_transaction(self, *, timeout_ms: int | None = None) -> None:
        """See :meth:`AsyncProducer.commit_transaction`. Not from a delivery callback."""
        self._run_transactional(
            lambda: self._async.commit_transaction(timeout_ms=timeout_ms), timeout_ms
        )

    def abort_transaction(self, *, timeout_ms: int | None = None) -> None:
        """See :meth:`AsyncProducer.abort_transaction`. Not from a delivery callback."""
        self._run_transactional(
            lambda: self._async.abort_transaction(timeout_ms=timeout_ms), timeout_ms
        )

    def close(self, *, timeout_ms: int | None = None) -> None:
        """Flush (at most ``timeout_ms``, keyword-only), stop, and end the loop
        thread. Idempotent; any thread but the producer's loop thread."""
        if self._thread.closed:
            return
        try:
            if self._thread.started:
                safety = None if timeout_ms is None else timeout_ms / 1000 + 5
                self._thread.run(self._async.close(timeout_ms=timeout_ms), safety)
            else:
                self._async._closed = True
        finally:
            self._thread.close()
