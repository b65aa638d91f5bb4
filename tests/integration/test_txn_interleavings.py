"""Jepsen's 2024 interleaving on real processes: a late EndTxn lands in the next
transaction (3 controllers + 3 brokers as processes, raftka's own client).

Jepsen's analysis of Bufstream 0.1.0 showed that Kafka's classic transaction protocol
lets a delayed EndTxn(commit) of one transaction end the *next* one of the same
producer: the producer's epoch does not move between transactions, so the coordinator
cannot tell the late request from a new one. Here the delay is made on purpose: the
client's first EndTxn(commit) of T1 is held (the client sees a timeout, as when the
network holds a request, and retries; the retry commits T1), T2 begins and writes, and
then the held request is delivered, byte for byte, to the same coordinator. The
producer then writes once more and aborts T2.

- Defences on (the defaults: KIP-890 part 2, transaction version 2): T2 runs at the
  epoch T1's EndTxn bumped to, so the late EndTxn carries a dead epoch and is fenced
  (PRODUCER_FENCED). A read_committed reader sees T1's record and nothing of T2.
- Defences off (``transaction.version=1``, ``transaction.partition.verification.enable
  =false``): the late EndTxn commits T2 halfway; its first record becomes visible
  although the client aborted T2: an aborted read, Jepsen's anomaly. The test asserts
  that it happens, so the "on" result is a real zero and not a blind checker.

A late produce, the second interleaving: T1's batch to partition 0 is held every time
the client sends it, until its delivery timeout fails it; the client aborts T1, runs T2
on partition 1 and commits; then the first held produce arrives at partition 0's
leader. On, it is refused (the abort marker raised the partition's epoch past the
batch's, and verification would refuse it anyway); off, partition 0 accepts it and the
batch opens a transaction no coordinator knows: it never gets a marker, and partition
0's last stable offset stays below its high watermark for good (a hanging
transaction, which stops every read_committed reader of the partition there).

The late marker interleaving is exercised by the seeded simulation of the coordinator
core and the partition rules (tests/property/test_txn_coordinator_sim.py), not here:
markers go broker to broker, out of a test's reach without a proxy in front of a
broker.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import pytest

from raftka.client import Consumer, Producer, TopicPartition, _transport
from raftka.common.errors import KafkaError, RequestTimedOutError
from raftka.common.messages.transactions import EndTxnRequest
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.local import http_json, wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
BASE = {"transaction.state.log.num.partitions": "3"}
DEFENCES_OFF = {
    **BASE,
    "transaction.version": "1",
    "transaction.partition.verification.enable": "false",
}


@pytest.fixture(scope="module", params=["defences-on", "defences-off"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, RaftkaCluster]]:
    props = BASE if request.param == "defences-on" else DEFENCES_OFF
    with RaftkaCluster.start(tmp_path_factory.mktemp(request.param), broker_properties=props) as c:
        yield request.param, c


class HeldEndTxn:
    """Wraps the client transport: the next EndTxn is not sent; the caller gets a
    timeout (and retries), and the request is kept for a late delivery."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.held: tuple[str, EndTxnRequest] | None = None
        original = _transport.Transport.request_message
        hold = self

        async def request_message(
            self: Any, address: str, method: str, path: str, *args: Any, **kwargs: Any
        ) -> Any:
            message = kwargs.get("message")
            if hold.armed and path == "/v1/end-txn" and isinstance(message, EndTxnRequest):
                hold.armed = False
                hold.held = (address, message)
                raise RequestTimedOutError("held on purpose (a delayed EndTxn)")
            return await original(self, address, method, path, *args, **kwargs)

        monkeypatch.setattr(_transport.Transport, "request_message", request_message)

    def deliver(self) -> dict[str, Any]:
        """The held EndTxn, arriving now at the coordinator it was sent to."""
        assert self.held is not None, "no EndTxn was held"
        address, message = self.held
        status, answer = http_json(
            address, "/v1/end-txn", method="POST", body=msgspec.to_builtins(message), timeout_s=20
        )
        assert status == 200, (status, answer)
        assert isinstance(answer, dict)
        return answer


def read_committed(cluster: RaftkaCluster, topic: str, expected: int) -> list[bytes]:
    """Every value a read_committed reader sees in partitions 0 and 1, once it has at
    least ``expected`` and the partitions are stable (LSO = HW) up to what it read."""
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    try:
        consumer.assign(tps)
        seen: list[bytes] = []

        def settled() -> bool:
            for records in consumer.poll(200).values():
                seen.extend(r.value or b"" for r in records)
            stable = all(
                consumer.last_stable_offset(tp) is not None
                and consumer.last_stable_offset(tp) == consumer.highwater(tp)
                for tp in tps
            )
            return stable and len(seen) >= expected

        wait_for(settled, timeout_s=DEADLINE_S, message=f"read {seen}, not settled")
        for records in consumer.poll(500).values():
            seen.extend(r.value or b"" for r in records)
        return seen
    finally:
        consumer.close()


