"""Kafka's own clients, unchanged, against raftka's Kafka listener (real processes).

One module-scoped cluster: 3 controllers and 3 brokers, each broker with a Kafka
listener (``listeners=HTTP://..,PLAINTEXT://..``). Checked from the outside through
the real libraries:

- confluent-kafka (librdkafka): the admin client creates a topic; an idempotent
  producer with acks=all writes; a consumer in a group reads every record in order
  per partition and commits; the committed offsets read back;
- kafka-python: the same with its producer (acks=all), group consumer and commit;
- confluent-kafka's admin on one topic: describe, alter and incrementally alter its
  configs (the effect seen through raftka's own admin), add partitions, delete
  records (the low watermark moves), describe the cluster, list a group's committed
  offsets and delete the group; a raw OffsetForLeaderEpoch and kafka-python's
  DescribeLogDirs;
- both protocols see the same bytes: records written through the Kafka listener read
  back identically (key, value, headers, timestamp, offset) through raftka's own
  client, and records written by raftka's client read back identically through
  confluent-kafka;
- kcat (when installed; CI installs it): ``-L`` lists the brokers' Kafka addresses,
  produce and consume round-trip;
- a Fetch long-polling an empty partition holds the answer pipelined behind it on its
  connection (request order) and no other connection's answers;
- bad input (hypothesis): truncated frames, wrong and huge sizes, unknown API keys and
  versions, garbage bodies on a raw socket: each connection is closed or answered with
  Kafka's error, the broker stays up, and a connection opened before keeps working.

Every client call has a timeout; waits poll a condition with a deadline.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_env import Env, kafka_env

from raftka.client import Consumer, Producer, TopicPartition
from raftka.local import wait_for

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
RECORDS = 1000


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    props = {
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "100",
        "group.min.session.timeout.ms": "1000",
    }
    with kafka_env(tmp_path_factory.mktemp("kafka-protocol"), props) as e:
        yield e


def create_topic_confluent(env: Env, name: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": env.kafka})
    futures = admin.create_topics([NewTopic(name, partitions, 3)], request_timeout=20)
    futures[name].result(timeout=30)

    def everywhere() -> bool:
        topics = admin.list_topics(topic=name, timeout=10).topics
        t = topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    wait_for(everywhere, timeout_s=DEADLINE_S, message=f"topic {name} has no leaders")


def test_confluent_kafka_idempotent_acks_all_and_group_commit(env: Env) -> None:
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = "ck-group"
    create_topic_confluent(env, topic)
    errors: list[Any] = []
    producer = CKProducer(
        {"bootstrap.servers": env.kafka, "acks": "all", "enable.idempotence": True}
    )
    for i in range(RECORDS):
        producer.produce(
            topic,
            key=str(i % 7).encode(),
            value=f"value-{i}".encode(),
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_S) == 0, "records left unflushed"
    assert errors == []

    consumer = CKConsumer(
        {
            "bootstrap.servers": env.kafka,
            "group.id": "ck-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    seen: dict[int, list[tuple[int, bytes]]] = {}
    deadline = time.monotonic() + DEADLINE_S
    while sum(map(len, seen.values())) < RECORDS:
        assert time.monotonic() < deadline, f"consumed {sum(map(len, seen.values()))} of {RECORDS}"
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        seen.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
    values = sorted(v for records in seen.values() for _, v in records)
    assert values == sorted(f"value-{i}".encode() for i in range(RECORDS))
    for records in seen.values():  # in order per partition, no gaps
        assert [o for o, _ in records] == list(range(len(records)))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([CKTopicPartition(topic, p) for p in range(3)], timeout=20)
    # A partition the keys never hashed to has nothing committed (-1001, OFFSET_INVALID).
    assert {tp.partition: tp.offset for tp in committed} == {
        p: len(seen[p]) if p in seen else -1001 for p in range(3)
    }
    consumer.close()


@pytest.mark.parametrize("acks", ["0", "1"])
def test_confluent_kafka_acks_0_and_1(env: Env, acks: str) -> None:
    """acks=0 (no answer from the broker) and acks=1: every record arrives."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = f"acks-{acks}"
    create_topic_confluent(env, topic, partitions=1)
    producer = CKProducer({"bootstrap.servers": env.kafka, "acks": acks})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    consumer = CKConsumer({"bootstrap.servers": env.kafka, "group.id": f"acks-{acks}"})

    def arrived() -> bool:
        _, high = consumer.get_watermark_offsets(CKTopicPartition(topic, 0), timeout=10)
        return bool(high == 300)

    # acks=0: flush() returns once sent, so wait for the log to hold them all.
    wait_for(arrived, timeout_s=DEADLINE_S, message=f"acks={acks}: not all 300 records arrived")
    consumer.close()


