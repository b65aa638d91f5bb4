"""The report folder of one test run: the history, the checker's verdict and a timeline.

``write_report`` leaves three files in the folder:

* ``history.jsonl``: the history (copied there unless it already is that file);
* ``verdict.json``: `raftka.chaos.checker.CheckResult.to_json`;
* ``timeline.png``: above, the latency of every operation against its invocation time
  (log scale), coloured by outcome (ok green, fail red, unknown orange) with one marker
  per operation kind; below, ok operations per second. Fault windows are shaded with
  their kind and targets on both panels, so a latency spike or a throughput hole lines
  up with the fault that caused it; a dashed line marks when every partition had
  acknowledged a write again after each fault (raftka.chaos.availability), labelled
  with the seconds it took.

Plotting uses matplotlib's object API on the Agg canvas: no display, no pyplot global
state, safe to call from any thread.
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from raftka.chaos.availability import Availability, availability
from raftka.chaos.checker import CheckResult, check
from raftka.chaos.history import KNOWN_FUNCTIONS, FaultWindow, History, Op, read_history
from raftka.chaos.txn_checker import TxnResult, check_txn

OUTCOME_COLORS: Final = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff7f0e"}
OUTCOME_LABELS: Final = {"ok": "ok", "fail": "fail", "info": "unknown (info)"}
MARKERS: Final = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
LINE_COLORS: Final = ("#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
FAULT_COLORS: Final = ("#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22", "#e377c2")
LATENCY_FLOOR_MS: Final = 0.01  # log scale: a zero latency is drawn at the floor
THROUGHPUT_BUCKETS_MAX: Final = 300  # at least one second per bucket, at most this many
NS_PER_S: Final = 1_000_000_000


def write_report(
    history_path: Path | str,
    out_dir: Path | str,
    *,
    title: str = "",
    duplicates_allowed: bool = False,
    extra_windows: Sequence[FaultWindow] = (),
) -> CheckResult:
    """Checks the history at ``history_path`` and writes the report folder ``out_dir``.
    ``extra_windows`` adds fault windows recorded outside the history file."""
    out, history = _copy_history(history_path, out_dir)
    result = check(history, duplicates_allowed=duplicates_allowed)
    (out / "verdict.json").write_bytes(result.to_json_bytes())
    windows = sorted(
        (*history.fault_windows(), *extra_windows), key=lambda w: (w.start_ns, w.window)
    )
    plot_timeline(
        history,
        out / "timeline.png",
        windows=windows,
        title=title,
        result=result,
        figures=availability(history),
    )
    return result


def _copy_history(history_path: Path | str, out_dir: Path | str) -> tuple[Path, History]:
    """The report folder (made) and the history, copied into it and read."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    copy = out / "history.jsonl"
    source = Path(history_path)
    if not (copy.exists() and copy.samefile(source)):
        shutil.copyfile(source, copy)
    return out, read_history(copy)


def write_txn_report(
    history_path: Path | str, out_dir: Path | str, *, title: str = "", topic: str = "txn"
) -> TxnResult:
    """:func:`write_report` for the txn workload: its checker's verdict in
    ``verdict.json`` and the timeline."""
    out, history = _copy_history(history_path, out_dir)
    result = check_txn(history, topic=topic)
    (out / "verdict.json").write_bytes(result.to_json_bytes())
    plot_timeline(history, out / "timeline.png", title=title, result=result)
    return result


