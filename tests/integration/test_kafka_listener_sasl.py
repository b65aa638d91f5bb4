"""SASL on the Kafka listener (``SASL_PLAINTEXT://`` and ``SASL_SSL://`` in
``listeners``, issue #17 item 2), with real clients against real brokers.

A user's SCRAM credential is stored through the controller's AlterUserScramCredentials
(the metadata log, so every broker has it); confluent-kafka (librdkafka) and
kafka-python then authenticate with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN and produce
and consume. A wrong password and an unknown user are refused with the same error
(SASL_AUTHENTICATION_FAILED), and nothing is produced. On raw sockets: a request
before authentication closes the connection unanswered, an oversized frame before
authentication closes it, a failed exchange is answered and then closed, and a
SaslHandshake naming a mechanism that is not enabled gets UNSUPPORTED_SASL_MECHANISM
with the enabled ones.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kafka_wire_helpers import authentications as listener_authentications
from kafka_wire_helpers import closed, kafka_request, read_answer, read_exactly

from raftka.common.messages.controller import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertionData,
)
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.processes import http_post
from raftka.local.secure import sasl_ssl_setup

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
PASSWORD = "alice-secret"
MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"


def add_user(cluster: LocalCluster, user: str, password: str) -> None:
    """AlterUserScramCredentials at the active controller, once per SCRAM mechanism
    (KRaft Kafka refuses one user twice in a request): the salted password travels,
    never the password (Kafka's protocol)."""
    for mechanism, hash_name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, 4096)
        upsertion = ScramCredentialUpsertionData(
            name=user, mechanism=mechanism, iterations=4096, salt=salt, salted_password=salted
        )
        body = msgspec.json.encode(AlterUserScramCredentialsRequest(upsertions=[upsertion]))
        leader = cluster.wait_leader()
        status, answer, _ = http_post(
            cluster.controllers[leader].address, "/v1/scram-credentials", body, "application/json"
        )
        assert status == 200, answer
        results = msgspec.json.decode(answer)["results"]
        assert all(r["error"] is None for r in results), results


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("kafka-sasl")
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        props = {"sasl.enabled.mechanisms": MECHANISMS, "offsets.topic.num.partitions": "1"}
        with LocalBrokers(
            cluster,
            extra_properties=props,
            kafka_listener=True,
            kafka_security_protocol="SASL_PLAINTEXT",
        ) as brokers:
            brokers.start()
            add_user(cluster, "alice", PASSWORD)
            yield {
                "bootstrap": brokers.kafka_bootstrap_servers,
                "cluster": cluster,
                "http": [b.address for b in brokers.brokers.values()],
            }


def produce_until_acked(producer: Any, topic: str, what: str) -> None:
    """Produce one record until it is acknowledged: a credential reaches every broker
    through the metadata log, and the topic is auto-created, so the first tries may
    fail."""

    def delivered() -> bool:
        acked: list[Any] = []
        producer.produce(topic, b"hello", on_delivery=lambda e, m: acked.append(e))
        producer.flush(5)
        return bool(acked) and acked[0] is None

    wait_for(delivered, timeout_s=DEADLINE_S, message=f"no record acknowledged {what}")


def authentications(sasl: dict[str, Any], outcome: str) -> float:
    """Kafka's authentication counters of the SASL_PLAINTEXT listener, all brokers."""
    return listener_authentications(sasl["http"], "SASL_PLAINTEXT", outcome)


