"""The pure parts of ``raftka chaos run``: the seeded schedule, where a run may go, and
the node configs it writes.

- ``plan_schedule`` is a function of its arguments: the same seed gives the same
  faults, another seed other ones; faults never overlap or run past the duration.
- ``placement_for`` refuses network nemeses without root (with a reason naming them) and
  runs process faults on loopback.
- Every config the chaos cluster writes parses with the real config readers, and each
  node listens on and advertises its own host's address.
- The CLI refuses unknown nemeses, and network nemeses when not root (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from raftka.broker.config import load_broker_config
from raftka.chaos.cli import chaos_group
from raftka.chaos.nodes import NODE_NAMES, ChaosCluster, config_properties, node_specs
from raftka.chaos.runner import NEMESES, PROCESS_NEMESES, placement_for, plan_schedule
from raftka.server_common.node_config import load_node_config


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    """Replaying a seed replays the faults: equal lists for equal seeds; 20 other seeds
    do not all give the first one's list."""
    kinds = list(NEMESES)
    first = plan_schedule(7, kinds, 120.0, list(NODE_NAMES))
    assert first == plan_schedule(7, kinds, 120.0, list(NODE_NAMES))
    others = [plan_schedule(s, kinds, 120.0, list(NODE_NAMES)) for s in range(8, 28)]
    assert any(o != first for o in others)


@pytest.mark.parametrize("seed", range(10))
def test_schedule_faults_are_sequential_and_within_duration(seed: int) -> None:
    """One fault at a time, each ending before the next starts and before the end."""
    plan = plan_schedule(seed, list(NEMESES), 90.0, list(NODE_NAMES))
    assert plan, "a 90 s schedule has faults"
    end = 0.0
    for fault in plan:
        assert fault.offset_s >= end, plan
        end = fault.offset_s + fault.duration_s
        assert end <= 90.0 + 1e-6
        assert fault.kind in NEMESES
        assert all(t in NODE_NAMES for t in fault.targets)


def test_unknown_nemesis_is_refused() -> None:
    """A misspelt nemesis is an error naming the choices, not an empty schedule."""
    with pytest.raises(ValueError, match="isolate-controller"):
        plan_schedule(1, ["isolate-controler"], 30.0, list(NODE_NAMES))


def test_placement_needs_root_for_network_faults() -> None:
    """Network nemeses need root (the reason names them); process faults run on loopback
    without root; with root everything runs on namespace hosts."""
    placement, reason = placement_for(["kill", "isolate-leader"], root=False)
    assert placement is None and "isolate-leader" in reason and "root" in reason
    assert placement_for(sorted(PROCESS_NEMESES), root=False) == ("loopback", "")
    assert placement_for(["split"], root=True) == ("netns", "")


@pytest.mark.parametrize("placement", ["netns", "loopback"])
def test_written_configs_parse_with_the_real_readers(placement: str, tmp_path: Path) -> None:
    """Each node's file parses with the reader its process uses and names its own
    address as listener and advertised address; every file names the same voters."""
    ips = {f"n{i}": f"10.99.0.{i}" for i in range(1, 7)}
    specs = (
        node_specs(tmp_path, placement="netns", host_ips=ips)
        if placement == "netns"
        else node_specs(tmp_path, placement="loopback", ports=list(range(20001, 20007)))
    )
    cluster = ChaosCluster(data_dir=tmp_path, placement=placement, specs=specs, netns=None)
    for spec in specs:
        if spec.role == "controller":
            node = load_node_config(spec.config_path)
            assert (node.listen_host, node.listen_port) == (spec.ip, spec.port)
            assert node.voters[spec.node_id] == (spec.ip, spec.port)
        else:
            broker = load_broker_config(spec.config_path)
            assert (broker.advertised_host, broker.advertised_port) == (spec.ip, spec.port)
            assert broker.min_insync_replicas == 2
            assert broker.controllers == tuple(cluster.bootstrap_controllers)
    assert len({s.address for s in specs}) == 6
    props = config_properties(specs[0], cluster.voters)
    assert props["unclean.leader.election.enable"] == "false"


def test_cli_refuses_network_faults_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without root, ``raftka chaos run --nemesis isolate`` prints the seed and a clear
    reason and exits 2 before building anything."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(
        chaos_group, ["run", "--nemesis", "isolate", "--seed", "5", "--duration", "5"]
    )
    assert result.exit_code == 2, result.output
    assert "seed 5" in result.output and "need network namespaces" in result.output


def test_cli_rejects_unknown_nemesis() -> None:
    """An unknown name is a usage error listing the known ones."""
    result = CliRunner().invoke(chaos_group, ["run", "--nemesis", "nope", "--seed", "1"])
    assert result.exit_code == 2 and "jepsen-2013" in result.output
