"""Fail-over times (issue #19, 4): N faults of each kind against a fault-suite cluster
with ``raftka up``'s timeouts, the time from each fault's start to the first
acknowledged write after it; after a controller fault, the time to the first committed
metadata change; after a leader fault, where the time went.

    sudo .venv/bin/python bench/failover_bench.py [--faults N] [--kinds K,K..]
        [--fault-s S] [--lead-in-s S] [--out DIR]
        [--controller KEY=VALUE ...] [--broker KEY=VALUE ...]

Needs root: the cluster is raftka.chaos's (3 controllers and 3 brokers, each on its own
network-namespace host), with the timeouts ``raftka up`` gives its nodes overlaid on
the suite's shorter ones (``UP_DEFAULTS_CONTROLLER`` / ``UP_DEFAULTS_BROKER``: broker
session 3 s, replica lag 3 s, request timeout 10 s, quorum timeouts of raftka.local);
``--controller`` / ``--broker`` put settings over those (a faster profile; a node
refuses a key it does not know, by name). Kinds (``raftka chaos run`` nemeses):
``kill-leader`` (kill -9 of a queue partition's leader), ``isolate-leader`` (its host
cut off), ``kill-controller`` (kill -9 of the active controller), ``isolate-controller``
(its host cut off); the partition rotates over 0, 1, 2.

Each fault is its own ``raftka.chaos.runner.run_on`` on a fresh topic (RF 3,
``min.insync.replicas=2``, the queue workload's acks=all idempotent producers): a
healthy lead-in, the fault for ``--fault-s``, heal, recovery (the killed node restarted,
every ISR full again, so the next fault starts from a whole cluster), final read and
check. The report folders stay under ``--out``; ``raftka chaos summarize OUT`` prints
the same table again. The figure per fault is "every partition": seconds until each of
the topic's three partitions had acknowledged a write after the fault started (for a
leader fault, the affected partition's time; for a controller fault, whether producing
stopped anywhere). A run whose checker finds an anomaly is reported and counted.

Beside it, per fault (in the JSON line and ``summary.json``):

- controller faults: ``metadata_commit_s``, seconds from the fault's start to the first
  metadata change committed after it (:mod:`raftka.chaos.metadata_probe`: every
  controller is asked ten times a second to alter a probe topic's config; the attempts
  are in the run's ``metadata_probe.jsonl``) and ``brokers_see_s``, per broker, when it
  applied such a change;
- leader faults: ``breakdown`` (:mod:`raftka.chaos.breakdown`): when the controller
  fenced the leader, when a broker became the partition's new leader, the first ack,
  and the producers' retries in between (their debug lines are in ``client.jsonl``).

Prints one JSON line per fault and the machine (cores, load) first, the distributions
last; writes ``summary.json`` under ``--out``. The machine is shared: the figures are
dominated by the timeouts, but a loaded machine stretches the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from raftka.chaos.availability import (
    FENCED_MESSAGE,
    Distribution,
    describe_summary,
    read_runs,
    summarize_runs,
)
from raftka.chaos.breakdown import (
    BECAME_ACTIVE,
    BECAME_LEADER,
    CONFIG_APPLIED,
    LEADER_CHANGED,
    ClientLog,
    LogOffsets,
    brokers_see_after,
    controller_breakdown,
    leader_breakdown,
)
from raftka.chaos.metadata_probe import MetadataProbe, first_commit_after, read_attempts
from raftka.chaos.nodes import ChaosCluster
from raftka.chaos.runner import ScheduledFault, run_on
from raftka.client import Admin, NewTopic
from raftka.local import LOCAL_QUORUM_PROPERTIES
from raftka.local.brokers import LOCAL_BROKER_PROPERTIES
from raftka.local.up import UP_LOCAL_PROPERTIES

KINDS = ("kill-leader", "isolate-leader", "kill-controller", "isolate-controller")
LEADER_KINDS = frozenset({"kill-leader", "isolate-leader"})
PARTITIONS = 3  # the queue workload's
# raftka up's node settings (raftka.local.up: LocalCluster and LocalBrokers with
# UP_LOCAL_PROPERTIES) over the fault suite's shorter session, lag and request timeouts.
UP_DEFAULTS_CONTROLLER = {**LOCAL_QUORUM_PROPERTIES, **UP_LOCAL_PROPERTIES}
UP_DEFAULTS_BROKER = {**LOCAL_BROKER_PROPERTIES, **UP_LOCAL_PROPERTIES}
HEALTHY_TIMEOUT_S = 60.0
PROBE_TOPIC = "fo-metadata-probe"


def one_fault(
    cluster: ChaosCluster,
    kind: str,
    index: int,
    out: Path,
    *,
    fault_s: float,
    lead_in_s: float,
    probe_topic: str,
) -> dict[str, Any]:
    params = (("partition", float(index % PARTITIONS)),) if kind in LEADER_KINDS else ()
    fault = ScheduledFault(lead_in_s, kind, (), fault_s, params)
    cluster.wait_healthy(HEALTHY_TIMEOUT_S)
    folder = out / f"{kind}-{index:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    topic = f"fo-{kind}-{index}"
    offsets = LogOffsets(
        {name: cluster.specs[name].data_dir / "process.log" for name in cluster.nodes}
    )
    client_log = folder / "client.jsonl"
    started = time.monotonic()
    with client_log.open("wb") as stream, _client_debug(stream), contextlib.ExitStack() as stack:
        if kind not in LEADER_KINDS:
            # controller faults: is metadata committed again, and how soon?
            stack.enter_context(
                MetadataProbe(
                    cluster.bootstrap_controllers, probe_topic, folder / "metadata_probe.jsonl"
                )
            )
        result = run_on(
            cluster,
            nemeses=[kind],
            duration_s=lead_in_s + fault_s,
            seed=index,
            out_dir=folder,
            schedule=[fault],
            topic=topic,
        )
    assert result.availability is not None, "the queue workload always reports availability"
    (figures,) = result.availability.faults
    start_wall = _fault_start_wall(folder / "history.jsonl")
    row: dict[str, Any] = {
        "kind": kind,
        "index": index,
        "valid": result.valid,
        "targets": list(figures.fault.targets),
        "all_partitions_s": figures.all_partitions_s,
        "first_ack_s": dict(figures.first_ack_s),
        "recovery_s": result.recovery_s,
        "wall_s": round(time.monotonic() - started, 1),
        "report": str(folder),
    }
    events = offsets.events([FENCED_MESSAGE, BECAME_LEADER, LEADER_CHANGED, BECAME_ACTIVE])
    # Every fencing in the run (seconds from the fault's start): a leader fault should
    # fence its leader once; anything else is a broker fenced by a late heartbeat.
    row["fences"] = [
        {"brokers": e.fields.get("brokers"), "at_s": round(e.wall - start_wall, 3)}
        for e in events
        if e.message == FENCED_MESSAGE
    ]
    if kind in LEADER_KINDS:
        partition = index % PARTITIONS
        (target,) = figures.fault.targets
        row["breakdown"] = leader_breakdown(
            events,
            start=start_wall,
            topic=topic,
            partition=partition,
            leader_id=_node_id(cluster, target),
            first_ack_s=figures.first_ack_s.get(partition),
            retries=ClientLog.retries(client_log, topic, partition),
        )
    else:
        attempts = read_attempts(folder / "metadata_probe.jsonl")
        row["metadata_commit_s"] = first_commit_after(start_wall, attempts)
        (target,) = figures.fault.targets
        row["breakdown"] = controller_breakdown(
            events, start=start_wall, old=_node_name(cluster, target)
        )
        # does every broker see metadata committed after the fault, and when?
        row["brokers_see_s"] = brokers_see_after(
            offsets.events([CONFIG_APPLIED]),
            start=start_wall,
            topic=probe_topic,
            brokers=cluster.broker_names,
        )
        row["metadata_commits_before"] = sum(1 for a in attempts if a.ok and a.done < start_wall)
    return row


def _node_name(cluster: ChaosCluster, target: str) -> str:
    """The node a fault's target names: a node name (kill) or its host (isolate)."""
    for name, spec in cluster.specs.items():
        if target in (name, spec.host):
            return name
    raise ValueError(f"fault target {target!r} is no node and no node's host")


