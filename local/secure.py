"""A local cluster's secure setup: certificates, the nodes' settings, a SCRAM user and
the clients' settings, for ``raftka up --secure``, the SASL_SSL tests and the listener
benchmark.

Theory of operation
-------------------
:func:`sasl_ssl_setup` makes (or, for a resumed cluster, finds) in one directory a
throwaway CA (:mod:`raftka.local.certs`) and three certificates, all valid for
``localhost`` and ``127.0.0.1`` where local nodes listen:

* ``broker.pem``, which every broker's Kafka listener presents (SASL_SSL);
* ``node.pem`` (``CN=node``), which every node's HTTPS API presents and with which the
  nodes call each other (controllers and brokers alike: principal ``User:node``);
* ``<user>.pem`` (``CN=<user>``), the user's client certificate for raftka's
  HTTPS API (its own client, its commands' ``--command-config``, the console).

and a password for the user, kept in a file with mode 0600 so that a resumed cluster
keeps its user. The nodes map a certificate's ``CN`` to the principal's name
(``ssl.principal.mapping.rules``), so the user is ``User:<user>`` on both listeners,
and ``super.users`` names the nodes and the user: the authorizer's super users, and
the HTTPS API's node principals (a node's HTTP API serves only those, see
server_common/node_http.py). The HTTPS API also takes the user's SCRAM login (SASL_SSL
in raftka's client, server_common/http_sasl.py), so the password alone reaches it too.

:attr:`SaslSslSetup.broker_properties` is for the brokers (their Kafka listener and
their HTTPS API), :attr:`SaslSslSetup.https_properties` for the controllers. The
clients' settings: librdkafka's names (confluent-kafka, and kcat's ``-F`` file),
Kafka's Java client names (``--command-config`` of Kafka's tools) and raftka's own
(``--command-config`` of raftka's commands; :attr:`SaslSslSetup.raftka_client_options`
for its client).

The user itself exists only once the cluster commits its SCRAM credential:
:func:`add_scram_user` asks for that through raftka's admin client (over HTTPS), which
salts the password on the client side, so the password never travels;
:func:`wait_until_brokers_know` then waits until every broker's image has it.
"""

from __future__ import annotations

import datetime
import secrets
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote

from cryptography import x509

from raftka.broker.config import STANDARD_AUTHORIZER
from raftka.client import Admin
from raftka.client.admin import UserScramCredentialUpsertion
from raftka.common.client_tls import ClientTls
from raftka.local.certs import new_ca, write_file
from raftka.local.processes import http_json, wait_for

__all__ = [
    "NODE_NAME",
    "RAFTKA_CLIENT_FILE",
    "SaslSslSetup",
    "add_scram_user",
    "sasl_ssl_setup",
    "wait_until_brokers_know",
    "wait_until_brokers_know_user",
]

#: The common name (and principal name) of the nodes' HTTPS certificate.
NODE_NAME: Final = "node"
#: raftka's own client settings (``--command-config``), in the setup's directory.
RAFTKA_CLIENT_FILE: Final = "raftka-client.properties"

#: The mechanism a local secure cluster enables and its user authenticates with.
MECHANISM = "SCRAM-SHA-512"
#: A certificate closer than this to its end is made anew (with a new CA).
_RENEW_BEFORE = datetime.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class SaslSslSetup:
    """What a SASL_SSL cluster and its clients need (see the module doc)."""

    cafile: Path
    certfile: Path
    keyfile: Path
    user: str
    password: str
    mechanism: str = MECHANISM
    #: The nodes' HTTPS certificate (NODE_NAME) and the user's client certificate.
    node_certfile: Path | None = None
    node_keyfile: Path | None = None
    client_certfile: Path | None = None
    client_keyfile: Path | None = None

    @property
    def super_users(self) -> str:
        """The nodes and the user (``super.users``; see the module doc)."""
        nodes = "" if self.node_certfile is None else f"User:{NODE_NAME};"
        return f"{nodes}User:{self.user}"

    @property
    def broker_properties(self) -> dict[str, str]:
        """For every broker whose Kafka listener is ``SASL_SSL://`` (and whose HTTP API
        is HTTPS when the setup has node certificates)."""
        return {
            "sasl.enabled.mechanisms": self.mechanism,
            "ssl.certfile": str(self.certfile),
            "ssl.keyfile": str(self.keyfile),
            # ACLs enforced; the setup's own user may do anything, others what ACLs say.
            "authorizer.class.name": STANDARD_AUTHORIZER,
            **self.https_properties,
            "super.users": self.super_users,
        }

    @property
    def https_properties(self) -> dict[str, str]:
        """Every node's HTTPS API (``listeners=HTTPS://...``): empty without node
        certificates."""
        if self.node_certfile is None or self.node_keyfile is None:
            return {}
        prefix = "listener.name.https."
        return {
            prefix + "ssl.certfile": str(self.node_certfile),
            prefix + "ssl.keyfile": str(self.node_keyfile),
            prefix + "ssl.cafile": str(self.cafile),
            # CN=admin is User:admin, as the SASL user is on the Kafka listener.
            prefix + "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            # raftka's own client may log in as the user instead of presenting its
            # certificate (server_common/http_sasl.py).
            prefix + "sasl.enabled.mechanisms": self.mechanism,
            "super.users": self.super_users,
        }

    @property
    def raftka_client_config(self) -> dict[str, str]:
        """raftka's own client settings for its HTTPS API (``--command-config`` of
        raftka's commands and the console); empty without a client certificate."""
        if self.client_certfile is None or self.client_keyfile is None:
            return {}
        return {
            "security.protocol": "SSL",
            "ssl.cafile": str(self.cafile),
            "ssl.certfile": str(self.client_certfile),
            "ssl.keyfile": str(self.client_keyfile),
        }

    @property
    def raftka_client_options(self) -> dict[str, str]:
        """The same as raftka client keywords (``Admin(**options)``)."""
        return {k.replace(".", "_"): v for k, v in self.raftka_client_config.items()}

    def client_tls(self) -> ssl.SSLContext | None:
        """A client context with the user's certificate (None without one)."""
        if not self.raftka_client_config:
            return None
        return ClientTls(
            "SSL", str(self.cafile), str(self.client_certfile), str(self.client_keyfile)
        ).context()

    @property
    def client_config(self) -> dict[str, str]:
        """librdkafka's settings (confluent-kafka's config dict, kcat's ``-F`` file)."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.cafile),
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.user,
            "sasl.password": self.password,
        }

    @property
    def java_client_config(self) -> dict[str, str]:
        """Kafka's Java client settings (``--command-config`` of Kafka's tools)."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.cafile),
            "sasl.mechanism": self.mechanism,
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{self.user}" password="{self.password}";'
            ),
        }

    def write_client_files(self, directory: Path) -> tuple[Path, Path, Path | None]:
        """``client.properties`` (librdkafka, kcat), ``client-java.properties`` and,
        with a client certificate, ``raftka-client.properties`` (raftka's commands),
        mode 0600 (the first two hold the password)."""
        raftka = None
        if self.raftka_client_config:
            raftka = _write_properties(directory / RAFTKA_CLIENT_FILE, self.raftka_client_config)
        return (
            _write_properties(directory / "client.properties", self.client_config),
            _write_properties(directory / "client-java.properties", self.java_client_config),
            raftka,
        )


