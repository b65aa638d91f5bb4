"""kafka-python's ``KafkaProducer``, ``KafkaConsumer`` and ``KafkaAdminClient`` over
raftka's blocking clients.

Thin adapters: each holds a raftka ``Producer`` / ``Consumer`` / ``Admin`` and turns
kafka-python's calling conventions into raftka's (timeouts in seconds where
kafka-python uses seconds, its positional argument orders, its return shapes); every
client semantic (batching, retries, idempotence, groups, commits) is the raftka
client's own. Constructor keywords are sorted in :mod:`._options`: mapped, tuning
(accepted, no effect) or refused with :class:`ClientConfigError` naming the keyword.
As in raftka (and unlike kafka-python), constructors do no I/O.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple

from raftka.client._sync import ClosingOnExit
from raftka.client.admin import Admin
from raftka.client.compat._future import Future
from raftka.client.compat._options import (
    CONSUMER_MAPPED,
    EXCLUDE_INTERNAL_TOPICS,
    HEADERS_SINCE,
    IDEMPOTENCE_SINCE,
    NO_HEADERS,
    OFFSETS_FOR_TIMES_SINCE,
    SECURITY,
    STATIC_MEMBERSHIP_SINCE,
    TLS_MAPPED,
    ZSTD_SINCE,
    ClientOptions,
    Refusal,
    bootstrap_with_ports,
    check_ms,
    equals,
    is_none,
    ms_from_s,
    sort_client_options,
    tls_options,
)
from raftka.client.compat.errors import TopicMetadataTimeoutError
from raftka.client.config import ClientConfigError
from raftka.client.consumer.consumer import AsyncConsumer, Consumer
from raftka.client.consumer.listener import ConsumerGroupMetadata, ConsumerRebalanceListener
from raftka.client.group_admin import GroupAdmin
from raftka.client.producer.producer import Producer
from raftka.client.structs import ConsumerRecord as RaftkaConsumerRecord
from raftka.client.structs import (
    NewPartitions,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from raftka.client.structs import NewTopic as RaftkaNewTopic
from raftka.client.structs import RecordMetadata as RaftkaRecordMetadata
from raftka.common.acl import AccessControlEntry, AclBinding, AclBindingFilter, ResourceType
from raftka.common.acl import AclOperation as ACLOperation
from raftka.common.acl import AclPermissionType as ACLPermissionType
from raftka.common.acl import PatternType as ACLResourcePatternType
from raftka.common.acl import ResourcePattern as RaftkaResourcePattern
from raftka.common.errors import IllegalStateError, KafkaError, UnknownTopicOrPartitionError

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerRecord",
    "Future",
    "FutureRecordMetadata",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "NewTopic",
    "RecordMetadata",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
]

log = logging.getLogger(__name__)

#: How long ``bootstrap_connected()`` waits for a broker to answer.
BOOTSTRAP_CHECK_TIMEOUT_MS: Final = 2_000
#: Iteration polls at most this long at a time (then checks consumer_timeout_ms).
ITER_POLL_TIMEOUT_MS: Final = 500

NO_AUTO_CREATE: Final = (
    "raftka never creates a topic on first use (as a broker with "
    "auto.create.topics.enable=false does); create it with KafkaAdminClient.create_topics"
)

REFUSED_COMMON: Final[Mapping[str, Refusal]] = SECURITY


def _in_flight_per_connection(face: str, opts: dict[str, Any]) -> None:
    """kafka-python's consumer and admin bound of requests in flight on one connection:
    raftka speaks HTTP/1.1 without pipelining, one request per connection at a time, so
    any bound of at least 1 holds."""
    check_ms(
        face,
        "max_in_flight_requests_per_connection",
        opts.pop("max_in_flight_requests_per_connection", 1),
        1,
    )


def _client_id(opts: dict[str, Any]) -> None:
    if "client_id" in opts and opts["client_id"] is None:
        del opts["client_id"]


def _bootstrap(opts: dict[str, Any]) -> None:
    opts["bootstrap_servers"] = bootstrap_with_ports(opts.get("bootstrap_servers", "localhost"))


def _config_dict(core: Any, opts: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python's ``client.config`` dict: the effective value of each option
    raftka has (its frozen config's, then the adapter's translated keywords), and each
    other keyword as given."""
    config = {f.name: getattr(core, f.name) for f in dataclasses.fields(core)}
    for key, value in opts.items():
        config.setdefault(key, value)
    for key, value in given.items():
        config.setdefault(key, value)
    return config


class _LazyAdmin:
    """An ``Admin`` made on first use (for ``topics()``, ``bootstrap_connected()``...),
    closed with its owner."""

    def __init__(self, **config: Any) -> None:
        self._config = config
        self._admin: Admin | None = None
        self._lock = threading.Lock()

    def get(self) -> Admin:
        with self._lock:
            if self._admin is None:
                self._admin = Admin(**self._config)
            return self._admin

    def bootstrap_connected(self) -> bool:
        try:
            self.get().describe_cluster(timeout_ms=BOOTSTRAP_CHECK_TIMEOUT_MS)
        except KafkaError:
            return False
        return True

    def close(self) -> None:
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()


# ---------------------------------------------------------------------------- producer


