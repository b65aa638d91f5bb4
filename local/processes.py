"""Start and stop raftka processes on this machine: local clusters and test fixtures.

:class:`LocalCluster` writes one config file per controller under a data directory
(``<data>/controller-<id>/controller.properties``, its metadata log beside it), starts
each as a real OS process (``python -m raftka controller --config FILE``) with its
stdout and stderr in ``<data>/controller-<id>/process.log``, and waits for ``/health``
with a deadline. Tests use the signals directly: :meth:`NodeProcess.kill` (SIGKILL),
:meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT), :meth:`terminate` (SIGTERM, then a
wait for the exit), :meth:`restart`. :meth:`LocalCluster.close` reaps every child, so a
failed test leaves no process behind.

Local clusters use shorter quorum timeouts than Kafka's defaults, so failover on
loopback takes under a second instead of several (:data:`LOCAL_QUORUM_PROPERTIES`):
election 250 ms, fetch 500 ms, request 1000 ms, fetch long-poll 100 ms. Pass
``extra_properties`` to change them or to add any other key.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Self, TypeVar

import orjson

__all__ = [
    "LOCAL_QUORUM_PROPERTIES",
    "LocalCluster",
    "NodeGroup",
    "NodeProcess",
    "configured_node",
    "free_port_run",
    "free_ports",
    "http_json",
    "http_post",
    "wait_for",
]

T = TypeVar("T")

# Measured with bench/controller_bench.py on a shared 2-core machine: kill -9 of the
# active controller -> a commit through the new one took a median 1.64 s (max 1.94 s)
# with election 500 / fetch 1000 / long-poll 200, and 0.90 s (max 1.02 s) with these;
# no election happened in 60 s idle nor under the latency benchmark's load (4 did
# while all three wrote 26 MB snapshots of 100,000 partitions; none at fetch 600,
# whose failover median was 0.99 s). Most of
# what is left is one split vote: both survivors lose contact in the same
# millisecond, so each votes for itself once before the randomized election timeout
# separates them.
LOCAL_QUORUM_PROPERTIES: Final[Mapping[str, str]] = {
    "controller.quorum.election.timeout.ms": "250",
    "controller.quorum.fetch.timeout.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.fetch.max.wait.ms": "100",
    "controller.quorum.election.backoff.max.ms": "250",
}
HEALTH_TIMEOUT_S: Final = 1.0
START_DEADLINE_S: Final = 30.0
STOP_DEADLINE_S: Final = 15.0
# Bound on the poll interval of wait_for (it backs off from 10 ms to this).
POLL_INTERVAL_MAX_S: Final = 0.1


# Test ports come from below the kernel's ephemeral range (Linux:
# /proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default). A port the kernel hands
# out for bind(0) is in that range, so it can be taken again at any moment by any
# process's outgoing connection before our server binds it; worse, a health probe of
# such a port before its server listens can connect to itself (TCP simultaneous open
# when the kernel picks the same port as the source) and read its own request back
# (seen in CI as ``BadStatusLine: GET /health HTTP/1.1``).
_PORT_FLOOR: Final = 10000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PORT_TRIES: Final = 200


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default, and the IANA range starts at 49152


def _bindable(host: str, port: int) -> bool:
    return not port_in_use(host, port)


def _candidates(count: int) -> list[int]:
    """Random base ports with ``count`` ports after them below the ephemeral range
    (empty when the range starts too low to leave room: the caller falls back)."""
    top = _ephemeral_low() - count
    if top <= _PORT_FLOOR:
        return []
    rng = random.Random()  # seeded from os.urandom: parallel runs pick apart
    return [rng.randrange(_PORT_FLOOR, top) for _ in range(_PORT_TRIES)]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free now, below the ephemeral range (see
    :data:`_PORT_FLOOR`); another process may still take one before we bind it."""
    chosen: list[int] = []
    for port in _candidates(1):
        if port not in chosen and _bindable(host, port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    # No room below the ephemeral range (an unusual kernel setting): the kernel's pick.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound now (something listens there, or is about
    to; SO_REUSEADDR so a port in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A base port with ``count`` ports after it that are free now (checked by binding
    each; the same caveat as :func:`free_ports`), for ``raftka up --base-port``."""
    for candidate in _candidates(count) or free_ports(20, host):
        if candidate + count > 65535:
            continue
        if all(_bindable(host, port) for port in range(candidate, candidate + count)):
            return candidate
    raise OSError(f"no run of {count} free ports on {host}")


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout_s: float,
    message: str | Callable[[], str],
) -> T:
    """Poll ``condition`` until it returns something other than None/False; raise
    TimeoutError with ``message`` after ``timeout_s``. The deadline-bounded poll is how a
    test waits on another process (there is no event to wait on across processes)."""
    deadline = time.monotonic() + timeout_s
    interval = 0.01
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"after {timeout_s:.1f} s: {text}")
        time.sleep(min(interval, max(deadline - time.monotonic(), 0)))
        interval = min(interval * 2, POLL_INTERVAL_MAX_S)


def http_json(
    address: str,
    path: str,
    *,
    method: str = "GET",
    body: object = None,
    timeout_s: float = 5.0,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """One request to a raftka process: (HTTP status, decoded JSON); over HTTPS with
    ``tls`` (a client context with a certificate). Raises OSError when the process does
    not answer."""
    data = None if body is None else orjson.dumps(body)
    scheme = "http" if tls is None else "https"
    request = urllib.request.Request(f"{scheme}://{address}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=tls) as response:
            return response.status, orjson.loads(response.read())
    except http.client.HTTPException as e:
        # Not an HTTP answer (a connection to itself, a half-started server): the
        # process does not answer yet, as a refused connection says.
        raise ConnectionError(f"{address}: no HTTP answer ({e!r})") from e
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return e.code, {"error": "UNKNOWN_SERVER_ERROR", "message": raw[:200].decode()}


def http_post(
    address: str,
    path: str,
    body: bytes,
    content_type: str,
    timeout_s: float = 5.0,
    *,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes, str]:
    """One POST of raw ``body`` to a raftka process: (HTTP status, the answer's bytes,
    its content type), error statuses included; over HTTPS with ``tls``. Raises OSError
    when the process does not answer."""
    scheme = "http" if tls is None else "https"
    request = urllib.request.Request(f"{scheme}://{address}{path}", data=body, method="POST")
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=tls) as response:
            return response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get_content_type()


@dataclass(slots=True)
class NodeProcess:
    """One raftka process: its config file, data directory and (while running) Popen."""

    node_id: int
    role: str
    host: str
    port: int
    data_dir: Path
    config_path: Path
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0
    #: A client context (with a certificate) when the node's HTTP API is HTTPS.
    tls: ssl.SSLContext | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "process.log"

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        assert not self.running, f"{self.role} {self.node_id} is already running"
        self._close_log()
        self._log = self.log_path.open("ab")
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "raftka", self.role, "--config", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the test only
        )
        self.paused = False
        self.starts += 1

    def health(self) -> dict[str, Any] | None:
        """The /health answer, or None if the process does not answer 200."""
        try:
            status, body = http_json(
                self.address, "/health", timeout_s=HEALTH_TIMEOUT_S, tls=self.tls
            )
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def wait_healthy(self, timeout_s: float = START_DEADLINE_S) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            if self.popen is not None and self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.role} {self.node_id} exited with {self.popen.returncode}; "
                    f"last log lines:\n{self.tail()}"
                )
            return self.health()

        return wait_for(
            check,
            timeout_s=timeout_s,
            message=lambda: f"{self.role} {self.node_id} not healthy; log:\n{self.tail()}",
        )

    def signal(self, sig: signal.Signals) -> None:
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap (kill -9: no resignation, no flush)."""
        if self.popen is None:
            return
        if self.paused:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=STOP_DEADLINE_S)
        self.paused = False
        self._close_log()

    def pause(self) -> None:
        """SIGSTOP: the process stays, silent, as a hung or partitioned node."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout_s: float = STOP_DEADLINE_S) -> int:
        """SIGTERM and wait for the exit; returns the exit code (SIGKILL after the
        deadline, then -9)."""
        assert self.popen is not None
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        return self.wait_stopped(timeout_s)

    def wait_stopped(self, timeout_s: float = STOP_DEADLINE_S) -> int:
        """Wait for an exit already asked for (no second signal: one arriving after the
        process's handlers are gone would kill it mid-exit); SIGKILL after the deadline.
        Returns the exit code."""
        assert self.popen is not None
        try:
            code = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait()
        self._close_log()
        return code

    def restart(self) -> None:
        if self.running:
            self.kill()
        self.start()

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def configured_node(
    role: str, *, node_id: int, host: str, port: int, node_dir: Path, props: Mapping[str, str]
) -> NodeProcess:
    """A node (not started) whose config, ``props``, is written to
    ``<node_dir>/<role>.properties`` (``node_dir`` is created)."""
    node_dir.mkdir(parents=True, exist_ok=True)
    config_path = node_dir / f"{role}.properties"
    config_path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    return NodeProcess(
        node_id=node_id,
        role=role,
        host=host,
        port=port,
        data_dir=node_dir,
        config_path=config_path,
    )


class NodeGroup:
    """Nodes started together (:meth:`nodes`), killed together by :meth:`close` or on
    leaving a ``with`` block."""

    def nodes(self) -> Iterable[NodeProcess]:
        raise NotImplementedError

    def close(self) -> None:
        """Kill and reap every child process that is still running."""
        for node in self.nodes():
            with contextlib.suppress(Exception):
                node.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalCluster(NodeGroup):
    """N controllers on 127.0.0.1 under one data directory (brokers come later).

    ``base_port`` numbers the controllers' ports from it (9093, 9094, ...); ``ports``
    gives each one (``raftka up`` resuming a data dir); without either, free ports are
    picked. Use as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        controllers: int = 3,
        base_port: int | None = None,
        ports: Sequence[int] | None = None,
        host: str = "127.0.0.1",
        engine: str = "native",
        extra_properties: Mapping[str, str] | None = None,
        https: ssl.SSLContext | None = None,
    ) -> None:
        """``https``: the controllers' HTTP API is HTTPS (listener ``HTTPS``, its
        ``listener.name.https.ssl.*`` settings in ``extra_properties``), reached with
        this client context."""
        assert controllers >= 1
        assert ports is None or (len(ports) == controllers and base_port is None)
        self.data_dir = Path(data_dir)
        if ports is not None:
            ports = list(ports)
        elif base_port is not None:
            ports = list(range(base_port, base_port + controllers))
        else:
            ports = free_ports(controllers, host)
        ids = list(range(1, controllers + 1))
        self.voters = ",".join(f"{i}@{host}:{p}" for i, p in zip(ids, ports, strict=True))
        self.controllers: dict[int, NodeProcess] = {}
        for node_id, port in zip(ids, ports, strict=True):
            node_dir = self.data_dir / f"controller-{node_id}"
            props = {
                "node.id": str(node_id),
                "process.roles": "controller",
                "controller.quorum.voters": self.voters,
                "listeners": f"{'CONTROLLER' if https is None else 'HTTPS'}://{host}:{port}",
                "metadata.log.dir": str(node_dir / "metadata"),
                "quorum.engine": engine,
                **LOCAL_QUORUM_PROPERTIES,
                **(extra_properties or {}),
            }
            self.controllers[node_id] = configured_node(
                "controller", node_id=node_id, host=host, port=port, node_dir=node_dir, props=props
            )
            self.controllers[node_id].tls = https

    def nodes(self) -> Iterable[NodeProcess]:
        return self.controllers.values()

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(c.address for c in self.controllers.values())

    def start(self, timeout_s: float = START_DEADLINE_S) -> None:
        for node in self.controllers.values():
            node.start()
        for node in self.controllers.values():
            node.wait_healthy(timeout_s)

    def kill_all_and_restart(self, timeout_s: float = START_DEADLINE_S) -> None:
        """kill -9 every controller, then :meth:`start` them all again from their data."""
        for node in self.controllers.values():
            node.kill()
        self.start(timeout_s)

    def wait_leader(
        self, timeout_s: float = START_DEADLINE_S, *, excluding: tuple[int, ...] = ()
    ) -> int:
        """The id of the active controller, once a running one says it is active."""
        excluded = set(excluding)

        def find() -> int | None:
            for node in self.controllers.values():
                if node.node_id in excluded or not node.running or node.paused:
                    continue
                health = node.health()
                if health is not None and health.get("active_controller"):
                    return node.node_id
            return None

        return wait_for(find, timeout_s=timeout_s, message="no active controller")
