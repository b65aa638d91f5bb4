"""``raftka up`` / ``status`` / ``server``: the pure parts, without processes.

- cluster.json round-trips through write/read, and a damaged file is refused naming
  the field;
- plan_cluster lays out ids and ports, resumes a recorded cluster, and refuses options
  that contradict it;
- build_status turns canned /health and /v1/metadata answers into each node's state,
  the active controller and partitions; render_status shows them on one screen;
- the broker list of ``status --bootstrap-controller`` comes from metadata records;
- the combined mode's listener split and config checks;
- the commands' argument validation (through click's runner, no cluster).
"""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from raftka.local import free_port_run
from raftka.local.up import (
    SECURE_DIR,
    ClusterFile,
    ClusterFileError,
    NodeEntry,
    brokers_from_metadata_records,
    build_status,
    controllers_from_brokers,
    plan_cluster,
    read_cluster_file,
    render_status,
    status_command,
    up_command,
    write_cluster_file,
)
from raftka.server_cli import combined_configs, split_listeners
from raftka.server_common.process_config import ConfigError


def _plan(tmp_path: Path, **kw: object) -> ClusterFile:
    args: dict[str, object] = {
        "controllers": None,
        "brokers": None,
        "base_port": None,
        "engine": None,
    }
    args.update(kw)
    return plan_cluster(None, data_dir=tmp_path, **args)  # type: ignore[arg-type]


def test_cluster_file_round_trip(tmp_path: Path) -> None:
    """A planned cluster with pids written and read back is equal, and the file carries
    the bootstrap strings tools read."""
    plan = _plan(tmp_path, base_port=20000)
    with_pids = ClusterFile(
        engine=plan.engine,
        up_pid=42,
        nodes=tuple(
            NodeEntry(
                id=n.id, role=n.role, host=n.host, port=n.port, data_dir=n.data_dir, pid=100 + i
            )
            for i, n in enumerate(plan.nodes)
        ),
    )
    write_cluster_file(tmp_path, with_pids)
    assert read_cluster_file(tmp_path) == with_pids
    raw = orjson.loads((tmp_path / "cluster.json").read_bytes())
    assert raw["bootstrap_servers"] == "127.0.0.1:20003,127.0.0.1:20004,127.0.0.1:20005"
    assert raw["bootstrap_controllers"] == "127.0.0.1:20000,127.0.0.1:20001,127.0.0.1:20002"
    assert with_pids.pids() == [42, 100, 101, 102, 103, 104, 105]


def test_cluster_file_missing_and_damaged(tmp_path: Path) -> None:
    """No file reads as None; a wrong field is a ClusterFileError naming it."""
    assert read_cluster_file(tmp_path) is None
    write_cluster_file(tmp_path, _plan(tmp_path))
    raw = orjson.loads((tmp_path / "cluster.json").read_bytes())
    raw["nodes"][2]["port"] = "9095"
    (tmp_path / "cluster.json").write_bytes(orjson.dumps(raw))
    with pytest.raises(ClusterFileError, match=r"nodes\[2\]\.port"):
        read_cluster_file(tmp_path)
    (tmp_path / "cluster.json").write_bytes(b"{not json")
    with pytest.raises(ClusterFileError, match="not JSON"):
        read_cluster_file(tmp_path)


def test_plan_new_and_resumed(tmp_path: Path) -> None:
    """New: controllers 1..N on base.., brokers 101.. after them. Resumed: the recorded
    ids and ports (or moved by --base-port); a different count or engine is refused."""
    plan = _plan(tmp_path, controllers=1, brokers=2, base_port=30000)
    assert [(n.id, n.role, n.port) for n in plan.nodes] == [
        (1, "controller", 30000),
        (101, "broker", 30001),
        (102, "broker", 30002),
    ]
    resumed = plan_cluster(
        plan, data_dir=tmp_path, controllers=None, brokers=None, base_port=None, engine=None
    )
    assert resumed == plan
    moved = plan_cluster(
        plan, data_dir=tmp_path, controllers=1, brokers=2, base_port=31000, engine="native"
    )
    assert [n.port for n in moved.nodes] == [31000, 31001, 31002]
    # Each broker's Kafka listener comes after every HTTP port, and moves with them.
    assert [n.kafka_port for n in plan.nodes] == [None, 30003, 30004]
    assert [n.kafka_port for n in moved.nodes] == [None, 31003, 31004]
    assert plan.kafka_bootstrap_servers == "127.0.0.1:30003,127.0.0.1:30004"
    with pytest.raises(ValueError, match="--controllers 3 differs"):
        plan_cluster(
            plan, data_dir=tmp_path, controllers=3, brokers=None, base_port=None, engine=None
        )
    with pytest.raises(ValueError, match="--brokers 3 differs"):
        plan_cluster(
            plan, data_dir=tmp_path, controllers=None, brokers=3, base_port=None, engine=None
        )
    with pytest.raises(ValueError, match="--engine pysyncobj"):
        plan_cluster(
            plan, data_dir=tmp_path, controllers=None, brokers=None, base_port=None,
            engine="pysyncobj",
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"outside 1\.\.65535"):
        _plan(tmp_path, base_port=65533)