def test_admin_topics_and_groups(env: Env) -> None:
    """confluent-kafka's admin: CreateTopics and DeleteTopics forwarded to the active
    controller from a broker; ListGroups and DescribeGroups show the group above."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": env.kafka})
    create_topic_confluent(env, "doomed", partitions=2)
    admin.delete_topics(["doomed"], request_timeout=20)["doomed"].result(timeout=30)
    wait_for(
        lambda: "doomed" not in admin.list_topics(timeout=10).topics,
        timeout_s=DEADLINE_S,
        message="deleted topic still listed",
    )
    # Deleting it again: Kafka's error for the topic, not a broken connection.
    again = admin.delete_topics(["doomed"], request_timeout=20)["doomed"]
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
        again.result(timeout=30)

    groups = admin.list_consumer_groups(request_timeout=20).result(timeout=30)
    ids = {g.group_id for g in groups.valid}
    assert "ck-group" in ids, ids
    described = admin.describe_consumer_groups(["ck-group"], request_timeout=20)
    group = described["ck-group"].result(timeout=30)
    assert group.group_id == "ck-group"
    assert group.state == ConsumerGroupState.EMPTY  # its consumer closed above


def test_admin_configs_partitions_records_cluster_and_groups(
    env: Env, request: pytest.FixtureRequest
) -> None:
    """confluent-kafka's admin on one topic: DescribeConfigs (answered by the broker),
    IncrementalAlterConfigs and AlterConfigs (forwarded) with their effect seen through
    raftka's own admin, CreatePartitions, DeleteRecords moving the low watermark,
    DescribeCluster, a group's committed offsets listed and the group deleted; a raw
    OffsetForLeaderEpoch and kafka-python's DescribeLogDirs."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewPartitions,
        ResourceType,
    )

    from raftka.client import Admin

    topic = "ck-admin"
    create_topic_confluent(env, topic, partitions=1)
    ck = AdminClient({"bootstrap.servers": env.kafka})
    ours = Admin(bootstrap_servers=env.http)
    request.addfinalizer(ours.close)
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def ck_configs() -> dict[str, Any]:
        return dict(ck.describe_configs([resource], request_timeout=20)[resource].result(30))

    def our_configs() -> dict[str, Any]:
        return ours.describe_configs([topic])[topic]

    described = ck_configs()
    assert described["retention.ms"].value == "604800000"
    assert ConfigSource(described["retention.ms"].source) == ConfigSource.DEFAULT_CONFIG

    # IncrementalAlterConfigs: one SET; raftka's admin (HTTP) sees it.
    incremental = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    ck.incremental_alter_configs([incremental], request_timeout=20)[incremental].result(30)
    wait_for(
        lambda: our_configs()["retention.ms"].value == "3600000",
        timeout_s=DEADLINE_S,
        message="retention.ms never became 3600000",
    )
    wait_for(
        lambda: (
            ConfigSource(ck_configs()["retention.ms"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
        ),
        timeout_s=DEADLINE_S,
        message="the broker never described retention.ms as a topic override",
    )
    # An unknown key: Kafka's error for the resource, nothing changed.
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match=r"INVALID_CONFIG|Unknown topic config"):
        ck.incremental_alter_configs([bad], request_timeout=20)[bad].result(30)

    # AlterConfigs replaces the overrides: segment.ms set, retention.ms back to default.
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "7200000"})
    # (AlterConfigs is deprecated in Kafka's clients, in favour of the incremental one.)
    with pytest.warns(DeprecationWarning, match="alter_configs has been deprecated"):
        altered = ck.alter_configs([legacy], request_timeout=20)
    altered[legacy].result(30)

    def replaced() -> bool:
        now = our_configs()
        return now["segment.ms"].value == "7200000" and now["retention.ms"].is_default

    wait_for(replaced, timeout_s=DEADLINE_S, message="AlterConfigs did not replace the set")

    # CreatePartitions: 1 -> 3, every partition led.
    ck.create_partitions([NewPartitions(topic, 3)], request_timeout=20)[topic].result(30)

    def grown() -> bool:
        t = ck.list_topics(topic=topic, timeout=10).topics[topic]
        return len(t.partitions) == 3 and all(p.leader >= 0 for p in t.partitions.values())

    wait_for(grown, timeout_s=DEADLINE_S, message=f"{topic} never had 3 led partitions")

    # DeleteRecords: 10 records in partition 0, delete below 6, the low watermark moves.
    producer = CKProducer({"bootstrap.servers": env.kafka, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(DEADLINE_S) == 0, "records left unflushed"
    tp0 = CKTopicPartition(topic, 0, 6)
    deleted = ck.delete_records([tp0], request_timeout=20)
    assert next(iter(deleted.values())).result(30).low_watermark == 6
    earliest = ours.list_offsets({TopicPartition(topic, 0): "earliest"})
    assert earliest[TopicPartition(topic, 0)].offset == 6

    # DescribeCluster: the three brokers at their Kafka listeners.
    cluster = ck.describe_cluster(request_timeout=20).result(30)
    assert {f"{n.host}:{n.port}" for n in cluster.nodes} == set(env.kafka.split(","))
    assert cluster.controller is not None and cluster.controller.id in env.brokers.ids

    # A group's committed offsets listed, then the group deleted.
    group = "ck-admin-group"
    consumer = CKConsumer(
        {
            "bootstrap.servers": env.kafka,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    while (msg := consumer.poll(1.0)) is None or msg.error():
        assert time.monotonic() < deadline, "the group consumer read nothing"
    consumer.commit(offsets=[CKTopicPartition(topic, 0, 8)], asynchronous=False)
    consumer.close()
    listed = ck.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = listed[group].result(30).topic_partitions
    assert {(t.topic, t.partition): t.offset for t in offsets}[(topic, 0)] == 8
    ck.delete_consumer_groups([group], request_timeout=20)[group].result(30)
    remaining = ck.list_consumer_groups(request_timeout=20).result(30).valid
    assert group not in {g.group_id for g in remaining}
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        ck.delete_consumer_groups([group], request_timeout=20)[group].result(30)

    # OffsetForLeaderEpoch v2 on the leader: the current epoch ends at the log end; an
    # epoch above every known one is undefined (-1, -1), as in Kafka.
    metadata = ck.list_topics(topic=topic, timeout=10)
    leader = metadata.brokers[metadata.topics[topic].partitions[0].leader]
    address = f"{leader.host}:{leader.port}"
    latest = ours.list_offsets({TopicPartition(topic, 0): "latest"})[TopicPartition(topic, 0)]
    assert latest.leader_epoch is not None and latest.offset == 10
    answer = _offset_for_leader_epoch(address, topic, epoch=latest.leader_epoch)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
        0,
        latest.leader_epoch,
        10,
    ), answer
    above = _offset_for_leader_epoch(address, topic, epoch=latest.leader_epoch + 1)
    assert (above.error_code, above.leader_epoch, above.end_offset) == (0, -1, -1), above
    unknown = _offset_for_leader_epoch(address, "no-such-topic", epoch=0)
    assert unknown.error_code == 3, unknown  # UNKNOWN_TOPIC_OR_PARTITION

    # DescribeLogDirs through kafka-python: every broker holds partition 0 (RF 3) in
    # one of its log dirs, with its records' bytes.
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=env.kafka.split(","), request_timeout_ms=20000)
    try:
        answers = kp.describe_log_dirs(topic_partitions={topic: [0]})
    finally:
        kp.close()
    assert {a["broker"] for a in answers} == set(env.brokers.ids), answers
    for a in answers:
        sizes = [
            p["partition_size"]
            for d in a["log_dirs"]
            for t in d["topics"]
            if t["name"] == topic
            for p in t["partitions"]
            if p["partition_index"] == 0
        ]
        assert len(sizes) == 1 and sizes[0] > 0, answers


def test_offset_delete_through_kafka_python_raftka_admin_and_cli(env: Env) -> None:
    """OffsetDelete (API 47) through kafka-python's delete_group_offsets: an active
    consumer group keeps the offsets of its subscribed topic (GROUP_SUBSCRIBED_TO_TOPIC);
    once it is Empty they go, one partition at a time, the rest staying committed; an
    unknown group is GROUP_ID_NOT_FOUND. The same coordinator call serves raftka's
    GroupAdmin.delete_offsets (HTTP) and ``raftka groups delete-offsets``."""
    from click.testing import CliRunner
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CKTopicPartition
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KPTopicPartition
    from kafka.errors import GroupIdNotFoundError as KPGroupIdNotFound
    from kafka.errors import GroupSubscribedToTopicError as KPSubscribed
    from kafka.errors import NoError

    from raftka.__main__ import cli
    from raftka.client import GroupAdmin

    topic, group = "offset-delete", "offset-delete-group"
    create_topic_confluent(env, topic, partitions=3)
    consumer = CKConsumer(
        {
            "bootstrap.servers": env.kafka,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])

    def joined() -> bool:
        consumer.poll(0.2)
        return len(consumer.assignment()) == 3

    wait_for(joined, timeout_s=DEADLINE_S, message="the consumer never got its 3 partitions")
    committed = [CKTopicPartition(topic, p, 10 + p) for p in range(3)]
    consumer.commit(offsets=committed, asynchronous=False)
    kp = KafkaAdminClient(bootstrap_servers=env.kafka.split(","), request_timeout_ms=20000)
    ours = GroupAdmin(bootstrap_servers=env.http)
    try:
        tps = [KPTopicPartition(topic, p) for p in range(3)]
        assert kp.delete_group_offsets(group, tps[:1]) == {tps[0]: KPSubscribed}
        consumer.close()  # the group is Empty now

        assert kp.delete_group_offsets(group, tps[:1]) == {tps[0]: NoError}
        remaining = kp.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in remaining.items()} == {1: 11, 2: 12}
        with pytest.raises(KPGroupIdNotFound):
            kp.delete_group_offsets("no-such-group", tps[:1])

        # raftka's admin over HTTP: the same coordinator call.
        outcome = ours.delete_offsets(group, [TopicPartition(topic, 1)])
        assert outcome == {TopicPartition(topic, 1): None}
        gone = ours.delete_offsets(group, [TopicPartition("no-such-topic", 0)])
        assert [e.name for e in gone.values()] == ["UNKNOWN_TOPIC_OR_PARTITION"], gone
        assert set(ours.list_offsets(group)) == {TopicPartition(topic, 2)}

        # The CLI: its last offset goes, and the Empty group with it, as in Kafka.
        result = CliRunner().invoke(
            cli,
            [
                *("groups", "delete-offsets", "--group", group, "--topic", f"{topic}:2"),
                *("--bootstrap-server", env.http, "--api-timeout-ms", "20000"),
            ],
        )
        assert result.exit_code == 0, result.output
        assert f"{topic}\t2\tSuccessful" in result.output
        assert group not in {g.group_id for g in ours.list_groups()}
    finally:
        kp.close()
        ours.close()


def test_describe_producers_shows_the_idempotent_producers_state(env: Env) -> None:
    """DescribeProducers (API 61) through kafka-python's admin, after its idempotent
    producer wrote: the leader lists that producer with the id and epoch it was given,
    its last sequence and timestamp, no coordinator epoch and no open transaction (-1);
    a follower answers NOT_LEADER_OR_FOLLOWER, an unknown partition
    UNKNOWN_TOPIC_OR_PARTITION."""
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka import TopicPartition as KPTopicPartition
    from kafka.errors import NotLeaderForPartitionError, UnknownTopicOrPartitionError

    topic = "describe-producers"
    create_topic_confluent(env, topic, partitions=1)
    servers = env.kafka.split(",")
    before_ms = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=servers, enable_idempotence=True, acks="all")
    try:
        for i in range(5):
            producer.send(topic, value=f"v{i}".encode(), partition=0).get(timeout=DEADLINE_S)
        given = producer._transaction_manager.producer_id_and_epoch  # what the broker gave
    finally:
        producer.close(timeout=10)
    assert given.producer_id >= 0

    tp = KPTopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=20000)
    try:
        (active,) = admin.describe_producers([tp])[tp].active_producers
        assert (active.producer_id, active.producer_epoch) == (
            given.producer_id,
            given.epoch,
        )
        assert active.last_sequence == 4  # five records, sequences 0-4
        assert before_ms <= active.last_timestamp <= int(time.time() * 1000)
        assert (active.coordinator_epoch, active.current_transaction_start_offset) == (-1, -1)

        partition = (
            AdminClient({"bootstrap.servers": env.kafka})
            .list_topics(topic=topic, timeout=10)
            .topics[topic]
            .partitions[0]
        )
        follower = next(r for r in partition.replicas if r != partition.leader)
        with pytest.raises(NotLeaderForPartitionError):  # NOT_LEADER_OR_FOLLOWER
            admin.describe_producers([tp], broker_id=follower)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_producers(
                [KPTopicPartition("no-such-topic", 0)], broker_id=partition.leader
            )
    finally:
        admin.close()


