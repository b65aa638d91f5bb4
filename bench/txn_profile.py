"""Where a transaction's time goes: each HTTP call a transactional producer makes,
timed on the client, for ``--transactions`` transactions of ``--records`` records over
3 partitions (local cluster: 3 controllers + 3 brokers), plus the partition leaders'
own WriteTxnMarkers timings from their /metrics.

Usage: ``python bench/txn_profile.py [--records 1] [--transactions 40] [--timeline]``
(``--timeline``: each step's median start and end within a transaction). It wraps the
client transport's two request methods to time them (and counts the transaction
manager's retry backoffs by error); nothing else changes.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from raftka.client import Producer, _transport
from raftka.client.producer import transaction_manager
from raftka.testing import RaftkaCluster

PARTITIONS = 3
PROPS = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}


#: (path, start, end) of each call, perf_counter seconds, for ``--timeline``.
EVENTS: list[tuple[str, float, float]] = []


def instrument(times: dict[str, list[float]]) -> None:
    transport: Any = _transport.Transport
    manager: Any = transaction_manager.TransactionManager
    request_message, request_frame = transport.request_message, transport.request_frame
    backoff = manager._backoff

    async def timed_message(
        self: Any, address: str, method: str, path: str, *a: Any, **k: Any
    ) -> Any:
        start = time.perf_counter()
        try:
            return await request_message(self, address, method, path, *a, **k)
        finally:
            end = time.perf_counter()
            times[path].append(end - start)
            EVENTS.append((path, start, end))

    async def timed_frame(self: Any, address: str, path: str, *a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return await request_frame(self, address, path, *a, **k)
        finally:
            end = time.perf_counter()
            times[path].append(end - start)
            EVENTS.append((path, start, end))

    async def counted_backoff(self: Any, deadline_ms: int, last: Any) -> None:
        times[f"retry backoff after {last.name}"].append(0.0)
        await backoff(self, deadline_ms, last)

    transport.request_message, transport.request_frame = timed_message, timed_frame
    manager._backoff = counted_backoff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1)
    parser.add_argument("--transactions", type=int, default=40)
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="also print, per step of a transaction, its median start and end (ms after "
        "begin_transaction)",
    )
    args = parser.parse_args()
    steps: list[dict[str, tuple[float, float]]] = []
    times: dict[str, list[float]] = collections.defaultdict(list)
    instrument(times)
    with (
        tempfile.TemporaryDirectory(prefix="txn-profile-") as tmp,
        RaftkaCluster.start(Path(tmp), broker_properties=PROPS) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers
        topic = cluster.create_topic("txn-profile", partitions=PARTITIONS)
        with Producer(bootstrap_servers=bootstrap, transactional_id="p", max_block_ms=60_000) as p:
            p.init_transactions()
            times.clear()
            for _ in range(args.transactions):
                EVENTS.clear()
                start = time.perf_counter()
                p.begin_transaction()
                for i in range(args.records):
                    p.send(topic, b"v" * 100, partition=i % PARTITIONS)
                sent = time.perf_counter()
                p.flush()
                flushed = time.perf_counter()
                p.commit_transaction()
                end = time.perf_counter()
                times["whole transaction"].append(end - start)
                step = {"send() loop": (start, sent), "flush()": (sent, flushed)}
                step["commit_transaction()"] = (flushed, end)
                for i, (path, s0, s1) in enumerate(EVENTS):
                    step[f"{i}: {path}"] = (s0, s1)
                steps.append({k: (a - start, b - start) for k, (a, b) in step.items()})
        markers = []
        for address in bootstrap.split(","):
            text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read()
            for line in text.decode().splitlines():
                if (
                    'request="WriteTxnMarkers"' in line
                    and "totaltimems_" in line
                    and "_bucket" not in line
                ):
                    markers.append(f"  {address} {line}")
    for name, values in times.items():
        ordered = sorted(values)
        print(
            f"{name}: {len(values)} calls, median {statistics.median(values) * 1000:.1f} ms, "
            f"p90 {ordered[int(len(ordered) * 0.9)] * 1000:.1f} ms"
        )
    if args.timeline:
        print("timeline (ms after begin_transaction; median start - median end):")
        shapes = collections.Counter(tuple(sorted(s)) for s in steps)
        common = shapes.most_common(1)[0][0]
        alike = [s for s in steps if tuple(sorted(s)) == common]
        print(f"  ({len(alike)} of {len(steps)} transactions made these calls)")
        for key in sorted(common, key=lambda k: statistics.median(s[k][0] for s in alike)):
            a = statistics.median(s[key][0] for s in alike) * 1000
            b = statistics.median(s[key][1] for s in alike) * 1000
            print(f"  {a:7.1f} - {b:7.1f}  {key}")
    print("WriteTxnMarkers at the leaders (sum and count of total time, ms):")
    print("\n".join(markers))


if __name__ == "__main__":
    main()