def _canned(plan: ClusterFile) -> dict[tuple[str, str], tuple[int, object] | None]:
    c1, c2, c3 = plan.controllers
    b1, b2, b3 = plan.brokers
    return {
        (c1.address, "/health"): (
            200,
            {"role": "follower", "leader_id": 2, "epoch": 7, "active_controller": False},
        ),
        (c2.address, "/health"): (
            200,
            {"role": "leader", "leader_id": 2, "epoch": 7, "active_controller": True},
        ),
        (c3.address, "/health"): None,
        (b1.address, "/health"): (200, {"fenced": False}),
        (b2.address, "/health"): (200, {"fenced": True}),
        (b3.address, "/health"): (503, {"status": "starting"}),
        (b1.address, "/v1/metadata"): (
            200,
            {
                "metadata_offset": 10,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {
                                "partition": 1,
                                "leader": 101,
                                "leader_epoch": 2,
                                "replicas": [101, 102],
                                "isr": [101],
                            },
                            {
                                "partition": 0,
                                "leader": -1,
                                "leader_epoch": 0,
                                "replicas": [102],
                                "isr": [],
                            },
                        ],
                    }
                ],
            },
        ),
    }


def test_build_status_from_canned_answers(tmp_path: Path) -> None:
    """States: active / follower / down controllers; unfenced / fenced / starting
    brokers; partitions sorted from the broker that answered; not ready and not
    healthy, with every reason named (a node not up, a partition without a leader,
    one whose ISR is short of its replicas)."""
    plan = _plan(tmp_path, base_port=20000)
    status = build_status(plan.nodes, _canned(plan))
    assert [(c.id, c.state) for c in status.controllers] == [
        (1, "follower"),
        (2, "active"),
        (3, "down"),
    ]
    assert [(b.id, b.state) for b in status.brokers] == [
        (101, "unfenced"),
        (102, "fenced"),
        (103, "starting"),
    ]
    assert (status.active_controller, status.leader_epoch) == (2, 7)
    assert [(p.partition, p.leader, p.isr) for p in status.partitions] == [
        (0, -1, ()),
        (1, 101, (101,)),
    ]
    assert status.metadata_from == 101
    assert not status.healthy and not status.ready
    assert status.problems() == [
        "controller 3 down",
        "broker 102 fenced (fenced)",
        "broker 103 not registered (starting)",
        "orders-0 has no leader",
        "orders-1 under-replicated (ISR 101 of 101,102)",
    ]
    as_json = status.to_json()
    assert as_json["healthy"] is False
    assert as_json["problems"] == status.problems()
    assert as_json["controllers"][1] == {
        "id": 2,
        "role": "controller",
        "address": "127.0.0.1:20001",
        "pid": None,
        "state": "active",
        "quorum_role": "leader",
    }
    text = render_status(status)
    assert "cluster: NOT healthy: controller 3 down; broker 102 fenced" in text
    assert "quorum: active controller 2, epoch 7" in text
    assert "controller      3  127.0.0.1:20002              -  down" in text
    assert "orders                           1     101  101,102         101" in text
    assert "orders                           0    none" in text


