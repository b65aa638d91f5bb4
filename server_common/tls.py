"""TLS settings with Kafka's names, mapped onto Python's ``ssl`` module.

Theory of operation
-------------------
Kafka configures TLS with Java key stores (``ssl.keystore.location``,
``ssl.truststore.location``, ...). Python's ``ssl`` module takes PEM files, so raftka
reads the same idea under the names ``ssl.SSLContext`` uses, and keeps Kafka's names
for everything that is not a file::

    Kafka (JKS)                         raftka (PEM)
    ssl.keystore.location (cert+key)    ssl.certfile (certificate chain, PEM)
                                        ssl.keyfile (private key, PEM)
    ssl.key.password                    ssl.key.password (the key file's passphrase)
    ssl.truststore.location             ssl.cafile (trusted CA certificates, PEM)
    ssl.client.auth                     ssl.client.auth (required | requested | none)
    ssl.endpoint.identification.algorithm  same: https (default) checks the peer's
                                        host name; empty turns the check off
    ssl.enabled.protocols               same: TLSv1.2 and TLSv1.3 only
    ssl.cipher.suites                   same, in OpenSSL's cipher-list syntax

The Java-only names (``ssl.keystore.*``, ``ssl.truststore.*``) are refused by name with
the PEM name to use instead: a setting raftka would silently ignore is worse than an
error. Every setting may be given per listener with Kafka's prefix
``listener.name.<name>.`` (lower-case listener name), which wins over the unprefixed
one, as in Kafka.

A context that cannot be built (a missing or unreadable file, a key that does not match
its certificate, a wrong passphrase) raises :class:`ConfigError` naming the setting, so
a listener that asked for TLS refuses to start instead of serving plaintext.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from raftka.server_common.process_config import ConfigError

__all__ = [
    "TLS_KEYS",
    "ClientAuth",
    "TlsSettings",
    "client_context",
    "on_handshake_failure",
    "server_context",
    "tls_keys_for",
    "tls_settings",
]

#: The TLS settings a process knows (each also with ``listener.name.<name>.`` before it).
TLS_KEYS: Final = (
    "ssl.certfile",
    "ssl.keyfile",
    "ssl.key.password",
    "ssl.cafile",
    "ssl.client.auth",
    "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)


def tls_keys_for(listener: str) -> frozenset[str]:
    """TLS_KEYS, plain and with ``listener``'s per-listener prefix."""
    prefix = f"listener.name.{listener.lower()}."
    return frozenset(TLS_KEYS) | {prefix + k for k in TLS_KEYS}


