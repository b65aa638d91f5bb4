"""``raftka up`` and ``raftka status``: a local cluster with no configuration, and its view.

``raftka up`` starts N controllers (ids 1..N) and M brokers (ids 101..) as separate OS
processes on 127.0.0.1 through :class:`~raftka.local.processes.LocalCluster` and
:class:`~raftka.local.brokers.LocalBrokers`, with every file under one data directory
(default ``./raftka-data``). It records the layout in ``<data>/cluster.json`` (each
node's id, role, host, port, pid and data dir, each broker's Kafka listener port; the
bootstrap strings, the Kafka ones too) for tools and
tests, waits until a controller is active and every broker is registered and
unfenced, starts the web console (:mod:`raftka.console`, a child process on the port
after the Kafka listeners, unless ``--no-console``), prints the bootstrap servers, the
console's URL and a status screen, then stays in the foreground. SIGINT (Ctrl-C) or
SIGTERM stops the console, then the brokers (SIGTERM: controlled shutdown, while the
controllers still run to move their leaderships), then the controllers, waits for every
child and exits 0.

``--secure`` serves the brokers' Kafka listeners as SASL_SSL and every node's HTTP API
as HTTPS with client certificates (:mod:`raftka.local.secure`: a throwaway CA, broker,
node and client certificates, SCRAM-SHA-512, ACLs enforced, a user ``admin`` (the
authorizer's super user, and on the HTTPS API by its certificate) whose credential is
committed once the cluster is ready and whose password is printed, client settings in
``<data>/secure``; a resumed cluster keeps them, and resuming it without ``--secure`` is
refused rather than falling back to plaintext). The probes, the console and
``raftka status --data-dir`` use the user's certificate from there.

Run again on the same data directory it resumes: the same ids, ports and engine as
``cluster.json`` records (``--base-port`` moves the ports; a different node count or
engine is refused: the quorum's voters and the metadata log's format are fixed when
the cluster is made). A data directory whose ``cluster.json`` names a live raftka
process is refused, so two clusters never share files.

``raftka status`` probes a running cluster (from ``cluster.json``, or from one
controller's ``/v1/quorum`` and its metadata log's broker registrations) and prints
every node's state, the active controller, and each partition's leader and ISR (from
a broker's ``GET /v1/metadata``); ``--json`` prints the same as one object. It exits 0
only when the cluster is healthy: every node up (a controller active or following,
every broker unfenced), an active controller, and every partition with a leader and
its full replica set in the ISR; otherwise 1, after the same screen. ``--wait S``
probes again until healthy or S seconds passed, for scripts. The probing is I/O;
:func:`build_status` (answers in, view out) and :func:`render_status` are pure.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, Final

import click
import orjson

from raftka.common.client_tls import command_config, read_command_config
from raftka.common.errors import InvalidConfigError, KafkaError
from raftka.console.process import ConsoleProcess
from raftka.local.brokers import BROKER_ID_BASE, LocalBrokers
from raftka.local.processes import LocalCluster, NodeProcess, http_json, port_in_use, wait_for
from raftka.local.secure import (
    RAFTKA_CLIENT_FILE,
    SaslSslSetup,
    add_scram_user,
    sasl_ssl_setup,
    wait_until_brokers_know,
)
from raftka.metadata.cli import command_config_option, command_tls

__all__ = [
    "CLUSTER_FILE",
    "ClusterFile",
    "ClusterFileError",
    "ClusterStatus",
    "NodeEntry",
    "NodeStatus",
    "PartitionStatus",
    "brokers_from_metadata_records",
    "build_status",
    "controllers_from_brokers",
    "discover_nodes",
    "is_raftka_process",
    "plan_cluster",
    "probe_status",
    "read_cluster_file",
    "render_status",
    "restart_delay_s",
    "status_command",
    "up_command",
    "write_cluster_file",
]

CLUSTER_FILE: Final = "cluster.json"
CLUSTER_FILE_VERSION: Final = 1
DEFAULT_DATA_DIR: Final = "raftka-data"
DEFAULT_BASE_PORT: Final = 9093
DEFAULT_CONTROLLERS: Final = 3
DEFAULT_BROKERS: Final = 3
HOST: Final = "127.0.0.1"
CONTROLLERS_MAX: Final = 9
BROKERS_MAX: Final = 32
# Bound on the wait for "a controller is active and every broker unfenced".
READY_DEADLINE_S: Final = 60.0
# How often the foreground loop checks that every child still runs.
MONITOR_INTERVAL_S: Final = 1.0
PROBE_TIMEOUT_S: Final = 1.0
# Bounds on what status reads: metadata-log pages (--bootstrap-controller), rows shown.
METADATA_PAGES_MAX: Final = 1000
PARTITION_ROWS_MAX: Final = 20
# Partitions named one by one among the problems; the rest are counted.
PROBLEM_PARTITIONS_MAX: Final = 5
# How often ``raftka status --wait`` probes again.
STATUS_WAIT_INTERVAL_S: Final = 0.5
CLUSTER_FILE_BYTES_MAX: Final = 1024 * 1024
# A dead broker is fenced within 3 s instead of Kafka's 9 s: a local cluster restarts
# often, and a broker's new incarnation waits out its old session before registering.
UP_LOCAL_PROPERTIES: Final[Mapping[str, str]] = {"broker.session.timeout.ms": "3000"}
#: --secure's certificates, password and client settings, under the data directory.
SECURE_DIR: Final = "secure"
# ``raftka up --restart-on-failure``: at most this many restarts of one node, the n-th
# after min(RESTART_BACKOFF_S * 2**(n-1), RESTART_BACKOFF_MAX_S) (a node that keeps
# dying is left down, with its exit code on the status screen, not restarted forever).
RESTARTS_MAX: Final = 5
RESTART_BACKOFF_S: Final = 1.0
RESTART_BACKOFF_MAX_S: Final = 30.0

Answer = tuple[int, Any] | None  # (HTTP status, JSON body), or None: no answer


class ClusterFileError(ValueError):
    """cluster.json is missing a field or has one of the wrong type."""


class _Problem(click.ClickException):
    """One line on stderr, exit status 1; never a traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


