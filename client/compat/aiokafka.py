"""aiokafka's ``AIOKafkaProducer`` and ``AIOKafkaConsumer`` over raftka's asyncio
clients (``AsyncProducer`` / ``AsyncConsumer``).

Thin adapters, as :mod:`.kafka_python` is for kafka-python: aiokafka's method names,
argument orders and return shapes over raftka's semantics; constructor keywords
sorted into mapped, tuning (accepted, no effect) and refused (``ClientConfigError``
naming the keyword). Each belongs to the event loop it is first used on, like the
raftka clients under it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, NamedTuple, Self

from raftka.client.admin import AsyncAdmin
from raftka.client.compat._options import (
    CONSUMER_MAPPED,
    EXCLUDE_INTERNAL_TOPICS,
    HEADERS_SINCE,
    IDEMPOTENCE_SINCE,
    NO_HEADERS,
    SASL_MAPPED,
    SECURITY,
    STATIC_MEMBERSHIP_SINCE,
    TLS_MAPPED,
    ZSTD_SINCE,
    ClientOptions,
    Refusal,
    bootstrap_with_ports,
    check_ms,
    is_none,
    parse_api_version,
    sort_options,
    tls_options,
)
from raftka.client.compat.kafka_python import (
    _AssignedPartitions,
    assignment_strategy,
    listener_for,
    offsets_to_commit,
)
from raftka.client.consumer.consumer import AsyncConsumer
from raftka.client.producer.producer import AsyncProducer
from raftka.client.structs import ConsumerRecord as RaftkaConsumerRecord
from raftka.client.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from raftka.client.structs import RecordMetadata as RaftkaRecordMetadata
from raftka.common.errors import IllegalStateError

__all__ = ["AIOKafkaConsumer", "AIOKafkaProducer", "ConsumerRecord", "RecordMetadata"]

#: getone / ``async for`` poll at most this long at a time.
GETONE_POLL_TIMEOUT_MS: Final = 500

#: aiokafka's TLS options (security_protocol, ssl_context) and its SASL ones reach
#: raftka's client; the ssl_* file options are kafka-python's, not aiokafka's.
_AIOKAFKA_TLS: Final = frozenset({"security_protocol", "ssl_context"}) | SASL_MAPPED
REFUSED_COMMON: Final[Mapping[str, Refusal]] = {
    **{k: r for k, r in SECURITY.items() if k not in _AIOKAFKA_TLS},
    **{
        k: Refusal(
            SECURITY[k].honourable,
            "aiokafka takes TLS as ssl_context (aiokafka.helpers.create_ssl_context)",
        )
        for k in TLS_MAPPED - _AIOKAFKA_TLS
    },
    "loop": Refusal(is_none, "the client uses the running event loop (aiokafka >= 0.7 too)"),
}
#: aiokafka's options about versions that the adapter honours itself.
HANDLED_COMMON: Final = frozenset({"api_version"})


class RecordMetadata(NamedTuple):
    """aiokafka's ``RecordMetadata``. ``timestamp`` is the broker's LogAppendTime when
    the topic uses it, else the record's CreateTime; raftka does not say which, so
    ``timestamp_type`` is 0 (CreateTime) and ``log_start_offset`` -1 (unknown)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    timestamp_type: int
    log_start_offset: int


class ConsumerRecord(NamedTuple):
    """aiokafka's ``ConsumerRecord``, its fields in its order (``checksum`` None)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    headers: tuple[tuple[str, bytes | None], ...]


def _metadata(md: RaftkaRecordMetadata) -> RecordMetadata:
    return RecordMetadata(
        md.topic,
        md.partition,
        TopicPartition(md.topic, md.partition),
        md.offset,
        md.timestamp,
        0,
        -1,
    )


def _record(r: RaftkaConsumerRecord, headers: bool = True) -> ConsumerRecord:
    return ConsumerRecord(
        r.topic,
        r.partition,
        r.offset,
        r.timestamp,
        int(r.timestamp_type),
        r.key,
        r.value,
        None,
        r.serialized_key_size,
        r.serialized_value_size,
        tuple(r.headers) if headers else (),
    )


class _AsyncClosable:
    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


# ---------------------------------------------------------------------------- producer


class _Transaction:
    """aiokafka's TransactionContext."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> Self:
        await self._producer.begin_transaction()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self._producer.commit_transaction()
        else:
            await self._producer.abort_transaction()


