"""Event-loop lag of a real broker while it recovers logs and while its cleaner runs.

    python bench/loop_lag_bench.py [--partitions 200] [--recovery-mb 200]
        [--compact-mb 100] [--sections recovery,clean] [--dir DIR]

One ``LocalCluster`` (3 controllers) and one broker, real OS processes. The broker runs
with a lag probe injected from outside (a ``sitecustomize`` on its ``PYTHONPATH`` that
wraps ``asyncio.run``): a task that sleeps 10 ms and writes how late it woke, with the
wall-clock time, to a file. The probe needs nothing from the broker, so the same script
measures any tree (run it with each tree's Python for a before/after).

- ``recovery``: a topic of ``--partitions`` partitions (RF 1) is filled with
  ``--recovery-mb`` MB (``raftka perf produce``, acks=1, 100-byte records), the broker
  is killed with SIGKILL (nothing flushed: flush.ms is Kafka's default) and started
  again. The window is from the restart until /health shows every partition led by it
  and the broker unfenced. Reported: the probe's p99 and max lag in the window, the
  window's length, and the slowest /health answer meanwhile.
- ``clean``: a one-partition topic (segments of a tenth of it, at most 64 MB) is
  filled with ``--compact-mb`` MB of keyed 1000-byte records (10 000 keys), then
  altered to ``cleanup.policy=compact``
  (the broker's ``log.cleaner.backoff.ms`` is 500). The window is the cleaner's pass
  (from its end in /health minus its duration). Besides the probe's lag: consumer long
  polls (``max_wait_ms`` 500 on an empty partition) back to back, each one's lateness
  beyond its 500 ms; and whether /health ever showed the broker fenced (late
  heartbeats) during the pass. Traffic on the partition being cleaned, from before
  the alter until after the pass: a producer sends one record every 50 ms (acks=1,
  waiting for each ack: ``produce_*``, the ack latency of the records in flight during
  the pass) and a consumer of that partition, positioned at its end, long-polls
  (``fetch.max.wait.ms`` 500) and reports how long after its send each record in
  flight during the pass reached it (``consume_*``). While a pass holds the partition (before
  issue #13 item 4) both stall for the pass; beside a pass they should not.

Prints one JSON line per scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson
from broker_bench import RECORD_SIZE, produce  # this folder's (sys.path[0])

from raftka.client import Admin, Consumer, NewTopic, Producer
from raftka.common.structs import TopicPartition
from raftka.local import LocalCluster
from raftka.local.brokers import LocalBrokers
from raftka.local.processes import NodeProcess, http_json, http_post, wait_for

API_TIMEOUT_MS: Final = 60_000
LONG_POLL_MS: Final = 500
KEYS: Final = 10_000
RECORD_BYTES: Final = 1000

# The probe, injected into the broker process only (controllers ignore it).
_SHIM: Final = """
import os, sys
if "broker" in sys.argv and os.environ.get("RAFTKA_LAG_FILE"):
    import asyncio, time
    _path = f"{os.environ['RAFTKA_LAG_FILE']}.{os.getpid()}"
    _run = asyncio.run

    async def _probe():
        with open(_path, "a") as f:
            n = 0
            while True:
                due = time.monotonic() + 0.01
                await asyncio.sleep(0.01)  # the probe: how late does it wake?
                f.write(f"{time.time():.4f} {(time.monotonic() - due) * 1000:.3f}\\n")
                n += 1
                if n % 20 == 0:
                    f.flush()

    def run(main, **kwargs):
        async def wrapped():
            probe = asyncio.get_running_loop().create_task(_probe())
            try:
                return await main
            finally:
                probe.cancel()
        return _run(wrapped(), **kwargs)

    asyncio.run = run
