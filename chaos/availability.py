"""Availability read from a fault run (issue #19, 4 and 5): what ``raftka chaos run``
reports and the scenarios in ``tests/fault`` assert beside safety, so that a fail-over
regression fails CI.

- :func:`availability` (pure, over a parsed history): per partition the longest stretch
  without an acknowledged write (:func:`longest_gaps`), and for each fault window the
  seconds from its start to the first acknowledged write after it, per partition and
  over all of them (:func:`first_acks`); ``run.json`` and the printed summary carry it.
- :func:`summarize_runs`: median, p90 and max of those figures per fault kind over
  several runs' ``run.json`` (``raftka chaos summarize``, ``bench/failover_bench.py``).

- :func:`first_ack_after_fault`: seconds from the first fault's start to the first
  acknowledged send on a partition that completed more than ``grace_s`` after it (an
  answer already on its way when the fault began is not the new leader's), from the
  run's ``history.jsonl``.
- :class:`FencingWatch`: the "fenced brokers whose sessions expired" lines the
  controllers logged after the watch began (their process logs, read from the offset
  each had then), found by :func:`log_events`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from raftka.chaos.history import FaultWindow, History

__all__ = [
    "FENCED_MESSAGE",
    "GRACE_S",
    "Availability",
    "Distribution",
    "FaultAvailability",
    "FencingWatch",
    "Gap",
    "availability",
    "describe_summary",
    "first_ack_after_fault",
    "first_acks",
    "log_events",
    "longest_gaps",
    "read_runs",
    "summarize_runs",
]

NS_PER_S: Final = 1_000_000_000

#: What the active controller logs when it fences brokers whose sessions expired
#: (raftka.metadata.controller_events).
FENCED_MESSAGE = "fenced brokers whose sessions expired"


def _events(history: Path) -> Iterable[dict[str, Any]]:
    for line in history.read_bytes().splitlines():
        if line.strip():
            yield orjson.loads(line)


def first_ack_after_fault(history: Path, partition: int, grace_s: float = 0.3) -> float | None:
    """Seconds from the first fault's start to the first acknowledged send on
    ``partition`` completing after start + ``grace_s``; None if there is none."""
    start_ns: int | None = None
    for event in _events(history):
        if start_ns is None:
            if event.get("type") == "nemesis" and event.get("f") == "start":
                start_ns = int(event["time_ns"])
            continue
        value = event.get("value")
        if (
            event.get("type") == "ok"
            and event.get("f") == "send"
            and isinstance(value, dict)
            and value.get("partition") == partition
            and int(event["time_ns"]) - start_ns > grace_s * 1e9
        ):
            return (int(event["time_ns"]) - start_ns) / 1e9
    return None


def log_events(
    path: Path, message: str | Collection[str], since_bytes: int = 0
) -> list[dict[str, Any]]:
    """The JSON log lines of a raftka process log whose message is ``message`` (or one
    of several), from byte ``since_bytes`` on (lines that are not JSON are skipped)."""
    wanted = {message} if isinstance(message, str) else set(message)
    with path.open("rb") as f:
        f.seek(since_bytes)
        lines = f.read().splitlines()
    out: list[dict[str, Any]] = []
    for line in lines:
        if not any(m.encode() in line for m in wanted):
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("message") in wanted:
            out.append(event)
    return out


class FencingWatch:
    """Fencing by session expiry logged by controllers after ``__init__``."""

    def __init__(self, logs: Iterable[Path]) -> None:
        self._from = {path: path.stat().st_size if path.exists() else 0 for path in logs}

    def fenced(self) -> list[dict[str, Any]]:
        return [
            {"log": str(path), **event}
            for path, offset in self._from.items()
            for event in log_events(path, FENCED_MESSAGE, offset)
        ]


# --- per-run availability over a parsed history (issue #19, 4) ------------------------
#
# An acknowledged write is an ``ok`` send; its time is its completion (when the client
# learned it was durable). The *sending phase* runs from the first send's invocation to
# the last send's completion (any outcome): before it nothing was asked, after it the
# workload had stopped, so neither end is an outage.
#
# After a fault starts, an ok send counts as the first acknowledgement "after" it when
# it completed after the start and either was invoked after the start (it cannot have
# been answered by the world before the fault) or completed more than ``grace_s`` after
# it (a retry that went through the new leader). An answer invoked before the fault and
# arriving within the grace may have been on the wire already, so it proves nothing.
# The fault's start is recorded once the fault is applied (``Recorded`` in
# raftka.chaos.runner), so every figure is measured from a fault already in force.

#: An answer to a send invoked before a fault and arriving within this many seconds of
#: its start may already have been on its way: it does not show the partition writable.
GRACE_S: Final = 0.3


@dataclass(frozen=True, slots=True)
class Gap:
    """The longest stretch of the sending phase without an acknowledged write on one
    partition: from ``start_ns`` (an ack, or the phase's start) to ``end_ns`` (the next
    ack, or the phase's end)."""

    partition: int
    start_ns: int
    end_ns: int

    @property
    def length_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_S

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "start_s": round(self.start_ns / NS_PER_S, 3),
            "end_s": round(self.end_ns / NS_PER_S, 3),
            "length_s": round(self.length_s, 3),
        }


