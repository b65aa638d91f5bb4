"""The sink: batch and streaming writers (the I/O shell).

``write()`` runs on executors: it turns the input Arrow batches into producer records
(:func:`raftka.client.spark.arrow.sink_records`) and sends them through an
:class:`~raftka.client.AsyncProducer` with acks=all, then flushes; a record that fails
fails the task. Delivery is at least once, like Spark's Kafka sink. The streaming
writer adds replay protection (see :mod:`raftka.client.spark.commit_log` and
docs/spark.md): before writing, a task looks up the last micro-batch this query
committed; a replayed batch writes nothing. The driver's ``commit(messages, batchId)``
records the batch as committed.

Transactional mode (option ``kafka.transactional.id``, a prefix): each streaming task
(query Q, batch B, Spark partition P) writes its rows in ONE transaction of the
transactional id ``<prefix>-<Q>-<P>`` (:func:`transactional_ids`), and commits in that
same transaction the offset B for key ``(__raftka_spark_sink, P)`` of the consumer group
``<prefix>-<Q>`` (TxnOffsetCommit): the rows and the record "P of Q committed B" become
visible together or not at all. A task first calls InitProducerId, which fences every
earlier attempt with the same id (its open transaction is aborted, or a commit under
way finished), then reads that offset back with require_stable; B already there means
an earlier attempt (or the run before a restart) committed this batch: write nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from raftka.client.admin import Admin
from raftka.client.consumer.consumer import AsyncConsumer, Consumer
from raftka.client.producer.producer import AsyncProducer, Producer
from raftka.client.spark.arrow import sink_records
from raftka.client.spark.commit_log import (
    SINK_COMMITS_TOPIC,
    CommitMarker,
    decode_marker,
    encode_marker,
    last_committed,
)
from raftka.client.spark.options import SinkOptions
from raftka.client.structs import NewTopic, OffsetAndMetadata, TopicPartition
from raftka.common.errors import TopicAlreadyExistsError

__all__ = [
    "RaftkaBatchWriter",
    "RaftkaStreamWriter",
    "SinkCommitMessage",
    "TxnTarget",
    "committed_batch",
    "produce",
    "produce_transaction",
    "record_commit",
    "transactional_ids",
]

#: Bound on admin and marker lookups made by the sink.
SINK_API_TIMEOUT_MS: Final = 30_000
#: Spark's local properties naming the micro-batch and the (restart-stable) query.
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_MARKERS_TP: Final = TopicPartition(SINK_COMMITS_TOPIC, 0)
# Records produced between two yields to the event loop (lets the sender run).
_SENDS_PER_YIELD: Final = 1024


@dataclass(frozen=True, slots=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one write task did."""

    records: int
    query_id: str | None = None
    batch_id: int | None = None
    partition_id: int | None = None
    skipped: bool = False


def _producer_settings(opts: SinkOptions) -> dict[str, Any]:
    # acks=all unless the user chose otherwise: the records must survive a leader loss
    # before the batch counts as committed.
    return {"acks": "all", "linger_ms": 5, **opts.producer}


async def _send_all(opts: SinkOptions, producer: AsyncProducer, batches: Iterator[Any]) -> int:
    """Send every row of the Arrow batches and flush; the number sent (raises the first
    delivery error)."""
    sent = 0
    failures: list[BaseException] = []

    def delivered(_md: Any, exc: BaseException | None) -> None:
        if exc is not None and len(failures) < 1:
            failures.append(exc)

    for batch in batches:
        for record in sink_records(batch, topic_option=opts.topic):
            await producer.send(
                record.topic,
                record.value,
                record.key,
                partition=record.partition,
                headers=record.headers or None,
                callback=delivered,
            )
            sent += 1
            if sent % _SENDS_PER_YIELD == 0:
                if failures:
                    raise failures[0]
                await asyncio.sleep(0)
    await producer.flush()
    if failures:
        raise failures[0]
    return sent


async def _produce_async(opts: SinkOptions, batches: Iterator[Any]) -> int:
    async with AsyncProducer(**opts.connection, **_producer_settings(opts)) as producer:
        return await _send_all(opts, producer, batches)


def produce(opts: SinkOptions, batches: Iterator[Any]) -> int:
    """Send every row of the Arrow batches; returns how many, once all are acknowledged
    (raises the first delivery error)."""
    return asyncio.run(_produce_async(opts, batches))


