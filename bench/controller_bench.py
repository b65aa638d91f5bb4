"""Controller-quorum benchmarks against real local clusters (benchmarks, not timed tests).

    python bench/controller_bench.py MODE [--engine native|pysyncobj] [--rounds N]
        [--repeats N] [--dir DIR] [--prop KEY=VALUE ...]

Modes (each starts its own 3-controller ``LocalCluster``: three OS processes on
loopback with the local-cluster quorum defaults unless ``--prop`` overrides them):

- ``latency``: commit latency of create-topic commands (p50/p99) and throughput, one
  client sending sequentially and ``--clients`` concurrent clients, each over a kept-
  alive HTTP connection to the active controller; the quorum epoch is read before and
  after, so any election during this steady phase is counted.
- ``failover``: ``--rounds`` times: create a topic, kill -9 the active controller, time
  from the kill until a create-topics commits through the new active controller (the
  survivors' /health is polled to find it; NOT_CONTROLLER redirects are followed),
  restart the killed one and check that every topic created so far is on all three.
- ``idle``: no load for ``--seconds``; counts elections (epoch increase) and leader
  changes seen by polling /health.
- ``big-topic``: three fake brokers register and keep heartbeating; one topic with
  ``--partitions`` partitions (RF 3) is created and timed until each of three observer
  processes has it in its image. There are no real brokers yet: each observer follows
  GET /v1/metadata of the active controller (long poll) and replays every payload with
  ``MetadataDelta``, as a broker will.
- ``snapshot``: an image of ``--partitions`` partitions built from real records:
  snapshot size (``MetadataImage.to_records`` + ``encode_records``), encode time, and
  ``decode_records`` + ``image_from_records`` time; then the same metadata created
  through the API on a cluster with a small snapshot interval, and the time for a
  kill -9'd controller to restart and load it (process start to /health reporting the
  pre-kill metadata offset).

Every mode prints one JSON line per result, then a table. Figures are medians of
``--repeats`` runs unless a mode says otherwise. The machine is shared: figures are
orders of size, and the machine line (CPU model, cores, load average) is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import platform
import re
import shutil
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from _report import print_results

from raftka.local import LOCAL_QUORUM_PROPERTIES, LocalCluster, NodeProcess, wait_for
from raftka.local.metadata_pages import replay_metadata_page
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import (
    ConfigRecord,
    Endpoint,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_records,
    encode_records,
)

HEALTH_POLL_TIMEOUT_S = 0.25
WRITE_TIMEOUT_S = 5.0
FAILOVER_GIVE_UP_S = 30.0
PAGES_MAX = 100_000
SESSION_TIMEOUT_MS = "600000"  # fake brokers stay unfenced unless a mode heartbeats
PYSYNCOBJ_PASSWORD = "bench-secret"
SNAPSHOT_NAME = re.compile(r"^\d{20}-\d{10}\.checkpoint$|\.dump")  # native | pysyncobj


# ---------------------------------------------------------------------------------------
# HTTP


class Conn:
    """One kept-alive HTTP connection to a controller (reopened after any error)."""

    def __init__(self, address: str, timeout_s: float = WRITE_TIMEOUT_S) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self._host, self._port, self._timeout_s = host, int(port), timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self._conn.request(method, path, body=data, headers=headers)
            response = self._conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise OSError(f"{self.address}: {e!r}") from e
        try:
            return response.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return response.status, {"error": "UNKNOWN_SERVER_ERROR", "message": raw[:200]}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def once(
    address: str, method: str, path: str, body: object = None, timeout_s: float = 5.0
) -> tuple[int, Any]:
    conn = Conn(address, timeout_s)
    try:
        return conn.request(method, path, body)
    finally:
        conn.close()


def write(cluster: LocalCluster, path: str, body: object, *, deadline_s: float = 30.0) -> Any:
    """A client's write: any live controller, follow NOT_CONTROLLER, retry until 200."""
    live = [n for n in cluster.controllers.values() if n.running and not n.paused]
    target: list[str | None] = [None]
    turn = [0]
    last: list[object] = [None]

    def attempt() -> Any:
        address = target[0] or live[turn[0] % len(live)].address
        turn[0] += 1
        try:
            status, answer = once(address, "POST", path, body, WRITE_TIMEOUT_S)
        except OSError as e:
            last[0], target[0] = e, None
            return None
        if status == 200:
            return answer
        last[0] = answer
        target[0] = answer.get("leader_address") if isinstance(answer, dict) else None
        return None

    return wait_for(attempt, timeout_s=deadline_s, message=lambda: f"{path}: {last[0]}")


