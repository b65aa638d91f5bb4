"""Nemeses: reversible faults between test hosts and on node processes.

Each nemesis has ``apply()`` and ``heal()`` (idempotent: healing a healed fault does
nothing) and writes one JSON line per change to a :class:`FaultLog`, with a wall-clock
and a monotonic timestamp, so a report can shade the fault windows on a history::

    {"event": "start", "id": 3, "kind": "isolate", "targets": ["n2"], "detail": {...},
     "wall": 1790000000.12, "mono": 812.5}
    {"event": "end", "id": 3, ..., "start_wall": ..., "start_mono": ..., "end_wall": ...,
     "end_mono": ...}

Network faults act through a :class:`raftka.chaos.netns.Cluster` (they need root);
process faults (:class:`Pause`, :class:`Kill`) act on pids and need no root. A target may
be a host name or a callable that returns one when the fault is applied: "isolate the
active controller" is ``Isolate(cluster, lambda: host_of(active_controller()))``.

:func:`generate_schedule` turns a seed into the same list of faults every time, and
:func:`run_schedule` plays one against a cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

from raftka.chaos.netns import Cluster, process_state, stop_process

HostRef = str | Callable[[], str]
PidRef = int | subprocess.Popen[bytes] | Callable[[], "int | subprocess.Popen[bytes]"]
Grudge = dict[str, frozenset[str]]  # receiver -> the senders it drops

SIGNAL_TIMEOUT_S = 5.0

# --- the fault log ------------------------------------------------------------------


class FaultLog:
    """Append-only JSON lines of fault windows; also kept in memory (``events``).

    Thread-safe. ``path`` is opened in append mode for each line, so a crash loses at
    most the line being written."""

    def __init__(self, path: Path | None = None, stream: IO[str] | None = None) -> None:
        self.path = path
        self.stream = stream
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def write(self, event: Mapping[str, Any]) -> None:
        line = json.dumps(event, sort_keys=True)
        with self._lock:
            self.events.append(dict(event))
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
            if self.stream is not None:
                self.stream.write(line + "\n")
                self.stream.flush()

    def windows(self) -> list[dict[str, Any]]:
        """The completed fault windows (the "end" events)."""
        with self._lock:
            return [e for e in self.events if e["event"] == "end"]


_DEFAULT_LOG = FaultLog()


def _resolve_host(ref: HostRef) -> str:
    return ref() if callable(ref) else ref


class Nemesis(ABC):
    """A reversible fault. Subclasses implement ``_apply`` (returning the resolved
    targets and details to log) and ``_heal``."""

    kind: ClassVar[str] = "nemesis"

    def __init__(self, *, log: FaultLog | None = None) -> None:
        self.log = log if log is not None else _DEFAULT_LOG
        self.active = False
        self.targets: tuple[str, ...] = ()
        self.detail: dict[str, Any] = {}
        self._id = 0
        self._start_wall = 0.0
        self._start_mono = 0.0
        self._lock = threading.Lock()

    @abstractmethod
    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]: ...

    @abstractmethod
    def _heal(self) -> None: ...

    def apply(self) -> None:
        with self._lock:
            if self.active:
                raise RuntimeError(f"{self.kind} is already applied (targets {self.targets})")
            self._id = self.log.next_id()
            wall, mono = time.time(), time.monotonic()
            try:
                targets, detail = self._apply()
            except BaseException as exc:
                self.log.write(self._event("error", wall, mono) | {"error": repr(exc)})
                raise
            self.targets, self.detail = tuple(targets), dict(detail)
            self._start_wall, self._start_mono = wall, mono
            self.active = True
            self.log.write(self._event("start", wall, mono))

    def heal(self) -> None:
        with self._lock:
            if not self.active:
                return
            self._heal()
            self.active = False
            event = self._event("end", time.time(), time.monotonic())
            event["start_wall"], event["start_mono"] = self._start_wall, self._start_mono
            event["end_wall"], event["end_mono"] = event.pop("wall"), event.pop("mono")
            self.log.write(event)

    def _event(self, name: str, wall: float, mono: float) -> dict[str, Any]:
        return {
            "event": name,
            "id": self._id,
            "kind": self.kind,
            "targets": list(self.targets),
            "detail": self.detail,
            "wall": wall,
            "mono": mono,
        }

    @contextlib.contextmanager
    def applied(self) -> Iterator[Nemesis]:
        """``with nemesis.applied(): ...`` applies, and heals on the way out."""
        self.apply()
        try:
            yield self
        finally:
            self.heal()

    def __repr__(self) -> str:
        state = f"active {list(self.targets)}" if self.active else "healed"
        return f"{type(self).__name__}({state})"


# --- topologies (pure) ----------------------------------------------------------------


def grudge_from_components(hosts: Sequence[str], components: Sequence[Collection[str]]) -> Grudge:
    """Each host drops every host outside its component; the hosts in no component form
    one more component together ("the rest"). Components must not overlap."""
    where: dict[str, int] = {}
    for i, comp in enumerate(components):
        for h in comp:
            if h not in hosts:
                raise ValueError(f"unknown host {h!r} in {components}")
            if h in where:
                raise ValueError(f"host {h!r} is in two components: {components}")
            where[h] = i
    for h in hosts:
        where.setdefault(h, len(components))
    return {h: frozenset(o for o in hosts if where[o] != where[h]) for h in hosts}


def grudge_from_views(hosts: Sequence[str], views: Mapping[str, Collection[str]]) -> Grudge:
    """Each host drops every host not in its view (views should be symmetric)."""
    return {h: frozenset(o for o in hosts if o != h and o not in views[h]) for h in hosts}


def split_halves(hosts: Sequence[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """A random (majority, minority) split: the minority has floor(n/2) hosts."""
    order = list(hosts)
    rng.shuffle(order)
    k = len(order) // 2
    return sorted(order[k:]), sorted(order[:k])


def bridge_views(order: Sequence[str]) -> dict[str, set[str]]:
    """Two halves that cannot see each other and one host in the middle that sees all
    (Jepsen's "bridge"): for a b c d e, {a b} and {d e} are cut, c sees everyone."""
    n = len(order)
    if n < 3:
        raise ValueError(f"bridge needs >= 3 hosts, got {n}")
    mid = n // 2
    left, bridge, right = list(order[:mid]), order[mid], list(order[mid + 1 :])
    views: dict[str, set[str]] = {h: {*left, bridge} for h in left}
    views.update({h: {*right, bridge} for h in right})
    views[bridge] = set(order)
    return views


def majorities_ring_views(order: Sequence[str]) -> dict[str, set[str]]:
    """Each host sees its ring neighbours, enough for a majority with itself, and no two
    hosts see the same set (Jepsen's "majorities ring"). For 5 hosts: i sees i-1, i+1."""
    n = len(order)
    if n < 4:
        raise ValueError(f"majorities-ring needs >= 4 hosts, got {n}")
    majority = n // 2 + 1
    reach = math.ceil((majority - 1) / 2)
    views: dict[str, set[str]] = {}
    for i, h in enumerate(order):
        views[h] = {order[(i + d) % n] for d in range(-reach, reach + 1)}
        assert len(views[h]) >= majority, (h, views[h])
    assert len({frozenset(v) for v in views.values()}) == n, views
    return views


# --- network nemeses ----------------------------------------------------------------


class _GrudgeNemesis(Nemesis):
    def __init__(self, cluster: Cluster, *, log: FaultLog | None = None) -> None:
        super().__init__(log=log)
        self.cluster = cluster
        self._token: int | None = None

    @abstractmethod
    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]: ...

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        grudge, targets, detail = self._grudge()
        token = self.cluster.new_token()
        try:
            self.cluster.add_drops(token, grudge)
        except BaseException:
            self.cluster.remove(token)
            raise
        self._token = token
        cut = {h: sorted(s) for h, s in grudge.items() if s}
        return targets, {**detail, "drops": cut}

    def _heal(self) -> None:
        assert self._token is not None
        self.cluster.remove(self._token)
        self._token = None


