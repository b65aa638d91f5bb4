"""Broker config files: Kafka's keys, defaults, and the topic overrides.

Checks: a .properties file with broker keys parses with Kafka's defaults for the rest
and the controllers taken from controller.quorum.voters; an unknown key, a missing
log.dirs and a controller-only process are errors naming the problem; a topic's
min.insync.replicas overrides the broker's and broker log.* defaults reach LogConfig
under the topic key names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.broker.config import STANDARD_AUTHORIZER, load_broker_config
from raftka.metadata.authorizer import AuthorizerConfig
from raftka.server_common.process_config import ConfigError

BASE = (
    "node.id=101\nprocess.roles=broker\n"
    "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094\n"
    "listeners=PLAINTEXT://127.0.0.1:9092\n"
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.properties"
    path.write_text(text)
    return path


def test_parses_with_defaults_and_overrides(tmp_path: Path) -> None:
    """Given keys are read, others keep Kafka's defaults."""
    config = load_broker_config(
        _write(
            tmp_path,
            BASE
            + f"log.dirs={tmp_path}/a,{tmp_path}/b\n"
            + "min.insync.replicas=2\nlog.segment.bytes=1048576\n",
        )
    )
    assert config.node_id == 101 and config.address == "127.0.0.1:9092"
    assert config.log_dirs == (tmp_path / "a", tmp_path / "b")
    assert config.controllers == ("127.0.0.1:9093", "127.0.0.1:9094")
    assert config.replica_lag_time_max_ms == 30_000 and config.request_timeout_ms == 30_000
    assert config.broker_heartbeat_interval_ms == 2_000
    # The I/O workers: Kafka's num.io.threads and queued.max.requests defaults.
    assert (config.num_io_threads, config.queued_max_requests) == (8, 500)
    assert config.min_insync_replicas == 2
    # KIP-890 part 2 (the epoch bump at each EndTxn) is on unless turned down.
    assert config.transaction_version == 2
    assert config.replication_config({}).min_insync_replicas == 2
    assert config.replication_config({"min.insync.replicas": "3"}).min_insync_replicas == 3
    assert config.log_config({}).segment_bytes == 1_048_576
    assert (
        config.log_config({"segment.bytes": "2097152", "min.insync.replicas": "1"}).segment_bytes
        == 2_097_152
    )


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("log.dirs=/tmp/x\nreplica.lag.time.max=5\n", "replica.lag.time.max"),
        ("", "log.dirs"),
        ("log.dirs=/tmp/x\nmin.insync.replicas=0\n", "min.insync.replicas"),
        ("log.dirs=/tmp/x\nlog.segment.bytes=1\n", "segment.bytes"),
        ("log.dirs=/tmp/x\nnum.io.threads=0\n", "num.io.threads"),
        ("log.dirs=/tmp/x\nqueued.max.requests=many\n", "queued.max.requests"),
        ("log.dirs=/tmp/x\nnum.recovery.threads.per.data.dir=0\n", "num.recovery.threads"),
        ("log.dirs=/tmp/x\nlog.flush.scheduler.interval.ms=0\n", "log.flush.scheduler.interval.ms"),
        ("log.dirs=/tmp/x\ntransaction.version=3\n", "transaction.version"),
        (
            "log.dirs=/tmp/x\ntransaction.state.log.replication.factor=1\n",
            "transaction.state.log.min.isr",
        ),
    ],
)
def test_errors_name_the_key(tmp_path: Path, extra: str, needle: str) -> None:
    """Each bad file raises ConfigError mentioning the offending key."""
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_broker_config(_write(tmp_path, BASE + extra))


def test_controller_only_process_is_rejected(tmp_path: Path) -> None:
    """process.roles=controller is not a broker."""
    text = (
        BASE.replace("process.roles=broker", "process.roles=controller")
        .replace("node.id=101", "node.id=1")
        .replace("PLAINTEXT://127.0.0.1:9092", "CONTROLLER://127.0.0.1:9093")
    )
    with pytest.raises(ConfigError, match="broker"):
        load_broker_config(_write(tmp_path, text + "log.dirs=/tmp/x\n"))