class RecordMetadata(NamedTuple):
    """kafka-python's ``RecordMetadata``: where an acknowledged record landed.
    ``checksum`` is None (RecordBatch v2 has no per-record checksum)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class FutureRecordMetadata(Future[RecordMetadata]):
    """What ``KafkaProducer.send`` returns: ``get(timeout)`` gives a
    :class:`RecordMetadata`; ``add_callback`` / ``add_errback`` as in kafka-python."""

    __slots__ = ()


def _metadata_converter(header_size: int) -> Callable[[RaftkaRecordMetadata], RecordMetadata]:
    def convert(md: RaftkaRecordMetadata) -> RecordMetadata:
        return RecordMetadata(
            md.topic,
            md.partition,
            TopicPartition(md.topic, md.partition),
            md.offset,
            md.timestamp,
            None,
            md.serialized_key_size,
            md.serialized_value_size,
            header_size,
        )

    return convert


_PRODUCER_MAPPED: Final = frozenset(
    {
        "acks",
        "batch_size",
        "bootstrap_servers",
        "buffer_memory",
        "client_id",
        "compression_type",
        "connections_max_idle_ms",
        "delivery_timeout_ms",
        "enable_idempotence",
        "key_serializer",
        "linger_ms",
        "max_block_ms",
        "max_in_flight_requests_per_connection",
        "max_request_size",
        "metadata_max_age_ms",
        "partitioner",
        "request_timeout_ms",
        "retries",
        "retry_backoff_ms",
        "transaction_timeout_ms",
        "transactional_id",
        "value_serializer",
    }
    | TLS_MAPPED
)
_PRODUCER_REFUSED: Final[Mapping[str, Refusal]] = {
    **REFUSED_COMMON,
    "allow_auto_create_topics": Refusal(equals(False), NO_AUTO_CREATE),
}


def _acks_all(acks: Any) -> bool:
    return acks in ("all", -1, "-1")


def producer_options(configs: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python's KafkaProducer keywords as raftka Producer keywords (kafka-python's
    defaults where they differ from raftka's: ``linger_ms=0``; idempotence is switched
    off, as kafka-python does, when it was not asked for and ``acks``, ``retries`` or
    ``max_in_flight_requests_per_connection`` given by the user conflict with it)."""
    opts, client = sort_client_options(
        "KafkaProducer",
        configs,
        mapped=_PRODUCER_MAPPED,
        refused=_PRODUCER_REFUSED,
    )
    if opts.get("transactional_id") is None:
        opts.pop("transactional_id", None)
    else:
        # kafka-python: transactions need 0.11 brokers and imply idempotence.
        client.refuse_unless(IDEMPOTENCE_SINCE, "transactional_id", opts["transactional_id"])
    _bootstrap(opts)
    _client_id(opts)
    if opts.get("compression_type") == "zstd":
        client.refuse_unless(ZSTD_SINCE, "compression_type", "zstd")
    opts.setdefault("linger_ms", 0)
    if opts.get("compression_type", "none") is None:
        opts["compression_type"] = "none"
    retries = opts.get("retries")
    if isinstance(retries, float) and math.isinf(retries):
        opts["retries"] = 2**31 - 1
    if opts.get("enable_idempotence", True):
        conflicts = []
        if "acks" in opts and not _acks_all(opts["acks"]):
            conflicts.append(f"acks={opts['acks']!r}")
        if opts.get("retries") == 0 and "retries" in configs:
            conflicts.append("retries=0")
        in_flight = configs.get("max_in_flight_requests_per_connection", 5)
        if isinstance(in_flight, int) and in_flight > 5:
            conflicts.append(f"max_in_flight_requests_per_connection={in_flight}")
        if conflicts:
            if "enable_idempotence" in configs or "transactional_id" in opts:
                raise ClientConfigError(
                    "enable_idempotence=True: incompatible with " + ", ".join(conflicts)
                )
            log.warning("idempotence disabled: it conflicts with %s", ", ".join(conflicts))
            opts["enable_idempotence"] = False
        elif not client.supports(IDEMPOTENCE_SINCE):
            # kafka-python's rule: refused when asked for, else switched off.
            if "enable_idempotence" in configs:
                client.refuse_unless(IDEMPOTENCE_SINCE, "enable_idempotence", True)
            log.warning("idempotence disabled: api_version=%s < (0, 11)", client.api_version)
            opts["enable_idempotence"] = False
    opts["_client"] = client
    return opts


