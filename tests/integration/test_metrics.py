"""GET /metrics on every controller and broker of a real cluster (3 + 3 processes),
parsed with prometheus_client's own parser.

After a topic of 3 partitions x 3 replicas, 30 records produced to it and a group's
committed offset: each broker has 3 replicas, the leaders over the brokers sum to 3, bytes
and messages in sum to what was produced, the group's lag is what it left unread,
exactly one controller is active and every controller counts the topic and its
partitions.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from group_helpers import commit_offsets
from prometheus_client.parser import text_string_to_metric_families

from raftka.client import Consumer, NewTopic, Producer, TopicPartition
from raftka.client.group_admin import GroupAdmin
from raftka.client.structs import OffsetAndMetadata
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

API_TIMEOUT_MS = 20_000
RECORDS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(Path(tmp_path_factory.mktemp("metrics"))) as started:
        yield started


RM = "kafka_server_replicamanager_"
TOPICS = "kafka_server_brokertopicmetrics_"
REQUESTS = "kafka_network_requestmetrics_requests_total"
TOTAL_TIME = "kafka_network_requestmetrics_totaltimems"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(address: str) -> Samples:
    """``sample name -> [(labels, value)]`` from one process's /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        assert response.headers.get_content_type() == "text/plain"
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    wanted = labels.items()
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in wanted)]
    assert len(found) == 1, f"{name}{labels}: {found} in {sorted(samples)}"
    return found[0]


def on_topic(scraped: list[Samples], name: str, topic: str) -> float:
    return sum(v for s in scraped for labels, v in s.get(name, []) if labels["topic"] == topic)


