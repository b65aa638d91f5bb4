"""``raftka up --secure``'s setup (local/secure.py): the certificates it makes and keeps,
and that the settings it gives are configs a controller and a broker accept, with an
HTTPS API whose principals are ``User:node`` and ``User:admin``."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from raftka.broker.config import BROKER_KEYS, broker_config
from raftka.common.client_tls import read_command_config
from raftka.local.secure import RAFTKA_CLIENT_FILE, sasl_ssl_setup
from raftka.server_common.node_config import node_config_from_properties
from raftka.server_common.ssl_principal import subject_name

VOTERS = "1@127.0.0.1:9093"


def _der(certfile: Path) -> bytes:
    return x509.load_pem_x509_certificate(certfile.read_bytes()).public_bytes(Encoding.DER)


def test_the_setup_configures_https_nodes_whose_principals_are_node_and_admin(
    tmp_path: Path,
) -> None:
    setup = sasl_ssl_setup(tmp_path / "secure", https=True)
    assert setup.node_certfile is not None and setup.client_certfile is not None
    controller = node_config_from_properties(
        {
            "node.id": "1",
            "process.roles": "controller",
            "controller.quorum.voters": VOTERS,
            "listeners": "HTTPS://127.0.0.1:9093",
            "metadata.log.dir": str(tmp_path / "c"),
            **setup.https_properties,
        }
    )
    http = controller.http
    assert http.secure and http.mapper is not None
    assert http.node_principals == frozenset({"User:node", "User:admin"})
    assert http.mapper.principal(subject_name(_der(setup.node_certfile))) == "User:node"
    assert http.mapper.principal(subject_name(_der(setup.client_certfile))) == "User:admin"
    broker = broker_config(
        node_config_from_properties(
            {
                "node.id": "101",
                "process.roles": "broker",
                "controller.quorum.voters": VOTERS,
                "listeners": "HTTPS://127.0.0.1:9096,SASL_SSL://127.0.0.1:9099",
                "log.dirs": str(tmp_path / "b"),
                **setup.broker_properties,
            },
            extra_keys=BROKER_KEYS,
        )
    )
    assert broker.kafka_listener is not None
    assert broker.kafka_listener.security_protocol == "SASL_SSL"
    # The clients' files: raftka's own names admin's certificate.
    _, _, raftka = setup.write_client_files(tmp_path / "secure")
    assert raftka == tmp_path / "secure" / RAFTKA_CLIENT_FILE
    tls = read_command_config(raftka)
    assert (tls.protocol, tls.certfile) == ("SSL", str(setup.client_certfile))
    assert tls.context() is not None


def test_a_setup_is_kept_and_one_without_https_certificates_is_renewed(tmp_path: Path) -> None:
    """A resumed cluster keeps its certificates; a setup made before the HTTPS API was
    secured (broker certificate only) gets a new CA and all three, its password kept."""
    directory = tmp_path / "secure"
    old = sasl_ssl_setup(directory)
    old_ca = old.cafile.read_bytes()
    assert not (directory / "node.pem").exists()
    new = sasl_ssl_setup(directory, https=True)
    assert new.password == old.password
    assert new.cafile.read_bytes() != old_ca
    again = sasl_ssl_setup(directory, https=True)
    assert again == new
    assert again.cafile.read_bytes() == new.cafile.read_bytes()