def test_kafka_listener_keys(tmp_path: Path) -> None:
    """A PLAINTEXT listener after the HTTP one is the Kafka listener, with Kafka's
    limits; one listener alone means none; auto.create.topics.enable is read."""
    assert load_broker_config(_write(tmp_path, BASE + "log.dirs=/tmp/x\n")).kafka_listener is None
    text = BASE.replace(
        "listeners=PLAINTEXT://127.0.0.1:9092",
        "listeners=HTTP://127.0.0.1:8081,PLAINTEXT://127.0.0.1:9092",
    )
    config = load_broker_config(
        _write(
            tmp_path,
            text
            + "log.dirs=/tmp/x\nmax.connections=10\nconnections.max.idle.ms=1000\n"
            + "auto.create.topics.enable=false\n",
        )
    )
    assert config.address == "127.0.0.1:8081"  # the HTTP API stays first
    kafka = config.kafka_listener
    assert kafka is not None and (kafka.host, kafka.port) == ("127.0.0.1", 9092)
    assert (kafka.max_connections, kafka.connections_max_idle_ms) == (10, 1000)
    assert kafka.socket_request_max_bytes == 104_857_600
    assert config.auto_create_topics_enable is False
    sasl = text.replace("PLAINTEXT://", "SASL_PLAINTEXT://") + "log.dirs=/tmp/x\n"
    # Kafka's default mechanism (GSSAPI) is not served, so one must be named.
    with pytest.raises(ConfigError, match=r"needs sasl\.enabled\.mechanisms"):
        load_broker_config(_write(tmp_path, sasl))
    with pytest.raises(ConfigError, match="GSSAPI is not supported"):
        load_broker_config(_write(tmp_path, sasl + "sasl.enabled.mechanisms=GSSAPI\n"))
    config = load_broker_config(
        _write(
            tmp_path,
            sasl
            + "sasl.enabled.mechanisms=PLAIN\n"
            + "listener.name.sasl_plaintext.sasl.enabled.mechanisms=scram-sha-512,PLAIN\n",
        )
    )
    kafka = config.kafka_listener
    assert kafka is not None and kafka.security_protocol == "SASL_PLAINTEXT"
    assert kafka.sasl_mechanisms == ("SCRAM-SHA-512", "PLAIN")  # the listener's own key wins
    with pytest.raises(ConfigError, match="no SASL listener uses it"):
        load_broker_config(
            _write(tmp_path, text + "log.dirs=/tmp/x\nsasl.enabled.mechanisms=PLAIN\n")
        )
    # The failure delay does nothing without SASL: refused by name, not ignored.
    with pytest.raises(
        ConfigError,
        match=r"properties: connection\.failed\.authentication\.delay\.ms: no SASL listener",
    ):
        load_broker_config(
            _write(
                tmp_path,
                text + "log.dirs=/tmp/x\nconnection.failed.authentication.delay.ms=5\n",
            )
        )
    with pytest.raises(ConfigError, match="no listener of that name"):
        load_broker_config(
            _write(
                tmp_path,
                sasl
                + "sasl.enabled.mechanisms=PLAIN\n"
                + "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN\n",
            )
        )
    # SASL_SSL needs its certificate like SSL does: none given, it refuses to start.
    with pytest.raises(ConfigError, match="ssl"):
        load_broker_config(
            _write(
                tmp_path,
                text.replace("PLAINTEXT://", "SASL_SSL://")
                + "log.dirs=/tmp/x\nsasl.enabled.mechanisms=PLAIN\n",
            )
        )
    with pytest.raises(ConfigError, match=r"max\.connections"):
        load_broker_config(_write(tmp_path, text + "log.dirs=/tmp/x\nmax.connections=0\n"))


