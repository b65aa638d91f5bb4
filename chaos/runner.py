"""One fault-suite run: cluster, workload, seeded faults, heal, final read, verdict.

Theory of operation::

    build ChaosCluster (netns hosts, or loopback for process faults only), start it
    workload.setup()                        topic created, leaders elected
    workload.run()   on a loop thread  ||   the seeded schedule on this thread:
                                            apply fault, hold, heal, gap, ...
    stop the clients; everything healed
    measure recovery: the quorum (an active controller), every partition's leader
    final read (queue) / final listing (metadata)
    report folder: history.jsonl, verdict.json, timeline.png, faults.jsonl, run.json
    (run.json and the summary carry the availability figures of
    raftka.chaos.availability: longest gap per partition, first ack after each fault)

The schedule is a pure function of (seed, nemesis names, duration, node names): the
same seed replays the same faults at the same offsets. Targets that only exist at run
time (the active controller, a partition's leader) are resolved when the fault starts
and logged. Fault windows go into the history (so the timeline shades them) and into
``faults.jsonl`` with their resolved targets.

Nemesis names (``--nemesis``): the generic ones of :data:`raftka.chaos.nemesis.KINDS`
on random nodes, plus targeted ones (:data:`TARGETED`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from raftka.chaos import nemesis as nm
from raftka.chaos.availability import Availability, availability
from raftka.chaos.checker import CheckResult
from raftka.chaos.group_workload import GroupConfig, GroupWorkload, group_of
from raftka.chaos.history import HistoryWriter, read_history
from raftka.chaos.nodes import ChaosCluster, Placement
from raftka.chaos.report import write_report, write_txn_report
from raftka.chaos.topics_checker import TopicsResult, check_topics
from raftka.chaos.txn_checker import TxnResult
from raftka.chaos.txn_workload import TxnConfig, TxnWorkload, transactional_ids
from raftka.chaos.workloads import MetadataWorkload, QueueConfig, QueueWorkload
from raftka.local.processes import http_json, wait_for

__all__ = [
    "NEMESES",
    "PROCESS_NEMESES",
    "RunResult",
    "ScheduledFault",
    "build",
    "plan_schedule",
    "run",
    "run_on",
]

ScheduledFault = nm.ScheduledFault

# Targeted nemeses, resolved when they start:
TARGETED: Final[Mapping[str, str]] = {
    "isolate-controller": "cut the active controller's host off from every other host",
    "isolate-leader": "cut the host of a queue partition's leader off",
    "split": "majority/minority: 2 controllers + 2 brokers against 1 + 1",
    "jepsen-2013": "cut both followers of a partition off until the ISR is the leader "
    "alone, then isolate the leader instead (Kafka 2013)",
    "pause-leader": "SIGSTOP a partition leader's process (a zombie), SIGCONT on heal",
    "kill-leader": "kill -9 a queue partition's leader, restart it on heal",
    "kill-controller": "kill -9 the active controller, restart it on heal",
    "kill-controllers": "kill -9 a majority of controllers (the active one first), "
    "restart them on heal",
    "kill-coordinator": "kill -9 the broker coordinating the workload's consumer group, "
    "restart it on heal",
    "isolate-coordinator": "cut the host of the consumer group's coordinator off",
    "kill-txn-coordinator": "kill -9 the transaction coordinator of the txn workload's "
    "first producer, restart it on heal",
    "kill-pipeline": "kill -9 the txn workload's consume-transform-produce process, "
    "restart it on heal",
}
NEMESES: Final = (*nm.KINDS, *TARGETED)
PROCESS_NEMESES: Final = frozenset(
    {
        "pause",
        "kill",
        "pause-leader",
        "kill-leader",
        "kill-controller",
        "kill-controllers",
        "kill-coordinator",
        "kill-txn-coordinator",
        "kill-pipeline",
    }
)
WORKLOADS: Final = ("queue", "metadata", "groups", "txn", "none")
LEADER_TOPIC: Final = "queue"
RESOLVE_TIMEOUT_S: Final = 5.0
ISR_SHRINK_TIMEOUT_S: Final = 10.0
RECOVERY_TIMEOUT_S: Final = 60.0
ISR_FULL_TIMEOUT_S: Final = 20.0
FINAL_READ_TIMEOUT_S: Final = 60.0
CLIENT_STOP_TIMEOUT_S: Final = 30.0


# --- the schedule (pure) ------------------------------------------------------------


def plan_schedule(
    seed: int,
    nemeses: Sequence[str],
    duration_s: float,
    nodes: Sequence[str],
    *,
    gap_s: tuple[float, float] = (2.0, 4.0),
    fault_s: tuple[float, float] = (6.0, 10.0),
) -> list[ScheduledFault]:
    """Faults one at a time, healthy gaps between, none past ``duration_s``. Targets are
    node names (c1.., b101..) or empty for targeted nemeses (resolved at run time).
    The same arguments give the same list."""
    unknown = [n for n in nemeses if n not in NEMESES]
    if unknown or not nemeses:
        raise ValueError(f"nemeses {unknown or '[]'}: want some of {', '.join(NEMESES)}")
    names = list(nodes)

    def pick(kind: str, rng: random.Random) -> nm.FaultChoice:
        if kind in ("isolate", "pause", "kill", "loss"):
            targets: tuple[str, ...] = (rng.choice(names),)
            if kind == "loss":
                return targets, (("percent", round(rng.uniform(20.0, 60.0), 1)),)
            return targets, ()
        if kind in ("one-way", "delay"):
            targets = tuple(rng.sample(names, 2))
            if kind == "delay":
                return targets, (("delay_ms", round(rng.uniform(20.0, 200.0), 1)),)
            return targets, ()
        if kind in ("majority-minority", "split"):
            controllers = [n for n in names if n.startswith("c")]
            brokers = [n for n in names if n.startswith("b")]
            return (rng.choice(controllers), rng.choice(brokers)), ()
        if kind in ("bridge", "majorities-ring"):
            order = list(names)
            rng.shuffle(order)
            return tuple(order), ()
        if kind in ("isolate-leader", "pause-leader", "kill-leader", "jepsen-2013"):
            return (), (("partition", float(rng.randrange(3))),)
        return (), ()

    return nm.fault_timeline(seed, nemeses, duration_s, pick, gap_s=gap_s, fault_s=fault_s)


# --- nemeses over a ChaosCluster ------------------------------------------------------


class Recorded(nm.Nemesis):
    """Wraps a nemesis so its window also goes into the history (for the timeline)."""

    def __init__(self, inner: nm.Nemesis, history: HistoryWriter, kind: str) -> None:
        super().__init__(log=nm.FaultLog())  # the inner nemesis logs to the real fault log
        self.inner = inner
        self.history = history
        self.kind_name = kind
        self._window = -1

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        self.inner.apply()
        self._window = self.history.fault_start(self.kind_name, self.inner.targets)
        return self.inner.targets, self.inner.detail

    def _heal(self) -> None:
        self.inner.heal()
        self.history.fault_end(self._window, self.kind_name, self.inner.targets)


class Several(nm.Nemesis):
    """Several nemeses as one fault: applied in order, healed in reverse."""

    kind = "several"

    def __init__(self, kind: str, parts: Sequence[nm.Nemesis], *, log: nm.FaultLog) -> None:
        super().__init__(log=log)
        self.name = kind
        self.parts = list(parts)

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        done: list[nm.Nemesis] = []
        try:
            for part in self.parts:
                part.apply()
                done.append(part)
        except BaseException:
            for part in reversed(done):
                part.heal()
            raise
        return [t for p in self.parts for t in p.targets], {}

    def _heal(self) -> None:
        for part in reversed(self.parts):
            part.heal()


class Jepsen2013(nm.Nemesis):
    """Kafka 2013: cut a partition's followers off (leader and controllers keep each
    other) until the ISR is the leader alone, then isolate the leader instead. With
    ``min.insync.replicas=2`` no write may be acknowledged by the leader alone, and with
    unclean election off no stale follower may take over."""

    kind = "jepsen-2013"

    def __init__(
        self, cluster: ChaosCluster, topic: str, partition: int, *, log: nm.FaultLog
    ) -> None:
        super().__init__(log=log)
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self._token: int | None = None

    def _apply(self) -> tuple[Sequence[str], Mapping[str, Any]]:
        c = self.cluster
        netns = c.netns
        assert netns is not None, "jepsen-2013 needs netns hosts"
        leader = _resolve_leader(c, self.topic, self.partition)
        leader_id = int(leader[1:])
        state = (c.partition_leaders(self.topic) or {}).get(self.partition)
        replicas = [b for b in c.broker_names if b != leader]
        followers = [c.host_of(b) for b in replicas]
        first = netns.new_token()
        netns.add_drops(first, nm.grudge_from_components(netns.names, [followers]))
        shrunk = True
        try:
            # The leader's own view: the cut-off followers' metadata is stale by design.
            wait_for(
                lambda: (
                    (c.partition_view(leader, self.topic) or {}).get(self.partition)
                    == (leader_id, [leader_id])
                ),
                timeout_s=ISR_SHRINK_TIMEOUT_S,
                message="ISR did not shrink to the leader",
            )
        except TimeoutError:
            shrunk = False
        second = netns.new_token()
        try:
            netns.add_drops(second, nm.grudge_from_components(netns.names, [[c.host_of(leader)]]))
        finally:
            netns.remove(first)
        self._token = second
        return [leader, *replicas], {
            "leader": leader,
            "before": list(state[1]) if state else None,
            "isr_shrunk_to_leader": shrunk,
        }

    def _heal(self) -> None:
        assert self._token is not None and self.cluster.netns is not None
        self.cluster.netns.remove(self._token)
        self._token = None


def _resolve_leader(cluster: ChaosCluster, topic: str, partition: int) -> str:
    try:
        return wait_for(
            lambda: cluster.leader_of(topic, partition),
            timeout_s=RESOLVE_TIMEOUT_S,
            message=f"no leader for {topic}-{partition}",
        )
    except TimeoutError:
        return cluster.broker_names[partition % len(cluster.broker_names)]


def _resolve_controller(cluster: ChaosCluster) -> str:
    try:
        return wait_for(
            cluster.active_controller, timeout_s=RESOLVE_TIMEOUT_S, message="no controller"
        )
    except TimeoutError:
        return cluster.controller_names[0]


def _coordinator_of(cluster: ChaosCluster, key: str, key_type: int = 0) -> str | None:
    """The broker coordinating ``key`` (a group, or with ``key_type`` 1 a
    transactional id), as a broker says (FindCoordinator)."""
    for name in cluster.broker_names:
        try:
            status, body = http_json(
                cluster.specs[name].address,
                "/v1/find-coordinator",
                method="POST",
                body={"key": key, "key_type": key_type},
                timeout_s=1.0,
            )
        except (OSError, TimeoutError, ValueError):
            continue
        if status == 200 and isinstance(body, dict) and body.get("error") is None:
            return cluster.broker_name(int(body["node_id"]))
    return None


def _resolve_coordinator(cluster: ChaosCluster, key: str, key_type: int = 0) -> str:
    try:
        return wait_for(
            lambda: _coordinator_of(cluster, key, key_type),
            timeout_s=RESOLVE_TIMEOUT_S,
            message=f"no coordinator for {key}",
        )
    except TimeoutError:
        return cluster.broker_names[0]


def build(
    fault: ScheduledFault,
    cluster: ChaosCluster,
    *,
    log: nm.FaultLog,
    topic: str = LEADER_TOPIC,
    pipeline: nm.Node | None = None,
) -> nm.Nemesis:
    """The nemesis for one scheduled fault on ``cluster``; ``pipeline`` is the txn
    workload's pipeline process (for kill-pipeline)."""
    c = cluster
    kind = fault.kind
    if kind in ("pause", "kill"):
        node = c.nodes[fault.targets[0]]
        if kind == "pause":
            return nm.Pause(lambda: node.pid, name=node.name, log=log)
        return nm.Kill.node(node, log=log)
    if kind == "pause-leader":
        partition = int(fault.param("partition"))

        def leader_pid() -> int:
            return c.pid(_resolve_leader(c, topic, partition))

        return nm.Pause(leader_pid, name=f"leader of {topic}-{partition}", log=log)
    if kind == "kill-leader":
        leader = _resolve_leader(c, topic, int(fault.param("partition")))
        return nm.Kill.node(c.nodes[leader], log=log)
    if kind == "kill-controller":
        return nm.Kill.node(c.nodes[_resolve_controller(c)], log=log)
    if kind == "kill-controllers":
        active = _resolve_controller(c)
        others = [n for n in c.controller_names if n != active]
        victims = [active, others[0]]
        return Several(kind, [nm.Kill.node(c.nodes[v], log=log) for v in victims], log=log)
    if kind == "kill-coordinator":
        return nm.Kill.node(c.nodes[_resolve_coordinator(c, group_of(topic))], log=log)
    if kind == "kill-txn-coordinator":
        txn_id = transactional_ids(topic, 1)[0]
        return nm.Kill.node(c.nodes[_resolve_coordinator(c, txn_id, key_type=1)], log=log)
    if kind == "kill-pipeline":
        if pipeline is None:
            raise ValueError("nemesis kill-pipeline needs the txn workload")
        return nm.Kill.node(pipeline, log=log)
    netns = c.netns
    if netns is None:
        raise ValueError(f"nemesis {kind} needs network-namespace hosts (root)")
    if kind == "isolate-controller":
        return nm.Isolate(netns, lambda: c.host_of(_resolve_controller(c)), log=log)
    if kind == "isolate-coordinator":
        return nm.Isolate(
            netns, lambda: c.host_of(_resolve_coordinator(c, group_of(topic))), log=log
        )
    if kind == "isolate-leader":
        partition = int(fault.param("partition"))
        return nm.Isolate(netns, lambda: c.host_of(_resolve_leader(c, topic, partition)), log=log)
    if kind == "jepsen-2013":
        return Jepsen2013(c, topic, int(fault.param("partition")), log=log)
    if kind in ("split", "majority-minority"):
        return nm.MajorityMinority(netns, minority=[c.host_of(t) for t in fault.targets], log=log)
    hosts = tuple(c.host_of(t) for t in fault.targets)
    as_hosts = ScheduledFault(fault.offset_s, kind, hosts, fault.duration_s, fault.params)
    return nm.build_nemesis(as_hosts, netns, log=log)


