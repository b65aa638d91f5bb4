"""Workload (d) of the fault suite: transactions and a consume-transform-produce pipeline.

Theory of operation
-------------------
Three topics of 3 partitions (RF 3, ``min.insync.replicas=2``):

* ``<topic>`` (default ``txn``): transactional producers (``txn-producer-i``, one
  transactional id each) write transactions of 1-5 unique integers, each to a random
  partition, and commit or abort each at random (``abort_ratio``). One ``txn`` op per
  transaction: the invocation holds the values and the intent, the completion is ok
  with the outcome when the client knows it (commit_transaction or abort_transaction
  returned), ``info`` when it does not (any error: the coordinator may have committed
  it). After an error the producer is closed and a new one calls init_transactions,
  which fences the old epoch and aborts whatever it left open.
* read_committed readers (``txn-reader-i``) poll every partition from offset 0, as
  the queue workload's readers do (``seek`` and ``poll`` ops).
* ``<topic>-in`` is fed by the queue workload's idempotent producer (``send`` ops);
  the pipeline, a separate OS process (``python -m raftka.chaos.txn_workload``, so a
  nemesis can kill -9 it and the heal restarts it), reads it read_committed as the
  group ``<topic>-pipeline`` and writes every record to ``<topic>-out`` (same value,
  same partition) in a transaction that also commits the consumed offsets with
  send_offsets_to_transaction. On any error it closes both clients and starts again:
  the new producer fences the old one (its open transaction aborts) and the new
  consumer resumes from the committed offsets, so each input is in the output once.

After the heal, :meth:`TxnWorkload.final_read` reads ``<topic>`` read_committed from
start to end (``final_read``), waits (bounded) until the pipeline's output holds as
many records as its input, stops the pipeline, and reads both (``pipeline_read``).
:mod:`raftka.chaos.txn_checker` judges the history.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from raftka.chaos.group_workload import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from raftka.chaos.history import HistoryWriter, Json
from raftka.chaos.nemesis import Node
from raftka.chaos.nodes import spawn_logged
from raftka.chaos.workloads import (
    POLL_WAIT_MS,
    REQUEST_TIMEOUT_MS,
    RETRY_PAUSE_S,
    SETUP_TIMEOUT_S,
    QueueConfig,
    QueueWorkload,
    _close_quietly,
    _create_until,
    _error,
    _record,
)
from raftka.client import (
    AsyncConsumer,
    AsyncProducer,
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
)
from raftka.common.errors import KafkaError

__all__ = ["TxnConfig", "TxnWorkload", "pipeline_group", "transactional_ids"]

# Short, so that a transaction a killed or fenced producer left open is aborted by the
# coordinator soon and does not hold the last stable offset for long.
TRANSACTION_TIMEOUT_MS: Final = 10_000
# Covers init_transactions and commit/abort, which wait on the coordinator (a killed
# coordinator's partition needs a new leader first).
TXN_CALL_TIMEOUT_MS: Final = 8_000
TXN_OP_TIMEOUT_S: Final = 12.0
PIPELINE_CATCH_UP_S: Final = 60.0
#: A pipeline that polls nothing for this long prints where its consumer stands.
IDLE_REPORT_S: Final = 10.0
PIPELINE_STOP_TIMEOUT_S: Final = 10.0


def pipeline_group(topic: str) -> str:
    return f"{topic}-pipeline"


def transactional_ids(topic: str, producers: int) -> list[str]:
    """The workload's transactional ids (nemeses target their coordinator); the
    pipeline's is last."""
    return [f"{topic}-producer-{i}" for i in range(producers)] + [f"{topic}-pipeline"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnConfig(QueueConfig):
    """The queue workload's topic settings; ``producers`` are transactional and
    ``consumers`` are the read_committed readers."""

    topic: str = "txn"
    producers: int = 2
    abort_ratio: float = 0.3
    max_values: int = 5
    pipeline: bool = True
    # read_uncommitted only as a negative control: the checker must then report
    # aborted reads (tests/fault/test_scenarios_txn.py shows that it bites).
    reader_isolation: Literal["read_committed", "read_uncommitted"] = "read_committed"


class TxnWorkload:
    """Transactional producers, read_committed readers and the pipeline (module doc)."""

    def __init__(
        self,
        *,
        history: HistoryWriter,
        bootstrap_servers: Sequence[str],
        bootstrap_controllers: Sequence[str],
        rng: random.Random,
        log_dir: Path,
        config: TxnConfig = TxnConfig(),
    ) -> None:
        self.history = history
        self.bootstrap_servers = list(bootstrap_servers)
        self.bootstrap_controllers = list(bootstrap_controllers)
        self.config = config
        self.rng = rng
        self.log_dir = log_dir
        self._values = itertools.count()
        c = config
        self.partitions = [TopicPartition(c.topic, p) for p in range(c.partitions)]
        self.input_topic = f"{c.topic}-in"
        self.output_topic = f"{c.topic}-out"
        # The readers and the final read: the queue workload's, read_committed.
        self.reader = _CommittedReader(
            history=history,
            bootstrap_servers=bootstrap_servers,
            bootstrap_controllers=bootstrap_controllers,
            config=QueueConfig(topic=c.topic, partitions=c.partitions, consumers=c.consumers),
        )
        self.reader.isolation_level = c.reader_isolation
        # The pipeline's input feed: the queue workload's idempotent producer.
        self.feed = QueueWorkload(
            history=history,
            bootstrap_servers=bootstrap_servers,
            bootstrap_controllers=bootstrap_controllers,
            config=QueueConfig(topic=self.input_topic, partitions=c.partitions, producers=1),
        )
        self.pipeline = Node("pipeline", self._spawn_pipeline)

    # --- setup -----------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the three topics and start the pipeline process."""
        c = self.config
        for name in (c.topic, self.input_topic, self.output_topic):
            topic = NewTopic(
                name=name,
                num_partitions=c.partitions,
                replication_factor=c.replication_factor,
                configs={"min.insync.replicas": str(c.min_insync_replicas)},
            )
            await _create_until(
                self.bootstrap_servers, self.bootstrap_controllers, topic, SETUP_TIMEOUT_S
            )
        if c.pipeline:
            self.pipeline.start()

    def _spawn_pipeline(self) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "raftka.chaos.txn_workload",
            "--bootstrap-servers",
            ",".join(self.bootstrap_servers),
            "--input",
            self.input_topic,
            "--output",
            self.output_topic,
            "--group",
            pipeline_group(self.config.topic),
            "--transactional-id",
            transactional_ids(self.config.topic, self.config.producers)[-1],
        ]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return spawn_logged(argv, self.log_dir / "pipeline.log")

    def close(self) -> None:
        """Stop the pipeline process (idempotent)."""
        self.pipeline.stop()

    # --- the faulty phase ------------------------------------------------------------

    async def run(self, stop: threading.Event) -> None:
        c = self.config
        rngs = [random.Random(self.rng.getrandbits(64)) for _ in range(c.producers)]
        tasks = [self._producer(i, rngs[i], stop) for i in range(c.producers)]
        tasks += [self.reader._consumer(f"txn-reader-{i}", stop) for i in range(c.consumers)]
        if c.pipeline:
            tasks.append(self.feed._producer(1000, stop))  # the feed is process 1000
        await asyncio.gather(*tasks)

    def _new_producer(self, index: int) -> AsyncProducer:
        return _txn_producer(
            self.bootstrap_servers,
            f"chaos-txn-producer-{index}",
            transactional_ids(self.config.topic, self.config.producers)[index],
        )

    async def _init(self, index: int, stop: threading.Event) -> AsyncProducer | None:
        """A producer whose init_transactions succeeded (None once stopped). Every
        attempt is an ``init`` operation in the history, so a run whose producers never
        initialise says why (the checker counts them; they decide no anomaly)."""
        process = f"txn-producer-{index}"
        while not stop.is_set():
            producer = self._new_producer(index)
            inv = self.history.invoke(process, "init", None)
            try:
                async with asyncio.timeout(TXN_OP_TIMEOUT_S):
                    await producer.init_transactions()
                self.history.ok(inv)
                return producer
            except (KafkaError, OSError, TimeoutError) as exc:
                # info, not fail: a timed-out InitProducerId may still have bumped the
                # epoch (fencing nothing of ours that is still open).
                self.history.info(inv, _error(exc))
                await _close_producer(producer)
                await asyncio.sleep(RETRY_PAUSE_S)
        return None

    async def _producer(self, index: int, rng: random.Random, stop: threading.Event) -> None:
        c = self.config
        process = f"txn-producer-{index}"
        producer = await self._init(index, stop)
        try:
            while producer is not None and not stop.is_set():
                values = [next(self._values) for _ in range(rng.randint(1, c.max_values))]
                writes = [(rng.randrange(c.partitions), v) for v in values]
                intent = "abort" if rng.random() < c.abort_ratio else "commit"
                inv = self.history.invoke(
                    process,
                    "txn",
                    {
                        "topic": c.topic,
                        "intent": intent,
                        "values": [{"partition": p, "value": v} for p, v in writes],
                    },
                )
                try:
                    async with asyncio.timeout(TXN_OP_TIMEOUT_S):
                        await self._transaction(producer, writes, intent)
                except (KafkaError, OSError, TimeoutError) as exc:
                    # Unknown: a commit may have reached the coordinator. A fresh
                    # producer fences this one and aborts what it left open.
                    self.history.info(inv, _error(exc))
                    await _close_producer(producer)
                    producer = await self._init(index, stop)
                    continue
                self.history.ok(inv, {"outcome": intent})
        finally:
            if producer is not None:
                await _close_producer(producer)

    async def _transaction(
        self, producer: AsyncProducer, writes: list[tuple[int, int]], intent: str
    ) -> None:
        producer.begin_transaction()
        futures = [
            await producer.send(self.config.topic, str(v).encode(), partition=p) for p, v in writes
        ]
        if intent == "abort":
            # Flushed first so that the aborted records are in the log (an abort before
            # the send drops them in the client and tests nothing on the broker).
            await producer.flush()
            await producer.abort_transaction()
            # Records that still failed (TransactionAbortedError) are collected here so
            # asyncio does not log them as never retrieved.
            await asyncio.gather(*futures, return_exceptions=True)
            return
        await producer.commit_transaction()
        for future in futures:  # commit returned: every record was acknowledged
            assert future.done(), "commit_transaction returned with a record unacknowledged"

    # --- after healing ---------------------------------------------------------------

    async def final_read(self, timeout_s: float) -> bool:
        """The read_committed final read of the transactional topic, then the
        pipeline's (see the module doc), each within ``timeout_s``."""
        ok = await self.reader.final_read(timeout_s)
        if self.config.pipeline:
            ok = await self.pipeline_read(timeout_s) and ok
        return ok

    async def pipeline_read(self, timeout_s: float) -> bool:
        inv = self.history.invoke("pipeline-reader", "pipeline_read", {})
        inputs = [TopicPartition(self.input_topic, p) for p in range(self.config.partitions)]
        outputs = [TopicPartition(self.output_topic, p) for p in range(self.config.partitions)]
        try:
            async with asyncio.timeout(timeout_s):
                input_records = await self.reader.read_all(inputs)
            # Bounded: a pipeline that lost inputs never catches up; the checker says so.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PIPELINE_CATCH_UP_S):
                    while len(await self.reader.read_all(outputs)) < len(input_records):
                        await asyncio.sleep(1.0)
            await asyncio.to_thread(self.pipeline.stop)
            async with asyncio.timeout(timeout_s):
                output_records = await self.reader.read_all(outputs)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc))
            return False
        self.history.ok(inv, {"input": input_records, "output": output_records})
        return True


