"""A throwaway certificate authority and node certificates for local secure clusters.

Theory of operation
-------------------
``raftka up --secure`` and the TLS tests need certificates that real TLS stacks accept:
a CA, and per node a certificate signed by it whose subject alternative names list the
host names and IP addresses the node is reached at (Python's ``ssl`` and librdkafka
check those, not the common name). The ``cryptography`` package builds them; nothing
here talks to the network.

Each node certificate carries both extended key usages (serverAuth and clientAuth):
a node is a server to clients and a client to the other nodes (replication, Raft,
transaction markers), and mutual TLS between nodes presents the same certificate both
ways. Its subject is ``CN=<name>``; under Kafka's default
``ssl.principal.mapping.rules`` its principal is ``User:CN=<name>``.

The CA's key never leaves the directory it is written to; private keys are written
with mode 0600. Lifetimes are short (default 30 days): these are for a laptop cluster
and for tests, not for production, where an operator's own CA issues the certificates
(``deploy/`` says how).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "IssuedCertificate", "new_ca", "write_file"]

_DEFAULT_DAYS = 30


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """The PEM files of one issued certificate."""

    certfile: Path
    keyfile: Path


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA's certificate and key, able to issue node and client certificates."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cafile: Path

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        hosts: Sequence[str] = ("localhost", "127.0.0.1"),
        days: int = _DEFAULT_DAYS,
        key_password: str | None = None,
    ) -> IssuedCertificate:
        """A certificate for ``CN=<name>`` valid for ``hosts`` (names or IPs), written as
        ``<name>.pem`` and ``<name>-key.pem`` (encrypted when ``key_password`` is set)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt_names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt_names.append(x509.DNSName(host))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            # A minute of slack: a peer whose clock is a little behind still accepts it.
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return IssuedCertificate(
            certfile=write_file(directory / f"{name}.pem", _cert_pem(certificate), private=False),
            keyfile=write_file(
                directory / f"{name}-key.pem", _key_pem(key, key_password), private=True
            ),
        )


def new_ca(
    directory: Path, *, name: str = "raftka-local-ca", days: int = _DEFAULT_DAYS
) -> CertificateAuthority:
    """A new self-signed CA, its certificate written to ``<directory>/ca.pem`` and its
    key to ``ca-key.pem`` (mode 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    write_file(directory / "ca-key.pem", _key_pem(key, None), private=True)
    return CertificateAuthority(
        certificate, key, write_file(directory / "ca.pem", _cert_pem(certificate), private=False)
    )


def _cert_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def write_file(path: Path, data: bytes, *, private: bool) -> Path:
    """Write ``data`` to ``path``, mode 0600 when ``private`` (keys, passwords)."""
    # Create with the final mode, so a private key is never readable by others, even
    # for the moment between writing and a chmod.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        # O_CREAT keeps an existing file's mode: set it again.
        os.fchmod(out.fileno(), 0o600 if private else 0o644)
        out.write(data)
    return path
