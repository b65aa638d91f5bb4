"""Transactional produce against idempotent produce, and read_committed latency, on a
local cluster (3 controllers + 3 brokers, separate processes).

* **throughput**: ``--records`` records of ``--record-size`` bytes to a 3-partition
  topic (acks=all), by an idempotent producer (one flush at the end) and by a
  transactional one committing every 1, 10, 100 and 1000 records, in the same run;
  records/s, the median of ``--repeats`` runs, and the ratio to idempotent.
* **fixed cost**: per transaction size, the mean time of ``begin..commit`` minus what
  the same records cost idempotently, i.e. what one transaction adds.
* **consume-transform-produce**: ``--records`` records read from an input topic and
  written, transformed, to an output topic, one poll (up to 500 records) at a time:
  transactionally (read_committed, ``send_offsets_to_transaction``, commit) against
  the same loop without transactions (acks=all flush, then a synchronous offset
  commit), records/s, medians of ``--repeats``.
* **latency**: a record sent then committed (transactional) or flushed (idempotent),
  until a read_committed / read_uncommitted consumer polls it; median and p99 of
  ``--samples``.

Usage: ``python bench/txn_bench.py [--records 2000] [--repeats 3] [--samples 50]
[--sizes 1,10,100,1000]`` (``--sizes``: records per transaction).
The machine is shared while it runs (say so with the numbers).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from _report import print_results

from raftka.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from raftka.testing import RaftkaCluster

PARTITIONS = 3
TXN_SIZES = (1, 10, 100, 1000)
PROPS = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


def produce_idempotent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    with Producer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all") as p:
        # Metadata and InitProducerId first, as init_transactions does for the other.
        p.send(topic, value, partition=0)
        p.flush()
        start = time.perf_counter()
        for i in range(n):
            p.send(topic, value, partition=i % PARTITIONS)
        p.flush()
        return time.perf_counter() - start


def produce_transactional(
    bootstrap: str, topic: str, n: int, value: bytes, *, per_txn: int, tid: str
) -> float:
    with Producer(bootstrap_servers=bootstrap, transactional_id=tid, max_block_ms=60_000) as p:
        p.init_transactions()
        start = time.perf_counter()
        sent = 0
        while sent < n:
            p.begin_transaction()
            for _ in range(min(per_txn, n - sent)):
                p.send(topic, value, partition=sent % PARTITIONS)
                sent += 1
            p.commit_transaction()
        return time.perf_counter() - start


def consume_transform_produce(
    bootstrap: str, source: str, sink: str, n: int, *, transactional: bool, run: str
) -> float:
    """Seconds to move ``n`` records from ``source`` to ``sink`` (see the docstring)."""
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=f"ctp-{run}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    parts = [TopicPartition(source, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    config: dict[str, Any] = (
        {"transactional_id": f"ctp-{run}"}
        if transactional
        else {"enable_idempotence": True, "acks": "all"}
    )
    moved = 0
    with Producer(bootstrap_servers=bootstrap, max_block_ms=60_000, **config) as p:
        if transactional:
            p.init_transactions()
        start = time.perf_counter()
        while moved < n:
            batch = consumer.poll(1000)
            if not batch:
                if time.perf_counter() - start > 120:
                    raise RuntimeError(f"consume-transform-produce: stuck at {moved} of {n}")
                continue
            if transactional:
                p.begin_transaction()
            offsets: dict[TopicPartition, OffsetAndMetadata] = {}
            for tp, records in batch.items():
                for r in records:
                    p.send(sink, (r.value or b"").upper(), partition=tp.partition)
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1)
                moved += len(records)
            if transactional:
                p.send_offsets_to_transaction(offsets, consumer.group_metadata())
                p.commit_transaction()
            else:
                p.flush()
                consumer.commit(offsets)
        elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def latency(
    bootstrap: str,
    topic: str,
    samples: int,
    isolation: Literal["read_committed", "read_uncommitted"],
    tid: str,
) -> list[float]:
    """Seconds from send to poll, one record at a time, partition 0."""
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        auto_offset_reset="latest",
        fetch_max_wait_ms=50,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    transactional = isolation == "read_committed"
    config: dict[str, Any] = (
        {"transactional_id": tid} if transactional else {"enable_idempotence": True}
    )
    out: list[float] = []
    with Producer(bootstrap_servers=bootstrap, acks="all", **config) as p:
        if transactional:
            p.init_transactions()
        for _ in range(samples):
            start = time.perf_counter()
            if transactional:
                p.begin_transaction()
            p.send(topic, b"x", partition=0)
            if transactional:
                p.commit_transaction()
            else:
                p.flush()
            got = 0
            while not got:
                got = sum(len(r) for r in consumer.poll(1000).values())
                if time.perf_counter() - start > 30:
                    raise RuntimeError(f"{isolation}: record not seen in 30 s")
            out.append(time.perf_counter() - start)
    consumer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, TXN_SIZES)),
        help="records per transaction, comma-separated (default: %(default)s)",
    )
    args = parser.parse_args()
    value = b"v" * args.record_size
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="txn-bench-") as tmp,
        RaftkaCluster.start(Path(tmp), broker_properties=PROPS) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers
        topic = cluster.create_topic("txn-bench", partitions=PARTITIONS)
        # Warm-up: the coordinators' topics and the connections.
        produce_transactional(bootstrap, topic, 10, value, per_txn=10, tid="warm")
        idem = [
            produce_idempotent(bootstrap, topic, args.records, value) for _ in range(args.repeats)
        ]
        idem_s = statistics.median(idem)
        results.append({"mode": "idempotent", "records_per_s": round(args.records / idem_s)})
        for size in (int(s) for s in args.sizes.split(",")):
            # Small transactions are slow: at most 200 of them per run.
            n = min(args.records, 200 * size)
            runs = [
                produce_transactional(
                    bootstrap, topic, n, value, per_txn=size, tid=f"bench-{size}-{r}"
                )
                for r in range(args.repeats)
            ]
            txn_s = statistics.median(runs)
            rate = n / txn_s
            txns = -(-n // size)
            fixed_ms = (txn_s - idem_s * n / args.records) / txns * 1000
            results.append(
                {
                    "mode": f"transactional {size}/txn",
                    "records_per_s": round(rate),
                    "ratio_to_idempotent": round(rate / (args.records / idem_s), 3),
                    "ms_added_per_txn": round(fixed_ms, 1),
                }
            )
        source = cluster.create_topic("ctp-in", partitions=PARTITIONS)
        sink = cluster.create_topic("ctp-out", partitions=PARTITIONS)
        produce_idempotent(bootstrap, source, args.records, value)
        base_rate = 0.0
        for transactional in (False, True):
            runs = [
                consume_transform_produce(
                    bootstrap,
                    source,
                    sink,
                    args.records,
                    transactional=transactional,
                    run=f"{transactional}-{r}",
                )
                for r in range(args.repeats)
            ]
            rate = args.records / statistics.median(runs)
            row: dict[str, Any] = {
                "mode": "consume-transform-produce "
                + ("transactional" if transactional else "plain (acks=all, sync commit)"),
                "records_per_s": round(rate),
            }
            if transactional:
                row["ratio_to_plain"] = round(rate / base_rate, 3)
            else:
                base_rate = rate
            results.append(row)
        for isolation in ("read_uncommitted", "read_committed"):
            lat = sorted(latency(bootstrap, topic, args.samples, isolation, "bench-latency"))
            results.append(
                {
                    "mode": f"end-to-end {isolation}"
                    + (" (txn per record)" if isolation == "read_committed" else ""),
                    "median_ms": round(statistics.median(lat) * 1000, 1),
                    "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
                }
            )
    print_results(results)


if __name__ == "__main__":
    main()
