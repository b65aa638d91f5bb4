"""The client's two faces on one cluster: blocking ``Producer`` vs ``AsyncProducer``,
blocking ``Consumer.poll`` vs ``AsyncConsumer.poll``.

    python bench/client_faces_bench.py [--records N] [--repeats N] [--perf]
        [--profile DIR] [--dir DIR] [--sections produce,consume]

One ``LocalCluster`` (3 controllers) + ``LocalBrokers`` (3 brokers) on loopback, all
real OS processes. Topics have 3 partitions, RF 3, min.insync.replicas 2. Every run is
its own OS process (so the faces do not share a GIL or a warm interpreter), and the
runs are interleaved (blocking, async, [perf], blocking, async, ...) so machine noise
hits each face alike; the table reports medians.

- ``produce``: ``--records`` records of 100 bytes, no key, acks=all, the producer's
  defaults otherwise (batch.size 16384, linger.ms 5, idempotence on); the clock runs
  from the first ``send`` to the end of ``flush``. ``producer-async`` awaits ``send``
  in a loop that never yields, so its sender only runs once ``flush`` awaits;
  ``producer-async-yield`` yields to the loop every 100 sends, as an application
  doing anything else would, so sending overlaps, as with the blocking face. A fresh
  topic per run. ``--perf`` adds ``raftka perf produce`` (the same records, acks=all):
  the figure docs/benchmarks.md quotes.
- ``consume``: one topic filled once with ``--records`` records; each run assigns its
  3 partitions from the beginning (no group) and polls until it has every record.
  ``kafka-consumer-iter`` is kafka-python's ``KafkaConsumer`` as a group member (a
  fresh group per run, from the earliest offsets), iterating ``for record in
  consumer`` until it has every record (the clock starts at the first record, once the
  member joined): iteration hands records over one at a time.
- ``--profile DIR``: one blocking produce run under cProfile (DIR/producer_sync.prof)
  and its top functions printed.

Prints one JSON line per run and a markdown table at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from raftka.client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
)

PARTITIONS: Final = 3
RECORD_SIZE: Final = 100
API_TIMEOUT_MS: Final = 30_000
RUN_TIMEOUT_S: Final = 900
POLL_TIMEOUT_MS: Final = 1_000
FACES_PRODUCE: Final = ("producer-sync", "producer-async", "producer-async-yield")
#: producer-async-yield hands the loop over every this many sends, as an application
#: that awaits anything else does; plain producer-async never does (its sender runs
#: only once flush awaits: every record is queued first, then sent in full requests).
YIELD_EVERY: Final = 100
FACES_CONSUME: Final = ("consumer-sync", "consumer-async", "kafka-consumer-iter")


# ---------------------------------------------------------------------- workers


def _value() -> bytes:
    return b"x" * RECORD_SIZE


def producer_sync(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    value = _value()
    with Producer(bootstrap_servers=bootstrap, acks="all") as p:
        p.partitions_for(topic)  # metadata before the clock starts, as perf does
        start = time.perf_counter()
        futures = [p.send(topic, value) for _ in range(records)]
        p.flush(timeout_ms=API_TIMEOUT_MS * 4)
        elapsed = time.perf_counter() - start
        failed = sum(1 for f in futures if f.exception(0) is not None)
    return {"records_per_s": records / elapsed, "seconds": elapsed, "failed": failed}


async def _producer_async(
    bootstrap: str, topic: str, records: int, yield_every: int = 0
) -> dict[str, float]:
    value = _value()
    async with AsyncProducer(bootstrap_servers=bootstrap, acks="all") as p:
        await p.partitions_for(topic)
        start = time.perf_counter()
        if yield_every:
            futures = []
            for i in range(records):
                futures.append(await p.send(topic, value))
                if i % yield_every == 0:
                    await asyncio.sleep(0)
        else:
            futures = [await p.send(topic, value) for _ in range(records)]
        await p.flush(timeout_ms=API_TIMEOUT_MS * 4)
        elapsed = time.perf_counter() - start
        failed = sum(1 for f in futures if f.exception() is not None)
    return {"records_per_s": records / elapsed, "seconds": elapsed, "failed": failed}


def _partitions(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, i) for i in range(PARTITIONS)]


def consumer_sync(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(_partitions(topic))
        start = time.perf_counter()
        got = 0
        while got < records:
            for batch in c.poll(POLL_TIMEOUT_MS).values():
                got += len(batch)
        elapsed = time.perf_counter() - start
    return {"records_per_s": got / elapsed, "seconds": elapsed, "failed": 0}


async def _consumer_async(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(_partitions(topic))
        start = time.perf_counter()
        got = 0
        while got < records:
            for batch in (await c.poll(POLL_TIMEOUT_MS)).values():
                got += len(batch)
        elapsed = time.perf_counter() - start
    return {"records_per_s": got / elapsed, "seconds": elapsed, "failed": 0}


def kafka_consumer_iter(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    from raftka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"faces-bench-{os.getpid()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    with consumer:
        next(consumer)  # joining the group (a rebalance delay) is not iteration
        start = time.perf_counter()
        got = 1
        for _ in consumer:
            got += 1
            if got == records:
                break
        elapsed = time.perf_counter() - start
    return {"records_per_s": (got - 1) / elapsed, "seconds": elapsed, "failed": 0}


def run_worker(face: str, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    if face == "producer-sync":
        return producer_sync(bootstrap, topic, records)
    if face == "producer-async":
        return asyncio.run(_producer_async(bootstrap, topic, records))
    if face == "producer-async-yield":
        return asyncio.run(_producer_async(bootstrap, topic, records, YIELD_EVERY))
    if face == "consumer-sync":
        return consumer_sync(bootstrap, topic, records)
    if face == "consumer-async":
        return asyncio.run(_consumer_async(bootstrap, topic, records))
    if face == "kafka-consumer-iter":
        return kafka_consumer_iter(bootstrap, topic, records)
    raise SystemExit(f"unknown face {face!r}")


# ---------------------------------------------------------------------- driver


def _run(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:6]}... exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def worker(
    face: str, bootstrap: str, topic: str, records: int, profile: Path | None = None
) -> dict[str, float]:
    prefix = ["-m", "cProfile", "-o", str(profile)] if profile else []
    cmd = [sys.executable, *prefix, __file__, "--worker", face, bootstrap, topic, str(records)]
    result: dict[str, float] = json.loads(_run(cmd).strip().splitlines()[-1])
    return result


def perf_produce(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "raftka",
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(RECORD_SIZE),
        "--acks",
        "all",
        "--bootstrap-server",
        bootstrap,
        "--throughput",
        "-1",
    ]
    last = _run(cmd).strip().splitlines()[-1]
    # "N records sent, R records/sec (...)": the second field is the rate.
    return {"records_per_s": float(last.split(",")[1].split()[0]), "seconds": 0.0, "failed": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--perf", action="store_true", help="add `raftka perf produce` runs")
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--sections", default="produce,consume")
    ap.add_argument("--worker", nargs=4, metavar=("FACE", "BOOTSTRAP", "TOPIC", "RECORDS"))
    args = ap.parse_args()
    if args.worker:
        face, bootstrap, topic, records = args.worker
        print(json.dumps(run_worker(face, bootstrap, topic, int(records))), flush=True)
        return

    from raftka.local import LocalCluster
    from raftka.local.brokers import LocalBrokers

    sections = set(args.sections.split(","))
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "cores": os.cpu_count(),
                "load": os.getloadavg(),
                "python": platform.python_version(),
            }
        ),
        flush=True,
    )
    runs: dict[str, list[dict[str, float]]] = {}

    def record(face: str, result: dict[str, float]) -> None:
        runs.setdefault(face, []).append(result)
        print(json.dumps({"face": face, **result}), flush=True)

    base = args.dir or Path(tempfile.mkdtemp(prefix="raftka-faces-bench-"))
    with LocalCluster(base) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(cluster) as brokers:
            brokers.start()
            bootstrap = brokers.bootstrap_servers
            with Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=API_TIMEOUT_MS) as admin:

                def new_topic(name: str) -> str:
                    admin.create_topics(
                        [NewTopic(name, PARTITIONS, 3, configs={"min.insync.replicas": "2"})],
                        timeout_ms=API_TIMEOUT_MS,
                    )
                    return name

                if "produce" in sections:
                    for i in range(args.repeats):
                        for face in FACES_PRODUCE:
                            t = new_topic(f"{face}-{i}")
                            record(face, worker(face, bootstrap, t, args.records))
                        if args.perf:
                            t = new_topic(f"perf-{i}")
                            record("perf-produce", perf_produce(bootstrap, t, args.records))
                if "consume" in sections:
                    fill = new_topic("consume-src")
                    filled = worker("producer-async", bootstrap, fill, args.records)
                    assert filled["failed"] == 0, filled
                    for _ in range(args.repeats):
                        for face in FACES_CONSUME:
                            record(face, worker(face, bootstrap, fill, args.records))
                if args.profile:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    prof = args.profile / "producer_sync.prof"
                    t = new_topic("profiled")
                    r = worker("producer-sync", bootstrap, t, args.records, profile=prof)
                    print(json.dumps({"face": "producer-sync under cProfile", **r}), flush=True)
                    stats = pstats.Stats(str(prof))
                    stats.sort_stats("tottime").print_stats(25)
                    stats.sort_stats("cumulative").print_stats(30)

    def median(face: str) -> float:
        return statistics.median(r["records_per_s"] for r in runs[face])

    print("\n| face | records/s (median) | runs | failed |\n|---|---|---|---|")
    for face, rs in runs.items():
        each = " / ".join(f"{r['records_per_s']:,.0f}" for r in rs)
        failed = sum(int(r["failed"]) for r in rs)
        print(f"| {face} | **{median(face):,.0f}** | {each} | {failed} |")
    pairs = [
        ("producer-sync", "producer-async"),
        ("producer-sync", "producer-async-yield"),
        ("producer-sync", "perf-produce"),
        ("consumer-sync", "consumer-async"),
        ("kafka-consumer-iter", "consumer-sync"),
    ]
    for a, b in pairs:
        if a in runs and b in runs:
            ratios = [
                ra["records_per_s"] / rb["records_per_s"]
                for ra, rb in zip(runs[a], runs[b], strict=False)
            ]
            print(
                f"\n{a} / {b}: {median(a) / median(b):.2f}x of medians; "
                f"per interleaved pair: {' '.join(f'{r:.2f}' for r in ratios)} "
                f"(median {statistics.median(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
