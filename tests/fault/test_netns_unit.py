"""Parts of the fault harness that need no root: schedules, topologies, the fault log,
process faults, and the clear error every root-only entry point raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raftka.chaos import nemesis as nm
from raftka.chaos.netns import ROOT_REASON, process_state

HOSTS5 = ["n1", "n2", "n3", "n4", "n5"]


def wait_until(cond: Callable[[], bool], timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, message
        time.sleep(0.005)


def test_schedule_is_deterministic_per_seed() -> None:
    """The same seed, kinds, duration and hosts give the same schedule; another seed gives
    another one; faults never overlap, stay inside the duration and use only the kinds
    asked for. Checked by generating each schedule twice and comparing."""
    kinds = list(nm.KINDS)
    a = nm.generate_schedule(42, kinds, 120.0, HOSTS5)
    b = nm.generate_schedule(42, kinds, 120.0, HOSTS5)
    c = nm.generate_schedule(43, kinds, 120.0, HOSTS5)
    assert a == b
    assert a != c
    assert len(a) >= 5
    end = 0.0
    for f in a:
        assert f.kind in kinds
        assert f.offset_s >= end, f"{f} overlaps the previous fault"
        end = f.offset_s + f.duration_s
        assert end <= 120.0 + 1e-6
        assert set(f.targets) <= set(HOSTS5)
    only = nm.generate_schedule(7, ["isolate", "kill"], 60.0, HOSTS5)
    assert {f.kind for f in only} <= {"isolate", "kill"}
    with pytest.raises(ValueError, match="kinds"):
        nm.generate_schedule(1, ["meteor"], 10.0, HOSTS5)


def test_topologies() -> None:
    """The pure topology helpers cut what their names promise: checked against the
    drop sets written out by hand for 5 hosts, and the majorities ring for 7."""
    iso = nm.grudge_from_components(HOSTS5, [["n2"]])
    assert iso["n2"] == {"n1", "n3", "n4", "n5"}
    assert iso["n1"] == {"n2"}
    views = nm.bridge_views(HOSTS5)
    assert views["n3"] == set(HOSTS5)
    assert views["n1"] == {"n1", "n2", "n3"}
    assert views["n5"] == {"n3", "n4", "n5"}
    ring = nm.majorities_ring_views(HOSTS5)
    assert ring["n1"] == {"n5", "n1", "n2"}
    assert ring["n3"] == {"n2", "n3", "n4"}
    ring7 = nm.majorities_ring_views([f"n{i}" for i in range(1, 8)])
    assert all(len(v) >= 4 for v in ring7.values())
    assert len({frozenset(v) for v in ring7.values()}) == 7
    majority, minority = nm.split_halves(HOSTS5, nm.random.Random(3))
    assert len(minority) == 2 and len(majority) == 3
    assert set(majority) | set(minority) == set(HOSTS5)
    with pytest.raises(ValueError, match="two components"):
        nm.grudge_from_components(HOSTS5, [["n1"], ["n1", "n2"]])


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"],
        stdin=subprocess.DEVNULL,
    )


def test_pause_kill_restart_without_root(tmp_path: Path) -> None:
    """Pause stops a process (/proc state T) and heal resumes it; Kill sends SIGKILL,
    reaps the child (no zombie: /proc/PID is gone) and heal restarts it with a new pid.
    The fault log gets a start and an end line per fault, with wall and monotonic
    times. Plain child processes, so no root is needed."""
    log = nm.FaultLog(tmp_path / "faults.jsonl")
    node = nm.Node("n1", _sleeper)
    node.start()
    try:
        first = node.pid
        pause = nm.Pause(lambda: node.pid, name="n1", log=log)
        pause.apply()
        assert process_state(first) == "T"
        pause.heal()
        wait_until(lambda: process_state(first) in ("R", "S", "D"), 5, "not resumed")

        kill = nm.Kill.node(node, log=log)
        kill.apply()
        assert kill.detail["returncode"] == -9
        assert not Path(f"/proc/{first}").exists(), "killed child left a zombie"
        kill.heal()
        assert node.pid != first
        # D: in disk sleep while the new interpreter loads (running, not stopped).
        assert process_state(node.pid) in ("R", "S", "D")
    finally:
        node.stop()
    lines = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(e["event"], e["kind"]) for e in lines] == [
        ("start", "pause"),
        ("end", "pause"),
        ("start", "kill"),
        ("end", "kill"),
    ]
    end = lines[3]
    assert end["targets"] == ["n1"]
    assert end["start_mono"] <= end["end_mono"]
    assert end["start_wall"] <= end["end_wall"]
    assert end["detail"]["restarted_pid"] == node.pid
    assert len(log.windows()) == 2


_NO_ROOT_PROBE = """
from raftka.chaos.netns import Cluster, NeedsRootError, main
try:
    Cluster.create(3)
except NeedsRootError as exc:
    print("refused:", exc)
print("cli:", main(["down", "--prefix", "zz"]))
"""


def test_root_entry_points_refuse_clearly() -> None:
    """Without root, Cluster.create raises NeedsRootError naming the reason and the CLI
    exits 2 with it. As root we check this in a child that drops to uid 65534."""
    argv = [sys.executable, "-c", _NO_ROOT_PROBE]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert f"refused: Cluster.create: {ROOT_REASON}" in proc.stdout, proc.stdout + proc.stderr
    assert "cli: 2" in proc.stdout
    assert ROOT_REASON in proc.stderr