class _CommittedReader(QueueWorkload):
    """The queue workload's readers and final read, read_committed. The final read
    ends at each partition's consumer position (not the last record returned: aborted
    records and transaction markers at the end return nothing)."""

    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_committed"

    async def _read_all(self, consumer: AsyncConsumer) -> list[dict[str, Json]]:
        return await self._read(consumer, self.partitions)

    async def read_all(self, partitions: list[TopicPartition]) -> list[dict[str, Json]]:
        """Every read_committed record of ``partitions`` (start to end), with a fresh
        consumer."""
        consumer = self._new_consumer("pipeline-reader")
        try:
            return await self._read(consumer, partitions)
        finally:
            await _close_quietly(consumer, self.config.op_timeout_s)

    async def _read(
        self, consumer: AsyncConsumer, partitions: list[TopicPartition]
    ) -> list[dict[str, Json]]:
        while True:
            try:
                ends = await consumer.end_offsets(partitions, timeout_ms=REQUEST_TIMEOUT_MS)
                break
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        out: list[dict[str, Json]] = []
        while True:
            try:
                positions = {
                    tp: await consumer.position(tp, timeout_ms=REQUEST_TIMEOUT_MS)
                    for tp in partitions
                }
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if all(positions[tp] >= ends[tp] for tp in partitions):
                return out
            try:
                batches = await consumer.poll(timeout_ms=POLL_WAIT_MS)
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            out += [
                _record(r) for tp in sorted(batches) for r in batches[tp] if r.offset < ends[tp]
            ]