def _node_id(cluster: ChaosCluster, target: str) -> int:
    return cluster.specs[_node_name(cluster, target)].node_id


def _fault_start_wall(history: Path) -> float:
    """The wall time the run's (only) fault window started, from its history."""
    for line in history.read_bytes().splitlines():
        event = orjson.loads(line)
        if event.get("type") == "nemesis" and event.get("f") == "start":
            return float(event["wall_time"])
    raise RuntimeError(f"{history}: no fault started")


@contextlib.contextmanager
def _client_debug(stream: IO[bytes]) -> Iterator[None]:
    """The workload producers' debug lines (their retries) into ``stream`` while
    inside (not the consumers': they log every failed fetch, thousands a fault)."""
    logger = logging.getLogger("raftka.client.producer")
    handler = ClientLog(stream)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _create_probe_topic(cluster: ChaosCluster) -> str:
    """The topic whose config the metadata probe alters (1 partition, RF 3)."""
    admin = Admin(
        bootstrap_servers=cluster.bootstrap_servers,
        bootstrap_controllers=cluster.bootstrap_controllers,
    )
    with admin:
        admin.create_topics([NewTopic(PROBE_TOPIC, 1, 3)], timeout_ms=30_000)
    return PROBE_TOPIC


def _figures(rows: list[dict[str, Any]]) -> list[str]:
    """Metadata commit time per controller fault kind and the leader faults' steps."""
    lines: list[str] = []
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind and "error" not in r]
        if not mine:
            continue
        if kind in LEADER_KINDS:
            for step in ("fenced_s", "new_leader_s", "client_s", "first_ack_s"):
                values = [r["breakdown"][step] for r in mine]
                lines.append(f"{kind} {step}: {Distribution.of(values).describe()}")
        else:
            for step in ("leader_lost_s", "elected_s", "active_s"):
                values = [r["breakdown"][step] for r in mine]
                lines.append(f"{kind} {step}: {Distribution.of(values).describe()}")
            values = [r["metadata_commit_s"] for r in mine]
            lines.append(f"{kind} metadata commits again: {Distribution.of(values).describe()}")
            seen = [v for r in mine for v in r["brokers_see_s"].values()]
            lines.append(f"{kind} each broker applies it: {Distribution.of(seen).describe()}")
    return lines