@dataclass(frozen=True, slots=True)
class FaultAvailability:
    """One fault window and, per partition, seconds from its start to the first
    acknowledged write after it (None: none in the rest of the history)."""

    fault: FaultWindow
    first_ack_s: Mapping[int, float | None]

    @property
    def all_partitions_s(self) -> float | None:
        """Seconds until every partition had acknowledged a write again (the largest
        per-partition figure); None if some partition never did, or none was written."""
        values = list(self.first_ack_s.values())
        if not values or any(v is None for v in values):
            return None
        return max(v for v in values if v is not None)

    @property
    def any_partition_s(self) -> float | None:
        """Seconds until the first acknowledged write on any partition."""
        values = [v for v in self.first_ack_s.values() if v is not None]
        return min(values) if values else None

    def to_json(self) -> dict[str, Any]:
        f = self.fault
        return {
            "window": f.window,
            "kind": f.kind,
            "targets": list(f.targets),
            "start_s": round(f.start_ns / NS_PER_S, 3),
            "duration_s": None
            if f.end_ns is None
            else round((f.end_ns - f.start_ns) / NS_PER_S, 3),
            "first_ack_s": {str(p): _round(v) for p, v in sorted(self.first_ack_s.items())},
            "all_partitions_s": _round(self.all_partitions_s),
            "any_partition_s": _round(self.any_partition_s),
        }


@dataclass(frozen=True, slots=True)
class Availability:
    """What one run's history says about availability: the longest gap per partition
    and the time to the first acknowledged write after each fault."""

    longest_gaps: Mapping[int, Gap]
    faults: Sequence[FaultAvailability]

    def to_json(self) -> dict[str, Any]:
        return {
            "grace_s": GRACE_S,
            "longest_gap": {str(p): g.to_json() for p, g in sorted(self.longest_gaps.items())},
            "faults": [f.to_json() for f in self.faults],
        }

    def summary_lines(self) -> list[str]:
        lines = []
        if self.longest_gaps:
            gaps = ", ".join(
                f"p{p} {g.length_s:.2f} s (at {g.start_ns / NS_PER_S:.1f} s)"
                for p, g in sorted(self.longest_gaps.items())
            )
            lines.append(f"longest stretch without an acknowledged write: {gaps}")
        for f in self.faults:
            per = ", ".join(f"p{p} {_seconds(v)}" for p, v in sorted(f.first_ack_s.items()))
            targets = ",".join(f.fault.targets)
            lines.append(
                f"first ack after {f.fault.kind} {targets} at {f.fault.start_ns / NS_PER_S:.1f} s:"
                f" all partitions {_seconds(f.all_partitions_s)} ({per})"
            )
        return lines


@dataclass(frozen=True, slots=True)
class _Send:
    invoke_ns: int
    done_ns: int | None  # None: never completed
    partition: int | None  # None: unknown (no partition asked, none answered)
    ok: bool


def _sends(history: History) -> list[_Send]:
    out: list[_Send] = []
    for op in history.ops():
        if op.f != "send":
            continue
        partition = None
        for value in (op.value, op.invoke.value):
            candidate = value.get("partition") if isinstance(value, dict) else None
            if isinstance(candidate, int) and not isinstance(candidate, bool):
                partition = candidate
                break
        done = None if op.completion is None else op.completion.time_ns
        out.append(_Send(op.invoke.time_ns, done, partition, op.type == "ok"))
    return out


def longest_gaps(history: History) -> dict[int, Gap]:
    """Per partition sent to, the longest stretch of the sending phase (see above)
    without an acknowledged write; {} when the history has no send."""
    sends = _sends(history)
    if not sends:
        return {}
    phase_start = min(s.invoke_ns for s in sends)
    phase_end = max(s.done_ns if s.done_ns is not None else history.end_ns for s in sends)
    acks: dict[int, list[int]] = {s.partition: [] for s in sends if s.partition is not None}
    for s in sends:
        if s.ok and s.partition is not None and s.done_ns is not None:
            acks[s.partition].append(s.done_ns)
    out: dict[int, Gap] = {}
    for partition, times in acks.items():
        points = [phase_start, *sorted(times), phase_end]
        start, end = max(itertools.pairwise(points), key=lambda p: p[1] - p[0])
        out[partition] = Gap(partition, start, end)
    return out