@dataclass
class _CommitView:
    """One executor process's view of the commit topic, and the clients it reads with
    (kept open: Spark reuses Python workers, so later tasks skip the connection set-up)."""

    admin: Admin
    consumer: Consumer
    next_offset: int = 0
    last: dict[str, int] = field(default_factory=dict)


# Per executor process, per bootstrap string and TLS settings. Bounded by the number of
# clusters a job writes to; the clients' threads are daemons and end with the worker.
_VIEWS: dict[tuple[str, tuple[tuple[str, object], ...]], _CommitView] = {}
_VIEWS_LOCK = threading.Lock()


def _view(opts: SinkOptions) -> _CommitView:
    key = (opts.bootstrap_servers, tuple(sorted(opts.security.items())))
    view = _VIEWS.get(key)
    if view is None:
        view = _CommitView(
            admin=Admin(
                **opts.connection,
                default_api_timeout_ms=SINK_API_TIMEOUT_MS,
            ),
            consumer=Consumer(
                **opts.connection,
                auto_offset_reset="earliest",
                default_api_timeout_ms=SINK_API_TIMEOUT_MS,
            ),
        )
        _VIEWS[key] = view
    return view


def committed_batch(opts: SinkOptions, query_id: str) -> int:
    """The highest micro-batch of ``query_id`` the sink recorded as committed; -1 if
    none."""
    with _VIEWS_LOCK:
        view = _view(opts)
        if SINK_COMMITS_TOPIC not in view.admin.list_topics(list_internal=True):
            return view.last.get(query_id, -1)
        end = view.admin.list_offsets({_MARKERS_TP: "latest"})[_MARKERS_TP].offset
        if end > view.next_offset:
            consumer = view.consumer
            if not consumer.assignment():
                consumer.assign([_MARKERS_TP])
            consumer.seek(_MARKERS_TP, view.next_offset)
            deadline = time.monotonic() + SINK_API_TIMEOUT_MS / 1000
            while consumer.position(_MARKERS_TP) < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"could not read {SINK_COMMITS_TOPIC} up to offset {end} in "
                        f"{SINK_API_TIMEOUT_MS} ms"
                    )
                got = consumer.poll(500).get(_MARKERS_TP, [])
                markers = (decode_marker(r.value) for r in got if r.offset < end)
                last_committed((m for m in markers if m is not None), view.last)
            view.next_offset = end
        return view.last.get(query_id, -1)


def record_commit(opts: SinkOptions, marker: CommitMarker) -> None:
    """Append the marker to the commit topic (created on first use) with acks=all."""
    with Admin(**opts.connection, default_api_timeout_ms=SINK_API_TIMEOUT_MS) as admin:
        if SINK_COMMITS_TOPIC not in admin.list_topics(list_internal=True):
            brokers = len(admin.describe_cluster().brokers)
            replicas = max(1, min(3, brokers))
            configs = {"min.insync.replicas": "2"} if replicas >= 3 else {}
            # Another query's commit may make it first.
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(SINK_COMMITS_TOPIC, 1, replicas, configs=configs)])
    key, value = encode_marker(marker)
    with Producer(**opts.connection, acks="all", max_block_ms=SINK_API_TIMEOUT_MS) as producer:
        producer.send(SINK_COMMITS_TOPIC, value, key, partition=0).result(
            SINK_API_TIMEOUT_MS / 1000 + 5
        )


def transactional_ids(prefix: str, query_id: str, partition_id: int) -> tuple[str, str]:
    """(transactional.id, consumer group) of Spark partition ``partition_id`` of query
    ``query_id``: the same for every batch and attempt, and across restarts from the
    same checkpoint (Spark keeps the query id there), so each attempt fences the last."""
    return f"{prefix}-{query_id}-{partition_id}", f"{prefix}-{query_id}"


def _drain(iterator: Iterator[Any]) -> None:
    for _ in iterator:
        pass  # Spark still streams the input to the worker: drain it


async def _committed_batch_async(opts: SinkOptions, group: str, key: TopicPartition) -> int:
    """The batch id committed for ``key`` in ``group``; -1 for none. read_committed:
    the lookup waits for a transaction still ending rather than miss its offset."""
    async with AsyncConsumer(
        **opts.connection,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        default_api_timeout_ms=SINK_API_TIMEOUT_MS,
    ) as consumer:
        found = (await consumer.committed([key]))[key]
    return -1 if found is None else found.offset


@dataclass(frozen=True, slots=True)
class TxnTarget:
    """What one transactional write task writes under: its transactional id and, in
    streaming, the group, key and batch id of its marker (None in batch writes)."""

    transactional_id: str
    group: str | None = None
    key: TopicPartition | None = None
    batch_id: int = 0