def _settings(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments as a dict; ValueError names one without ``=``. The nodes
    refuse a key they do not know at start, by name."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r}: want KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", type=int, default=5, help="Faults per kind.")
    ap.add_argument("--kinds", default=",".join(KINDS), help="Comma list of " + ", ".join(KINDS))
    ap.add_argument("--fault-s", type=float, default=8.0, help="How long each fault lasts.")
    ap.add_argument("--lead-in-s", type=float, default=3.0, help="Healthy load before it.")
    ap.add_argument("--out", type=Path, help="Report folders (default: a new temp folder).")
    ap.add_argument(
        "--controller",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A controller setting over raftka up's (repeatable): a faster profile.",
    )
    ap.add_argument(
        "--broker",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A broker setting over raftka up's (repeatable).",
    )
    args = ap.parse_args()
    try:
        controller = {**UP_DEFAULTS_CONTROLLER, **_settings(args.controller)}
        broker = {**UP_DEFAULTS_BROKER, **_settings(args.broker)}
    except ValueError as exc:
        ap.error(str(exc))
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds or args.faults < 1:
        ap.error(f"--kinds: want some of {', '.join(KINDS)}; --faults at least 1")
    if os.geteuid() != 0:
        ap.error("needs root: the cluster's hosts are network namespaces")
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="raftka-failover-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    machine = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "load": os.getloadavg(),
        "out": str(out),
    }
    print(json.dumps(machine), flush=True)
    rows: list[dict[str, Any]] = []
    with ChaosCluster.create(
        out / "nodes",
        placement="netns",
        prefix=f"rkfo{os.getpid() % 1000:03d}",
        extra_controller=controller,
        extra_broker=broker,
    ) as cluster:
        cluster.start()
        probe_topic = _create_probe_topic(cluster)
        for kind in kinds:
            for index in range(args.faults):
                try:
                    row = one_fault(
                        cluster,
                        kind,
                        index,
                        out,
                        fault_s=args.fault_s,
                        lead_in_s=args.lead_in_s,
                        probe_topic=probe_topic,
                    )
                except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
                    # one broken run (clients stuck, cluster not healthy in time) is
                    # reported; the campaign goes on with the next fault
                    row = {"kind": kind, "index": index, "valid": False, "error": repr(exc)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = summarize_runs(read_runs([out]))
    lines = describe_summary(summary) + _figures(rows)
    print("\n".join(lines))
    invalid = [r.get("report", r.get("error")) for r in rows if not r["valid"]]
    if invalid:
        print(f"runs with an anomaly or no recovery: {invalid}")
    (out / "summary.json").write_text(
        json.dumps(
            {
                "machine": {**machine, "load_after": os.getloadavg()},
                "settings": {
                    "faults_per_kind": args.faults,
                    "fault_s": args.fault_s,
                    "lead_in_s": args.lead_in_s,
                    "controller": controller,
                    "broker": broker,
                },
                "faults": rows,
                "summary": lines,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
