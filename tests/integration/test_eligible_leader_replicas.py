"""Eligible leader replicas (KIP-966) with real processes on loopback: three
controllers, three brokers, short sessions.

The failure this removes (found by the txn fault runs, where a ``__transaction_state``
partition stayed leaderless for a whole run): both followers of a partition fall
behind for a moment (here: paused), the leader shrinks the ISR to itself, and then the
leader dies. Before KIP-966 the partition has no leader until that one broker returns,
although both followers hold every acknowledged record. With the ELR the controller
elects a follower as soon as one is back, nothing acknowledged is lost, and writes
resume once the ISR is back at min.insync.replicas.

Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftka.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 2_000
LAG_MS = 1_500
DEADLINE_S = 30.0
TOPIC = "elr"
RECORDS = 20


@dataclass
class Env:
    cluster: LocalCluster
    brokers: LocalBrokers

    def partition_view(self, seen_by: int) -> dict[str, Any] | None:
        """Partition 0 of TOPIC as broker ``seen_by`` has it, or None."""
        view = self.brokers.metadata(seen_by) or {}
        for topic in view.get("topics", []):
            if topic["name"] == TOPIC and topic["partitions"]:
                part: dict[str, Any] = topic["partitions"][0]
                return part
        return None


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with LocalCluster(
        tmp_path, extra_properties={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    ) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster, extra_properties={"replica.lag.time.max.ms": str(LAG_MS)}
        ) as brokers:
            brokers.start()
            yield Env(cluster, brokers)


def test_a_follower_leads_when_the_leader_of_a_shrunk_isr_dies(env: Env) -> None:
    brokers = env.brokers
    with Admin(bootstrap_servers=brokers.bootstrap_servers) as admin:
        admin.create_topics(
            [NewTopic(TOPIC, 1, replication_factor=3, configs={"min.insync.replicas": "2"})]
        )
    first = brokers.ids[0]

    def full() -> dict[str, Any] | None:
        p = env.partition_view(first)
        return (
            p if p and p["leader"] is not None and p["leader"] >= 0 and len(p["isr"]) == 3 else None
        )

    leader = wait_for(full, timeout_s=DEADLINE_S, message="the topic never had a full ISR")[
        "leader"
    ]
    followers = [b for b in brokers.ids if b != leader]
    values = [b"r%d" % i for i in range(RECORDS)]
    with Producer(bootstrap_servers=brokers.bootstrap_servers, acks="all") as producer:
        for v in values:
            producer.send(TOPIC, v, partition=0).result(timeout=DEADLINE_S)

    # Both followers stall: after replica.lag.time.max.ms the leader shrinks the ISR
    # to itself, below min.insync.replicas.
    for f in followers:
        brokers[f].pause()

    def shrunk() -> dict[str, Any] | None:
        p = env.partition_view(leader)
        return p if p and p["isr"] == [leader] and p["eligible_leader_replicas"] else None

    seen = wait_for(shrunk, timeout_s=DEADLINE_S, message="the ISR never shrank to the leader")
    assert set(seen["eligible_leader_replicas"]) <= set(followers), seen

    # The leader dies while the followers are out of the ISR; they come back.
    brokers[leader].kill()
    for f in followers:
        brokers[f].resume()

    def follower_leads() -> int | None:
        for f in followers:
            p = env.partition_view(f)
            if p and p["leader"] in followers:
                return int(p["leader"])
        return None

    new_leader = wait_for(
        follower_leads,
        timeout_s=DEADLINE_S,
        message=f"no follower was elected while broker {leader} (the only ISR member) is down",
    )
    assert not brokers[leader].running

    # Nothing acknowledged was lost: the new leader serves every record.
    with Consumer(
        bootstrap_servers=brokers.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(got)} of {RECORDS} records"
            for r in consumer.poll(1_000).get(TopicPartition(TOPIC, 0), []):
                got.append(r.value or b"")
    assert got == values

    # The other follower rejoins, the ISR is back at the minimum, acks=all works again.
    with Producer(
        bootstrap_servers=brokers.bootstrap_servers, acks="all", delivery_timeout_ms=60_000
    ) as producer:
        meta = producer.send(TOPIC, b"after", partition=0).result(timeout=90)
    assert meta.offset == RECORDS
    p = env.partition_view(new_leader)
    assert p is not None and len(p["isr"]) >= 2 and p["eligible_leader_replicas"] == [], p
