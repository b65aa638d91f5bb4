"""The source: batch and streaming readers over raftka partitions (the I/O shell).

Driver side (``partitions``, ``initialOffset``, ``latestOffset``) asks the cluster
through one :class:`~raftka.client.Admin`: which partitions match the subscription, and
their log start and high-watermark offsets; the decisions are
:mod:`raftka.client.spark.planning`'s. Executor side (``read``) runs on a pickled copy
of the reader: it opens a :class:`~raftka.client.Consumer` for one offset range and
yields Arrow RecordBatches of at most :data:`ROWS_PER_BATCH` rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from raftka.client.admin import Admin
from raftka.client.consumer.consumer import Consumer
from raftka.client.spark.arrow import records_to_batch
from raftka.client.spark.offsets import EARLIEST, LATEST, from_offset_dict, to_offset_dict
from raftka.client.spark.options import OffsetsSpec, SourceOptions, SparkOptionError
from raftka.client.spark.planning import (
    OffsetRange,
    Offsets,
    TriggerLimit,
    next_end,
    plan_ranges,
    split_ranges,
)
from raftka.client.structs import ConsumerRecord, TopicPartition
from raftka.common.errors import UnknownTopicOrPartitionError

__all__ = [
    "ROWS_PER_BATCH",
    "RaftkaBatchReader",
    "RaftkaStreamReader",
    "RangePartition",
    "read_range",
]

log = logging.getLogger(__name__)

#: Rows per Arrow RecordBatch handed to Spark.
ROWS_PER_BATCH: Final = 8192
#: How long latestOffset reuses the cluster's end offsets: Spark polls it in a tight
#: loop while idle with a zero trigger interval.
LATEST_CACHE_MS: Final = 200
#: Driver-side admin calls (metadata, list offsets) take at most this long.
ADMIN_TIMEOUT_MS: Final = 30_000
# One poll waits at most this long before checking the range's progress deadline.
_POLL_MS: Final = 500


def _now_ms() -> int:
    return int(time.time() * 1000)


class RangePartition(InputPartition):
    """One Spark input partition: one offset range of one raftka partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets


