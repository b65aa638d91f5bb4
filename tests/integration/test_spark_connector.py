"""The PySpark connector (format "raftka") against a real cluster and a local Spark.

One module-scoped raftka cluster (3 controllers + 3 brokers on loopback) and one
session-scoped SparkSession (``local[2,2]``: a failed task is tried twice) serve every
test; each test uses its own topics. Nothing calls ``spark.dataSource.register``: the
format is found through the installed ``pyspark_raftka`` module, so every test also
checks the auto-registration.

- a batch read of a 3-partition topic returns exactly the records produced (keys,
  values, headers, offsets, timestamps), and startingOffsets/endingOffsets JSON select
  exact ranges;
- a streaming read -> transform -> write with availableNow and maxOffsetsPerTrigger,
  run, grown (more records and a new partition), its last commits/N lost, and run
  again from its checkpoint: every input record reaches the output exactly once, Spark
  did replay batch N, and every micro-batch stayed within the limit; the same
  scenario with replayProtection=false writes the replayed batch twice (the control
  that shows the check can fail);
- bad options fail with a message naming the option;
- isolation.level=read_committed: a batch read returns the committed transaction's
  records and the plain ones, never an aborted or still open transaction's (which a
  read_uncommitted read of the same topic does return: the control), and its range ends
  at the last stable offset;
- the transactional sink (kafka.transactional.id): a streaming query whose UDF fails
  once in one task (Spark retries it: ``local[2,2]``) and which is then restarted from
  its checkpoint with its last commits/N lost writes every input record exactly once
  as a read_committed reader sees the output.

Skipped (with the reason) only when pyspark, pyarrow or Java is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.client import Consumer, NewPartitions, Producer, TopicPartition
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

for _module in ("pyspark", "pyarrow"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(
            f"{_module} is not installed (pip install raftka[spark])", allow_module_level=True
        )
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (java not on PATH, JAVA_HOME unset)", allow_module_level=True)

DEADLINE_S = 30.0
API_TIMEOUT_MS = 20_000
QUERY_TIMEOUT_S = 120
BROKER_PROPERTIES = {
    # Fewer __transaction_state partitions: the cluster is ready sooner.
    "transaction.state.log.num.partitions": "3",
}


class Env(RaftkaCluster):
    def topic(self, name: str, partitions: int = 3) -> str:
        """Create a topic (RF 3, min ISR 2) and wait until every broker knows its leaders."""
        return self.create_topic(name, partitions=partitions, configs={"min.insync.replicas": "2"})


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(tmp_path_factory.mktemp("spark"), broker_properties=BROKER_PROPERTIES) as env:
        yield env


def _registration_path() -> str | None:
    """The folder holding pyspark_raftka.py when Spark's Python workers would not find it
    by themselves: an editable install maps modules through an import hook that
    pkgutil.iter_modules (PySpark's lookup) does not see. A regular install (CI's
    ``pip install .[dev]``) puts it in site-packages and needs nothing."""
    import pkgutil

    if any(m.name == "pyspark_raftka" for m in pkgutil.iter_modules()):
        return None
    import raftka

    src = Path(raftka.__file__ or "").resolve().parents[1]
    assert (src / "pyspark_raftka.py").is_file(), f"pyspark_raftka.py not found in {src}"
    return str(src)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The workers must run this interpreter (the one with raftka and pyarrow).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    extra = _registration_path()
    if extra is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (extra, os.environ.get("PYTHONPATH", "")) if p
        )
    session = (
        # local[N, F]: a failed task is tried up to F times (local[N] never retries).
        SparkSession.builder.master("local[2,2]")
        .appName("raftka-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def _produce(env: Env, topic: str, records: list[tuple[int, bytes, int]]) -> list[Any]:
    """(partition, value, timestamp_ms) each, keyed and with a header; the metadata of
    every acknowledged record."""
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as producer:
        futures = [
            producer.send(
                topic,
                value,
                key=b"k-" + value,
                partition=p,
                timestamp_ms=ts,
                headers=[("h", value[:3])],
            )
            for p, value, ts in records
        ]
        producer.flush(timeout_ms=API_TIMEOUT_MS)
        return [f.result(0) for f in futures]


def _values(env: Env, topic: str, partitions: int) -> list[bytes]:
    """Every value in the topic, read with the plain consumer."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign(tps)
        expected = sum(consumer.end_offsets(tps, API_TIMEOUT_MS).values())
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < expected:
            assert time.monotonic() < deadline, f"read {len(got)} of {expected} from {topic}"
            for records in consumer.poll(1_000).values():
                got.extend(r.value or b"" for r in records)
    return got