def test_every_process_exports_kafka_metrics(cluster: RaftkaCluster) -> None:
    topic = cluster.create_topic(partitions=3, replication_factor=3)
    with Producer(
        bootstrap_servers=cluster.bootstrap_servers, max_block_ms=API_TIMEOUT_MS, acks="all"
    ) as producer:
        futures = [producer.send(topic, b"value-%d" % i, partition=i % 3) for i in range(RECORDS)]
        producer.flush(timeout_ms=API_TIMEOUT_MS)
        assert [f.result(0).offset for f in futures[:3]] == [0, 0, 0]
    group = cluster.unique_name("group")
    with GroupAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        # Partition 0 read up to offset 4 of its 10 records: a lag of 6.
        commit_offsets(admin, group, {TopicPartition(topic, 0): OffsetAndMetadata(4)})

    brokers = [cluster.brokers[i].address for i in cluster.brokers.ids]

    expected_lag = RECORDS // 3 - 4

    def lag_of(s: Samples) -> list[float]:
        lags = s.get("kafka_consumergroup_group_lag", [])
        return [v for labels, v in lags if labels["group"] == group]

    def settled() -> list[Samples] | None:
        # The followers' fetches and HWs trail the produce: wait for the ISR to be full
        # and the coordinator's replica to have the HW (poll with a deadline).
        scraped = [scrape(a) for a in brokers]
        under = sum(value(s, f"{RM}underreplicatedpartitions") for s in scraped)
        lags = [v for s in scraped for v in lag_of(s)]
        return scraped if under == 0 and lags == [expected_lag] else None

    scraped = wait_for(
        settled, timeout_s=30, message=f"under-replicated partitions, or no lag {expected_lag}"
    )
    for s in scraped:
        assert value(s, f"{RM}partitioncount") >= 3  # and __consumer_offsets'
        assert value(s, f"{RM}offlinereplicacount") == 0
        purgatory = "kafka_server_delayedoperationpurgatory_purgatorysize"
        assert value(s, purgatory, delayedOperation="Produce") == 0
        assert value(s, "raftka_broker_eventloop_lag_ms", quantile="0.99") >= 0
    # A scrape counts once answered: the next one shows it.
    assert value(scrape(brokers[0]), REQUESTS, request="Metrics") >= 1
    bytes_in = on_topic(scraped, f"{TOPICS}bytesin_total", topic)
    assert bytes_in > RECORDS * len(b"value-0")
    messages = on_topic(scraped, f"{TOPICS}messagesin_total", topic)
    assert messages == RECORDS
    # Two followers fetched every byte from the leaders.
    replicated = on_topic(
        scraped, "kafka_server_brokertopicmetrics_replicationbytesout_total", topic
    )
    assert replicated >= 2 * bytes_in
    produced = [value(s, f"{TOTAL_TIME}_count", request="Produce") for s in scraped]
    assert sum(produced) >= 1
    # One leader per partition: with every topic at RF 3 on 3 brokers, the replicas are
    # three times the leaders.
    leaders = sum(value(s, f"{RM}leadercount") for s in scraped)
    partitions = sum(value(s, f"{RM}partitioncount") for s in scraped)
    assert leaders * 3 == partitions

    controllers = [n.address for n in cluster.controllers.nodes()]
    scraped_c = [scrape(a) for a in controllers]
    active = [value(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in scraped_c]
    assert sorted(active) == [0, 0, 1]
    leader_ids = {value(s, "kafka_server_raftmetrics_current_leader") for s in scraped_c}
    assert len(leader_ids) == 1 and leader_ids != {-1}
    for s in scraped_c:
        assert value(s, "kafka_controller_kafkacontroller_globaltopiccount") >= 2  # + offsets
        assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
        assert value(s, "kafka_server_raftmetrics_high_watermark") > 0
        assert value(s, "kafka_server_raftmetrics_current_state", state="leader") in (0, 1)
        assert value(s, "raftka_raft_elections_total") >= 1  # each knows the leader
    active_one = scraped_c[active.index(1)]
    assert value(active_one, "kafka_server_raftmetrics_commit_latency_ms_count") >= 1
    assert value(active_one, REQUESTS, request="CreateTopics") >= 1


SPLIT = "kafka_network_requestmetrics_"
STAGES = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems")


def summed(scraped: list[Samples], name: str, request: str) -> float:
    return sum(v for s in scraped for labels, v in s.get(name, []) if labels["request"] == request)


def test_request_time_split_remote_is_the_acks_all_wait(cluster: RaftkaCluster) -> None:
    """Every request's time is split into Kafka's stages: Produce and Fetch have counts
    in each; an acks=1 produce spends no remote time (it never parks) while an acks=all
    one waits for its followers there; the stages add up to the total."""
    topic = cluster.create_topic(partitions=1, replication_factor=3)
    brokers = [cluster.brokers[i].address for i in cluster.brokers.ids]

    def produce(acks: int | str) -> float:
        """The brokers' Produce remote time (ms) these requests added."""
        before = summed([scrape(a) for a in brokers], f"{SPLIT}remotetimems_sum", "Produce")
        with Producer(
            bootstrap_servers=cluster.bootstrap_servers,
            max_block_ms=API_TIMEOUT_MS,
            acks=acks,
            enable_idempotence=acks == "all",
        ) as producer:
            for i in range(5):  # one request each
                producer.send(topic, b"split-%d" % i).result(API_TIMEOUT_MS / 1000)
        after = summed([scrape(a) for a in brokers], f"{SPLIT}remotetimems_sum", "Produce")
        return after - before

    # Only this test produces while it runs (the module's tests run one after another).
    assert produce(1) == 0
    assert produce("all") > 0
    scraped = [scrape(a) for a in brokers]
    for api in ("Produce", "Fetch"):
        # Local, send and remote (acks=all above; fetch long polls) took time on every
        # broker serving these APIs; queue time only where one waited for an I/O worker.
        # A stage shown for an API counts every request of it, as the total does.
        for stage in ("localtimems", "responsesendtimems", "remotetimems", "totaltimems"):
            assert summed(scraped, f"{SPLIT}{stage}_count", api) >= 5, (api, stage)
        for s in scraped:
            total_count = summed([s], f"{SPLIT}totaltimems_count", api)
            for stage in STAGES:
                shown = [
                    v
                    for labels, v in s.get(f"{SPLIT}{stage}_count", [])
                    if labels["request"] == api
                ]
                assert shown in ([], [total_count]), (api, stage, shown, total_count)
        total = summed(scraped, f"{SPLIT}totaltimems_sum", api)
        parts = sum(summed(scraped, f"{SPLIT}{stage}_sum", api) for stage in STAGES)
        assert abs(total - parts) <= 0.01 * total + 1.0, (api, total, parts)


def test_lag_of_partitions_led_by_every_broker(cluster: RaftkaCluster) -> None:
    """A group committed offsets on 3 partitions, each led by (and only on) a different
    broker: the coordinator exports the lag of all 3 (two through their leaders' HW),
    and the lag drops to 0 once a consumer has read and committed everything."""
    ids = sorted(cluster.brokers.ids)
    topic = cluster.unique_name("lag")
    cluster.admin.create_topics(
        [NewTopic(topic, replica_assignment={p: (b,) for p, b in enumerate(ids)})],
        timeout_ms=API_TIMEOUT_MS,
    )
    cluster.wait_topic(topic, len(ids))
    per_partition = 10
    with Producer(
        bootstrap_servers=cluster.bootstrap_servers, max_block_ms=API_TIMEOUT_MS, acks="all"
    ) as producer:
        for i in range(per_partition * len(ids)):
            producer.send(topic, b"lag-%d" % i, partition=i % len(ids))
        producer.flush(timeout_ms=API_TIMEOUT_MS)
    group = cluster.unique_name("lag-group")
    committed = 3
    with GroupAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(committed) for p in range(3)}
        coordinator = commit_offsets(admin, group, offsets)
    address = cluster.brokers[coordinator].address

    def lags() -> dict[str, float]:
        found = scrape(address).get("kafka_consumergroup_group_lag", [])
        return {
            labels["partition"]: v
            for labels, v in found
            if labels["group"] == group and labels["topic"] == topic
        }

    expected = {str(p): per_partition - committed for p in range(len(ids))}
    wait_for(lambda: lags() == expected, timeout_s=30, message=lambda: f"lag {lags()}")
    with Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        default_api_timeout_ms=API_TIMEOUT_MS,
    ) as consumer:
        consumer.subscribe([topic])
        left = (per_partition - committed) * len(ids)

        def consumed() -> bool:
            nonlocal left
            left -= sum(len(rs) for rs in consumer.poll(200).values())
            return left <= 0

        wait_for(consumed, timeout_s=30, message=lambda: f"{left} records not consumed")
        consumer.commit()
    zero = dict.fromkeys(expected, 0.0)
    wait_for(lambda: lags() == zero, timeout_s=30, message=lambda: f"lag {lags()}")