def test_broker_configs_described_and_altered_through_confluent_kafka(env: Env) -> None:
    """DescribeConfigs of a broker resource (type 4) through confluent-kafka's admin:
    the broker's static properties (STATIC_BROKER_CONFIG, read-only), as GET
    /v1/broker-configs gives them; IncrementalAlterConfigs of that broker sets
    follower.replication.throttled.rate (forwarded to the controller), described then as
    DYNAMIC_BROKER_CONFIG, and DELETE removes it; AlterConfigs (legacy) replaces the
    broker's dynamic set."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    from raftka.client import Admin, AlterConfigOp

    ck = AdminClient({"bootstrap.servers": env.kafka})
    broker_id = env.brokers.ids[0]
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    key = "follower.replication.throttled.rate"

    def described() -> dict[str, Any]:
        return dict(ck.describe_configs([resource], request_timeout=20)[resource].result(30))

    first = described()
    node = first["node.id"]
    assert node.value == str(broker_id) and node.is_read_only
    assert ConfigSource(node.source) == ConfigSource.STATIC_BROKER_CONFIG
    ours = Admin(bootstrap_servers=env.http)
    try:
        over_http = ours.describe_broker_configs([broker_id])[broker_id]
    finally:
        ours.close()
    assert set(first) == set(over_http), set(first) ^ set(over_http)
    assert key not in first

    def alter(op: AlterConfigOpType, value: str | None) -> None:
        entry = ConfigEntry(key, value, incremental_operation=op)
        change = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[entry])
        ck.incremental_alter_configs([change], request_timeout=20)[change].result(30)

    alter(AlterConfigOpType.SET, "1048576")

    def dynamic() -> bool:
        entry = described().get(key)
        return (
            entry is not None
            and entry.value == "1048576"
            and ConfigSource(entry.source) == ConfigSource.DYNAMIC_BROKER_CONFIG
        )

    wait_for(dynamic, timeout_s=DEADLINE_S, message=f"{key} never described as set")
    alter(AlterConfigOpType.DELETE, None)
    wait_for(lambda: key not in described(), timeout_s=DEADLINE_S, message=f"{key} not deleted")

    # AlterConfigs replaces the set: leader's rate set, nothing else dynamic left.
    alter(AlterConfigOpType.SET, "2097152")
    wait_for(lambda: key in described(), timeout_s=DEADLINE_S, message=f"{key} never set")
    legacy = ConfigResource(
        ResourceType.BROKER,
        str(broker_id),
        set_config={"leader.replication.throttled.rate": "3145728"},
    )
    with pytest.warns(DeprecationWarning, match="alter_configs has been deprecated"):
        ck.alter_configs([legacy], request_timeout=20)[legacy].result(30)

    def replaced() -> bool:
        now = described()
        leader = now.get("leader.replication.throttled.rate")
        return key not in now and leader is not None and leader.value == "3145728"

    wait_for(replaced, timeout_s=DEADLINE_S, message="AlterConfigs did not replace the set")
    with pytest.warns(DeprecationWarning):
        cleared = ConfigResource(ResourceType.BROKER, str(broker_id), set_config={})
        ck.alter_configs([cleared], request_timeout=20)[cleared].result(30)
    wait_for(
        lambda: "leader.replication.throttled.rate" not in described(),
        timeout_s=DEADLINE_S,
        message="AlterConfigs with nothing did not clear the broker's dynamic configs",
    )

    # Raw requests to this broker: another broker's id is Kafka's INVALID_REQUEST (its
    # clients send a broker resource to that broker); the empty name describes the
    # cluster-wide dynamic defaults, set here through raftka's admin.
    broker = ck.list_topics(timeout=10).brokers[broker_id]
    address = f"{broker.host}:{broker.port}"
    wrong = _describe_broker_configs(address, str(env.brokers.ids[1]))
    assert wrong.error_code == 42 and not wrong.configs, wrong  # INVALID_REQUEST
    ours = Admin(bootstrap_servers=env.http)
    try:
        ours.incremental_alter_broker_configs({None: [AlterConfigOp(key, "4194304", "SET")]})

        def default_described() -> bool:
            answer = _describe_broker_configs(address, "")
            rows = {c.name: (c.value, c.config_source) for c in answer.configs}
            return answer.error_code == 0 and rows == {key: ("4194304", 3)}

        wait_for(default_described, timeout_s=DEADLINE_S, message="default never described")
        ours.incremental_alter_broker_configs({None: [AlterConfigOp(key, op="DELETE")]})
    finally:
        ours.close()


def _raw(address: str, key: int, version: int, request: Any, response_cls: type[Any]) -> Any:
    """One non-flexible request (header v1) on its own connection, kio both ways."""
    import io

    from kio.serial import entity_reader, entity_writer

    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    with _connect(address) as sock:
        sock.sendall(_framed(struct.pack(">hhih", key, version, 7, -1) + body.getvalue()))
        frame = _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
    assert struct.unpack_from(">i", frame)[0] == 7
    response, _ = entity_reader(response_cls)(frame, 4)
    return response


def _describe_broker_configs(address: str, name: str) -> Any:
    """The one result of a DescribeConfigs v1 of broker resource ``name``."""
    from kio.schema.describe_configs.v1 import request as rq
    from kio.schema.describe_configs.v1 import response as rs

    resource = rq.DescribeConfigsResource(
        resource_type=4, resource_name=name, configuration_keys=None
    )
    request = rq.DescribeConfigsRequest(resources=(resource,))
    return _raw(address, 32, 1, request, rs.DescribeConfigsResponse).results[0]


def _offset_for_leader_epoch(address: str, topic: str, *, epoch: int) -> Any:
    """Partition 0's answer to an OffsetForLeaderEpoch v2 for ``epoch``."""
    from kio.schema.offset_for_leader_epoch.v2 import request as rq
    from kio.schema.offset_for_leader_epoch.v2 import response as rs

    partition = rq.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=-1, leader_epoch=epoch
    )
    request = rq.OffsetForLeaderEpochRequest(
        topics=(rq.OffsetForLeaderTopic(topic=topic, partitions=(partition,)),)
    )
    answer = _raw(address, 23, 2, request, rs.OffsetForLeaderEpochResponse)
    return answer.topics[0].partitions[0]


