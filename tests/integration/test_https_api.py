"""raftka's HTTP API over HTTPS with client certificates (server_common/node_http.py),
against real processes and real TLS: three controllers and two brokers whose first
listener is ``HTTPS``, node certificates from one throwaway CA, ``super.users`` naming
the nodes' principal.

- The quorum forms and the brokers register, replicate and write ``__consumer_offsets``
  over HTTPS (every node-to-node call presents the node certificate).
- The raftka client with ``security_protocol="SSL"`` and an application certificate
  produces with acks=all to a replicated topic and consumes in a group.
- Refused: no certificate, a plain-HTTP request, a certificate from another CA (at the
  TLS handshake); the application principal on the node-only routes (a Raft message, a
  follower fetch, WriteTxnMarkers) and on a controller (which checks no ACLs):
  CLUSTER_AUTHORIZATION_FAILED, HTTP 403.
- A broker whose certificate another CA signed never registers, and a controller
  restarted with such a certificate falls behind the quorum's high watermark until it
  is given its own certificate back (then it catches up).
- Bad input on the HTTPS port (garbage instead of a ClientHello, a junk handshake
  record, a TLS connection without a certificate that sends a request anyway): each
  connection is closed, the node's memory stays bounded over many, and it still serves.
- The command line with ``--command-config`` (security.protocol=SSL and a certificate):
  ``raftka topics``, ``produce``/``consume``, ``quorum status`` and ``status`` work with a
  node principal's certificate; the admin command with the application's is refused.
- ``raftka console --command-config`` (a real process) shows the quorum and the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from kafka_wire_helpers import closed
from prometheus_client.parser import text_string_to_metric_families

from raftka.__main__ import cli
from raftka.client import Admin, Consumer, NewTopic, Producer
from raftka.common.errors import ClusterAuthorizationFailedError
from raftka.common.messages import encode
from raftka.common.messages.broker import FetchPartition, FetchRequest
from raftka.local import free_ports, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.certs import IssuedCertificate, new_ca
from raftka.local.processes import LocalCluster, http_json, http_post
from raftka.raft.quorum.transport import MESSAGE_PATH

pytestmark = pytest.mark.slow

NODE = "raftka-node"
DEADLINE_S = 30.0


@dataclass(frozen=True)
class Pki:
    cafile: Path
    node: IssuedCertificate
    app: IssuedCertificate
    #: Same common name as the nodes', signed by another CA.
    impostor: IssuedCertificate
    impostor_cafile: Path


def _context(pki: Pki, cert: IssuedCertificate | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.cafile))
    if cert is not None:
        context.load_cert_chain(str(cert.certfile), str(cert.keyfile))
    return context


def _props(cafile: Path, cert: IssuedCertificate) -> dict[str, str]:
    return {
        "listener.name.https.ssl.certfile": str(cert.certfile),
        "listener.name.https.ssl.keyfile": str(cert.keyfile),
        "listener.name.https.ssl.cafile": str(cafile),
        "super.users": f"User:CN={NODE}",
    }


def _client_options(pki: Pki, cert: IssuedCertificate) -> dict[str, str]:
    return {
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.cafile),
        "ssl_certfile": str(cert.certfile),
        "ssl_keyfile": str(cert.keyfile),
    }


@dataclass(frozen=True)
class Env:
    pki: Pki
    controllers: LocalCluster
    brokers: LocalBrokers
    data_dir: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("https")
    ca = new_ca(root / "ca")
    other = new_ca(root / "other", name="another-ca")
    pki = Pki(
        cafile=ca.cafile,
        node=ca.issue(root / "ca", NODE),
        app=ca.issue(root / "ca", "app"),
        impostor=other.issue(root / "other", NODE),
        impostor_cafile=other.cafile,
    )
    props = _props(pki.cafile, pki.node)
    nodes = _context(pki, pki.node)
    with LocalCluster(root / "cluster", extra_properties=props, https=nodes) as controllers:
        controllers.start()
        with LocalBrokers(controllers, count=2, extra_properties=props, https=nodes) as brokers:
            brokers.start()
            yield Env(pki, controllers, brokers, root)


def test_client_with_a_certificate_produces_and_consumes_over_https(env: Env) -> None:
    servers = env.brokers.bootstrap_servers
    # Admin calls go to the controllers, which serve node principals only.
    with Admin(bootstrap_servers=servers, **_client_options(env.pki, env.pki.node)) as admin:
        admin.create_topics([NewTopic("secured", num_partitions=2, replication_factor=2)])
    app = _client_options(env.pki, env.pki.app)
    with Producer(bootstrap_servers=servers, acks="all", **app) as producer:
        for i in range(20):
            producer.send("secured", key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(timeout_ms=int(DEADLINE_S * 1000))
    seen: list[bytes] = []
    with Consumer(
        bootstrap_servers=servers, group_id="https-group", auto_offset_reset="earliest", **app
    ) as consumer:
        consumer.subscribe(["secured"])

        def all_read() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records if r.value is not None)
            return len(seen) >= 20

        wait_for(all_read, timeout_s=DEADLINE_S, message=lambda: f"read only {len(seen)} of 20")
        consumer.commit()
    assert sorted(seen) == sorted(b"v%d" % i for i in range(20))


def test_the_kafka_python_adapter_takes_kafka_pythons_tls_options(env: Env) -> None:
    """kafka-python's own keywords (security_protocol, ssl_cafile, ssl_certfile,
    ssl_keyfile) reach every client the adapter makes: its producer and consumer, the
    admins behind bootstrap_connected() and topics(), and KafkaAdminClient's group
    admin."""
    from raftka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from raftka.admin import NewTopic as KpNewTopic

    servers = env.brokers.bootstrap_servers.split(",")
    node = _client_options(env.pki, env.pki.node)
    app = _client_options(env.pki, env.pki.app)
    admin = KafkaAdminClient(bootstrap_servers=servers, **node)
    try:
        admin.create_topics([KpNewTopic("kp-secured", 1, 2)])
        assert admin.list_consumer_groups() is not None  # the group admin's own client
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", **app)
    try:
        assert producer.partitions_for("kp-secured") == {0}
        assert producer.bootstrap_connected()  # asks through the adapter's own admin
        producer.send("kp-secured", b"adapter over https").get(timeout=DEADLINE_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=servers, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **app
    )
    try:
        consumer.assign([TopicPartition("kp-secured", 0)])
        assert next(iter(consumer)).value == b"adapter over https"
        assert "kp-secured" in consumer.topics()
    finally:
        consumer.close()


def test_the_aiokafka_adapter_takes_an_ssl_context(env: Env) -> None:
    """aiokafka's TLS is an ssl_context (made with the client's certificate, as
    aiokafka.helpers.create_ssl_context makes it): it reaches the adapter's producer,
    consumer and the admin behind topics()."""
    from raftka import AIOKafkaConsumer, AIOKafkaProducer

    servers = env.brokers.bootstrap_servers
    with Admin(bootstrap_servers=servers, **_client_options(env.pki, env.pki.node)) as admin:
        admin.create_topics([NewTopic("aio-secured", num_partitions=1, replication_factor=2)])
    context = _context(env.pki, env.pki.app)
    tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_context": context}

    async def run() -> bytes | None:
        async with AIOKafkaProducer(bootstrap_servers=servers, acks="all", **tls) as producer:
            await producer.send_and_wait("aio-secured", b"aiokafka over https")
        consumer = AIOKafkaConsumer(
            "aio-secured", bootstrap_servers=servers, auto_offset_reset="earliest", **tls
        )
        await consumer.start()
        try:
            assert "aio-secured" in await consumer.topics()
            record = await asyncio.wait_for(consumer.getone(), DEADLINE_S)
            return record.value
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == b"aiokafka over https"


def test_the_spark_connector_takes_tls_settings(env: Env) -> None:
    """kafka.security.protocol and kafka.ssl.* reach the Spark connector's clients (run
    here without Spark: the functions its source and sink run on the driver and the
    executors): the sink's commit log (admin, producer, consumer) and the source's
    partition listing (admin) and range reader (consumer)."""
    from raftka.client.spark.commit_log import CommitMarker
    from raftka.client.spark.options import parse_sink_options, parse_source_options
    from raftka.client.spark.planning import OffsetRange
    from raftka.client.spark.sink import committed_batch, record_commit
    from raftka.client.spark.source import _Cluster, read_range

    cert = env.pki.node  # the commit log's topic is created through the controllers
    tls = {
        "kafka.bootstrap.servers": env.brokers.bootstrap_servers,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.cafile": str(env.pki.cafile),
        "kafka.ssl.certfile": str(cert.certfile),
        "kafka.ssl.keyfile": str(cert.keyfile),
    }
    sink = parse_sink_options({**tls, "topic": "spark-secured"})
    record_commit(sink, CommitMarker(query_id="query-1", batch_id=4, records=10, committed_ms=0))
    assert committed_batch(sink, "query-1") == 4
    with Admin(
        bootstrap_servers=env.brokers.bootstrap_servers, **_client_options(env.pki, cert)
    ) as admin:
        admin.create_topics([NewTopic("spark-secured", num_partitions=1, replication_factor=2)])
    with Producer(
        bootstrap_servers=env.brokers.bootstrap_servers,
        acks="all",
        **_client_options(env.pki, cert),
    ) as producer:
        for i in range(3):
            producer.send("spark-secured", value=b"s%d" % i, partition=0)
        producer.flush(timeout_ms=int(DEADLINE_S * 1000))
    source = parse_source_options({**tls, "subscribe": "spark-secured"}, streaming=False)
    cluster = _Cluster(source)
    try:
        assert [tp.topic for tp in cluster.partitions()] == ["spark-secured"]
    finally:
        cluster.close()
    rows = sum(b.num_rows for b in read_range(source, OffsetRange("spark-secured", 0, 0, 3)))
    assert rows == 3


def test_connections_without_a_trusted_certificate_are_refused(env: Env) -> None:
    """Each refused TLS handshake is refused and counted as a failed authentication,
    as Kafka counts it."""
    broker = next(iter(env.brokers.nodes()))
    app = _context(env.pki, env.pki.app)
    metric = "kafka_server_socketservermetrics_failed_authentication"
    before = _refused(broker.address, app, metric)
    for tls in (
        _context(env.pki, None),  # no client certificate
        _context(env.pki, env.pki.impostor),  # the nodes' name, another CA
    ):
        with pytest.raises(OSError):
            http_json(broker.address, "/health", tls=tls)
    with pytest.raises(OSError):
        http_json(broker.address, "/health")  # plain HTTP on the HTTPS port
    # The same port answers a trusted certificate (the refusals were not a dead port).
    status, _ = http_json(broker.address, "/health", tls=app)
    assert status == 200
    wait_for(
        lambda: _refused(broker.address, app, metric) >= before + 3,
        timeout_s=10,
        message="the three refused handshakes were not counted",
    )
    assert _refused(broker.address, app, metric) == before + 3


def test_the_application_principal_cannot_act_as_a_node(env: Env) -> None:
    app = _context(env.pki, env.pki.app)
    controller = next(iter(env.controllers.nodes()))
    broker = next(iter(env.brokers.nodes()))
    follower_fetch = FetchRequest(
        replica_id=max(env.brokers.ids) + 1,
        partitions=(FetchPartition(topic="secured", partition=0, fetch_offset=0),),
    )
    before = [_refused(a, app) for a in (controller.address, broker.address)]
    for address, path, body in (
        (controller.address, MESSAGE_PATH, b"{}"),
        (controller.address, "/v1/brokers/register", b"{}"),
        (controller.address, "/v1/topics", b"{}"),  # admin: node principals only
        (broker.address, "/v1/fetch", encode(follower_fetch)),
        (broker.address, "/v1/write-txn-markers", b"{}"),
    ):
        status, raw, _ = http_post(address, path, body, "application/json", tls=app)
        assert status == 403, (path, raw)
        assert b"CLUSTER_AUTHORIZATION_FAILED" in raw, (path, raw)
    # Each refusal is counted where it happened (the broker's fetch by require_node).
    after = [_refused(a, app) for a in (controller.address, broker.address)]
    assert [b - a for a, b in zip(before, after, strict=True)] == [3, 2]
    with (
        Admin(
            bootstrap_servers=env.brokers.bootstrap_servers,
            **_client_options(env.pki, env.pki.app),
        ) as admin,
        pytest.raises(ClusterAuthorizationFailedError),
    ):
        admin.create_topics([NewTopic("not-allowed", num_partitions=1, replication_factor=1)])


def _refused(
    address: str, tls: ssl.SSLContext, name: str = "raftka_https_cluster_authorization_failed"
) -> float:
    """A counter of the node's HTTPS refusals, ``name``_total (its /metrics)."""
    with urllib.request.urlopen(f"https://{address}/metrics", context=tls, timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_total":
                return sample.value
    raise AssertionError(f"{address}: no {name}_total")


def test_a_broker_with_a_certificate_from_another_ca_never_registers(env: Env) -> None:
    props = {**_props(env.pki.cafile, env.pki.impostor), "request.timeout.ms": "2000"}
    with LocalBrokers(
        env.controllers,
        count=1,
        first_id=150,
        data_dir=env.data_dir / "impostor",
        extra_properties=props,
        https=_context(env.pki, env.pki.node),
    ) as impostor:
        node = impostor[150]
        node.start()
        wait_for(
            lambda: "registration not answered" in node.tail(50),
            timeout_s=DEADLINE_S,
            message=lambda: f"the impostor's registration did not fail; log:\n{node.tail()}",
        )
        options = _client_options(env.pki, env.pki.node)
        with Admin(bootstrap_servers=env.brokers.bootstrap_servers, **options) as admin:
            ids = {b.node_id for b in admin.describe_cluster().brokers}
        assert ids == set(env.brokers.ids), ids


def _command_config(path: Path, pki: Pki, cert: IssuedCertificate) -> str:
    path.write_text(
        "security.protocol=SSL\n"
        f"ssl.cafile={pki.cafile}\n"
        f"ssl.certfile={cert.certfile}\n"
        f"ssl.keyfile={cert.keyfile}\n"
    )
    return str(path)


def test_the_command_line_takes_a_command_config(env: Env, tmp_path: Path) -> None:
    admin = _command_config(tmp_path / "admin.properties", env.pki, env.pki.node)
    app = _command_config(tmp_path / "app.properties", env.pki, env.pki.app)
    servers = env.brokers.bootstrap_servers
    controllers = env.controllers.bootstrap_controllers
    runner = CliRunner()

    def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
        result = runner.invoke(cli, list(args), input=stdin)
        return result.exit_code, result.output

    code, out = run(
        "topics",
        "create",
        "cli-https",
        "--partitions",
        "1",
        "--bootstrap-server",
        servers,
        "--command-config",
        admin,
    )
    assert code == 0, out
    code, out = run("topics", "list", "--bootstrap-server", servers, "--command-config", admin)
    assert code == 0 and "cli-https" in out.split(), out
    code, out = run(
        "produce",
        "cli-https",
        "--bootstrap-server",
        servers,
        "--command-config",
        app,
        stdin="one\ntwo\n",
    )
    assert code == 0, out
    code, out = run(
        "consume",
        "cli-https",
        "--from-beginning",
        "--max-messages",
        "2",
        "--bootstrap-server",
        servers,
        "--command-config",
        app,
    )
    assert code == 0 and out.splitlines()[:2] == ["one", "two"], out
    code, out = run(
        "topics", "create", "refused", "--bootstrap-server", servers, "--command-config", app
    )
    assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in out, out
    code, out = run(
        "quorum", "status", "--bootstrap-controller", controllers, "--command-config", admin
    )
    assert code == 0 and "leader" in out.lower(), out
    code, out = run("status", "--bootstrap-controller", controllers, "--command-config", admin)
    assert code == 0, out
    # A file that cannot be read is a usage error naming the option.
    code, out = run(
        "topics",
        "list",
        "--bootstrap-server",
        servers,
        "--command-config",
        str(tmp_path / "missing.properties"),
    )
    assert code == 2 and "--command-config" in out, out


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_bad_input_on_the_https_port_is_closed_and_bounded(env: Env) -> None:
    broker = next(iter(env.brokers.nodes()))
    host, port = broker.host, broker.port
    no_certificate = _context(env.pki, None)

    def garbage_before_tls() -> None:
        with socket.create_connection((host, port), timeout=DEADLINE_S) as s:
            # Not a TLS record's first byte (no content type, high bit clear): random
            # bytes starting 0x80-0xff then 0x01 read as an SSLv2 ClientHello header
            # announcing up to 32 KiB, which the server then rightly waits for.
            s.sendall(b"\x00" + os.urandom(4095))
            assert closed(s), "garbage instead of a ClientHello left the connection open"

    def junk_handshake_record() -> None:
        with socket.create_connection((host, port), timeout=DEADLINE_S) as s:
            s.sendall(b"\x16\x03\x01\x02\x00" + os.urandom(512))
            assert closed(s), "a junk handshake record left the connection open"

    def request_without_a_certificate() -> None:
        raw = socket.create_connection((host, port), timeout=DEADLINE_S)
        try:
            with no_certificate.wrap_socket(raw, server_hostname=host) as s:
                s.sendall(
                    b"POST /v1/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{}{}{}{}{"
                )
                assert closed(s), "a request without a certificate left the connection open"
        except (ssl.SSLError, ConnectionError):
            pass  # refused during the handshake (TLS 1.2) or right after it
        finally:
            raw.close()

    bad = (garbage_before_tls, junk_handshake_record, request_without_a_certificate)
    assert broker.popen is not None
    for once in bad:  # warm-up: the first connections allocate lasting buffers
        once()
    before = _rss_bytes(broker.popen.pid)
    for _ in range(40):
        for once in bad:
            once()
    growth = _rss_bytes(broker.popen.pid) - before
    assert growth < 32 * 1024 * 1024, f"broker RSS grew by {growth} bytes over 120 bad inputs"
    status, _ = http_json(broker.address, "/health", tls=_context(env.pki, env.pki.app))
    assert status == 200


def _voter_behind(env: Env, node_id: int) -> tuple[int, int] | None:
    """(voter's log end offset, high watermark) from the active controller, when the
    voter is behind."""
    tls = _context(env.pki, env.pki.node)
    for node in env.controllers.nodes():
        if node.node_id == node_id:
            continue
        try:
            status, body = http_json(node.address, "/v1/quorum", tls=tls)
        except OSError:
            continue
        if status != 200 or body.get("role") != "leader":
            continue
        voter = next(v for v in body["voters"] if v["node_id"] == node_id)
        leo = voter["log_end_offset"] or 0
        return (leo, body["high_watermark"]) if leo < body["high_watermark"] else None
    return None


def _leader_epoch(env: Env) -> int:
    tls = _context(env.pki, env.pki.node)
    for node in env.controllers.nodes():
        with contextlib.suppress(OSError):
            status, body = http_json(node.address, "/v1/quorum", tls=tls)
            if status == 200 and body.get("role") == "leader":
                return int(body["epoch"])
    raise AssertionError("no controller says it leads")


def _role(address: str, cafile: Path, cert: IssuedCertificate) -> str | None:
    """A node's quorum role from its /health, trusting ``cafile`` for its certificate."""
    context = ssl.create_default_context(cafile=str(cafile))
    context.load_cert_chain(str(cert.certfile), str(cert.keyfile))
    try:
        status, body = http_json(address, "/health", tls=context)
    except OSError:
        return None
    return body.get("role") if status == 200 else None


def test_a_controller_with_a_certificate_from_another_ca_cannot_follow(env: Env) -> None:
    node = max(env.controllers.nodes(), key=lambda n: n.node_id)
    original = node.config_path.read_text()
    mine, theirs = env.pki.node, env.pki.impostor
    options = _client_options(env.pki, env.pki.node)
    node.kill()
    node.config_path.write_text(
        original.replace(str(mine.certfile), str(theirs.certfile)).replace(
            str(mine.keyfile), str(theirs.keyfile)
        )
    )
    try:
        node.start()
        # New records for the quorum: the impostor cannot fetch them.
        with Admin(bootstrap_servers=env.brokers.bootstrap_servers, **options) as admin:
            admin.create_topics([NewTopic("while-impostor", 1, 1)])
        epoch = _leader_epoch(env)
        # Its own view (asked trusting its CA): cut off from the leader, it becomes a
        # prospective candidate, whose pre-votes reach no one.
        wait_for(
            lambda: (
                _role(node.address, env.pki.impostor_cafile, env.pki.node)
                in ("prospective", "candidate")
            ),
            timeout_s=DEADLINE_S,
            message=lambda: f"the impostor kept following; log:\n{node.tail()}",
        )
        assert _voter_behind(env, node.node_id) is not None, "the impostor caught up"
        assert _leader_epoch(env) == epoch, "the impostor disturbed the leader"
    finally:
        node.kill()
        node.config_path.write_text(original)
        node.start()
    # Its own certificate back: it follows again (the gap was the certificate's doing).
    wait_for(
        lambda: _voter_behind(env, node.node_id) is None,
        timeout_s=DEADLINE_S,
        message="the controller did not catch up with its own certificate back",
    )


def test_the_console_takes_a_command_config(env: Env, tmp_path: Path) -> None:
    admin = _command_config(tmp_path / "admin.properties", env.pki, env.pki.node)
    (port,) = free_ports(1)
    log = (tmp_path / "console.log").open("wb")
    console = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raftka",
            "console",
            "--port",
            str(port),
            "--bootstrap-server",
            env.brokers.bootstrap_servers,
            "--command-config",
            admin,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def overview() -> dict[str, Any] | None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/cluster", timeout=10
                ) as answer:
                    found = orjson.loads(answer.read())["overview"]
            except OSError:
                return None
            return found if found["quorum_error"] is None and found["brokers"] else None

        shown = wait_for(
            overview,
            timeout_s=DEADLINE_S,
            message=lambda: (
                "the console did not show the HTTPS cluster: "
                + (tmp_path / "console.log").read_text(errors="replace")[-2000:]
            ),
        )
        assert shown["active_controller"] is not None
        assert {b["id"] for b in shown["brokers"]} >= set(env.brokers.ids)
    finally:
        console.terminate()
        console.wait(timeout=DEADLINE_S)
        log.close()