# --- one run ---------------------------------------------------------------------------


@dataclass
class RunResult:
    seed: int
    out_dir: Path
    schedule: list[ScheduledFault]
    verdict: CheckResult | None
    topics: TopicsResult | None
    recovery_s: dict[str, float | None] = field(default_factory=dict)
    final_read_ok: bool = True
    availability: Availability | None = None
    txn: TxnResult | None = None

    @property
    def valid(self) -> bool:
        ok = self.verdict is None or self.verdict.valid
        ok = ok and (self.topics is None or self.topics.valid)
        ok = ok and (self.txn is None or self.txn.valid)
        # A full ISR is informational: a slow catch-up is not an anomaly.
        return ok and all(self.recovery_s.get(k) is not None for k in ("quorum", "leaders"))

    def problems(self, *, recovery_bound_s: float, known: Sequence[str] = ()) -> list[str]:
        """What a scenario test asserts: no anomaly (lost and inconsistent-offset ones
        named first), a complete final read, and the quorum and every partition leader
        back within ``recovery_bound_s`` of the last heal. Empty when all hold.
        ``known`` names anomaly kinds a separate strict-xfail test pins as a known bug;
        they are left out here (never lost or inconsistent_offset)."""
        assert not {"lost", "inconsistent_offset"} & set(known), known
        out: list[str] = []
        if self.verdict is not None:
            counts = self.verdict.counts
            for kind in ("lost", "inconsistent_offset", "duplicate"):
                if counts.get(kind):
                    out.append(f"{counts[kind]} {kind}")
            if not self.verdict.complete:
                out.append("no complete final read")
            anomalies = self.verdict.anomalies
            others = [
                k for k in self.verdict.found() if k not in known and not anomalies[k].informational
            ]
            if others:
                out.append(f"checker found {others}: " + self.verdict.summary())
            if self.verdict.sends.acked == 0:
                out.append("no send was acknowledged: the workload did nothing")
        if self.topics is not None and not self.topics.valid:
            out.append(self.topics.summary())
        if self.txn is not None:
            if not self.txn.complete:
                out.append("no complete final read")
            if self.txn.found():
                out.append(f"checker found {self.txn.found()}: " + self.txn.summary())
            if self.txn.stats.committed == 0:
                s = self.txn.stats
                why = (
                    f" ({s.init_failures} init_transactions attempts failed, the last with "
                    f"{s.last_init_error})"
                    if s.init_failures
                    else ""
                )
                out.append(f"no transaction committed: the workload did nothing{why}")
        for name in ("quorum", "leaders"):
            took = self.recovery_s.get(name)
            if took is None or took > recovery_bound_s:
                out.append(f"{name} not back within {recovery_bound_s} s (took {took})")
        return out

    def summary(self) -> str:
        lines = [f"seed {self.seed}: {'valid' if self.valid else 'INVALID'}"]
        if self.verdict is not None:
            lines.append(self.verdict.summary())
        if self.topics is not None:
            lines.append(self.topics.summary())
        if self.txn is not None:
            lines.append(self.txn.summary())
        rec = ", ".join(
            f"{k} {'never' if v is None else f'{v:.2f} s'}" for k, v in self.recovery_s.items()
        )
        lines.append(f"recovery after the last heal: {rec}")
        if self.availability is not None:
            lines += self.availability.summary_lines()
        lines.append(f"report: {self.out_dir}")
        return "\n".join(lines)