_PRODUCER_MAPPED: Final = {
    **{k: k for k in _AIOKAFKA_TLS},
    "acks": "acks",
    "bootstrap_servers": "bootstrap_servers",
    "client_id": "client_id",
    "compression_type": "compression_type",
    "connections_max_idle_ms": "connections_max_idle_ms",
    "enable_idempotence": "enable_idempotence",
    "key_serializer": "key_serializer",
    "linger_ms": "linger_ms",
    "max_batch_size": "batch_size",
    "max_request_size": "max_request_size",
    "metadata_max_age_ms": "metadata_max_age_ms",
    "partitioner": "partitioner",
    "request_timeout_ms": "request_timeout_ms",
    "retry_backoff_ms": "retry_backoff_ms",
    "transaction_timeout_ms": "transaction_timeout_ms",
    "transactional_id": "transactional_id",
    "value_serializer": "value_serializer",
}


def _drop_unused_mechanism(opts: dict[str, Any]) -> None:
    """aiokafka's default sasl_mechanism ("PLAIN"), which aiokafka itself uses only under
    SASL_*: without SASL it asks for nothing, so it is not passed on (where raftka's
    client would refuse it as unused)."""
    if opts.get("sasl_mechanism") == "PLAIN" and opts.get("security_protocol") != "SASL_SSL":
        del opts["sasl_mechanism"]