def _txn_producer(
    bootstrap_servers: Sequence[str], client_id: str, transactional_id: str
) -> AsyncProducer:
    return AsyncProducer(
        bootstrap_servers=list(bootstrap_servers),
        client_id=client_id,
        transactional_id=transactional_id,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        acks="all",
        linger_ms=0,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=TXN_CALL_TIMEOUT_MS,
        max_block_ms=TXN_CALL_TIMEOUT_MS,
        retry_backoff_ms=100,
        metadata_max_age_ms=2_000,
    )


async def _close_producer(producer: AsyncProducer) -> None:
    with contextlib.suppress(KafkaError, OSError, TimeoutError):
        async with asyncio.timeout(REQUEST_TIMEOUT_MS / 1000 + 1):
            await producer.close(timeout_ms=REQUEST_TIMEOUT_MS)


# --- the pipeline process ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    bootstrap_servers: tuple[str, ...]
    input: str
    output: str
    group: str
    transactional_id: str


async def pipeline(config: PipelineConfig) -> None:
    """Consume-transform-produce until killed: each polled batch goes to the output in
    one transaction with its offsets; any error restarts both clients (module doc)."""
    while True:
        producer = _txn_producer(
            config.bootstrap_servers, "chaos-pipeline", config.transactional_id
        )
        consumer = AsyncConsumer(
            bootstrap_servers=list(config.bootstrap_servers),
            client_id="chaos-pipeline",
            group_id=config.group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            default_api_timeout_ms=REQUEST_TIMEOUT_MS,
            metadata_max_age_ms=2_000,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=20_000,
        )
        try:
            async with asyncio.timeout(TXN_OP_TIMEOUT_S):
                await producer.init_transactions()
            print("pipeline: initialised", flush=True)
            consumer.subscribe([config.input])
            idle_since = time.monotonic()
            while True:
                async with asyncio.timeout(TXN_OP_TIMEOUT_S):
                    moved = await _transform(consumer, producer, config.output)
                now = time.monotonic()
                if moved:
                    idle_since = now
                elif now - idle_since >= IDLE_REPORT_S:
                    # A stalled pipeline says where it stands (the fault runs have seen
                    # one read nothing for a minute after a restart, cause unknown).
                    idle_since = now
                    print(
                        f"pipeline: idle for {IDLE_REPORT_S:.0f} s; {_where(consumer)}", flush=True
                    )
        except Exception as exc:  # the process must outlive any client error
            print(f"pipeline: restarting after {_error(exc)}", flush=True)
        finally:
            await _close_producer(producer)
            await _close_quietly(consumer, REQUEST_TIMEOUT_MS / 1000)
        await asyncio.sleep(RETRY_PAUSE_S)


