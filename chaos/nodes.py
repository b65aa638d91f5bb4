"""A raftka cluster for the fault suite: 3 controllers and 3 brokers on test hosts.

Two placements, one interface:

* ``netns`` (root): six network-namespace hosts from :class:`raftka.chaos.netns.Cluster`,
  controllers on n1..n3 and brokers on n4..n6, each node binding to and advertising its
  own host's address (no loopback, no DNS). Network nemeses cut traffic between hosts;
  the runner (clients, health checks) always reaches every host.
* ``loopback`` (no root): the same six processes on 127.0.0.1 with distinct ports, for
  process faults only (kill -9, SIGSTOP); each node is its own "host" name so process
  nemeses address it the same way.

Every node is a real ``python -m raftka controller|broker --config FILE`` process, a
child of the runner (reaped on close), wrapped in a :class:`raftka.chaos.nemesis.Node`
so :class:`~raftka.chaos.nemesis.Kill` can restart it. Config files use the keys the
processes read (``raftka.server_common.node_config``, ``raftka.broker.config``) with the
short local timeouts of :mod:`raftka.local`, so faults show within seconds.

Lookups used by targeted nemeses and recovery checks (``active_controller``,
``partition_leaders``) ask the nodes over HTTP with short timeouts and return None when
nobody knows; they never raise on an unreachable node.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from raftka.chaos.nemesis import Node
from raftka.chaos.netns import Cluster, free_subnet, stop_process
from raftka.local.brokers import LOCAL_BROKER_PROPERTIES
from raftka.local.processes import LOCAL_QUORUM_PROPERTIES, free_ports, http_json, wait_for

__all__ = [
    "CHAOS_BROKER_PROPERTIES",
    "CHAOS_CONTROLLER_PROPERTIES",
    "NODE_NAMES",
    "ChaosCluster",
    "NodeSpec",
    "Placement",
    "spawn_logged",
]

Placement = Literal["netns", "loopback"]

CONTROLLERS: Final = 3
BROKERS: Final = 3
BROKER_ID_BASE: Final = 101
CONTROLLER_PORT: Final = 9093  # netns: every host has its own address, so ports repeat
BROKER_PORT: Final = 9092
NODE_NAMES: Final = (
    *(f"c{i}" for i in range(1, CONTROLLERS + 1)),
    *(f"b{BROKER_ID_BASE + i}" for i in range(BROKERS)),
)
LOOKUP_TIMEOUT_S: Final = 1.0
START_TIMEOUT_S: Final = 60.0

# Short sessions so a cut broker is fenced within a fault window of a few seconds; the
# quorum timeouts are raftka.local's (failover under a second on these machines).
CHAOS_CONTROLLER_PROPERTIES: Final[Mapping[str, str]] = {
    **LOCAL_QUORUM_PROPERTIES,
    "broker.session.timeout.ms": "2500",
    "default.replication.factor": "3",
    "unclean.leader.election.enable": "false",
}
CHAOS_BROKER_PROPERTIES: Final[Mapping[str, str]] = {
    **LOCAL_BROKER_PROPERTIES,
    "replica.lag.time.max.ms": "1500",
    "min.insync.replicas": "2",
    "request.timeout.ms": "5000",
    "controlled.shutdown.timeout.ms": "3000",
}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node: ``name`` is c1..c3 / b101..b103; ``host`` the test host it runs on."""

    name: str
    role: Literal["controller", "broker"]
    node_id: int
    host: str
    ip: str
    port: int
    data_dir: Path

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / f"{self.role}.properties"


def node_specs(
    data_dir: Path,
    *,
    placement: Placement,
    host_ips: Mapping[str, str] | None = None,
    ports: list[int] | None = None,
) -> list[NodeSpec]:
    """Where each node runs. netns: ``host_ips`` maps n1..n6 to addresses; loopback:
    ``ports`` gives six free ports on 127.0.0.1."""
    specs: list[NodeSpec] = []
    total = CONTROLLERS + BROKERS
    for i in range(total):
        is_controller = i < CONTROLLERS
        node_id = i + 1 if is_controller else BROKER_ID_BASE + i - CONTROLLERS
        name = f"c{node_id}" if is_controller else f"b{node_id}"
        if placement == "netns":
            assert host_ips is not None and len(host_ips) >= total, host_ips
            host = f"n{i + 1}"
            ip = host_ips[host]
            port = CONTROLLER_PORT if is_controller else BROKER_PORT
        else:
            assert ports is not None and len(ports) == total, ports
            host, ip, port = name, "127.0.0.1", ports[i]
        specs.append(
            NodeSpec(
                name=name,
                role="controller" if is_controller else "broker",
                node_id=node_id,
                host=host,
                ip=ip,
                port=port,
                data_dir=data_dir / name,
            )
        )
    return specs