async def _produce_transaction_async(
    opts: SinkOptions, batches: Iterator[Any], target: TxnTarget
) -> int | None:
    settings = {**_producer_settings(opts), "transactional_id": target.transactional_id}
    group, key = target.group, target.key
    async with AsyncProducer(**opts.connection, **settings) as producer:
        # First fence every earlier attempt: after this no other producer of this id can
        # commit, so the offset read next is final.
        await producer.init_transactions()
        if (
            group is not None
            and key is not None
            and await _committed_batch_async(opts, group, key) >= target.batch_id
        ):
            _drain(batches)
            return None
        producer.begin_transaction()
        # On an error the producer's close aborts the open transaction.
        sent = await _send_all(opts, producer, batches)
        if group is not None and key is not None:
            meta = f"batch {target.batch_id}: {sent} records"
            await producer.send_offsets_to_transaction(
                {key: OffsetAndMetadata(target.batch_id, meta)}, group
            )
        await producer.commit_transaction()
    return sent


def produce_transaction(opts: SinkOptions, batches: Iterator[Any], target: TxnTarget) -> int | None:
    """Write the rows and commit offset ``batch_id`` for ``key`` in ``group`` in one
    transaction of ``transactional_id``; None (and nothing written) when ``key``
    already holds ``batch_id`` or later. Without a group (batch writes): the rows
    alone, in one transaction."""
    return asyncio.run(_produce_transaction_async(opts, batches, target))


class RaftkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("raftka")``: at least once (a retried task writes again); with
    ``kafka.transactional.id`` each task's rows are one transaction, so a failed
    attempt's rows are aborted."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        prefix = self.opts.transactional_id_prefix
        if prefix is None:
            return SinkCommitMessage(records=produce(self.opts, iterator))
        ctx = TaskContext.get()
        partition_id = 0 if ctx is None else ctx.partitionId()
        # One transaction per task: a failed attempt's rows are aborted (its retry
        # fences it); there is no batch id to skip a committed task's rerun by.
        written = produce_transaction(self.opts, iterator, TxnTarget(f"{prefix}-{partition_id}"))
        return SinkCommitMessage(records=written or 0)


class RaftkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("raftka")``: at least once, and a micro-batch replayed
    after its sink commit is not written again (``replayProtection``, default true);
    exactly once for read_committed readers with ``kafka.transactional.id`` (see the
    module docstring)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        query_id = batch_text = None
        partition_id = None
        if ctx is not None:
            query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
            batch_text = ctx.getLocalProperty(BATCH_ID_PROPERTY)
            partition_id = ctx.partitionId()
        batch_id = None if batch_text is None else int(batch_text)
        prefix = self.opts.transactional_id_prefix
        if prefix is not None:
            if query_id is None or batch_id is None or partition_id is None:
                raise RuntimeError(
                    "kafka.transactional.id: Spark gave the write task no query id, batch id "
                    "or partition id, so its transaction cannot be named"
                )
            txn_id, group = transactional_ids(prefix, query_id, partition_id)
            key = TopicPartition(SINK_COMMITS_TOPIC, partition_id)
            written = produce_transaction(
                self.opts, iterator, TxnTarget(txn_id, group, key, batch_id)
            )
            return SinkCommitMessage(
                written or 0, query_id, batch_id, partition_id, skipped=written is None
            )
        replayed = (
            self.opts.replay_protection
            and query_id is not None
            and batch_id is not None
            and committed_batch(self.opts, query_id) >= batch_id
        )
        if replayed:
            _drain(iterator)
            return SinkCommitMessage(0, query_id, batch_id, partition_id, skipped=True)
        records = produce(self.opts, iterator)
        return SinkCommitMessage(records, query_id, batch_id, partition_id)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if not self.opts.replay_protection or self.opts.transactional_id_prefix is not None:
            return  # transactional mode: each task committed its own batch marker
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        query_ids = {m.query_id for m in done if m.query_id}
        if not done or not query_ids:
            return  # no task ran: nothing was written, nothing to protect
        assert len(query_ids) == 1, query_ids
        if all(m.skipped for m in done):
            return  # a replay of a batch already recorded
        marker = CommitMarker(
            query_id=query_ids.pop(),
            batch_id=batchId,
            records=sum(m.records for m in done),
            committed_ms=int(time.time() * 1000),
        )
        record_commit(self.opts, marker)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Records already written stay (at least once); nothing is recorded."""
