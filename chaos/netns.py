"""Test hosts as Linux network namespaces, for raftka's fault suite.

Theory of operation::

      root namespace (the test runner, Jepsen's control node)
        <prefix>-rt  10.77.0.254/24   (never cut)
            |  veth
      <prefix>-hub namespace:  br0 (Linux bridge)  --  iptables FORWARD: NFQUEUE for delay
            |  veth p1      |  veth p2   ...
      <prefix>-n1           <prefix>-n2  ...    one namespace per test host
        eth0 10.77.0.1/24   eth0 10.77.0.2/24   iptables INPUT: drops ("grudges"),
                                                iptables OUTPUT: random loss

Every host has its own IPv4 address on one bridge that lives in the hub namespace, so no
firewall policy of the machine's root namespace touches bridged traffic. Faults are rules
*inside* the namespaces this module creates: a partition is a set of DROP rules on the
receiving host's INPUT hook (host X drops packets from the set S), loss is a random DROP
on a host's OUTPUT hook, delay is an NFQUEUE rule in the hub's bridge FORWARD path served
by :mod:`raftka.chaos.delay`. Rules never name the runner's address, so the runner always
reaches every host.

The cluster keeps every active fault under an owner token and rewrites a namespace's
whole filter table (``iptables-restore``, atomic) from the union of the active faults
whenever one changes: overlapping faults compose, and healing one leaves the others.

Node processes run through ``ip netns exec`` (which execs, so the Popen pid *is* the
node), in their own session, as children of the runner, and are reaped on teardown.
Reachability probes use sockets that the runner opens *inside* each namespace (a short
thread that ``setns()``s first), so probing starts no processes.

Teardown (context-manager exit, ``close()``, atexit, or ``down`` from the CLI with the
JSON state file) stops processes, deletes every namespace (which removes their links and
rules) and the runner link, and then checks that nothing is left.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import errno
import functools
import ipaddress
import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar, cast

ROOT_REASON = "needs root (network namespaces)"
SUBNET_DEFAULT = "10.77.0.0/24"
PREFIX_DEFAULT = "rkc"
PREFIX_LEN_MAX = 8  # "<prefix>-rt" must fit IFNAMSIZ-1 = 15 characters
HOSTS_MIN = 1
HOSTS_MAX = 32
STATE_DIR_DEFAULT = Path("/run/raftka-netns")
PROBE_PORT_DEFAULT = 47913  # TCP and UDP; unusual so it does not clash with nodes
RUNNER = "runner"  # the test runner's name in reachability matrices
READY_TIMEOUT_S = 5.0
PROCESS_STOP_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 20.0
DELAY_QUEUE_MAXLEN = 4096

CLONE_NEWNET = 0x40000000
_T = TypeVar("_T")


class NetnsError(RuntimeError):
    """A namespace operation failed (a command's stderr is in the message)."""


class NeedsRootError(PermissionError):
    """Raised by every entry point that changes network namespaces when not root."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: {ROOT_REASON}; run as root (CI does)")


def have_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str) -> None:
    if not have_root():
        raise NeedsRootError(what)


def missing_tools() -> list[str]:
    """Commands the harness needs that are not on PATH (apt: iproute2, iptables)."""
    return [t for t in ("ip", "iptables-restore") if shutil.which(t) is None]


def _run(argv: Sequence[str], *, input_text: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        list(argv),
        input=input_text,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _netns_list() -> set[str]:
    out = _run(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _libc_setns() -> Callable[[int, int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    fn: Callable[[int, int], int] = libc.setns
    return fn


def in_netns(netns: str | None, fn: Callable[[], _T]) -> _T:
    """Run ``fn`` on a fresh thread that first enters namespace ``netns``.

    A network namespace is per thread, and a socket stays in the namespace it was created
    in: sockets made by ``fn`` can be used from any thread afterwards. ``None`` runs ``fn``
    in the caller's namespace.
    """
    if netns is None:
        return fn()
    results: list[_T] = []
    errors: list[BaseException] = []
    setns = _libc_setns()

    def body() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            results.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


@dataclass(frozen=True)
class Host:
    name: str  # "n1", "n2", ...
    ip: str
    netns: str


@dataclass(frozen=True)
class Reachability:
    """Who reaches whom: ``ok[(src, dst)]``; node names include :data:`RUNNER`."""

    nodes: tuple[str, ...]
    ok: Mapping[tuple[str, str], bool]
    proto: str

    def cuts(self) -> set[tuple[str, str]]:
        return {pair for pair, good in self.ok.items() if not good}

    def host_cuts(self) -> set[tuple[str, str]]:
        """Cuts between test hosts only (the runner excluded)."""
        return {(a, b) for a, b in self.cuts() if RUNNER not in (a, b)}

    def __str__(self) -> str:
        width = max(len(n) for n in self.nodes) + 1
        lines = [
            f"{self.proto} src\\dst".ljust(width + 8) + "".join(n.rjust(width) for n in self.nodes)
        ]
        for a in self.nodes:
            cells = ("" if a == b else ("ok" if self.ok[(a, b)] else "--") for b in self.nodes)
            lines.append(a.ljust(width + 8) + "".join(c.rjust(width) for c in cells))
        return "\n".join(lines)


@dataclass
class _DelayRule:
    queue_num: int
    pairs: tuple[tuple[str, str], ...]  # (src ip, dst ip)
    process: subprocess.Popen[bytes]


@dataclass
class _Faults:
    """Everything one owner token installed."""

    drops: dict[str, frozenset[str]] = field(default_factory=dict)  # receiver -> senders
    loss_pct: dict[str, float] = field(default_factory=dict)  # host -> percent
    delay: _DelayRule | None = None


def _teardown_names(netns_names: Collection[str], root_link: str | None, errors: list[str]) -> None:
    """Kill what runs in our namespaces (by pid), delete them and the runner link."""
    existing = _netns_list()
    mine = [ns for ns in netns_names if ns in existing]
    for ns in mine:
        pids = _run(["ip", "netns", "pids", ns], check=False).split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + PROCESS_STOP_TIMEOUT_S
        for pid in pids:
            while Path(f"/proc/{pid}").exists() and _proc_state(int(pid)) not in ("Z", "X"):
                if time.monotonic() > deadline:
                    errors.append(f"pid {pid} in {ns} survives SIGKILL")
                    break
                time.sleep(0.01)  # polling /proc with a deadline
    for ns in mine:
        try:
            _run(["ip", "netns", "del", ns])
        except NetnsError as exc:
            errors.append(str(exc))
    if root_link and _link_exists(root_link):
        try:
            _run(["ip", "link", "del", root_link])
        except NetnsError as exc:
            # Deleting the hub namespace deletes the veth peer, which removes this end
            # asynchronously: it may vanish between the check and the delete.
            if _link_exists(root_link):
                errors.append(str(exc))
    left = _netns_list() & set(netns_names)
    if left:
        errors.append(f"namespaces left behind: {sorted(left)}")
    if root_link and _link_exists(root_link):
        errors.append(f"link left behind: {root_link}")


def _tcp_sockets(count: int) -> list[socket.socket]:
    return [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]


def _proc_state(pid: int) -> str:
    """The state letter from /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie), or ''."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def process_state(pid: int) -> str:
    """Public form of the /proc state reader, for tests and nemeses."""
    return _proc_state(pid)


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = PROCESS_STOP_TIMEOUT_S) -> int:
    """SIGCONT + SIGTERM the process group, SIGKILL after ``timeout_s``; reap; return code."""
    try:
        group_leader = os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        group_leader = False

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group_leader:
                os.killpg(proc.pid, sig)
            elif proc.poll() is None:
                os.kill(proc.pid, sig)

    if proc.poll() is None:
        send(signal.SIGCONT)
        send(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            proc.wait(timeout=timeout_s)
    # Strays of the group (children the node forked) would keep files open.
    send(signal.SIGKILL)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    rc = proc.returncode
    assert rc is not None
    return rc


class Cluster:
    """N test hosts in network namespaces on one bridge, plus the runner's link.

    Use :meth:`create` as a context manager; everything it builds goes on exit. Methods
    are thread-safe (a schedule may apply faults from another thread).
    """

    def __init__(
        self,
        *,
        prefix: str,
        subnet: ipaddress.IPv4Network,
        hosts: Sequence[Host],
        state_path: Path,
        probe_port: int,
    ) -> None:
        self.prefix = prefix
        self.subnet = subnet
        self.hosts: tuple[Host, ...] = tuple(hosts)
        self.hub_netns = f"{prefix}-hub"
        self.runner_link = f"{prefix}-rt"
        self.runner_ip = str(subnet.broadcast_address - 1)
        self.state_path = state_path
        self.probe_port = probe_port
        self._by_name = {h.name: h for h in self.hosts}
        self._by_ip = {h.ip: h for h in self.hosts}
        self._lock = threading.RLock()
        self._faults: dict[int, _Faults] = {}
        self._tokens = itertools.count(1)
        self._queue_nums = itertools.count(1)
        self._applied_text: dict[str, str] = {}  # netns -> last iptables-restore input
        self._procs: list[subprocess.Popen[bytes]] = []
        self._tcp_listeners: dict[str, socket.socket] = {}
        self._udp_sockets: dict[str, socket.socket] = {}
        self._closed = False
        self._atexit = self.close

    # --- building -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        n: int,
        *,
        subnet: str = SUBNET_DEFAULT,
        prefix: str = PREFIX_DEFAULT,
        state_dir: Path = STATE_DIR_DEFAULT,
        probe_port: int = PROBE_PORT_DEFAULT,
    ) -> Cluster:
        """Build ``n`` hosts (n1..nN at .1..N of ``subnet``) and wait until the runner
        reaches each one. Refuses if not root, if ``subnet`` is already routed or if
        namespaces with this prefix exist. On any failure it tears down what it built."""
        require_root("Cluster.create")
        if missing := missing_tools():
            raise NetnsError(f"missing commands {missing}: apt-get install iproute2 iptables")
        if not (HOSTS_MIN <= n <= HOSTS_MAX):
            raise ValueError(f"n={n}: want {HOSTS_MIN}..{HOSTS_MAX} hosts")
        if not (prefix.isascii() and prefix.isalnum() and 1 <= len(prefix) <= PREFIX_LEN_MAX):
            raise ValueError(f"prefix {prefix!r}: 1..{PREFIX_LEN_MAX} ASCII letters/digits")
        net = ipaddress.IPv4Network(subnet)
        if net.num_addresses < n + 4:
            raise ValueError(f"subnet {net} too small for {n} hosts and the runner")
        _check_subnet_free(net)
        clash = {ns for ns in _netns_list() if ns.startswith(f"{prefix}-")}
        if clash or _link_exists(f"{prefix}-rt"):
            raise NetnsError(
                f"prefix {prefix!r} in use ({sorted(clash)}); "
                f"`python3 -m raftka.chaos.netns down --prefix {prefix}` cleans it up"
            )
        hosts = [
            Host(f"n{i}", str(net.network_address + i), f"{prefix}-n{i}") for i in range(1, n + 1)
        ]
        cluster = cls(
            prefix=prefix,
            subnet=net,
            hosts=hosts,
            state_path=state_dir / f"{prefix}.json",
            probe_port=probe_port,
        )
        atexit.register(cluster._atexit)
        try:
            cluster._write_state()
            cluster._build()
            cluster._open_probes()
            cluster._wait_runner_reaches_all()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def _write_state(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "prefix": self.prefix,
            "subnet": str(self.subnet),
            "hub_netns": self.hub_netns,
            "runner_link": self.runner_link,
            "runner_ip": self.runner_ip,
            "hosts": [{"name": h.name, "ip": h.ip, "netns": h.netns} for h in self.hosts],
            "created_by_pid": os.getpid(),
            "created_wall": time.time(),
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_path)

    def _build(self) -> None:
        plen = self.subnet.prefixlen
        hub = self.hub_netns
        batch = [f"netns add {hub}"] + [f"netns add {h.netns}" for h in self.hosts]
        _run(["ip", "-batch", "-"], input_text="\n".join(batch) + "\n")
        hub_cmds = [
            "link set lo up",
            "link add br0 type bridge stp_state 0",
            "link set br0 up",
        ]
        for i, h in enumerate(self.hosts, start=1):
            hub_cmds += [
                f"link add p{i} type veth peer name eth0 netns {h.netns}",
                f"link set p{i} master br0 up",
            ]
        _run(["ip", "-n", hub, "-batch", "-"], input_text="\n".join(hub_cmds) + "\n")
        for h in self.hosts:
            cmds = ["link set lo up", f"addr add {h.ip}/{plen} dev eth0", "link set eth0 up"]
            _run(["ip", "-n", h.netns, "-batch", "-"], input_text="\n".join(cmds) + "\n")
        root_cmds = [
            f"link add {self.runner_link} type veth peer name prt netns {hub}",
            f"addr add {self.runner_ip}/{plen} dev {self.runner_link}",
            f"link set {self.runner_link} up",
        ]
        _run(["ip", "-batch", "-"], input_text="\n".join(root_cmds) + "\n")
        _run(["ip", "-n", hub, "link", "set", "prt", "master", "br0", "up"])

    def _open_probes(self) -> None:
        for h in self.hosts:
            self._tcp_listeners[h.name], self._udp_sockets[h.name] = in_netns(
                h.netns, functools.partial(self._probe_sockets, h.ip)
            )
        self._tcp_listeners[RUNNER], self._udp_sockets[RUNNER] = self._probe_sockets(self.runner_ip)

    def _probe_sockets(self, ip: str) -> tuple[socket.socket, socket.socket]:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((ip, self.probe_port))
        tcp.listen(128)
        tcp.setblocking(False)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((ip, self.probe_port))
        udp.setblocking(False)
        return tcp, udp

    def _wait_runner_reaches_all(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            matrix = self.reachability(timeout_s=0.5, sources=[RUNNER])
            if not matrix.cuts():
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"runner cannot reach hosts after build:\n{matrix}")

    # --- lookups --------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def host(self, name: str) -> Host:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no host {name!r}; hosts are {list(self._by_name)}") from None

    def host_by_ip(self, ip: str) -> Host:
        return self._by_ip[ip]

    def _node_ip(self, node: str) -> str:
        return self.runner_ip if node == RUNNER else self.host(node).ip

    def _node_netns(self, node: str) -> str | None:
        return None if node == RUNNER else self.host(node).netns

    # --- processes ------------------------------------------------------------------

    def spawn(
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside ``host``'s namespace as a child of the runner.

        ``ip netns exec`` execs the command, so the returned pid is the node itself. It
        runs in its own session (signals to the runner's terminal do not reach it; the
        teardown signals its whole group). stdout and stderr go to ``log_path`` (else
        /dev/null). ``env`` replaces the environment (argv[0] is looked up in its PATH).
        The cluster stops and reaps it on close; :func:`stop_process` does so earlier.
        """
        require_root("Cluster.spawn")
        self._check_open()
        ns = self.host(host).netns
        log: IO[bytes] | int
        log = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                [shutil.which("ip") or "ip", "netns", "exec", ns, *argv],
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if not isinstance(log, int):
                log.close()
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None]
            self._procs.append(proc)
        return proc

    # --- reachability ---------------------------------------------------------------

    def reachability(
        self,
        proto: str = "tcp",
        *,
        timeout_s: float = 0.5,
        sources: Collection[str] | None = None,
    ) -> Reachability:
        """Probe every ordered pair of nodes (hosts and :data:`RUNNER`) at once.

        ``tcp``: src connects to dst's listener; a pair is ok when the handshake completes
        within ``timeout_s`` (so a drop in *either* direction cuts it). ``udp``: src sends
        a datagram to dst; ok when dst receives it within ``timeout_s`` (one-way). With
        cuts the call takes ``timeout_s``; without, a few milliseconds.
        """
        self._check_open()
        nodes = (*self.names, RUNNER)
        srcs = tuple(nodes if sources is None else sources)
        pairs = [(a, b) for a in srcs for b in nodes if a != b]
        if proto == "tcp":
            ok = self._probe_tcp(pairs, timeout_s)
        elif proto == "udp":
            ok = self._probe_udp(pairs, timeout_s)
        else:
            raise ValueError(f"proto {proto!r}: want 'tcp' or 'udp'")
        return Reachability(nodes=nodes, ok=ok, proto=proto)

    def _probe_tcp(
        self, pairs: list[tuple[str, str]], timeout_s: float
    ) -> dict[tuple[str, str], bool]:
        by_src: dict[str, list[str]] = {}
        for a, b in pairs:
            by_src.setdefault(a, []).append(b)
        ok = {pair: False for pair in pairs}
        selector = selectors.DefaultSelector()
        socks: list[socket.socket] = []
        try:
            for src, dsts in by_src.items():
                made = in_netns(self._node_netns(src), functools.partial(_tcp_sockets, len(dsts)))
                socks += made
                for sock, dst in zip(made, dsts, strict=True):
                    sock.setblocking(False)
                    rc = sock.connect_ex((self._node_ip(dst), self.probe_port))
                    if rc not in (0, errno.EINPROGRESS):
                        continue
                    selector.register(sock, selectors.EVENT_WRITE, (src, dst))
            deadline = time.monotonic() + timeout_s
            pending = len(selector.get_map())
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, _ in selector.select(remaining):
                    sock = cast(socket.socket, key.fileobj)
                    ok[key.data] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                    selector.unregister(sock)
                    pending -= 1
        finally:
            selector.close()
            for sock in socks:
                sock.close()
            self._drain_listeners()
        return ok

    def _drain_listeners(self) -> None:
        for listener in self._tcp_listeners.values():
            while True:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                conn.close()

    def _probe_udp(
        self, pairs: list[tuple[str, str]], timeout_s: float
    ) -> dict[tuple[str, str], bool]:
        for sock in self._udp_sockets.values():  # stale datagrams from earlier rounds
            with contextlib.suppress(BlockingIOError):
                while True:
                    sock.recv(512)
        nonce = os.urandom(4).hex()
        ok = {pair: False for pair in pairs}
        for a, b in pairs:
            msg = f"{nonce} {a} {b}".encode()
            with contextlib.suppress(OSError):  # e.g. EPERM from an OUTPUT drop
                self._udp_sockets[a].sendto(msg, (self._node_ip(b), self.probe_port))
        selector = selectors.DefaultSelector()
        for node, sock in self._udp_sockets.items():
            selector.register(sock, selectors.EVENT_READ, node)
        try:
            deadline = time.monotonic() + timeout_s
            missing = len(ok)
            while missing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, _ in selector.select(remaining):
                    sock = cast(socket.socket, key.fileobj)
                    with contextlib.suppress(BlockingIOError):
                        while True:
                            words = sock.recv(512).decode().split()
                            pair = (words[1], words[2])
                            if (
                                words[0] == nonce
                                and words[2] == key.data
                                and not ok.get(pair, True)
                            ):
                                ok[pair] = True
                                missing -= 1
        finally:
            selector.close()
        return ok

    def connect_time(self, src: str, dst: str, *, timeout_s: float = 5.0) -> float:
        """Seconds for one TCP handshake (one round trip) from ``src`` to ``dst``'s
        probe listener. Raises TimeoutError if it does not complete."""
        self._check_open()
        sock = in_netns(
            self._node_netns(src), lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        )
        try:
            sock.settimeout(timeout_s)
            start = time.monotonic()
            sock.connect((self._node_ip(dst), self.probe_port))
            return time.monotonic() - start
        finally:
            sock.close()
            self._drain_listeners()

    # --- faults (used by raftka.chaos.nemesis) --------------------------------------

    def new_token(self) -> int:
        return next(self._tokens)

    def add_drops(self, token: int, grudge: Mapping[str, Collection[str]]) -> None:
        """Under ``token``: each receiver host drops every packet from its senders."""
        for receiver, senders in grudge.items():
            self.host(receiver)
            for s in senders:
                self.host(s)
        with self._lock:
            faults = self._faults.setdefault(token, _Faults())
            for receiver, senders in grudge.items():
                merged = faults.drops.get(receiver, frozenset()) | frozenset(senders)
                faults.drops[receiver] = merged - {receiver}
            self._sync_hosts()

    def add_loss(self, token: int, host: str, percent: float) -> None:
        """Under ``token``: ``host`` drops ``percent``% of what it sends to other hosts."""
        self.host(host)
        if not 0 <= percent <= 100:
            raise ValueError(f"percent={percent}: want 0..100")
        with self._lock:
            self._faults.setdefault(token, _Faults()).loss_pct[host] = percent
            self._sync_hosts()

    def add_delay(self, token: int, pairs: Collection[tuple[str, str]], delay_ms: float) -> None:
        """Under ``token``: packets from src to dst (host names) wait ``delay_ms`` in the
        hub. Starts a delayer process in the hub, waits until its queue is bound, then
        installs the NFQUEUE rules. Where two delays match one pair, the older one wins."""
        for a, b in pairs:
            self.host(a)
            self.host(b)
        if delay_ms < 0:
            raise ValueError(f"delay_ms={delay_ms}: want >= 0")
        with self._lock:
            self._check_open()
            if self._faults.get(token, _Faults()).delay is not None:
                raise ValueError(f"token {token} already has a delay")
            queue_num = next(self._queue_nums)
            proc = self._start_delayer(queue_num, delay_ms)
            ip_pairs = tuple((self.host(a).ip, self.host(b).ip) for a, b in sorted(pairs))
            self._faults.setdefault(token, _Faults()).delay = _DelayRule(queue_num, ip_pairs, proc)
            try:
                self._sync_hub()
            except BaseException:
                self.remove(token)
                raise

    def _start_delayer(self, queue_num: int, delay_ms: float) -> subprocess.Popen[bytes]:
        if not self._applied_text.get("br_netfilter"):
            sysctl = ["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"]
            _run(["ip", "netns", "exec", self.hub_netns, *sysctl])
            self._applied_text["br_netfilter"] = "1"
        argv = [
            "ip", "netns", "exec", self.hub_netns, sys.executable, "-m", "raftka.chaos.delay",
            "--queue", str(queue_num), "--delay-ms", str(delay_ms),
            "--maxlen", str(DELAY_QUEUE_MAXLEN),
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        try:
            if not selector.select(READY_TIMEOUT_S * 2):
                stop_process(proc)
                raise NetnsError(f"delayer for queue {queue_num} not ready in time")
            line = proc.stdout.readline().decode()
        finally:
            selector.close()
        if not line.startswith(f"ready {queue_num} "):
            stop_process(proc)
            raise NetnsError(f"delayer for queue {queue_num} failed: {line!r}")
        return proc

    def remove(self, token: int) -> None:
        """Undo everything installed under ``token`` (no-op if nothing is)."""
        with self._lock:
            faults = self._faults.pop(token, None)
            if faults is None or self._closed:
                return
            if faults.drops or faults.loss_pct:
                self._sync_hosts()
            if faults.delay is not None:
                self._sync_hub()  # rules out first, so no packet meets an unbound queue
                stop_process(faults.delay.process)

    def active_tokens(self) -> list[int]:
        with self._lock:
            return sorted(self._faults)

    def _host_rules(self, host: Host) -> str:
        senders: set[str] = set()
        losses: list[float] = []
        for faults in self._faults.values():
            senders |= faults.drops.get(host.name, frozenset())
            if host.name in faults.loss_pct:
                losses.append(faults.loss_pct[host.name])
        lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        lines += [f"-A INPUT -s {self.host(s).ip}/32 -j DROP" for s in sorted(senders)]
        if any(p > 0 for p in losses):
            lines.append(f"-A OUTPUT -d {self.runner_ip}/32 -j ACCEPT")  # never cut the runner
        for p in losses:
            if p >= 100:
                lines.append(f"-A OUTPUT -d {self.subnet} -j DROP")
            elif p > 0:
                prob = f"{p / 100:.6f}"
                lines.append(
                    f"-A OUTPUT -d {self.subnet} -m statistic --mode random "
                    f"--probability {prob} -j DROP"
                )
        lines.append("COMMIT")
        return "\n".join(lines) + "\n"

    def _hub_rules(self) -> str:
        lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        for token in sorted(self._faults):
            delay = self._faults[token].delay
            if delay is None:
                continue
            for src, dst in delay.pairs:
                lines.append(
                    f"-A FORWARD -s {src}/32 -d {dst}/32 -j NFQUEUE --queue-num {delay.queue_num}"
                )
        lines.append("COMMIT")
        return "\n".join(lines) + "\n"

    def _restore(self, netns: str, text: str) -> None:
        if self._applied_text.get(netns, _EMPTY_RULES) == text:
            return
        _run(["ip", "netns", "exec", netns, "iptables-restore", "-w", "5"], input_text=text)
        self._applied_text[netns] = text

    def _sync_hosts(self) -> None:
        self._check_open()
        for h in self.hosts:
            self._restore(h.netns, self._host_rules(h))

    def _sync_hub(self) -> None:
        self._check_open()
        self._restore(self.hub_netns, self._hub_rules())

    def rules(self, host: str) -> str:
        """The live iptables rules of a host (``iptables-save``), for reports and tests."""
        return _run(["ip", "netns", "exec", self.host(host).netns, "iptables-save"])

    # --- teardown -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise NetnsError(f"cluster {self.prefix} is closed")

    def close(self) -> None:
        """Stop processes, delete every namespace and link, remove the state file, then
        check nothing is left (raises NetnsError listing leftovers). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                atexit.unregister(self._atexit)
            errors: list[str] = []
            for faults in self._faults.values():
                if faults.delay is not None:
                    try:
                        stop_process(faults.delay.process)
                    except Exception as exc:
                        errors.append(f"delayer: {exc!r}")
            self._faults.clear()
            for proc in self._procs:
                try:
                    stop_process(proc)
                except Exception as exc:
                    errors.append(f"pid {proc.pid}: {exc!r}")
            self._procs.clear()
            for sock in [*self._tcp_listeners.values(), *self._udp_sockets.values()]:
                sock.close()
            self._tcp_listeners.clear()
            self._udp_sockets.clear()
            names = [h.netns for h in self.hosts] + [self.hub_netns]
            _teardown_names(names, self.runner_link, errors)
            with contextlib.suppress(FileNotFoundError):
                self.state_path.unlink()
            if errors:
                raise NetnsError("teardown: " + "; ".join(errors))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.ip}" for h in self.hosts)
        return f"Cluster({self.prefix}, {self.subnet}, runner={self.runner_ip}, {hosts})"


