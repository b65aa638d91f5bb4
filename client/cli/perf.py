"""``raftka perf produce`` and ``raftka perf consume``: Kafka's perf-test tools.

They read like ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``: the
producer sends ``--num-records`` records of ``--record-size`` bytes (optionally capped
at ``--throughput`` records/s), prints a line every 5 s ("N records sent, X records/sec
(Y MB/sec), Z ms avg latency, W ms max latency") and one summary line with the
50th/95th/99th/99.9th latency percentiles; the consumer reads ``--messages`` records
from every partition of a topic and prints Kafka's consumer-perf table.

The default bootstrap server is the one every client command uses
(:func:`raftka.client.cli._common.default_bootstrap_servers`: ``$RAFTKA_BOOTSTRAP_SERVERS``,
else what ``raftka up`` recorded in ``./raftka-data/cluster.json``, else
``127.0.0.1:9092``).

Latency is the time from ``send`` to the delivery callback, as in Kafka. Both tools
run the asyncio client on one event loop in this process; the producer loop yields to
the sender task once per batch worth of records, since on one loop nothing else runs
while ``send`` returns without waiting.

The statistics are pure (:class:`ProduceStats`, :class:`ConsumeStats`): times come in
as arguments, so the tests feed them fixed clocks.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

import click

from raftka.client.admin import AsyncAdmin
from raftka.client.cli._common import (
    DEFAULT_BOOTSTRAP_SERVERS,
    bootstrap_option,
    default_bootstrap_servers,
    security_options,
    topic_name_callback,
)
from raftka.client.config import ClientConfigError
from raftka.client.consumer.consumer import AsyncConsumer
from raftka.client.producer.producer import AsyncProducer, DeliveryCallback
from raftka.client.structs import NewTopic, RecordMetadata, TopicPartition
from raftka.common.errors import KafkaError, TopicAlreadyExistsError

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVERS",
    "ConsumeStats",
    "ProduceStats",
    "ProduceSummary",
    "consume_command",
    "default_bootstrap_servers",
    "percentile",
    "produce_command",
    "throttle_delay_s",
]

#: Kafka's tools report every 5 s.
REPORT_INTERVAL_MS: Final = 5_000
#: Bound on the latencies kept for percentiles: past it every n-th is sampled (as
#: Kafka's tool does), so memory stays at 4 MB whatever --num-records is.
LATENCY_SAMPLES_MAX: Final = 500_000
#: Records at most between two yields of the send loop to the sender task.
YIELD_EVERY_MAX: Final = 1_000
#: The consumer gives up after this long without a record (Kafka's --timeout default).
CONSUME_IDLE_TIMEOUT_MS: Final = 10_000
MB: Final = 1024 * 1024
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
PERCENTILES: Final = (0.5, 0.95, 0.99, 0.999)


def percentile(sorted_values: Sequence[int], fraction: float) -> int:
    """The nearest-rank percentile of an ascending sequence (0 when empty)."""
    assert 0.0 <= fraction <= 1.0, fraction
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def throttle_delay_s(*, sent: int, elapsed_ms: float, throughput: float) -> float:
    """Seconds to wait before the next send so that ``sent`` records over
    ``elapsed_ms`` stay at or under ``throughput`` records/s (<= 0: no cap)."""
    if throughput <= 0 or sent <= 0:
        return 0.0
    ahead_ms = sent * 1000.0 / throughput - elapsed_ms
    return ahead_ms / 1000.0 if ahead_ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ProduceSummary:
    records: int
    records_per_s: float
    mb_per_s: float
    latency_avg_ms: float
    latency_max_ms: float
    percentiles_ms: tuple[float, ...]  # for PERCENTILES
    errors: int

    def line(self) -> str:
        p50, p95, p99, p999 = self.percentiles_ms
        return (
            f"{self.records} records sent, {self.records_per_s:.1f} records/sec "
            f"({self.mb_per_s:.2f} MB/sec), {self.latency_avg_ms:.2f} ms avg latency, "
            f"{self.latency_max_ms:.2f} ms max latency, {p50:.2f} ms 50th, "
            f"{p95:.2f} ms 95th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th."
        )


class ProduceStats:
    """Acknowledgements counted in a running 5 s window and in total; latencies in µs.

    ``num_records`` fixes the sampling stride (every ``ceil(n / LATENCY_SAMPLES_MAX)``
    -th acknowledgement keeps its latency for the percentiles)."""

    def __init__(self, *, num_records: int, start_ms: float) -> None:
        assert num_records >= 0
        self.stride = max(1, math.ceil(num_records / LATENCY_SAMPLES_MAX))
        self.start_ms = start_ms
        self.count = 0
        self.errors = 0
        self.bytes = 0
        self.latency_total_us = 0
        self.latency_max_us = 0
        self.samples: array[int] = array("q")
        self._window_start_ms = start_ms
        self._window_count = 0
        self._window_bytes = 0
        self._window_latency_us = 0
        self._window_max_us = 0

    def record(self, *, latency_us: int, size_bytes: int) -> None:
        assert latency_us >= 0, latency_us
        if self.count % self.stride == 0:
            assert len(self.samples) < LATENCY_SAMPLES_MAX + 1
            self.samples.append(latency_us)
        self.count += 1
        self.bytes += size_bytes
        self.latency_total_us += latency_us
        self.latency_max_us = max(self.latency_max_us, latency_us)
        self._window_count += 1
        self._window_bytes += size_bytes
        self._window_latency_us += latency_us
        self._window_max_us = max(self._window_max_us, latency_us)

    def record_error(self) -> None:
        self.errors += 1

    def window_line(self, now_ms: float) -> str | None:
        """The periodic line once REPORT_INTERVAL_MS has passed (then a new window)."""
        elapsed_ms = now_ms - self._window_start_ms
        if elapsed_ms < REPORT_INTERVAL_MS:
            return None
        n = self._window_count
        line = (
            f"{n} records sent, {n * 1000.0 / elapsed_ms:.1f} records/sec "
            f"({self._window_bytes * 1000.0 / elapsed_ms / MB:.2f} MB/sec), "
            f"{self._window_latency_us / max(n, 1) / 1000:.1f} ms avg latency, "
            f"{self._window_max_us / 1000:.1f} ms max latency."
        )
        self._window_start_ms = now_ms
        self._window_count = self._window_bytes = 0
        self._window_latency_us = self._window_max_us = 0
        return line

    def summary(self, end_ms: float) -> ProduceSummary:
        elapsed_s = max(end_ms - self.start_ms, 1e-3) / 1000
        ordered = sorted(self.samples)
        return ProduceSummary(
            records=self.count,
            records_per_s=self.count / elapsed_s,
            mb_per_s=self.bytes / elapsed_s / MB,
            latency_avg_ms=self.latency_total_us / max(self.count, 1) / 1000,
            latency_max_ms=self.latency_max_us / 1000,
            percentiles_ms=tuple(percentile(ordered, f) / 1000 for f in PERCENTILES),
            errors=self.errors,
        )


CONSUME_HEADER: Final = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


@dataclass(slots=True)
class ConsumeStats:
    """Kafka's consumer-perf figures. ``start_ms`` is before the first poll; the
    fetch time starts at ``first_poll_ms`` (after partitions are found and assigned,
    which with manual assignment is the "rebalance" time)."""

    start_ms: float
    first_poll_ms: float
    records: int = 0
    bytes: int = 0

    def add(self, *, records: int, size_bytes: int) -> None:
        self.records += records
        self.bytes += size_bytes

    def line(self, *, end_ms: float, start_wall_ms: float, end_wall_ms: float) -> str:
        total_s = max(end_ms - self.start_ms, 1e-3) / 1000
        fetch_s = max(end_ms - self.first_poll_ms, 1e-3) / 1000
        mb = self.bytes / MB
        return (
            f"{_wall(start_wall_ms)}, {_wall(end_wall_ms)}, {mb:.4f}, {mb / total_s:.4f}, "
            f"{self.records}, {self.records / total_s:.4f}, "
            f"{self.first_poll_ms - self.start_ms:.0f}, {fetch_s * 1000:.0f}, "
            f"{mb / fetch_s:.4f}, {self.records / fetch_s:.4f}"
        )


def _wall(wall_ms: float) -> str:
    t = time.localtime(wall_ms / 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f":{int(wall_ms % 1000):03d}"


def _now_ms() -> float:
    return time.perf_counter_ns() / 1e6


def _payload(record_size: int, rng: random.Random) -> bytes:
    # Kafka's tool sends random uppercase letters: compressible as text is.
    return bytes(rng.randrange(65, 91) for _ in range(record_size))


# ---------------------------------------------------------------------- commands


@click.command("produce")
@click.option("--topic", required=True, callback=topic_name_callback, help="Topic to produce to.")
@click.option(
    "--create-topic/--no-create-topic",
    default=True,
    show_default=True,
    help="Create the topic first if it does not exist (with the cluster's default "
    "partitions and replication factor), as a Kafka broker's auto.create.topics.enable "
    "would for this tool.",
)
@click.option("--num-records", type=click.IntRange(min=1), required=True)
@click.option("--record-size", type=click.IntRange(min=0), default=100, show_default=True)
@click.option(
    "--throughput",
    type=float,
    default=-1,
    show_default=True,
    help="Records/s cap; -1 for none.",
)
@click.option(
    "--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True
)
@click.option("--batch-size", type=click.IntRange(min=0), default=16_384, show_default=True)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option(
    "--compression-type",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option("--buffer-memory", type=click.IntRange(min=1), default=33_554_432, show_default=True)
@click.option(
    "--max-block-ms",
    type=click.IntRange(min=0),
    default=60_000,
    show_default=True,
    help="How long send waits for metadata or buffer room.",
)
@click.option(
    "--enable-idempotence/--disable-idempotence",
    "enable_idempotence",
    default=None,
    help="Default: on with acks=all (Kafka's default), off otherwise.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Payload seed.")
@bootstrap_option
def produce_command(
    *,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str,
    batch_size: int,
    linger_ms: int,
    compression_type: str,
    buffer_memory: int,
    max_block_ms: int,
    enable_idempotence: bool | None,
    seed: int,
    bootstrap_server: str,
    create_topic: bool,
) -> None:
    """Send records as fast as allowed and report throughput and latency."""
    try:
        if create_topic and asyncio.run(ensure_topic(bootstrap_server, topic)):
            click.echo(f"created topic {topic}")
        # Idempotence (Kafka's default) requires acks=all, so it is on only for acks=all.
        producer = AsyncProducer(
            bootstrap_servers=bootstrap_server,
            **security_options(),
            acks=acks,
            batch_size=batch_size,
            linger_ms=linger_ms,
            compression_type=cast(Compression, compression_type),
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            enable_idempotence=(
                acks in ("all", "-1") if enable_idempotence is None else enable_idempotence
            ),
        )
        summary = asyncio.run(
            run_produce(
                producer,
                topic=topic,
                num_records=num_records,
                record_size=record_size,
                throughput=throughput,
                seed=seed,
                echo=click.echo,
            )
        )
    except (KafkaError, ClientConfigError, OSError, ValueError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    click.echo(summary.line())
    if summary.errors:
        raise click.ClickException(f"{summary.errors} of {num_records} records failed")


async def ensure_topic(bootstrap_servers: str, topic: str) -> bool:
    """Create ``topic`` with the cluster's defaults unless it exists; True if created."""
    async with AsyncAdmin(bootstrap_servers=bootstrap_servers, **security_options()) as admin:
        if topic in await admin.list_topics():
            return False
        try:
            await admin.create_topics([NewTopic(topic)])
        except TopicAlreadyExistsError:
            return False  # another client made it meanwhile
        return True


