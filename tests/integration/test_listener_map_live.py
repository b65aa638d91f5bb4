"""Listeners named Kafka's way (``listener.security.protocol.map``), on real brokers:
``REPLICATION`` (PLAINTEXT) is raftka's HTTP API, which the brokers register and
replicate over; ``CLIENTS`` (SSL, its settings under ``listener.name.clients.ssl.*``)
is the Kafka listener, where kafka-python produces and consumes over TLS, and which
Metadata advertises by its own port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.local import LocalCluster
from raftka.local.brokers import LocalBrokers
from raftka.local.certs import new_ca

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("listener-map")
    ca = new_ca(tmp / "pki")
    node = ca.issue(tmp / "pki", "broker", hosts=("localhost", "127.0.0.1"))
    props = {
        "listener.name.clients.ssl.certfile": str(node.certfile),
        "listener.name.clients.ssl.keyfile": str(node.keyfile),
        "offsets.topic.num.partitions": "1",
    }
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster,
            extra_properties=props,
            kafka_listener=True,
            kafka_security_protocol="SSL",
            listener_names=("REPLICATION", "CLIENTS"),
        ) as brokers:
            brokers.start()
            yield {"bootstrap": brokers.kafka_bootstrap_servers, "ca": str(ca.cafile)}


def test_kafka_python_over_the_mapped_ssl_listener(env: dict[str, Any]) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    servers = env["bootstrap"].split(",")
    tls = {"security_protocol": "SSL", "ssl_cafile": env["ca"]}
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=20_000, **tls)
    try:
        admin.create_topics([NewTopic("mapped", 1, 3)])
        # Every broker advertises its CLIENTS port: the listener Metadata names.
        advertised = sorted(f"{b['host']}:{b['port']}" for b in admin.describe_cluster()["brokers"])
        assert advertised == sorted(servers)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", **tls)
    try:
        producer.send("mapped", b"through CLIENTS").get(timeout=DEADLINE_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=servers, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **tls
    )
    try:
        consumer.assign([TopicPartition("mapped", 0)])
        first = next(iter(consumer))
        assert first.value == b"through CLIENTS"
    finally:
        consumer.close()