def plot_timeline(
    history: History,
    path: Path | str,
    *,
    windows: Iterable[FaultWindow] | None = None,
    title: str = "",
    result: CheckResult | TxnResult | None = None,
    figures: Availability | None = None,
) -> None:
    """Draws the latency and throughput timeline of ``history`` into a PNG at ``path``.
    ``windows`` defaults to the history's own fault windows; ``figures`` adds the
    first-ack line of each fault."""
    ops = history.ops()
    end_ns = history.end_ns
    fault_windows = tuple(history.fault_windows() if windows is None else windows)

    fig = Figure(figsize=(13, 7.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    latency_ax, throughput_ax = fig.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    functions = _functions(ops)
    markers = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(functions)}

    _shade(latency_ax, fault_windows, end_ns, labels=True)
    _shade(throughput_ax, fault_windows, end_ns, labels=False)
    _latency(latency_ax, ops, end_ns, functions, markers)
    _throughput(throughput_ax, ops, end_ns, functions)
    if figures is not None:
        _first_acks(latency_ax, throughput_ax, figures)

    heading = title or "operation latency"
    if result is not None:
        heading += " - " + result.summary().splitlines()[0]
    latency_ax.set_title(heading, loc="left", fontsize=11)
    throughput_ax.set_xlabel("time since test start (s)")
    latency_ax.set_xlim(0, max(end_ns / NS_PER_S, 1.0))
    if not ops:
        latency_ax.text(0.5, 0.5, "no operations", transform=latency_ax.transAxes, ha="center")
    fig.savefig(path, format="png")


def _functions(ops: Sequence[Op]) -> list[str]:
    """Operation kinds in the history: the known ones in their documented order first."""
    present = {op.f for op in ops}
    known = [f for f in KNOWN_FUNCTIONS if f in present]
    return known + sorted(present - set(known))


def _latency(
    ax: Axes, ops: Sequence[Op], end_ns: int, functions: list[str], markers: dict[str, str]
) -> None:
    points: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for op in ops:
        xs, ys = points[(op.f, op.type)]
        xs.append(op.invoke.time_ns / NS_PER_S)
        ys.append(max(op.latency_ns(end_ns) / 1e6, LATENCY_FLOOR_MS))
    # ok first, so the rarer fail and unknown points are drawn on top
    for outcome in ("ok", "fail", "info"):
        for f in functions:
            if (f, outcome) in points:
                xs, ys = points[(f, outcome)]
                ax.scatter(
                    xs,
                    ys,
                    s=14,
                    marker=markers[f],
                    color=OUTCOME_COLORS[outcome],
                    alpha=0.65,
                    linewidths=0,
                )
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms, log)")
    ax.grid(True, which="major", alpha=0.3)
    handles: list[Line2D | Patch] = [
        Line2D([], [], marker=markers[f], linestyle="", color="#444444", label=f) for f in functions
    ]
    handles += [
        Patch(color=OUTCOME_COLORS[o], label=OUTCOME_LABELS[o]) for o in ("ok", "fail", "info")
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)


def _throughput(ax: Axes, ops: Sequence[Op], end_ns: int, functions: list[str]) -> None:
    duration_s = max(end_ns / NS_PER_S, 1.0)
    bucket_s = max(1.0, duration_s / THROUGHPUT_BUCKETS_MAX)
    buckets = int(duration_s // bucket_s) + 1
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for op in ops:
        if op.type == "ok" and op.completion is not None:
            bucket = int(op.completion.time_ns / NS_PER_S // bucket_s)
            counts[op.f][bucket] += 1
            counts["all ok"][bucket] += 1
    xs = [i * bucket_s for i in range(buckets + 1)]
    for i, name in enumerate([f for f in functions if f in counts]):
        rates = [counts[name][b] / bucket_s for b in range(buckets)]
        ax.stairs(rates, xs, label=name, linewidth=1.0, color=LINE_COLORS[i % len(LINE_COLORS)])
    if counts:
        rates = [counts["all ok"][b] / bucket_s for b in range(buckets)]
        ax.stairs(rates, xs, label="all ok", linewidth=1.8, color="black")
    ax.set_ylabel(f"ok ops/s ({bucket_s:g} s bins)", fontsize=9)
    ax.grid(True, alpha=0.3)
    if counts:
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)


def _shade(ax: Axes, windows: Sequence[FaultWindow], end_ns: int, *, labels: bool) -> None:
    colors: dict[str, str] = {}
    for i, window in enumerate(windows):
        color = colors.setdefault(window.kind, FAULT_COLORS[len(colors) % len(FAULT_COLORS)])
        start_s = window.start_ns / NS_PER_S
        stop_s = (end_ns if window.end_ns is None else window.end_ns) / NS_PER_S
        ax.axvspan(start_s, stop_s, color=color, alpha=0.15, linewidth=0)
        if labels:
            targets = ",".join(window.targets)
            text = f"{window.kind} {targets}" if targets else window.kind
            if window.end_ns is None:
                text += " (not healed)"
            ax.text(
                start_s,
                0.99 - 0.05 * (i % 3),  # stagger so neighbouring labels do not overlap
                text,
                transform=ax.get_xaxis_transform(),
                va="top",
                ha="left",
                fontsize=8,
                color=color,
                fontweight="bold",
            )


def _first_acks(latency_ax: Axes, throughput_ax: Axes, figures: Availability) -> None:
    for fault in figures.faults:
        took = fault.all_partitions_s
        if took is None:
            continue
        at_s = fault.fault.start_ns / NS_PER_S + took
        for ax in (latency_ax, throughput_ax):
            ax.axvline(at_s, color="black", linestyle="--", linewidth=0.8, alpha=0.7)
        latency_ax.text(
            at_s,
            0.02,
            f" all acked +{took:.2f} s",
            transform=latency_ax.get_xaxis_transform(),
            va="bottom",
            ha="left",
            fontsize=7,
            rotation=90,
        )
