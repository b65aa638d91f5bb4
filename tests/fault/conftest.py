"""Fault tests: items marked ``root`` skip, with the reason, where we are not root; the
``scenario`` fixture runs and checks one Jepsen-style scenario (test_scenarios_*)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import pytest

from raftka.chaos.nodes import ChaosCluster
from raftka.chaos.runner import RunResult, ScheduledFault, run_on

ROOT_REASON = "needs root (network namespaces)"
RECOVERY_BOUND_S = 20.0  # generous: measured figures are in docs/operations.md
PNG_BYTES_MIN = 20_000  # an empty figure is ~15 KB; a drawn timeline is several times more
SEED = 20261121


class Scenario(Protocol):
    def __call__(
        self,
        cluster: ChaosCluster,
        name: str,
        faults: list[ScheduledFault],
        workload: str = "queue",
    ) -> RunResult: ...


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    """Runs ``workload`` on ``cluster`` under the fixed schedule ``faults`` (on its own
    topic ``name``, report in ``tmp_path/name``), prints the summary, and asserts what
    every scenario asserts: no problem (no anomaly, a complete final read, recovery
    within RECOVERY_BOUND_S) and a report folder with a drawn timeline."""

    def run(
        cluster: ChaosCluster,
        name: str,
        faults: list[ScheduledFault],
        workload: str = "queue",
    ) -> RunResult:
        out = tmp_path / name
        result = run_on(
            cluster,
            nemeses=[f.kind for f in faults],
            duration_s=max(f.offset_s + f.duration_s for f in faults),
            seed=SEED,
            out_dir=out,
            schedule=faults,
            topic=name,
            workload=workload,
        )
        print(f"\n{name} ({cluster.placement}): {result.summary()}")
        problems = result.problems(recovery_bound_s=RECOVERY_BOUND_S)
        assert not problems, f"{name}: {problems}; report in {out}"
        png = out / "timeline.png"
        assert png.exists() and png.stat().st_size > PNG_BYTES_MIN, f"timeline {png} missing"
        assert (out / "verdict.json").exists() and (out / "history.jsonl").exists()
        return result

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=ROOT_REASON)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