def test_kafka_python_acks_all_and_group_commit(env: Env) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KPTopicPartition

    topic = "kp-group"
    create_topic_confluent(env, topic)
    servers = env.kafka.split(",")
    producer = KafkaProducer(bootstrap_servers=servers, acks="all")
    futures = [producer.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i) for i in range(500)]
    producer.flush(timeout=DEADLINE_S)
    offsets = [f.get(timeout=DEADLINE_S) for f in futures]
    assert all(m.offset >= 0 for m in offsets)
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=servers,
        group_id="kp-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(DEADLINE_S * 1000),
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 500:
            break
    assert sorted(got) == sorted(b"v%d" % i for i in range(500))
    consumer.commit()
    ends = consumer.end_offsets([KPTopicPartition(topic, p) for p in range(3)])
    for tp, end in ends.items():
        assert consumer.committed(tp) == end
    consumer.close()


def test_records_cross_both_protocols_unchanged(env: Env) -> None:
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = "cross"
    create_topic_confluent(env, topic, partitions=1)
    # Kafka listener -> raftka's client.
    producer = CKProducer({"bootstrap.servers": env.kafka, "acks": "all", "linger.ms": 5})
    sent = [
        (
            f"k{i}".encode(),
            f"v{i}".encode() * (i % 4),
            [("h", f"{i}".encode())],
            1_700_000_000_000 + i,
        )
        for i in range(200)
    ]
    for key, value, headers, ts in sent:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    with Consumer(bootstrap_servers=env.http, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        read: list[Any] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(read) < len(sent):
            assert time.monotonic() < deadline, f"read {len(read)} of {len(sent)}"
            for records in consumer.poll(timeout_ms=1000).values():
                read.extend(records)
        assert [(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in read] == [
            (k, v, h, ts) for k, v, h, ts in sent
        ]
        assert [r.offset for r in read] == list(range(len(sent)))

    # raftka's client -> Kafka listener (timestamps within message.timestamp.*.max.ms).
    base_ms = int(time.time() * 1000) - 60_000
    with Producer(bootstrap_servers=env.http, acks="all") as raftka_producer:
        futures = [
            raftka_producer.send(
                topic,
                key=b"r%d" % i,
                value=b"x" * i,
                headers=[("n", b"%d" % i)],
                timestamp_ms=base_ms + i,
                partition=0,
            )
            for i in range(100)
        ]
        raftka_producer.flush()
        first = futures[0].result(timeout=DEADLINE_S).offset
    consumer = CKConsumer(
        {"bootstrap.servers": env.kafka, "group.id": "cross-reader", "enable.auto.commit": False}
    )
    consumer.assign([CKTopicPartition(topic, 0, first)])
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 100:
        assert time.monotonic() < deadline, f"read {len(got)} of 100"
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        got.append((msg.key(), msg.value(), msg.headers(), msg.timestamp()[1], msg.offset()))
    consumer.close()
    assert got == [
        (b"r%d" % i, b"x" * i, [("n", b"%d" % i)], base_ms + i, first + i) for i in range(100)
    ]


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)"
)
def test_kcat_metadata_produce_consume(env: Env) -> None:
    first = env.kafka.split(",")[0]
    listing = subprocess.run(
        ["kcat", "-b", first, "-L", "-m", "20"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for address in env.kafka.split(","):
        assert f"at {address}" in listing, listing
    # Auto-creation (auto.create.topics.enable defaults to true) on kcat's first produce.
    lines = "".join(f"k{i}:line {i}\n" for i in range(50))
    subprocess.run(
        [
            "kcat",
            "-b",
            first,
            "-t",
            "kcat-topic",
            "-P",
            "-K:",
            "-X",
            "topic.request.required.acks=-1",
        ],
        input=lines,
        text=True,
        timeout=60,
        check=True,
    )
    out = subprocess.run(
        ["kcat", "-b", first, "-t", "kcat-topic", "-C", "-e", "-o", "beginning", "-f", "%k:%s\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert sorted(out.splitlines()) == sorted(lines.splitlines())


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _api_versions(sock: socket.socket, correlation_id: int) -> int:
    """Send ApiVersions v0 and return the answer's error code (0 when all is well)."""
    frame = struct.pack(">hhih", 18, 0, correlation_id, -1)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    head = _recv(sock, 4)
    (size,) = struct.unpack(">i", head)
    body = _recv(sock, size)
    assert struct.unpack_from(">i", body)[0] == correlation_id
    return int(struct.unpack_from(">h", body, 4)[0])


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


frames = st.one_of(
    st.binary(max_size=64),  # garbage, often a truncated size or header
    st.builds(  # a declared size that lies (huge, negative or short of the bytes sent)
        lambda size, rest: struct.pack(">i", size) + rest,
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=64),
    ),
    st.builds(  # a well-framed request of any API key and version, garbage body
        lambda key, version, body: _framed(struct.pack(">hhih", key, version, 1, -1) + body),
        st.integers(-5, 100),
        st.integers(-2, 30),
        st.binary(max_size=128),
    ),
)


def _fetch_frame(correlation_id: int, topic: str, max_wait_ms: int) -> bytes:
    """A Fetch v4 (header v1) of partition 0 from offset 0, long-polling ``max_wait_ms``."""
    import datetime
    import io

    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.serial import entity_writer

    request = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1_048_576,
        isolation_level=0,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536),
                ),
            ),
        ),
    )
    body = io.BytesIO()
    entity_writer(FetchRequest)(body, request)
    return _framed(struct.pack(">hhih", 1, 4, correlation_id, -1) + body.getvalue())


