"""The runner's txn pieces without a cluster: the kill-pipeline nemesis on a real
process, the new nemesis names in the schedule, and a txn verdict in RunResult."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from raftka.chaos import nemesis as nm
from raftka.chaos.nodes import ChaosCluster
from raftka.chaos.runner import PROCESS_NEMESES, RunResult, ScheduledFault, build, plan_schedule
from raftka.chaos.txn_checker import TxnResult, TxnStats

NO_CLUSTER = cast(ChaosCluster, object())  # kill-pipeline never touches the cluster


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_kill_pipeline_kills_and_restarts_the_process() -> None:
    node = nm.Node("pipeline", sleeper)
    first = node.start()
    try:
        fault = ScheduledFault(0.0, "kill-pipeline", (), 1.0)
        nemesis = build(fault, NO_CLUSTER, log=nm.FaultLog(), pipeline=node)
        nemesis.apply()
        assert first.returncode == -9
        nemesis.heal()
        assert node.proc is not None and node.proc is not first
        assert node.proc.poll() is None, "the pipeline was not restarted"
    finally:
        node.stop()


def test_kill_pipeline_without_the_txn_workload_is_refused() -> None:
    fault = ScheduledFault(0.0, "kill-pipeline", (), 1.0)
    with pytest.raises(ValueError, match="kill-pipeline needs the txn workload"):
        build(fault, NO_CLUSTER, log=nm.FaultLog())


def test_txn_nemeses_are_scheduled_process_faults() -> None:
    names = ["kill-txn-coordinator", "kill-pipeline"]
    plan = plan_schedule(3, names, 40.0, ["c1", "b101"])
    assert plan and {f.kind for f in plan} <= set(names)
    assert set(names) <= PROCESS_NEMESES


def txn_result(*, aborted_reads: int, committed: int = 5) -> TxnResult:
    counts = {"aborted_read": aborted_reads}
    return TxnResult(
        valid=aborted_reads == 0,
        complete=True,
        counts=counts,
        examples={},
        stats=TxnStats(committed, 0, 0, 0, 0, 0, 0),
    )


def test_run_result_reports_the_txn_verdict(tmp_path: Path) -> None:
    recovered = {"quorum": 0.1, "leaders": 0.1}

    def result(txn: TxnResult) -> RunResult:
        return RunResult(1, tmp_path, [], None, None, recovery_s=recovered, txn=txn)

    clean = result(txn_result(aborted_reads=0))
    assert clean.valid and clean.problems(recovery_bound_s=20.0) == []
    bad = result(txn_result(aborted_reads=2))
    assert not bad.valid
    assert any("aborted_read" in p for p in bad.problems(recovery_bound_s=20.0))
    idle = result(txn_result(aborted_reads=0, committed=0))
    assert any("no transaction committed" in p for p in idle.problems(recovery_bound_s=20.0))
