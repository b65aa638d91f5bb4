"""Transaction markers on a compacted topic go, as in Kafka, and a read_committed
consumer still reads exactly the committed records (issue #14, CLEANMARK).

Real processes (3 controllers, 3 brokers): a transactional producer writes rounds of
the same keys, committing most rounds and aborting some, to a compacted topic with
small young segments, ``min.cleanable.dirty.ratio`` low and ``delete.retention.ms``
short. A plain producer then writes a record now and then so the active segment rolls
(``segment.ms``) and each broker's cleaner runs passes, until every replica's cleaner
reports markers removed (``/health``: the first pass stamps a delete horizon, a pass
past it removes the marker). Each wait is on a condition with a deadline.

Then a fresh read_committed consumer reads the partition from the start: it sees the
latest committed value of every key, no aborted value, and every record it reads is
one a committed round (or the plain producer) wrote.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.client import Consumer, Producer, TopicPartition
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
ROUNDS = 12
KEYS = 5
DELETE_RETENTION_MS = 1_000
SEGMENT_MS = 300
BROKER_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "log.cleaner.backoff.ms": "100",
}
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": str(SEGMENT_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}
CLIENT = {"max_block_ms": 30_000, "request_timeout_ms": 10_000}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(tmp_path, broker_properties=BROKER_PROPERTIES) as c:
        yield c


def test_markers_go_and_read_committed_reads_exactly_the_committed_records(
    cluster: RaftkaCluster,
) -> None:
    topic = cluster.create_topic(configs=TOPIC_CONFIGS)
    committed: dict[bytes, bytes] = {}  # key -> latest committed value
    written_committed: set[tuple[bytes, bytes]] = set()
    aborted: set[bytes] = set()
    with Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="cleanmark", **CLIENT
    ) as producer:
        producer.init_transactions()
        for r in range(ROUNDS):
            producer.begin_transaction()
            rows = [(b"k%d" % k, b"r%d-k%d" % (r, k)) for k in range(KEYS)]
            for key, value in rows:
                producer.send(topic, value, key)
            if r % 3 == 1:
                producer.abort_transaction()
                aborted.update(value for _, value in rows)
            else:
                producer.commit_transaction()
                committed.update(rows)
                written_committed.update(rows)

    health: dict[int, dict[str, Any]] = {b: {} for b in cluster.brokers.ids}

    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", **CLIENT) as plain:
        sentinels = 0
        last_sent = 0.0

        def markers_removed_everywhere() -> bool:
            nonlocal sentinels, last_sent
            if time.monotonic() - last_sent > SEGMENT_MS / 1000:
                # A record after segment.ms rolls the segment: the cleaner gets work.
                plain.send(topic, b"s%d" % sentinels, b"sentinel").result(timeout=30)
                sentinels += 1
                last_sent = time.monotonic()
            for b in cluster.brokers.ids:
                health[b] = (cluster.brokers[b].health() or {}).get("log_cleaner") or {}
            return all(h.get("markers_removed", 0) > 0 for h in health.values())

        wait_for(
            markers_removed_everywhere,
            timeout_s=DEADLINE_S,
            message=lambda: f"markers not removed on every replica: {health}",
        )
        written_committed.update((b"sentinel", b"s%d" % i) for i in range(sentinels))
        committed[b"sentinel"] = b"s%d" % (sentinels - 1)

    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        latest: dict[bytes, bytes] = {}
        read: list[tuple[bytes, bytes]] = []

        def read_to_latest() -> bool:
            for records in consumer.poll(200).values():
                for rec in records:
                    assert rec.key is not None and rec.value is not None
                    read.append((rec.key, rec.value))
                    latest[rec.key] = rec.value
            return latest == committed

        wait_for(
            read_to_latest,
            timeout_s=DEADLINE_S,
            message=lambda: f"read committed latest {latest} != {committed}",
        )
    finally:
        consumer.close()
    assert not [v for _, v in read if v in aborted], "an aborted record was read"
    assert set(read) <= written_committed
    assert len(read) < len(written_committed), "nothing was compacted"