def test_transaction_version_one_is_read(tmp_path: Path) -> None:
    """transaction.version=1 (the classic protocol, no epoch bump at EndTxn) is read."""
    config = load_broker_config(
        _write(tmp_path, BASE + f"log.dirs={tmp_path}/a\ntransaction.version=1\n")
    )
    assert config.transaction_version == 1


def test_an_ssl_kafka_listener(tmp_path: Path) -> None:
    """SSL://host:port is the Kafka listener with TLS: its context is built (files
    loaded) when the config is read, so a certificate that does not load refuses the
    broker; ssl.* without an SSL listener is refused by name."""
    from raftka.local.certs import new_ca

    ca = new_ca(tmp_path / "pki")
    node = ca.issue(tmp_path / "pki", "broker-101")
    text = (
        BASE.replace(
            "listeners=PLAINTEXT://127.0.0.1:9092",
            "listeners=HTTP://127.0.0.1:8081,SSL://127.0.0.1:9093",
        )
        + "log.dirs=/tmp/x\n"
    )
    tls = f"ssl.certfile={node.certfile}\nssl.keyfile={node.keyfile}\n"
    kafka = load_broker_config(_write(tmp_path, text + tls)).kafka_listener
    assert kafka is not None and kafka.security_protocol == "SSL"
    assert kafka.ssl_context is not None
    # The per-listener prefix works too.
    prefixed = tls.replace("ssl.", "listener.name.ssl.ssl.")
    assert load_broker_config(_write(tmp_path, text + prefixed)).kafka_listener is not None
    with pytest.raises(ConfigError, match=r"ssl\.certfile"):
        load_broker_config(_write(tmp_path, text + tls.replace("broker-101.pem", "gone.pem")))
    plain = BASE.replace(
        "listeners=PLAINTEXT://127.0.0.1:9092",
        "listeners=HTTP://127.0.0.1:8081,PLAINTEXT://127.0.0.1:9092",
    )
    with pytest.raises(ConfigError, match=r"ssl\.certfile: no SSL listener uses it"):
        load_broker_config(_write(tmp_path, plain + "log.dirs=/tmp/x\n" + tls))
    with pytest.raises(ConfigError, match=r"ssl\.endpoint\.identification\.algorithm"):
        load_broker_config(
            _write(tmp_path, text + tls + "ssl.endpoint.identification.algorithm=https\n")
        )
    # A map must name every listener (tests/unit/test_listener_map.py has the rest).
    with pytest.raises(ConfigError, match=r"no security protocol for listener HTTP"):
        load_broker_config(
            _write(tmp_path, text + tls + "listener.security.protocol.map=SSL:SSL\n")
        )


