"""``raftka chaos run``: one Jepsen-style fault test from the command line;
``raftka chaos summarize``: fail-over times per fault kind over several runs.

It builds a cluster on test hosts (network namespaces with root; loopback processes
without root, for process faults only), runs a workload under a seeded fault schedule,
heals, reads everything back, checks the history and writes the report folder. It
prints the seed and the verdict and exits 1 when the checker finds an anomaly (or the
cluster does not recover), 2 when it cannot run (for example network faults without
root).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import click

from raftka.chaos import runner
from raftka.chaos.availability import describe_summary, read_runs, summarize_runs
from raftka.chaos.netns import NeedsRootError, NetnsError
from raftka.chaos.nodes import NODE_NAMES


def _nemeses(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in runner.NEMESES]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(runner.NEMESES)}"
        )
    return names


@click.group(name="chaos")
def chaos_group() -> None:
    """Jepsen-style fault tests against a cluster on test hosts."""


@chaos_group.command(name="run")
@click.option(
    "--nemesis",
    "nemesis",
    required=True,
    help="Comma-separated fault kinds: " + ", ".join(runner.NEMESES) + ".",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="Seconds of the fault schedule.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of the fault schedule (random when omitted; printed either way).",
)
@click.option("--workload", type=click.Choice(runner.WORKLOADS), default="queue", show_default=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Report folder (default: ./chaos-<time>-seed<seed>).",
)
def run_command(
    nemesis: str, duration: float, seed: int | None, workload: str, out_dir: Path | None
) -> None:
    """Run a workload under seeded faults, heal, check, and write a report folder."""
    names = _nemeses(nemesis)
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    placement, reason = runner.placement_for(names, root=os.geteuid() == 0)
    click.echo(f"seed {seed}")
    if placement is None:
        click.echo(f"cannot run: {reason}", err=True)
        sys.exit(2)
    if out_dir is None:
        out_dir = Path(f"chaos-{time.strftime('%Y%m%d-%H%M%S')}-seed{seed}")
    plan = runner.plan_schedule(seed, names, duration, list(NODE_NAMES))
    for f in plan:
        click.echo(
            f"  at {f.offset_s:6.2f} s for {f.duration_s:5.2f} s: {f.kind} {','.join(f.targets)}"
        )
    try:
        result = runner.run(
            nemeses=names,
            duration_s=duration,
            seed=seed,
            out_dir=out_dir,
            workload=workload,
            placement=placement,
        )
    except (NeedsRootError, NetnsError) as exc:
        click.echo(f"cannot run: {exc}", err=True)
        sys.exit(2)
    click.echo(result.summary())
    sys.exit(0 if result.valid else 1)


@chaos_group.command(name="summarize")
@click.argument(
    "report_dirs",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
def summarize_command(report_dirs: tuple[Path, ...]) -> None:
    """Median, p90 and max of the time from each fault's start to the first
    acknowledged write after it, per fault kind, over the report folders given (or
    the report folders inside each)."""
    try:
        runs = read_runs(report_dirs)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    summary = summarize_runs(runs)
    if not summary:
        raise click.ClickException(
            "no fault with availability figures in these reports (queue workload runs only)"
        )
    click.echo(f"{len(runs)} runs")
    for line in describe_summary(summary):
        click.echo(line)
