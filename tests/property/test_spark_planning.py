"""Properties of the connector's planning core (hypothesis).

- split_read_limit reads exactly min(limit, backlog) records, never past a partition's
  end nor before its start, and a partition's share never exceeds its proportional share
  rounded up;
- next_end with a max limit, applied trigger after trigger, reaches the availableNow
  target without ever passing it;
- streaming offsets survive to_offset_dict -> JSON -> from_offset_dict unchanged, and
  equal offsets always print as the same string;
- split_ranges covers exactly the offsets it was given, in consecutive non-empty pieces,
  at least min(minPartitions, records) of them when there were fewer ranges, none
  larger than maxRecordsPerPartition, and changes nothing when neither asks for more.
"""

from __future__ import annotations

import itertools
import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.client.spark.offsets import from_offset_dict, to_offset_dict
from raftka.client.spark.planning import (
    OffsetRange,
    TriggerLimit,
    next_end,
    plan_ranges,
    split_ranges,
    split_read_limit,
)
from raftka.client.structs import TopicPartition

partitions = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 20)),
    min_size=1,
    max_size=8,
    unique=True,
).map(lambda ps: [TopicPartition(t, p) for t, p in ps])


@st.composite
def positions(draw: st.DrawFn) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    tps = draw(partitions)
    start = {tp: draw(st.integers(0, 1000)) for tp in tps}
    latest = {tp: start[tp] + draw(st.integers(0, 1000)) for tp in tps}
    return start, latest


@settings(max_examples=300, deadline=None)
@given(positions(), st.integers(1, 3000))
def test_split_reads_exactly_the_limit_in_proportion(
    pos: tuple[dict[TopicPartition, int], dict[TopicPartition, int]], limit: int
) -> None:
    start, latest = pos
    end = split_read_limit(start, latest, limit)
    backlog = {tp: latest[tp] - start[tp] for tp in latest}
    total = sum(backlog.values())
    assert set(end) == set(latest)
    assert sum(end[tp] - start[tp] for tp in end) == min(limit, total)
    for tp in end:
        assert start[tp] <= end[tp] <= latest[tp]
        if total > limit:
            assert end[tp] - start[tp] <= math.ceil(limit * backlog[tp] / total)


@settings(max_examples=200, deadline=None)
@given(positions(), st.integers(1, 500))
def test_triggers_reach_the_target_without_passing_it(
    pos: tuple[dict[TopicPartition, int], dict[TopicPartition, int]], limit: int
) -> None:
    start, target = pos
    latest = {tp: off + 50 for tp, off in target.items()}  # data beyond the target
    current = dict(start)
    for _ in range(10_000):
        end = next_end(
            current,
            latest,
            {},
            limit=TriggerLimit(max_offsets=limit),
            target=target,
            last_trigger_ms=0,
            now_ms=0,
        )
        if end is None:
            break
        ranges, problems = plan_ranges(current, end, {}, fail_on_data_loss=True)
        assert not problems and sum(r.count for r in ranges) <= limit
        current = end
    assert current == target


@given(positions())
def test_offsets_round_trip_and_print_stably(
    pos: tuple[dict[TopicPartition, int], dict[TopicPartition, int]],
) -> None:
    offsets, _ = pos
    text = orjson.dumps(to_offset_dict(offsets))
    assert from_offset_dict(orjson.loads(text)) == offsets
    shuffled = dict(sorted(offsets.items(), key=lambda kv: (-kv[0].partition, kv[0].topic)))
    assert orjson.dumps(to_offset_dict(shuffled)) == text


@st.composite
def offset_ranges(draw: st.DrawFn) -> list[OffsetRange]:
    tps = draw(partitions)
    out = []
    for tp in tps:
        start = draw(st.integers(0, 10_000))
        out.append(OffsetRange(tp.topic, tp.partition, start, start + draw(st.integers(1, 500))))
    return out


@settings(max_examples=300, deadline=None)
@given(
    offset_ranges(),
    st.none() | st.integers(1, 40),
    st.none() | st.integers(1, 600),
)
def test_split_ranges_covers_the_same_offsets(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> None:
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    # The same offsets, each once, in consecutive non-empty pieces per partition.
    for r in ranges:
        mine = [p for p in pieces if (p.topic, p.partition) == (r.topic, r.partition)]
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        assert all(p.count > 0 for p in mine)
        # Pieces of a range differ by at most one record.
        assert max(p.count for p in mine) - min(p.count for p in mine) <= 1
    total = sum(r.count for r in ranges)
    if min_partitions is not None and len(ranges) < min_partitions:
        assert len(pieces) >= min(min_partitions, total)
    if max_records is not None:
        assert all(p.count <= max_records for p in pieces)
    if max_records is None and (min_partitions is None or len(ranges) >= min_partitions):
        assert pieces == ranges


def test_split_ranges_in_proportion_to_size() -> None:
    """Spark's rule: a range of 3/4 of the records gets 3 of 4 pieces."""
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 50, 150)]
    pieces = split_ranges(ranges, min_partitions=4)
    assert [(p.partition, p.start, p.end) for p in pieces] == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 300),
        (1, 50, 150),
    ]
