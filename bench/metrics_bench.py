"""What a broker's metrics cost in CPU, in process (no cluster, so a loaded machine's
noise in produce throughput does not hide it).

    python bench/metrics_bench.py [--topics 12] [--scrapes 300] [--calls 20000]

A real :class:`BrokerServer` (built, not started) whose metrics have seen ``--topics``
topics produced, fetched and replicated and requests of 13 APIs, as a busy broker's
would. Reported (process CPU time, so time spent waiting for a core is left out):

- ``cpu_ms_per_scrape``: one ``GET /metrics`` worth of work (the collectors and
  prometheus_client's exposition), and its size in bytes. Scraped every second, a
  broker spends this share of one core on it: the cost the issue bounds at 2%.
- ``record_produce_us``: what every produce request pays for the per-topic counters,
  scraped or not; ``request_timing_us``: what every request pays for the request-time
  split (timer, context variable, a purgatory wait noted, the stages recorded). Earlier
  runs' ``observe_us`` timed the count and one histogram, before the split.

Prints one JSON line. ``bench/broker_bench.py --sections metrics`` measures the same
endpoint from the outside, as produce throughput with and without a scraper.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from raftka.broker.replication.data_plane import FetchResult, ProduceResult
from raftka.broker.server import BrokerServer
from raftka.common.record.batch import Record, build_batch
from raftka.server_common.metrics import RequestTimer, add_remote, start_timing, stop_timing

# The tests' never-started broker config (tests/broker_harness.py): its addresses are
# never dialled.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from broker_harness import broker_config

APIS = (
    "Produce", "Fetch", "ListOffsets", "Metadata", "Health", "Metrics", "JoinGroup",
    "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch", "FindCoordinator", "ApiVersions",
)  # fmt: skip


async def measure(topics: int, scrapes: int, calls: int) -> dict[str, float]:
    server = BrokerServer(broker_config(Path(tempfile.mkdtemp(prefix="raftka-metrics-bench-"))))
    metrics = server.metrics
    batch = build_batch([Record(b"x" * 100)] * 10)
    try:
        for t in range(topics):
            name = f"topic-{t}"
            ok = ProduceResult(name, 0, None, base_offset=0)
            metrics.topics.record_produce([(name, 0, batch)], [ok])
            for follower in (False, True):
                read = FetchResult(name, 0, None, records=batch)
                metrics.topics.record_fetch([read], follower=follower)
        for api in APIS:
            # Time in every stage, so every stage's histogram is exported: the largest
            # scrape these APIs can make.
            timer = RequestTimer(0.0)
            timer.api, timer.started, timer.queued, timer.remote = api, 0.001, 0.001, 0.001
            timer.ready = timer.picked = 0.004
            metrics.requests.record(timer, 0.005, response_queue=True)
        started = time.process_time()
        for _ in range(scrapes):
            body = generate_latest(metrics.registry)
        scrape_ms = 1000 * (time.process_time() - started) / scrapes
        ok = ProduceResult("topic-0", 0, None, base_offset=0)
        started = time.process_time()
        for _ in range(calls):
            metrics.topics.record_produce([("topic-0", 0, batch)], [ok])
        produce_us = 1e6 * (time.process_time() - started) / calls
        # What a request pays now for its timing: its timer, the context variable set
        # and reset around the handler, one purgatory wait noted, the split recorded.
        started = time.process_time()
        for _ in range(calls):
            timer = RequestTimer(time.perf_counter())
            timer.api = "Produce"
            token = start_timing(timer)
            timer.started = time.perf_counter()
            add_remote(0.001)
            timer.ready = timer.picked = time.perf_counter()
            stop_timing(token)
            metrics.requests.record(timer, time.perf_counter(), response_queue=False)
        request_us = 1e6 * (time.process_time() - started) / calls
    finally:
        server.coordinator.close()
        await server.manager.close()
    return {
        "topics": topics,
        "scrape_bytes": len(body),
        "cpu_ms_per_scrape": round(scrape_ms, 2),
        "record_produce_us": round(produce_us, 2),
        "request_timing_us": round(request_us, 2),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=12)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--calls", type=int, default=20_000)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(measure(args.topics, args.scrapes, args.calls))))


if __name__ == "__main__":
    main()
