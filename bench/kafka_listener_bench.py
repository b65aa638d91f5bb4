"""confluent-kafka (librdkafka) through raftka's Kafka listener: produce and consume.

    python bench/kafka_listener_bench.py [--records N] [--repeats N] [--sasl-ssl]
        [--consumer-defaults] [--py-spy DIR]

One ``LocalCluster`` (3 controllers) + ``LocalBrokers`` (3 brokers, each with a Kafka
listener) on loopback, real OS processes on this shared machine. Each run: a fresh
topic of 3 partitions, RF 3, min.insync.replicas 2; confluent-kafka's producer with
acks=all, its default batching, no compression, ``--records`` 100-byte values, timed
from the first produce() to the end of flush(); then a confluent-kafka consumer
(assigned partitions, from the beginning, ``fetch.queue.backoff.ms=10``: see ``run``;
``--consumer-defaults`` keeps librdkafka's 1000) reads them all back, timed likewise.
Broker CPU is the brokers' user+system time over the run (from /proc), per record; the
client's cores are the benchmark process's own CPU time over the phase, per second.

Prints one JSON line per run and the medians.

``--sasl-ssl`` (issue #17's benchmark): a second cluster whose Kafka listeners are
SASL_SSL (``raftka.local.secure``, as ``raftka up --secure``: a throwaway CA,
SCRAM-SHA-512, the authorizer on) runs beside the PLAINTEXT one, its clients a user
``bench`` that is no super user and may do what two ACLs grant (``BENCH_ACLS``), so
each request pays the authorizer's check; the
repeats alternate between the two, so both see the same machine, and the medians'
ratios SASL_SSL / PLAINTEXT are printed.

``--py-spy DIR``: the last repeat runs with ``py-spy record`` attached to each broker
(py-spy is not a dependency: ``pip install py-spy``); their collapsed stacks are
written to DIR, and the functions taking the most of the brokers' samples (self and
inclusive) are printed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from raftka.client import Admin
from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.processes import http_json
from raftka.local.secure import add_scram_user, sasl_ssl_setup, wait_until_brokers_know

RECORD_SIZE = 100
#: The consumer's fetch.queue.backoff.ms (see ``run``); --consumer-defaults: 1000.
FETCH_QUEUE_BACKOFF_MS = 10
PARTITIONS = 3


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def run(
    kafka: str,
    pids: list[int],
    topic: str,
    records: int,
    security: dict[str, str],
    *,
    fetch_queue_backoff_ms: int = FETCH_QUEUE_BACKOFF_MS,
) -> dict[str, Any]:
    """One produce-then-consume run; ``security`` is the clients' security settings."""
    kafka_config = {"bootstrap.servers": kafka, **security}
    admin = AdminClient(kafka_config)
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        topic
    ].result(60)
    wait_for(
        lambda: all(
            p.leader >= 0
            for p in admin.list_topics(topic=topic, timeout=10).topics[topic].partitions.values()
        ),
        timeout_s=60,
        message="no leaders",
    )
    producer = Producer({**kafka_config, "acks": "all", "compression.type": "none"})
    value = b"x" * RECORD_SIZE
    cpu0, own0, t0 = cpu_s(pids), _own_cpu_s(), time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(300) == 0
    produce_s, produce_cpu = time.perf_counter() - t0, cpu_s(pids) - cpu0
    produce_own = _own_cpu_s() - own0

    consumer = Consumer(
        {
            **kafka_config,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by
            # default) once its local queue holds queued.min.messages (100,000): with
            # the default, the timing holds a second of client-side pause
            # (docs/benchmarks.md measures both).
            "fetch.queue.backoff.ms": fetch_queue_backoff_ms,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, cpu0, own0, t0 = 0, cpu_s(pids), _own_cpu_s(), time.perf_counter()
    while got < records:
        # Never ask for more than is left: consume() waits its whole timeout for a
        # batch it cannot fill, which timed the last call's second, not the brokers.
        for m in consumer.consume(min(10_000, records - got), 1.0):
            if m.error() is None:
                got += 1
    consume_s, consume_cpu = time.perf_counter() - t0, cpu_s(pids) - cpu0
    consume_own = _own_cpu_s() - own0
    consumer.close()
    return {
        "records": records,
        "produce_records_per_s": round(records / produce_s),
        "produce_broker_cpu_us_per_record": round(produce_cpu / records * 1e6, 1),
        # The benchmark's own process (librdkafka's threads and the Python loop), in
        # cores: near 1 means the client, not the brokers, bounds the rate.
        "produce_client_cores": round(produce_own / produce_s, 2),
        "consume_records_per_s": round(records / consume_s),
        "consume_broker_cpu_us_per_record": round(consume_cpu / records * 1e6, 1),
        "consume_client_cores": round(consume_own / consume_s, 2),
    }


#: What the benchmark's user "bench" is granted: everything on its topics (create,
#: write, read, describe) and READ on its consumers' groups.
BENCH_ACLS = (
    AclBinding(
        ResourcePattern(ResourceType.TOPIC, "bench-", PatternType.PREFIXED),
        AccessControlEntry("User:bench", "*", AclOperation.ALL, AclPermissionType.ALLOW),
    ),
    AclBinding(
        ResourcePattern(ResourceType.GROUP, "bench-", PatternType.PREFIXED),
        AccessControlEntry("User:bench", "*", AclOperation.READ, AclPermissionType.ALLOW),
    ),
)


def _grant_bench(brokers: LocalBrokers) -> None:
    """BENCH_ACLS committed, and in every broker's image (they reach it a moment later)."""
    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_acls(BENCH_ACLS)

    def everywhere() -> bool:
        for node in brokers.nodes():
            status, body = http_json(node.address, "/v1/acls?principal=User:bench")
            if status != 200 or len(body.get("acls", [])) < len(BENCH_ACLS):
                return False
        return True

    wait_for(everywhere, timeout_s=60, message="the brokers never learnt bench's ACLs")


def _py_spy(pids: list[int], out: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy sampling each broker until stopped (SIGINT), collapsed stacks to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                *("py-spy", "record", "--format", "raw", "--rate", "200", "--nonblocking"),
                *("-o", str(out / f"broker-{pid}.txt"), "-p", str(pid)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


def _py_spy_summary(spies: list[subprocess.Popen[bytes]], out: Path, top: int = 25) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        spy.wait(60)
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for path in out.glob("broker-*.txt"):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            n = int(count)
            frames = stack.split(";")
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                within[frame] += n
    print(f"py-spy: {total} samples over the brokers; self time:")
    for frame, n in own.most_common(top):
        print(f"  {n / total:6.1%}  {frame}")
    print("inclusive:")
    for frame, n in within.most_common(top * 2):
        print(f"  {n / total:6.1%}  {frame}")


def _medians(results: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sasl-ssl", action="store_true", help="also a SASL_SSL cluster")
    parser.add_argument(
        "--consumer-defaults",
        action="store_true",
        help="leave librdkafka's fetch.queue.backoff.ms at its default (1000)",
    )
    parser.add_argument("--py-spy", type=Path, default=None, help="profile the last repeat")
    args = parser.parse_args()
    backoff_ms = 1000 if args.consumer_defaults else FETCH_QUEUE_BACKOFF_MS
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        setups: list[tuple[str, str, list[int], dict[str, str]]] = []
        for protocol in ("PLAINTEXT", "SASL_SSL") if args.sasl_ssl else ("PLAINTEXT",):
            props: dict[str, str] = {}
            security: dict[str, str] = {}
            # The brokers' super user is "admin"; the clients are "bench", who may do only
            # what ACLs grant it, so every request goes through the authorizer's rule.
            setup = sasl_ssl_setup(tmp / "pki", user="admin") if protocol == "SASL_SSL" else None
            client = (
                dataclasses.replace(setup, user="bench", password="bench-secret")
                if setup is not None
                else None
            )
            if setup is not None and client is not None:
                props, security = setup.broker_properties, client.client_config
            cluster = stack.enter_context(LocalCluster(tmp / protocol))
            cluster.start()
            cluster.wait_leader()
            brokers = stack.enter_context(
                LocalBrokers(
                    cluster,
                    extra_properties=props,
                    kafka_listener=True,
                    kafka_security_protocol=protocol,
                )
            )
            brokers.start()
            if client is not None:
                add_scram_user(brokers.bootstrap_servers, client, timeout_ms=60_000)
                _grant_bench(brokers)
                wait_until_brokers_know([b.address for b in brokers.nodes()], client, timeout_s=60)
            pids = [b.popen.pid for b in brokers.nodes() if b.popen is not None]
            setups.append((protocol, brokers.kafka_bootstrap_servers, pids, security))
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in setups}
        for i in range(args.repeats):
            for protocol, kafka, pids, security in setups:
                profiled = args.py_spy is not None and i == args.repeats - 1
                out = args.py_spy / protocol if args.py_spy is not None else tmp
                spies = _py_spy(pids, out) if profiled else []
                result = run(
                    kafka,
                    pids,
                    f"bench-{i}",
                    args.records,
                    security,
                    fetch_queue_backoff_ms=backoff_ms,
                )
                if spies:
                    _py_spy_summary(spies, out)
                print(json.dumps({"security_protocol": protocol, **result}), flush=True)
                results[protocol].append(result)
        medians = {name: _medians(runs) for name, runs in results.items()}
        print(json.dumps({"median": medians}), flush=True)
        if args.sasl_ssl:
            plain, secure = medians["PLAINTEXT"], medians["SASL_SSL"]
            ratios = {
                k: round(secure[k] / plain[k], 2)
                for k in ("produce_records_per_s", "consume_records_per_s")
            }
            print(json.dumps({"sasl_ssl_vs_plaintext": ratios}), flush=True)


if __name__ == "__main__":
    main()