def _read(spark: Any, env: Env, **options: str) -> Any:
    reader = spark.read.format("raftka").option("bootstrap.servers", env.bootstrap_servers)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_returns_exact_records_and_ranges(spark: Any, env: Env) -> None:
    """90 records over 3 partitions with chosen timestamps: the batch read returns each
    once with its partition, acknowledged offset, timestamp, key and header; offsets
    JSON (with -2 / -1) selects exactly the asked ranges."""
    topic = env.topic("batch-read")
    base_ms = 1_700_000_000_000
    wanted = [(i % 3, b"v%03d" % i, base_ms + i * 1000) for i in range(90)]
    acked = _produce(env, topic, wanted)
    rows = _read(spark, env, subscribe=topic, includeHeaders="true").collect()
    got = {
        (r.partition, r.offset): (
            r.key,
            r.value,
            int(r.timestamp.timestamp() * 1000),
            r.timestampType,
            [(h.key, h.value) for h in r.headers],
            r.topic,
        )
        for r in rows
    }
    assert len(rows) == len(got) == 90
    for (_p, value, ts), md in zip(wanted, acked, strict=True):
        assert got[(md.partition, md.offset)] == (
            b"k-" + value,
            value,
            ts,
            0,
            [("h", value[:3])],
            topic,
        )

    ranged = _read(
        spark,
        env,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2, "2": 29}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 8, "1": 2, "2": -1}}}}',
    ).collect()
    assert sorted((r.partition, r.offset) for r in ranged) == [
        (0, 5),
        (0, 6),
        (0, 7),
        (1, 0),
        (1, 1),
        (2, 29),
    ]