def topic_ok(answer: Any) -> bool:
    error = answer["topics"][0]["error"]
    return error is None or error["error"] == "TOPIC_ALREADY_EXISTS"


def read_image(address: str) -> MetadataImage:
    """One controller's committed metadata (GET /v1/metadata from 0) as an image."""
    conn = Conn(address, 30.0)
    try:
        image, offset = MetadataImage.EMPTY, 0
        for _ in range(PAGES_MAX):
            status, page = conn.request("GET", f"/v1/metadata?offset={offset}&records_max=1000")
            assert status == 200, page
            image = replay_metadata_page(image, page)
            if page["next_offset"] >= page["high_watermark"] or page["next_offset"] == offset:
                return image
            offset = page["next_offset"]
        raise AssertionError("metadata log did not end")
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------
# Clusters and fake brokers


def quorum_properties(engine: str, overrides: dict[str, str]) -> dict[str, str]:
    props = {"broker.session.timeout.ms": SESSION_TIMEOUT_MS, **overrides}
    if engine == "pysyncobj":
        props.setdefault("quorum.pysyncobj.password", PYSYNCOBJ_PASSWORD)
    return props


@contextlib.contextmanager
def cluster_for(args: argparse.Namespace, name: str, **extra: str) -> Iterator[LocalCluster]:
    data = Path(tempfile.mkdtemp(prefix=f"ctl-bench-{name}-", dir=args.dir))
    try:
        props = quorum_properties(args.engine, {**extra, **args.props})  # --prop wins
        with LocalCluster(data, controllers=3, engine=args.engine, extra_properties=props) as c:
            c.start()
            c.wait_leader()
            yield c
    finally:
        shutil.rmtree(data, ignore_errors=True)


def register_brokers(cluster: LocalCluster, ids: tuple[int, ...]) -> dict[int, int]:
    epochs: dict[int, int] = {}
    for broker_id in ids:
        body = {
            "broker_id": broker_id,
            "incarnation_id": str(uuid.uuid4()),
            "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + broker_id}],
        }
        epochs[broker_id] = write(cluster, "/v1/brokers/register", body)["broker_epoch"]
    for broker_id, epoch in epochs.items():
        heartbeat(cluster, broker_id, epoch)
    return epochs