_EMPTY_RULES = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"


def _check_subnet_free(net: ipaddress.IPv4Network) -> None:
    """Refuse a subnet that any route or address of the root namespace overlaps."""
    routes: list[dict[str, Any]] = json.loads(
        _run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]"
    )
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", ""):
            continue
        try:
            other = ipaddress.IPv4Network(dst, strict=False)
        except ValueError:
            continue
        if other.prefixlen > 0 and other.overlaps(net):
            raise NetnsError(
                f"subnet {net} overlaps route {dst} ({route.get('dev')}); pick another"
            )


def free_subnet(within: str = "10.77.0.0/16", prefixlen: int = 24, *, start: int = 0) -> str:
    """The first ``prefixlen`` subnet of ``within``, from the ``start``-th on (wrapping),
    that no root-namespace route overlaps (for tests that run beside other clusters;
    different ``start`` values keep concurrent runs apart). Raises NetnsError if none."""
    candidates = list(ipaddress.IPv4Network(within).subnets(new_prefix=prefixlen))
    k = start % len(candidates)
    for candidate in candidates[k:] + candidates[:k]:
        try:
            _check_subnet_free(candidate)
        except NetnsError:
            continue
        return str(candidate)
    raise NetnsError(f"no free /{prefixlen} in {within}")


