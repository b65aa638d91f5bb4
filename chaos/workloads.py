"""Workloads of the fault suite: clients on the runner that record every operation.

Every client runs on the runner (Jepsen's control node) and talks to the hosts'
addresses through raftka's own client library. Every call has a bound; an operation
whose outcome the client cannot know (a timeout, a lost connection, an error after the
request may have reached the broker) is recorded as ``info`` (unknown), never as
``fail``. ``fail`` is kept for errors that prove the operation did not happen.

* :class:`QueueWorkload`: one topic (RF 3, ``min.insync.replicas=2``), producers with
  ``acks=all`` (idempotent) sending unique integers, each to partition
  ``value % partitions``; consumers with manual assignment polling from offset 0; after
  the faults heal, :meth:`QueueWorkload.final_read` reads every partition from its start
  to its end. The history is what :mod:`raftka.chaos.checker` reads.
* :class:`MetadataWorkload`: concurrent creation and deletion of topics from a small
  pool of names through the admin client, then a final listing of the topics every
  broker agrees on; :mod:`raftka.chaos.topics_checker` judges it.

A workload's ``run`` is a coroutine that returns once ``stop`` (a threading.Event, set
by the runner's thread) is set; each client finishes its current operation first.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from raftka.chaos.history import HistoryWriter, Invocation, Json
from raftka.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    NewTopic,
    TopicPartition,
)
from raftka.common.errors import (
    InvalidReplicationFactorError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["MetadataWorkload", "QueueConfig", "QueueWorkload"]

# Bounds on every client call; the producer's own delivery timeout sits inside OP_TIMEOUT.
REQUEST_TIMEOUT_MS: Final = 2_000
DELIVERY_TIMEOUT_MS: Final = 4_000
OP_TIMEOUT_S: Final = 6.0
POLL_WAIT_MS: Final = 300
SETUP_TIMEOUT_S: Final = 30.0
RETRY_PAUSE_S: Final = 0.2
OP_PAUSE_S: Final = 0.05  # between metadata ops: keeps the history readable
FINAL_READ_RECORDS_MAX: Final = 1_000_000  # a bound on what a final read collects


def _error(exc: BaseException) -> str:
    if isinstance(exc, KafkaError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"{type(exc).__name__}: {exc}"


def _record(r: ConsumerRecord) -> dict[str, Json]:
    raw = r.value
    value: int | str = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    return {"topic": r.topic, "partition": r.partition, "offset": r.offset, "value": value}


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    topic: str = "queue"
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 3
    consumers: int = 2
    op_timeout_s: float = OP_TIMEOUT_S


class QueueWorkload:
    """Producers and consumers on one topic; see the module doc."""

    #: The readers' and the final read's (the txn workload's readers read committed).
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"

    def __init__(
        self,
        *,
        history: HistoryWriter,
        bootstrap_servers: Sequence[str],
        bootstrap_controllers: Sequence[str],
        config: QueueConfig = QueueConfig(),
    ) -> None:
        self.history = history
        self.bootstrap_servers = list(bootstrap_servers)
        self.bootstrap_controllers = list(bootstrap_controllers)
        self.config = config
        self._values = itertools.count()
        self.partitions = [TopicPartition(config.topic, p) for p in range(config.partitions)]

    # --- setup -----------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the topic (retrying until ``SETUP_TIMEOUT_S``); not part of the history."""
        c = self.config
        topic = NewTopic(
            name=c.topic,
            num_partitions=c.partitions,
            replication_factor=c.replication_factor,
            configs={"min.insync.replicas": str(c.min_insync_replicas)},
        )
        await _create_until(
            self.bootstrap_servers, self.bootstrap_controllers, topic, SETUP_TIMEOUT_S
        )

    # --- the faulty phase ------------------------------------------------------------

    async def run(self, stop: threading.Event) -> None:
        c = self.config
        tasks = [self._producer(i, stop) for i in range(c.producers)]
        tasks += [self._consumer(f"consumer-{i}", stop) for i in range(c.consumers)]
        await asyncio.gather(*tasks)

    async def _producer(self, process: int, stop: threading.Event) -> None:
        c = self.config
        producer = AsyncProducer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=f"chaos-producer-{process}",
            acks="all",
            linger_ms=0,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            max_block_ms=REQUEST_TIMEOUT_MS,
            retry_backoff_ms=100,
            metadata_max_age_ms=2_000,
        )
        try:
            while not stop.is_set():
                value = next(self._values)
                partition = value % c.partitions
                inv = self.history.invoke(
                    process, "send", {"topic": c.topic, "partition": partition, "value": value}
                )
                try:
                    future = await producer.send(c.topic, str(value).encode(), partition=partition)
                except (KafkaError, OSError) as exc:
                    # send() raised before queueing the record: it was never sent.
                    self.history.fail(inv, _error(exc))
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                try:
                    async with asyncio.timeout(c.op_timeout_s):
                        md = await asyncio.shield(future)
                except (KafkaError, OSError, TimeoutError) as exc:
                    self.history.info(inv, _error(exc))
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                self.history.ok(inv, {"partition": md.partition, "offset": md.offset})
        finally:
            try:
                async with asyncio.timeout(c.op_timeout_s):
                    await producer.close(timeout_ms=int(c.op_timeout_s * 500))
            except (KafkaError, OSError, TimeoutError):
                pass  # outstanding sends stay unknown in the history

    async def _consumer(self, name: str, stop: threading.Event) -> None:
        c = self.config
        consumer = self._new_consumer(name)
        consumer.assign(self.partitions)
        for tp in self.partitions:
            inv = self.history.invoke(
                name, "seek", {"consumer": name, "topic": tp.topic, "partition": tp.partition}
            )
            consumer.seek(tp, 0)
            self.history.ok(
                inv, {"consumer": name, "topic": tp.topic, "partition": tp.partition, "offset": 0}
            )
        try:
            while not stop.is_set():
                inv = self.history.invoke(name, "poll", {"consumer": name})
                try:
                    async with asyncio.timeout(c.op_timeout_s):
                        batches = await consumer.poll(timeout_ms=POLL_WAIT_MS)
                except (KafkaError, OSError, TimeoutError) as exc:
                    self.history.info(inv, _error(exc))
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                records = [_record(r) for tp in sorted(batches) for r in batches[tp]]
                self.history.ok(inv, {"consumer": name, "records": records})
        finally:
            await _close_quietly(consumer, c.op_timeout_s)

    def _new_consumer(self, name: str) -> AsyncConsumer:
        return AsyncConsumer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=f"chaos-{name}",
            auto_offset_reset="earliest",
            isolation_level=self.isolation_level,
            fetch_max_wait_ms=200,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            default_api_timeout_ms=REQUEST_TIMEOUT_MS,
            metadata_max_age_ms=2_000,
        )

    # --- after healing ---------------------------------------------------------------

    async def final_read(self, timeout_s: float) -> bool:
        """Read every partition from offset 0 to its end (the HW when the read starts),
        retrying within ``timeout_s``. Records ``final_read`` ok with every record, or
        info if the end was not reached in time. Returns whether it completed."""
        name = "final-reader"
        inv = self.history.invoke(name, "final_read", {"topics": [self.config.topic]})
        consumer = self._new_consumer(name)
        try:
            async with asyncio.timeout(timeout_s):
                records = await self._read_all(consumer)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc))
            return False
        finally:
            await _close_quietly(consumer, self.config.op_timeout_s)
        self.history.ok(inv, {"records": records})
        return True

    async def _read_all(self, consumer: AsyncConsumer) -> list[dict[str, Json]]:
        while True:
            try:
                ends = await consumer.end_offsets(self.partitions, timeout_ms=REQUEST_TIMEOUT_MS)
                break
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
        consumer.assign(self.partitions)
        for tp in self.partitions:
            consumer.seek(tp, 0)
        positions = {tp: 0 for tp in self.partitions}
        out: list[dict[str, Json]] = []
        while any(positions[tp] < ends[tp] for tp in self.partitions):
            try:
                batches = await consumer.poll(timeout_ms=POLL_WAIT_MS)
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            for tp in sorted(batches):
                for r in batches[tp]:
                    if r.offset < ends[tp]:
                        out.append(_record(r))
                    positions[tp] = max(positions[tp], r.offset + 1)
            assert len(out) <= FINAL_READ_RECORDS_MAX, "final read beyond its bound"
        return out