def test_ssl_principal_mapping_rules(tmp_path: Path) -> None:
    """An SSL listener that asks for client certificates maps their subjects with
    ssl.principal.mapping.rules (Kafka's DEFAULT when unset); the key is refused by
    name where it would map nothing: no client certificates asked for, a SASL_SSL
    listener (its principal is the SASL user), no TLS listener; bad rules too."""
    from raftka.local.certs import new_ca

    ca = new_ca(tmp_path / "pki")
    node = ca.issue(tmp_path / "pki", "broker-101")
    text = (
        BASE.replace(
            "listeners=PLAINTEXT://127.0.0.1:9092",
            "listeners=HTTP://127.0.0.1:8081,SSL://127.0.0.1:9093",
        )
        + "log.dirs=/tmp/x\n"
        + f"ssl.certfile={node.certfile}\nssl.keyfile={node.keyfile}\nssl.cafile={ca.cafile}\n"
    )
    required = text + "ssl.client.auth=required\n"
    kafka = load_broker_config(_write(tmp_path, required)).kafka_listener
    assert kafka is not None and kafka.principal_mapper is not None
    assert kafka.principal_mapper.principal("CN=alice") == "User:CN=alice"
    rules = "listener.name.ssl.ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/L,DEFAULT\n"
    kafka = load_broker_config(_write(tmp_path, required + rules)).kafka_listener
    assert kafka is not None and kafka.principal_mapper is not None
    assert kafka.principal_mapper.principal("CN=Alice") == "User:alice"
    no_client_auth = load_broker_config(_write(tmp_path, text)).kafka_listener
    assert no_client_auth is not None and no_client_auth.principal_mapper is None
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules: the SSL listener"):
        load_broker_config(_write(tmp_path, text + "ssl.principal.mapping.rules=DEFAULT\n"))
    with pytest.raises(ConfigError, match=r"is not a regular expression"):
        load_broker_config(_write(tmp_path, required + "ssl.principal.mapping.rules=RULE:(/x/\n"))
    sasl_ssl = text.replace("SSL://", "SASL_SSL://") + "sasl.enabled.mechanisms=PLAIN\n"
    with pytest.raises(ConfigError, match=r"SASL_SSL listener's principal is its SASL user"):
        load_broker_config(_write(tmp_path, sasl_ssl + "ssl.principal.mapping.rules=DEFAULT\n"))
    plain = BASE.replace(
        "listeners=PLAINTEXT://127.0.0.1:9092",
        "listeners=HTTP://127.0.0.1:8081,PLAINTEXT://127.0.0.1:9092",
    )
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules: no SSL listener"):
        load_broker_config(
            _write(tmp_path, plain + "log.dirs=/tmp/x\nssl.principal.mapping.rules=DEFAULT\n")
        )


def test_the_authorizer_settings(tmp_path: Path) -> None:
    """authorizer.class.name: empty is off (no authorizer config), Kafka's
    StandardAuthorizer turns it on with super.users (;-separated principals) and
    allow.everyone.if.no.acl.found; another class, a malformed principal, a bad boolean,
    either setting without the authorizer, and the authorizer without a Kafka listener
    (it would guard nothing) are refused naming the key."""
    text = (
        BASE.replace(
            "listeners=PLAINTEXT://127.0.0.1:9092",
            "listeners=HTTP://127.0.0.1:8081,PLAINTEXT://127.0.0.1:9092",
        )
        + "log.dirs=/tmp/x\n"
    )
    http_only = BASE + "log.dirs=/tmp/x\n" + f"authorizer.class.name={STANDARD_AUTHORIZER}\n"
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name: no Kafka listener to guard"):
        load_broker_config(_write(tmp_path, http_only))
    assert load_broker_config(_write(tmp_path, text)).authorizer is None
    assert (
        load_broker_config(_write(tmp_path, text + "authorizer.class.name=\n")).authorizer is None
    )
    on = text + f"authorizer.class.name={STANDARD_AUTHORIZER}\n"
    config = load_broker_config(_write(tmp_path, on)).authorizer
    assert config == AuthorizerConfig()  # no super users, deny when no ACL is found
    config = load_broker_config(
        _write(
            tmp_path,
            on + "super.users=User:admin; User:ops\nallow.everyone.if.no.acl.found=true\n",
        )
    ).authorizer
    assert config is not None
    assert config.super_users == frozenset({"User:admin", "User:ops"})
    assert config.allow_everyone_if_no_acl_found is True
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name: only .*StandardAuthorizer"):
        load_broker_config(
            _write(
                tmp_path, text + "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n"
            )
        )
    with pytest.raises(ConfigError, match=r"super\.users: 'admin' is not a principal"):
        load_broker_config(_write(tmp_path, on + "super.users=admin\n"))
    with pytest.raises(ConfigError, match=r"allow\.everyone\.if\.no\.acl\.found must be true"):
        load_broker_config(_write(tmp_path, on + "allow.everyone.if.no.acl.found=maybe\n"))
    for setting in ("super.users=User:admin", "allow.everyone.if.no.acl.found=true"):
        key = setting.partition("=")[0].replace(".", r"\.")
        with pytest.raises(ConfigError, match=rf"{key}: no authorizer uses it"):
            load_broker_config(_write(tmp_path, text + setting + "\n"))