# ---------------------------------------------------------------------------------------
# cluster.json


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEntry:
    """One node as cluster.json records it (``pid`` is None while it is not running)."""

    id: int
    role: str  # "controller" or "broker"
    host: str
    port: int
    data_dir: str
    pid: int | None = None
    # The exit code of a node that exited without being asked (``raftka up`` records
    # it; None while running or after a requested stop).
    exit_code: int | None = None
    # A broker's Kafka binary-protocol listener (None: it has none).
    kafka_port: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        return None if self.kafka_port is None else f"{self.host}:{self.kafka_port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterFile:
    """What ``raftka up`` writes to ``<data>/cluster.json``."""

    engine: str
    nodes: tuple[NodeEntry, ...]
    up_pid: int | None = None

    @property
    def controllers(self) -> tuple[NodeEntry, ...]:
        return tuple(n for n in self.nodes if n.role == "controller")

    @property
    def brokers(self) -> tuple[NodeEntry, ...]:
        return tuple(n for n in self.nodes if n.role == "broker")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.brokers)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(n.address for n in self.controllers)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka listeners, for Kafka's own clients and tools."""
        return ",".join(a for n in self.brokers if (a := n.kafka_address) is not None)

    def pids(self) -> list[int]:
        """Every pid recorded (the ``up`` process's first)."""
        pids = [] if self.up_pid is None else [self.up_pid]
        return pids + [n.pid for n in self.nodes if n.pid is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CLUSTER_FILE_VERSION,
            "engine": self.engine,
            "up_pid": self.up_pid,
            "bootstrap_servers": self.bootstrap_servers,
            "bootstrap_controllers": self.bootstrap_controllers,
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "nodes": [
                {
                    "id": n.id,
                    "role": n.role,
                    "host": n.host,
                    "port": n.port,
                    "pid": n.pid,
                    "data_dir": n.data_dir,
                    "exit_code": n.exit_code,
                    "kafka_port": n.kafka_port,
                }
                for n in self.nodes
            ],
        }

    @staticmethod
    def from_json(obj: object) -> ClusterFile:
        """Parse and check; ClusterFileError names what is wrong."""
        if not isinstance(obj, dict):
            raise ClusterFileError("not a JSON object")
        if obj.get("version") != CLUSTER_FILE_VERSION:
            raise ClusterFileError(f"version {obj.get('version')!r} (expected 1)")
        engine = obj.get("engine")
        if engine not in ("native", "pysyncobj"):
            raise ClusterFileError(f"engine {engine!r} (expected native or pysyncobj)")
        raw_nodes = obj.get("nodes")
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise ClusterFileError("nodes: expected a non-empty list")
        nodes = tuple(_node_entry(item, i) for i, item in enumerate(raw_nodes))
        ids = [n.id for n in nodes]
        if len(set(ids)) != len(ids):
            raise ClusterFileError("nodes: two nodes share an id")
        if not any(n.role == "controller" for n in nodes):
            raise ClusterFileError("nodes: no controller")
        return ClusterFile(engine=engine, nodes=nodes, up_pid=_opt_int(obj, "up_pid", "up_pid"))


def _opt_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is not int or value <= 0:
        raise ClusterFileError(f"{where}: expected a positive integer or null, got {value!r}")
    return value


def _node_entry(item: object, i: int) -> NodeEntry:
    where = f"nodes[{i}]"
    if not isinstance(item, dict):
        raise ClusterFileError(f"{where}: expected an object")
    node_id, role, host, port = item.get("id"), item.get("role"), item.get("host"), item.get("port")
    if type(node_id) is not int or node_id < 0:
        raise ClusterFileError(f"{where}.id: expected an integer >= 0, got {node_id!r}")
    if role not in ("controller", "broker"):
        raise ClusterFileError(f"{where}.role: expected controller or broker, got {role!r}")
    if not isinstance(host, str) or not host:
        raise ClusterFileError(f"{where}.host: expected a host name, got {host!r}")
    if type(port) is not int or not 0 < port <= 65535:
        raise ClusterFileError(f"{where}.port: expected a port in 1..65535, got {port!r}")
    data_dir = item.get("data_dir")
    if not isinstance(data_dir, str) or not data_dir:
        raise ClusterFileError(f"{where}.data_dir: expected a path, got {data_dir!r}")
    return NodeEntry(
        id=node_id,
        role=role,
        host=host,
        port=port,
        data_dir=data_dir,
        pid=_opt_int(item, "pid", f"{where}.pid"),
        exit_code=_exit_code(item, where),
        kafka_port=_kafka_port(item, where),
    )


def _kafka_port(item: Mapping[str, Any], where: str) -> int | None:
    # Absent in files written before brokers had a Kafka listener.
    value = item.get("kafka_port")
    if value is not None and (type(value) is not int or not 0 < value <= 65535):
        raise ClusterFileError(f"{where}.kafka_port: expected a port in 1..65535, got {value!r}")
    return value


def _exit_code(item: Mapping[str, Any], where: str) -> int | None:
    # Any integer: a negative one is the signal that killed the node (kill -9: -9).
    value = item.get("exit_code")
    if value is not None and type(value) is not int:
        raise ClusterFileError(f"{where}.exit_code: expected an integer or null, got {value!r}")
    return value