def confluent(sasl: dict[str, Any], mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "bootstrap.servers": sasl["bootstrap"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def test_confluent_kafka_and_kafka_python_authenticate_and_work(sasl: dict[str, Any]) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    producer = Producer(confluent(sasl, "SCRAM-SHA-256"))
    produce_until_acked(producer, "sasl-topic", "over SASL_PLAINTEXT with SCRAM-SHA-256")
    for i in range(4):
        producer.produce("sasl-topic", b"r%d" % i)
    assert producer.flush(DEADLINE_S) == 0

    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        consumer = KafkaConsumer(
            bootstrap_servers=sasl["bootstrap"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
            consumer_timeout_ms=10_000,
        )
        tp = TopicPartition("sasl-topic", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        for m in consumer:  # consumer_timeout_ms bounds the wait for each record
            values.append(m.value)
            if m.value == b"r3":  # the last one written: no need to wait out the timeout
                break
        consumer.close()
        assert values[-4:] == [b"r0", b"r1", b"r2", b"r3"], (mechanism, values)
    # Three clients authenticated (the producer and two consumers), each at least once.
    assert authentications(sasl, "successful") >= 3


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", PASSWORD)])
def test_wrong_password_and_unknown_user_are_refused_alike(
    sasl: dict[str, Any], user: str, password: str
) -> None:
    """confluent-kafka reports an authentication error with the broker's message, the
    same for a wrong password and for a user that does not exist (no prober learns
    which users exist), and nothing it sent is stored."""
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    config = {**confluent(sasl, "SCRAM-SHA-256", password), "sasl.username": user}
    producer = Producer({**config, "error_cb": errors.append, "message.timeout.ms": 1000})
    delivered: list[Any] = []
    producer.produce("refused-topic", b"x", on_delivery=lambda e, m: delivered.append(e))

    def reported() -> bool:
        producer.poll(0.2)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    failed_before = authentications(sasl, "failed")
    wait_for(reported, timeout_s=DEADLINE_S, message=f"no authentication error for {user}")
    # Counted once the answer is on its way, so possibly just after the client read it.
    wait_for(
        lambda: authentications(sasl, "failed") > failed_before,
        timeout_s=DEADLINE_S,
        message="failed_authentication_total did not count the refused client",
    )
    texts = {str(e) for e in errors if e.code() == KafkaError._AUTHENTICATION}
    assert all("Authentication failed: invalid credentials" in t for t in texts), texts
    producer.flush(10)
    assert delivered and delivered[0] is not None  # the record was never acknowledged


# --------------------------------------------------------------- raw sockets


def _host_port(sasl: dict[str, Any]) -> tuple[str, int]:
    host, port = sasl["bootstrap"].split(",")[0].rsplit(":", 1)
    return host, int(port)


def test_requests_out_of_turn_and_big_frames_close_the_connection(
    sasl: dict[str, Any],
) -> None:
    addr = _host_port(sasl)
    # Metadata before authenticating: closed, unanswered.
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(3, 1, 1, topics=None))
        assert closed(s)
    # A declared frame above sasl.server.max.receive.size before authenticating.
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(struct.pack(">i", 600_000) + b"\x00" * 64)
        assert closed(s)
    # A mechanism that is not enabled: answered with the enabled ones, then closed.
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(17, 1, 2, mechanism="GSSAPI"))
        answer = read_answer(s, 17, 1)
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert tuple(answer.mechanisms) == tuple(MECHANISMS.split(","))
        assert closed(s)
    # A wrong PLAIN password: SASL_AUTHENTICATION_FAILED, then closed; and ApiVersions
    # is allowed before the handshake.
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(18, 0, 3))
        assert read_answer(s, 18, 0).error_code == 0
        s.sendall(kafka_request(17, 1, 4, mechanism="PLAIN"))
        assert read_answer(s, 17, 1).error_code == 0
        s.sendall(kafka_request(36, 2, 5, auth_bytes=b"\x00alice\x00nope"))
        answer = read_answer(s, 36, 2)
        assert answer.error_code == 58, answer  # SASL_AUTHENTICATION_FAILED
        assert closed(s)
    # The right one: authenticated, and then Metadata is answered.
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(17, 1, 6, mechanism="PLAIN"))
        assert read_answer(s, 17, 1).error_code == 0
        s.sendall(kafka_request(36, 2, 7, auth_bytes=b"\x00alice\x00" + PASSWORD.encode()))
        assert read_answer(s, 36, 2).error_code == 0
        s.sendall(kafka_request(3, 1, 8, topics=None))
        assert read_answer(s, 3, 1).brokers


