"""Micro-batch planning: how far a trigger reads, and which offset ranges it covers.

Pure: positions, end offsets and the clock come in as arguments; decisions come out.

- :func:`split_read_limit` shares ``maxOffsetsPerTrigger`` between partitions in
  proportion to their backlog (largest-remainder rounding, so the shares add up to
  exactly the limit or the whole backlog, whichever is smaller).
- :func:`next_end` is ``latestOffset``: the availableNow target cap, then
  ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (too little data and not waited long
  enough: stay put), then the max split.
- :func:`plan_ranges` turns (start, end) into per-partition ranges and finds data loss
  (a partition that vanished, an offset that went backwards, records already deleted).
- :func:`split_ranges` cuts those ranges into more Spark input partitions, for
  ``minPartitions`` and ``maxRecordsPerPartition`` (Spark's Kafka source options).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raftka.client.structs import TopicPartition

__all__ = [
    "DataLossError",
    "OffsetRange",
    "TriggerLimit",
    "next_end",
    "plan_ranges",
    "split_ranges",
    "split_read_limit",
]

Offsets = Mapping[TopicPartition, int]


class DataLossError(RuntimeError):
    """Records the query should have read are gone (failOnDataLoss=true)."""


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Records [start, end) of one partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        assert 0 <= self.start <= self.end, self

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerLimit:
    """What bounds one trigger: at most ``max_offsets`` records, at least ``min_offsets``
    unless ``max_trigger_delay_ms`` passed since the last trigger that read."""

    max_offsets: int | None = None
    min_offsets: int | None = None
    max_trigger_delay_ms: int = 0


def _backlog(start: Offsets, latest: Offsets, tp: TopicPartition) -> int:
    return max(0, latest[tp] - start[tp])


def split_read_limit(start: Offsets, latest: Offsets, limit: int) -> dict[TopicPartition, int]:
    """End offsets that read at most ``limit`` records in total, each partition's share
    in proportion to its backlog. ``start`` must cover every partition of ``latest``."""
    assert limit >= 1
    tps = sorted(latest)
    backlog = {tp: _backlog(start, latest, tp) for tp in tps}
    total = sum(backlog.values())
    if total <= limit:
        return {tp: max(start[tp], latest[tp]) for tp in tps}
    shares = {tp: limit * backlog[tp] // total for tp in tps}
    leftover = limit - sum(shares.values())
    # The records the floor dropped go to the largest remainders, ties by partition order.
    by_remainder = sorted(tps, key=lambda tp: (-(limit * backlog[tp] % total), tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    out = {tp: start[tp] + shares[tp] for tp in tps}
    assert all(start[tp] <= out[tp] <= max(start[tp], latest[tp]) for tp in tps)
    assert sum(out[tp] - start[tp] for tp in tps) == limit
    return out


def next_end(
    start: Offsets,
    latest: Offsets,
    earliest: Offsets,
    *,
    limit: TriggerLimit,
    target: Offsets | None,
    last_trigger_ms: int,
    now_ms: int,
) -> dict[TopicPartition, int] | None:
    """The end offsets of the next micro-batch, or None to read nothing now.

    ``start``: the previous end (partitions missing from it are new and start at
    ``earliest``). ``latest``: the partitions' high watermarks now. ``target``: the
    availableNow snapshot (reads never pass it; partitions born after it wait for the
    next run). Partitions in ``start`` but gone from ``latest`` are left out of the end,
    so :func:`plan_ranges` sees them vanish and reports the loss."""
    capped = dict(latest)
    if target is not None:
        capped = {tp: min(off, target[tp]) for tp, off in latest.items() if tp in target}
    begin = {tp: start.get(tp, earliest.get(tp, 0)) for tp in capped}
    total = sum(_backlog(begin, capped, tp) for tp in capped)
    if (
        limit.min_offsets is not None
        and total < limit.min_offsets
        and now_ms - last_trigger_ms < limit.max_trigger_delay_ms
    ):
        return None
    # A high watermark below the position (topic recreated) is data loss, not "no data":
    # it goes into the end so that plan_ranges reports it.
    regressed = {tp: off for tp, off in capped.items() if off < begin[tp]}
    if total == 0 and not regressed:
        return None
    if limit.max_offsets is not None and total > 0:
        end = split_read_limit(begin, capped, limit.max_offsets)
    else:
        end = {tp: max(begin[tp], capped[tp]) for tp in capped}
    end.update(regressed)
    for tp, off in start.items():
        if tp in latest:
            end.setdefault(tp, off)  # held back by the availableNow target
    return end


def plan_ranges(
    start: Offsets,
    end: Offsets,
    earliest: Offsets,
    *,
    fail_on_data_loss: bool,
) -> tuple[list[OffsetRange], list[str]]:
    """The non-empty ranges between two offsets, and the data-loss warnings (raised as
    :class:`DataLossError` instead when ``fail_on_data_loss``). ``earliest`` holds the
    log start offset of the partitions in ``end`` (a partition new since ``start``
    starts there; one whose start was deleted by retention resumes there)."""
    problems: list[str] = []
    ranges: list[OffsetRange] = []
    for tp in sorted(set(start) - set(end)):
        problems.append(f"partition {tp} disappeared (topic deleted?) at offset {start[tp]}")
    for tp in sorted(end):
        first = start.get(tp)
        log_start = earliest.get(tp, 0)
        if first is None:
            first = log_start
        elif first < log_start:
            problems.append(
                f"partition {tp}: offsets {first}..{log_start - 1} were deleted before "
                "they were read"
            )
            first = log_start
        last = end[tp]
        if last < first:
            problems.append(
                f"partition {tp}: the end offset {last} is below the start {first} "
                "(topic recreated?)"
            )
            continue
        if last > first:
            ranges.append(OffsetRange(tp.topic, tp.partition, first, last))
    if problems and fail_on_data_loss:
        raise DataLossError(
            "; ".join(problems) + " (set failOnDataLoss=false to skip the lost records and go on)"
        )
    return ranges, problems


def split_ranges(
    ranges: list[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """``ranges`` cut into consecutive, non-empty pieces that cover exactly the same
    offsets, as Spark's Kafka source plans them (its KafkaOffsetRangeCalculator):

    - ``min_partitions``: when there are fewer ranges than that, each range is cut in
      proportion to its size, into ``ceil(size / (total / min_partitions))`` pieces, so
      there are at least ``min_partitions`` (a range is never cut below one record);
    - ``max_records_per_partition``: no piece holds more records than that.

    Neither given, or enough ranges already: ``ranges`` unchanged. Pieces of one range
    differ in size by at most one record, the larger ones first."""
    total = sum(r.count for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = 1
        if min_partitions is not None and len(ranges) < min_partitions and total > 0:
            # ceil(count * min_partitions / total), in integers: no float rounding.
            pieces = max(pieces, -(-r.count * min_partitions // total))
        if max_records_per_partition is not None:
            pieces = max(pieces, -(-r.count // max_records_per_partition))
        pieces = max(1, min(pieces, r.count))
        size, extra = divmod(r.count, pieces)
        start = r.start
        for i in range(pieces):
            end = start + size + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
        assert start == r.end, (r, pieces)
    return out
