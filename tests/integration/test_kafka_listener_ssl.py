"""The Kafka listener over TLS (``SSL://`` in ``listeners``, issue #17 item 1, the
first listener with it), with real clients: confluent-kafka (librdkafka), kafka-python
and kcat produce and consume through it, verifying the brokers' certificates (made by
raftka.local.certs) and their host names; a client that trusts another CA, or that
speaks plaintext to the TLS port, gets nothing. With ``ssl.client.auth=required`` a
client without a certificate from the brokers' CA is refused at the handshake, and one
whose certificate no ``ssl.principal.mapping.rules`` rule maps is refused right after it;
the principal a certificate maps to is what the authorizer decides for.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_wire_helpers import authentications

from raftka.broker.config import STANDARD_AUTHORIZER
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.certs import new_ca

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("kafka-ssl")
    ca = new_ca(tmp / "pki")
    # One certificate for the three local brokers: they all listen on 127.0.0.1.
    node = ca.issue(tmp / "pki", "broker", hosts=("localhost", "127.0.0.1"))
    client = ca.issue(tmp / "pki", "alice")
    # From the brokers' CA, but no ssl.principal.mapping.rules rule names it.
    unmapped = ca.issue(tmp / "pki", "bob")
    # Mapped (User:CAROL), but not a super user and granted nothing.
    carol = ca.issue(tmp / "pki", "carol")
    stranger_ca = new_ca(tmp / "other", name="someone-else")
    stranger = stranger_ca.issue(tmp / "other", "mallory")
    props = {
        "ssl.certfile": str(node.certfile),
        "ssl.keyfile": str(node.keyfile),
        "ssl.cafile": str(ca.cafile),
        "ssl.client.auth": "required",
        # CN=alice is User:ALICE, CN=carol User:CAROL; no other subject is mapped.
        "ssl.principal.mapping.rules": "RULE:^CN=(alice|carol)$/$1/U",
        # ACLs enforced: ALICE (the clients of the other tests) may do anything.
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ALICE",
        "offsets.topic.num.partitions": "1",
    }
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster, extra_properties=props, kafka_listener=True, kafka_security_protocol="SSL"
        ) as brokers:
            brokers.start()
            yield {
                "bootstrap": brokers.kafka_bootstrap_servers,
                "ca": str(ca.cafile),
                "cert": str(client.certfile),
                "key": str(client.keyfile),
                "other_ca": str(stranger_ca.cafile),
                "other_cert": str(stranger.certfile),
                "other_key": str(stranger.keyfile),
                "unmapped_cert": str(unmapped.certfile),
                "unmapped_key": str(unmapped.keyfile),
                "carol_cert": str(carol.certfile),
                "carol_key": str(carol.keyfile),
                "http": [b.address for b in brokers.brokers.values()],
            }


def confluent(tls: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": tls["bootstrap"],
        "security.protocol": "SSL",
        "ssl.ca.location": tls["ca"],
        "ssl.certificate.location": tls["cert"],
        "ssl.key.location": tls["key"],
        **overrides,
    }


def test_confluent_kafka_produces_and_consumes_over_tls(tls: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent(tls))
    admin.create_topics([NewTopic("tls-topic", 1, 3)], request_timeout=20)["tls-topic"].result(30)
    producer = Producer(confluent(tls))

    def produced() -> bool:
        errors: list[Any] = []
        producer.produce("tls-topic", b"over tls", on_delivery=lambda e, m: errors.append(e))
        producer.flush(10)
        return errors == [None]

    wait_for(produced, timeout_s=DEADLINE_S, message="no record produced over TLS")
    consumer = Consumer(
        confluent(tls, **{"group.id": "tls-group", "auto.offset.reset": "earliest"})
    )
    try:
        consumer.subscribe(["tls-topic"])
        seen: list[bytes] = []

        def consumed() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return b"over tls" in seen

        wait_for(consumed, timeout_s=DEADLINE_S, message=f"consumed {seen}")
    finally:
        consumer.close()


def test_kafka_python_and_kcat_over_tls(tls: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    servers = tls["bootstrap"].split(",")
    ssl = {
        "security_protocol": "SSL",
        "ssl_cafile": tls["ca"],
        "ssl_certfile": tls["cert"],
        "ssl_keyfile": tls["key"],
    }
    producer = KafkaProducer(bootstrap_servers=servers, **ssl)
    producer.send("tls-kp", b"kafka-python over tls").get(timeout=DEADLINE_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=servers, auto_offset_reset="earliest", **ssl)
    try:
        consumer.assign([TopicPartition("tls-kp", 0)])
        seen: list[bytes] = []

        def consumed() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
            return b"kafka-python over tls" in seen

        wait_for(consumed, timeout_s=DEADLINE_S, message=f"consumed {seen}")
    finally:
        consumer.close()
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    out = subprocess.run(
        [
            kcat,
            "-b",
            tls["bootstrap"],
            "-X",
            "security.protocol=SSL",
            "-X",
            f"ssl.ca.location={tls['ca']}",
            "-X",
            f"ssl.certificate.location={tls['cert']}",
            "-X",
            f"ssl.key.location={tls['key']}",
            "-C",
            "-t",
            "tls-kp",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=True,
    )
    assert "kafka-python over tls" in out.stdout


@pytest.mark.parametrize(
    "overrides",
    [
        # The brokers' certificate is not from a CA this client trusts.
        {"ssl.ca.location": "other_ca"},
        # A client certificate from another CA (ssl.client.auth=required).
        {"ssl.certificate.location": "other_cert", "ssl.key.location": "other_key"},
        # No client certificate at all.
        {"ssl.certificate.location": None, "ssl.key.location": None},
        # Plaintext to the TLS port.
        {"security.protocol": "PLAINTEXT"},
    ],
    ids=["untrusted-broker", "foreign-client-cert", "no-client-cert", "plaintext"],
)
def test_a_client_that_fails_tls_gets_nothing(
    tls: dict[str, Any], overrides: dict[str, str | None]
) -> None:
    from confluent_kafka.admin import AdminClient

    config = confluent(tls)
    for key, value in overrides.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = tls.get(value, value)
    failed = _ssl_authentications(tls, "failed")
    admin = AdminClient(config)
    # librdkafka never gets a Metadata answer: the handshake (or the plaintext
    # request on a TLS port) fails on every connection it tries.
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    # The broker counts each refused handshake as Kafka does (an untrusted broker's
    # client aborts the handshake with an alert, which fails the broker's side too).
    wait_for(
        lambda: _ssl_authentications(tls, "failed") > failed,
        timeout_s=DEADLINE_S,
        message="failed_authentication_total{listener=SSL} did not count the handshake",
    )


def _ssl_authentications(tls: dict[str, Any], outcome: str) -> float:
    return authentications(tls["http"], "SSL", outcome)


def test_a_certificate_no_rule_maps_is_refused(tls: dict[str, Any]) -> None:
    """bob's certificate is from the brokers' CA, so the TLS handshake succeeds, but no
    rule of ssl.principal.mapping.rules names him: the broker closes the connection
    before reading a request (Kafka fails the authentication), and counts it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    failed = _ssl_authentications(tls, "failed")
    refused = AdminClient(
        confluent(
            tls,
            **{
                "ssl.certificate.location": tls["unmapped_cert"],
                "ssl.key.location": tls["unmapped_key"],
            },
        )
    )
    with pytest.raises(KafkaException):
        refused.list_topics(timeout=5)
    wait_for(
        lambda: _ssl_authentications(tls, "failed") > failed,
        timeout_s=DEADLINE_S,
        message="failed_authentication_total{listener=SSL} did not count bob's certificate",
    )
    succeeded = _ssl_authentications(tls, "successful")
    assert AdminClient(confluent(tls)).list_topics(timeout=DEADLINE_S).brokers
    assert _ssl_authentications(tls, "successful") > succeeded, "alice was not counted"


def test_a_certificate_principal_is_what_the_acls_decide_for(tls: dict[str, Any]) -> None:
    """carol's certificate maps to User:CAROL, who is no super user and has no ACL: her
    produce is refused with TOPIC_AUTHORIZATION_FAILED (her certificate authenticated
    her; the authorizer refused her), while User:ALICE's succeeds."""
    from confluent_kafka import KafkaError, Producer

    carol = Producer(
        confluent(
            tls,
            **{
                "ssl.certificate.location": tls["carol_cert"],
                "ssl.key.location": tls["carol_key"],
                "message.timeout.ms": 5000,
            },
        )
    )
    outcome: list[Any] = []
    carol.produce("carol-topic", b"x", on_delivery=lambda e, m: outcome.append(e))
    carol.flush(10)
    assert outcome and outcome[0] is not None, "User:CAROL had a record acknowledged"
    assert outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome[0]