def test_a_long_poll_delays_only_its_own_connection(env: Env) -> None:
    """A Fetch long-polling an empty partition holds the answers after it on its own
    connection (responses in request order), and no other connection's."""
    from confluent_kafka.admin import AdminClient

    topic = "long-poll"
    create_topic_confluent(env, topic, partitions=1)
    metadata = AdminClient({"bootstrap.servers": env.kafka}).list_topics(topic=topic, timeout=10)
    leader = metadata.brokers[metadata.topics[topic].partitions[0].leader]
    address = f"{leader.host}:{leader.port}"
    wait_ms = 3000
    with _connect(address) as polling, _connect(address) as other:
        started = time.monotonic()
        # Pipelined: the Fetch, then ApiVersions behind it on the same connection.
        polling.sendall(
            _fetch_frame(1, topic, wait_ms) + _framed(struct.pack(">hhih", 18, 0, 2, -1))
        )
        assert _api_versions(other, 3) == 0
        other_s = time.monotonic() - started
        first = _recv(polling, struct.unpack(">i", _recv(polling, 4))[0])
        fetch_s = time.monotonic() - started
        second = _recv(polling, struct.unpack(">i", _recv(polling, 4))[0])
    assert struct.unpack_from(">i", first)[0] == 1 and struct.unpack_from(">i", second)[0] == 2
    assert fetch_s >= (wait_ms - 500) / 1000, f"the fetch answered after {fetch_s:.2f} s"
    assert other_s < fetch_s - 1.0, (
        f"another connection waited {other_s:.2f} s behind a {fetch_s:.2f} s long poll"
    )