def first_acks(history: History, *, grace_s: float = GRACE_S) -> list[FaultAvailability]:
    """For each fault window, per partition sent to, seconds from its start to the
    first acknowledged write after it (the rule above)."""
    sends = _sends(history)
    partitions = sorted({s.partition for s in sends if s.partition is not None})
    acked = sorted(
        (s for s in sends if s.ok and s.partition is not None and s.done_ns is not None),
        key=lambda s: s.done_ns or 0,
    )
    grace_ns = grace_s * NS_PER_S
    out: list[FaultAvailability] = []
    for window in history.fault_windows():
        start = window.start_ns
        first: dict[int, float | None] = dict.fromkeys(partitions)
        for s in acked:
            assert s.done_ns is not None and s.partition is not None
            if s.done_ns <= start or first[s.partition] is not None:
                continue
            if s.invoke_ns >= start or s.done_ns - start > grace_ns:
                first[s.partition] = (s.done_ns - start) / NS_PER_S
        out.append(FaultAvailability(window, first))
    return out


def availability(history: History, *, grace_s: float = GRACE_S) -> Availability:
    """:func:`longest_gaps` and :func:`first_acks` of one run's history."""
    return Availability(longest_gaps(history), first_acks(history, grace_s=grace_s))


# --- across runs: ``raftka chaos summarize`` -------------------------------------------


@dataclass(frozen=True, slots=True)
class Distribution:
    """Median, p90 and max of some seconds (nearest rank), and how many were missing
    (a fault after which some partition never acknowledged again)."""

    count: int
    missing: int
    median_s: float | None
    p90_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Distribution:
        items = list(values)
        known = sorted(v for v in items if v is not None)
        missing = len(items) - len(known)
        if not known:
            return cls(len(items), missing, None, None, None)
        return cls(len(items), missing, _rank(known, 0.5), _rank(known, 0.9), known[-1])

    def describe(self) -> str:
        text = (
            f"n={self.count} median {_seconds(self.median_s)} p90 {_seconds(self.p90_s)}"
            f" max {_seconds(self.max_s)}"
        )
        return text + (f" ({self.missing} never acknowledged again)" if self.missing else "")


def _rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile of an ascending, non-empty sequence."""
    assert ordered and 0 < q <= 1, (ordered, q)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize_runs(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Distribution]]:
    """Fault kind -> {"all_partitions", "any_partition", "longest_gap"} distributions
    over the ``availability`` sections of several runs' ``run.json``. The longest gap is
    per run and partition, under the kinds the run's faults had."""
    firsts: dict[str, dict[str, list[float | None]]] = {}
    for run in runs:
        section = run.get("availability") or {}
        kinds = set()
        for fault in section.get("faults", []):
            kind = str(fault["kind"])
            kinds.add(kind)
            bucket = firsts.setdefault(
                kind, {"all_partitions": [], "any_partition": [], "longest_gap": []}
            )
            bucket["all_partitions"].append(fault.get("all_partitions_s"))
            bucket["any_partition"].append(fault.get("any_partition_s"))
        gaps = [g["length_s"] for g in section.get("longest_gap", {}).values()]
        for kind in sorted(kinds):
            firsts[kind]["longest_gap"].extend(gaps)
    return {
        kind: {name: Distribution.of(values) for name, values in buckets.items()}
        for kind, buckets in sorted(firsts.items())
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


SUMMARY_ROWS: Final = (
    ("all_partitions", "first ack on every partition"),
    ("any_partition", "first ack on any partition"),
    ("longest_gap", "longest gap per partition and run"),
)


def describe_summary(summary: Mapping[str, Mapping[str, Distribution]]) -> list[str]:
    """The lines ``raftka chaos summarize`` prints for :func:`summarize_runs`."""
    lines: list[str] = []
    width = max(len(label) for _, label in SUMMARY_ROWS)
    for kind, rows in summary.items():
        lines.append(f"{kind}: {rows['all_partitions'].count} faults")
        lines += [f"  {label:<{width}}  {rows[key].describe()}" for key, label in SUMMARY_ROWS]
    return lines


def read_runs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The ``run.json`` of each report folder in ``paths``, or of each report folder
    directly inside one (a campaign's folder). ValueError names a path with neither."""
    runs: list[dict[str, Any]] = []
    for path in paths:
        found = [path / "run.json"] if (path / "run.json").is_file() else []
        found = found or sorted(p for p in path.glob("*/run.json") if p.is_file())
        if not found:
            raise ValueError(f"{path}: no run.json in it or in a folder inside it")
        for run in found:
            data = orjson.loads(run.read_bytes())
            if not isinstance(data, dict):
                raise ValueError(f"{run}: not a run report (a JSON object)")
            runs.append(data)
    return runs