def test_status_healthy_and_unreachable(tmp_path: Path) -> None:
    """Every node up, an active controller and every partition led with its full ISR
    is healthy; without the brokers' metadata the cluster is ready but not healthy
    (partitions unknown); no answers at all is unreachable and names no active
    controller."""
    plan = _plan(tmp_path, controllers=1, brokers=1, base_port=20000)
    c, b = plan.nodes
    answers: dict[tuple[str, str], tuple[int, object] | None] = {
        (c.address, "/health"): (200, {"role": "leader", "epoch": 1, "active_controller": True}),
        (b.address, "/health"): (200, {"fenced": False}),
    }
    unknown = build_status(plan.nodes, answers)
    assert unknown.ready and unknown.reachable and not unknown.healthy
    assert unknown.problems() == ["partitions unknown (no broker answered)"]
    assert "partitions: unknown" in render_status(unknown)
    partition = {"partition": 0, "leader": 101, "replicas": [101], "isr": [101]}
    answers[(b.address, "/v1/metadata")] = (
        200,
        {"metadata_offset": 3, "topics": [{"name": "t", "partitions": [partition]}]},
    )
    status = build_status(plan.nodes, answers)
    assert status.healthy and status.reachable and status.problems() == []
    assert render_status(status).startswith("cluster: healthy")
    down = build_status(plan.nodes, {})
    assert not down.reachable and not down.healthy
    assert down.problems()[0] == "no active controller (controllers: 1 down)"


def test_brokers_from_metadata_records() -> None:
    """The latest registration of each broker gives its address; an unregistration
    removes it; endpoints as objects or as [name, host, port] lists."""
    records = [
        {"type": "RegisterBrokerRecord",
         "data": {"broker_id": 101, "endpoints": [{"name": "PLAINTEXT", "host": "h", "port": 1}]}},
        {"type": "RegisterBrokerRecord",
         "data": {"broker_id": 102, "endpoints": [["PLAINTEXT", "h", 2]]}},
        {"type": "RegisterBrokerRecord",
         "data": {"broker_id": 101, "endpoints": [["PLAINTEXT", "h", 3]]}},
        {"type": "RegisterBrokerRecord",
         "data": {"broker_id": 103, "endpoints": [["PLAINTEXT", "h", 4]]}},
        {"type": "UnregisterBrokerRecord", "data": {"broker_id": 103, "broker_epoch": 9}},
        {"type": "TopicRecord", "data": {"name": "t"}},
    ]  # fmt: skip
    assert brokers_from_metadata_records(records) == {101: "h:3", 102: "h:2"}


def test_combined_configs_split_the_listeners(tmp_path: Path) -> None:
    """controller+broker: the controller binds its voter port, the broker the other
    listener; the metadata log defaults beside the partitions, under a name that is
    not a partition directory. Missing or shared listeners are refused."""
    props = {
        "node.id": "1",
        "process.roles": "controller,broker",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "log.dirs": str(tmp_path),
        "replica.lag.time.max.ms": "5000",
    }
    controller, broker = combined_configs(props)
    assert controller is not None and broker is not None
    assert (controller.listen_port, broker.listen_port) == (9093, 9092)
    assert broker.controllers == ("127.0.0.1:9093",)
    assert broker.replica_lag_time_max_ms == 5000
    assert controller.metadata_log_dir == tmp_path / "__cluster_metadata"
    assert split_listeners("CONTROLLER://a:1") == ("CONTROLLER://a:1", None)
    # A combined process keeps the broker's Kafka listener too.
    _, with_kafka = combined_configs(
        {**props, "listeners": "HTTP://127.0.0.1:8081,CONTROLLER://127.0.0.1:9093,"
         "PLAINTEXT://127.0.0.1:9092"}
    )  # fmt: skip
    assert with_kafka is not None and with_kafka.listen_port == 8081
    assert with_kafka.kafka_listener is not None and with_kafka.kafka_listener.port == 9092
    with pytest.raises(ConfigError, match="must name a controller listener"):
        combined_configs({**props, "listeners": "PLAINTEXT://127.0.0.1:9092"})
    with pytest.raises(ConfigError, match="needs listeners for both roles"):
        combined_configs({k: v for k, v in props.items() if k != "listeners"})
    with pytest.raises(ConfigError, match=r"process\.roles"):
        combined_configs({**props, "process.roles": "controller,bogus"})
    only_controller, none = combined_configs(
        {**props, "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093"}
    )
    assert none is None and only_controller is not None


