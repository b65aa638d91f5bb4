"""``raftka up``'s report of exited nodes and its restart backoff, without processes:
an exit code recorded in cluster.json round-trips, and a node that does not answer
with one recorded shows as ``exited (code N)`` in ``raftka status`` and among the
problems; the restart delays grow and are capped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from raftka.local.up import (
    RESTART_BACKOFF_MAX_S,
    ClusterFile,
    build_status,
    plan_cluster,
    read_cluster_file,
    render_status,
    restart_delay_s,
    write_cluster_file,
)


def _plan(tmp_path: Path) -> ClusterFile:
    return plan_cluster(
        None, data_dir=tmp_path, controllers=1, brokers=2, base_port=21000, engine=None
    )


def test_an_exited_node_is_reported_with_its_exit_code(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    broker = plan.brokers[0]
    nodes = tuple(replace(n, exit_code=-9) if n.id == broker.id else n for n in plan.nodes)
    write_cluster_file(tmp_path, replace(plan, nodes=nodes))
    loaded = read_cluster_file(tmp_path)
    assert loaded is not None
    assert [n.exit_code for n in loaded.nodes if n.id == broker.id] == [-9]
    # Nobody answers: the node with an exit code is "exited", the others "down".
    status = build_status(loaded.nodes, {})
    b = next(n for n in status.brokers if n.id == broker.id)
    assert b.state == "exited" and b.exit_code == -9
    assert b.to_json()["exit_code"] == -9
    assert f"broker {broker.id} exited (code -9)" in status.problems()
    other = next(n for n in status.brokers if n.id != broker.id)
    assert other.state == "down" and "exit_code" not in other.to_json()
    assert "exited (code -9)" in render_status(status)


def test_an_exit_code_is_ignored_once_the_node_answers(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    broker = plan.brokers[0]
    nodes = tuple(replace(n, exit_code=1) if n.id == broker.id else n for n in plan.nodes)
    answers = {(broker.address, "/health"): (200, {"status": "ok", "fenced": False})}
    status = build_status(nodes, answers)
    b = next(n for n in status.brokers if n.id == broker.id)
    assert b.state == "unfenced" and b.exit_code is None


def test_restart_delays_grow_and_are_capped() -> None:
    delays = [restart_delay_s(n) for n in range(8)]
    assert delays[:3] == [1.0, 2.0, 4.0]
    assert delays == sorted(delays) and max(delays) == RESTART_BACKOFF_MAX_S
