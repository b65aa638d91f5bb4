"""``raftka up --secure`` as a real process: its brokers' Kafka listeners are SASL_SSL
with a throwaway CA and a SCRAM-SHA-512 user ``admin``, the authorizer's super user; the
client settings it writes work unchanged with confluent-kafka (produce, then consume)
and with kcat's ``-F``; another user gets TOPIC_AUTHORIZATION_FAILED and sees no topic
until an ACL grants it; a client that skips TLS, gives a wrong password, or trusts
another CA gets nothing; a resumed cluster keeps the same CA and password. raftka's
HTTP API is HTTPS with client certificates: plain HTTP gets nothing, raftka's commands
get in with the ``raftka-client.properties`` it writes, and ``raftka status --data-dir``
finds that file by itself, as does a command run where ``./raftka-data`` is. raftka's
own client logs in there with SCRAM instead (SASL_SSL): admin produces and consumes, a
wrong password fails, and bob is held to his ACLs: with WRITE on a topic he sees it,
writes to it and is refused reading it and the admin API; granted READ on the topic and
his group and WRITE on his transactional id, he consumes in a group and commits a
transaction with the group's offsets (a topic in his subscription that he may not
describe raises TOPIC_AUTHORIZATION_FAILED from poll)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.local import free_port_run, http_json, wait_for
from raftka.local.certs import new_ca

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0


def _up(data: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "raftka", "up", "--secure", "--no-console", *_dir(data), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _dir(data: Path) -> tuple[str, str]:
    return ("--data-dir", str(data))


def _wait_running(up: subprocess.Popen[bytes], log: Path, runs: int) -> None:
    def running() -> bool:
        assert up.poll() is None, f"raftka up exited {up.returncode}:\n{log.read_text()}"
        return log.read_text().count("running; cluster.json") >= runs

    wait_for(running, timeout_s=DEADLINE_S, message=lambda: log.read_text()[-3000:])


def _stop(up: subprocess.Popen[bytes]) -> int:
    up.send_signal(signal.SIGTERM)
    return up.wait(60)


def _kcat_list(kcat: str, settings: Path, brokers: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kcat, "-F", str(settings), "-b", brokers, "-L", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _settings(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def _produce_and_consume(config: dict[str, Any]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer(config)

    def delivered() -> bool:
        acked: list[Any] = []
        producer.produce("secure-topic", b"secret", on_delivery=lambda e, m: acked.append(e))
        producer.flush(10)
        return bool(acked) and acked[0] is None

    wait_for(delivered, timeout_s=DEADLINE_S, message="nothing acknowledged over SASL_SSL")
    consumer = Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["secure-topic"])
    got: list[bytes] = []

    def read() -> bool:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(message.value())
        return b"secret" in got

    try:
        wait_for(read, timeout_s=DEADLINE_S, message="the record was not consumed over SASL_SSL")
    finally:
        consumer.close()
    return got


def _raftka(*args: str, cwd: Path | None = None) -> str:
    """A raftka command's stdout; ``--command-config FILE`` first goes after the
    subcommand(s)."""
    if args[:1] == ("--command-config",):
        args = (*args[2:], *args[:2])
    done = subprocess.run(
        [sys.executable, "-m", "raftka", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "RAFTKA_BOOTSTRAP_SERVERS"},
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def cluster_status(data: Path) -> int:
    """``raftka status --data-dir data``'s exit status (0: healthy)."""
    done = subprocess.run(
        [sys.executable, "-m", "raftka", "status", "--data-dir", str(data), "--wait", "30"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "nothing is reachable" not in done.stderr, done.stderr
    return done.returncode


def _produce_once(config: dict[str, Any]) -> Any:
    """One record to secure-topic: None when acknowledged, else the delivery error."""
    from confluent_kafka import Producer

    producer = Producer({**config, "message.timeout.ms": 5000})
    outcome: list[Any] = []
    producer.produce("secure-topic", b"x", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(10)
    return outcome[0] if outcome else "no delivery report"


def _topic_authorization_failed(config: dict[str, Any]) -> bool:
    """Wait (the new user reaches every broker with the metadata log) until a produce
    is refused with TOPIC_AUTHORIZATION_FAILED; True then."""
    from confluent_kafka import KafkaError

    def refused() -> bool:
        error = _produce_once(config)
        assert error is not None, "a user without an ACL had a record acknowledged"
        return getattr(error, "code", lambda: None)() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    wait_for(refused, timeout_s=DEADLINE_S, message="no TOPIC_AUTHORIZATION_FAILED for bob")
    return True


def _raftka_client_logs_in_with_scram(http: str, settings: dict[str, str]) -> None:
    """raftka's own client on the HTTPS API with SASL_SSL and no certificate: admin (a
    super user) produces and reads back; a wrong password fails the exchange itself;
    bob is held to his ACLs (:func:`_raftka_client_under_acls`)."""
    from raftka.client import Admin, Consumer, Producer, TopicPartition
    from raftka.common.errors import SaslAuthenticationFailedError

    def login(user: str, password: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": http,
            "security_protocol": "SASL_SSL",
            "ssl_cafile": settings["ssl.ca.location"],
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    admin = login("admin", settings["sasl.password"])
    with Producer(acks="all", **admin) as producer:
        written = producer.send("secure-topic", value=b"over-scram").result(timeout=DEADLINE_S)
    seen: list[bytes | None] = []
    # Assigned, not subscribed: a group's first join waits out the initial rebalance
    # delay, and the group APIs are more of the same HTTP API.
    with Consumer(auto_offset_reset="earliest", **admin) as consumer:
        consumer.assign([TopicPartition("secure-topic", written.partition)])

        def read() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
            return b"over-scram" in seen

        wait_for(read, timeout_s=DEADLINE_S, message=lambda: f"admin read only {seen}")
    with (
        Admin(**login("admin", "not-it")) as wrong,
        pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"),
    ):
        wrong.list_topics()
    _raftka_client_under_acls(admin, login("bob", "bob-secret"))


def _raftka_client_under_acls(admin: dict[str, Any], bob: dict[str, Any]) -> None:
    """bob, with WRITE on secure-topic only, through raftka's client on the HTTPS API:
    the broker routes check Kafka's ACLs as the Kafka listener does."""
    from acl_helpers import acl

    from raftka.client import Admin, Consumer, Producer, TopicPartition
    from raftka.common.acl import AclOperation, ResourceType
    from raftka.common.errors import (
        ClusterAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    with Admin(**bob) as as_bob:
        # DESCRIBE (implied by WRITE) shows his topic, and only it; the listings and
        # the admin API stay for super users.
        assert as_bob.list_topics(list_internal=True) == {"secure-topic"}
        with pytest.raises(ClusterAuthorizationFailedError, match=r"User:bob is not in super"):
            as_bob.describe_acls()
    # WRITE on a topic lets an idempotent producer in (KIP-679).
    with Producer(acks="all", **bob) as producer:
        written = producer.send("secure-topic", value=b"bob-plain").result(timeout=DEADLINE_S)
    partition = TopicPartition("secure-topic", written.partition)
    with Consumer(auto_offset_reset="earliest", **bob) as consumer:
        consumer.assign([partition])

        def read_refused() -> bool:
            try:
                got = consumer.poll(timeout_ms=500)
            except TopicAuthorizationFailedError as e:
                assert "READ on topic 'secure-topic'" in str(e), e
                return True
            assert not got, f"bob read without READ: {got}"
            return False

        wait_for(read_refused, timeout_s=DEADLINE_S, message="bob's fetch was not refused")

    group, tid = ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    with Admin(**admin) as as_admin:
        as_admin.create_acls(
            [
                acl("User:bob", AclOperation.READ, "secure-topic"),
                acl("User:bob", AclOperation.READ, "bob-group", resource_type=group),
                acl("User:bob", AclOperation.WRITE, "bob-tx", resource_type=tid),
            ]
        )
    seen: list[bytes | None] = []
    with Consumer(
        group_id="bob-group",
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **bob,
    ) as consumer:
        # A subscribed topic he may not DESCRIBE (it need not exist): poll raises
        # Kafka's error for it, and the consumer reads on from the topic he may read.
        consumer.subscribe(["secure-topic", "not-bobs"])
        refusals: list[str] = []

        def read(value: bytes) -> Callable[[], bool]:
            def seen_it() -> bool:
                try:
                    for records in consumer.poll(timeout_ms=500).values():
                        seen.extend(r.value for r in records)
                except TopicAuthorizationFailedError as e:
                    # Also while the grant has not reached every broker yet.
                    refusals.append(str(e))
                return value in seen

            return seen_it

        wait_for(read(b"bob-plain"), timeout_s=DEADLINE_S, message=lambda: f"bob read {seen}")
        assert any("not-bobs" in r for r in refusals), refusals
        with Producer(transactional_id="bob-tx", **bob) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("secure-topic", value=b"bob-txn", partition=partition.partition)
            position = consumer.position(partition)
            producer.send_offsets_to_transaction({partition: position}, consumer.group_metadata())
            producer.commit_transaction()
        wait_for(read(b"bob-txn"), timeout_s=DEADLINE_S, message=lambda: f"bob read {seen}")

        def offsets_committed() -> bool:
            # The group's offsets count once the marker reaches __consumer_offsets.
            committed = consumer.committed([partition])[partition]
            return committed is not None and committed.offset == position

        wait_for(offsets_committed, timeout_s=DEADLINE_S, message="bob's offsets not committed")


def _topics(config: dict[str, Any]) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(config).list_topics(timeout=DEADLINE_S).topics)


def test_up_secure_serves_sasl_ssl_with_the_settings_it_writes(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, Producer

    # The default data directory's name: commands run in tmp_path find it by themselves.
    data, log = tmp_path / "raftka-data", tmp_path / "up.log"
    up = _up(data, log, "--base-port", str(free_port_run(9)))
    try:
        _wait_running(up, log, 1)
        text = log.read_text()
        secure = data / "secure"
        settings = _settings(secure / "client.properties")
        assert f"password {settings['sasl.password']!r}" in text
        assert (secure / "client.properties").stat().st_mode & 0o077 == 0
        assert "ScramLoginModule" in (secure / "client-java.properties").read_text()
        cluster = orjson.loads((data / "cluster.json").read_bytes())
        kafka = cluster["kafka_bootstrap_servers"]
        config = {"bootstrap.servers": kafka, **settings}
        kcat = shutil.which("kcat")
        if kcat is not None:
            # "running" comes once every broker knows the user: kcat gets in at once,
            # at each broker.
            for broker in kafka.split(","):
                listed = _kcat_list(kcat, secure / "client.properties", broker)
                assert listed.returncode == 0 and "3 brokers:" in listed.stdout, listed.stderr
        assert _produce_and_consume(config) == [b"secret"]
        if kcat is not None:
            listed = _kcat_list(kcat, secure / "client.properties", kafka)
            assert listed.returncode == 0 and "secure-topic" in listed.stdout, listed.stderr

        # raftka's HTTP API is HTTPS with client certificates: plain HTTP gets nothing;
        # raftka's commands get in with admin's certificate (--command-config), and
        # `raftka status --data-dir` finds it there by itself.
        http = cluster["bootstrap_servers"]
        with pytest.raises(OSError):
            http_json(http.split(",")[0], "/health")
        assert cluster_status(data) == 0
        # Run where ./raftka-data is, without --bootstrap-server or --command-config, a
        # command reaches that cluster with its client certificate by itself.
        assert "secure-topic" in _raftka("topics", "list", cwd=tmp_path).split()
        command_config = ("--command-config", str(secure / "raftka-client.properties"))
        _raftka(
            *command_config,
            "users",
            "add",
            "--user",
            "bob",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password",
            "bob-secret",
            "--bootstrap-server",
            http,
        )
        bob = {**config, "sasl.username": "bob", "sasl.password": "bob-secret"}
        refused = _topic_authorization_failed(bob)
        assert "secure-topic" not in _topics(bob), "bob saw a topic he may not describe"
        assert refused
        _raftka(
            *command_config,
            "acls",
            "add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Write",
            "--topic",
            "secure-topic",
            "--bootstrap-server",
            http,
        )
        wait_for(
            lambda: _produce_once(bob) is None,
            timeout_s=DEADLINE_S,
            message="bob's record was not acknowledged once WRITE was granted",
        )
        assert "secure-topic" in _topics(bob)  # WRITE implies DESCRIBE
        _raftka_client_logs_in_with_scram(http, settings)

        # No TLS (a SASL_PLAINTEXT client), a wrong password, and a client that trusts
        # another CA (so not the brokers' certificate): nothing delivered.
        other_ca = new_ca(tmp_path / "other-ca", name="someone-else")
        for wrong in (
            {**config, "security.protocol": "SASL_PLAINTEXT"},
            {**config, "sasl.password": "not-it"},
            {**config, "ssl.ca.location": str(other_ca.cafile)},
        ):
            errors: list[Any] = []
            # A refusal comes within milliseconds (auth or handshake); the delivery
            # report, at the message timeout: keep that short.
            producer = Producer({**wrong, "message.timeout.ms": 1000, "error_cb": errors.append})
            outcome: list[Any] = []
            producer.produce("secure-topic", b"x", on_delivery=lambda e, m, o=outcome: o.append(e))
            producer.flush(15)
            assert outcome and outcome[0] is not None, wrong["security.protocol"]
            assert errors, "the refused client heard of no error"
            assert any(e.code() != KafkaError.NO_ERROR for e in errors)
        assert _stop(up) == 0, log.read_text()[-3000:]

        # Resumed: the same CA and password, and the record is still there.
        again = _up(data, log)
        try:
            _wait_running(again, log, 2)
            assert _settings(secure / "client.properties") == settings
            assert b"secret" in _produce_and_consume(config)
            assert _stop(again) == 0, log.read_text()[-3000:]
        finally:
            if again.poll() is None:
                again.kill()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