_JAVA_ONLY: Final = {
    "ssl.keystore.location": "ssl.certfile and ssl.keyfile",
    "ssl.keystore.password": "ssl.key.password (of ssl.keyfile)",
    "ssl.keystore.type": "PEM files (ssl.certfile, ssl.keyfile)",
    "ssl.truststore.location": "ssl.cafile",
    "ssl.truststore.password": "nothing (a PEM CA file has no password)",
    "ssl.truststore.type": "a PEM ssl.cafile",
}
_PROTOCOLS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class ClientAuth(enum.Enum):
    """Kafka's ``ssl.client.auth``: whether a server asks clients for a certificate."""

    REQUIRED = "required"
    REQUESTED = "requested"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One listener's (or one client's) TLS settings, checked but not yet loaded."""

    certfile: Path | None = None
    keyfile: Path | None = None
    key_password: str | None = None
    cafile: Path | None = None
    client_auth: ClientAuth = ClientAuth.NONE
    check_hostname: bool = True
    protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: str | None = None


def tls_settings(props: Mapping[str, str], listener: str | None = None) -> TlsSettings:
    """The TLS settings in ``props`` (per-listener keys first); ConfigError when wrong."""
    prefix = f"listener.name.{listener.lower()}." if listener else ""

    def get(key: str) -> tuple[str, str] | None:
        for name in (prefix + key, key) if prefix else (key,):
            if name in props:
                return name, props[name].strip()
        return None

    for java, pem in _JAVA_ONLY.items():
        found = get(java)
        if found is not None:
            raise ConfigError(f"{found[0]} is not supported (Java key store); use {pem}")

    def path(key: str) -> Path | None:
        found = get(key)
        return Path(found[1]) if found and found[1] else None

    client_auth = ClientAuth.NONE
    if (found := get("ssl.client.auth")) is not None:
        try:
            client_auth = ClientAuth(found[1].lower())
        except ValueError:
            raise ConfigError(
                f"{found[0]} must be required, requested or none, got {found[1]!r}"
            ) from None
    check_hostname = True
    if (found := get("ssl.endpoint.identification.algorithm")) is not None:
        if found[1].lower() not in ("https", ""):
            raise ConfigError(f"{found[0]} must be https or empty, got {found[1]!r}")
        check_hostname = found[1].lower() == "https"
    protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    if (found := get("ssl.enabled.protocols")) is not None:
        protocols = tuple(p.strip() for p in found[1].split(",") if p.strip())
        unknown = [p for p in protocols if p not in _PROTOCOLS]
        if unknown or not protocols:
            raise ConfigError(f"{found[0]}: only TLSv1.2 and TLSv1.3 are allowed, got {found[1]!r}")
    ciphers = get("ssl.cipher.suites")
    key_password = get("ssl.key.password")
    settings = TlsSettings(
        certfile=path("ssl.certfile"),
        keyfile=path("ssl.keyfile"),
        key_password=key_password[1] if key_password else None,
        cafile=path("ssl.cafile"),
        client_auth=client_auth,
        check_hostname=check_hostname,
        protocols=protocols,
        cipher_suites=ciphers[1] if ciphers and ciphers[1] else None,
    )
    if (settings.certfile is None) != (settings.keyfile is None):
        raise ConfigError(f"{prefix}ssl.certfile and {prefix}ssl.keyfile go together")
    return settings


def _base(settings: TlsSettings, protocol: ssl._SSLMethod) -> ssl.SSLContext:
    # Not create_default_context: on a server it would trust the system's CAs for client
    # certificates, and mTLS must trust only ssl.cafile.
    context = ssl.SSLContext(protocol)
    versions = sorted(_PROTOCOLS[p] for p in settings.protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    if settings.cipher_suites is not None:
        try:
            context.set_ciphers(settings.cipher_suites)
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl.cipher.suites {settings.cipher_suites!r}: {exc}") from None
    if settings.cafile is not None:
        try:
            context.load_verify_locations(cafile=str(settings.cafile))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.cafile {settings.cafile}: {exc}") from None
    if settings.certfile is not None and settings.keyfile is not None:
        try:
            context.load_cert_chain(
                str(settings.certfile), str(settings.keyfile), password=settings.key_password
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"ssl.certfile {settings.certfile} / ssl.keyfile {settings.keyfile}: {exc}"
            ) from None
    return context


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: its own certificate, and the clients' per ssl.client.auth."""
    if settings.certfile is None:
        raise ConfigError("a TLS listener needs ssl.certfile and ssl.keyfile")
    if settings.client_auth is not ClientAuth.NONE and settings.cafile is None:
        raise ConfigError(
            f"ssl.client.auth={settings.client_auth.value} needs ssl.cafile "
            "(the CA that signs client certificates)"
        )
    context = _base(settings, ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = {
        ClientAuth.REQUIRED: ssl.CERT_REQUIRED,
        ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
        ClientAuth.NONE: ssl.CERT_NONE,
    }[settings.client_auth]
    return context


def on_handshake_failure(context: ssl.SSLContext, callback: Callable[[ssl.SSLError], None]) -> None:
    """Call ``callback`` for every TLS handshake a server ``context`` refuses: no client
    certificate where one is required, a certificate from another CA, a protocol or
    cipher it does not allow, bytes that are not TLS at all. Kafka counts these as
    failed authentications (``failed-authentication-total``).

    asyncio's servers drop such a connection before any protocol of ours sees it, so
    the hook is the context's ``sslobject_class`` (public since Python 3.7): every
    connection's TLS object is one of ours, whose handshake reports its own failure.
    A peer that closes mid-handshake or stays silent until the handshake timeout fails
    no handshake step, so it is not counted (a TCP probe of the port is not an
    authentication)."""

    class _Watched(ssl.SSLObject):
        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise  # a step of a handshake still under way
            except ssl.SSLError as e:
                callback(e)
                raise

    context.sslobject_class = _Watched


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's (or a node's outgoing) context: the server is always verified against
    ssl.cafile (the system's CAs when none is given), its host name unless turned off."""
    context = _base(settings, ssl.PROTOCOL_TLS_CLIENT)
    if settings.cafile is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = settings.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    return context
