"""raftka.chaos.availability over hand-written histories and controller logs, and
``raftka chaos summarize`` over hand-written run reports."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.chaos.availability import (
    FENCED_MESSAGE,
    FencingWatch,
    availability,
    first_ack_after_fault,
    first_acks,
    longest_gaps,
    read_runs,
    summarize_runs,
)
from raftka.chaos.cli import chaos_group
from raftka.chaos.history import History, parse_lines
from raftka.chaos.runner import RunResult


def _write(path: Path, events: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))


def _send_ok(t_s: float, partition: int) -> dict[str, object]:
    value = {"partition": partition, "offset": 1}
    return {"type": "ok", "f": "send", "time_ns": int(t_s * 1e9), "value": value}


def test_first_ack_after_fault_skips_answers_in_flight_and_other_partitions(
    tmp_path: Path,
) -> None:
    history = tmp_path / "history.jsonl"
    start = {"type": "nemesis", "f": "start", "time_ns": int(10e9), "value": {}}
    _write(
        history,
        [
            _send_ok(9.0, 1),  # before the fault
            start,
            _send_ok(10.1, 1),  # within the grace: already on its way
            _send_ok(12.0, 0),  # another partition
            _send_ok(14.5, 1),
            _send_ok(15.0, 1),
        ],
    )
    assert first_ack_after_fault(history, 1) == 4.5
    assert first_ack_after_fault(history, 2) is None


def test_fencing_watch_reports_only_what_was_logged_after_it_began(tmp_path: Path) -> None:
    log = tmp_path / "process.log"
    line = orjson.dumps({"message": FENCED_MESSAGE, "fields": {"brokers": [101]}}) + b"\n"
    log.write_bytes(line)
    watch = FencingWatch([log])
    assert watch.fenced() == []
    with log.open("ab") as f:
        f.write(b"not json " + FENCED_MESSAGE.encode() + b"\n")
        f.write(orjson.dumps({"message": "other"}) + b"\n" + line)
    (event,) = watch.fenced()
    assert event["fields"] == {"brokers": [101]}


# --- availability(): longest gaps and first acks over parsed histories ----------------

S = 1_000_000_000


@dataclass(frozen=True)
class Send:
    """One send of a hand-made history: invoked at ``at_s``, completed ``took_s`` later
    (None: never), ok or not."""

    at_s: float
    partition: int
    took_s: float | None = 0.01
    ok: bool = True


def history_of(sends: list[Send], faults: list[tuple[float, float | None]]) -> History:
    """A valid history: each send its own process, fault windows (start, end or None),
    every event in time order as HistoryWriter would write them."""
    timed: list[tuple[int, int, dict[str, object]]] = []  # (time_ns, tie-break, event)
    for i, s in enumerate(sends):
        value = {"topic": "q", "partition": s.partition, "value": i}
        timed.append((round(s.at_s * S), 1, {"process": i, "type": "invoke", "value": value}))
        if s.took_s is not None:
            done = {"partition": s.partition, "offset": i} if s.ok else value
            kind = "ok" if s.ok else "info"
            event = {"process": i, "type": kind, "value": done}
            if not s.ok:
                event["error"] = "timeout"
            timed.append((round((s.at_s + s.took_s) * S), 2, event))
    for window, (start, end) in enumerate(faults):
        value = {"window": window, "kind": "isolate-leader", "targets": ["b101"]}
        start_event: dict[str, object] = {"process": "nemesis", "type": "nemesis", "f": "start"}
        start_event["value"] = value
        timed.append((round(start * S), 0, start_event))
        if end is not None:
            end_event: dict[str, object] = {"process": "nemesis", "type": "nemesis", "f": "end"}
            end_event["value"] = value
            timed.append((round(end * S), 0, end_event))
    lines = []
    for index, (time_ns, _, event) in enumerate(sorted(timed, key=lambda t: (t[0], t[1]))):
        full = {"index": index, "time_ns": time_ns, "wall_time": 0.0, "f": "send", **event}
        lines.append(orjson.dumps(full) + b"\n")
    return parse_lines(lines)


def test_longest_gap_spans_the_outage_and_counts_only_acknowledged_writes() -> None:
    """Partition 0 acks every 0.5 s except from 2.0 s to 6.0 s (a timeout and a failure
    in between do not count as acknowledged); partition 1 acks throughout. Its longest
    gap is the outage, measured ack to ack; a partition with no ack at all has the
    whole sending phase as its gap."""
    sends = [Send(t / 2, 0) for t in range(5)] + [Send(t / 2, 0) for t in range(12, 16)]
    sends += [Send(3.0, 0, took_s=2.0, ok=False), Send(4.0, 0, took_s=None)]
    sends += [Send(t / 2, 1) for t in range(16)]
    sends += [Send(1.0, 2, took_s=1.0, ok=False)]
    gaps = longest_gaps(history_of(sends, []))
    assert gaps[0].start_ns == round(2.01 * S) and gaps[0].end_ns == round(6.01 * S)
    assert gaps[0].length_s == pytest.approx(4.0)
    assert gaps[1].length_s == pytest.approx(0.5)
    # the phase: first invocation (0 s) to the last completion (the never-completed
    # send runs to the history's end, 7.51 s)
    assert (gaps[2].start_ns, gaps[2].end_ns) == (0, round(7.51 * S))


def test_first_ack_skips_answers_in_flight_but_takes_writes_invoked_after_the_fault() -> None:
    """A fault at 10 s. Partition 0: an answer invoked before the fault and arriving
    0.1 s after it (within the grace: already on the wire) is skipped, a retry invoked
    before and answered at 13 s counts. Partition 1: a send invoked after the fault and
    answered 0.05 s after it counts at once (writes never stopped there). Partition 2
    never acks again. The overall figure needs every partition: None here; without
    partition 2 it is the slowest partition's."""
    sends = [Send(9.0, p) for p in range(3)]
    sends += [Send(9.95, 0, took_s=0.15), Send(9.5, 0, took_s=3.5), Send(14.0, 0)]
    sends += [Send(10.04, 1)]
    (fault,) = first_acks(history_of(sends, [(10.0, 12.0)]))
    assert fault.first_ack_s[0] == pytest.approx(3.0)
    assert fault.first_ack_s[1] == pytest.approx(0.05)
    assert fault.first_ack_s[2] is None
    assert fault.all_partitions_s is None and fault.any_partition_s == pytest.approx(0.05)
    (fault,) = first_acks(history_of([s for s in sends if s.partition != 2], [(10.0, 12.0)]))
    assert fault.all_partitions_s == pytest.approx(3.0)