def test_command_argument_validation(tmp_path: Path) -> None:
    """Bad counts and ports are usage errors; status with two sources is refused; a
    data dir without cluster.json says so in one line, exit 1."""
    runner = CliRunner()
    for args in (["--controllers", "0"], ["--brokers", "100"], ["--base-port", "70000"]):
        result = runner.invoke(up_command, [*args, "--data-dir", str(tmp_path)])
        assert result.exit_code == 2, (args, result.output)
    both = ["--data-dir", str(tmp_path), "--bootstrap-controller", "127.0.0.1:1"]
    result = runner.invoke(status_command, both)
    assert result.exit_code == 2 and "give one of" in result.output
    result = runner.invoke(
        status_command, ["--bootstrap-server", "127.0.0.1:1", "--bootstrap-controller", "x:1"]
    )
    assert result.exit_code == 2 and "give one of" in result.output
    result = runner.invoke(status_command, ["--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: no cluster.json in {tmp_path} (start a cluster with raftka up, or give "
        "--bootstrap-controller)"
    ]
    resume_conflict = _plan(tmp_path, controllers=1, brokers=1, base_port=20000)
    write_cluster_file(tmp_path, resume_conflict)
    result = runner.invoke(up_command, ["--data-dir", str(tmp_path), "--controllers", "3"])
    assert result.exit_code == 1 and "--controllers 3 differs" in result.output


def test_controllers_from_brokers_asks_the_first_broker_that_answers() -> None:
    """``status --bootstrap-server``: the controllers come from the first broker whose
    /v1/metadata answers; none answering, or one naming no controllers, is a
    ValueError naming the addresses."""
    answers: dict[tuple[str, str], tuple[int, object] | None] = {
        ("b1:1", "/v1/metadata"): None,
        ("b2:2", "/v1/metadata"): (200, {"controllers": ["c1:9093", "c2:9094"]}),
    }

    def get(address: str, path: str) -> tuple[int, object] | None:
        return answers.get((address, path))

    assert controllers_from_brokers("b1:1, b2:2", get) == "c1:9093,c2:9094"
    with pytest.raises(ValueError, match="no broker answers at b1:1"):
        controllers_from_brokers("b1:1", get)
    answers[("b3:3", "/v1/metadata")] = (200, {"controllers": []})
    with pytest.raises(ValueError, match="broker b3:3 names no controllers"):
        controllers_from_brokers("b3:3", get)


def test_free_port_run_is_a_base_with_free_ports_after_it() -> None:
    """Each port of the run binds (they were free when it was chosen)."""
    base = free_port_run(3)
    socks = [socket.socket() for _ in range(3)]
    try:
        for offset, s in enumerate(socks):
            s.bind(("127.0.0.1", base + offset))
    finally:
        for s in socks:
            s.close()


def test_the_console_port_is_checked_before_anything_starts(tmp_path: Path) -> None:
    """A console port in use, or one given with --no-console, is refused in one line
    before any node starts (no cluster.json is written)."""
    runner = CliRunner()
    base = free_port_run(9)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        args = ["--data-dir", str(tmp_path), "--base-port", str(base)]
        result = runner.invoke(up_command, [*args, "--console-port", str(busy)])
    assert result.exit_code == 1, result.output
    assert f"port {busy} (the web console) is in use" in result.output
    result = runner.invoke(up_command, [*args, "--console-port", "1", "--no-console"])
    assert result.exit_code == 1 and "contradict" in result.output
    assert not (tmp_path / "cluster.json").exists()


def test_a_secure_data_dir_is_not_resumed_as_plaintext(tmp_path: Path) -> None:
    """A data dir made with --secure (it has ``secure/``) resumed without the flag is
    refused in one line before any node starts."""
    runner = CliRunner()
    base = free_port_run(9)
    write_cluster_file(tmp_path, _plan(tmp_path, controllers=1, brokers=1, base_port=base))
    (tmp_path / SECURE_DIR).mkdir()
    result = runner.invoke(up_command, ["--data-dir", str(tmp_path), "--no-console"])
    assert result.exit_code == 1, result.output
    assert "was started with --secure; resume it with raftka up --secure" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