def test_fuzzed_frames_close_or_answer_and_hurt_nobody(env: Env) -> None:
    address = env.kafka.split(",")[0]
    bystander = _connect(address)
    assert _api_versions(bystander, 1) == 0

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=frames)
    def fuzz(data: bytes) -> None:
        with _connect(address) as sock:
            sock.settimeout(2.0)
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(65536):  # answers (Kafka's errors) until the broker closes
                    pass
            except TimeoutError:
                # A frame still waiting for the bytes it declared: the broker holds it
                # (bounded by socket.request.max.bytes), which is Kafka's behaviour too.
                pass
            except ConnectionError:
                pass

    fuzz()
    # The broker is up and the connection opened before the fuzzing still works.
    assert _api_versions(bystander, 2) == 0
    bystander.close()
    for b in env.brokers.ids:
        assert env.brokers[b].popen is not None and env.brokers[b].popen.poll() is None


def test_offset_delete_survives_a_coordinator_failover(env: Env) -> None:
    """OffsetDelete answers once its tombstones are committed (acks=all): with the
    coordinator killed right after the answer, the broker that takes the group over
    (replaying __consumer_offsets) has the deleted offset gone and the other kept. Last
    in this module: it kills a broker (and restarts it)."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KPTopicPartition
    from kafka.errors import NoError

    from raftka.client import GroupAdmin, OffsetAndMetadata
    from raftka.common.errors import KafkaError
    from raftka.local import http_json

    topic, group = "offset-delete-failover", "offset-delete-failover-group"
    create_topic_confluent(env, topic, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    ours = GroupAdmin(bootstrap_servers=env.http, default_api_timeout_ms=20000)
    kp = KafkaAdminClient(bootstrap_servers=env.kafka.split(","), request_timeout_ms=20000)
    try:
        ours.alter_offsets(group, {tp0: OffsetAndMetadata(5), tp1: OffsetAndMetadata(6)})
        assert kp.delete_group_offsets(group, [KPTopicPartition(topic, 0)]) == {
            KPTopicPartition(topic, 0): NoError
        }
    finally:
        kp.close()
    _, found = http_json(
        env.brokers[env.brokers.ids[0]].address,
        "/v1/find-coordinator",
        method="POST",
        body={"key": group},
    )
    assert isinstance(found, dict) and found.get("error") is None, found
    coordinator = int(found["node_id"])
    env.brokers[coordinator].kill()
    try:

        def taken_over() -> dict[TopicPartition, int] | None:
            try:
                committed = ours.list_offsets(group)
            except KafkaError:
                return None  # the new coordinator is still being elected or loading
            return {tp: om.offset for tp, om in committed.items()}

        after = wait_for(taken_over, timeout_s=DEADLINE_S, message="no broker took the group over")
        assert after == {tp1: 6}, after
    finally:
        ours.close()
        env.brokers[coordinator].start()
        env.brokers.wait_unfenced(coordinator)
