"""Where a transaction's time goes: each HTTP call a transactional producer makes,
timed on the client, for ``--transactions`` transactions of ``--records`` records over
3 partitions (local cluster: 3 controllers + 3 brokers), plus the partition leaders'
own WriteTxnMarkers timings from their /metrics.

Usage: ``python bench/txn_profile.py [--records 1] [--transactions 40]``. It wraps the
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
            times[path].append(time.perf_counter() - start)

    async def timed_frame(self: Any, address: str, path: str, *a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return await request_frame(self, address, path, *a, **k)
        finally:
            times[path].append(time.perf_counter() - start)

    async def counted_backoff(self: Any, deadline_ms: int, last: Any) -> None:
        times[f"retry backoff after {last.name}"].append(0.0)
        await backoff(self, deadline_ms, last)

    transport.request_message, transport.request_frame = timed_message, timed_frame
    manager._backoff = counted_backoff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1)
    parser.add_argument("--transactions", type=int, default=40)
    args = parser.parse_args()
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
                start = time.perf_counter()
                p.begin_transaction()
                for i in range(args.records):
                    p.send(topic, b"v" * 100, partition=i % PARTITIONS)
                p.flush()
                p.commit_transaction()
                times["whole transaction"].append(time.perf_counter() - start)
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
    print("WriteTxnMarkers at the leaders (sum and count of total time, ms):")
    print("\n".join(markers))


if __name__ == "__main__":
    main()