def test_handshake_v0_takes_unframed_tokens(sasl: dict[str, Any]) -> None:
    """After SaslHandshake v0 the tokens come bare (a size and the token, no header)
    and are answered bare; a wrong one closes the connection with no answer."""
    addr = _host_port(sasl)
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(17, 0, 1, mechanism="PLAIN"))
        assert read_answer(s, 17, 0).error_code == 0
        token = b"\x00alice\x00" + PASSWORD.encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read_exactly(s, 4) == b"\x00\x00\x00\x00"  # PLAIN's empty answer
        s.sendall(kafka_request(3, 1, 2, topics=None))
        assert read_answer(s, 3, 1).brokers
    with socket.create_connection(addr, timeout=DEADLINE_S) as s:
        s.sendall(kafka_request(17, 0, 3, mechanism="PLAIN"))
        assert read_answer(s, 17, 0).error_code == 0
        token = b"\x00alice\x00nope"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert closed(s)


def test_kcat_authenticates_with_each_mechanism(sasl: dict[str, Any]) -> None:
    """kcat (Debian's package: librdkafka 2.0, which sends its SCRAM nonce twice, as
    Kafka tolerates) lists metadata with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, and
    is refused with a wrong password."""
    import shutil
    import subprocess

    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (Debian package kcat)")
    broker = sasl["bootstrap"].split(",")[0]
    for mechanism, password, ok in (
        ("SCRAM-SHA-256", PASSWORD, True),
        ("SCRAM-SHA-512", PASSWORD, True),
        ("PLAIN", PASSWORD, True),
        ("SCRAM-SHA-512", "wrong", False),
    ):
        settings = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": "alice",
            "sasl.password": password,
        }
        options = [arg for k, v in settings.items() for arg in ("-X", f"{k}={v}")]
        # A refused kcat waits out its metadata timeout (-m) before it exits; the
        # refusal itself comes within milliseconds.
        timeout = "10" if ok else "2"
        done = subprocess.run(
            [kcat, "-b", broker, "-L", "-m", timeout, *options],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode == 0) is ok, (mechanism, password, done.stdout, done.stderr)
        if ok:
            assert "3 brokers:" in done.stdout, done.stdout
        else:
            assert "invalid credentials" in done.stderr, done.stderr


def test_sasl_ssl_with_scram(tmp_path: Path) -> None:
    """SASL_SSL: TLS first (the client checks the broker's certificate), then SCRAM;
    confluent-kafka produces through it and kafka-python reads the record back."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    setup = sasl_ssl_setup(tmp_path / "pki", user="alice")
    props = {**setup.broker_properties, "offsets.topic.num.partitions": "1"}
    with LocalCluster(tmp_path / "c") as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster, extra_properties=props, kafka_listener=True, kafka_security_protocol="SASL_SSL"
        ) as brokers:
            brokers.start()
            add_user(cluster, "alice", setup.password)
            producer = Producer(
                {"bootstrap.servers": brokers.kafka_bootstrap_servers, **setup.client_config}
            )
            produce_until_acked(producer, "secure", "over SASL_SSL with SCRAM-SHA-512")
            consumer = KafkaConsumer(
                bootstrap_servers=brokers.kafka_bootstrap_servers,
                security_protocol="SASL_SSL",
                ssl_cafile=str(setup.cafile),
                sasl_mechanism=setup.mechanism,
                sasl_plain_username="alice",
                sasl_plain_password=setup.password,
                consumer_timeout_ms=10_000,
            )
            try:
                tp = TopicPartition("secure", 0)
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
                # Stops at the first hello; consumer_timeout_ms bounds the wait.
                assert any(m.value == b"hello" for m in consumer)
            finally:
                consumer.close()