def test_a_late_end_txn_of_the_last_transaction(
    cluster: tuple[str, RaftkaCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    mode, c = cluster
    topic = c.create_topic(partitions=2)
    hold = HeldEndTxn(monkeypatch)
    with Producer(
        bootstrap_servers=c.bootstrap_servers,
        transactional_id=f"late-end-txn-{mode}",
        max_block_ms=30_000,
        request_timeout_ms=10_000,
    ) as producer:
        producer.init_transactions()
        # T1: one record, committed; its first EndTxn is held, the retry commits.
        producer.begin_transaction()
        producer.send(topic, b"t1", partition=0)
        hold.armed = True
        producer.commit_transaction()
        assert hold.held is not None and hold.held[1].committed
        # T2: a record, then the late EndTxn(commit) of T1 arrives, then one more
        # record, and the client aborts T2.
        producer.begin_transaction()
        producer.send(topic, b"t2-first", partition=0)
        producer.flush()
        late = hold.deliver()
        producer.send(topic, b"t2-second", partition=1)
        producer.flush()
        producer.abort_transaction()

    seen = read_committed(c, topic, expected=1)
    if mode == "defences-on":
        # KIP-890 part 2: the late request carries T1's epoch, which T1's EndTxn retired.
        assert (late.get("error") or {}).get("error") == "PRODUCER_FENCED", late
        assert sorted(seen) == [b"t1"], "an aborted transaction's record was read"
    else:
        # The classic protocol: the late EndTxn commits T2 halfway (an aborted read).
        assert late.get("error") is None, late
        assert sorted(seen) == [b"t1", b"t2-first"], seen


class HeldProduce:
    """Wraps the client transport: while armed, every produce is not sent (the caller
    gets a timeout); the first one is kept for a late delivery."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.held: tuple[str, bytes] | None = None
        original = _transport.Transport.request_frame
        hold = self

        async def request_frame(
            self: Any, address: str, path: str, *args: Any, **kwargs: Any
        ) -> Any:
            body = kwargs.get("frame_body")
            if hold.armed and path == "/v1/produce" and body is not None:
                if hold.held is None:
                    hold.held = (address, bytes(body))
                raise RequestTimedOutError("held on purpose (a delayed produce)")
            return await original(self, address, path, *args, **kwargs)

        monkeypatch.setattr(_transport.Transport, "request_frame", request_frame)

    def deliver(self) -> list[str | None]:
        """The held produce, arriving now; each partition's error name (None: written)."""
        assert self.held is not None, "no produce was held"
        address, body = self.held
        request = urllib.request.Request(
            f"http://{address}/v1/produce",
            data=body,
            method="POST",
            headers={"Content-Type": FRAME_CONTENT_TYPE},
        )
        with urllib.request.urlopen(request, timeout=20) as response:
            answer = orjson.loads(response.read())
        return [(r.get("error") or {}).get("error") for r in answer["responses"]]


def offsets(cluster: RaftkaCluster, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition, as a fetch answers them."""
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        found: list[tuple[int, int]] = []

        def fetched() -> bool:
            consumer.poll(200)
            lso, hw = consumer.last_stable_offset(tp), consumer.highwater(tp)
            if lso is None or hw is None:
                return False
            found.append((lso, hw))
            return True

        wait_for(fetched, timeout_s=DEADLINE_S, message=f"no fetch answer for {tp}")
        return found[-1]
    finally:
        consumer.close()


def test_a_late_produce_of_an_aborted_transaction(
    cluster: tuple[str, RaftkaCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    mode, c = cluster
    topic = c.create_topic(partitions=2)
    hold = HeldProduce(monkeypatch)
    with Producer(
        bootstrap_servers=c.bootstrap_servers,
        transactional_id=f"late-produce-{mode}",
        max_block_ms=30_000,
        request_timeout_ms=1_000,
        delivery_timeout_ms=3_000,
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        hold.armed = True
        lost = producer.send(topic, b"t1-late", partition=0)
        with pytest.raises(KafkaError):
            lost.result(timeout=DEADLINE_S)
        hold.armed = False
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"t2", partition=1)
        producer.commit_transaction()
    errors = hold.deliver()
    lso, hw = offsets(c, topic, 0)
    if mode == "defences-on":
        assert errors != [None], "the late batch of the aborted transaction was written"
        assert lso == hw, f"partition 0 has a hanging transaction: LSO {lso} < HW {hw}"
        assert read_committed(c, topic, expected=1) == [b"t2"]
    else:
        assert errors == [None], errors
        assert lso < hw, f"the late batch did not hang partition 0 (LSO {lso}, HW {hw})"