def _run_available_now(
    spark: Any,
    env: Env,
    source: str,
    sink: str,
    checkpoint: Path,
    *,
    sink_options: dict[str, str],
    transform: Callable[[Any], Any] | None = None,
) -> list[dict[str, Any]]:
    """read -> ``transform`` (default: upper-case the value) -> write, availableNow, 40
    records per trigger at most; the query's progress reports."""
    df = (
        spark.readStream.format("raftka")
        .option("bootstrap.servers", env.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
    )
    if transform is None:
        df = df.selectExpr("key", "upper(cast(value as string)) AS value")
    else:
        df = transform(df)
    writer = (
        df.writeStream.format("raftka")
        .option("bootstrap.servers", env.bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
    )
    for k, v in sink_options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    assert finished, f"the availableNow query did not finish in {QUERY_TIMEOUT_S} s"
    assert query.exception() is None, query.exception()
    return [dict(p) for p in query.recentProgress]


def _lose_last_commit(checkpoint: Path) -> int:
    """Delete Spark's last commits/N (and its .N.crc), as a crash between the sink
    commit and Spark's own commit file would leave it; returns N."""
    commits = checkpoint / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


@pytest.mark.parametrize("protect", [True, False], ids=["replay-protected", "unprotected"])
def test_streaming_restart_and_replayed_batch(
    spark: Any, env: Env, tmp_path: Path, protect: bool
) -> None:
    """100 records, an availableNow run (3 batches of <= 40), then 60 more records and a
    4th partition (created while the query is stopped; its records must be read from
    its earliest offset), the last commits/N deleted, and a second run from the same
    checkpoint. Spark replays batch N; with replay protection every input value reaches
    the output exactly once, without it batch N's records appear twice."""
    name = "protected" if protect else "unprotected"
    source = env.topic(f"stream-in-{name}")
    sink = env.topic(f"stream-out-{name}")
    checkpoint = tmp_path / f"checkpoint-{name}"
    first = [(i % 3, b"e%04d" % i, 1_000 + i) for i in range(100)]
    _produce(env, source, first)
    options = {"replayProtection": str(protect).lower()}
    progress1 = _run_available_now(spark, env, source, sink, checkpoint, sink_options=options)

    env.admin.create_partitions({source: NewPartitions(4)}, timeout_ms=API_TIMEOUT_MS)
    env.wait_topic(source, 4)
    second = [(i % 4, b"e%04d" % i, 1_000 + i) for i in range(100, 160)]
    _produce(env, source, second)
    lost = _lose_last_commit(checkpoint)
    progress2 = _run_available_now(spark, env, source, sink, checkpoint, sink_options=options)

    batches = [(p["batchId"], p["numInputRows"]) for p in progress1 + progress2]
    assert all(rows <= 40 for _, rows in batches), batches
    # Spark ran batch N again (its offsets were logged, its commit file was not).
    replayed = progress2[0]["numInputRows"]
    assert progress2[0]["batchId"] == lost and replayed > 0, batches
    assert sum(rows for _, rows in batches) == 160 + replayed

    expected = Counter(v.upper() for _, v, _ in first + second)
    got = Counter(_values(env, sink, 3))
    if protect:
        assert got == expected
    else:
        assert set(got) == set(expected)
        assert sum(got.values()) == 160 + replayed


def test_min_partitions_cuts_the_read_into_more_tasks(spark: Any, env: Env) -> None:
    """minPartitions=4 over one Kafka partition of 40 records: four Spark partitions of
    10 consecutive offsets each, the same 40 records as the one-task read."""
    topic = env.topic("min-partitions", partitions=1)
    _produce(env, topic, [(0, b"v%02d" % i, 1_700_000_000_000 + i) for i in range(40)])
    whole = _read(spark, env, subscribe=topic)
    cut = _read(spark, env, subscribe=topic, minPartitions="4")
    assert whole.rdd.getNumPartitions() == 1
    assert cut.rdd.getNumPartitions() == 4
    per_task = cut.rdd.mapPartitions(lambda rows: [sorted(r.offset for r in rows)]).collect()
    assert per_task == [list(range(i, i + 10)) for i in range(0, 40, 10)]
    assert sorted(r.value for r in cut.collect()) == sorted(r.value for r in whole.collect())


def test_bad_options_name_the_option(spark: Any, env: Env) -> None:
    """Two subscription options, malformed offsets JSON, an unknown topic (with the
    default failOnDataLoss=true) and an unknown option each fail when the query is
    planned, with a message naming the option."""
    topic = env.topic("bad-options", partitions=1)
    cases = [
        ({"subscribe": topic, "subscribePattern": "bad.*"}, "subscribePattern"),
        ({"subscribe": topic, "startingOffsets": '{"bad-options": {"0": }'}, "startingOffsets"),
        ({"subscribe": topic, "endingOffsets": '{"bad-options": {"x": 3}}'}, "endingOffsets"),
        ({"subscribe": "no-such-topic"}, "failOnDataLoss"),
        # An unknown option (a typo): refused, not ignored (Spark lower-cases names).
        ({"subscribe": topic, "maxOffsetPerTrigger": "5"}, "maxoffsetpertrigger is not one"),
    ]
    for options, named in cases:
        with pytest.raises(Exception) as failure:
            _read(spark, env, **options).collect()
        assert named in str(failure.value), (options, str(failure.value)[:2000])


def _read_committed(env: Env, topic: str, partitions: int) -> list[bytes]:
    """Every value a read_committed consumer reads from the topic, up to its last stable
    offsets (positions move past markers and aborted records, so they are compared with
    the end offsets rather than counted)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        bootstrap_servers=env.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign(tps)
        end = consumer.end_offsets(tps, API_TIMEOUT_MS)
        got: list[bytes] = []

        def done() -> bool:
            for records in consumer.poll(200).values():
                got.extend(r.value or b"" for r in records)
            return all(consumer.position(tp) >= end[tp] for tp in tps)

        wait_for(done, timeout_s=DEADLINE_S, message=f"read_committed of {topic} up to {end}")
    return got


def test_read_committed_source_skips_aborted_and_open_transactions(spark: Any, env: Env) -> None:
    """Plain records, a committed transaction, an aborted one and one left open, over 3
    partitions: isolation.level=read_committed (either name) reads the plain and the
    committed records only, and each partition's range ends at the open transaction's
    first offset (the LSO); read_uncommitted reads all of them (the control)."""
    topic = env.topic("rc-source")
    _produce(env, topic, [(p, b"plain-%d" % p, 1_000) for p in range(3)])
    txn = {"bootstrap_servers": env.bootstrap_servers, "max_block_ms": API_TIMEOUT_MS}
    with Producer(transactional_id="spark-rc-source", **txn) as producer:
        producer.init_transactions()
        for word in (b"committed", b"aborted"):
            producer.begin_transaction()
            for p in range(3):
                producer.send(topic, word + b"-%d" % p, partition=p)
            if word == b"committed":
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
        producer.begin_transaction()
        opened = [producer.send(topic, b"open-%d" % p, partition=p) for p in range(3)]
        producer.flush()
        open_at = {md.partition: md.offset for md in (f.result(0) for f in opened)}

        expected = sorted(b"%s-%d" % (w, p) for w in (b"plain", b"committed") for p in range(3))
        for key in ("isolation.level", "kafka.isolation.level"):
            rows = _read(spark, env, subscribe=topic, **{key: "read_committed"}).collect()
            assert sorted(r.value for r in rows) == expected, key
        everything = _read(spark, env, subscribe=topic).collect()
        assert sorted(r.value for r in everything) == sorted(
            expected + [b"%s-%d" % (w, p) for w in (b"aborted", b"open") for p in range(3)]
        )
        # The streaming source's first micro-batch ends at the LSO (the open
        # transaction's first offset), asked of the driver-side reader directly.
        from raftka.client.spark.options import parse_source_options
        from raftka.client.spark.source import RaftkaStreamReader

        stream = RaftkaStreamReader(
            parse_source_options(
                {
                    "bootstrap.servers": env.bootstrap_servers,
                    "subscribe": topic,
                    "startingOffsets": "earliest",
                    "isolation.level": "read_committed",
                },
                streaming=True,
            )
        )
        try:
            start = stream.initialOffset()
            end = stream.latestOffset(start, stream.getDefaultReadLimit())
        finally:
            stream.stop()
        assert end == {topic: {str(p): open_at[p] for p in range(3)}}
        producer.abort_transaction()


def test_transactional_sink_writes_once_across_task_retry_and_restart(
    spark: Any, env: Env, tmp_path: Path
) -> None:
    """read -> a UDF that fails once, in one task, on one value -> write with
    kafka.transactional.id, availableNow, <= 40 records per trigger. Spark retries the
    failed task (its first attempt's open transaction is fenced and aborted by the
    retry's InitProducerId); then more records arrive, the query's last commits/N is
    lost (a crash after the sink's transactions committed, before Spark's commit file)
    and it runs again from its checkpoint: Spark replays batch N and every task of it
    finds its batch committed. A read_committed reader of the output sees every input
    record exactly once."""
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import StringType

    source = env.topic("txn-sink-in")
    sink = env.topic("txn-sink-out")
    checkpoint = tmp_path / "checkpoint-txn"
    failed_once = tmp_path / "failed-once"
    flag = str(failed_once)

    def upper_failing_once(value: bytes) -> str:
        # Runs in Spark's Python workers: the flag file is the state shared by attempts.
        import os as _os

        text = value.decode()
        if text == "e0050" and not _os.path.exists(flag):
            with open(flag, "w") as f:
                f.write("failed")
            raise RuntimeError("injected failure (first attempt of this task)")
        return text.upper()

    # useArrow=False: a plain Python UDF (the Arrow one needs pandas, not installed).
    failing = udf(upper_failing_once, StringType(), useArrow=False)

    def run() -> list[dict[str, Any]]:
        return _run_available_now(
            spark,
            env,
            source,
            sink,
            checkpoint,
            sink_options={"kafka.transactional.id": "spark-etl"},
            transform=lambda df: df.select(col("key"), failing(col("value")).alias("value")),
        )

    first = [(i % 3, b"e%04d" % i, 1_000 + i) for i in range(100)]
    _produce(env, source, first)
    progress1 = run()
    assert failed_once.exists(), "the UDF never failed: the retry was not exercised"

    second = [(i % 3, b"e%04d" % i, 1_000 + i) for i in range(100, 160)]
    _produce(env, source, second)
    lost = _lose_last_commit(checkpoint)
    progress2 = run()
    batches = [(p["batchId"], p["numInputRows"]) for p in progress1 + progress2]
    assert progress2[0]["batchId"] == lost and progress2[0]["numInputRows"] > 0, batches

    expected = Counter(v.decode().upper().encode() for _, v, _ in first + second)
    assert Counter(_read_committed(env, sink, 3)) == expected
