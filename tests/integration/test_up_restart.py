"""``raftka up`` and a node that dies: reported, and restarted when asked.

One controller and one broker under ``raftka up`` (a subprocess, tmp data dir):

- with ``--restart-on-failure``, kill -9 of the broker: ``up`` says it exited with -9,
  restarts it (a new pid in cluster.json) and the cluster is healthy again;
- without it, kill -9 of the broker: ``raftka status --json`` reports the broker as
  ``exited`` with exit code -9 and the cluster as not healthy; ``up`` keeps running.

Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.local import free_port_run, wait_for

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0


def _status(data_dir: Path) -> dict[str, Any] | None:
    """``raftka status --json`` whether healthy (exit 0) or not (exit 1)."""
    done = subprocess.run(
        [sys.executable, "-m", "raftka", "status", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if not done.stdout.strip():
        return None
    status: dict[str, Any] = orjson.loads(done.stdout)
    return status


def _cluster(data_dir: Path) -> dict[str, Any]:
    cluster: dict[str, Any] = orjson.loads((data_dir / "cluster.json").read_bytes())
    return cluster


def _broker_pid(data_dir: Path) -> int | None:
    broker = next(n for n in _cluster(data_dir)["nodes"] if n["role"] == "broker")
    pid: int | None = broker["pid"]
    return pid


@pytest.fixture
def up(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path]]:
    """Runs ``raftka up`` with the test's extra arguments (``request.param``) until it is
    healthy; stopped with SIGTERM afterwards."""
    data, log = tmp_path / "data", tmp_path / "up.log"
    base = free_port_run(3)  # a controller, a broker and its Kafka listener
    args = ["up", "--controllers", "1", "--brokers", "1", "--base-port", str(base)]
    args += ["--no-console"]  # these tests are about the nodes (test_local_up runs one)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raftka", *args, "--data-dir", str(data), *request.param],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:

        def healthy() -> bool:
            assert proc.poll() is None, f"raftka up exited:\n{log.read_text()}"
            # up itself past its start-up wait (a node that exits during it fails the
            # start, whatever the flag), not only the cluster healthy to `raftka status`
            if "running; cluster.json in" not in log.read_text():
                return False
            status = _status(data)
            return status is not None and status["healthy"]

        wait_for(healthy, timeout_s=DEADLINE_S, message=lambda: log.read_text()[-3000:])
        yield data, log
        assert proc.poll() is None, f"raftka up exited:\n{log.read_text()}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("up", [["--restart-on-failure"]], indirect=True)
def test_restart_on_failure_brings_a_killed_broker_back(up: tuple[Path, Path]) -> None:
    data, log = up
    old_pid = _broker_pid(data)
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)

    def back() -> bool:
        pid = _broker_pid(data)
        if pid is None or pid == old_pid:
            return False
        status = _status(data)
        return status is not None and status["healthy"]

    wait_for(back, timeout_s=DEADLINE_S, message=lambda: log.read_text()[-3000:])
    text = log.read_text()
    assert "exited with -9" in text and "restart 1 of 5" in text
    assert "restarted broker" in text


@pytest.mark.parametrize("up", [[]], indirect=True)
def test_without_the_flag_status_reports_the_exited_broker(up: tuple[Path, Path]) -> None:
    data, log = up
    pid = _broker_pid(data)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def exited() -> dict[str, Any] | None:
        status = _status(data)
        if status is None:
            return None
        broker = status["brokers"][0]
        return broker if broker["state"] == "exited" else None

    broker = wait_for(exited, timeout_s=DEADLINE_S, message=lambda: log.read_text()[-3000:])
    assert broker["exit_code"] == -9
    status = _status(data)
    assert status is not None and not status["healthy"]
    assert any("exited (code -9)" in p for p in status["problems"])
    assert "stays down" in log.read_text()