def test_availability_json_and_summary_name_each_fault_and_partition() -> None:
    """run.json's section and the printed lines carry the gap per partition and each
    fault's figures (two faults, the second never healed)."""
    sends = [Send(t / 4, p) for t in range(40) for p in (0, 1) if not 8 <= t < 20 or p == 1]
    result = availability(history_of(sends, [(2.0, 4.0), (7.0, None)]))
    data = result.to_json()
    assert data["longest_gap"]["0"]["length_s"] == pytest.approx(3.25)
    assert [f["window"] for f in data["faults"]] == [0, 1]
    assert data["faults"][0]["first_ack_s"] == {"0": 3.01, "1": 0.01}
    assert data["faults"][0]["all_partitions_s"] == 3.01
    assert data["faults"][1]["duration_s"] is None
    lines = result.summary_lines()
    assert lines[0].startswith("longest stretch without an acknowledged write: p0 3.25 s")
    assert "first ack after isolate-leader b101 at 2.0 s: all partitions 3.01 s" in lines[1]


ack_times = st.lists(st.integers(min_value=1, max_value=10_000), max_size=30)


@given(
    acks=st.dictionaries(st.integers(0, 3), ack_times, min_size=1, max_size=4),
    starts=st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=4),
)
@settings(max_examples=200, deadline=None)
def test_first_ack_never_exceeds_the_longest_gap(
    acks: dict[int, list[int]], starts: list[int]
) -> None:
    """With no grace, the time from a fault's start to the first ack after it is an
    ack-free stretch of the sending phase, so it is at most the partition's longest gap;
    and every ack-free stretch between consecutive acks is at most that gap."""
    sends = [Send(0.0, p, took_s=None, ok=False) for p in acks]  # open the phase at 0
    sends += [Send(t / 1000 - 0.001, p, took_s=0.001) for p, ts in acks.items() for t in ts]
    faults: list[tuple[float, float | None]] = [(s / 1000, None) for s in sorted(starts)]
    history = history_of(sends, faults)
    gaps = longest_gaps(history)
    for fault in first_acks(history, grace_s=0.0):
        for partition, took in fault.first_ack_s.items():
            if took is not None:
                assert took <= gaps[partition].length_s + 1e-9, (fault, gaps[partition])
    for partition, times in acks.items():
        ordered = sorted(times)
        for a, b in itertools.pairwise(ordered):
            assert (b - a) / 1000 <= gaps[partition].length_s + 1e-9


def test_summarize_runs_gives_median_p90_and_max_per_kind(tmp_path: Path) -> None:
    """Ten isolate-leader faults over two report folders (one campaign folder holding
    them): median, p90 and max by nearest rank; a fault after which some partition never
    acked again is counted as missing, not as zero. The CLI prints the same."""
    figures = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, None]
    for run, chunk in enumerate((figures[:5], figures[5:])):
        faults = [
            {"kind": "isolate-leader", "all_partitions_s": v, "any_partition_s": 0.01}
            for v in chunk
        ]
        section = {"faults": faults, "longest_gap": {"0": {"length_s": 9.5 + run}}}
        folder = tmp_path / "campaign" / f"run{run}"
        folder.mkdir(parents=True)
        (folder / "run.json").write_bytes(orjson.dumps({"availability": section}))
    summary = summarize_runs(read_runs([tmp_path / "campaign"]))
    first = summary["isolate-leader"]["all_partitions"]
    assert (first.count, first.missing) == (10, 1)
    assert (first.median_s, first.p90_s, first.max_s) == (5.0, 9.0, 9.0)
    assert summary["isolate-leader"]["longest_gap"].max_s == 10.5
    result = CliRunner().invoke(chaos_group, ["summarize", str(tmp_path / "campaign")])
    assert result.exit_code == 0, result.output
    assert "isolate-leader: 10 faults" in result.output
    assert "median 5.00 s p90 9.00 s max 9.00 s (1 never acknowledged again)" in result.output


def test_summarize_refuses_a_folder_without_reports(tmp_path: Path) -> None:
    """A folder with no run.json (in it or one level down) is a one-line error."""
    result = CliRunner().invoke(chaos_group, ["summarize", str(tmp_path)])
    assert result.exit_code == 1 and "no run.json" in result.output


def test_run_summary_prints_the_availability_lines(tmp_path: Path) -> None:
    """What ``raftka chaos run`` prints ends with the gap and first-ack lines."""
    sends = [Send(t / 4, 0) for t in range(40) if not 8 <= t < 20]
    figures = availability(history_of(sends, [(2.0, 4.0)]))
    result = RunResult(
        seed=1, out_dir=tmp_path, schedule=[], verdict=None, topics=None, availability=figures
    )
    lines = result.summary().splitlines()
    assert lines[-3:-1] == figures.summary_lines()
    assert "first ack after isolate-leader b101 at 2.0 s: all partitions 3.01 s" in lines[-2]
