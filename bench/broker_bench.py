"""Broker benchmarks: a real local cluster, the client perf tools, NATS for the ratio.

    python bench/broker_bench.py [--records N] [--consume-records N] [--repeats N]
        [--e2e-rate R] [--e2e-seconds S] [--peers] [--profile DIR] [--dir DIR]

One ``LocalCluster`` (3 controllers) + ``LocalBrokers`` (3 brokers) on loopback, all
real OS processes on this (shared, 2-core) machine. Topics have 3 partitions (one
leader per broker). Each figure is the median of ``--repeats`` runs, each run a fresh
topic; every run is one producer (or consumer) OS process:

- ``produce acks=1 RF=1`` and ``produce acks=all RF=3`` (min.insync.replicas 2):
  ``raftka perf produce`` with 100-byte records, default batch.size/linger.ms;
  throughput (records/s, MB/s) and send-to-ack latency p50/p99 from its summary line.
- ``consume``: ``raftka perf consume`` reading back ``--consume-records`` records
  (from an RF 3 topic filled by the produce runs).
- ``e2e``: one process produces at ``--e2e-rate`` records/s (acks=all, RF 3,
  linger.ms 0) with its wall-clock send time in the value, and consumes the same
  topic; latency = receive time - send time (same clock), p50/p99.
- ``--peers``: NATS JetStream R3 via /work/shared/bench/peers_bench.py (raw pipelined
  publish and pull consume, 100-byte messages), in the same run, for the ratio.
- ``--profile DIR``: one acks=all produce run under cProfile; the stats file and its
  top functions go to DIR.
- ``metrics`` (in ``--sections``): acks=all RF 3 produce runs with and without a scraper
  that GETs ``/metrics`` of every broker and controller each ``--scrape-metrics-every-s``
  seconds (as Prometheus would), interleaved so machine noise hits both alike; the
  throughput ratio is what the endpoint costs (issue #18: under 2% at 1 s), and the
  servers' CPU per record with and without. Each run's topic is deleted after it.
- ``scrape-cpu`` (in ``--sections``): after four acks=all runs of 50,000 records, each
  process is scraped 100 times back to back; its CPU (``/proc/<pid>/stat``) over those
  scrapes less its idle rate measured just before is one scrape's CPU. The sum over the
  six processes is what one scrape a second costs, shown as a share of the machine's
  cores: the throughput a CPU-bound produce run pays for it, with none of the run-to-run
  noise of a throughput ratio.

Prints one JSON line per result and a markdown table at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from raftka.client import Admin, NewTopic

PARTITIONS: Final = 3
RECORD_SIZE: Final = 100
API_TIMEOUT_MS: Final = 30_000
RUN_TIMEOUT_S: Final = 900
FETCH_PARTITION_BYTES: Final = 1_048_576  # Kafka's max.partition.fetch.bytes
PEERS_PYTHON: Final = Path("/tmp/raftka-peers/venv/bin/python")
PEERS_SCRIPT: Final = Path("/tmp/raftka-peers/peers_bench.py")

_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>[\d.]+) ms 50th, "
    r"(?P<p95>[\d.]+) ms 95th, (?P<p99>[\d.]+) ms 99th, (?P<p999>[\d.]+) ms 99.9th\."
)


def _raftka(*args: str, prefix: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, *prefix, "-m", "raftka", *args]


def _run(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:6]}... exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    acks: str,
    *,
    profile: Path | None = None,
    throughput: float = -1,
    idempotence: bool | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, float]:
    """``extra``: more options of the command (``--command-config FILE``)."""
    prefix = ("-m", "cProfile", "-o", str(profile)) if profile else ()
    cmd = [
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(RECORD_SIZE),
        "--acks",
        acks,
        "--bootstrap-server",
        bootstrap,
        "--throughput",
        str(throughput),
    ]
    if idempotence is not None:
        cmd.append("--enable-idempotence" if idempotence else "--disable-idempotence")
    stdout = _run(_raftka(*cmd, *extra, prefix=prefix))
    m = _SUMMARY.search(stdout.strip().splitlines()[-1])
    assert m is not None, stdout[-500:]
    return {k: float(v) for k, v in m.groupdict().items()}


def consume(
    bootstrap: str, topic: str, records: int, extra: tuple[str, ...] = ()
) -> dict[str, float]:
    # 16 KB per partition fetch: client/_transport.py reads a response with one
    # StreamReader.read(n), which returns what is buffered (often a partial body) for
    # large answers; small fetches sidestep that until it is fixed.
    stdout = _run(
        _raftka(
            "perf",
            "consume",
            "--topic",
            topic,
            "--messages",
            str(records),
            "--max-partition-fetch-bytes",
            str(FETCH_PARTITION_BYTES),
            "--bootstrap-server",
            bootstrap,
            *extra,
        )
    )
    row = [c.strip() for c in stdout.strip().splitlines()[-1].split(",")]
    return {
        "records": float(row[4]),
        "rps": float(row[5]),
        "mbps": float(row[3]),
        "fetch_rps": float(row[9]),
    }


def e2e_worker(bootstrap: str, topic: str, rate: float, seconds: float) -> dict[str, float]:
    """Produce at ``rate`` with the send time in the value; consume and time arrivals."""
    from raftka.client import AsyncConsumer, AsyncProducer, TopicPartition

    count = int(rate * seconds)
    latencies_us: list[int] = []

    async def main() -> None:
        async with (
            AsyncProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) as producer,
            AsyncConsumer(
                bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=500
            ) as consumer,
        ):
            parts = await producer.partitions_for(topic)
            consumer.assign(TopicPartition(topic, p) for p in parts)
            for p in parts:
                await consumer.position(TopicPartition(topic, p))

            async def read() -> None:
                while len(latencies_us) < count:
                    for recs in (await consumer.poll(timeout_ms=1_000)).values():
                        now = time.time_ns()
                        for r in recs:
                            assert r.value is not None
                            latencies_us.append(
                                (now - struct.unpack_from(">q", r.value)[0]) // 1000
                            )

            reader = asyncio.create_task(read())
            pad = b"x" * (RECORD_SIZE - 8)
            start = time.perf_counter()
            for i in range(count):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)  # pacing the rate, not synchronisation
                await producer.send(topic, struct.pack(">q", time.time_ns()) + pad)
            await producer.flush()
            await asyncio.wait_for(reader, timeout=30)

    asyncio.run(main())
    lat = sorted(latencies_us)
    return {
        "records": len(lat),
        "p50_ms": lat[len(lat) // 2] / 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] / 1000,
        "max_ms": lat[-1] / 1000,
    }


def profile_broker(brokers: Any, admin: Admin, records: int, out: Path) -> dict[str, float]:
    """Restart broker 101 under cProfile, produce ``records`` (acks=1) to a partition it
    alone holds, stop it with SIGTERM (a clean exit writes the stats)."""
    node = brokers[101]
    node.terminate()
    log = node.log_path.open("ab")
    node.popen = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(out),
            "-m",
            "raftka",
            "broker",
            "--config",
            str(node.config_path),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    brokers.wait_unfenced(101)
    admin.create_topics(
        [NewTopic("prof-broker", replica_assignment={0: (101,)})], timeout_ms=API_TIMEOUT_MS
    )
    result = produce(brokers.bootstrap_servers, "prof-broker", records, "1")
    node.terminate()
    log.close()
    return result


class Scraper:
    """A thread that GETs /metrics of ``addresses`` every ``every_s`` seconds."""

    def __init__(self, addresses: list[str], every_s: float) -> None:
        import threading

        self.addresses, self.every_s = addresses, every_s
        self.scrapes, self.bytes, self.seconds = 0, 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.every_s):  # the scrape interval
            for address in self.addresses:
                started = time.perf_counter()
                with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
                    self.bytes += len(r.read())
                self.seconds += time.perf_counter() - started
                self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used, from /proc."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            # Fields after the command (which may hold spaces): utime is the 14th field.
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def scrape_cpu(cluster: Any, admin: Admin, scrapes: int = 100) -> dict[str, Any]:
    """What one GET /metrics costs each process in CPU, after some produce traffic (see
    the module doc's ``scrape-cpu``)."""
    import urllib.request

    bootstrap = cluster.brokers.bootstrap_servers
    for i in range(4):
        produce(bootstrap, create_topic(admin, f"scrape-cpu-{i}", 3), 50_000, "all")
    nodes = [*cluster.brokers.nodes(), *cluster.controllers.nodes()]
    per: dict[str, float] = {}
    size: dict[str, int] = {}
    for n in nodes:
        pid, url = n.popen.pid, f"http://{n.address}/metrics"
        idle_from, idle_wall = _cpu_s([pid]), time.perf_counter()
        time.sleep(2)  # the process's own background CPU rate, to take away below
        idle_rate = (_cpu_s([pid]) - idle_from) / (time.perf_counter() - idle_wall)
        cpu_from, wall_from = _cpu_s([pid]), time.perf_counter()
        for _ in range(scrapes):
            with urllib.request.urlopen(url, timeout=5) as r:
                size[f"{n.role}-{n.node_id}"] = len(r.read())
        wall = time.perf_counter() - wall_from
        used = _cpu_s([pid]) - cpu_from - idle_rate * wall
        per[f"{n.role}-{n.node_id}"] = round(1000 * used / scrapes, 2)
    total_ms = sum(per.values())
    cores = os.cpu_count() or 1
    return {
        "cpu_ms_per_scrape": per,
        "bytes_per_scrape": size,
        "all_processes_cpu_ms_per_s_at_1s": round(total_ms, 2),
        "share_of_machine_pct": round(100 * total_ms / (1000 * cores), 2),
    }


def _metrics_time(address: str) -> tuple[float, float]:
    """(ms, count) a process spent answering GET /metrics, from its own histogram."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("request") == "Metrics"
    }
    total = "kafka_network_requestmetrics_totaltimems"
    return found.get(total + "_sum", 0.0), found.get(total + "_count", 0.0)


def create_topic(admin: Admin, name: str, rf: int) -> str:
    configs = {"min.insync.replicas": "2"} if rf == 3 else {}
    admin.create_topics(
        [NewTopic(name, PARTITIONS, rf, configs=configs)], timeout_ms=API_TIMEOUT_MS
    )
    return name


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def emit(name: str, result: dict[str, Any], results: dict[str, dict[str, Any]]) -> None:
    results[name] = result
    print(json.dumps({"bench": name, **result}), flush=True)


def run_peers(n: int, repeats: int) -> list[dict[str, Any]]:
    if not (PEERS_PYTHON.exists() and PEERS_SCRIPT.exists()):
        return []
    cmd = [
        str(PEERS_PYTHON),
        str(PEERS_SCRIPT),
        "all",
        "--modes",
        "cluster",
        "--replicas-list",
        "3",
        "--skip-redis",
        "--n",
        str(n),
        "--n-sync",
        "5000",
        "--repeat",
        str(repeats),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    lines = []
    for line in out.stdout.splitlines():
        with_json = line.strip()
        if with_json.startswith("{"):
            lines.append(json.loads(with_json))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--consume-records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--e2e-rate", type=float, default=1000.0)
    ap.add_argument("--e2e-seconds", type=float, default=10.0)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--dir", type=Path)
    ap.add_argument(
        "--sections",
        default="produce,produce-rate,consume,e2e",
        help="Comma list of produce, produce-rate, consume, e2e, idempotence, metrics, scrape-cpu.",
    )
    ap.add_argument("--e2e-worker", nargs=2, metavar=("BOOTSTRAP", "TOPIC"))
    ap.add_argument(
        "--scrape-metrics-every-s",
        type=float,
        default=1.0,
        help="The metrics section's scrape interval (seconds).",
    )
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if args.e2e_worker:
        print(json.dumps(e2e_worker(*args.e2e_worker, args.e2e_rate, args.e2e_seconds)))
        return

    from raftka.testing import RaftkaCluster

    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "cores": os.cpu_count(),
                "load": os.getloadavg(),
            }
        ),
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    base = args.dir or Path(tempfile.mkdtemp(prefix="raftka-broker-bench-"))
    with RaftkaCluster.start(base) as cluster:
        brokers = cluster.brokers
        bootstrap = brokers.bootstrap_servers
        with Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=API_TIMEOUT_MS) as admin:
            new: Callable[[str, int], str] = lambda n, rf: create_topic(admin, n, rf)  # noqa: E731
            if "produce" in sections:
                for acks, rf in (("1", 1), ("all", 3)):
                    runs = [
                        produce(bootstrap, new(f"p-{acks}-{rf}-{i}", rf), args.records, acks)
                        for i in range(args.repeats)
                    ]
                    emit(f"produce acks={acks} RF={rf}", median_of(runs), results)
            if "idempotence" in sections:
                # On and off interleaved, so machine noise hits both alike.
                on_runs, off_runs = [], []
                for i in range(args.repeats):
                    for idem, runs_ in ((True, on_runs), (False, off_runs)):
                        t = new(f"idem-{idem}-{i}", 3)
                        runs_.append(produce(bootstrap, t, args.records, "all", idempotence=idem))
                emit("produce acks=all RF=3 idempotence on", median_of(on_runs), results)
                emit("produce acks=all RF=3 idempotence off", median_of(off_runs), results)
            if "metrics" in sections:
                every = args.scrape_metrics_every_s
                targets = [n.address for n in brokers.nodes()]
                targets += [n.address for n in cluster.controllers.nodes()]
                bare, scraped = [], []
                scrapes, scrape_s, scrape_bytes = 0, 0.0, 0
                # The servers' CPU per record, with and without the scraper: on a machine
                # where the run is CPU bound this is what throughput pays, with much less
                # of the scheduling noise a single run's throughput carries.
                pids = [n.popen.pid for n in brokers.nodes() if n.popen is not None]
                pids += [n.popen.pid for n in cluster.controllers.nodes() if n.popen is not None]
                cpu_us: dict[bool, list[float]] = {False: [], True: []}
                for i in range(args.repeats):
                    # Which goes first alternates: neither always runs on a busier cluster.
                    for scraping in (False, True) if i % 2 == 0 else (True, False):
                        t = new(f"m-{'on' if scraping else 'off'}-{i}", 3)
                        cpu_before = _cpu_s(pids)
                        if not scraping:
                            bare.append(produce(bootstrap, t, args.records, "all"))
                            cpu_us[False].append(1e6 * (_cpu_s(pids) - cpu_before) / args.records)
                            admin.delete_topics([t], timeout_ms=API_TIMEOUT_MS)
                            continue
                        with Scraper(targets, every) as scraper:
                            scraped.append(produce(bootstrap, t, args.records, "all"))
                        cpu_us[True].append(1e6 * (_cpu_s(pids) - cpu_before) / args.records)
                        # Each run's topic goes when it is done: idle partitions left
                        # behind still cost their followers' fetches, so each later run
                        # would pay more than the one before (a drift of 2-3x over 24 runs,
                        # far larger than what this section measures).
                        admin.delete_topics([t], timeout_ms=API_TIMEOUT_MS)
                        scrapes += scraper.scrapes
                        scrape_s += scraper.seconds
                        scrape_bytes += scraper.bytes
                off, on = median_of(bare), median_of(scraped)
                # Each repeat's two runs are neighbours in time: their ratio carries less
                # of the machine's drift than the ratio of the medians.
                pair_ratios = [b["rps"] / a["rps"] for a, b in zip(bare, scraped, strict=True)]
                # The brokers' own time per scrape (their request metrics time /metrics).
                served = [_metrics_time(n.address) for n in brokers.nodes()]
                served_ms = sum(ms for ms, _ in served) / max(sum(c for _, c in served), 1)
                emit("produce acks=all RF=3 (no scraper)", off, results)
                emit(f"produce acks=all RF=3 (/metrics every {every:g} s)", on, results)
                emit(
                    "metrics endpoint cost",
                    {
                        "throughput_ratio": round(on["rps"] / off["rps"], 4),
                        "pair_ratios": [round(r, 4) for r in pair_ratios],
                        "pair_ratio_median": round(statistics.median(pair_ratios), 4),
                        "server_cpu_us_per_record_off": [round(x, 2) for x in cpu_us[False]],
                        "server_cpu_us_per_record_on": [round(x, 2) for x in cpu_us[True]],
                        "server_cpu_ratio_median": round(
                            statistics.median(cpu_us[True]) / statistics.median(cpu_us[False]), 4
                        ),
                        "scrapes": scrapes,
                        "scrape_ms_mean": round(1000 * scrape_s / max(scrapes, 1), 2),
                        "broker_ms_per_scrape": round(served_ms, 2),
                        "scrape_bytes_mean": scrape_bytes // max(scrapes, 1),
                    },
                    results,
                )
            if "scrape-cpu" in sections:
                emit("metrics scrape CPU", scrape_cpu(cluster, admin), results)
            if "produce-rate" in sections:
                n = int(args.e2e_rate * args.e2e_seconds)
                runs = [
                    produce(bootstrap, new(f"pr-{i}", 3), n, "all", throughput=args.e2e_rate)
                    for i in range(args.repeats)
                ]
                emit(f"produce acks=all RF=3 @{args.e2e_rate:.0f}/s", median_of(runs), results)
            if "consume" in sections:
                # Fill one RF 3 topic, read it back repeats times.
                fill = new("consume-src", 3)
                produce(bootstrap, fill, args.consume_records, "1")
                runs = [consume(bootstrap, fill, args.consume_records) for _ in range(args.repeats)]
                emit("consume RF=3", median_of(runs), results)
            if "e2e" in sections:
                e2e_runs = []
                for i in range(args.repeats):
                    topic = new(f"e2e-{i}", 3)
                    out = _run(
                        [
                            sys.executable,
                            __file__,
                            "--e2e-worker",
                            bootstrap,
                            topic,
                            "--e2e-rate",
                            str(args.e2e_rate),
                            "--e2e-seconds",
                            str(args.e2e_seconds),
                        ]
                    )
                    e2e_runs.append(json.loads(out.strip().splitlines()[-1]))
                emit(f"e2e acks=all RF=3 @{args.e2e_rate:.0f}/s", median_of(e2e_runs), results)
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                prof = args.profile / "produce.prof"
                r = produce(bootstrap, new("profiled", 3), args.records, "all", profile=prof)
                emit("produce acks=all RF=3 (under cProfile)", r, results)
                r = profile_broker(brokers, admin, args.records, args.profile / "broker.prof")
                emit("produce acks=1 RF=1 to a broker under cProfile", r, results)
    if args.peers:
        for line in run_peers(args.records, args.repeats):
            print(json.dumps({"peer": line}), flush=True)
    print("\n| benchmark | result |\n|---|---|")
    for name, r in results.items():
        print(f"| {name} | " + ", ".join(f"{k}={v:g}" for k, v in r.items()) + " |")


if __name__ == "__main__":
    main()