"""


def _lags(lag_file: Path, start: float, end: float) -> dict[str, float]:
    """p50/p99/max of the probe's lags between wall times ``start`` and ``end``."""
    lags: list[float] = []
    for line in lag_file.read_text().splitlines():
        t, _, lag = line.partition(" ")
        if lag and start <= float(t) <= end:
            lags.append(float(lag))
    lags.sort()
    if not lags:
        return {"samples": 0}
    return {
        "samples": len(lags),
        # A blocked loop yields one sample for its whole stall, so percentiles of
        # samples understate it; the time spent late says how long it did not answer.
        "late_s": round(sum(lags) / 1000, 2),
        "lag_p50_ms": round(lags[len(lags) // 2], 2),
        "lag_p99_ms": round(lags[min(len(lags) - 1, int(0.99 * len(lags)))], 2),
        "lag_max_ms": round(lags[-1], 2),
    }


def _lag_file(base: Path, node: NodeProcess) -> Path:
    assert node.popen is not None
    return base / f"lag.{node.popen.pid}"


class _Poller(threading.Thread):
    """Calls ``probe`` back to back until stopped; keeps (wall time, result)."""

    def __init__(self, probe: Callable[[], Any], pause_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.probe = probe
        self.pause_s = pause_s
        self.results: list[tuple[float, Any]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.results.append((time.time(), self.probe()))
            if self.pause_s:
                self.stopped.wait(self.pause_s)  # the probe's period

    def between(self, start: float, end: float) -> list[Any]:
        return [r for t, r in self.results if start <= t <= end]


def _health_probe(node: NodeProcess) -> Callable[[], dict[str, Any]]:
    def probe() -> dict[str, Any]:
        started = time.monotonic()
        try:
            status, body = http_json(node.address, "/health", timeout_s=30)
        except OSError:
            status, body = -1, None
        return {
            "rtt_ms": (time.monotonic() - started) * 1000,
            "status": status,
            "body": body if isinstance(body, dict) else {},
        }

    return probe


def _long_poll_probe(node: NodeProcess, topic: str) -> Callable[[], float]:
    body = orjson.dumps(
        {
            "max_wait_ms": LONG_POLL_MS,
            "min_bytes": 1,
            "partitions": [{"topic": topic, "partition": 0, "fetch_offset": 0}],
        }
    )

    def probe() -> float:
        started = time.monotonic()
        try:
            http_post(node.address, "/v1/fetch", body, "application/json", timeout_s=60)
        except OSError:
            return float("inf")
        return (time.monotonic() - started) * 1000 - LONG_POLL_MS

    return probe


class _Traffic:
    """A producer (one record every 50 ms, acks=1, each ack awaited) and a consumer of
    partition 0 of ``topic``; both record (send wall time, latency ms)."""

    KEY: Final = b"bench-live"

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.stopped = threading.Event()
        self.acks: list[tuple[float, float]] = []
        self.seen: list[tuple[float, float]] = []
        self.errors = 0
        self.positioned = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        self._threads[1].start()
        wait_for(self.positioned.is_set, timeout_s=60, message="the consumer did not start")
        self._threads[0].start()

    def stop(self) -> None:
        self.stopped.set()
        for t in self._threads:
            t.join(120)

    def _produce(self) -> None:
        with Producer(
            bootstrap_servers=self.bootstrap, acks=1, enable_idempotence=False, linger_ms=0
        ) as producer:
            while not self.stopped.is_set():
                sent = time.time()
                future = producer.send(self.topic, b"%.6f" % sent, key=self.KEY, partition=0)
                try:
                    future.result(timeout=120)
                    self.acks.append((sent, (time.time() - sent) * 1000))
                except Exception:
                    self.errors += 1
                self.stopped.wait(0.05)  # the producer's period

    def _consume(self) -> None:
        tp = TopicPartition(self.topic, 0)
        with Consumer(bootstrap_servers=self.bootstrap, fetch_max_wait_ms=LONG_POLL_MS) as c:
            c.assign([tp])
            c.seek_to_end(tp)
            c.poll(timeout_ms=0)
            self.positioned.set()
            while not self.stopped.is_set():
                for records in c.poll(timeout_ms=LONG_POLL_MS).values():
                    now = time.time()
                    for r in records:
                        if r.key == self.KEY:
                            sent = float(r.value)
                            self.seen.append((sent, (now - sent) * 1000))

    @staticmethod
    def summary(
        name: str, samples: list[tuple[float, float]], start: float, end: float
    ) -> dict[str, Any]:
        # Every record in flight during the pass: sent before its end, answered (or
        # delivered) after its start; a record sent just before the pass and held for
        # all of it counts.
        got = sorted(ms for t, ms in samples if t <= end and t + ms / 1000 >= start)
        if not got:
            return {f"{name}_n": 0}
        return {
            f"{name}_n": len(got),
            f"{name}_p50_ms": round(got[len(got) // 2], 1),
            f"{name}_p99_ms": round(got[min(len(got) - 1, int(0.99 * len(got)))], 1),
            f"{name}_max_ms": round(got[-1], 1),
        }


def recovery(base: Path, brokers: LocalBrokers, admin: Admin, partitions: int, mb: int) -> None:
    node = next(iter(brokers.nodes()))
    topic = "recovery"
    admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=API_TIMEOUT_MS)
    # broker_bench's perf produce run (100-byte records), acks=1.
    produce(brokers.bootstrap_servers, topic, mb * 1_000_000 // RECORD_SIZE, "1")
    node.kill()  # kill -9: nothing flushed
    start = time.time()
    node.start()
    health = _Poller(_health_probe(node), pause_s=0.05)
    health.start()

    def recovered() -> bool:
        h = node.health()
        return bool(h and h.get("fenced") is False and h.get("leaders", 0) >= partitions)

    wait_for(recovered, timeout_s=1800, message="the broker did not recover its partitions")
    end = time.time()
    health.stopped.set()
    health.join()
    time.sleep(1.5)  # the probe flushes its file every 20 samples
    answers = health.between(start, end)
    print(
        json.dumps(
            {
                "scenario": "recovery after kill -9",
                "partitions": partitions,
                "mb": mb,
                "window_s": round(end - start, 2),
                **_lags(_lag_file(base, node), start, end),
                "health_rtt_max_ms": round(max((a["rtt_ms"] for a in answers), default=0), 1),
            }
        ),
        flush=True,
    )


def clean(base: Path, brokers: LocalBrokers, admin: Admin, mb: int) -> None:
    node = next(iter(brokers.nodes()))
    topic, idle = "compacted", "idle"
    segment_bytes = min(64 * 1024 * 1024, max(1024 * 1024, mb * 100_000))
    admin.create_topics(
        [
            # Ten segments or more (the active one is never cleaned), at most 64 MB each.
            NewTopic(topic, 1, 1, configs={"segment.bytes": str(segment_bytes)}),
            NewTopic(idle, 1, 1),
        ],
        timeout_ms=API_TIMEOUT_MS,
    )
    value = b"v" * (RECORD_BYTES - 8)
    with Producer(
        bootstrap_servers=brokers.bootstrap_servers, acks=1, enable_idempotence=False, linger_ms=5
    ) as producer:
        for i in range(mb * 1_000_000 // RECORD_BYTES):
            producer.send(topic, value, key=b"k%07d" % (i % KEYS), partition=0)
        producer.flush()
    before = (node.health() or {}).get("log_cleaner") or {}
    passes = before.get("passes_cleaned", 0)
    health = _Poller(_health_probe(node), pause_s=0.05)
    polls = _Poller(_long_poll_probe(node, idle))
    traffic = _Traffic(brokers.bootstrap_servers, topic)
    health.start()
    polls.start()
    traffic.start()
    admin.alter_configs(
        {topic: {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}},
        timeout_ms=API_TIMEOUT_MS,
    )

    def cleaned() -> dict[str, Any] | None:
        cleaner = (node.health() or {}).get("log_cleaner") or {}
        return cleaner if cleaner.get("passes_cleaned", 0) > passes else None

    done = wait_for(cleaned, timeout_s=3600, message="the cleaner did not clean")
    end = time.time()
    start = end - done["last_duration_ms"] / 1000
    time.sleep(1.5)  # a last long poll and the probe's file
    health.stopped.set()
    polls.stopped.set()
    traffic.stop()
    health.join()
    polls.join()
    answers = health.between(start, end)
    late = sorted(polls.between(start, end))
    print(
        json.dumps(
            {
                "scenario": "cleaner pass",
                "mb": mb,
                "pass_s": round(end - start, 2),
                "bytes": f"{done['bytes_read']}->{done['bytes_written']}",
                **_lags(_lag_file(base, node), start, end),
                "long_polls": len(late),
                "long_poll_late_p50_ms": round(statistics.median(late), 1) if late else None,
                "long_poll_late_max_ms": round(late[-1], 1) if late else None,
                "health_rtt_max_ms": round(max((a["rtt_ms"] for a in answers), default=0), 1),
                "fenced_seen": any(a["body"].get("fenced") for a in answers),
                # Traffic on the partition being cleaned, records sent during the pass.
                **_Traffic.summary("produce", traffic.acks, start, end),
                "produce_errors": traffic.errors,
                **_Traffic.summary("consume", traffic.seen, start, end),
            }
        ),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--recovery-mb", type=int, default=200)
    ap.add_argument("--compact-mb", type=int, default=100, help="the issue's figure is 1000")
    ap.add_argument("--sections", default="recovery,clean")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    base = args.dir or Path(tempfile.mkdtemp(prefix="raftka-lag-bench-"))
    shim = base / "shim"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM)
    print(json.dumps({"cores": os.cpu_count(), "load": os.getloadavg(), "dir": str(base)}))
    with LocalCluster(base, extra_properties={"broker.session.timeout.ms": "9000"}) as cluster:
        cluster.start()
        cluster.wait_leader()
        # Only the broker, started after this, sees the probe.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(shim), os.environ.get("PYTHONPATH")) if p
        )
        os.environ["RAFTKA_LAG_FILE"] = str(base / "lag")
        with LocalBrokers(
            cluster, count=1, extra_properties={"log.cleaner.backoff.ms": "500"}
        ) as brokers:
            brokers.start()
            with Admin(
                bootstrap_servers=brokers.bootstrap_servers, default_api_timeout_ms=API_TIMEOUT_MS
            ) as admin:
                if "recovery" in sections:
                    recovery(base, brokers, admin, args.partitions, args.recovery_mb)
                if "clean" in sections:
                    clean(base, brokers, admin, args.compact_mb)


if __name__ == "__main__":
    main()
