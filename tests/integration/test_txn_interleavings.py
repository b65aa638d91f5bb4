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

The late produce and the late marker interleavings are exercised by the seeded
simulation of the coordinator core and the partition rules
(tests/property/test_txn_coordinator_sim.py), not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from raftka.client import Consumer, Producer, TopicPartition, _transport
from raftka.common.errors import RequestTimedOutError
from raftka.common.messages.transactions import EndTxnRequest
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
