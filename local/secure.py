"""A local cluster's SASL_SSL setup: certificates, the brokers' settings, a SCRAM user
and the clients' settings, for ``raftka up --secure``, the SASL_SSL tests and the
listener benchmark.

Theory of operation
-------------------
:func:`sasl_ssl_setup` makes (or, for a resumed cluster, finds) in one directory a
throwaway CA (:mod:`raftka.local.certs`), one certificate every broker presents (valid
for ``localhost`` and ``127.0.0.1``, where local brokers listen), and a password for
the user, kept in a file with mode 0600 so that a resumed cluster keeps its user. From
those it gives the brokers' properties (``sasl.enabled.mechanisms``, ``ssl.certfile``,
``ssl.keyfile``, and the authorizer on with the user as its one super user) and the
clients' settings: librdkafka's names (confluent-kafka, and kcat's ``-F`` file) and
Kafka's Java client names (``--command-config`` of Kafka's tools).

The user itself exists only once the cluster commits its SCRAM credential:
:func:`add_scram_user` asks for that through raftka's admin client (HTTP), which
salts the password on the client side, so the password never travels;
:func:`wait_until_brokers_know` then waits until every broker's image has it.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cryptography import x509

from raftka.broker.config import STANDARD_AUTHORIZER
from raftka.client import Admin
from raftka.client.admin import UserScramCredentialUpsertion
from raftka.local.certs import new_ca, write_file
from raftka.local.processes import http_json, wait_for

__all__ = [
    "SaslSslSetup",
    "add_scram_user",
    "sasl_ssl_setup",
    "wait_until_brokers_know",
    "wait_until_brokers_know_user",
]

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

    @property
    def broker_properties(self) -> dict[str, str]:
        """For every broker whose Kafka listener is ``SASL_SSL://``."""
        return {
            "sasl.enabled.mechanisms": self.mechanism,
            "ssl.certfile": str(self.certfile),
            "ssl.keyfile": str(self.keyfile),
            # ACLs enforced; the setup's own user may do anything, others what ACLs say.
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{self.user}",
        }

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

    def write_client_files(self, directory: Path) -> tuple[Path, Path]:
        """``client.properties`` (librdkafka, kcat) and ``client-java.properties``,
        mode 0600 (they hold the password)."""
        return (
            _write_properties(directory / "client.properties", self.client_config),
            _write_properties(directory / "client-java.properties", self.java_client_config),
        )


def sasl_ssl_setup(directory: Path, *, user: str = "admin") -> SaslSslSetup:
    """The setup kept in ``directory``: reused when it is there and its certificate is
    not about to expire, else made anew (a new CA, certificate and password)."""
    directory.mkdir(parents=True, exist_ok=True)
    cafile, certfile, keyfile = (
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "broker-key.pem",
    )
    password_file = directory / f"{user}.password"
    if not (_usable(certfile) and cafile.exists() and keyfile.exists() and password_file.exists()):
        ca = new_ca(directory)
        issued = ca.issue(directory, "broker", hosts=("localhost", "127.0.0.1"))
        assert (issued.certfile, issued.keyfile) == (certfile, keyfile)
        write_file(password_file, secrets.token_urlsafe(18).encode(), private=True)
    password = password_file.read_text().strip()
    return SaslSslSetup(cafile, certfile, keyfile, user, password)


def add_scram_user(bootstrap_servers: str, setup: SaslSslSetup, *, timeout_ms: int) -> None:
    """Commit ``setup``'s user's SCRAM credential through raftka's admin client (over
    the HTTP API); raises the admin client's error if the controller refuses it."""
    with Admin(bootstrap_servers=bootstrap_servers, default_api_timeout_ms=timeout_ms) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(setup.user, setup.mechanism, setup.password)]
        )


def wait_until_brokers_know(
    broker_addresses: Sequence[str], setup: SaslSslSetup, *, timeout_s: float
) -> None:
    """Wait until every broker's own metadata image holds ``setup``'s user for its
    mechanism: a credential reaches the brokers a moment after the controller commits
    it, and a client that authenticates before that is refused."""
    wait_until_brokers_know_user(broker_addresses, setup.user, setup.mechanism, timeout_s=timeout_s)


def wait_until_brokers_know_user(
    broker_addresses: Sequence[str], user: str, mechanism: str, *, timeout_s: float
) -> None:
    """Wait until ``GET /v1/scram-credentials`` on every broker's HTTP API lists
    ``user``'s ``mechanism`` credential."""

    def knows(address: str) -> bool:
        try:
            status, body = http_json(address, f"/v1/scram-credentials?user={quote(user)}")
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
