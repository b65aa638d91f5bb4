"""The transactional producer against real processes (3 controllers + 3 brokers).

Needs the whole of issue #14's wiring (the transaction coordinator's routes, the
partition side's markers and read_committed fetches, the group coordinator's
TxnOffsetCommit): it checks the client against them, end to end.

- The seeds' example (Kafka's KafkaProducer javadoc), verbatim in Python: init, begin,
  100 records over several partitions, commit; a read_committed consumer sees every
  record, each once.
- An aborted transaction: its records were appended (their futures succeeded) but a
  read_committed consumer never sees them, while it sees the committed transaction
  that follows; a read_uncommitted consumer sees both.
- Fencing: a second producer with the same transactional id fences the first (its
  commit raises ProducerFencedError, and so does every later call), the first one's
  open transaction is aborted (never visible), and the second one's commits.
- Consume-transform-produce: a group member's offsets sent with
  send_offsets_to_transaction become the group's committed offsets only when the
  transaction commits (an aborted one leaves them where they were).

The cluster has ``transaction.state.log.num.partitions=3`` so that it starts fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from raftka.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from raftka.common.errors import KafkaError, KafkaTimeoutError, ProducerFencedError
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
PARTITIONS = 3
BROKER_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    # Short, so that a test that leaves a transaction open does not hold the LSO long.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
CLIENT = {"max_block_ms": 30_000, "request_timeout_ms": 10_000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    data: Path = tmp_path_factory.mktemp("txn")
    with RaftkaCluster.start(data, broker_properties=BROKER_PROPERTIES) as c:
        yield c


def read_all(
    cluster: RaftkaCluster,
    topic: str,
    expected: int,
    *,
    isolation_level: Literal["read_committed", "read_uncommitted"],
) -> list[tuple[int, bytes | None]]:
    """(partition, value) of every record a fresh consumer reads from the beginning,
    once it read ``expected`` of them (bounded by DEADLINE_S); then a last poll to
    catch records beyond ``expected`` that must not be there."""
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level=isolation_level,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen: list[tuple[int, bytes | None]] = []

        def enough() -> bool:
            for tp, records in consumer.poll(200).items():
                seen.extend((tp.partition, r.value) for r in records)
            return len(seen) >= expected

        wait_for(enough, timeout_s=DEADLINE_S, message=f"{len(seen)}/{expected} records read")
        for tp, records in consumer.poll(500).items():
            seen.extend((tp.partition, r.value) for r in records)
        return seen
    finally:
        consumer.close()


def test_the_seeds_example_commits_across_partitions(cluster: RaftkaCluster) -> None:
    topic = cluster.create_topic(partitions=PARTITIONS)
    props = {
        "bootstrap_servers": cluster.bootstrap_servers,
        "transactional_id": "my-transactional-id",
    }
    producer = Producer(**props, key_serializer=str.encode, value_serializer=str.encode, **CLIENT)

    # Kafka's KafkaProducer javadoc, in Python.
    producer.init_transactions()
    try:
        producer.begin_transaction()
        for i in range(100):
            producer.send(topic, str(i), str(i))
        producer.commit_transaction()
    except ProducerFencedError:
        # We can't recover from these exceptions, so our only option is to close the
        # producer and exit.
        producer.close()
        raise
    except KafkaError:
        # For all other exceptions, just abort the transaction and try again.
        producer.abort_transaction()
        raise
    producer.close()

    seen = read_all(cluster, topic, 100, isolation_level="read_committed")
    assert sorted(int(v or b"-1") for _, v in seen) == list(range(100))
    assert len({p for p, _ in seen}) > 1, "the keys spread over several partitions"


def test_aborted_records_are_never_read_committed(cluster: RaftkaCluster) -> None:
    topic = cluster.create_topic(partitions=PARTITIONS)
    with Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="abort-then-commit", **CLIENT
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        aborted = [producer.send(topic, b"aborted", partition=p) for p in range(PARTITIONS)]
        producer.flush()
        assert all(f.result().offset >= 0 for f in aborted)  # they are in the log
        producer.abort_transaction()
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.send(topic, b"committed", partition=p)
        producer.commit_transaction()

    committed = read_all(cluster, topic, PARTITIONS, isolation_level="read_committed")
    assert sorted(committed) == [(p, b"committed") for p in range(PARTITIONS)]
    everything = read_all(cluster, topic, 2 * PARTITIONS, isolation_level="read_uncommitted")
    assert sorted(v or b"" for _, v in everything) == [b"aborted"] * 3 + [b"committed"] * 3


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: RaftkaCluster) -> None:
    topic = cluster.create_topic(partitions=PARTITIONS)
    options = {
        "bootstrap_servers": cluster.bootstrap_servers,
        "transactional_id": "fenced-id",
        **CLIENT,
    }
    first = Producer(**options)
    second = Producer(**options)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"zombie", partition=0)
        first.flush()
        second.init_transactions()  # fences the first and aborts its transaction
        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
        with pytest.raises(ProducerFencedError):
            first.send(topic, b"zombie again", partition=1)
        second.begin_transaction()
        second.send(topic, b"live", partition=1)
        second.commit_transaction()
    finally:
        first.close()
        second.close()
    seen = read_all(cluster, topic, 1, isolation_level="read_committed")
    assert seen == [(1, b"live")]


def test_offsets_sent_to_a_transaction_commit_with_it(cluster: RaftkaCluster) -> None:
    source = cluster.create_topic(partitions=1)
    sink = cluster.create_topic(partitions=PARTITIONS)
    group = cluster.unique_name("ctp")
    with Producer(bootstrap_servers=cluster.bootstrap_servers, **CLIENT) as plain:
        for i in range(10):
            plain.send(source, b"%d" % i, partition=0)
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="ctp-id", **CLIENT
    )
    tp = TopicPartition(source, 0)
    try:
        consumer.subscribe([source])
        producer.init_transactions()
        records: list[bytes | None] = []

        def polled() -> bool:
            for rs in consumer.poll(200).values():
                records.extend(r.value for r in rs)
            return len(records) >= 10

        wait_for(polled, timeout_s=DEADLINE_S, message="the input was not consumed")

        # An aborted transaction leaves the group's offsets where they were.
        producer.begin_transaction()
        producer.send(sink, b"dropped", partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(5)}, consumer.group_metadata())
        producer.abort_transaction()
        assert consumer.committed([tp])[tp] is None

        producer.begin_transaction()
        for value in records:
            producer.send(sink, b"out-" + (value or b""), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(10)}, consumer.group_metadata())
        producer.commit_transaction()

        def committed() -> bool:
            found = consumer.committed([tp])[tp]
            return found is not None and found.offset == 10

        wait_for(committed, timeout_s=DEADLINE_S, message="the offsets did not commit")
    finally:
        producer.close()
        consumer.close()
    out = read_all(cluster, sink, 10, isolation_level="read_committed")
    assert sorted(v or b"" for _, v in out) == sorted(b"out-%d" % i for i in range(10))


def test_read_committed_committed_waits_for_a_pending_transactional_offset(
    cluster: RaftkaCluster,
) -> None:
    """KIP-447: a read_committed consumer's committed() asks with require_stable, so an
    offset an open transaction wrote is waited for (UNSTABLE_OFFSET_COMMIT, retried until
    the timeout) instead of answered with the older value; once the transaction commits
    it returns the new offset. A read_uncommitted consumer answers at once (the control)."""
    topic = cluster.create_topic(partitions=1)
    group = cluster.unique_name("stable")
    tp = TopicPartition(topic, 0)
    common = {"bootstrap_servers": cluster.bootstrap_servers, "group_id": group}
    stable = Consumer(isolation_level="read_committed", enable_auto_commit=False, **common)
    plain = Consumer(enable_auto_commit=False, **common)
    producer = Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="stable-id", **CLIENT
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(7)}, group)
        assert plain.committed([tp], timeout_ms=10_000)[tp] is None
        with pytest.raises(KafkaTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
            stable.committed([tp], timeout_ms=1_500)
        producer.commit_transaction()
        found = stable.committed([tp], timeout_ms=30_000)[tp]
        assert found is not None and found.offset == 7
    finally:
        producer.close()
        stable.close()
        plain.close()


def test_the_last_stable_offset_stops_at_an_open_transaction(cluster: RaftkaCluster) -> None:
    """With a transaction open on a partition, a consumer's highwater() is the high
    watermark (past the open records) and last_stable_offset() the first offset of the
    open transaction; the aiokafka shim's last_stable_offset() says the same. After
    the commit both meet."""
    import asyncio

    from raftka import AIOKafkaConsumer
    from raftka import TopicPartition as CompatTopicPartition

    topic = cluster.create_topic(partitions=PARTITIONS)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", **CLIENT) as plain:
        for _ in range(3):
            plain.send(topic, b"before", partition=0)
    producer = Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="open-lso", **CLIENT
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for _ in range(2):
            producer.send(topic, b"open", partition=0)
        producer.flush()

        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                bootstrap_servers=cluster.bootstrap_servers,
                isolation_level=isolation,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
            )
            try:
                consumer.assign([tp])
                wait_for(
                    lambda c=consumer: bool(c.poll(200) or True) and c.highwater(tp) == 5,
                    timeout_s=DEADLINE_S,
                    message=f"{isolation}: the high watermark never reached 5",
                )
                assert consumer.last_stable_offset(tp) == 3, isolation
            finally:
                consumer.close()

        async def through_aiokafka() -> int | None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=cluster.bootstrap_servers,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
            )
            await consumer.start()
            try:
                compat_tp = CompatTopicPartition(topic, 0)
                consumer.assign([compat_tp])
                loop = asyncio.get_running_loop()
                deadline = loop.time() + DEADLINE_S
                while consumer.highwater(compat_tp) != 5:
                    assert loop.time() < deadline, "aiokafka shim: no fetch answer"
                    await consumer.getmany(timeout_ms=200)
                return consumer.last_stable_offset(compat_tp)
            finally:
                await consumer.stop()

        assert asyncio.run(through_aiokafka()) == 3
        producer.commit_transaction()
    finally:
        producer.close()


def test_txn_offset_commit_is_verified_with_the_transaction_coordinator(
    cluster: RaftkaCluster,
) -> None:
    """KIP-890 part 1 for offsets: a TxnOffsetCommit whose group partition was never
    added to the producer's transaction (no AddOffsetsToTxn) is refused
    INVALID_TXN_STATE and stays invisible; after AddOffsetsToTxn it is accepted."""
    from raftka.local import http_json

    group = "verified-offsets-group"
    tid = "verified-offsets"
    topic = cluster.create_topic(partitions=PARTITIONS)

    def post(node: int, path: str, body: dict[str, object]) -> dict[str, object]:
        status, answer = http_json(
            cluster.brokers[node].address, path, method="POST", body=body, timeout_s=20
        )
        assert status == 200, (path, status, answer)
        assert isinstance(answer, dict)
        return answer

    def coordinator(key: str, key_type: int) -> int:
        def find() -> int | None:
            answer = post(
                cluster.brokers.ids[0], "/v1/find-coordinator", {"key": key, "key_type": key_type}
            )
            if answer.get("error"):
                return None
            node = int(str(answer["node_id"]))
            if key_type == 0 and post(node, "/v1/offset-fetch", {"group_id": key}).get("error"):
                return None  # the group's partition is still loading there
            return node

        found: int = wait_for(find, timeout_s=DEADLINE_S, message=f"no coordinator for {key}")
        return found

    def until_ok(node: int, path: str, body: dict[str, object]) -> dict[str, object]:
        """Retried while the coordinator loads (COORDINATOR_LOAD_IN_PROGRESS and such)."""
        answers: list[dict[str, object]] = []

        def attempt() -> bool:
            answers.append(post(node, path, body))
            return answers[-1].get("error") is None

        wait_for(attempt, timeout_s=DEADLINE_S, message=f"{path}: {answers[-1:]}")
        return answers[-1]

    txn_node = coordinator(tid, 1)
    init = until_ok(
        txn_node,
        "/v1/init-producer-id",
        {"transactional_id": tid, "transaction_timeout_ms": 60_000},
    )
    pid, epoch = int(str(init["producer_id"])), int(str(init["producer_epoch"]))
    ids = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
    added = post(
        txn_node,
        "/v1/add-partitions-to-txn",
        {**ids, "topics": [{"name": topic, "partitions": [0]}]},
    )
    assert all(p["error"] is None for t in added["results"] for p in t["partitions"]), added  # type: ignore[index,union-attr]
    group_node = coordinator(group, 0)
    commit = {
        **ids,
        "group_id": group,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7}]}],
    }

    def errors(answer: dict[str, object]) -> list[str | None]:
        return [
            (p["error"] or {}).get("error")  # type: ignore[index,union-attr]
            for t in answer["topics"]  # type: ignore[attr-defined]
            for p in t["partitions"]
        ]

    assert errors(post(group_node, "/v1/txn-offset-commit", commit)) == ["INVALID_TXN_STATE"]
    assert post(txn_node, "/v1/add-offsets-to-txn", {**ids, "group_id": group}).get("error") is None
    assert errors(post(group_node, "/v1/txn-offset-commit", commit)) == [None]
    ended = post(txn_node, "/v1/end-txn", {**ids, "committed": True})
    assert ended.get("error") is None, ended

    def committed() -> bool:
        answer = post(
            group_node,
            "/v1/offset-fetch",
            {
                "group_id": group,
                "topics": [{"name": topic, "partitions": [{"partition": 0}]}],
                "require_stable": True,
            },
        )
        (offset,) = [p["offset"] for t in answer["topics"] for p in t["partitions"]]  # type: ignore[attr-defined]
        return bool(offset == 7)

    wait_for(committed, timeout_s=DEADLINE_S, message="the verified offset never became visible")
