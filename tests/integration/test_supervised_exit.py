"""No half-broken processes: a fatal background task takes its process down.

Real processes with the test-only hook ``RAFTKA_TEST_FAIL_TASK=<task name>``
(``raftka.server_common.supervision``), which makes that task raise as soon as it
starts: a broker whose ``log-retention`` task dies and a controller whose
``controller-timers`` task dies each exit with code 1 and print one line
``fatal: <task> died: <error>`` on stderr (the process log here).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.processes import NodeProcess
from raftka.server_common.supervision import FAIL_TASK_ENV

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


def _exit_code(node: NodeProcess) -> int:
    popen = node.popen
    assert popen is not None
    return wait_for(
        lambda: popen.poll() is not None,
        timeout_s=DEADLINE_S,
        message=lambda: f"{node.role} {node.node_id} still running; log:\n{node.tail()}",
    ) and int(popen.returncode)


def _fatal_lines(node: NodeProcess) -> list[str]:
    return [line for line in node.tail(200).splitlines() if line.startswith("fatal: ")]


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, controllers=1) as cluster:
        cluster.start()
        cluster.wait_leader()
        yield cluster


def test_a_broker_whose_fatal_task_dies_exits_1_with_one_line(
    controllers: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAIL_TASK_ENV, "log-retention")  # read by the broker started next
    with LocalBrokers(controllers, count=1) as brokers:
        node = brokers[brokers.ids[0]]
        node.start()
        assert _exit_code(node) == 1
        lines = _fatal_lines(node)
        assert len(lines) == 1, node.tail(50)
        assert lines[0].startswith("fatal: log-retention died: RuntimeError: injected failure")


def test_a_controller_whose_timers_die_exits_1_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAIL_TASK_ENV, "controller-timers")
    with LocalCluster(tmp_path / "c", controllers=1) as cluster:
        node = cluster.controllers[1]
        node.start()
        assert _exit_code(node) == 1
        lines = _fatal_lines(node)
        assert len(lines) == 1, node.tail(50)
        assert lines[0].startswith("fatal: controller-timers died: RuntimeError: injected")