def measure_recovery(
    cluster: ChaosCluster, topics: Sequence[str], timeout_s: float
) -> dict[str, float | None]:
    """Seconds from now until (1) an active controller answers and every controller is
    healthy again, (2) every partition of ``topics`` has a leader all brokers agree on,
    (3) every ISR is full (all replicas); None for a condition not met in ``timeout_s``."""
    start = time.monotonic()
    out: dict[str, float | None] = {}

    def quorum() -> bool:
        if cluster.active_controller() is None:
            return False
        return all(_healthy(cluster.specs[n].address) for n in cluster.controller_names)

    def leaders(full: bool) -> bool:
        for topic in topics:
            state = cluster.partition_leaders(topic)
            if not state:
                return False
            for leader, isr in state.values():
                if leader < 0 or (full and len(isr) < len(cluster.broker_names)):
                    return False
        return True

    for name, cond in (
        ("quorum", quorum),
        ("leaders", lambda: leaders(False)),
        ("isr_full", lambda: leaders(True)),
    ):
        remaining = timeout_s - (time.monotonic() - start)
        if name == "isr_full":  # informational: bounded apart so a slow one costs less
            remaining = min(remaining, ISR_FULL_TIMEOUT_S)
        try:
            wait_for(cond, timeout_s=max(remaining, 0.1), message=name)
            out[name] = round(time.monotonic() - start, 3)
        except TimeoutError:
            out[name] = None
    return out