def load_state(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def teardown_state(path: Path) -> list[str]:
    """Tear down what a state file describes (``down``); return the errors."""
    require_root("teardown")
    state = load_state(path)
    names = [h["netns"] for h in state["hosts"]] + [state["hub_netns"]]
    errors: list[str] = []
    _teardown_names(names, state["runner_link"], errors)
    if not errors:
        path.unlink()
    return errors


def teardown_prefix(prefix: str) -> list[str]:
    """Tear down every namespace named ``<prefix>-*`` and the link ``<prefix>-rt``, for
    leftovers without a state file."""
    require_root("teardown")
    names = sorted(ns for ns in _netns_list() if ns.startswith(f"{prefix}-"))
    errors: list[str] = []
    _teardown_names(names, f"{prefix}-rt", errors)
    return errors


@contextlib.contextmanager
def cluster(n: int, **kwargs: Any) -> Iterator[Cluster]:
    """``with cluster(5) as c:`` — shorthand for ``Cluster.create`` as a context."""
    with Cluster.create(n, **kwargs) as c:
        yield c


# --- command line ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m raftka.chaos.netns",
        description="Build, inspect and remove network-namespace test hosts.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--prefix", default=PREFIX_DEFAULT, help="names: <prefix>-n1, ...")
    common.add_argument("--state-dir", type=Path, default=STATE_DIR_DEFAULT)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", parents=[common], help="build hosts and leave them running")
    up.add_argument("--hosts", type=int, default=5)
    up.add_argument("--subnet", default=SUBNET_DEFAULT)
    sub.add_parser(
        "down", parents=[common], help="remove what `up` built (or any <prefix>-* leftovers)"
    )
    sub.add_parser("status", parents=[common], help="show the hosts and their namespaces")
    args = parser.parse_args(argv)
    state_path: Path = args.state_dir / f"{args.prefix}.json"
    try:
        if args.cmd == "up":
            c = Cluster.create(
                args.hosts, subnet=args.subnet, prefix=args.prefix, state_dir=args.state_dir
            )
            atexit.unregister(c._atexit)  # `up` leaves the hosts for `down`
            for sock in [*c._tcp_listeners.values(), *c._udp_sockets.values()]:
                sock.close()
            print(json.dumps(load_state(state_path), indent=2))
            for h in c.hosts:
                print(f"# {h.name} {h.ip}: ip netns exec {h.netns} CMD", file=sys.stderr)
            return 0
        if args.cmd == "down":
            if state_path.exists():
                errors = teardown_state(state_path)
            else:
                errors = teardown_prefix(args.prefix)
            for e in errors:
                print(e, file=sys.stderr)
            return 1 if errors else 0
        if not state_path.exists():
            leftovers = sorted(ns for ns in _netns_list() if ns.startswith(f"{args.prefix}-"))
            print(f"no state at {state_path}; namespaces with prefix: {leftovers}")
            return 0
        state = load_state(state_path)
        existing = _netns_list()
        link_flag = "up" if _link_exists(state["runner_link"]) else "MISSING"
        print(
            f"{state['prefix']}: subnet {state['subnet']}, runner {state['runner_ip']} "
            f"on {state['runner_link']} ({link_flag})"
        )
        for h in state["hosts"]:
            flag = "ok" if h["netns"] in existing else "MISSING"
            print(f"  {h['name']:4} {h['ip']:15} netns {h['netns']:12} {flag}")
        return 0
    except (NeedsRootError, NetnsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