class _Cluster:
    """Driver-side lookups through one Admin client (created on first use)."""

    def __init__(self, opts: SourceOptions) -> None:
        self._opts = opts
        self._admin: Admin | None = None
        # read_committed's end offsets (last stable offsets) come from a read_committed
        # consumer: its ListOffsets carries the isolation level, the Admin's does not.
        self._lso_reader: Consumer | None = None

    def admin(self) -> Admin:
        if self._admin is None:
            common = {
                k: v
                for k, v in self._opts.consumer.items()
                if k in ("client_id", "request_timeout_ms", "retry_backoff_ms")
            }
            self._admin = Admin(
                **self._opts.connection,
                default_api_timeout_ms=ADMIN_TIMEOUT_MS,
                **common,
            )
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._lso_reader is not None:
            self._lso_reader.close()
            self._lso_reader = None

    def _last_stable(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if self._lso_reader is None:
            self._lso_reader = Consumer(
                **self._opts.connection,
                isolation_level="read_committed",
                default_api_timeout_ms=ADMIN_TIMEOUT_MS,
                **self._opts.consumer,
            )
        return self._lso_reader.end_offsets(list(tps), ADMIN_TIMEOUT_MS)

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now. A subscribed or assigned topic
        that does not exist fails when failOnDataLoss is true (and reads nothing until it
        appears otherwise)."""
        sub = self._opts.subscription
        admin = self.admin()
        existing = admin.list_topics(list_internal=True, timeout_ms=ADMIN_TIMEOUT_MS)
        if sub.kind == "subscribePattern":
            wanted = sorted(t for t in existing if sub.matches(t))
        else:
            named = (
                sub.topics
                if sub.kind == "subscribe"
                else sorted({tp.topic for tp in sub.partitions})
            )
            missing = [t for t in named if t not in existing]
            if missing and self._opts.fail_on_data_loss:
                option = "subscribe" if sub.kind == "subscribe" else "assign"
                raise SparkOptionError(
                    f"option {option}: topic {', '.join(map(repr, missing))} does not exist "
                    "(failOnDataLoss=true; create the topic, or set failOnDataLoss=false "
                    "to wait for it)"
                )
            wanted = [t for t in named if t in existing]
        if not wanted:
            return []
        try:
            described = admin.describe_topics(wanted, timeout_ms=ADMIN_TIMEOUT_MS)
        except UnknownTopicOrPartitionError:
            return []  # deleted between the two calls: nothing to read now
        tps = [TopicPartition(d.name, p.partition) for d in described for p in d.partitions]
        if sub.kind == "assign":
            present = set(tps)
            missing_tps = [tp for tp in sub.partitions if tp not in present]
            if missing_tps and self._opts.fail_on_data_loss:
                raise SparkOptionError(
                    f"option assign: partition {', '.join(map(str, missing_tps))} does not exist"
                )
            tps = [tp for tp in sub.partitions if tp in present]
        return sorted(tps)

    def offsets(self, tps: Sequence[TopicPartition], spec: str | int) -> dict[TopicPartition, int]:
        """Log start ("earliest"), the end ("latest": the high watermark, or the last
        stable offset under read_committed, as Spark's source with read_committed), or
        the first offset at or after a timestamp (-1 where there is none)."""
        if not tps:
            return {}
        if spec == "latest" and self._opts.isolation_level == "read_committed":
            return self._last_stable(tps)
        found = self.admin().list_offsets(
            {tp: spec for tp in tps},  # type: ignore[misc]
            timeout_ms=ADMIN_TIMEOUT_MS,
        )
        return {tp: found[tp].offset for tp in tps}

    def resolve(
        self, spec: OffsetsSpec, tps: Sequence[TopicPartition], *, strategy: str
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for a starting or ending spec."""
        if spec.kind == "timestamp":
            assert spec.timestamp_ms is not None
            found = self.offsets(tps, spec.timestamp_ms)
            none = [tp for tp, off in found.items() if off < 0]
            if none and strategy == "error":
                raise SparkOptionError(
                    f"option startingTimestamp: no record at or after {spec.timestamp_ms} in "
                    f"{', '.join(map(str, none))} (startingOffsetsByTimestampStrategy=latest "
                    "starts those at the end instead)"
                )
            latest = self.offsets(none, "latest")
            return {tp: latest[tp] if off < 0 else off for tp, off in found.items()}
        want = {tp: spec.for_partition(tp) for tp in tps}
        earliest = self.offsets([tp for tp, s in want.items() if s == EARLIEST], "earliest")
        latest = self.offsets([tp for tp, s in want.items() if s == LATEST], "latest")
        return {tp: earliest.get(tp, latest.get(tp, s)) for tp, s in want.items()}


def _planned_partitions(
    opts: SourceOptions,
    start: Offsets,
    end: Offsets,
    earliest: Offsets,
) -> list[RangePartition]:
    """The input partitions reading [start, end) (``plan_ranges``), with a warning for
    each range lost to retention that failOnDataLoss=false lets the read skip."""
    ranges, problems = plan_ranges(start, end, earliest, fail_on_data_loss=opts.fail_on_data_loss)
    for problem in problems:
        log.warning("raftka source: %s (failOnDataLoss=false: skipped)", problem)
    pieces = split_ranges(
        ranges,
        min_partitions=opts.min_partitions,
        max_records_per_partition=opts.max_records_per_partition,
    )
    return [RangePartition(r) for r in pieces]


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator[Any]:
    """Arrow RecordBatches holding exactly the records [start, end) of one partition
    (fewer where compaction removed some; under read_committed, without the records of
    aborted transactions and the transaction markers: the consumer's position moves
    past those offsets, so they are gaps, not a stall). Fails when no progress is made for
    ``kafkaConsumer.pollTimeoutMs``: the records are below the high watermark, so a
    stall means the cluster cannot serve them."""
    if rng.count == 0:
        return
    tp = TopicPartition(rng.topic, rng.partition)
    settings: dict[str, Any] = {"max_poll_records": ROWS_PER_BATCH, **opts.consumer}
    # failOnDataLoss=false: records deleted meanwhile are skipped (reset to the log start).
    reset = "none" if opts.fail_on_data_loss else "earliest"
    with Consumer(
        **opts.connection,
        auto_offset_reset=reset,
        isolation_level=opts.isolation_level,
        **settings,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, rng.start)
        position = rng.start
        pending: list[ConsumerRecord] = []
        stalled_since = time.monotonic()
        while position < rng.end:
            got = consumer.poll(_POLL_MS, max_records=ROWS_PER_BATCH).get(tp, [])
            for record in got:
                if record.offset >= rng.end:
                    break
                pending.append(record)
            # The consumer's position also moves past offsets holding no record.
            moved = max(consumer.position(tp), got[-1].offset + 1 if got else position)
            if moved > position:
                position = moved
                stalled_since = time.monotonic()
            elif (time.monotonic() - stalled_since) * 1000 > opts.poll_timeout_ms:
                raise TimeoutError(
                    f"{tp}: no records after offset {position} for "
                    f"{opts.poll_timeout_ms} ms (range {rng.start}..{rng.end}; "
                    "kafkaConsumer.pollTimeoutMs)"
                )
            if len(pending) >= ROWS_PER_BATCH or (position >= rng.end and pending):
                yield records_to_batch(pending, include_headers=opts.include_headers)
                pending = []


class RaftkaBatchReader(DataSourceReader):
    """``spark.read.format("raftka")``: startingOffsets..endingOffsets, planned once."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        cluster = _Cluster(self.opts)
        try:
            tps = cluster.partitions()
            strategy = self.opts.timestamp_strategy
            start = cluster.resolve(self.opts.starting, tps, strategy=strategy)
            end = cluster.resolve(self.opts.ending, tps, strategy=strategy)
            for tp in tps:
                if end[tp] < start[tp]:
                    raise SparkOptionError(
                        f"options startingOffsets/endingOffsets: {tp} starts at {start[tp]}, "
                        f"after its end {end[tp]}"
                    )
            earliest = cluster.offsets(tps, "earliest")
        finally:
            cluster.close()
        return _planned_partitions(self.opts, start, end, earliest)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.opts, partition.offsets)


class RaftkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("raftka")``. Offsets: {"topic": {"partition": next
    offset}}. One instance lives in the driver's Python process for the whole query;
    executors get pickled copies holding the options only."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cluster = _Cluster(opts)
        self._target: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = _now_ms()
        self._latest: dict[TopicPartition, int] = {}
        self._latest_at_ms: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    def _latest_offsets(self, *, fresh: bool = False) -> dict[TopicPartition, int]:
        now = _now_ms()
        if fresh or self._latest_at_ms is None or now - self._latest_at_ms >= LATEST_CACHE_MS:
            tps = self._cluster.partitions()
            self._latest = self._cluster.offsets(tps, "latest")
            self._latest_at_ms = now
        return self._latest

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        tps = self._cluster.partitions()
        start = self._cluster.resolve(
            self.opts.starting, tps, strategy=self.opts.timestamp_strategy
        )
        return to_offset_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _trigger_limit(self, limit: ReadLimit) -> TriggerLimit:
        if isinstance(limit, ReadAllAvailable):
            return TriggerLimit()  # the engine's trigger asks for everything (Once, ...)
        max_offsets = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_offsets = limit.min_rows if isinstance(limit, ReadMinRows) else None
        if max_offsets is None:
            max_offsets = self.opts.max_offsets_per_trigger
        if min_offsets is None:
            min_offsets = self.opts.min_offsets_per_trigger
        if self._target is not None:
            # availableNow must finish: waiting for more data would never end.
            min_offsets = None
        return TriggerLimit(
            max_offsets=max_offsets,
            min_offsets=min_offsets,
            max_trigger_delay_ms=self.opts.max_trigger_delay_ms,
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        begin = from_offset_dict(start)
        latest = self._latest_offsets()
        new = [tp for tp in latest if tp not in begin]
        earliest = self._cluster.offsets(new, "earliest")
        now = _now_ms()
        end = next_end(
            begin,
            latest,
            earliest,
            limit=self._trigger_limit(limit),
            target=self._target,
            last_trigger_ms=self._last_trigger_ms,
            now_ms=now,
        )
        if end is None:
            return start
        self._last_trigger_ms = now
        return to_offset_dict(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return to_offset_dict(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = dict(self._latest_offsets(fresh=True))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = from_offset_dict(start), from_offset_dict(end)
        earliest = self._cluster.offsets(sorted(finish), "earliest")
        return _planned_partitions(self.opts, begin, finish, earliest)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.opts, partition.offsets)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's checkpoint (no consumer group)."""

    def stop(self) -> None:
        self._cluster.close()