class KafkaProducer(ClosingOnExit):
    """kafka-python's ``KafkaProducer`` over raftka's :class:`Producer` (thread-safe).

    ``send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)``
    returns a :class:`FutureRecordMetadata`; ``flush(timeout=None)`` and
    ``close(timeout=None)`` take seconds. Callbacks added to a future run on the
    producer's I/O thread: keep them short and do not call the producer's blocking
    methods from them.
    """

    def __init__(self, **configs: Any) -> None:
        opts = producer_options(configs)
        self._client: ClientOptions = opts.pop("_client")
        self._producer = Producer(**opts)
        self.config = _config_dict(self._producer.config, opts, configs)
        self._admin = _LazyAdmin(
            bootstrap_servers=opts["bootstrap_servers"],
            request_timeout_ms=self._producer.config.request_timeout_ms,
            default_api_timeout_ms=self._producer.config.request_timeout_ms,
            client_id=self._producer.config.client_id,
            **tls_options(opts),
        )
        self._closed = False
        self._lock = threading.Lock()
        self._sent = 0
        self._acked = 0
        self._failed = 0

    def send(  # noqa: PLR0917  (kafka-python's positional order)
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; the future of its :class:`RecordMetadata`. Blocks at most
        ``max_block_ms`` for metadata and buffer room (then KafkaTimeoutError)."""
        if self._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        header_size = -1
        if headers is not None:
            if not isinstance(headers, list):
                raise TypeError("headers must be list-type")
            if not all(
                isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) for h in headers
            ):
                raise TypeError("All headers items must be (str, bytes) tuples")
            if headers:
                self._client.require(HEADERS_SINCE, f"send(headers=...) ({NO_HEADERS})")
                header_size = sum(len(k.encode()) + len(v or b"") for k, v in headers)
        try:
            inner = self._producer.send(
                topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
            )
        except UnknownTopicOrPartitionError as e:
            raise TopicMetadataTimeoutError(e.message) from e
        with self._lock:
            self._sent += 1
        inner.add_done_callback(self._count)
        return FutureRecordMetadata(inner, _metadata_converter(header_size))

    def _count(self, done: concurrent.futures.Future[Any]) -> None:
        failed = done.cancelled() or done.exception() is not None
        with self._lock:
            if failed:
                self._failed += 1
            else:
                self._acked += 1

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait (at most ``timeout`` seconds; then
        KafkaTimeoutError) until every record sent before is acknowledged or failed."""
        self._producer.flush(timeout_ms=ms_from_s("flush", timeout))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered (waiting at most ``timeout`` seconds), then stop.
        Idempotent."""
        timeout_ms = ms_from_s("close", timeout)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._producer.close(timeout_ms=timeout_ms)
        finally:
            self._admin.close()

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition numbers (waits at most ``max_block_ms`` for metadata)."""
        return self._producer.partitions_for(topic)

    # kafka-python 2.1's transactional API (needs transactional_id): raftka's own calls,
    # each bounded by max_block_ms.

    def init_transactions(self) -> None:
        self._producer.init_transactions()

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, Any], consumer_group_id: Any
    ) -> None:
        """``offsets`` as ``commit`` takes them; ``consumer_group_id`` a group id
        or, better (KIP-447), ``consumer.group_metadata()``."""
        converted = offsets_to_commit(offsets)
        assert converted is not None
        self._producer.send_offsets_to_transaction(converted, consumer_group_id)

    def commit_transaction(self) -> None:
        self._producer.commit_transaction()

    def abort_transaction(self) -> None:
        self._producer.abort_transaction()

    def bootstrap_connected(self) -> bool:
        """Whether a broker answers now (asked with a bound of 2 s)."""
        return not self._closed and self._admin.bootstrap_connected()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """The producer's counters, kafka-python's shape ``{group: {name: value}}``:
        ``record-send-total`` (records accepted by ``send``), ``record-ack-total``,
        ``record-error-total``. (kafka-python's full metric set is not provided.)"""
        if not self._client.metrics_wanted(raw):
            return {}
        with self._lock:
            return {
                "producer-metrics": {
                    "record-send-total": float(self._sent),
                    "record-ack-total": float(self._acked),
                    "record-error-total": float(self._failed),
                }
            }


# ---------------------------------------------------------------------------- consumer


class ConsumerRecord(NamedTuple):
    """kafka-python's ``ConsumerRecord``, its fields in its order. ``timestamp_type``
    is 0 (CreateTime) or 1 (LogAppendTime); ``headers`` a list of ``(str, bytes)``;
    ``checksum`` None; ``serialized_header_size`` -1 (not measured)."""

    topic: str
    partition: int
    leader_epoch: int | None
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


def _record(r: RaftkaConsumerRecord, headers: bool = True) -> ConsumerRecord:
    return ConsumerRecord(
        r.topic,
        r.partition,
        r.leader_epoch,
        r.offset,
        r.timestamp,
        int(r.timestamp_type),
        r.key,
        r.value,
        list(r.headers) if headers else [],
        None,
        r.serialized_key_size,
        r.serialized_value_size,
        -1,
    )


def assignment_strategy(value: Any) -> tuple[str, ...]:
    """kafka-python's / aiokafka's ``partition_assignment_strategy`` (assignor classes
    with a ``name``, or names) as raftka's assignor names."""
    items = [value] if isinstance(value, str) or not isinstance(value, Iterable) else value
    names = []
    for item in items:
        name = item if isinstance(item, str) else getattr(item, "name", None)
        if name not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
            raise ClientConfigError(
                f"partition_assignment_strategy={value!r}: raftka runs its own assignors "
                "(range, roundrobin, sticky, cooperative-sticky), not custom ones; "
                f"{item!r} is none of them"
            )
        names.append(name)
    return tuple(names)


def offsets_to_commit(
    offsets: Mapping[TopicPartition, Any] | None,
) -> dict[TopicPartition, OffsetAndMetadata] | None:
    """kafka-python's / aiokafka's commit offsets (``OffsetAndMetadata`` with
    ``metadata=None`` or ``leader_epoch=-1``, a bare int, or an aiokafka
    ``(offset, metadata)`` pair) as raftka's."""
    if offsets is None:
        return None
    out = {}
    for tp, given in offsets.items():
        if isinstance(given, int) and not isinstance(given, bool):
            offset, metadata, epoch = given, "", None
        elif isinstance(given, tuple) and len(given) in (2, 3):
            offset, metadata = given[0], given[1]
            epoch = given[2] if len(given) == 3 else None
        else:
            raise TypeError(f"offset for {tp}: expected OffsetAndMetadata or int, not {given!r}")
        if epoch is not None and epoch < 0:
            epoch = None
        out[TopicPartition(tp.topic, tp.partition)] = OffsetAndMetadata(
            offset, "" if metadata is None else metadata, epoch
        )
    return out


