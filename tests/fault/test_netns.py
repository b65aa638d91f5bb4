"""The network-namespace test hosts and the network nemeses, on real namespaces.

Each test builds its own small cluster (about 0.05 s) under a prefix and subnet no other
run uses, checks reachability matrices (TCP handshakes and UDP datagrams between every
pair of hosts and the runner), and the fixture checks that teardown leaves nothing."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import pytest

from raftka.chaos import nemesis as nm
from raftka.chaos.netns import (
    RUNNER,
    Cluster,
    NetnsError,
    free_subnet,
    process_state,
)

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
_PREFIXES = count()
TIMINGS: dict[str, list[float]] = {}


def wait_until(cond: Callable[[], bool], timeout_s: float, message: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, message()
        time.sleep(0.01)


def unique_prefix() -> str:
    return f"rk{os.getpid() % 100000:05d}{next(_PREFIXES) % 10}"


def namespaces_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(prefix + "-")]


def assert_gone(prefix: str) -> None:
    assert namespaces_with(prefix) == [], f"namespaces left: {namespaces_with(prefix)}"
    assert not Path(f"/sys/class/net/{prefix}-rt").exists(), "runner link left"


def timed(label: str, fn: Callable[[], object]) -> None:
    t = time.monotonic()
    fn()
    TIMINGS.setdefault(label, []).append(time.monotonic() - t)


def build(n: int, tmp_path: Path) -> Cluster:
    t = time.monotonic()
    c = Cluster.create(
        n, subnet=free_subnet(start=os.getpid()), prefix=unique_prefix(), state_dir=tmp_path
    )
    TIMINGS.setdefault(f"build {n}", []).append(time.monotonic() - t)
    return c


@pytest.fixture
def c5(tmp_path: Path) -> Iterator[Cluster]:
    c = build(5, tmp_path)
    with c:
        yield c
    assert_gone(c.prefix)


@pytest.fixture
def log(tmp_path: Path) -> nm.FaultLog:
    return nm.FaultLog(tmp_path / "faults.jsonl")


def both_ways(a: set[str], b: set[str]) -> set[tuple[str, str]]:
    """Every ordered pair between host sets a and b, both directions."""
    return {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}


def check(c: Cluster, nemesis: nm.Nemesis, tcp_cuts: set[tuple[str, str]]) -> None:
    """Apply, expect exactly ``tcp_cuts`` (the runner reaching all), heal, expect none."""
    timed(f"apply {nemesis.kind}", nemesis.apply)
    matrix = c.reachability("tcp", timeout_s=0.3)
    assert matrix.cuts() == tcp_cuts, f"{nemesis.kind}:\n{matrix}"
    timed(f"heal {nemesis.kind}", nemesis.heal)
    healed = c.reachability("tcp", timeout_s=0.3)
    assert healed.cuts() == set(), f"after heal of {nemesis.kind}:\n{healed}"


def test_build_3_and_5_hosts(tmp_path: Path) -> None:
    """Three and five hosts get distinct addresses in the subnet; every host and the
    runner reach every other (TCP and UDP matrices without a cut); the state file
    describes them; leaving the context removes every namespace, the runner link and
    the state file."""
    for n in (3, 5):
        c = build(n, tmp_path)
        with c:
            assert len({h.ip for h in c.hosts}) == n
            assert all(h.ip in {str(a) for a in c.subnet.hosts()} for h in c.hosts)
            assert len(namespaces_with(c.prefix)) == n + 1
            state = json.loads(c.state_path.read_text())
            assert [h["netns"] for h in state["hosts"]] == [h.netns for h in c.hosts]
            for proto in ("tcp", "udp"):
                matrix = c.reachability(proto, timeout_s=1.0)
                assert len(matrix.ok) == (n + 1) * n
                assert matrix.cuts() == set(), str(matrix)
        assert_gone(c.prefix)
        assert not c.state_path.exists()


def test_isolate(c5: Cluster, log: nm.FaultLog) -> None:
    """Isolating n2 cuts n2 from every other host in both directions and nothing else;
    the target may be a callable (the "node with role X" hook), resolved at apply."""
    others = {"n1", "n3", "n4", "n5"}
    check(c5, nm.Isolate(c5, lambda: "n2", log=log), both_ways({"n2"}, others))
    (window,) = log.windows()
    assert window["kind"] == "isolate" and window["targets"] == ["n2"]


def test_majority_minority(c5: Cluster, log: nm.FaultLog) -> None:
    """An explicit split {n1,n2} | {n3,n4,n5} cuts exactly the pairs across it; a random
    split (seeded) has a 2-host minority and cuts exactly its cross pairs."""
    check(
        c5,
        nm.MajorityMinority(c5, minority=["n1", "n2"], log=log),
        both_ways({"n1", "n2"}, {"n3", "n4", "n5"}),
    )
    rand = nm.MajorityMinority(c5, rng=random.Random(5), log=log)
    rand.apply()
    minority = set(rand.detail["minority"])
    assert len(minority) == 2
    matrix = c5.reachability("tcp", timeout_s=0.3)
    assert matrix.cuts() == both_ways(minority, set(c5.names) - minority), str(matrix)
    rand.heal()
    assert c5.reachability("tcp", timeout_s=0.3).cuts() == set()


def test_bridge(c5: Cluster, log: nm.FaultLog) -> None:
    """Bridge over n1..n5: {n1,n2} and {n4,n5} cannot talk; n3 talks to everyone."""
    check(
        c5,
        nm.Bridge(c5, order=["n1", "n2", "n3", "n4", "n5"], log=log),
        both_ways({"n1", "n2"}, {"n4", "n5"}),
    )


def test_majorities_ring(c5: Cluster, log: nm.FaultLog) -> None:
    """Majorities ring over n1..n5: each host reaches only its two ring neighbours, so
    the cuts are exactly the five non-adjacent pairs, both ways."""
    ring = ["n1", "n2", "n3", "n4", "n5"]
    far = {(ring[i], ring[(i + 2) % 5]) for i in range(5)}
    check(c5, nm.MajoritiesRing(c5, order=ring, log=log), far | {(b, a) for a, b in far})


def test_one_way_drop(c5: Cluster, log: nm.FaultLog) -> None:
    """n1 stops receiving from n2. UDP shows the one-way cut: n2->n1 datagrams vanish,
    n1->n2 arrive. A TCP handshake needs both directions, so TCP shows n1<->n2 cut both
    ways (the two-way stall TCP makes of a one-way drop). Healing restores both."""
    one_way = nm.OneWay(c5, "n1", ["n2"], log=log)
    one_way.apply()
    udp = c5.reachability("udp", timeout_s=0.3)
    assert udp.cuts() == {("n2", "n1")}, str(udp)
    tcp = c5.reachability("tcp", timeout_s=0.3)
    assert tcp.cuts() == {("n1", "n2"), ("n2", "n1")}, str(tcp)
    one_way.heal()
    assert c5.reachability("udp", timeout_s=0.3).cuts() == set()


def test_faults_compose(c5: Cluster, log: nm.FaultLog) -> None:
    """Two overlapping faults: healing one leaves the other in place (rules are the
    union of the active faults, not the last one applied)."""
    iso = nm.Isolate(c5, "n5", log=log)
    one_way = nm.OneWay(c5, "n1", ["n2"], log=log)
    iso.apply()
    one_way.apply()
    iso.heal()
    udp = c5.reachability("udp", timeout_s=0.3)
    assert udp.cuts() == {("n2", "n1")}, str(udp)
    one_way.heal()
    assert c5.reachability("udp", timeout_s=0.3).cuts() == set()


def test_loss_100_and_0(c5: Cluster, log: nm.FaultLog) -> None:
    """Loss at 100% on n3 drops everything n3 sends to other hosts (UDP from n3 all cut,
    TCP with n3 cut both ways, since n3's handshake replies drop) but never to the
    runner; loss at 0% drops nothing."""
    others = {"n1", "n2", "n4", "n5"}
    total = nm.Loss(c5, "n3", 100, log=log)
    total.apply()
    udp = c5.reachability("udp", timeout_s=0.3)
    assert udp.cuts() == {("n3", o) for o in others}, str(udp)
    tcp = c5.reachability("tcp", timeout_s=0.3)
    assert tcp.cuts() == both_ways({"n3"}, others), str(tcp)
    total.heal()
    check(c5, nm.Loss(c5, "n3", 0, log=log), set())


def test_delay(c5: Cluster, log: nm.FaultLog) -> None:
    """Delaying n1->n2 by 150 ms makes a TCP handshake (one round trip) between n1 and
    n2 take >= 150 ms in either direction of connect, while n1<->n3 and the runner stay
    fast; the delayer's queue is bound while active; heal removes the delay and stops
    the delayer. Behaviour check, not a benchmark."""
    delay_ms = 150
    delay = nm.Delay(c5, [("n1", "n2")], delay_ms, log=log)
    timed("apply delay", delay.apply)
    queue = subprocess.run(
        ["ip", "netns", "exec", c5.hub_netns, "cat", "/proc/net/netfilter/nfnetlink_queue"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert queue.strip(), "no nfnetlink queue bound in the hub"
    assert c5.connect_time("n1", "n2") >= delay_ms / 1000
    assert c5.connect_time("n2", "n1") >= delay_ms / 1000
    assert c5.connect_time("n1", "n3") < delay_ms / 1000
    assert c5.connect_time(RUNNER, "n2") < delay_ms / 1000
    timed("heal delay", delay.heal)
    assert c5.connect_time("n1", "n2") < delay_ms / 1000
    (window,) = log.windows()
    assert window["detail"]["delay_ms"] == delay_ms


_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9090)); s.listen(16)
print("listening", flush=True)
while True:
    conn, _ = s.accept()
    conn.recv(16); conn.sendall(b"pong"); conn.close()
"""


def ping(ip: str, timeout_s: float) -> bool:
    try:
        with socket.create_connection((ip, 9090), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            s.sendall(b"ping")
            return s.recv(16) == b"pong"
    except OSError:
        return False


def test_spawned_node_pause_kill_restart(c5: Cluster, tmp_path: Path, log: nm.FaultLog) -> None:
    """A server spawned in n3 (bound to n3's address) answers the runner. Paused, it
    stops answering though TCP still connects (backlog); resumed, it answers. Killed
    with -9 it is reaped (no zombie); restarted through the Node hook it answers again
    with a new pid."""
    ip = c5.host("n3").ip
    node = nm.Node(
        "n3",
        lambda: c5.spawn("n3", [sys.executable, "-c", _SERVER, ip], log_path=tmp_path / "n3.log"),
    )
    node.start()
    wait_until(lambda: ping(ip, 0.5), 10, lambda: "server in n3 never answered")
    pause = nm.Pause(lambda: node.pid, name="n3", log=log)
    pause.apply()
    assert process_state(node.pid) == "T"
    assert not ping(ip, 0.3), "a paused server answered"
    pause.heal()
    wait_until(lambda: ping(ip, 0.5), 5, lambda: "server did not answer after resume")
    first = node.pid
    kill = nm.Kill.node(node, log=log)
    kill.apply()
    assert kill.detail["returncode"] == -9
    assert not Path(f"/proc/{first}").exists(), "killed node left a zombie"
    kill.heal()
    assert node.pid != first
    wait_until(lambda: ping(ip, 0.5), 10, lambda: "restarted server never answered")
    assert [w["kind"] for w in log.windows()] == ["pause", "kill"]


def test_teardown_after_failure(tmp_path: Path) -> None:
    """An exception inside the context still removes everything: with a partition,
    a loss rule, a delay (its delayer process) and a spawned node active, raising
    leaves no namespace, no runner link, no state file, and no process alive."""
    c = build(3, tmp_path)
    with pytest.raises(RuntimeError, match="midway"), c:
        nm.Isolate(c, "n1").apply()
        nm.Loss(c, "n2", 50).apply()
        nm.Delay.between(c, "n2", "n3", 50).apply()
        node = c.spawn("n2", ["sleep", "600"])
        delayers = [f.delay.process for f in c._faults.values() if f.delay is not None]
        assert len(delayers) == 1
        raise RuntimeError("midway")
    assert_gone(c.prefix)
    assert not c.state_path.exists()
    assert node.returncode is not None, "spawned node not reaped"
    assert delayers[0].returncode is not None, "delayer not reaped"


def test_refuses_routed_subnet_and_used_prefix(c5: Cluster, tmp_path: Path) -> None:
    """A second cluster on a subnet that is already routed, or under a prefix in use, is
    refused before anything is built."""
    with pytest.raises(NetnsError, match="overlaps"):
        Cluster.create(3, subnet=str(c5.subnet), prefix=unique_prefix(), state_dir=tmp_path)
    with pytest.raises(NetnsError, match="in use"):
        Cluster.create(
            3, subnet=free_subnet(start=os.getpid()), prefix=c5.prefix, state_dir=tmp_path
        )


def test_cli_up_status_down(tmp_path: Path) -> None:
    """The deploy/netns/netns wrapper: `up` builds hosts and leaves them, `status`
    lists them, `down` removes everything `up` made, using the state file."""
    prefix = unique_prefix()
    env = {**os.environ, "PYTHON": sys.executable}
    common = ["--prefix", prefix, "--state-dir", str(tmp_path)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(REPO / "deploy/netns/netns"), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    try:
        up = cli("up", "--hosts", "3", "--subnet", free_subnet(start=os.getpid()), *common)
        assert up.returncode == 0, up.stderr
        assert len(json.loads(up.stdout)["hosts"]) == 3
        assert len(namespaces_with(prefix)) == 4
        status = cli("status", *common)
        assert status.returncode == 0 and status.stdout.count(" ok") == 3, status.stdout
        down = cli("down", *common)
        assert down.returncode == 0, down.stderr
        assert_gone(prefix)
    finally:
        cli("down", *common)


def test_schedule_runs_and_heals(c5: Cluster, log: nm.FaultLog) -> None:
    """A short seeded schedule of network faults plays against the cluster: each fault
    logs a start and an end in order, and afterwards the matrix is full again."""
    kinds = ["isolate", "majority-minority", "bridge", "majorities-ring", "one-way", "loss"]
    schedule = nm.generate_schedule(9, kinds, 2.0, c5.names, gap_s=(0.05, 0.1), fault_s=(0.1, 0.2))
    assert len(schedule) >= 5
    stop = threading.Event()
    done = nm.run_schedule(schedule, lambda f: nm.build_nemesis(f, c5, log=log), stop=stop)
    assert [n.kind for n in done] == [f.kind for f in schedule]
    assert all(not n.active for n in done)
    assert [e["event"] for e in log.events] == ["start", "end"] * len(schedule)
    assert c5.active_tokens() == []
    assert c5.reachability("tcp", timeout_s=0.3).cuts() == set()


def test_zz_report_timings() -> None:
    """Prints build/apply/heal timings gathered by the tests above (run with -s)."""
    for label, values in sorted(TIMINGS.items()):
        print(f"{label:28} n={len(values)} max={max(values) * 1000:.0f} ms")
