"""deploy/ stays true: every config file parses with the readers the processes use, the
hosts' addresses are consistent, and the systemd units name those files.

Each ``deploy/config/hostN/controller.properties`` goes through
``raftka.server_common.node_config.load_node_config`` and each ``broker.properties`` through
``raftka.broker.config.load_broker_config`` (so an unknown key or a bad value fails
here as it would at start-up), with its TLS files made by ``deploy/tls/make-certs``
(run here with openssl, as the docs say to). Then the addresses are checked against the table in
``deploy/config/hosts``: every node listens on and advertises its own host's address,
every file names the same voters, node ids are unique, and a broker's controllers are
the voters. The units are read with configparser: ExecStart runs the installed
``raftka`` with the config path the README installs, as a dedicated user, with
Restart=, LimitNOFILE= and a state directory.
"""

from __future__ import annotations

import configparser
import ipaddress
import subprocess
from pathlib import Path

import pytest

from raftka.broker.config import BROKER_KEYS, load_broker_config
from raftka.server_common.node_config import load_node_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONFIG = DEPLOY / "config"


def hosts() -> dict[str, str]:
    table: dict[str, str] = {}
    for line in (CONFIG / "hosts").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, ip = line.split()
            table[name] = ip
    return table


def test_hosts_table_has_three_distinct_addresses() -> None:
    """The deployment is three hosts with three different addresses, one folder each."""
    table = hosts()
    assert len(table) == 3 and len(set(table.values())) == 3, table
    assert sorted(p.name for p in CONFIG.iterdir() if p.is_dir()) == sorted(table)


@pytest.mark.parametrize("host", sorted(hosts()))
def test_controller_config_parses_and_uses_its_host_address(
    certs: Path, host: str, tmp_path: Path
) -> None:
    """The controller file parses with the controller's reader (its TLS files loaded),
    listens on and advertises this host's address over HTTPS with the nodes and the
    operators' certificate as super.users, and is this host's voter."""
    ip = hosts()[host]
    node = load_node_config(_config_with(certs, host, "controller", tmp_path))
    assert node.http.secure and node.http.node_principals == NODE_PRINCIPALS
    assert node.process_roles == ("controller",)
    assert (node.listen_host, node.advertised_host) == (ip, ip)
    assert node.voters[node.node_id] == (ip, node.listen_port)
    assert {h for h, _ in node.voters.values()} == set(hosts().values())
    assert node.controller.unclean_leader_election_enable is False


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/tls/make-certs run for deploy/config/hosts, as the docs say to."""
    out = tmp_path_factory.mktemp("deploy-tls")
    subprocess.run([str(DEPLOY / "tls" / "make-certs"), str(out)], check=True, capture_output=True)
    return out


#: The principals of the hosts' certificates and of the operators' (make-certs).
NODE_PRINCIPALS = {"User:CN=host1", "User:CN=host2", "User:CN=host3", "User:CN=raftka-admin"}


def _config_with(certs: Path, host: str, role: str, tmp_path: Path) -> Path:
    """The host's ``role``.properties, its /etc/raftka/tls/ files where make-certs wrote
    them (the process loads them while reading its config)."""
    text = (CONFIG / host / f"{role}.properties").read_text()
    assert "/etc/raftka/tls/" in text
    path = tmp_path / f"{role}.properties"
    text = text.replace("/etc/raftka/tls/ca.pem", f"{certs}/ca.pem")
    path.write_text(text.replace("/etc/raftka/tls/", f"{certs / host}/"))
    return path


def _broker_config_with(certs: Path, host: str, tmp_path: Path) -> Path:
    return _config_with(certs, host, "broker", tmp_path)


@pytest.mark.parametrize("host", sorted(hosts()))
def test_make_certs_gives_each_host_a_certificate_for_its_address(certs: Path, host: str) -> None:
    """Signed by the CA, naming the host's address (clients check it), for server and
    client use, its key matching and readable by its owner only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((certs / host / "node.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address(hosts()[host]) in names.get_values_for_type(x509.IPAddress)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)
    key_path = certs / host / "node-key.pem"
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    assert key.public_key() == cert.public_key()
    assert key_path.stat().st_mode & 0o077 == 0, oct(key_path.stat().st_mode)


@pytest.mark.parametrize("host", sorted(hosts()))
def test_broker_config_parses_and_uses_its_host_address(
    certs: Path, host: str, tmp_path: Path
) -> None:
    """The broker file parses with the broker's reader (its TLS files loaded), listens on
    and advertises this host's address, serves Kafka's protocol as SASL_SSL with SCRAM
    and ACLs enforced, has min.insync.replicas=2, and its controllers are the voters."""
    ip = hosts()[host]
    broker = load_broker_config(_broker_config_with(certs, host, tmp_path))
    kafka = broker.kafka_listener
    assert kafka is not None and kafka.security_protocol == "SASL_SSL"
    assert kafka.ssl_context is not None and kafka.sasl_mechanisms == ("SCRAM-SHA-512",)
    assert broker.authorizer is not None
    assert broker.authorizer.super_users == {"User:admin"} | NODE_PRINCIPALS
    assert broker.http.secure and broker.http.nodes_only
    assert broker.authorizer.allow_everyone_if_no_acl_found is False
    assert (kafka.host, kafka.advertised_host) == (ip, ip)
    controller = load_node_config(_config_with(certs, host, "controller", tmp_path))
    assert (broker.listen_host, broker.advertised_host) == (ip, ip)
    assert broker.min_insync_replicas == 2
    voters = sorted(controller.voters.items())
    assert broker.controllers == tuple(f"{h}:{p}" for _, (h, p) in voters)
    assert broker.listen_port != controller.listen_port


def test_node_ids_unique_and_voters_identical(certs: Path, tmp_path: Path) -> None:
    """Six processes, six node ids; every file names the same quorum."""
    ids: list[int] = []
    voters = set()
    for host in hosts():
        node = load_node_config(_config_with(certs, host, "controller", tmp_path))
        broker = load_broker_config(_broker_config_with(certs, host, tmp_path))
        ids += [node.node_id, broker.node_id]
        voters.add(tuple(sorted(node.voters.items())))
        voters.add(tuple(sorted(zip(broker.controller_ids, broker.controllers, strict=True))))
    assert len(ids) == len(set(ids)) == 6, ids
    controller_sets = {tuple(i for i, _ in v) for v in voters}
    assert controller_sets == {(1, 2, 3)}, controller_sets


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_systemd_unit(certs: Path, role: str, tmp_path: Path) -> None:
    """The unit runs ``raftka ROLE --config /etc/raftka/ROLE.properties`` as the raftka
    user, restarts on failure, raises the open-file limit and owns /var/lib/raftka, the
    parent of the data directories the configs name."""
    unit = configparser.ConfigParser(strict=True, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read(DEPLOY / "systemd" / f"raftka-{role}.service")
    service = unit["Service"]
    assert service["ExecStart"].split()[1:] == [
        role,
        "--config",
        f"/etc/raftka/{role}.properties",
    ]
    assert service["User"] == "raftka"
    assert service["Restart"] in ("on-failure", "always")
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["StateDirectory"] == "raftka"
    assert service["KillSignal"] == "SIGTERM"
    config = _config_with(certs, "host1", role, tmp_path)
    node = load_node_config(config, extra_keys=BROKER_KEYS)
    data = node.metadata_log_dir if role == "controller" else Path(node.properties["log.dirs"])
    assert data.is_relative_to("/var/lib/raftka"), data
    assert "StartLimitIntervalSec" in unit["Unit"]