class _Listener(ConsumerRebalanceListener):
    """A kafka-python / aiokafka listener as raftka's: ``on_partitions_lost`` falls back
    to ``on_partitions_revoked`` when the listener has none."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return self.inner.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return self.inner.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        handler = getattr(self.inner, "on_partitions_lost", None)
        if handler is None:
            return self.inner.on_partitions_revoked(lost)
        return handler(lost)


def listener_for(listener: Any) -> ConsumerRebalanceListener | None:
    if listener is None or isinstance(listener, ConsumerRebalanceListener):
        return listener
    for method in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, method, None)):
            raise TypeError(f"listener {listener!r} has no {method}()")
    return _Listener(listener)


# consumer_timeout_ms stays in: the adapter's iterator, not raftka's Consumer, uses it.
_CONSUMER_MAPPED: Final = CONSUMER_MAPPED | {"consumer_timeout_ms"} | TLS_MAPPED
_CONSUMER_REFUSED: Final[Mapping[str, Refusal]] = {
    **REFUSED_COMMON,
    "allow_auto_create_topics": Refusal(equals(False), NO_AUTO_CREATE),
    "exclude_internal_topics": EXCLUDE_INTERNAL_TOPICS,
    "default_offset_commit_callback": Refusal(
        is_none,
        "raftka's auto-commit reports failures in its log only; commit with "
        "commit_async(callback=...) to hear about each commit",
    ),
    "client_rack": Refusal(equals(""), "raftka consumers fetch from the leader only"),
    "metric_group_prefix": Refusal(
        equals("consumer"), "metrics() reports kafka-python's default group names only"
    ),
    "enable_incremental_fetch_sessions": Refusal(
        equals(False), "raftka's fetches name their partitions every time (no KIP-227 sessions)"
    ),
    "legacy_iterator": Refusal(
        equals(False), "raftka iterates as kafka-python's current iterator does"
    ),
    "sock_chunk_bytes": Refusal(is_none, "raftka reads answers through aiohttp, not in chunks"),
    "sock_chunk_buffer_count": Refusal(
        is_none, "raftka reads answers through aiohttp, not in chunks"
    ),
}
_OFFSET_RESET_ALIASES: Final = {"smallest": "earliest", "largest": "latest"}


def consumer_options(face: str, configs: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python's KafkaConsumer keywords as raftka Consumer keywords (with
    kafka-python's ``partition_assignment_strategy`` default: range, roundrobin);
    ``consumer_timeout_ms`` stays in (the adapter's, not raftka's)."""
    opts, client = sort_client_options(
        face,
        configs,
        mapped=_CONSUMER_MAPPED,
        handled={"max_in_flight_requests_per_connection"},
        refused=_CONSUMER_REFUSED,
    )
    _in_flight_per_connection(face, opts)
    _bootstrap(opts)
    _client_id(opts)
    _versioned_group_options(client, opts, configs)
    reset = opts.get("auto_offset_reset")
    if isinstance(reset, str):
        opts["auto_offset_reset"] = _OFFSET_RESET_ALIASES.get(reset, reset)
    opts["partition_assignment_strategy"] = assignment_strategy(
        opts.get("partition_assignment_strategy", ("range", "roundrobin"))
    )
    timeout = opts.setdefault("consumer_timeout_ms", float("inf"))
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise ClientConfigError(
            f"consumer_timeout_ms={timeout!r}: expected a number of milliseconds >= 0"
        )
    opts["_client"] = client
    return opts


#: kafka-python's session timeout default against brokers before 3.0 (KIP-735).
SESSION_TIMEOUT_PRE_3_0_MS: Final = 30_000


def _versioned_group_options(
    client: ClientOptions, opts: dict[str, Any], given: Mapping[str, Any]
) -> None:
    """kafka-python's consumer rules for an ``api_version`` that predates a feature:
    no read_committed before 0.11, no static membership before 2.3, and its
    session_timeout_ms / max_poll_interval_ms defaults before 0.10.1 and 3.0."""
    if opts.get("isolation_level") == "read_committed":
        client.refuse_unless(IDEMPOTENCE_SINCE, "isolation_level", "read_committed")
    if opts.get("group_instance_id") is not None:
        client.refuse_unless(
            STATIC_MEMBERSHIP_SINCE, "group_instance_id", opts["group_instance_id"]
        )
    version = client.api_version
    if version is None:
        return
    if version < OFFSETS_FOR_TIMES_SINCE:
        # No max.poll.interval.ms before KIP-62: one timeout serves both.
        if "session_timeout_ms" not in given and "max_poll_interval_ms" in given:
            opts["session_timeout_ms"] = opts["max_poll_interval_ms"]
        if "max_poll_interval_ms" not in given:
            opts["max_poll_interval_ms"] = opts.get("session_timeout_ms", 45_000)
        if opts["max_poll_interval_ms"] != opts.get("session_timeout_ms", 45_000):
            raise ClientConfigError(
                f"max_poll_interval_ms={opts['max_poll_interval_ms']!r}: api_version="
                f"{version} has one timeout for both; it must equal session_timeout_ms"
            )
    elif version < (3, 0) and "session_timeout_ms" not in given:
        opts["session_timeout_ms"] = SESSION_TIMEOUT_PRE_3_0_MS