def _healthy(address: str) -> bool:
    try:
        status, _ = http_json(address, "/health", timeout_s=1.0)
    except (OSError, TimeoutError, ValueError):
        return False
    return status == 200


def run_on(
    cluster: ChaosCluster,
    *,
    nemeses: Sequence[str],
    duration_s: float,
    seed: int,
    out_dir: Path,
    workload: str = "queue",
    schedule: Sequence[ScheduledFault] | None = None,
    topic: str = LEADER_TOPIC,
    recovery_timeout_s: float = RECOVERY_TIMEOUT_S,
    txn_config: TxnConfig | None = None,
) -> RunResult:
    """Run one test against a started cluster (see the module doc); ``schedule``
    overrides the seeded plan (scenario tests use fixed ones); ``txn_config`` the txn
    workload's settings (its topic is ``topic``)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r}: want one of {WORKLOADS}")
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = (
        list(schedule)
        if schedule is not None
        else plan_schedule(seed, nemeses, duration_s, list(cluster.nodes))
    )
    (out_dir / "schedule.json").write_bytes(
        orjson.dumps([_fault_json(f) for f in plan], option=orjson.OPT_INDENT_2)
    )
    fault_log = nm.FaultLog(out_dir / "faults.jsonl")
    history_path = out_dir / "history.jsonl"
    rng = random.Random(seed)
    with HistoryWriter.open(history_path) as history:
        queue: QueueWorkload | TxnWorkload | None = None
        meta: MetadataWorkload | None = None
        txn: TxnWorkload | None = None
        if workload == "txn":
            queue = txn = TxnWorkload(
                history=history,
                bootstrap_servers=cluster.bootstrap_servers,
                bootstrap_controllers=cluster.bootstrap_controllers,
                rng=rng,
                log_dir=out_dir,
                config=dataclasses.replace(txn_config or TxnConfig(), topic=topic),
            )
        elif workload == "queue":
            queue = QueueWorkload(
                history=history,
                bootstrap_servers=cluster.bootstrap_servers,
                bootstrap_controllers=cluster.bootstrap_controllers,
                config=QueueConfig(topic=topic),
            )
        elif workload == "groups":
            queue = GroupWorkload(
                history=history,
                bootstrap_servers=cluster.bootstrap_servers,
                bootstrap_controllers=cluster.bootstrap_controllers,
                # the churn falls mid-run, inside or between the faults
                config=GroupConfig(topic=topic, churn_after_s=duration_s / 2),
            )
        elif workload == "metadata":
            meta = MetadataWorkload(
                history=history,
                bootstrap_servers=cluster.bootstrap_servers,
                bootstrap_controllers=cluster.bootstrap_controllers,
                rng=rng,
            )
        active = queue or meta
        if queue is not None:
            asyncio.run(queue.setup())
            wait_for(
                lambda: _leaders_ready(cluster, topic),
                timeout_s=recovery_timeout_s,
                message=f"{topic}: no leader for every partition",
            )
        stop = threading.Event()
        errors: list[BaseException] = []

        def clients() -> None:
            try:
                if active is not None:
                    asyncio.run(active.run(stop))
            except BaseException as exc:  # reported after the faults heal
                errors.append(exc)

        thread = threading.Thread(target=clients, name="chaos-clients", daemon=True)
        pipeline = txn.pipeline if txn is not None else None
        try:
            thread.start()
            try:
                nm.run_schedule(
                    plan,
                    lambda f: Recorded(
                        build(f, cluster, log=fault_log, topic=topic, pipeline=pipeline),
                        history,
                        f.kind,
                    ),
                )
            finally:
                stop.set()
                thread.join(CLIENT_STOP_TIMEOUT_S)
            if thread.is_alive():
                raise RuntimeError("workload clients did not stop in time")
            if errors:
                raise RuntimeError(f"workload failed: {errors[0]!r}") from errors[0]
            topics = [topic] if queue is not None else []
            if txn is not None:
                topics += [txn.input_topic, txn.output_topic]
            recovery = measure_recovery(cluster, topics, recovery_timeout_s)
            final_ok = True
            if queue is not None:
                final_ok = asyncio.run(queue.final_read(FINAL_READ_TIMEOUT_S))
        finally:
            if txn is not None:
                txn.close()
        if meta is not None:
            final_ok = asyncio.run(
                meta.final_list(lambda: _broker_topics(cluster), FINAL_READ_TIMEOUT_S)
            )
    title = f"{workload} / {','.join(nemeses) or 'fixed schedule'} / seed {seed}"
    txn_result: TxnResult | None = None
    verdict: CheckResult | None = None
    if txn is not None:
        txn_result = write_txn_report(history_path, out_dir, title=title, topic=topic)
    else:
        verdict = write_report(history_path, out_dir, title=title)
    history_read = read_history(history_path)
    topics_result = check_topics(history_read) if meta is not None else None
    plain_queue = queue is not None and txn is None
    avail = availability(history_read) if plain_queue else None
    result = RunResult(
        seed=seed,
        out_dir=out_dir,
        schedule=plan,
        verdict=verdict if plain_queue else None,
        topics=topics_result,
        recovery_s=recovery,
        final_read_ok=final_ok,
        availability=avail,
        txn=txn_result,
    )
    run_json: dict[str, Any] = {
        "seed": seed,
        "workload": workload,
        "nemeses": list(nemeses),
        "duration_s": duration_s,
        "placement": cluster.placement,
        "valid": result.valid,
        "recovery_s": recovery,
        "schedule": [_fault_json(f) for f in plan],
        "faults": fault_log.windows(),
    }
    if topics_result is not None:
        run_json["topics"] = topics_result.to_json()
    if avail is not None:
        run_json["availability"] = avail.to_json()
    if txn_result is not None:
        run_json["txn"] = txn_result.to_json()
    (out_dir / "run.json").write_bytes(orjson.dumps(run_json, option=orjson.OPT_INDENT_2))
    return result


def _leaders_ready(cluster: ChaosCluster, topic: str) -> bool:
    state = cluster.partition_leaders(topic)
    return state is not None and bool(state) and all(p >= 0 for p, _ in state.values())


def _broker_topics(cluster: ChaosCluster) -> list[set[str] | None]:
    out: list[set[str] | None] = []
    for name in cluster.broker_names:
        md = cluster._get(name, "/v1/metadata")
        out.append(None if md is None else {str(t["name"]) for t in md.get("topics", [])})
    return out


def _fault_json(f: ScheduledFault) -> dict[str, Any]:
    return {
        "offset_s": f.offset_s,
        "kind": f.kind,
        "targets": list(f.targets),
        "duration_s": f.duration_s,
        "params": dict(f.params),
    }


def placement_for(nemeses: Sequence[str], *, root: bool) -> tuple[Placement | None, str]:
    """netns with root; loopback without root when every nemesis is a process fault;
    otherwise (None, the reason)."""
    if root:
        return "netns", ""
    network = [n for n in nemeses if n not in PROCESS_NEMESES]
    if network:
        return None, (
            f"nemeses {', '.join(network)} need network namespaces, which need root; "
            f"process faults ({', '.join(sorted(PROCESS_NEMESES))}) run without root"
        )
    return "loopback", ""


def run(
    *,
    nemeses: Sequence[str],
    duration_s: float,
    seed: int,
    out_dir: Path,
    workload: str = "queue",
    placement: Placement,
    on_started: Callable[[ChaosCluster], None] | None = None,
) -> RunResult:
    """Build and start a cluster, :func:`run_on` it, tear it down."""
    with ChaosCluster.create(out_dir / "nodes", placement=placement, prefix="rkrun") as cluster:
        cluster.start()
        if on_started is not None:
            on_started(cluster)
        return run_on(
            cluster,
            nemeses=nemeses,
            duration_s=duration_s,
            seed=seed,
            out_dir=out_dir,
            workload=workload,
        )
