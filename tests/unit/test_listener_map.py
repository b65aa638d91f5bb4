"""listener.security.protocol.map (server_common/listener_map.py): listeners named
freely as in Kafka's configs, each served with the protocol the map gives it, the
per-listener keys under the listener's own name, and errors in the config's names."""

from __future__ import annotations

import pytest

from raftka.broker.config import BROKER_KEYS, BrokerConfig, broker_config
from raftka.local.certs import CertificateAuthority, IssuedCertificate, new_ca
from raftka.server_cli import combined_configs
from raftka.server_common.listener_map import apply_protocol_map, parse_protocol_map
from raftka.server_common.node_config import node_config_from_properties
from raftka.server_common.process_config import ConfigError

VOTERS = "1@127.0.0.1:9093"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return new_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def cert(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue(ca.cafile.parent, "node-1")


def _tls(prefix: str, ca: CertificateAuthority, cert: IssuedCertificate) -> dict[str, str]:
    return {
        f"{prefix}ssl.certfile": str(cert.certfile),
        f"{prefix}ssl.keyfile": str(cert.keyfile),
        f"{prefix}ssl.cafile": str(ca.cafile),
    }


def _broker(**props: str) -> BrokerConfig:
    base = {
        "node.id": "101",
        "process.roles": "broker",
        "controller.quorum.voters": VOTERS,
        "log.dirs": "/tmp/unused",
    }
    node = node_config_from_properties(
        {**base, **props}, source="b.properties", extra_keys=BROKER_KEYS
    )
    return broker_config(node)


def test_kafka_style_names_are_served_with_the_mapped_protocols(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    config = _broker(
        **{
            "listeners": "INTERNAL://127.0.0.1:8081,EXTERNAL://127.0.0.1:9094",
            "advertised.listeners": "INTERNAL://h1:8081,EXTERNAL://h1:19094",
            "listener.security.protocol.map": "INTERNAL:SSL, EXTERNAL:SASL_SSL,OTHER:PLAINTEXT",
            "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "inter.broker.listener.name": "INTERNAL",
            "super.users": "User:CN=node-1",
            **_tls("listener.name.internal.", ca, cert),
            **_tls("listener.name.external.", ca, cert),
        }
    )
    assert config.http.secure and config.http.scheme == "https"
    kafka = config.kafka_listener
    assert kafka is not None and kafka.security_protocol == "SASL_SSL"
    assert kafka.sasl_mechanisms == ("SCRAM-SHA-512",) and kafka.ssl_context is not None
    assert (kafka.advertised_host, kafka.advertised_port) == ("h1", 19094)
    assert (config.advertised_host, config.advertised_port) == ("h1", 8081)


def test_a_plain_api_and_an_ssl_kafka_listener(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    config = _broker(
        **{
            "listeners": "REPLICATION://127.0.0.1:8081,CLIENTS://127.0.0.1:9094",
            "listener.security.protocol.map": "REPLICATION:PLAINTEXT,CLIENTS:SSL",
            **_tls("listener.name.clients.", ca, cert),
        }
    )
    assert not config.http.secure
    assert config.kafka_listener is not None and config.kafka_listener.security_protocol == "SSL"


def test_errors_name_the_keys_as_the_config_spells_them(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    tls = _tls("listener.name.clients.", ca, cert)
    tls["listener.name.clients.ssl.client.auth"] = "sometimes"
    with pytest.raises(ConfigError, match=r"^listener\.name\.clients\.ssl\.client\.auth must be"):
        _broker(
            **{
                "listeners": "API://127.0.0.1:8081,CLIENTS://127.0.0.1:9094",
                "listener.security.protocol.map": "API:PLAINTEXT,CLIENTS:SSL",
                **tls,
            }
        )


def test_a_controller_listener_mapped_to_ssl_is_https(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    node = node_config_from_properties(
        {
            "node.id": "1",
            "controller.quorum.voters": VOTERS,
            "metadata.log.dir": "/tmp/unused",
            "listeners": "CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:SSL",
            "super.users": "User:CN=node-1",
            **_tls("listener.name.controller.", ca, cert),
        }
    )
    assert node.http.secure and node.properties["controller.listener.names"] == "HTTPS"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listener.security.protocol.map": "API:TLS"}, r"API:TLS: the protocols are"),
        ({"listener.security.protocol.map": "API"}, r"'API' is not NAME:PROTOCOL"),
        ({"listener.security.protocol.map": "A:SSL,a:SSL"}, r"listener A appears twice"),
        ({"listener.security.protocol.map": "API:SSL"}, r"no security protocol for listener K"),
        (
            {"listener.security.protocol.map": "API:SASL_SSL,K:SSL"},
            r"API:SASL_SSL: the first listener is raftka's HTTP API",
        ),
        (
            {
                "listener.security.protocol.map": "API:PLAINTEXT,K:SSL",
                "listener.name.ssl.ssl.certfile": "/c.pem",
            },
            r"listener\.name\.ssl\.ssl\.certfile: no listener named SSL",
        ),
        (
            {
                "listener.security.protocol.map": "API:PLAINTEXT,K:SSL,L:SSL",
                "listeners": "API://127.0.0.1:1,K://127.0.0.1:2,L://127.0.0.1:3",
            },
            r"two SSL listeners",
        ),
        (
            {"listener.security.protocol.map": "API:PLAINTEXT", "listeners": "127.0.0.1:1"},
            r"every listener needs a NAME://",
        ),
    ],
)
def test_refused_by_name(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        apply_protocol_map({"listeners": "API://127.0.0.1:1,K://127.0.0.1:2", **props})


def test_without_the_map_nothing_is_renamed() -> None:
    props = {"listeners": "HTTP://127.0.0.1:1,SSL://127.0.0.1:2", "listener.name.ssl.x": "y"}
    renamed = apply_protocol_map(props)
    assert renamed.props == props and dict(renamed.names) == {}
    assert parse_protocol_map("a:ssl , b:plaintext") == {"A": "SSL", "B": "PLAINTEXT"}


def _combined(**props: str) -> dict[str, str]:
    return {
        "node.id": "1",
        "process.roles": "controller,broker",
        "controller.quorum.voters": VOTERS,
        "listeners": "CONTROLLER://127.0.0.1:9093,API://127.0.0.1:8081,CLIENTS://127.0.0.1:9092",
        "log.dirs": "/tmp/unused",
        **props,
    }


def test_a_combined_process_maps_each_half(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    """Each listener has its own keys: the controller's CONTROLLER and the broker's API
    are both HTTPS, the broker's CLIENTS is its SASL_SSL Kafka listener."""
    controller, broker = combined_configs(
        _combined(
            **{
                "listener.security.protocol.map": "CONTROLLER:SSL,API:SSL,CLIENTS:SASL_SSL",
                "listener.name.clients.sasl.enabled.mechanisms": "PLAIN",
                "super.users": "User:CN=node-1",
                **_tls("listener.name.controller.", ca, cert),
                **_tls("listener.name.api.", ca, cert),
                **_tls("listener.name.clients.", ca, cert),
            }
        )
    )
    assert controller is not None and broker is not None
    assert controller.http.secure and broker.http.secure
    assert (controller.listen_port, broker.listen_port) == (9093, 8081)
    assert broker.kafka_listener is not None
    assert broker.kafka_listener.security_protocol == "SASL_SSL"


def test_a_combined_process_is_one_scheme(
    ca: CertificateAuthority, cert: IssuedCertificate
) -> None:
    with pytest.raises(ConfigError, match=r"must both be SSL or both PLAINTEXT"):
        combined_configs(
            _combined(
                **{
                    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,API:SSL,CLIENTS:SSL",
                    **_tls("listener.name.api.", ca, cert),
                    **_tls("listener.name.clients.", ca, cert),
                }
            )
        )
    plain_controller, plain_broker = combined_configs(
        _combined(
            **{
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,API:PLAINTEXT,CLIENTS:SSL",
                **_tls("listener.name.clients.", ca, cert),
            }
        )
    )
    assert plain_controller is not None and not plain_controller.http.secure
    assert plain_broker is not None and plain_broker.kafka_listener is not None


def test_errors_are_explained_in_one_pass() -> None:
    """A listener may be named after another's canonical name; the message still names
    each key as written."""
    renamed = apply_protocol_map(
        {
            "listeners": "SASL_SSL://127.0.0.1:1,HTTPS://127.0.0.1:2",
            "listener.security.protocol.map": "SASL_SSL:SSL,HTTPS:SASL_SSL",
        }
    )
    assert renamed.props["listeners"] == "HTTPS://127.0.0.1:1,SASL_SSL://127.0.0.1:2"
    message = "listener.name.https.ssl.certfile and listener.name.sasl_ssl.ssl.keyfile"
    assert renamed.explain(message) == (
        "listener.name.sasl_ssl.ssl.certfile and listener.name.https.ssl.keyfile"
    )
