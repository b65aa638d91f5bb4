"""The partition side of transactions against real processes (3 controllers + 3
brokers, ``transaction.partition.verification.enable=false`` since no coordinator
answers verification here): transactional batches produced by raw HTTP with the
client's batch builder, COMMIT/ABORT markers written through ``/v1/write-txn-markers``,
then

- the LSO stays at an open transaction's first offset (fetch answers, ListOffsets
  with read_committed), and moves to the HW once the markers are written;
- a read_committed consumer gets only committed and plain records, a read_uncommitted
  one every record;
- a follower that becomes leader (the leader killed) answers the same LSO and aborted
  transactions, and so does every broker after all of them were killed and restarted
  (the .txnindex and the open transaction survive).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from http_helpers import led_partition, post_raw

from raftka.client import Admin, Consumer, NewTopic, TopicPartition
from raftka.common.messages import broker as api
from raftka.common.record import Record, build_batch
from raftka.common.wire import FRAME_CONTENT_TYPE, encode_frame
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
API_TIMEOUT_MS = 20_000


@dataclass
class Env:
    cluster: LocalCluster
    brokers: LocalBrokers
    admin: Admin

    def topic(self, name: str) -> str:
        self.admin.create_topics(
            [NewTopic(name, 1, 3, configs={"min.insync.replicas": "2"})],
            timeout_ms=API_TIMEOUT_MS,
        )
        wait_for(
            lambda: self.leader(name) is not None and self.isr_size(name) == 3,
            timeout_s=DEADLINE_S,
            message=f"{name}: no leader with a full ISR",
        )
        return name

    def _partition(self, topic: str) -> dict[str, Any] | None:
        return led_partition(self.brokers, topic, 0)

    def leader(self, topic: str) -> int | None:
        p = self._partition(topic)
        leader = None if p is None else int(p["leader"])
        if leader is None or not self.brokers[leader].running:
            return None
        return leader

    def isr_size(self, topic: str) -> int:
        p = self._partition(topic)
        return 0 if p is None else len(p["isr"])


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp: Path = tmp_path_factory.mktemp("txn-partition")
    with LocalCluster(tmp, extra_properties={"broker.session.timeout.ms": "2500"}) as cluster:
        cluster.start()
        cluster.wait_leader()
        brokers = LocalBrokers(
            cluster,
            extra_properties={
                "replica.lag.time.max.ms": "1500",
                "transaction.partition.verification.enable": "false",
            },
            kafka_listener=True,
        )
        with brokers:
            brokers.start()
            with Admin(
                bootstrap_servers=brokers.bootstrap_servers, default_api_timeout_ms=API_TIMEOUT_MS
            ) as admin:
                yield Env(cluster, brokers, admin)


def _json(address: str, path: str, body: dict[str, Any]) -> Any:
    return orjson.loads(post_raw(address, path, orjson.dumps(body)))


def _producer_id(env: Env) -> int:
    address = env.brokers[env.brokers.ids[0]].address
    return int(_json(address, "/v1/init-producer-id", {})["producer_id"])


def _produce(
    env: Env, topic: str, batch: bytes, *, transactional_id: str | None = "tx"
) -> dict[str, Any]:
    header: dict[str, Any] = {
        "acks": -1,
        "timeout_ms": 10_000,
        "partitions": [{"topic": topic, "partition": 0}],
    }
    if transactional_id is not None:
        header["transactional_id"] = transactional_id
    leader = env.leader(topic)
    assert leader is not None
    frame = encode_frame(header, "partitions", [batch])
    answer = orjson.loads(
        post_raw(env.brokers[leader].address, "/v1/produce", frame, FRAME_CONTENT_TYPE)
    )
    return dict(answer["responses"][0])


def _txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return build_batch(
        [Record(value=v) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


def _markers(env: Env, topic: str, pid: int, *, committed: bool, broker: int | None = None) -> Any:
    target = env.leader(topic) if broker is None else broker
    assert target is not None
    body = {
        "markers": [
            {
                "producer_id": pid,
                "producer_epoch": 0,
                "transaction_result": committed,
                "coordinator_epoch": 1,
                "transaction_version": 1,
                "topics": [{"name": topic, "partitions": [0]}],
            }
        ]
    }
    answer = _json(env.brokers[target].address, "/v1/write-txn-markers", body)
    return answer["markers"][0]["topics"][0]["partitions"][0]["error"]


View = tuple[int, int, list[tuple[int, int]]]


def _read_committed_view(env: Env, topic: str) -> View | None:
    """(HW, LSO, aborted transactions) a read_committed fetch from offset 0 answers at
    the leader; None while there is no leader to answer (a failover, restarts)."""
    leader = env.leader(topic)
    if leader is None:
        return None
    request = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "isolation_level": 1,
        "partitions": [{"topic": topic, "partition": 0, "fetch_offset": 0}],
    }
    try:
        raw = post_raw(env.brokers[leader].address, "/v1/fetch", orjson.dumps(request))
        header, _ = api.decode_frame(raw, api.FetchResponse)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None
    r = header.responses[0]
    if r.error is not None:
        return None
    assert r.aborted_transactions is not None
    aborted = sorted((a.producer_id, a.first_offset) for a in r.aborted_transactions)
    return r.high_watermark, r.last_stable_offset, aborted


def _latest(env: Env, topic: str, isolation_level: int) -> int:
    leader = env.leader(topic)
    assert leader is not None
    answer = _json(
        env.brokers[leader].address,
        "/v1/list-offsets",
        {
            "isolation_level": isolation_level,
            "partitions": [{"topic": topic, "partition": 0, "timestamp": -1}],
        },
    )
    return int(answer["responses"][0]["offset"])


def _consume(env: Env, topic: str, isolation_level: str) -> list[bytes]:
    tp = TopicPartition(topic, 0)
    out: list[bytes] = []
    with Consumer(
        bootstrap_servers=env.brokers.bootstrap_servers,
        isolation_level=isolation_level,  # type: ignore[arg-type]
        request_timeout_ms=API_TIMEOUT_MS,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([tp], timeout_ms=API_TIMEOUT_MS)[tp]
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{isolation_level}: stuck below {end}"
            for records in consumer.poll(500).values():
                out.extend(r.value or b"" for r in records)
    return out


def _consume_librdkafka(env: Env, topic: str, isolation_level: str) -> list[bytes]:
    """Every record confluent-kafka's consumer hands out, to the end of the partition
    (its ``isolation.level``: its end is the LSO or the HW)."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as CKTopicPartition

    consumer = CKConsumer(
        {
            "bootstrap.servers": env.brokers.kafka_bootstrap_servers,
            "group.id": f"txn-{isolation_level}",
            "isolation.level": isolation_level,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CKTopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            assert time.monotonic() < deadline, f"librdkafka {isolation_level}: no EOF"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF: the end it reads to
                    return out
                raise KafkaException(msg.error())
            out.append(msg.value())
    finally:
        consumer.close()


def test_markers_decide_what_read_committed_consumers_see(env: Env) -> None:
    topic = env.topic("txn-read")
    a, b = _producer_id(env), _producer_id(env)
    no_id = _produce(env, topic, _txn_batch(a, 0, b"x"), transactional_id=None)
    assert no_id["error"]["error"] == "INVALID_REQUEST"
    first = _produce(env, topic, _txn_batch(a, 0, b"a0", b"a1"))
    assert first["error"] is None and first["base_offset"] == 0
    assert _produce(env, topic, _txn_batch(b, 0, b"b0"))["error"] is None
    plain = _produce(env, topic, build_batch([Record(value=b"p0")]), transactional_id=None)
    assert plain["error"] is None and plain["base_offset"] == 3
    # Both transactions open: the LSO is A's first offset.
    assert _read_committed_view(env, topic) == (4, 0, [])
    assert (_latest(env, topic, 0), _latest(env, topic, 1)) == (4, 0)
    assert _consume(env, topic, "read_committed") == []
    follower = next(x for x in env.brokers.ids if x != env.leader(topic))
    assert _markers(env, topic, a, committed=False, broker=follower)["error"] == (
        "NOT_LEADER_OR_FOLLOWER"
    )
    assert _markers(env, topic, a, committed=False) is None
    assert _read_committed_view(env, topic) == (5, 2, [(a, 0)])  # B still open at 2
    assert _markers(env, topic, b, committed=True) is None
    assert _read_committed_view(env, topic) == (6, 6, [(a, 0)])
    assert _latest(env, topic, 1) == 6
    assert _consume(env, topic, "read_committed") == [b"b0", b"p0"]
    assert _consume(env, topic, "read_uncommitted") == [b"a0", b"a1", b"b0", b"p0"]
    # librdkafka over the Kafka listener filters with the same aborted list and LSO.
    assert _consume_librdkafka(env, topic, "read_committed") == [b"b0", b"p0"]
    assert _consume_librdkafka(env, topic, "read_uncommitted") == [b"a0", b"a1", b"b0", b"p0"]


def test_lso_and_txnindex_survive_leader_failover_and_restarts(env: Env) -> None:
    topic = env.topic("txn-restart")
    a, c = _producer_id(env), _producer_id(env)
    assert _produce(env, topic, _txn_batch(a, 0, b"a0"))["error"] is None
    assert _markers(env, topic, a, committed=False) is None
    assert (
        _produce(env, topic, build_batch([Record(value=b"p")]), transactional_id=None)["error"]
        is None
    )
    open_at = _produce(env, topic, _txn_batch(c, 0, b"c0"))["base_offset"]
    assert open_at == 3
    view = _read_committed_view(env, topic)
    assert view == (4, 3, [(a, 0)])

    old = env.leader(topic)
    assert old is not None
    env.brokers[old].kill()
    wait_for(
        lambda: env.leader(topic) not in (None, old),
        timeout_s=DEADLINE_S,
        message="no new leader after killing the old one",
    )
    wait_for(
        lambda: _read_committed_view(env, topic) == view,
        timeout_s=DEADLINE_S,
        message=lambda: f"new leader answers {_read_committed_view(env, topic)}, not {view}",
    )
    env.brokers[old].restart()
    env.brokers.wait_unfenced(old)

    for x in env.brokers.ids:
        env.brokers[x].kill()
    for x in env.brokers.ids:
        env.brokers[x].restart()
    for x in env.brokers.ids:
        env.brokers.wait_unfenced(x)
    wait_for(
        lambda: env.leader(topic) is not None and env.isr_size(topic) >= 2,
        timeout_s=DEADLINE_S,
        message="the partition did not come back after restarting every broker",
    )
    wait_for(
        lambda: _read_committed_view(env, topic) == view,
        timeout_s=DEADLINE_S,
        message=lambda: f"after restarts: {_read_committed_view(env, topic)}, not {view}",
    )
    assert _markers(env, topic, c, committed=True) is None
    assert _consume(env, topic, "read_committed") == [b"p", b"c0"]