async def _close_quietly(client: AsyncConsumer | AsyncAdmin, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await client.close()
    except (KafkaError, OSError, TimeoutError):
        pass


async def _create_until(
    bootstrap_servers: Sequence[str],
    bootstrap_controllers: Sequence[str],
    topic: NewTopic,
    timeout_s: float,
) -> None:
    admin = AsyncAdmin(
        bootstrap_servers=list(bootstrap_servers),
        bootstrap_controllers=list(bootstrap_controllers),
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        default_api_timeout_ms=int(timeout_s * 1000),
    )
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    await admin.create_topics([topic])
                    return
                except TopicAlreadyExistsError:
                    return
                except (KafkaError, OSError):
                    await asyncio.sleep(RETRY_PAUSE_S)
    finally:
        await _close_quietly(admin, REQUEST_TIMEOUT_MS / 1000)


# --- metadata ------------------------------------------------------------------------

# Errors that prove a create or delete did not take effect *in this attempt*. The admin
# client retries retriable errors, so an earlier attempt may have taken effect: the topic
# checker reads these outcomes as "no information" about the topic's state, not as
# "nothing happened" (see raftka.chaos.topics_checker).
_DEFINITE: Final = (
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    InvalidReplicationFactorError,
)


class MetadataWorkload:
    """Concurrent create/delete of topics ``<prefix>-0 .. <prefix>-(names-1)``."""

    def __init__(
        self,
        *,
        history: HistoryWriter,
        bootstrap_servers: Sequence[str],
        bootstrap_controllers: Sequence[str],
        rng: random.Random,
        prefix: str = "meta",
        names: int = 6,
        processes: int = 3,
        op_timeout_s: float = OP_TIMEOUT_S,
    ) -> None:
        self.history = history
        self.bootstrap_servers = list(bootstrap_servers)
        self.bootstrap_controllers = list(bootstrap_controllers)
        self.rng = rng
        self.topics = [f"{prefix}-{i}" for i in range(names)]
        self.processes = processes
        self.op_timeout_s = op_timeout_s

    def _admin(self) -> AsyncAdmin:
        return AsyncAdmin(
            bootstrap_servers=self.bootstrap_servers,
            bootstrap_controllers=self.bootstrap_controllers,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            default_api_timeout_ms=int(self.op_timeout_s * 1000) - 500,
        )

    async def setup(self) -> None:
        """Nothing to prepare: topics come and go during the run."""

    async def run(self, stop: threading.Event) -> None:
        # One rng per process drawn up front: the op sequence per process is seeded.
        rngs = [random.Random(self.rng.getrandbits(64)) for _ in range(self.processes)]
        await asyncio.gather(*(self._process(i, rngs[i], stop) for i in range(self.processes)))

    async def _process(self, process: int, rng: random.Random, stop: threading.Event) -> None:
        admin = self._admin()
        try:
            while not stop.is_set():
                name = rng.choice(self.topics)
                if rng.random() < 0.5:
                    inv = self.history.invoke(
                        process,
                        "create_topic",
                        {"topic": name, "partitions": 1, "replication_factor": 3},
                    )
                    await self._call(inv, admin.create_topics([NewTopic(name, 1, 3)]))
                else:
                    inv = self.history.invoke(process, "delete_topic", {"topic": name})
                    await self._call(inv, admin.delete_topics([name]))
                await asyncio.sleep(OP_PAUSE_S)
        finally:
            await _close_quietly(admin, self.op_timeout_s)

    async def _call(self, inv: Invocation, call: Any) -> None:
        try:
            async with asyncio.timeout(self.op_timeout_s):
                await call
        except _DEFINITE as exc:
            self.history.fail(inv, _error(exc))
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc))
            await asyncio.sleep(RETRY_PAUSE_S)
        else:
            self.history.ok(inv)  # the checker reads the topic from the invocation

    async def final_list(self, topics_of_brokers: Any, timeout_s: float) -> bool:
        """Record ``list_topics`` (value ``{"final": true}``) once every broker reports
        the same set of pool topics; ``topics_of_brokers()`` returns one set per broker
        that answers (None for one that does not). info if they never agree in time."""
        inv = self.history.invoke("final-lister", "list_topics", {"final": True})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: list[set[str] | None] = []
        while True:
            last = await asyncio.to_thread(topics_of_brokers)
            answers = [s & set(self.topics) for s in last if s is not None]
            if len(answers) == len(last) and answers and all(a == answers[0] for a in answers):
                self.history.ok(inv, {"final": True, "topics": sorted(answers[0])})
                return True
            if loop.time() > deadline:
                self.history.info(inv, f"brokers never agreed: {last}")
                return False
            await asyncio.sleep(RETRY_PAUSE_S)
