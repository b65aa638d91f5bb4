"""TLS settings (Kafka's names, PEM files) and real handshakes over loopback sockets,
with certificates from the local CA (raftka.local.certs)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from pathlib import Path

import pytest

from raftka.local.certs import CertificateAuthority, new_ca
from raftka.server_common.process_config import ConfigError
from raftka.server_common.tls import (
    ClientAuth,
    client_context,
    server_context,
    tls_settings,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pki")
    ca = new_ca(root / "ca")
    other: CertificateAuthority = new_ca(root / "other", name="someone-else")
    node = ca.issue(root / "ca", "broker-1", hosts=("localhost",))
    client = ca.issue(root / "ca", "alice", key_password="s3cret")
    stranger = other.issue(root / "other", "mallory")
    return {
        "ca": ca.cafile,
        "node": node.certfile,
        "node-key": node.keyfile,
        "client": client.certfile,
        "client-key": client.keyfile,
        "stranger": stranger.certfile,
        "stranger-key": stranger.keyfile,
    }


def _handshake(
    server: Mapping[str, str], client: Mapping[str, str], *, hostname: str = "localhost"
) -> str | None:
    """Run one TLS handshake between real sockets; the peer subject's CN the server saw
    (None when the client sent no certificate). Raises the client side's failure."""
    server_ctx = server_context(tls_settings(server))
    client_ctx = client_context(tls_settings(client))
    seen: list[str | None] = []

    async def main() -> str | None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("peercert")
            cn = None
            if peer:
                cn = next(v for rdn in peer["subject"] for k, v in rdn if k == "commonName")
            seen.append(cn)
            writer.write(b"ok\n")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server_ctx)
        port = srv.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_ctx, server_hostname=hostname
                ),
                10,
            )
            # TLS 1.3 reports a refused client certificate only on the first read.
            line = await asyncio.wait_for(reader.readline(), 10)
            writer.close()
            if line != b"ok\n":
                raise ssl.SSLError(f"the server closed the connection ({line!r})")
            return seen[0]
        finally:
            srv.close()

    return asyncio.run(main())


def _server(pki: dict[str, Path], auth: str = "required") -> dict[str, str]:
    return {
        "ssl.certfile": str(pki["node"]),
        "ssl.keyfile": str(pki["node-key"]),
        "ssl.cafile": str(pki["ca"]),
        "ssl.client.auth": auth,
    }


def test_mutual_tls_names_the_client(pki: dict[str, Path]) -> None:
    client = {
        "ssl.cafile": str(pki["ca"]),
        "ssl.certfile": str(pki["client"]),
        "ssl.keyfile": str(pki["client-key"]),
        "ssl.key.password": "s3cret",
    }
    assert _handshake(_server(pki), client) == "alice"


def test_a_certificate_from_another_ca_is_refused(pki: dict[str, Path]) -> None:
    client = {
        "ssl.cafile": str(pki["ca"]),
        "ssl.certfile": str(pki["stranger"]),
        "ssl.keyfile": str(pki["stranger-key"]),
    }
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(_server(pki), client)


def test_no_client_certificate_when_required_is_refused_and_allowed_when_none(
    pki: dict[str, Path],
) -> None:
    client = {"ssl.cafile": str(pki["ca"])}
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(_server(pki), client)
    assert _handshake(_server(pki, "none"), client) is None
    assert _handshake(_server(pki, "requested"), client) is None


def test_the_server_is_verified_by_ca_and_host_name(pki: dict[str, Path]) -> None:
    server = _server(pki, "none")
    # The node's certificate names localhost only.
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        _handshake(server, {"ssl.cafile": str(pki["ca"])}, hostname="127.0.0.1")
    no_check = {"ssl.cafile": str(pki["ca"]), "ssl.endpoint.identification.algorithm": ""}
    assert _handshake(server, no_check, hostname="127.0.0.1") is None
    # A client that trusts another CA never accepts this server, host name or not.
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, {"ssl.cafile": str(new_ca(pki["ca"].parent.parent / "x").cafile)})


def test_protocols_older_than_tls_1_2_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"ssl\.enabled\.protocols: only TLSv1\.2 and TLSv1\.3"):
        tls_settings({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    settings = tls_settings({"ssl.enabled.protocols": "TLSv1.3"})
    context = client_context(settings)
    assert context.minimum_version is ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        (
            {"ssl.keystore.location": "/x.jks"},
            r"ssl\.keystore\.location is not supported.*ssl\.certfile",
        ),
        ({"ssl.truststore.location": "/x.jks"}, r"use ssl\.cafile"),
        ({"ssl.client.auth": "maybe"}, r"ssl\.client\.auth must be required, requested or none"),
        ({"ssl.endpoint.identification.algorithm": "ldap"}, "must be https or empty"),
        ({"ssl.certfile": "/x.pem"}, "go together"),
        ({"listener.name.ssl.ssl.client.auth": "x"}, r"listener\.name\.ssl\.ssl\.client\.auth"),
    ],
)
def test_bad_settings_name_the_key(props: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        tls_settings(props, "SSL")


def test_files_that_cannot_load_refuse_the_listener(pki: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.certfile"):
        server_context(tls_settings({"ssl.certfile": str(tmp_path / "no.pem"), "ssl.keyfile": "k"}))
    # The client's key is encrypted: without its password it does not load.
    with pytest.raises(ConfigError, match=r"ssl\.keyfile"):
        server_context(
            tls_settings(
                {"ssl.certfile": str(pki["client"]), "ssl.keyfile": str(pki["client-key"])}
            )
        )
    with pytest.raises(ConfigError, match=r"needs ssl\.certfile"):
        server_context(tls_settings({}))
    with pytest.raises(ConfigError, match=r"ssl\.client\.auth=required needs ssl\.cafile"):
        server_context(
            tls_settings(
                {
                    "ssl.certfile": str(pki["node"]),
                    "ssl.keyfile": str(pki["node-key"]),
                    "ssl.client.auth": "required",
                }
            )
        )


def test_listener_prefix_wins(pki: dict[str, Path]) -> None:
    props = {
        "ssl.client.auth": "none",
        "listener.name.internal.ssl.client.auth": "required",
        "ssl.cafile": str(pki["ca"]),
    }
    assert tls_settings(props, "INTERNAL").client_auth is ClientAuth.REQUIRED
    assert tls_settings(props, "EXTERNAL").client_auth is ClientAuth.NONE
    assert tls_settings(props).cafile == pki["ca"]


def test_private_keys_are_private(pki: dict[str, Path]) -> None:
    assert pki["node-key"].stat().st_mode & 0o777 == 0o600
    assert (pki["ca"].parent / "ca-key.pem").stat().st_mode & 0o777 == 0o600
    assert pki["ca"].stat().st_mode & 0o777 == 0o644