async def run_produce(
    producer: AsyncProducer,
    *,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    seed: int,
    echo: Callable[[str], None],
) -> ProduceSummary:
    """The produce loop (closes ``producer``); ``echo(line)`` gets the periodic lines."""
    payload = _payload(record_size, random.Random(seed))
    first_error: list[BaseException] = []
    async with producer:
        # Metadata first, so the first record's latency is not the connection's.
        await producer.partitions_for(topic)
        per_batch = producer.config.batch_size // max(record_size, 1)
        yield_every = max(1, min(YIELD_EVERY_MAX, per_batch))
        start_ms = _now_ms()
        stats = ProduceStats(num_records=num_records, start_ms=start_ms)
        size = len(payload)

        def done(sent_ns: int) -> DeliveryCallback:
            def callback(_md: RecordMetadata | None, exc: BaseException | None) -> None:
                if exc is not None:
                    stats.record_error()
                    if not first_error:
                        first_error.append(exc)
                    return
                stats.record(latency_us=(time.perf_counter_ns() - sent_ns) // 1000, size_bytes=size)

            return callback

        for i in range(num_records):
            sent_ns = time.perf_counter_ns()
            await producer.send(topic, payload, callback=done(sent_ns))
            if (i + 1) % yield_every == 0:
                now_ms = sent_ns / 1e6
                delay_s = throttle_delay_s(
                    sent=i + 1, elapsed_ms=now_ms - start_ms, throughput=throughput
                )
                # The sleep lets the sender task and the socket callbacks run.
                await asyncio.sleep(delay_s)
                line = stats.window_line(now_ms)
                if line is not None:
                    echo(line)
            elif throughput > 0:
                delay_s = throttle_delay_s(
                    sent=i + 1, elapsed_ms=sent_ns / 1e6 - start_ms, throughput=throughput
                )
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
        await producer.flush()
        end_ms = _now_ms()
    if first_error:
        echo(f"first delivery error: {type(first_error[0]).__name__}: {first_error[0]}")
    return stats.summary(end_ms)


@click.command("consume")
@click.option(
    "--topic",
    required=True,
    callback=topic_name_callback,
    help="Topic to read (every partition).",
)
@click.option("--messages", type=click.IntRange(min=1), required=True, help="Records to read.")
@click.option(
    "--from-beginning/--from-latest",
    default=True,
    show_default=True,
    help="Start at each partition's log start (default) or its end.",
)
@click.option(
    "--fetch-max-bytes", type=click.IntRange(min=1), default=52_428_800, show_default=True
)
@click.option(
    "--max-partition-fetch-bytes",
    type=click.IntRange(min=1),
    default=1_048_576,
    show_default=True,
)
@click.option(
    "--timeout",
    "timeout_ms",
    type=click.IntRange(min=1),
    default=CONSUME_IDLE_TIMEOUT_MS,
    show_default=True,
    help="Give up after this many ms without a record.",
)
@bootstrap_option
def consume_command(
    *,
    topic: str,
    messages: int,
    from_beginning: bool,
    fetch_max_bytes: int,
    max_partition_fetch_bytes: int,
    timeout_ms: int,
    bootstrap_server: str,
) -> None:
    """Read records from every partition of a topic and report throughput."""
    try:
        line, records = asyncio.run(
            run_consume(
                bootstrap_servers=bootstrap_server,
                topic=topic,
                messages=messages,
                from_beginning=from_beginning,
                fetch_max_bytes=fetch_max_bytes,
                max_partition_fetch_bytes=max_partition_fetch_bytes,
                timeout_ms=timeout_ms,
            )
        )
    except (KafkaError, ClientConfigError, OSError, ValueError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    click.echo(CONSUME_HEADER)
    click.echo(line)
    if records < messages:
        raise click.ClickException(
            f"read {records} of {messages} records: none arrived for {timeout_ms} ms"
        )


async def run_consume(
    *,
    bootstrap_servers: str,
    topic: str,
    messages: int,
    from_beginning: bool,
    fetch_max_bytes: int,
    max_partition_fetch_bytes: int,
    timeout_ms: int,
) -> tuple[str, int]:
    """Read ``messages`` records (or until ``timeout_ms`` passes with none); the
    summary row and the count read."""
    start_wall_ms = time.time() * 1000
    start_ms = _now_ms()
    reset: Literal["earliest", "latest"] = "earliest" if from_beginning else "latest"
    async with AsyncConsumer(
        bootstrap_servers=bootstrap_servers,
        **security_options(),
        auto_offset_reset=reset,
        fetch_max_bytes=fetch_max_bytes,
        max_partition_fetch_bytes=max_partition_fetch_bytes,
        max_poll_records=10_000,
    ) as consumer:
        partitions = await consumer.partitions_for_topic(topic)
        consumer.assign(TopicPartition(topic, p) for p in sorted(partitions))
        stats = ConsumeStats(start_ms=start_ms, first_poll_ms=_now_ms())
        last_record_ms = stats.first_poll_ms
        while stats.records < messages:
            batches = await consumer.poll(timeout_ms=100, max_records=messages - stats.records)
            now_ms = _now_ms()
            for records in batches.values():
                size = 0
                for r in records:
                    size += max(r.serialized_value_size, 0) + max(r.serialized_key_size, 0)
                stats.add(records=len(records), size_bytes=size)
                last_record_ms = now_ms
            if now_ms - last_record_ms >= timeout_ms:
                break
        end_ms = _now_ms()
    line = stats.line(end_ms=end_ms, start_wall_ms=start_wall_ms, end_wall_ms=time.time() * 1000)
    return line, stats.records