def producer_options(configs: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka's AIOKafkaProducer keywords as raftka AsyncProducer keywords, with
    aiokafka's defaults: ``enable_idempotence=False``, ``acks=1`` (``"all"`` with
    idempotence), ``request_timeout_ms=40000``, ``linger_ms=0``."""
    face = "AIOKafkaProducer"
    given = sort_options(
        face,
        configs,
        mapped=_PRODUCER_MAPPED,
        handled=HANDLED_COMMON | {"send_backoff_ms"},
        refused=REFUSED_COMMON,
    )
    _drop_unused_mechanism(given)
    version = parse_api_version(face, given.pop("api_version", None))
    # aiokafka's wait before a batch is sent again: raftka's is retry_backoff_ms, so
    # the longer of the two honours both.
    send_backoff_ms = check_ms(face, "send_backoff_ms", given.pop("send_backoff_ms", 100))
    opts = {_PRODUCER_MAPPED[k]: v for k, v in given.items()}
    if opts.get("transactional_id") is None:
        opts.pop("transactional_id", None)
    else:
        # aiokafka: a transactional producer is idempotent (acks then default to "all").
        opts.setdefault("enable_idempotence", True)
    opts["retry_backoff_ms"] = max(opts.get("retry_backoff_ms", 100), send_backoff_ms)
    client = ClientOptions(face, version)
    if opts.get("enable_idempotence"):
        client.refuse_unless(IDEMPOTENCE_SINCE, "enable_idempotence", True)
    if "transactional_id" in opts:
        client.refuse_unless(IDEMPOTENCE_SINCE, "transactional_id", opts["transactional_id"])
    if opts.get("compression_type") == "zstd":
        client.refuse_unless(ZSTD_SINCE, "compression_type", "zstd")
    opts["_client"] = client
    opts["bootstrap_servers"] = bootstrap_with_ports(opts.get("bootstrap_servers", "localhost"))
    if opts.get("client_id", "") is None:
        del opts["client_id"]
    idempotent = opts.setdefault("enable_idempotence", False)
    opts.setdefault("acks", "all" if idempotent else 1)
    opts.setdefault("request_timeout_ms", 40_000)
    opts.setdefault("linger_ms", 0)
    if opts.get("compression_type", "none") is None:
        opts["compression_type"] = "none"
    return opts


class AIOKafkaProducer(_AsyncClosable):
    """aiokafka's producer over raftka's :class:`AsyncProducer`.

    ``await producer.send(...)`` queues a record and gives an ``asyncio.Future`` of its
    :class:`RecordMetadata`; ``send_and_wait`` waits for it. ``start()`` / ``stop()``
    or ``async with``."""

    def __init__(self, **configs: Any) -> None:
        opts = producer_options(configs)
        self._client: ClientOptions = opts.pop("_client")
        self._producer = AsyncProducer(**opts)
        self.config = self._producer.config

    async def start(self) -> None:
        """Start; with a ``transactional_id`` also InitProducerId, as aiokafka does
        (raftka's ``init_transactions``)."""
        await self._producer.start()
        if self.config.transactional_id is not None:
            await self._producer.init_transactions()

    async def stop(self) -> None:
        """Deliver what is buffered, then stop (aborting an open transaction)."""
        await self._producer.close()

    # aiokafka's transactional API (needs transactional_id).

    async def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        await self._producer.abort_transaction()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, Any], group_id: Any
    ) -> None:
        """``offsets`` as ``commit`` takes them; ``group_id`` a group id or, better
        (KIP-447), ``consumer.group_metadata()`` of a raftka consumer."""
        converted = offsets_to_commit(offsets)
        assert converted is not None
        await self._producer.send_offsets_to_transaction(converted, group_id)

    def transaction(self) -> _Transaction:
        """aiokafka's ``async with producer.transaction():``: begin, then commit on a
        clean exit or abort on an exception (which is raised on)."""
        return _Transaction(self)

    async def flush(self) -> None:
        await self._producer.flush()

    async def send(  # noqa: PLR0917  (aiokafka's positional order)
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        if headers:
            self._client.require(HEADERS_SINCE, f"send(headers=...) ({NO_HEADERS})")
        inner = await self._producer.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        outer: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()

        def copy(done: asyncio.Future[RaftkaRecordMetadata]) -> None:
            if outer.done():
                return  # the caller cancelled it
            if done.cancelled():
                outer.cancel()
            elif (error := done.exception()) is not None:
                outer.set_exception(error)
            else:
                outer.set_result(_metadata(done.result()))

        inner.add_done_callback(copy)
        return outer

    async def send_and_wait(  # noqa: PLR0917  (aiokafka's positional order)
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> RecordMetadata:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def partitions_for(self, topic: str) -> set[int]:
        return await self._producer.partitions_for(topic)


# ---------------------------------------------------------------------------- consumer


def consumer_options(configs: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka's AIOKafkaConsumer keywords as raftka AsyncConsumer keywords, with
    aiokafka's defaults (``request_timeout_ms=40000``, ``session_timeout_ms=10000``,
    round-robin assignment); ``max_poll_records=None`` means raftka's default (500)."""
    face = "AIOKafkaConsumer"
    opts = sort_options(
        face,
        configs,
        mapped=CONSUMER_MAPPED | _AIOKAFKA_TLS,
        handled=HANDLED_COMMON | {"consumer_timeout_ms"},
        refused={
            **REFUSED_COMMON,
            "exclude_internal_topics": EXCLUDE_INTERNAL_TOPICS,
            "rebalance_timeout_ms": Refusal(
                is_none, "raftka's rebalance timeout is max_poll_interval_ms, as in Kafka"
            ),
        },
    )
    _drop_unused_mechanism(opts)
    client = ClientOptions(
        "AIOKafkaConsumer", parse_api_version("AIOKafkaConsumer", opts.pop("api_version", None))
    )
    if opts.get("isolation_level") == "read_committed":
        client.refuse_unless(IDEMPOTENCE_SINCE, "isolation_level", "read_committed")
    if opts.get("group_instance_id") is not None:
        client.refuse_unless(
            STATIC_MEMBERSHIP_SINCE, "group_instance_id", opts["group_instance_id"]
        )
    # aiokafka's bound on its background fetch routine's wait (how soon it sees a
    # rebalance or new partitions): raftka's fetcher reacts to both at once, never on
    # a timer, so any bound holds.
    check_ms(face, "consumer_timeout_ms", opts.pop("consumer_timeout_ms", 200))
    opts["bootstrap_servers"] = bootstrap_with_ports(opts.get("bootstrap_servers", "localhost"))
    if opts.get("client_id", "") is None:
        del opts["client_id"]
    if opts.get("max_poll_records", 0) is None:
        del opts["max_poll_records"]
    opts.setdefault("request_timeout_ms", 40_000)
    opts.setdefault("session_timeout_ms", 10_000)
    opts["partition_assignment_strategy"] = assignment_strategy(
        opts.get("partition_assignment_strategy", ("roundrobin",))
    )
    opts["_client"] = client
    return opts


class AIOKafkaConsumer(_AsyncClosable, _AssignedPartitions):
    """aiokafka's consumer over raftka's :class:`AsyncConsumer`.

    ``AIOKafkaConsumer(*topics, **configs)`` subscribes to ``topics``. Without a
    ``group_id`` a subscription is served, as in aiokafka, by assigning every partition
    of the topics (those they have at the first read), with no commits.
    ``getone()`` and ``async for`` hand over one record per call (positions never
    run ahead of what was handed over); ``getmany()`` returns batches."""

    _consumer: AsyncConsumer

    def __init__(self, *topics: str, **configs: Any) -> None:
        opts = consumer_options(configs)
        #: Before 0.11 records travel as message format v1, which has no headers.
        self._headers = opts.pop("_client").supports(HEADERS_SINCE)
        self._consumer = AsyncConsumer(**opts)
        self.config = self._consumer.config
        self._group_id: str | None = opts.get("group_id")
        self._admin_options = {
            "bootstrap_servers": opts["bootstrap_servers"],
            "request_timeout_ms": opts["request_timeout_ms"],
            **tls_options(opts),
        }
        self._admin: AsyncAdmin | None = None
        self._groupless: frozenset[str] | None = None
        self._closed = False
        if topics:
            self.subscribe(topics)

    async def start(self) -> None:
        await self._consumer.start()

    async def stop(self) -> None:
        """Commit (with ``enable_auto_commit``), leave the group, stop."""
        self._closed = True
        try:
            await self._consumer.close()
        finally:
            if self._admin is not None:
                await self._admin.close()

    # ------------------------------------------------------------------ assignment

    def subscribe(
        self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None
    ) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        if self._group_id is None:
            if pattern is not None or listener is not None:
                raise IllegalStateError(
                    "subscribe(pattern=...) and rebalance listeners need a group_id"
                )
            if not names:
                raise ValueError("subscribe() needs topics")
            self._consumer.assign([])
            self._groupless = frozenset(names)
            return
        self._consumer.subscribe(names, pattern, listener_for(listener))

    async def _ensure_groupless_assignment(self) -> None:
        if self._groupless is None or self._consumer.assignment():
            return
        partitions = [
            TopicPartition(topic, p)
            for topic in sorted(self._groupless)
            for p in sorted(await self._consumer.partitions_for_topic(topic))
        ]
        self._consumer.assign(partitions)

    def subscription(self) -> set[str]:
        if self._groupless is not None:
            return set(self._groupless)
        return self._consumer.subscription()

    # ------------------------------------------------------------------ reading

    async def _poll(
        self, partitions: tuple[TopicPartition, ...], timeout_ms: int, max_records: int | None
    ) -> dict[TopicPartition, list[RaftkaConsumerRecord]]:
        await self._ensure_groupless_assignment()
        if not partitions:
            return await self._consumer.poll(timeout_ms, max_records)
        # Only these partitions: pause the others for the call.
        others = self._consumer.assignment() - set(partitions) - self._consumer.paused()
        self._consumer.pause(*others)
        try:
            return await self._consumer.poll(timeout_ms, max_records)
        finally:
            self._consumer.resume(*others)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition (of ``partitions`` only, when given), waiting at most
        ``timeout_ms`` for some; ``{}`` when none arrive."""
        batch = await self._poll(partitions, timeout_ms, max_records)
        headers = self._headers
        return {tp: [_record(r, headers) for r in records] for tp, records in batch.items()}

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions`` only, when given), waiting as long as it
        takes."""
        while True:
            batch = await self._poll(partitions, GETONE_POLL_TIMEOUT_MS, 1)
            for records in batch.values():
                if records:
                    return _record(records[0], self._headers)

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record; the iteration ends when the consumer is stopped."""
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except IllegalStateError:
            if self._closed:
                raise StopAsyncIteration from None
            raise

    # ------------------------------------------------------------------ positions

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_end(*partitions)

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int]:
        """Move each partition (default: all assigned) to its committed offset;
        ``{tp: offset}`` for those that have one (the others keep their position)."""
        tps = list(partitions) or sorted(self._consumer.assignment())
        committed = await self._consumer.committed(tps)
        moved: dict[TopicPartition, int] = {}
        for tp, found in committed.items():
            if found is not None:
                self._consumer.seek(tp, found.offset)
                moved[tp] = found.offset
        return moved

    async def position(self, partition: TopicPartition) -> int:
        await self._ensure_groupless_assignment()
        return await self._consumer.position(partition)

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The last stable offset the last fetch reported (None before one)."""
        return self._consumer.last_stable_offset(partition)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self._consumer.beginning_offsets(list(partitions))

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._consumer.end_offsets(list(partitions))

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._consumer.offsets_for_times(dict(timestamps))

    # ------------------------------------------------------------------ commits

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata | Any] | None = None
    ) -> None:
        """Commit ``offsets`` (``{tp: offset}``, ``{tp: (offset, metadata)}`` or
        ``{tp: OffsetAndMetadata}``; default: every assigned partition's position)."""
        if self._group_id is None:
            raise IllegalStateError("commit() needs a group_id")
        await self._consumer.commit(offsets_to_commit(offsets))

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None when there is none)."""
        found = (await self._consumer.committed([partition])).get(partition)
        return None if found is None else found.offset

    # ------------------------------------------------------------------ cluster

    async def topics(self) -> set[str]:
        """Every topic of the cluster (internal ones excluded)."""
        if self._admin is None:
            self._admin = AsyncAdmin(**self._admin_options)
        return await self._admin.list_topics()