class _AssignedPartitions:
    """What kafka-python's and aiokafka's consumers do alike, and synchronously, with
    the assignment: passed to raftka's consumer (``_consumer``)."""

    _consumer: Consumer | AsyncConsumer
    #: A subscription without a group (each adapter keeps its own form), None if none.
    _groupless: object

    def unsubscribe(self) -> None:
        self._groupless = None
        self._consumer.unsubscribe()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._groupless = None
        self._consumer.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(partition, offset)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._consumer.highwater(partition)

    def pause(self, *partitions: TopicPartition) -> None:
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._consumer.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return self._consumer.paused()


class KafkaConsumer(ClosingOnExit, _AssignedPartitions):
    """kafka-python's ``KafkaConsumer`` over raftka's :class:`Consumer`.

    ``KafkaConsumer(*topics, **configs)`` subscribes to ``topics`` when any are given.
    With a ``group_id`` the group's coordinator assigns the partitions; without one, as
    in kafka-python, a subscription is served by assigning every partition of the
    topics (those they have at the first ``poll``) with no commits.

    Iterating (``for record in consumer``, ``next(consumer)``) takes a whole batch per
    ``poll`` and hands its records over one at a time (raftka's ``Consumer``
    iteration); positions and commits never run ahead of what the loop has received:
    ``commit()``, ``position()`` and ``close()`` count only records handed over, and
    ``poll``, ``seek``, ``assign``, ``pause`` and the like first seek back each partition
    to its first record not handed over. With ``consumer_timeout_ms`` the iteration ends
    after that long without a record (the default, infinity, waits forever).
    """

    _consumer: Consumer

    def __init__(self, *topics: str, **configs: Any) -> None:
        opts = consumer_options("KafkaConsumer", configs)
        self._client: ClientOptions = opts.pop("_client")
        #: Before 0.11 records travel as message format v1, which has no headers.
        self._headers = self._client.supports(HEADERS_SINCE)
        self._consumer_timeout_ms: float = opts.pop("consumer_timeout_ms")
        self._consumer = Consumer(**opts)
        self.config = _config_dict(self._consumer.config, opts, configs)
        self.config["consumer_timeout_ms"] = self._consumer_timeout_ms
        self._group_id: str | None = opts.get("group_id")
        self._auto_commit: bool = bool(opts.get("enable_auto_commit", True))
        self._admin = _LazyAdmin(
            bootstrap_servers=opts["bootstrap_servers"],
            request_timeout_ms=self._consumer.config.request_timeout_ms,
            default_api_timeout_ms=self._consumer.config.request_timeout_ms,
            client_id=self._consumer.config.client_id,
            **tls_options(opts),
        )
        # A subscription without a group: resolved to partitions at the first poll.
        self._groupless: tuple[frozenset[str], str | None] | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._consumed = 0
        self._commits = 0
        if topics:
            self.subscribe(topics)

    # ------------------------------------------------------------------ assignment

    def subscribe(
        self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None
    ) -> None:
        """Subscribe to ``topics`` or a regular expression ``pattern`` (matched against
        whole topic names). ``listener``: a ConsumerRebalanceListener (group only)."""
        names = [topics] if isinstance(topics, str) else list(topics)
        if self._group_id is None:
            if listener is not None:
                raise IllegalStateError("a rebalance listener needs a group_id")
            if bool(names) == (pattern is not None):
                raise ValueError("subscribe() takes topics or a pattern, not both or neither")
            self._consumer.assign([])
            self._groupless = (frozenset(names), pattern)
            return
        self._consumer.subscribe(names, pattern, listener_for(listener))

    def _ensure_groupless_assignment(self) -> None:
        if self._groupless is None or self._consumer.assignment():
            return
        names, pattern = self._groupless
        if pattern is not None:
            regex = re.compile(pattern)
            names = frozenset(
                t
                for t in self._admin.get().list_topics()
                if regex.fullmatch(t) and not t.startswith("__")
            )
        partitions = [
            TopicPartition(topic, p)
            for topic in sorted(names)
            for p in sorted(self._consumer.partitions_for_topic(topic))
        ]
        self._consumer.assign(partitions)

    def subscription(self) -> set[str] | None:
        """The topics subscribed to (None when not subscribed, as kafka-python)."""
        if self._groupless is not None:
            names, _ = self._groupless
            return set(names) or {tp.topic for tp in self._consumer.assignment()}
        return self._consumer.subscription() or None

    # ------------------------------------------------------------------ reading

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, waiting at most ``timeout_ms`` for some."""
        if not update_offsets:
            raise ValueError("poll(update_offsets=False) is not supported by raftka")
        self._ensure_groupless_assignment()
        batch = self._consumer.poll(int(timeout_ms), max_records)
        headers = self._headers
        out = {tp: [_record(r, headers) for r in records] for tp, records in batch.items()}
        if out:
            with self._lock:
                self._consumed += sum(len(v) for v in out.values())
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        if self._closed:
            raise StopIteration("KafkaConsumer closed")
        timeout = self._consumer_timeout_ms
        deadline = None if math.isinf(timeout) else time.monotonic() + timeout / 1000
        while True:
            wait_ms = ITER_POLL_TIMEOUT_MS
            if deadline is not None:
                wait_ms = max(0, min(wait_ms, math.ceil((deadline - time.monotonic()) * 1000)))
            self._ensure_groupless_assignment()
            record = self._consumer._next_record(wait_ms)
            if record is not None:
                with self._lock:
                    self._consumed += 1
                return _record(record, self._headers)
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration

    # ------------------------------------------------------------------ positions

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_beginning(*partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_end(*partitions)

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        self._ensure_groupless_assignment()
        return self._consumer.position(partition, timeout_ms)

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._consumer.beginning_offsets(list(partitions), timeout_ms)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._consumer.end_offsets(list(partitions), timeout_ms)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._client.require(OFFSETS_FOR_TIMES_SINCE, "offsets_for_times")
        return self._consumer.offsets_for_times(dict(timestamps), timeout_ms)

    # ------------------------------------------------------------------ commits

    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition) and
        wait. IllegalStateError without a group_id."""
        self._need_group()
        self._consumer.commit(offsets_to_commit(offsets), timeout_ms)
        with self._lock:
            self._commits += 1

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        callback: Callable[[Any, Any], Any] | None = None,
    ) -> Future[Any]:
        """Commit in the background; ``callback(offsets, exception_or_None)`` runs on
        the consumer's I/O thread when done. Returns a Future of the offsets."""
        self._need_group()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_running_or_notify_cancel()

        def on_commit(committed: Any, error: BaseException | None) -> None:
            try:
                if callback is not None:
                    callback(committed, error)
            finally:
                if error is None:
                    with self._lock:
                        self._commits += 1
                    done.set_result(committed)
                else:
                    done.set_exception(error)

        self._consumer.commit_async(offsets_to_commit(offsets), on_commit)
        return Future(done)

    def committed(
        self, partition: TopicPartition, metadata: bool = False, timeout_ms: int | None = None
    ) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``partition`` (an OffsetAndMetadata with
        ``metadata=True``), None when there is none."""
        self._need_group()
        if not isinstance(partition, TopicPartition):
            raise TypeError("partition must be a TopicPartition namedtuple")
        found = self._consumer.committed([partition], timeout_ms).get(partition)
        if found is None:
            return None
        return found if metadata else found.offset

    def _need_group(self) -> None:
        if self._group_id is None:
            raise IllegalStateError("Requires group_id")

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._consumer.group_metadata()

    # ------------------------------------------------------------------ cluster

    def topics(self) -> set[str]:
        """Every topic of the cluster (internal ones excluded)."""
        return self._admin.get().list_topics()

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The topic's partition numbers, None when it does not exist."""
        try:
            (described,) = self._admin.get().describe_topics([topic])
        except UnknownTopicOrPartitionError:
            return None
        return {p.partition for p in described.partitions}

    def bootstrap_connected(self) -> bool:
        """Whether a broker answers now (asked with a bound of 2 s)."""
        return not self._closed and self._admin.bootstrap_connected()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """The consumer's counters, kafka-python's shape ``{group: {name: value}}``:
        ``records-consumed-total`` and ``commit-total``. (kafka-python's full metric
        set is not provided.)"""
        if not self._client.metrics_wanted(raw):
            return {}
        with self._lock:
            return {
                "consumer-fetch-manager-metrics": {"records-consumed-total": float(self._consumed)},
                "consumer-coordinator-metrics": {"commit-total": float(self._commits)},
            }

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (with ``enable_auto_commit``), leave the group, stop. Idempotent."""
        if not autocommit and self._group_id is not None and self._auto_commit:
            raise ValueError(
                "close(autocommit=False): raftka's consumer commits on close when "
                "enable_auto_commit=True; create it with enable_auto_commit=False instead"
            )
        if timeout_ms is not None:
            raise ValueError(
                "close(timeout_ms=...): raftka's close is bounded by request_timeout_ms "
                "and takes no timeout"
            )
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._consumer.close()
        finally:
            self._admin.close()


# ---------------------------------------------------------------------------- admin


class NewTopic:
    """kafka-python's ``NewTopic(name, num_partitions=-1, replication_factor=-1,
    replica_assignments=None, topic_configs=None)`` (-1: the broker's default)."""

    def __init__(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignments: Mapping[int, Sequence[int]] | None = None,
        topic_configs: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = dict(replica_assignments or {})
        self.topic_configs = dict(topic_configs or {})

    def to_raftka(self) -> RaftkaNewTopic:
        return RaftkaNewTopic(
            self.name,
            self.num_partitions,
            self.replication_factor,
            replica_assignment=(
                {int(p): tuple(r) for p, r in self.replica_assignments.items()}
                if self.replica_assignments
                else None
            ),
            configs={k: None if v is None else str(v) for k, v in self.topic_configs.items()},
        )

    def __repr__(self) -> str:
        return (
            f"NewTopic(name={self.name!r}, num_partitions={self.num_partitions}, "
            f"replication_factor={self.replication_factor}, "
            f"replica_assignments={self.replica_assignments}, "
            f"topic_configs={self.topic_configs})"
        )


class ConfigResourceType(enum.IntEnum):
    """kafka-python's ``ConfigResourceType`` (raftka's admin handles TOPIC only)."""

    BROKER = 4
    TOPIC = 2


class ConfigResource:
    """kafka-python's ``ConfigResource(resource_type, name, configs=None)``."""

    def __init__(
        self,
        resource_type: ConfigResourceType | str,
        name: str,
        configs: Mapping[str, str | None] | None = None,
    ) -> None:
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = resource_type
        self.name = name
        self.configs = None if configs is None else dict(configs)

    def topic(self) -> str:
        if self.resource_type is not ConfigResourceType.TOPIC:
            raise ValueError(
                f"{self.resource_type.name} configs: raftka's admin client handles topic "
                "configs only (broker configs live in each broker's file)"
            )
        return self.name


_ADMIN_MAPPED: Final = frozenset(
    {
        "bootstrap_servers",
        "client_id",
        "connections_max_idle_ms",
        "metadata_max_age_ms",
        "request_timeout_ms",
        "retry_backoff_ms",
    }
    | TLS_MAPPED
)


#: The Kafka release that brought each admin request, as kafka-python checks against
#: ``api_version`` (the rest, metadata and ListGroups, predate 0.10).
# ---------------------------------------------------------------------------------------
# ACLs: kafka-python's classes (kafka.admin), with its argument orders. The enums are
# raftka's (raftka.common.acl): the same names and Kafka's codes.


@dataclasses.dataclass(frozen=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    resource_name: str | None
    pattern_type: ACLResourcePatternType


@dataclasses.dataclass(frozen=True)
class ResourcePattern(ResourcePatternFilter):
    pattern_type: ACLResourcePatternType = ACLResourcePatternType.LITERAL


@dataclasses.dataclass(frozen=True)
class ACLFilter:
    principal: str | None
    host: str | None
    operation: ACLOperation
    permission_type: ACLPermissionType
    resource_pattern: ResourcePatternFilter

    def to_raftka(self) -> AclBindingFilter:
        p = self.resource_pattern
        return AclBindingFilter(
            p.resource_type,
            p.resource_name,
            p.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission_type,
        )


@dataclasses.dataclass(frozen=True)
class ACL(ACLFilter):
    """A concrete ACL (every field set); raftka checks it when it is sent."""

    def binding(self) -> AclBinding:
        # None (a filter's "any") becomes "", which the binding refuses by name.
        p = self.resource_pattern
        return AclBinding(
            RaftkaResourcePattern(p.resource_type, p.resource_name or "", p.pattern_type),
            AccessControlEntry(
                self.principal or "", self.host or "", self.operation, self.permission_type
            ),
        )

    @staticmethod
    def of(binding: AclBinding) -> ACL:
        p, e = binding.pattern, binding.entry
        return ACL(
            e.principal,
            e.host,
            e.operation,
            e.permission_type,
            ResourcePattern(p.resource_type, p.name, p.pattern_type),
        )


_ADMIN_SINCE: Final = {
    "create_acls": (0, 11),
    "describe_acls": (0, 11),
    "delete_acls": (0, 11),
    "create_topics": (0, 10, 1),
    "delete_topics": (0, 10, 1),
    "create_partitions": (1, 0),
    "delete_records": (0, 11),
    "describe_configs": (0, 11),
    "alter_configs": (0, 11),
    "delete_consumer_groups": (1, 1),
}


class KafkaAdminClient(ClosingOnExit):
    """kafka-python's ``KafkaAdminClient`` over raftka's :class:`Admin` (thread-safe).
    Each call's bound is its ``timeout_ms`` or else ``request_timeout_ms``; errors are
    raised typed (``TopicAlreadyExistsError``...)."""

    def __init__(self, **configs: Any) -> None:
        opts, self._client = sort_client_options(
            "KafkaAdminClient",
            configs,
            mapped=_ADMIN_MAPPED,
            handled={"max_in_flight_requests_per_connection"},
            refused=REFUSED_COMMON,
        )
        _in_flight_per_connection("KafkaAdminClient", opts)
        _bootstrap(opts)
        _client_id(opts)
        opts["default_api_timeout_ms"] = opts.get("request_timeout_ms", 30_000)
        self._admin = Admin(**opts)
        self._groups: GroupAdmin | None = None
        self._group_options: dict[str, Any] = {
            k: opts[k]
            for k in (
                "bootstrap_servers",
                "client_id",
                "request_timeout_ms",
                "retry_backoff_ms",
                "send_buffer_bytes",
                "receive_buffer_bytes",
            )
            if k in opts
        }
        self._group_options["default_api_timeout_ms"] = opts["default_api_timeout_ms"]
        self._group_options.update(tls_options(opts))
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ topics

    def create_topics(
        self,
        new_topics: Iterable[NewTopic | RaftkaNewTopic],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        self._client.require(_ADMIN_SINCE["create_topics"], "create_topics")
        topics = [t.to_raftka() if isinstance(t, NewTopic) else t for t in new_topics]
        self._admin.create_topics(topics, validate_only=validate_only, timeout_ms=timeout_ms)

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None) -> None:
        self._client.require(_ADMIN_SINCE["delete_topics"], "delete_topics")
        self._admin.delete_topics(list(topics), timeout_ms=timeout_ms)

    def list_topics(self) -> list[str]:
        """Every topic's name, internal ones included (as kafka-python)."""
        return sorted(self._admin.list_topics(list_internal=True))

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """kafka-python's shape: a dict per topic with ``topic``, ``is_internal``,
        ``error_code`` and ``partitions`` (``partition``, ``leader``, ``replicas``,
        ``isr``, ``offline_replicas``, ``error_code``)."""
        described = self._admin.describe_topics(None if topics is None else list(topics))
        return [
            {
                "error_code": 0,
                "topic": t.name,
                "is_internal": t.is_internal,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition": p.partition,
                        "leader": -1 if p.leader is None else p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                    }
                    for p in t.partitions
                ],
            }
            for t in described
        ]

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        self._client.require(_ADMIN_SINCE["create_partitions"], "create_partitions")
        self._admin.create_partitions(
            dict(topic_partitions), validate_only=validate_only, timeout_ms=timeout_ms
        )

    def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition, int],
        timeout_ms: int | None = None,
        partition_leader_id: int | None = None,
    ) -> dict[TopicPartition, dict[str, int]]:
        """Delete the records below each offset; ``{tp: {"low_watermark": n}}``."""
        self._client.require(_ADMIN_SINCE["delete_records"], "delete_records")
        if partition_leader_id is not None:
            raise ValueError("delete_records(partition_leader_id=...): raftka finds the leader")
        done = self._admin.delete_records(dict(records_to_delete), timeout_ms=timeout_ms)
        return {tp: {"low_watermark": low} for tp, low in done.items()}

    def describe_cluster(self) -> dict[str, Any]:
        cluster = self._admin.describe_cluster()
        return {
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in cluster.brokers
            ],
            "cluster_id": None,
            "controller_id": -1 if cluster.controller_id is None else cluster.controller_id,
        }

    # ------------------------------------------------------------------ ACLs

    def create_acls(self, acls: Iterable[ACL]) -> dict[str, list[Any]]:
        """``{"succeeded": [ACL...], "failed": [error...]}`` as kafka-python 3 returns
        (its errors are classes, raftka's are the raised KafkaError instances, so the
        message says which ACL failed)."""
        self._client.require(_ADMIN_SINCE["create_acls"], "create_acls")
        wanted = list(acls)
        results: dict[str, list[Any]] = {"succeeded": [], "failed": []}
        sendable: dict[AclBinding, ACL] = {}
        for acl in wanted:
            if not isinstance(acl, ACL):
                raise ValueError("create_acls: acls must be ACL objects")
            try:
                sendable[acl.binding()] = acl
            except KafkaError as e:
                results["failed"].append(e)
        outcome: Mapping[AclBinding, KafkaError | None] = dict.fromkeys(sendable)
        try:
            self._admin.create_acls(list(sendable))
        except KafkaError as e:
            outcome = getattr(e, "results", None) or dict.fromkeys(sendable, e)
        for binding, acl in sendable.items():
            error = outcome.get(binding)
            if error is None:
                results["succeeded"].append(acl)
            else:
                results["failed"].append(error)
        return results

    def describe_acls(self, acl_filter: ACLFilter) -> tuple[list[ACL], None]:
        """``(acls, None)``: kafka-python returns ``(acls, NoError)``."""
        self._client.require(_ADMIN_SINCE["describe_acls"], "describe_acls")
        return [ACL.of(b) for b in self._admin.describe_acls(acl_filter.to_raftka())], None

    def delete_acls(
        self, acl_filters: Iterable[ACLFilter]
    ) -> list[tuple[ACLFilter, list[ACL], KafkaError | None]]:
        """Per filter ``(filter, deleted ACLs, None)`` as kafka-python 3 (which gives
        NoError where raftka gives None); a filter raftka refuses raises its error."""
        self._client.require(_ADMIN_SINCE["delete_acls"], "delete_acls")
        wanted = list(acl_filters)
        deleted = self._admin.delete_acls([f.to_raftka() for f in wanted])
        return [(f, [ACL.of(b) for b in deleted[f.to_raftka()]], None) for f in wanted]

    # ------------------------------------------------------------------ configs

    def describe_configs(
        self, config_resources: Iterable[ConfigResource], include_synonyms: bool = False
    ) -> dict[str, dict[str, str | None]]:
        """Topic configs only: ``{topic: {name: value}}`` (every config, or those named
        in the resource's ``configs``). A raftka shape: kafka-python returns protocol
        response objects."""
        self._client.require(_ADMIN_SINCE["describe_configs"], "describe_configs")
        if include_synonyms:
            raise ValueError("describe_configs(include_synonyms=True) is not supported")
        out: dict[str, dict[str, str | None]] = {}
        for resource in config_resources:
            topic = resource.topic()
            keys = None if not resource.configs else list(resource.configs)
            entries = self._admin.describe_configs([topic], keys=keys)[topic]
            out[topic] = {name: entry.value for name, entry in entries.items()}
        return out

    def alter_configs(self, config_resources: Iterable[ConfigResource]) -> None:
        """Set each resource's ``configs`` (a value of None resets one to its default);
        configs not named are left alone (raftka's incremental semantics)."""
        self._client.require(_ADMIN_SINCE["alter_configs"], "alter_configs")
        self._admin.alter_configs(
            {resource.topic(): dict(resource.configs or {}) for resource in config_resources}
        )

    # ------------------------------------------------------------------ groups

    def _group_admin(self) -> GroupAdmin:
        with self._lock:
            if self._groups is None:
                self._groups = GroupAdmin(**self._group_options)
            return self._groups

    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """``[(group_id, protocol_type)]``."""
        return [(g.group_id, g.protocol_type) for g in self._group_admin().list_groups()]

    def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (only ``partitions`` when given)."""
        found = self._group_admin().list_offsets(group_id)
        if partitions is None:
            return found
        wanted = set(partitions)
        return {tp: o for tp, o in found.items() if tp in wanted}

    def delete_consumer_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> list[tuple[str, None]]:
        """Delete the groups; ``[(group_id, None)]`` (a failure is raised, typed)."""
        self._client.require(_ADMIN_SINCE["delete_consumer_groups"], "delete_consumer_groups")
        ids = list(group_ids)
        self._group_admin().delete_groups(ids)
        return [(g, None) for g in ids]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            groups, self._groups = self._groups, None
        try:
            self._admin.close()
        finally:
            if groups is not None:
                groups.close()