def write_cluster_file(data_dir: Path, cluster: ClusterFile) -> Path:
    """Write cluster.json atomically (a reader never sees half a file)."""
    path = data_dir / CLUSTER_FILE
    tmp = path.with_name(CLUSTER_FILE + ".tmp")
    tmp.write_bytes(orjson.dumps(cluster.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    os.replace(tmp, path)
    return path


def read_cluster_file(data_dir: Path) -> ClusterFile | None:
    """The cluster.json of ``data_dir``, None if there is none; ClusterFileError if bad."""
    path = data_dir / CLUSTER_FILE
    try:
        with path.open("rb") as f:
            raw = f.read(CLUSTER_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    if len(raw) > CLUSTER_FILE_BYTES_MAX:
        raise ClusterFileError(f"{path}: larger than {CLUSTER_FILE_BYTES_MAX} bytes")
    try:
        return ClusterFile.from_json(orjson.loads(raw))
    except orjson.JSONDecodeError as e:
        raise ClusterFileError(f"{path}: not JSON: {e}") from None
    except ClusterFileError as e:
        raise ClusterFileError(f"{path}: {e}") from None


def plan_cluster(
    existing: ClusterFile | None,
    *,
    data_dir: Path,
    controllers: int | None,
    brokers: int | None,
    base_port: int | None,
    engine: str | None,
) -> ClusterFile:
    """The layout to start (pids unset): a new one, or ``existing`` resumed. Raises
    ValueError with the reason when the options contradict the recorded cluster."""
    if existing is not None:
        n_controllers, n_brokers = len(existing.controllers), len(existing.brokers)
        if controllers is not None and controllers != n_controllers:
            raise ValueError(
                f"{data_dir} holds a cluster of {n_controllers} controllers; --controllers "
                f"{controllers} differs (the quorum's voters are fixed; use another --data-dir)"
            )
        if brokers is not None and brokers != n_brokers:
            raise ValueError(
                f"{data_dir} holds a cluster of {n_brokers} brokers; --brokers {brokers} "
                "differs (use another --data-dir)"
            )
        if engine is not None and engine != existing.engine:
            raise ValueError(
                f"{data_dir} holds a cluster made with --engine {existing.engine}; "
                f"--engine {engine} cannot read its metadata log"
            )
        ordered = existing.controllers + existing.brokers
        # Kafka listeners follow every HTTP port; a file from before they existed
        # gets them after its highest port.
        kafka_first = (
            max(n.port for n in ordered) + 1 if base_port is None else base_port + len(ordered)
        )
        nodes = tuple(
            NodeEntry(
                id=n.id,
                role=n.role,
                host=n.host,
                port=n.port if base_port is None else base_port + i,
                data_dir=n.data_dir,
                kafka_port=None
                if n.role != "broker"
                else n.kafka_port
                if base_port is None and n.kafka_port is not None
                else kafka_first + i - len(existing.controllers),
            )
            for i, n in enumerate(ordered)
        )
        _check_ports(nodes)
        return ClusterFile(engine=existing.engine, nodes=nodes)
    n_controllers = DEFAULT_CONTROLLERS if controllers is None else controllers
    n_brokers = DEFAULT_BROKERS if brokers is None else brokers
    first = DEFAULT_BASE_PORT if base_port is None else base_port
    entries: list[NodeEntry] = []
    for i in range(n_controllers):
        node_id = i + 1
        entries.append(
            NodeEntry(
                id=node_id,
                role="controller",
                host=HOST,
                port=first + i,
                data_dir=str(data_dir / f"controller-{node_id}"),
            )
        )
    for i in range(n_brokers):
        node_id = BROKER_ID_BASE + i
        entries.append(
            NodeEntry(
                id=node_id,
                role="broker",
                host=HOST,
                port=first + n_controllers + i,
                data_dir=str(data_dir / f"broker-{node_id}"),
                kafka_port=first + n_controllers + n_brokers + i,
            )
        )
    nodes = tuple(entries)
    _check_ports(nodes)
    return ClusterFile(engine="native" if engine is None else engine, nodes=nodes)


def _check_ports(nodes: Sequence[NodeEntry]) -> None:
    for n in nodes:
        if not 0 < n.port <= 65535:
            raise ValueError(f"port {n.port} of {n.role} {n.id} is outside 1..65535")
    ports = [n.port for n in nodes] + [n.kafka_port for n in nodes if n.kafka_port is not None]
    if any(not 0 < p <= 65535 for p in ports):
        raise ValueError("a Kafka listener port would be outside 1..65535")
    if len(set(ports)) != len(ports):
        raise ValueError("two nodes would share a port")


# ---------------------------------------------------------------------------------------
# The status view (pure)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus:
    """``state``: a controller is active / follower / starting / down; a broker is
    unfenced / fenced / starting / down. ``quorum_role`` is the controller's Raft role."""

    id: int
    role: str
    address: str
    pid: int | None
    state: str
    quorum_role: str | None = None
    # Set with state "exited": the code the node's process exited with.
    exit_code: int | None = None
    # A broker's Kafka listener (host:port), when it has one.
    kafka_address: str | None = None

    @property
    def shown_state(self) -> str:
        return f"exited (code {self.exit_code})" if self.state == "exited" else self.state

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "address": self.address,
            "pid": self.pid,
            "state": self.state,
        }
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        if self.kafka_address is not None:
            out["kafka_address"] = self.kafka_address
        if self.role == "controller":
            out["quorum_role"] = self.quorum_role
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    topic: str
    partition: int
    leader: int
    leader_epoch: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterStatus:
    controllers: tuple[NodeStatus, ...]
    brokers: tuple[NodeStatus, ...]
    partitions: tuple[PartitionStatus, ...]
    active_controller: int | None
    leader_epoch: int | None
    # Where partitions came from (a broker id), None when no broker answered.
    metadata_from: int | None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(a for b in self.brokers if (a := b.kafka_address) is not None)

    @property
    def ready(self) -> bool:
        """A controller is active and every broker is unfenced: clients can work
        (what ``raftka up`` waits for before it prints the bootstrap servers)."""
        return self.active_controller is not None and all(
            b.state == "unfenced" for b in self.brokers
        )

    @property
    def healthy(self) -> bool:
        """Nothing is wrong: ready, every controller up, and every partition led with
        its full replica set in sync (:meth:`problems` is empty)."""
        return not self.problems()

    @property
    def reachable(self) -> bool:
        return any(n.state != "down" for n in self.controllers + self.brokers)

    def problems(self) -> list[str]:
        """What keeps the cluster from being healthy, one phrase each (partitions
        named up to PROBLEM_PARTITIONS_MAX, the rest counted)."""
        out: list[str] = []
        if self.active_controller is None:
            states = ", ".join(f"{c.id} {c.state}" for c in self.controllers)
            out.append(f"no active controller (controllers: {states})")
        else:
            out.extend(
                f"controller {c.id} {c.shown_state}"
                for c in self.controllers
                if c.state not in ("active", "follower")
            )
        for b in self.brokers:
            if b.state == "exited":
                out.append(f"broker {b.id} {b.shown_state}")
            elif b.state != "unfenced":
                what = "not registered" if b.state in ("down", "starting") else b.state
                out.append(f"broker {b.id} {what} ({b.state})")
        if self.brokers and self.metadata_from is None:
            out.append("partitions unknown (no broker answered)")
        partition_problems: list[str] = []
        for p in self.partitions:
            if p.leader < 0:
                partition_problems.append(f"{p.topic}-{p.partition} has no leader")
            elif set(p.isr) != set(p.replicas):
                isr = ",".join(map(str, p.isr)) or "none"
                replicas = ",".join(map(str, p.replicas))
                partition_problems.append(
                    f"{p.topic}-{p.partition} under-replicated (ISR {isr} of {replicas})"
                )
        out.extend(partition_problems[:PROBLEM_PARTITIONS_MAX])
        hidden = len(partition_problems) - PROBLEM_PARTITIONS_MAX
        if hidden > 0:
            out.append(f"{hidden} more partitions without a leader or a full ISR")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "problems": self.problems(),
            "active_controller": self.active_controller,
            "leader_epoch": self.leader_epoch,
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "controllers": [c.to_json() for c in self.controllers],
            "brokers": [b.to_json() for b in self.brokers],
            "partitions": [p.to_json() for p in self.partitions],
            "metadata_from": self.metadata_from,
        }


def _ok_body(answer: Answer) -> dict[str, Any] | None:
    if answer is None:
        return None
    status, body = answer
    return body if status == 200 and isinstance(body, dict) else None


def _controller_state(answer: Answer) -> tuple[str, str | None]:
    if answer is None:
        return "down", None
    body = _ok_body(answer)
    if body is None:
        return "starting", None
    role = body.get("role")
    quorum_role = role if isinstance(role, str) else None
    return ("active" if body.get("active_controller") is True else "follower"), quorum_role


def _broker_state(answer: Answer) -> str:
    if answer is None:
        return "down"
    body = _ok_body(answer)
    if body is None:
        return "starting"
    return "unfenced" if body.get("fenced") is False else "fenced"


def _int_list(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if type(v) is int)


def _partitions(metadata: Mapping[str, Any]) -> tuple[PartitionStatus, ...]:
    out: list[PartitionStatus] = []
    for topic in metadata.get("topics") or []:
        if not isinstance(topic, dict) or not isinstance(topic.get("name"), str):
            continue
        for p in topic.get("partitions") or []:
            if not isinstance(p, dict) or type(p.get("partition")) is not int:
                continue
            leader = p.get("leader")
            epoch = p.get("leader_epoch")
            out.append(
                PartitionStatus(
                    topic=topic["name"],
                    partition=p["partition"],
                    leader=leader if type(leader) is int else -1,
                    leader_epoch=epoch if type(epoch) is int else None,
                    replicas=_int_list(p.get("replicas")),
                    isr=_int_list(p.get("isr")),
                )
            )
    return tuple(sorted(out, key=lambda p: (p.topic, p.partition)))


def build_status(
    nodes: Sequence[NodeEntry], answers: Mapping[tuple[str, str], Answer]
) -> ClusterStatus:
    """The cluster's view from probe answers, keyed by (address, path): each node's
    ``/health`` and brokers' ``/v1/metadata`` (a missing key is no answer). Partitions
    come from the broker whose metadata is the newest (highest ``metadata_offset``)."""
    controllers: list[NodeStatus] = []
    brokers: list[NodeStatus] = []
    active: int | None = None
    epoch: int | None = None
    for n in sorted(nodes, key=lambda n: n.id):
        health = answers.get((n.address, "/health"))
        exited = health is None and n.exit_code is not None
        if n.role == "controller":
            state, quorum_role = _controller_state(health)
            if exited:
                state = "exited"
            body = _ok_body(health) or {}
            node_epoch = body.get("epoch")
            if state == "active":
                active = n.id
                epoch = node_epoch if type(node_epoch) is int else epoch
            elif active is None and type(node_epoch) is int:
                epoch = max(epoch or 0, node_epoch)
        else:
            state, quorum_role = "exited" if exited else _broker_state(health), None
        (controllers if n.role == "controller" else brokers).append(
            NodeStatus(
                id=n.id,
                role=n.role,
                address=n.address,
                pid=n.pid,
                state=state,
                quorum_role=quorum_role,
                exit_code=n.exit_code if exited else None,
                kafka_address=n.kafka_address,
            )
        )
    newest: tuple[int, int, Mapping[str, Any]] | None = None
    for n in sorted(nodes, key=lambda n: n.id):
        if n.role != "broker":
            continue
        md = _ok_body(answers.get((n.address, "/v1/metadata")))
        if md is None:
            continue
        offset = md.get("metadata_offset")
        offset = offset if type(offset) is int else -1
        if newest is None or offset > newest[0]:
            newest = (offset, n.id, md)
    return ClusterStatus(
        controllers=tuple(controllers),
        brokers=tuple(brokers),
        partitions=() if newest is None else _partitions(newest[2]),
        active_controller=active,
        leader_epoch=epoch,
        metadata_from=None if newest is None else newest[1],
    )


def render_status(status: ClusterStatus) -> str:
    """One screen: health, bootstrap, quorum, every node, partitions (bounded)."""
    lines: list[str] = []
    if status.healthy:
        lines.append("cluster: healthy")
    else:
        lines.append("cluster: NOT healthy: " + "; ".join(status.problems()))
    lines.append(f"bootstrap servers: {status.bootstrap_servers or '(no brokers)'}")
    if status.kafka_bootstrap_servers:
        lines.append(f"kafka bootstrap servers: {status.kafka_bootstrap_servers}")
    leader = "none" if status.active_controller is None else str(status.active_controller)
    epoch = "unknown" if status.leader_epoch is None else str(status.leader_epoch)
    lines.append(f"quorum: active controller {leader}, epoch {epoch}")
    lines.append("")
    lines.append(f"{'ROLE':<12}{'ID':>5}  {'ADDRESS':<22}{'PID':>8}  STATE")
    for n in status.controllers + status.brokers:
        pid = "-" if n.pid is None else str(n.pid)
        state = n.shown_state
        if n.quorum_role is not None and n.state not in (n.quorum_role, "active", "exited"):
            state = f"{n.state} ({n.quorum_role})"
        lines.append(f"{n.role:<12}{n.id:>5}  {n.address:<22}{pid:>8}  {state}")
    lines.append("")
    if status.metadata_from is None:
        lines.append("partitions: unknown (no broker answered)")
    elif not status.partitions:
        lines.append("partitions: none (no topics)")
    else:
        lines.append(f"{'TOPIC':<24}{'PARTITION':>10}{'LEADER':>8}  {'REPLICAS':<16}ISR")
        for p in status.partitions[:PARTITION_ROWS_MAX]:
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            lead = "none" if p.leader < 0 else str(p.leader)
            lines.append(f"{p.topic:<24}{p.partition:>10}{lead:>8}  {replicas:<16}{isr}")
        hidden = len(status.partitions) - PARTITION_ROWS_MAX
        if hidden > 0:
            lines.append(f"... and {hidden} more partitions (--json lists all)")
    return "\n".join(lines)


def brokers_from_metadata_records(records: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Broker id -> host:port from metadata records in log order (the latest
    registration wins; an unregistration removes it)."""
    out: dict[int, str] = {}
    for record in records:
        data = record.get("data")
        if not isinstance(data, dict) or type(data.get("broker_id")) is not int:
            continue
        broker_id = data["broker_id"]
        if record.get("type") == "UnregisterBrokerRecord":
            out.pop(broker_id, None)
        elif record.get("type") == "RegisterBrokerRecord":
            for endpoint in data.get("endpoints") or []:
                if isinstance(endpoint, dict):
                    host, port = endpoint.get("host"), endpoint.get("port")
                elif isinstance(endpoint, list) and len(endpoint) == 3:
                    host, port = endpoint[1], endpoint[2]
                else:
                    continue
                if isinstance(host, str) and type(port) is int:
                    out[broker_id] = f"{host}:{port}"
                    break
    return out


# ---------------------------------------------------------------------------------------
# Probing (I/O)


def _probe(address: str, path: str) -> Answer:
    """One probe, over HTTPS when the command was given a ``--command-config``."""
    return prober(command_tls())(address, path)


def prober(tls: ssl.SSLContext | None) -> Callable[[str, str], Answer]:
    """Probes over HTTPS with ``tls`` (a client context with a certificate), or HTTP."""

    def probe(address: str, path: str) -> Answer:
        try:
            return http_json(address, path, timeout_s=PROBE_TIMEOUT_S, tls=tls)
        except OSError:
            return None

    return probe


def probe_status(
    nodes: Sequence[NodeEntry], get: Callable[[str, str], Answer] = _probe
) -> ClusterStatus:
    """Ask every node its /health, and the answering brokers their /v1/metadata."""
    answers: dict[tuple[str, str], Answer] = {}
    for n in nodes:
        answers[(n.address, "/health")] = get(n.address, "/health")
    for n in nodes:
        if n.role == "broker" and _ok_body(answers[(n.address, "/health")]) is not None:
            answers[(n.address, "/v1/metadata")] = get(n.address, "/v1/metadata")
    return build_status(nodes, answers)


def discover_nodes(bootstrap: str, get: Callable[[str, str], Answer] = _probe) -> list[NodeEntry]:
    """The nodes of a cluster, from one controller: the voters of ``/v1/quorum`` and the
    brokers registered in its metadata log. ValueError when no controller answers."""
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    for address in addresses:
        quorum = _ok_body(get(address, "/v1/quorum"))
        if quorum is None:
            continue
        voters: dict[int, str] = {}
        if type(quorum.get("node_id")) is int:
            voters[quorum["node_id"]] = address
        for v in quorum.get("voters") or []:
            ok = isinstance(v, dict) and type(v.get("node_id")) is int
            if ok and isinstance(v.get("address"), str):
                voters.setdefault(v["node_id"], v["address"])
        records: list[Mapping[str, Any]] = []
        offset = 0
        for _ in range(METADATA_PAGES_MAX):
            page = _ok_body(get(address, f"/v1/metadata?offset={offset}&records_max=1000"))
            if page is None:
                break
            snapshot = page.get("snapshot")
            if isinstance(snapshot, dict):
                records.extend(r for r in snapshot.get("records") or [] if isinstance(r, dict))
            for batch in page.get("batches") or []:
                records.extend(r for r in batch.get("records") or [] if isinstance(r, dict))
            next_offset = page.get("next_offset")
            hw = page.get("high_watermark")
            if type(next_offset) is not int or type(hw) is not int:
                break
            if next_offset >= hw or next_offset == offset:
                break
            offset = next_offset
        nodes: list[NodeEntry] = []
        for node_id, addr in sorted(voters.items()):
            host, _, port = addr.rpartition(":")
            nodes.append(
                NodeEntry(id=node_id, role="controller", host=host, port=int(port), data_dir="?")
            )
        for node_id, addr in sorted(brokers_from_metadata_records(records).items()):
            host, _, port = addr.rpartition(":")
            nodes.append(
                NodeEntry(id=node_id, role="broker", host=host, port=int(port), data_dir="?")
            )
        return nodes
    raise ValueError(f"no controller answers at {', '.join(addresses) or '(none given)'}")


def controllers_from_brokers(bootstrap: str, get: Callable[[str, str], Answer] = _probe) -> str:
    """The controllers (``host:port,...``) that the first answering broker's
    ``/v1/metadata`` names. ValueError when no broker answers or it names none."""
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    for address in addresses:
        metadata = _ok_body(get(address, "/v1/metadata"))
        if metadata is None:
            continue
        controllers = [c for c in metadata.get("controllers") or [] if isinstance(c, str)]
        if controllers:
            return ",".join(controllers)
        raise ValueError(f"broker {address} names no controllers")
    raise ValueError(f"no broker answers at {', '.join(addresses) or '(none given)'}")


def is_raftka_process(pid: int) -> bool:
    """Whether ``pid`` is a live process running raftka (a reused pid is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if not Path("/proc/self").exists():
        return True  # no /proc (not Linux): alive is all we can tell
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False  # exited since the check above
    except OSError:
        return True
    return b"raftka" in cmdline  # a zombie's cmdline is empty: not holding anything


# ---------------------------------------------------------------------------------------
# raftka up


class _StopSignals:
    """SIGINT/SIGTERM set a flag and wake :meth:`wait` through a wakeup socket (a
    signal handler must not take locks, so no threading.Event)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._old: dict[int, Any] = {}
        self._old_fd = -1

    def install(self) -> None:
        self._old_fd = signal.set_wakeup_fd(self._w.fileno())
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_fd)
        self._r.close()
        self._w.close()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def wait(self, timeout_s: float) -> bool:
        """True once a stop signal came; otherwise returns after ``timeout_s``."""
        if self.received is None:
            select.select([self._r], [], [], timeout_s)
            with contextlib.suppress(BlockingIOError):
                self._r.recv(4096)
        return self.received is not None


class _StopRequestedError(Exception):
    pass


def _with_pids(
    plan: ClusterFile,
    processes: Mapping[int, NodeProcess],
    up_pid: int | None,
    exits: Mapping[int, int] | None = None,
) -> ClusterFile:
    nodes = tuple(
        replace(
            n,
            pid=(
                processes[n.id].popen.pid  # type: ignore[union-attr]
                if n.id in processes and processes[n.id].running
                else None
            ),
            exit_code=(exits or {}).get(n.id),
        )
        for n in plan.nodes
    )
    return ClusterFile(engine=plan.engine, nodes=nodes, up_pid=up_pid)


def _stop_all(brokers: Sequence[NodeProcess], controllers: Sequence[NodeProcess]) -> list[str]:
    """Brokers first (SIGTERM: controlled shutdown while the controllers still run), then
    controllers; every child reaped. Returns a note per child that did not exit 0."""
    notes: list[str] = []

    # Controllers one at a time, the active one last: a follower stopping while its
    # leader still answers does not wait on a peer that is going away too.
    def active_last(n: NodeProcess) -> bool:
        health = n.health() if n.running and not n.paused else None
        return health is not None and health.get("active_controller") is True

    ordered = sorted(controllers, key=active_last)
    for group in [list(brokers)] + [[n] for n in ordered]:
        running = [n for n in group if n.running]
        for n in running:
            if n.paused:
                n.resume()
            n.signal(signal.SIGTERM)
        for n in group:
            if n.popen is None:
                continue
            code = n.wait_stopped()
            if code != 0:
                notes.append(f"{n.role} {n.node_id} exited with {code} (log: {n.log_path})")
    return notes


def _exited(nodes: Sequence[NodeProcess]) -> NodeProcess | None:
    for n in nodes:
        if n.popen is not None and n.popen.poll() is not None:
            return n
    return None


@click.command("up")
@click.option(
    "--controllers",
    type=click.IntRange(1, CONTROLLERS_MAX),
    default=None,
    help=f"Number of controllers (default {DEFAULT_CONTROLLERS}; fixed once made).",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, BROKERS_MAX),
    default=None,
    help=f"Number of brokers (default {DEFAULT_BROKERS}; fixed once made).",
)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    default=None,
    help=f"Ports from here: controllers, then brokers (default {DEFAULT_BASE_PORT}, "
    "or those cluster.json records).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(DEFAULT_DATA_DIR),
    show_default=True,
    help="Every node's data, and cluster.json.",
)
@click.option(
    "--engine",
    type=click.Choice(["native", "pysyncobj"]),
    default=None,
    help="Quorum engine (default native; fixed once made).",
)
@click.option(
    "--restart-on-failure",
    is_flag=True,
    help=f"Restart a node whose process exits (up to {RESTARTS_MAX} times per node, "
    "with a growing backoff); without it an exited node stays down and is reported.",
)
@click.option(
    "--console-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The web console's port (default: the one after the brokers' Kafka listeners).",
)
@click.option("--no-console", is_flag=True, help="Do not start the web console.")
@click.option(
    "--secure",
    is_flag=True,
    help="Serve the brokers' Kafka listeners as SASL_SSL (a throwaway CA, SCRAM-SHA-512 "
    "user 'admin' whose password is printed, client settings written in "
    "<data-dir>/secure) with ACLs enforced ('admin' is the super user), and every "
    "node's HTTP API as HTTPS with client certificates (admin's in "
    "<data-dir>/secure/raftka-client.properties, for --command-config).",
)
def up_command(
    *,
    controllers: int | None,
    brokers: int | None,
    base_port: int | None,
    data_dir: Path,
    engine: str | None,
    restart_on_failure: bool,
    console_port: int | None,
    no_console: bool,
    secure: bool,
) -> None:
    """Start a local cluster (3 controllers, 3 brokers) and stay in the foreground."""
    data_dir = data_dir.resolve()
    try:
        existing = read_cluster_file(data_dir)
    except ClusterFileError as e:
        raise _Problem(str(e)) from None
    if existing is not None:
        live = [pid for pid in existing.pids() if is_raftka_process(pid)]
        if live:
            raise _Problem(
                f"{data_dir} is in use by a running cluster (pids {', '.join(map(str, live))}); "
                "stop it first (Ctrl-C in its terminal, or kill -TERM "
                f"{existing.up_pid if existing.up_pid in live else live[0]})"
            )
    try:
        plan = plan_cluster(
            existing,
            data_dir=data_dir,
            controllers=controllers,
            brokers=brokers,
            base_port=base_port,
            engine=engine,
        )
    except ValueError as e:
        raise _Problem(str(e)) from None
    for n in plan.nodes:
        if port_in_use(n.host, n.port):
            raise _Problem(
                f"port {n.port} ({n.role} {n.id}) is in use; choose others with --base-port"
            )
    if no_console and console_port is not None:
        raise _Problem("--console-port and --no-console contradict each other; give one")
    if not no_console:
        if console_port is None:
            console_port = _after_node_ports(plan)
        if port_in_use(plan.nodes[0].host, console_port):
            raise _Problem(
                f"port {console_port} (the web console) is in use; "
                "choose another with --console-port, or --no-console"
            )
    if secure and not plan.kafka_bootstrap_servers:
        raise _Problem(
            f"--secure: the brokers of {data_dir} have no Kafka listener (a cluster.json "
            "made before raftka served Kafka's protocol); start it without --secure"
        )
    if not secure and existing is not None and (data_dir / SECURE_DIR).is_dir():
        # Resuming a --secure cluster without the flag would serve its Kafka listeners
        # as plaintext, while its users and their client settings still exist.
        raise _Problem(
            f"{data_dir} was started with --secure; resume it with raftka up --secure "
            f"(or remove {data_dir / SECURE_DIR} to serve its Kafka listeners as plaintext)"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    sys.exit(
        _run(
            plan,
            data_dir,
            resumed=existing is not None,
            restart_on_failure=restart_on_failure,
            console_port=None if no_console else console_port,
            secure=secure,
        )
    )


def _after_node_ports(plan: ClusterFile) -> int:
    """The port after every node's HTTP and Kafka ports: the console's default."""
    ports = [n.port for n in plan.nodes] + [n.kafka_port for n in plan.nodes if n.kafka_port]
    return max(ports) + 1


def restart_delay_s(restarts_done: int) -> float:
    """The wait before a node's next restart, after ``restarts_done`` earlier ones."""
    return float(min(RESTART_BACKOFF_S * 2**restarts_done, RESTART_BACKOFF_MAX_S))


def _run(
    plan: ClusterFile,
    data_dir: Path,
    *,
    resumed: bool,
    restart_on_failure: bool = False,
    console_port: int | None = None,
    secure: bool = False,
) -> int:
    setup = sasl_ssl_setup(data_dir / SECURE_DIR, https=True) if secure else None
    tls = None if setup is None else setup.client_tls()
    cluster = LocalCluster(
        data_dir,
        controllers=len(plan.controllers),
        ports=[n.port for n in plan.controllers],
        engine=plan.engine,
        extra_properties={
            **UP_LOCAL_PROPERTIES,
            **(setup.https_properties if setup is not None else {}),
        },
        https=tls,
    )
    local_brokers = LocalBrokers(
        cluster,
        count=len(plan.brokers),
        ports=[n.port for n in plan.brokers],
        kafka_ports=[n.kafka_port for n in plan.brokers if n.kafka_port is not None] or None,
        extra_properties={
            **UP_LOCAL_PROPERTIES,
            **(setup.broker_properties if setup is not None else {}),
        },
        kafka_security_protocol="PLAINTEXT" if setup is None else "SASL_SSL",
        https=tls,
    )
    assert sorted(cluster.controllers) == [n.id for n in plan.controllers]
    assert sorted(local_brokers.brokers) == [n.id for n in plan.brokers]
    controllers = list(cluster.controllers.values())
    brokers = list(local_brokers.brokers.values())
    processes = {n.node_id: n for n in controllers + brokers}
    console: ConsoleProcess | None = None
    signals = _StopSignals()
    signals.install()
    code = 0
    click.echo(
        f"{'resuming' if resumed else 'starting'} {len(controllers)} controllers and "
        f"{len(brokers)} brokers in {data_dir} (engine {plan.engine})"
    )
    try:
        for node in controllers + brokers:
            node.start()
        write_cluster_file(data_dir, _with_pids(plan, processes, os.getpid()))
        last: list[ClusterStatus | None] = [None]

        def ready() -> ClusterStatus | None:
            if signals.received is not None:
                raise _StopRequestedError
            dead = _exited(controllers + brokers)
            if dead is not None:
                raise RuntimeError(
                    f"{dead.role} {dead.node_id} exited with {dead.popen.returncode} "  # type: ignore[union-attr]
                    f"(log: {dead.log_path}); its last lines:\n{dead.tail()}"
                )
            status = probe_status(plan.nodes, prober(tls))
            last[0] = status
            return status if status.ready else None

        def not_ready() -> str:
            status = last[0]
            if status is None:
                return "no status yet"
            return "the cluster is not ready: " + "; ".join(status.problems())

        status = wait_for(ready, timeout_s=READY_DEADLINE_S, message=not_ready)
        click.echo(f"\nbootstrap servers: {status.bootstrap_servers}")
        click.echo(f"bootstrap controllers: {cluster.bootstrap_controllers}")
        click.echo(f"kafka bootstrap servers: {plan.kafka_bootstrap_servers}")
        if setup is not None:
            _secure_user(setup, status.bootstrap_servers, data_dir / SECURE_DIR)
        if console_port is not None:
            console = ConsoleProcess(
                host=plan.nodes[0].host,
                port=console_port,
                bootstrap_servers=status.bootstrap_servers,
                log_path=data_dir / "console.log",
                command_config=None
                if setup is None
                else data_dir / SECURE_DIR / RAFTKA_CLIENT_FILE,
            )
            console.start()
            click.echo(f"web console: {console.url} (log: {console.log_path})")
        click.echo("")
        click.echo(render_status(_with_file_pids(status, plan, processes)))
        click.echo(f"\nrunning; cluster.json in {data_dir}. Ctrl-C (or SIGTERM) stops every node.")
        # Nodes that exited unasked: their exit codes (cluster.json, so that
        # `raftka status` shows them), restarts done and when the next one is due.
        exits: dict[int, int] = {}
        restarts: dict[int, int] = {}
        restart_at: dict[int, float] = {}
        while not signals.wait(MONITOR_INTERVAL_S):
            changed = False
            for node in controllers + brokers:
                nid = node.node_id
                if node.popen is not None and node.popen.poll() is not None and nid not in exits:
                    exits[nid] = node.popen.returncode
                    changed = True
                    done = restarts.get(nid, 0)
                    plan_note = "it stays down (--restart-on-failure restarts it)"
                    if restart_on_failure and done < RESTARTS_MAX:
                        delay = restart_delay_s(done)
                        restart_at[nid] = time.monotonic() + delay
                        plan_note = f"restart {done + 1} of {RESTARTS_MAX} in {delay:g} s"
                    elif restart_on_failure:
                        plan_note = f"it stays down ({RESTARTS_MAX} restarts done)"
                    click.echo(
                        f"warning: {node.role} {nid} exited with {exits[nid]} "
                        f"(log: {node.log_path}); {plan_note}",
                        err=True,
                    )
                due = restart_at.get(nid)
                if due is not None and time.monotonic() >= due:
                    del restart_at[nid]
                    restarts[nid] = restarts.get(nid, 0) + 1
                    node.start()
                    exits.pop(nid, None)
                    changed = True
                    click.echo(
                        f"restarted {node.role} {nid} (restart {restarts[nid]} of "
                        f"{RESTARTS_MAX}, pid {node.popen.pid if node.popen else '-'})"
                    )
            if changed:
                write_cluster_file(data_dir, _with_pids(plan, processes, os.getpid(), exits))
            if console is not None and console.exit_code() is not None:
                click.echo(
                    f"warning: the web console exited with {console.exit_code()} "
                    f"(log: {console.log_path}); the cluster runs on without it",
                    err=True,
                )
                console = None
    except _StopRequestedError:
        pass
    except (TimeoutError, RuntimeError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        code = 1
    finally:
        if console is not None:
            console.stop()
        click.echo("stopping: brokers first (controlled shutdown), then controllers")
        for note in _stop_all(brokers, controllers):
            click.echo(f"warning: {note}", err=True)
        write_cluster_file(data_dir, _with_pids(plan, processes, None))
        signals.uninstall()
        click.echo("stopped")
    return code


def _secure_user(setup: SaslSslSetup, bootstrap_servers: str, directory: Path) -> None:
    """--secure, once the cluster is ready: its user's SCRAM credential committed, the
    client settings written, and both said."""
    try:
        add_scram_user(bootstrap_servers, setup, timeout_ms=int(READY_DEADLINE_S * 1000))
    except KafkaError as e:
        raise RuntimeError(f"--secure: the user {setup.user!r} was not created: {e}") from e
    # "running" is printed only once a client can authenticate at every broker.
    wait_until_brokers_know(bootstrap_servers.split(","), setup, timeout_s=READY_DEADLINE_S)
    librdkafka, java, raftka = setup.write_client_files(directory)
    click.echo(
        f"kafka listeners: SASL_SSL, {setup.mechanism}; user {setup.user!r}, "
        f"password {setup.password!r}; CA certificate {setup.cafile}"
    )
    click.echo(f"client settings: {librdkafka} (librdkafka, kcat -F), {java} (Kafka's tools)")
    click.echo(
        f"raftka's HTTP API: HTTPS with client certificates; user {setup.user!r}'s "
        f"settings: {raftka} (--command-config of raftka's commands)"
    )


def _with_file_pids(
    status: ClusterStatus, plan: ClusterFile, processes: Mapping[int, NodeProcess]
) -> ClusterStatus:
    pids = {n.id: n.pid for n in _with_pids(plan, processes, None).nodes}

    def fill(nodes: tuple[NodeStatus, ...]) -> tuple[NodeStatus, ...]:
        return tuple(replace(n, pid=pids.get(n.id)) for n in nodes)

    return replace(status, controllers=fill(status.controllers), brokers=fill(status.brokers))


# ---------------------------------------------------------------------------------------
# raftka status


@click.command("status")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"A cluster started by raftka up (default ./{DEFAULT_DATA_DIR}).",
)
@click.option(
    "--bootstrap-controller",
    "bootstrap",
    default=None,
    help="Ask this controller (host:port, comma-separated) instead of cluster.json.",
)
@click.option(
    "--bootstrap-server",
    "bootstrap_server",
    default=None,
    help="Ask this broker (host:port, comma-separated) for the controllers, then as "
    "--bootstrap-controller.",
)
@command_config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for scripts.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0,
    metavar="SECONDS",
    help="Probe again until the cluster is healthy or SECONDS passed (exit 1 then).",
)
def status_command(
    data_dir: Path | None,
    bootstrap: str | None,
    bootstrap_server: str | None,
    as_json: bool,
    wait_s: float,
) -> None:
    """Every node's state, the active controller, each partition's leader and ISR.
    Exit status 0 when healthy, 1 otherwise."""
    if sum(x is not None for x in (data_dir, bootstrap, bootstrap_server)) > 1:
        raise click.UsageError("give one of --data-dir, --bootstrap-controller, --bootstrap-server")
    deadline_s = time.monotonic() + wait_s
    # A cluster raftka up --secure made, probed from its cluster.json: with the client
    # certificate it wrote, unless --command-config says otherwise.
    look_for_secured = bootstrap is None and bootstrap_server is None and not command_config()
    secured: Callable[[str, str], Answer] | None = None
    while True:
        # While waiting, a cluster still starting may have no cluster.json or no
        # answering controller yet: those count as "not yet" until the deadline.
        try:
            nodes = _status_nodes(data_dir, bootstrap, bootstrap_server)
            if look_for_secured and secured is None:
                # raftka up writes the file once the cluster is ready: until it is
                # there, look again on every round.
                secured = _secured_prober(data_dir)
            status = probe_status(nodes, secured or _probe)
            if not status.reachable:
                raise _Problem(
                    "nothing is reachable: no node answers at "
                    + ", ".join(n.address for n in nodes)
                )
        except _Problem:
            if time.monotonic() >= deadline_s:
                raise
        else:
            if status.healthy or time.monotonic() >= deadline_s:
                break
        time.sleep(min(STATUS_WAIT_INTERVAL_S, max(0.0, deadline_s - time.monotonic())))
    if as_json:
        click.echo(orjson.dumps(status.to_json()).decode())
    else:
        click.echo(render_status(status))
    if not status.healthy:
        waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
        raise _Problem(f"the cluster is not healthy{waited}")


def _secured_prober(data_dir: Path | None) -> Callable[[str, str], Answer] | None:
    """Probes with the client certificate raftka up --secure wrote in ``data_dir``
    (None: no such file)."""
    secured = (data_dir or Path(DEFAULT_DATA_DIR)) / SECURE_DIR / RAFTKA_CLIENT_FILE
    if not secured.exists():
        return None
    try:
        return prober(read_command_config(secured).context())
    except InvalidConfigError as e:
        raise _Problem(str(e)) from None


def _status_nodes(
    data_dir: Path | None, bootstrap: str | None, bootstrap_server: str | None
) -> list[NodeEntry]:
    """The nodes to probe: discovered from a controller (found through a broker with
    --bootstrap-server), or cluster.json's."""
    if bootstrap_server is not None:
        try:
            bootstrap = controllers_from_brokers(bootstrap_server)
        except ValueError as e:
            raise _Problem(str(e)) from None
    if bootstrap is not None:
        try:
            return discover_nodes(bootstrap)
        except ValueError as e:
            raise _Problem(str(e)) from None
    where = (data_dir or Path(DEFAULT_DATA_DIR)).resolve()
    try:
        cluster_file = read_cluster_file(where)
    except ClusterFileError as e:
        raise _Problem(str(e)) from None
    if cluster_file is None:
        raise _Problem(
            f"no {CLUSTER_FILE} in {where} (start a cluster with raftka up, or give "
            "--bootstrap-controller)"
        )
    return list(cluster_file.nodes)