def config_properties(
    spec: NodeSpec, voters: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The config file of one node, with the keys its process reads."""
    props = {
        "node.id": str(spec.node_id),
        "process.roles": spec.role,
        "controller.quorum.voters": voters,
    }
    if spec.role == "controller":
        props |= {
            "listeners": f"CONTROLLER://{spec.address}",
            "metadata.log.dir": str(spec.data_dir / "metadata"),
            **CHAOS_CONTROLLER_PROPERTIES,
        }
    else:
        props |= {
            "listeners": f"PLAINTEXT://{spec.address}",
            "advertised.listeners": f"PLAINTEXT://{spec.address}",
            "log.dirs": str(spec.data_dir / "logs"),
            **CHAOS_BROKER_PROPERTIES,
        }
    return props | dict(extra or {})


class ChaosCluster:
    """Three controllers and three brokers as processes on test hosts (see module doc).

    Use :meth:`create` as a context manager; close stops every process and, for netns,
    removes the hosts."""

    def __init__(
        self,
        *,
        data_dir: Path,
        placement: Placement,
        specs: list[NodeSpec],
        netns: Cluster | None,
        extra_controller: Mapping[str, str] | None = None,
        extra_broker: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.placement: Placement = placement
        self.specs = {s.name: s for s in specs}
        self.netns = netns
        self.voters = ",".join(f"{s.node_id}@{s.address}" for s in specs if s.role == "controller")
        self.nodes: dict[str, Node] = {}
        for spec in specs:
            spec.data_dir.mkdir(parents=True, exist_ok=True)
            extra = extra_controller if spec.role == "controller" else extra_broker
            props = config_properties(spec, self.voters, extra)
            spec.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.nodes[spec.name] = Node(spec.name, self._starter(spec))

    @classmethod
    def create(
        cls,
        data_dir: Path,
        *,
        placement: Placement,
        prefix: str = "rkchaos",
        subnet: str | None = None,
        extra_controller: Mapping[str, str] | None = None,
        extra_broker: Mapping[str, str] | None = None,
    ) -> ChaosCluster:
        """Build the hosts (netns needs root: NeedsRootError otherwise) and write the
        configs; :meth:`start` runs the processes."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        netns: Cluster | None = None
        if placement == "netns":
            netns = Cluster.create(
                CONTROLLERS + BROKERS,
                subnet=subnet or free_subnet(start=os.getpid()),
                prefix=prefix,
                state_dir=data_dir,
            )
            try:
                specs = node_specs(
                    data_dir, placement="netns", host_ips={h.name: h.ip for h in netns.hosts}
                )
            except BaseException:
                netns.close()
                raise
        else:
            specs = node_specs(
                data_dir, placement="loopback", ports=free_ports(CONTROLLERS + BROKERS)
            )
        return cls(
            data_dir=data_dir,
            placement=placement,
            specs=specs,
            netns=netns,
            extra_controller=extra_controller,
            extra_broker=extra_broker,
        )

    def _starter(self, spec: NodeSpec) -> Callable[[], subprocess.Popen[bytes]]:
        argv = [sys.executable, "-m", "raftka", spec.role, "--config", str(spec.config_path)]
        log_path = spec.data_dir / "process.log"

        def start() -> subprocess.Popen[bytes]:
            if self.netns is not None:
                return self.netns.spawn(spec.host, argv, log_path=log_path)
            return spawn_logged(argv, log_path)

        return start

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start every node, then wait for a quorum and three unfenced brokers."""
        for node in self.nodes.values():
            node.start()
        self.wait_healthy(timeout_s)

    def wait_healthy(self, timeout_s: float) -> float:
        """Wait until an active controller exists and every broker is unfenced; returns
        the seconds it took."""
        start = time.monotonic()
        wait_for(
            self.active_controller,
            timeout_s=timeout_s,
            message=lambda: f"no active controller; {self.describe()}",
        )
        wait_for(
            lambda: all(self._broker_unfenced(n) for n in self.broker_names),
            timeout_s=max(1.0, timeout_s - (time.monotonic() - start)),
            message=lambda: f"brokers not all unfenced; {self.describe()}",
        )
        return time.monotonic() - start

    def close(self) -> None:
        errors: list[str] = []

        def stop(node: Node) -> None:
            assert node.proc is not None
            try:
                stop_process(node.proc)
            except Exception as exc:  # keep stopping the others
                errors.append(f"{node.name}: {exc!r}")

        # Brokers first, all at once, while the controllers are still there to answer
        # their controlled shutdown; then the controllers, all at once. One at a time,
        # controllers first, each broker waited out its controlled.shutdown.timeout.ms
        # for a quorum that was gone: most of a fault module's teardown.
        for names in (self.broker_names, self.controller_names):
            running = [self.nodes[n] for n in names if self.nodes[n].proc is not None]
            with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
                list(pool.map(stop, running))
        if self.netns is not None:
            self.netns.close()
        if errors:
            raise RuntimeError("stopping nodes: " + "; ".join(errors))

    def __enter__(self) -> ChaosCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- names and addresses ---------------------------------------------------------

    @property
    def controller_names(self) -> list[str]:
        return [n for n, s in self.specs.items() if s.role == "controller"]

    @property
    def broker_names(self) -> list[str]:
        return [n for n, s in self.specs.items() if s.role == "broker"]

    @property
    def bootstrap_servers(self) -> list[str]:
        return [self.specs[n].address for n in self.broker_names]

    @property
    def bootstrap_controllers(self) -> list[str]:
        return [self.specs[n].address for n in self.controller_names]

    def host_of(self, name: str) -> str:
        """The test host a node runs on (what network nemeses target)."""
        return self.specs[name].host

    def broker_name(self, broker_id: int) -> str:
        return f"b{broker_id}"

    def pid(self, name: str) -> int:
        return self.nodes[name].pid

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = (self.specs[name].data_dir / "process.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- lookups (never raise on an unreachable node) ---------------------------------

    def _get(self, name: str, path: str) -> dict[str, Any] | None:
        node = self.nodes[name]
        if node.proc is None or node.proc.poll() is not None:
            return None
        try:
            status, body = http_json(self.specs[name].address, path, timeout_s=LOOKUP_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError):
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def _broker_unfenced(self, name: str) -> bool:
        health = self._get(name, "/health")
        return health is not None and health.get("fenced") is False

    def active_controller(self) -> str | None:
        """The controller whose /health says it is active (the first found), or None."""
        for name in self.controller_names:
            health = self._get(name, "/health")
            if health is not None and health.get("active_controller"):
                return name
        return None

    def partition_view(self, name: str, topic: str) -> dict[int, tuple[int, list[int]]] | None:
        """partition -> (leader id, ISR) as broker ``name`` knows it; None if it does not
        answer, {} if it does not know the topic."""
        md = self._get(name, "/v1/metadata")
        if md is None:
            return None
        for t in md.get("topics", []):
            if t.get("name") == topic:
                return {
                    int(p["partition"]): (int(p["leader"]), list(p.get("isr", [])))
                    for p in t.get("partitions", [])
                }
        return {}

    def replicas_in_sync(self, topic: str) -> bool:
        """Every broker answers, knows ``topic``, and sees each of its partitions with a
        leader and every one of its replicas in the ISR (its own replicas, read from the
        metadata, not all brokers)."""
        for name in self.broker_names:
            md = self._get(name, "/v1/metadata")
            if md is None:
                return False
            found = [t for t in md.get("topics", []) if t.get("name") == topic]
            if not found or not found[0].get("partitions"):
                return False
            for p in found[0]["partitions"]:
                if int(p["leader"]) < 0 or set(p.get("isr", [])) != set(p.get("replicas", [])):
                    return False
        return True

    def partition_leaders(self, topic: str) -> dict[int, tuple[int, list[int]]] | None:
        """partition -> (leader id, ISR) as the brokers that answer all agree on, or None
        when no broker answers or they disagree (metadata still propagating)."""
        views = [self.partition_view(name, topic) for name in self.broker_names]
        seen = [v for v in views if v is not None]
        if not seen or any(s != seen[0] for s in seen[1:]):
            return None
        return seen[0]

    def leader_of(self, topic: str, partition: int) -> str | None:
        """The node name of a partition's leader, or None."""
        leaders = self.partition_leaders(topic)
        if not leaders or partition not in leaders:
            return None
        leader = leaders[partition][0]
        return self.broker_name(leader) if leader >= 0 else None

    def describe(self) -> str:
        parts = []
        for name, node in self.nodes.items():
            state = "not started"
            if node.proc is not None:
                rc = node.proc.poll()
                state = f"exited {rc}" if rc is not None else f"pid {node.proc.pid}"
            parts.append(f"{name}@{self.specs[name].address} {state}")
        return ", ".join(parts)


def spawn_logged(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """A process of the runner's own host in its own session (so a kill reaches only
    it), stdout and stderr appended to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_quietly(cluster: ChaosCluster | None) -> None:
    if cluster is not None:
        with contextlib.suppress(Exception):
            cluster.close()