class Partition(_GrudgeNemesis):
    """Cut the cluster into components (explicit lists of host names or refs)."""

    kind = "partition"

    def __init__(
        self,
        cluster: Cluster,
        components: Sequence[Collection[HostRef]],
        *,
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(cluster, log=log)
        self.components = components

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        comps = [sorted(_resolve_host(r) for r in comp) for comp in self.components]
        grudge = grudge_from_components(self.cluster.names, comps)
        return grudge, [h for c in comps for h in c], {"components": comps}


class Isolate(_GrudgeNemesis):
    """Cut one host off from every other host (the runner still reaches it)."""

    kind = "isolate"

    def __init__(self, cluster: Cluster, host: HostRef, *, log: FaultLog | None = None) -> None:
        super().__init__(cluster, log=log)
        self.host = host

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        target = _resolve_host(self.host)
        self.cluster.host(target)
        return grudge_from_components(self.cluster.names, [[target]]), [target], {}


class MajorityMinority(_GrudgeNemesis):
    """Split into a majority and a minority: ``minority`` given, or random halves."""

    kind = "majority-minority"

    def __init__(
        self,
        cluster: Cluster,
        *,
        minority: Collection[HostRef] | None = None,
        rng: random.Random | None = None,
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(cluster, log=log)
        self.minority = minority
        self.rng = rng if rng is not None else random.Random()

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        names = self.cluster.names
        if self.minority is None:
            majority, minority = split_halves(names, self.rng)
        else:
            minority = sorted(_resolve_host(r) for r in self.minority)
            majority = [h for h in names if h not in minority]
        if not len(minority) < len(majority):
            raise ValueError(f"minority {minority} is not smaller than majority {majority}")
        grudge = grudge_from_components(names, [majority, minority])
        return grudge, minority, {"majority": majority, "minority": minority}


class _OrderedGrudgeNemesis(_GrudgeNemesis):
    """A topology over the hosts in an order: given, or drawn from ``rng``."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        order: Sequence[str] | None = None,
        rng: random.Random | None = None,
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(cluster, log=log)
        self.order = order
        self.rng = rng


class Bridge(_OrderedGrudgeNemesis):
    """Two halves that cannot see each other, bridged by one host that sees both."""

    kind = "bridge"

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        order = _order(self.cluster.names, self.order, self.rng)
        views = bridge_views(order)
        bridge = order[len(order) // 2]
        return grudge_from_views(order, views), order, {"bridge": bridge, "order": order}


class MajoritiesRing(_OrderedGrudgeNemesis):
    """Every host sees a majority, and no two hosts see the same majority."""

    kind = "majorities-ring"

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        order = _order(self.cluster.names, self.order, self.rng)
        views = majorities_ring_views(order)
        return grudge_from_views(order, views), order, {"ring": order}


def _order(
    names: Sequence[str], order: Sequence[str] | None, rng: random.Random | None
) -> list[str]:
    if order is not None:
        if sorted(order) != sorted(names):
            raise ValueError(f"order {list(order)} is not a permutation of {list(names)}")
        return list(order)
    out = list(names)
    if rng is not None:
        rng.shuffle(out)
    return out


class OneWay(_GrudgeNemesis):
    """``receiver`` stops receiving from ``senders`` (DROP on its INPUT hook); traffic
    the other way still arrives. TCP turns this into a two-way stall within an RTO."""

    kind = "one-way"

    def __init__(
        self,
        cluster: Cluster,
        receiver: HostRef,
        senders: Collection[HostRef],
        *,
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(cluster, log=log)
        self.receiver = receiver
        self.senders = senders

    def _grudge(self) -> tuple[Grudge, Sequence[str], Mapping[str, Any]]:
        receiver = _resolve_host(self.receiver)
        senders = sorted(_resolve_host(s) for s in self.senders)
        return (
            {receiver: frozenset(senders)},
            [receiver, *senders],
            {"receiver": receiver, "senders": senders},
        )


class Loss(Nemesis):
    """``host`` drops ``percent``% (random, per packet) of what it sends to other hosts
    (its OUTPUT hook, as netem would); its traffic to the runner is spared."""

    kind = "loss"

    def __init__(
        self, cluster: Cluster, host: HostRef, percent: float, *, log: FaultLog | None = None
    ) -> None:
        super().__init__(log=log)
        if not 0 <= percent <= 100:
            raise ValueError(f"percent={percent}: want 0..100")
        self.cluster = cluster
        self.host = host
        self.percent = percent
        self._token: int | None = None

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        target = _resolve_host(self.host)
        token = self.cluster.new_token()
        self.cluster.add_loss(token, target, self.percent)
        self._token = token
        return [target], {"percent": self.percent}

    def _heal(self) -> None:
        assert self._token is not None
        self.cluster.remove(self._token)
        self._token = None


class Delay(Nemesis):
    """Packets between hosts wait ``delay_ms`` in the hub (NFQUEUE plus the user-space
    :mod:`raftka.chaos.delay` process; no netem here).

    ``pairs`` lists (src, dst) directions to delay. ``Delay.between(c, a, b, ms)`` delays
    both directions (a round trip then takes >= 2*ms), ``Delay.hosts(c, hs, ms)`` delays
    everything the hosts ``hs`` send to the other hosts. The runner's traffic is never
    delayed. The kernel queue holds 4096 packets; when full, further packets are dropped."""

    kind = "delay"

    def __init__(
        self,
        cluster: Cluster,
        pairs: Collection[tuple[HostRef, HostRef]],
        delay_ms: float,
        *,
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(log=log)
        self.cluster = cluster
        self.pairs = pairs
        self.delay_ms = delay_ms
        self._token: int | None = None

    @classmethod
    def between(
        cls,
        cluster: Cluster,
        a: HostRef,
        b: HostRef,
        delay_ms: float,
        *,
        log: FaultLog | None = None,
    ) -> Delay:
        return cls(cluster, [(a, b), (b, a)], delay_ms, log=log)

    @classmethod
    def hosts(
        cls,
        cluster: Cluster,
        hosts: Collection[str],
        delay_ms: float,
        *,
        log: FaultLog | None = None,
    ) -> Delay:
        pairs = [(a, b) for a in hosts for b in cluster.names if a != b]
        return cls(cluster, pairs, delay_ms, log=log)

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        pairs = sorted({(_resolve_host(a), _resolve_host(b)) for a, b in self.pairs})
        token = self.cluster.new_token()
        self.cluster.add_delay(token, pairs, self.delay_ms)
        self._token = token
        targets = sorted({h for p in pairs for h in p})
        return targets, {"delay_ms": self.delay_ms, "pairs": [list(p) for p in pairs]}

    def _heal(self) -> None:
        assert self._token is not None
        self.cluster.remove(self._token)
        self._token = None


# --- process nemeses (no root needed) -------------------------------------------------


def _resolve_pid(ref: PidRef) -> int:
    value = ref() if callable(ref) else ref
    return value.pid if isinstance(value, subprocess.Popen) else value


def _wait_state(pid: int, want: Callable[[str], bool], what: str) -> None:
    deadline = time.monotonic() + SIGNAL_TIMEOUT_S
    while not want(process_state(pid)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} not {what} after {SIGNAL_TIMEOUT_S}s")
        time.sleep(0.002)  # polling /proc with a deadline


class Pause(Nemesis):
    """SIGSTOP a node process (apply), SIGCONT it (heal). A paused process still
    completes TCP handshakes from its listen backlog: liveness needs heartbeats."""

    kind = "pause"

    def __init__(self, target: PidRef, *, name: str = "", log: FaultLog | None = None) -> None:
        super().__init__(log=log)
        self.target = target
        self.name = name
        self._pid = 0

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        pid = _resolve_pid(self.target)
        os.kill(pid, signal.SIGSTOP)
        _wait_state(pid, lambda s: s in ("T", "t", "Z", ""), "stopped")
        self._pid = pid
        return [self.name or str(pid)], {"pid": pid}

    def _heal(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGCONT)
            _wait_state(self._pid, lambda s: s not in ("T", "t"), "resumed")


class Node:
    """A restartable node process: ``start`` makes a new one (e.g. ``cluster.spawn``)."""

    def __init__(self, name: str, start: Callable[[], subprocess.Popen[bytes]]) -> None:
        self.name = name
        self._start = start
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} still runs"
        self.proc = self._start()
        return self.proc

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} not started"
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


class Kill(Nemesis):
    """kill -9 a node process and reap it (apply); call ``restart`` (heal).

    ``target`` gives the Popen to kill (a child of the runner, so it is reaped: no
    zombie). ``restart`` is optional: without it heal only ends the window."""

    kind = "kill"

    def __init__(
        self,
        target: Callable[[], subprocess.Popen[bytes]] | subprocess.Popen[bytes],
        restart: Callable[[], object] | None = None,
        *,
        name: str = "",
        log: FaultLog | None = None,
    ) -> None:
        super().__init__(log=log)
        self.target = target
        self.restart = restart
        self.name = name

    @classmethod
    def node(cls, node: Node, *, log: FaultLog | None = None) -> Kill:
        def current() -> subprocess.Popen[bytes]:
            assert node.proc is not None, f"{node.name} not started"
            return node.proc

        return cls(current, node.start, name=node.name, log=log)

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        proc = self.target() if callable(self.target) else self.target
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        rc = proc.wait(timeout=SIGNAL_TIMEOUT_S)
        return [self.name or str(proc.pid)], {"pid": proc.pid, "returncode": rc}

    def _heal(self) -> None:
        if self.restart is None:
            return
        new = self.restart()
        if isinstance(new, subprocess.Popen):
            self.detail["restarted_pid"] = new.pid


# --- seeded schedules -------------------------------------------------------------------

KINDS: tuple[str, ...] = (
    "isolate",
    "majority-minority",
    "bridge",
    "majorities-ring",
    "one-way",
    "loss",
    "delay",
    "pause",
    "kill",
)
PROCESS_KINDS = frozenset({"pause", "kill"})


@dataclass(frozen=True)
class ScheduledFault:
    """One fault of a schedule: starts ``offset_s`` after the schedule starts."""

    offset_s: float
    kind: str
    targets: tuple[str, ...]
    duration_s: float
    params: tuple[tuple[str, float], ...] = ()

    def param(self, name: str) -> float:
        return dict(self.params)[name]


#: A scheduled fault's targets and params, as :func:`fault_timeline`'s ``pick`` gives them.
FaultChoice = tuple[tuple[str, ...], tuple[tuple[str, float], ...]]


def generate_schedule(
    seed: int,
    kinds: Sequence[str],
    duration_s: float,
    hosts: Sequence[str],
    *,
    gap_s: tuple[float, float] = (1.0, 5.0),
    fault_s: tuple[float, float] = (2.0, 10.0),
    loss_percent: tuple[float, float] = (10.0, 60.0),
    delay_ms: tuple[float, float] = (20.0, 200.0),
) -> list[ScheduledFault]:
    """The same faults for the same arguments, every time: one fault at a time, a gap of
    ``gap_s`` between them (healthy time), each lasting ``fault_s``, none past
    ``duration_s``. Print the seed with a failure so ``--seed`` replays it."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds {sorted(unknown) or '[]'}: want some of {KINDS}")
    if len(hosts) < 2:
        raise ValueError("need >= 2 hosts")
    names = list(hosts)

    def pick(kind: str, rng: random.Random) -> FaultChoice:
        if kind in ("isolate", "pause", "kill"):
            return (rng.choice(names),), ()
        if kind == "majority-minority":
            return tuple(split_halves(names, rng)[1]), ()
        if kind in ("bridge", "majorities-ring"):
            order = list(names)
            rng.shuffle(order)
            return tuple(order), ()
        if kind in ("one-way", "delay"):
            targets = tuple(rng.sample(names, 2))
            if kind == "delay":
                return targets, (("delay_ms", round(rng.uniform(*delay_ms), 1)),)
            return targets, ()
        assert kind == "loss", kind
        return (rng.choice(names),), (("percent", round(rng.uniform(*loss_percent), 1)),)

    return fault_timeline(seed, kinds, duration_s, pick, gap_s=gap_s, fault_s=fault_s)


def fault_timeline(
    seed: int,
    kinds: Sequence[str],
    duration_s: float,
    pick: Callable[[str, random.Random], FaultChoice],
    *,
    gap_s: tuple[float, float],
    fault_s: tuple[float, float],
) -> list[ScheduledFault]:
    """Faults one at a time from ``seed``: a gap of ``gap_s`` (healthy time) before
    each, each of a kind drawn from ``kinds`` lasting ``fault_s``, none past
    ``duration_s``; ``pick(kind, rng)`` draws the fault's targets and params."""
    rng = random.Random(seed)
    out: list[ScheduledFault] = []
    t = rng.uniform(*gap_s)
    while t + fault_s[0] <= duration_s:
        kind = kinds[rng.randrange(len(kinds))]
        length = min(rng.uniform(*fault_s), duration_s - t)
        targets, params = pick(kind, rng)
        out.append(ScheduledFault(round(t, 3), kind, targets, round(length, 3), params))
        t += length + rng.uniform(*gap_s)
    return out


def build_nemesis(
    fault: ScheduledFault,
    cluster: Cluster | None,
    *,
    nodes: Mapping[str, Node] | None = None,
    log: FaultLog | None = None,
) -> Nemesis:
    """The nemesis for one scheduled fault. Process kinds need ``nodes`` (host name ->
    :class:`Node`), network kinds need ``cluster``."""
    if fault.kind in PROCESS_KINDS:
        if nodes is None:
            raise ValueError(f"{fault.kind} needs nodes")
        node = nodes[fault.targets[0]]
        if fault.kind == "pause":
            return Pause(lambda: node.pid, name=node.name, log=log)
        return Kill.node(node, log=log)
    if cluster is None:
        raise ValueError(f"{fault.kind} needs a cluster")
    t = fault.targets
    if fault.kind == "isolate":
        return Isolate(cluster, t[0], log=log)
    if fault.kind == "majority-minority":
        return MajorityMinority(cluster, minority=t, log=log)
    if fault.kind == "bridge":
        return Bridge(cluster, order=t, log=log)
    if fault.kind == "majorities-ring":
        return MajoritiesRing(cluster, order=t, log=log)
    if fault.kind == "one-way":
        return OneWay(cluster, t[0], [t[1]], log=log)
    if fault.kind == "loss":
        return Loss(cluster, t[0], fault.param("percent"), log=log)
    if fault.kind == "delay":
        return Delay.between(cluster, t[0], t[1], fault.param("delay_ms"), log=log)
    raise ValueError(f"unknown kind {fault.kind!r}")


def run_schedule(
    schedule: Sequence[ScheduledFault],
    build: Callable[[ScheduledFault], Nemesis],
    *,
    stop: threading.Event | None = None,
) -> list[Nemesis]:
    """Play ``schedule`` in real time from now: apply each fault at its offset, heal it
    after its duration. Returns early (healed) when ``stop`` is set; always heals the
    current fault, also on errors."""
    stop = stop if stop is not None else threading.Event()
    start = time.monotonic()
    done: list[Nemesis] = []
    for fault in schedule:
        if stop.wait(max(0.0, start + fault.offset_s - time.monotonic())):
            break
        nemesis = build(fault)
        nemesis.apply()
        done.append(nemesis)
        try:
            stop.wait(max(0.0, start + fault.offset_s + fault.duration_s - time.monotonic()))
        finally:
            nemesis.heal()
    return done
