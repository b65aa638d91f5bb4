"""confluent-kafka (librdkafka) through raftka's Kafka listener: produce and consume.

    python bench/kafka_listener_bench.py [--records N] [--repeats N]

One ``LocalCluster`` (3 controllers) + ``LocalBrokers`` (3 brokers, each with a Kafka
listener) on loopback, real OS processes on this shared machine. Each run: a fresh
topic of 3 partitions, RF 3, min.insync.replicas 2; confluent-kafka's producer with
acks=all, its default batching, no compression, ``--records`` 100-byte values, timed
from the first produce() to the end of flush(); then a confluent-kafka consumer
(assigned partitions, from the beginning) reads them all back, timed likewise. Broker
CPU is the brokers' user+system time over the run (from /proc), per record.

Prints one JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers

RECORD_SIZE = 100
PARTITIONS = 3


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def run(kafka: str, pids: list[int], topic: str, records: int) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": kafka})
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
    producer = Producer({"bootstrap.servers": kafka, "acks": "all", "compression.type": "none"})
    value = b"x" * RECORD_SIZE
    cpu0, t0 = cpu_s(pids), time.perf_counter()
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

    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": f"bench-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, cpu0, t0 = 0, cpu_s(pids), time.perf_counter()
    while got < records:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    consume_s, consume_cpu = time.perf_counter() - t0, cpu_s(pids) - cpu0
    consumer.close()
    return {
        "records": records,
        "produce_records_per_s": round(records / produce_s),
        "produce_broker_cpu_us_per_record": round(produce_cpu / records * 1e6, 1),
        "consume_records_per_s": round(records / consume_s),
        "consume_broker_cpu_us_per_record": round(consume_cpu / records * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp)) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(cluster, kafka_listener=True) as brokers:
            brokers.start()
            pids = [b.popen.pid for b in brokers.nodes() if b.popen is not None]
            results = []
            for i in range(args.repeats):
                result = run(brokers.kafka_bootstrap_servers, pids, f"bench-{i}", args.records)
                print(json.dumps(result), flush=True)
                results.append(result)
            medians = {k: statistics.median(r[k] for r in results) for k in results[0]}
            print(json.dumps({"median": medians}), flush=True)


if __name__ == "__main__":
    main()