def heartbeat(cluster: LocalCluster, broker_id: int, epoch: int) -> None:
    body = {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": epoch}
    write(cluster, "/v1/brokers/heartbeat", body, deadline_s=5.0)


class Heartbeats:
    """Fake brokers' heartbeat loop (a periodic duty on a thread)."""

    def __init__(self, cluster: LocalCluster, epochs: dict[int, int], interval_s: float = 0.5):
        self.stop = threading.Event()
        self.misses = 0

        def run() -> None:
            while not self.stop.wait(interval_s):
                for broker_id, epoch in epochs.items():
                    try:
                        heartbeat(cluster, broker_id, epoch)
                    except TimeoutError:
                        self.misses += 1

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def epochs_now(cluster: LocalCluster) -> dict[int, int]:
    out = {}
    for node in cluster.controllers.values():
        health = node.health() if node.running and not node.paused else None
        if health is not None:
            out[node.node_id] = int(health["epoch"])
    return out


def max_epoch(cluster: LocalCluster) -> int:
    return max(epochs_now(cluster).values(), default=-1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    assert ordered
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# ---------------------------------------------------------------------------------------
# latency


def create_many(address: str, names: list[str], latencies: list[float]) -> None:
    conn = Conn(address)
    try:
        for name in names:
            t0 = time.perf_counter()
            status, answer = conn.request("POST", "/v1/topics", {"topics": [{"name": name}]})
            latencies.append(time.perf_counter() - t0)
            assert status == 200 and topic_ok(answer), answer
    finally:
        conn.close()


def bench_latency(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with cluster_for(args, "latency") as cluster:
        register_brokers(cluster, (1,))
        leader = cluster.controllers[cluster.wait_leader()]
        epoch_before = max_epoch(cluster)
        seq: list[dict[str, float]] = []
        conc: list[dict[str, float]] = []
        for rep in range(args.repeats):
            lat: list[float] = []
            names = [f"seq-{rep}-{i}" for i in range(args.commands)]
            t0 = time.perf_counter()
            create_many(leader.address, names, lat)
            elapsed = time.perf_counter() - t0
            seq.append(
                {
                    "p50_ms": percentile(lat, 0.5) * 1000,
                    "p99_ms": percentile(lat, 0.99) * 1000,
                    "per_s": len(lat) / elapsed,
                }
            )
            lat = []
            per_client = args.commands // args.clients
            threads = [
                threading.Thread(
                    target=create_many,
                    args=(leader.address, [f"conc-{rep}-{c}-{i}" for i in range(per_client)], lat),
                )
                for c in range(args.clients)
            ]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            conc.append(
                {
                    "p50_ms": percentile(lat, 0.5) * 1000,
                    "p99_ms": percentile(lat, 0.99) * 1000,
                    "per_s": len(lat) / elapsed,
                }
            )
        elections = max_epoch(cluster) - epoch_before
        for label, runs, clients in (("sequential", seq, 1), ("concurrent", conc, args.clients)):
            results.append(
                {
                    "bench": "latency",
                    "case": label,
                    "clients": clients,
                    "commands": args.commands,
                    "repeats": args.repeats,
                    "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
                    "p99_ms": round(statistics.median(r["p99_ms"] for r in runs), 2),
                    "commits_per_s": round(statistics.median(r["per_s"] for r in runs), 1),
                    "elections_during": elections,
                }
            )
    return results


# ---------------------------------------------------------------------------------------
# failover


def commit_after_kill(cluster: LocalCluster, survivors: list[NodeProcess], name: str) -> float:
    """Seconds from now until a create-topics commits through a new active controller."""
    t0 = time.perf_counter()
    deadline = t0 + FAILOVER_GIVE_UP_S
    body = {"topics": [{"name": name}]}
    while time.perf_counter() < deadline:
        for node in survivors:
            try:
                status, health = once(node.address, "GET", "/health", None, HEALTH_POLL_TIMEOUT_S)
            except OSError:
                continue
            if status != 200 or not health.get("active_controller"):
                continue
            address: str | None = node.address
            for _hop in range(3):  # follow NOT_CONTROLLER a bounded number of times
                assert address is not None
                try:
                    status, answer = once(address, "POST", "/v1/topics", body, WRITE_TIMEOUT_S)
                except OSError:
                    break
                if status == 200 and topic_ok(answer):
                    return time.perf_counter() - t0
                address = answer.get("leader_address") if isinstance(answer, dict) else None
                if address is None:
                    break
        time.sleep(0.005)  # a poll interval, in a benchmark loop
    raise TimeoutError(f"no commit within {FAILOVER_GIVE_UP_S} s of the kill")


def bench_failover(args: argparse.Namespace) -> list[dict[str, Any]]:
    times: list[float] = []
    elections: list[int] = []
    lost_total = 0
    with cluster_for(args, "failover") as cluster:
        register_brokers(cluster, (1,))
        created: set[str] = set()
        for rnd in range(args.rounds):
            leader_id = cluster.wait_leader()
            answer = write(cluster, "/v1/topics", {"topics": [{"name": f"before-{rnd}"}]})
            assert topic_ok(answer), answer
            created.add(f"before-{rnd}")
            epoch_before = max_epoch(cluster)
            victim = cluster.controllers[leader_id]
            survivors = [n for n in cluster.controllers.values() if n is not victim]
            victim.kill()
            elapsed = commit_after_kill(cluster, survivors, f"after-{rnd}")
            created.add(f"after-{rnd}")
            times.append(elapsed)
            elections.append(max_epoch(cluster) - epoch_before)
            victim.start()
            victim.wait_healthy()

            def all_have() -> bool:
                try:
                    return all(
                        created <= set(read_image(n.address).topics.by_name)
                        for n in cluster.controllers.values()
                    )
                except (OSError, AssertionError):
                    return False

            try:
                wait_for(all_have, timeout_s=30, message="a controller is missing topics")
            except TimeoutError:
                missing = {
                    n.node_id: sorted(created - set(read_image(n.address).topics.by_name))
                    for n in cluster.controllers.values()
                }
                lost_total += sum(len(v) for v in missing.values())
                print(json.dumps({"round": rnd, "missing": missing}))
            print(
                json.dumps(
                    {
                        "round": rnd,
                        "killed": leader_id,
                        "commit_after_kill_s": round(elapsed, 3),
                        "elections": elections[-1],
                    }
                ),
                flush=True,
            )
    return [
        {
            "bench": "failover",
            "engine": args.engine,
            "rounds": len(times),
            "median_s": round(statistics.median(times), 3),
            "p90_s": round(percentile(times, 0.9), 3),
            "max_s": round(max(times), 3),
            "min_s": round(min(times), 3),
            "elections_per_failover_median": statistics.median(elections),
            "elections_per_failover_max": max(elections),
            "topics_lost": lost_total,
        }
    ]


# ---------------------------------------------------------------------------------------
# idle


def bench_idle(args: argparse.Namespace) -> list[dict[str, Any]]:
    with cluster_for(args, "idle") as cluster:
        epoch_before = max_epoch(cluster)
        leaders: list[int | None] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for node in cluster.controllers.values():
                health = node.health()
                is_leader = health is not None and health["role"] == "leader"
                if is_leader and (not leaders or leaders[-1] != node.node_id):
                    leaders.append(node.node_id)
            time.sleep(0.5)  # the observation interval of an idle cluster
        return [
            {
                "bench": "idle",
                "engine": args.engine,
                "seconds": args.seconds,
                "elections": max_epoch(cluster) - epoch_before,
                "leader_changes": max(0, len(leaders) - 1),
            }
        ]


# ---------------------------------------------------------------------------------------
# big-topic


def observe(
    *, address: str, topic: str, partitions: int, ready: Any, done: Any, index: int
) -> None:
    """An observer process: catch up, say ready, then long-poll until ``topic`` has
    ``partitions`` partitions in its image; report the wall time it saw it."""
    conn = Conn(address, 60.0)
    image, offset = MetadataImage.EMPTY, 0
    announced = False
    while True:
        status, page = conn.request(
            "GET", f"/v1/metadata?offset={offset}&records_max=1000&max_wait_ms=5000"
        )
        assert status == 200, page
        image = replay_metadata_page(image, page)
        offset = page["next_offset"]
        if not announced and offset >= page["high_watermark"]:
            ready.put(index)
            announced = True
        found = image.topics.topic_by_name(topic)
        if found is not None and len(found.partitions) == partitions:
            done.put((index, time.time()))
            return


# One CreateTopics carries up to 10,000 partitions (the controller's record bound and the
# engine's 4 MiB payload cap); a larger topic is created with its first 10,000
# partitions and grown by CreatePartitions.
PARTITIONS_PER_COMMAND = 10_000


def create_big_topic(address: str, topic: str, partitions: int) -> None:
    first = min(partitions, PARTITIONS_PER_COMMAND)
    body: dict[str, Any] = {
        "topics": [{"name": topic, "num_partitions": first, "replication_factor": 3}]
    }
    status, answer = once(address, "POST", "/v1/topics", body, 120.0)
    assert status == 200 and answer["topics"][0]["error"] is None, answer
    count = first
    while count < partitions:
        count = min(partitions, count + PARTITIONS_PER_COMMAND)
        body = {"topics": [{"name": topic, "count": count}]}
        status, answer = once(address, "POST", "/v1/partitions", body, 120.0)
        assert status == 200 and answer["topics"][0]["error"] is None, answer


def bench_big_topic(args: argparse.Namespace) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    runs: list[dict[str, float]] = []
    with cluster_for(args, "big-topic") as cluster:
        epochs = register_brokers(cluster, (1, 2, 3))
        beats = Heartbeats(cluster, epochs)
        try:
            for rep in range(args.repeats):
                leader = cluster.controllers[cluster.wait_leader()]
                topic = f"big-{rep}"
                ready, done = ctx.Queue(), ctx.Queue()
                observers = [
                    ctx.Process(
                        target=observe,
                        kwargs={
                            "address": leader.address,
                            "topic": topic,
                            "partitions": args.partitions,
                            "ready": ready,
                            "done": done,
                            "index": i,
                        },
                        daemon=True,
                    )
                    for i in range(3)
                ]
                for p in observers:
                    p.start()
                for _ in observers:
                    ready.get(timeout=60)
                t0 = time.time()
                create_big_topic(leader.address, topic, args.partitions)
                acked = time.time() - t0
                seen = [done.get(timeout=120)[1] - t0 for _ in observers]
                for p in observers:
                    p.join(timeout=10)
                run = {"ack_s": acked, "first_observer_s": min(seen), "last_observer_s": max(seen)}
                print(json.dumps({"repeat": rep, **{k: round(v, 3) for k, v in run.items()}}))
                runs.append(run)
        finally:
            beats.close()
    return [
        {
            "bench": "big-topic",
            "engine": args.engine,
            "partitions": args.partitions,
            "replication_factor": 3,
            "observers": 3,
            "repeats": len(runs),
            "ack_s": round(statistics.median(r["ack_s"] for r in runs), 3),
            "first_observer_s": round(statistics.median(r["first_observer_s"] for r in runs), 3),
            "last_observer_s": round(statistics.median(r["last_observer_s"] for r in runs), 3),
            "heartbeat_misses": beats.misses,
        }
    ]


# ---------------------------------------------------------------------------------------
# snapshot


def synthetic_records(partitions: int, per_topic: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=str(uuid.uuid4()),
            broker_epoch=b,
            endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9100 + b),),
            fenced=False,
        )
        for b in (1, 2, 3)
    ]
    for t in range(partitions // per_topic):
        topic_id = str(uuid.uuid4())
        records.append(TopicRecord(name=f"topic-{t}", topic_id=topic_id))
        records.append(
            ConfigRecord(
                resource_type="topic",
                resource_name=f"topic-{t}",
                name="retention.ms",
                value="86400000",
            )
        )
        for p in range(per_topic):
            replicas = tuple(1 + (p + k) % 3 for k in range(3))
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                )
            )
    return records


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def bench_snapshot(args: argparse.Namespace) -> list[dict[str, Any]]:
    per_topic = 1000
    source = synthetic_records(args.partitions, per_topic)

    def build() -> MetadataImage:
        delta = MetadataDelta(MetadataImage.EMPTY)
        delta.replay_all(source)
        delta.offset = len(source)
        return delta.apply()

    replay_s, image = timed(build, args.repeats)
    to_records_s, records = timed(image.to_records, args.repeats)
    encode_s, data = timed(lambda: encode_records(records), args.repeats)
    decode_s, decoded = timed(lambda: decode_records(data), args.repeats)
    load_s, loaded = timed(
        lambda: image_from_records(decoded, image.offset, image.epoch), args.repeats
    )
    assert loaded.to_records() == records
    results: list[dict[str, Any]] = [
        {
            "bench": "snapshot-offline",
            "partitions": args.partitions,
            "topics": args.partitions // per_topic,
            "records": len(source),
            "replay_s": round(replay_s, 3),
            "snapshot_bytes": len(data),
            "to_records_s": round(to_records_s, 3),
            "encode_records_s": round(encode_s, 3),
            "decode_records_s": round(decode_s, 3),
            "image_from_records_s": round(load_s, 3),
            "repeats": args.repeats,
        }
    ]

    # The same shape through a real cluster; snapshots every 4 MiB of payloads.
    with cluster_for(
        args, "snapshot", **{"metadata.log.max.record.bytes.between.snapshots": str(4 << 20)}
    ) as cluster:
        epochs = register_brokers(cluster, (1, 2, 3))
        del epochs
        epoch_before = max_epoch(cluster)
        t0 = time.perf_counter()
        for t in range(args.partitions // per_topic):
            body = {
                "topics": [
                    {
                        "name": f"topic-{t}",
                        "num_partitions": per_topic,
                        "replication_factor": 3,
                        "configs": {"retention.ms": "86400000"},
                    }
                ]
            }
            assert topic_ok(write(cluster, "/v1/topics", body, deadline_s=120))
        create_s = time.perf_counter() - t0
        elections = max_epoch(cluster) - epoch_before
        snapshots = sum(
            n.log_path.read_text(errors="replace").count('"wrote metadata snapshot"')
            for n in cluster.controllers.values()
        )
        leader_id = cluster.wait_leader()
        victim = next(n for n in cluster.controllers.values() if n.node_id != leader_id)
        target = wait_for(
            lambda: (
                (h := victim.health()) is not None
                and h["metadata_offset"] >= 0
                and h["metadata_offset"]
            ),
            timeout_s=30,
            message="no metadata offset",
        )
        wait_for(
            lambda: all(
                (n.health() or {}).get("metadata_offset", -1) >= target
                for n in cluster.controllers.values()
            ),
            timeout_s=60,
            message="controllers did not converge",
        )
        snapshot_files = sorted(
            (p for p in victim.data_dir.rglob("*") if SNAPSHOT_NAME.match(p.name)),
            key=lambda p: p.stat().st_mtime,
        )
        restarts: list[float] = []
        for _ in range(args.repeats):
            victim.kill()
            t0 = time.perf_counter()
            victim.start()
            wait_for(
                lambda: (victim.health() or {}).get("metadata_offset", -1) >= target,
                timeout_s=120,
                message=lambda: f"restart did not load; log:\n{victim.tail()}",
            )
            restarts.append(time.perf_counter() - t0)
        loads = [
            json.loads(line)["fields"]
            for line in victim.log_path.read_text(errors="replace").splitlines()
            if '"loaded metadata snapshot"' in line
        ]
        results.append(
            {
                "bench": "snapshot-restart",
                "engine": args.engine,
                "partitions": args.partitions,
                "create_through_api_s": round(create_s, 2),
                "elections_during_create": elections,
                "snapshots_written_during_create": snapshots,
                "snapshot_file": snapshot_files[-1].name if snapshot_files else None,
                "snapshot_file_bytes": snapshot_files[-1].stat().st_size
                if snapshot_files
                else None,
                "snapshot_records_loaded": loads[-1]["records"] if loads else None,
                "restart_to_loaded_s": round(statistics.median(restarts), 3),
                "restart_to_loaded_max_s": round(max(restarts), 3),
                "repeats": len(restarts),
            }
        )
    return results


# ---------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


MODES: dict[str, Callable[[argparse.Namespace], list[dict[str, Any]]]] = {
    "latency": bench_latency,
    "failover": bench_failover,
    "idle": bench_idle,
    "big-topic": bench_big_topic,
    "snapshot": bench_snapshot,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("mode", choices=sorted(MODES))
    ap.add_argument("--engine", choices=["native", "pysyncobj"], default="native")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--commands", type=int, default=400)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where the clusters' data goes (a temp dir)")
    ap.add_argument("--prop", action="append", default=[], help="KEY=VALUE for every controller")
    args = ap.parse_args()
    if args.partitions is None:
        args.partitions = 10_000 if args.mode == "big-topic" else 100_000
    args.props = dict(p.split("=", 1) for p in args.prop)
    print(
        json.dumps(
            {
                "machine": machine(),
                "mode": args.mode,
                "engine": args.engine,
                "quorum": {**LOCAL_QUORUM_PROPERTIES, **args.props},
            }
        ),
        flush=True,
    )
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # close() the cluster
    results = MODES[args.mode](args)
    print_results(results)


if __name__ == "__main__":
    main()