def _where(consumer: AsyncConsumer) -> str:
    """Each assigned partition's position, high watermark and LSO, as the consumer knows
    them (no request)."""
    parts = []
    for tp in sorted(consumer.assignment()):
        parts.append(
            f"{tp.topic}-{tp.partition} position={consumer.known_position(tp)} "
            f"hw={consumer.highwater(tp)} lso={consumer.last_stable_offset(tp)}"
        )
    return "assigned: " + (", ".join(parts) if parts else "nothing")


async def _transform(consumer: AsyncConsumer, producer: AsyncProducer, output: str) -> bool:
    """One poll's records through one transaction; False when the poll was empty."""
    batches = await consumer.poll(timeout_ms=POLL_WAIT_MS)
    if not any(batches.values()):
        return False
    producer.begin_transaction()
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp in sorted(batches):
        for r in batches[tp]:
            await producer.send(output, r.value, partition=tp.partition)
            offsets[tp] = OffsetAndMetadata(r.offset + 1)
    await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
    await producer.commit_transaction()
    return True


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The txn workload's pipeline process.")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    args = parser.parse_args(argv)
    config = PipelineConfig(
        tuple(args.bootstrap_servers.split(",")),
        args.input,
        args.output,
        args.group,
        args.transactional_id,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(pipeline(config))


if __name__ == "__main__":
    main()
