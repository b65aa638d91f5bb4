"""Spark connector benchmark: rows/s through the streaming source and through the sink,
against the plain Python client in the same run.

    python bench/spark_bench.py [--records N] [--repeats R] [--dir DIR] [--min-partitions M]

One ``LocalCluster`` (3 controllers) + ``LocalBrokers`` (3 brokers) on loopback and one
local Spark (``local[2]``), all on this machine. The input topic has 3 partitions (RF 3,
min.insync.replicas 2) and holds N records of 100-byte values, filled once (not timed).
Each figure is the median of R runs:

- ``plain consumer``: one raftka ``Consumer`` assigned the 3 partitions reads the N
  records (the Python client's own rate, no Spark);
- ``streaming source``: ``readStream.format("raftka")`` from earliest, trigger
  availableNow, into Spark's ``noop`` sink, each run with a fresh checkpoint; the time
  from ``start()`` to termination (query start-up included); each micro-batch's phases
  (Spark's ``durationMs``: ``addBatch`` is the reading) are printed too;
- with ``--min-partitions M``, the streaming source again with ``minPartitions=M``;
- ``plain producer``: one ``AsyncProducer`` (acks=all) sends N 100-byte records;
- ``sink``: ``df.write.format("raftka")`` of N rows (100-byte binary values made by
  ``spark.range``), acks=all, into a 3-partition topic.

Prints one JSON line per run and a markdown table at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftka.client import Admin, AsyncProducer, Consumer, NewTopic, TopicPartition
from raftka.testing import RaftkaCluster

VALUE_BYTES = 100
PARTITIONS = 3
TIMEOUT_MS = 60_000


def _topic(admin: Admin, name: str) -> str:
    admin.create_topics(
        [NewTopic(name, PARTITIONS, 3, configs={"min.insync.replicas": "2"})],
        timeout_ms=TIMEOUT_MS,
    )
    return name


async def _fill(bootstrap: str, topic: str, records: int) -> None:
    value = b"x" * VALUE_BYTES
    async with AsyncProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=262_144
    ) as producer:
        for i in range(records):
            await producer.send(topic, value, partition=i % PARTITIONS)
            if i % 1024 == 0:
                await asyncio.sleep(0)
        await producer.flush(timeout_ms=TIMEOUT_MS)


def _plain_consume(bootstrap: str, topic: str, records: int) -> None:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_poll_records=8192,
    ) as consumer:
        consumer.assign(tps)
        got = 0
        deadline = time.monotonic() + 600
        while got < records:
            assert time.monotonic() < deadline, f"plain consumer read {got} of {records}"
            got += sum(len(v) for v in consumer.poll(1_000).values())


def _spark() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pkgutil

    if not any(m.name == "pyspark_raftka" for m in pkgutil.iter_modules()):
        # An editable install: show PySpark's lookup the registration module.
        import raftka

        src = str(Path(raftka.__file__ or "").resolve().parents[1])
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH", "")) if p
        )
    session = (
        SparkSession.builder.master("local[2]")
        .appName("raftka-spark-bench")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _stream_source(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, min_partitions: int | None = None
) -> None:
    reader = (
        spark.readStream.format("raftka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if min_partitions is not None:
        reader = reader.option("minPartitions", str(min_partitions))
    query = (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(1800), "the streaming source run did not finish"
    assert query.exception() is None, query.exception()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    assert rows > 0, "the streaming source read nothing"
    # Where a run's time goes: Spark's own phases of each micro-batch (ms), so the
    # per-query cost can be told from the reading (addBatch runs the source's tasks).
    for p in query.recentProgress:
        print(
            json.dumps({"micro_batch": p["batchId"], "rows": p["numInputRows"], **p["durationMs"]})
        )


def _sink(spark: Any, bootstrap: str, topic: str, records: int) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    df = spark.range(records, numPartitions=2).select(
        F.lpad(F.col("id").cast("string"), VALUE_BYTES, "x").cast("binary").alias("value")
    )
    (
        df.write.format("raftka")
        .option("bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def _timed(label: str, records: int, run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    rate = records / elapsed
    print(json.dumps({"bench": label, "records": records, "seconds": elapsed, "rows_per_s": rate}))
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--min-partitions",
        type=int,
        default=None,
        help="also time the streaming source with this minPartitions",
    )
    args = parser.parse_args()
    n, repeats = args.records, args.repeats
    base = args.dir or Path(tempfile.mkdtemp(prefix="raftka-spark-bench-"))
    results: dict[str, list[float]] = {}
    with RaftkaCluster.start(base / "cluster") as cluster:
        brokers = cluster.brokers
        bootstrap = brokers.bootstrap_servers
        with Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=TIMEOUT_MS) as admin:
            source = _topic(admin, "bench-in")
            time.sleep(2)  # let every broker learn the new leaders before the fill
            asyncio.run(_fill(bootstrap, source, n))
            spark = _spark()
            try:
                for r in range(repeats):
                    results.setdefault("plain consumer", []).append(
                        _timed("plain consumer", n, lambda: _plain_consume(bootstrap, source, n))
                    )
                    checkpoint = base / f"checkpoint-{r}"
                    results.setdefault("streaming source", []).append(
                        _timed(
                            "streaming source",
                            n,
                            lambda c=checkpoint: _stream_source(spark, bootstrap, source, c),  # type: ignore[misc]
                        )
                    )
                    if args.min_partitions is not None:
                        label = f"streaming source, minPartitions={args.min_partitions}"
                        checkpoint = base / f"checkpoint-{r}-min"
                        results.setdefault(label, []).append(
                            _timed(
                                label,
                                n,
                                lambda c=checkpoint: _stream_source(  # type: ignore[misc]
                                    spark, bootstrap, source, c, args.min_partitions
                                ),
                            )
                        )
                    out = _topic(admin, f"bench-out-producer-{r}")
                    time.sleep(2)
                    results.setdefault("plain producer", []).append(
                        _timed(
                            "plain producer",
                            n,
                            lambda o=out: asyncio.run(_fill(bootstrap, o, n)),
                        )  # type: ignore[misc]
                    )
                    out = _topic(admin, f"bench-out-sink-{r}")
                    time.sleep(2)
                    results.setdefault("sink", []).append(
                        _timed("sink", n, lambda o=out: _sink(spark, bootstrap, o, n))  # type: ignore[misc]
                    )
            finally:
                spark.stop()
    print()
    print(f"| path ({n:,} records of {VALUE_BYTES} bytes, median of {repeats}) | rows/s |")
    print("|---|---|")
    for label, rates in results.items():
        print(f"| {label} | {statistics.median(rates):,.0f} |")
    consumer, source = (
        statistics.median(results["plain consumer"]),
        statistics.median(results["streaming source"]),
    )
    producer, sink = (
        statistics.median(results["plain producer"]),
        statistics.median(results["sink"]),
    )
    print(
        f"\nsource / plain consumer: {source / consumer:.2f}x; sink / plain producer: "
        f"{sink / producer:.2f}x"
    )


if __name__ == "__main__":
    main()