def sasl_ssl_setup(directory: Path, *, user: str = "admin", https: bool = False) -> SaslSslSetup:
    """The setup kept in ``directory``: reused when it is there and its certificates
    are not about to expire, else made anew (a new CA and certificates; the password
    is kept when there is one). ``https``: with the node and client certificates of an
    HTTPS API."""
    if user in ("broker", NODE_NAME):
        raise ValueError(f"user {user!r}: the name of one of the setup's certificates")
    directory.mkdir(parents=True, exist_ok=True)
    cafile = directory / "ca.pem"
    names = ["broker"] + ([NODE_NAME, user] if https else [])
    files = {n: (directory / f"{n}.pem", directory / f"{n}-key.pem") for n in names}
    password_file = directory / f"{user}.password"
    kept = cafile.exists() and password_file.exists()
    if not (kept and all(_usable(c) and k.exists() for c, k in files.values())):
        # One CA signs them all: a certificate missing (a setup made before the HTTPS
        # API was secured) or expiring means new ones, the password kept if there.
        ca = new_ca(directory)
        for name, (certfile, keyfile) in files.items():
            issued = ca.issue(directory, name, hosts=("localhost", "127.0.0.1"))
            assert (issued.certfile, issued.keyfile) == (certfile, keyfile)
        if not password_file.exists():
            write_file(password_file, secrets.token_urlsafe(18).encode(), private=True)
    password = password_file.read_text().strip()
    certfile, keyfile = files["broker"]
    if not https:
        return SaslSslSetup(cafile, certfile, keyfile, user, password)
    node, client = files[NODE_NAME], files[user]
    return SaslSslSetup(
        cafile,
        certfile,
        keyfile,
        user,
        password,
        node_certfile=node[0],
        node_keyfile=node[1],
        client_certfile=client[0],
        client_keyfile=client[1],
    )


def add_scram_user(bootstrap_servers: str, setup: SaslSslSetup, *, timeout_ms: int) -> None:
    """Commit ``setup``'s user's SCRAM credential through raftka's admin client (over
    the HTTP API); raises the admin client's error if the controller refuses it."""
    with Admin(
        bootstrap_servers=bootstrap_servers,
        default_api_timeout_ms=timeout_ms,
        **setup.raftka_client_options,
    ) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(setup.user, setup.mechanism, setup.password)]
        )


def wait_until_brokers_know(
    broker_addresses: Sequence[str], setup: SaslSslSetup, *, timeout_s: float
) -> None:
    """Wait until every broker's own metadata image holds ``setup``'s user for its
    mechanism: a credential reaches the brokers a moment after the controller commits
    it, and a client that authenticates before that is refused."""
    wait_until_brokers_know_user(
        broker_addresses, setup.user, setup.mechanism, timeout_s=timeout_s, tls=setup.client_tls()
    )


def wait_until_brokers_know_user(
    broker_addresses: Sequence[str],
    user: str,
    mechanism: str,
    *,
    timeout_s: float,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Wait until ``GET /v1/scram-credentials`` on every broker's HTTP API (HTTPS with
    ``tls``) lists ``user``'s ``mechanism`` credential."""

    def knows(address: str) -> bool:
        try:
            status, body = http_json(address, f"/v1/scram-credentials?user={quote(user)}", tls=tls)
        except OSError:
            return False
        results = body.get("results", []) if status == 200 else []
        return any(
            c.get("mechanism") == mechanism
            for r in results
            if r.get("error") is None
            for c in r.get("credentials", [])
        )

    wait_for(
        lambda: all(knows(a) for a in broker_addresses),
        timeout_s=timeout_s,
        message=f"the brokers never learnt user {user!r}'s {mechanism} credential",
    )


def _usable(certfile: Path) -> bool:
    if not certfile.exists():
        return False
    certificate = x509.load_pem_x509_certificate(certfile.read_bytes())
    remaining = certificate.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return remaining > _RENEW_BEFORE


def _write_properties(path: Path, settings: Mapping[str, str]) -> Path:
    text = "".join(f"{k}={v}\n" for k, v in settings.items())
    return write_file(path, text.encode(), private=True)
