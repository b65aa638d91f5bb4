"""Settings of a node whose HTTP API is HTTPS, for the unit tests of that API
(server_common/node_http.py, server_common/http_sasl.py)."""

from __future__ import annotations

from raftka.local.certs import CertificateAuthority, IssuedCertificate


def https_props(ca: CertificateAuthority, cert: IssuedCertificate, **more: str) -> dict[str, str]:
    """``listeners=HTTPS://127.0.0.1:9093`` presenting ``cert``, trusting ``ca``, with
    ``User:CN=node-1`` as the node principal; ``more`` added or replacing."""
    return {
        "listeners": "HTTPS://127.0.0.1:9093",
        "listener.name.https.ssl.certfile": str(cert.certfile),
        "listener.name.https.ssl.keyfile": str(cert.keyfile),
        "listener.name.https.ssl.cafile": str(ca.cafile),
        "super.users": "User:CN=node-1",
        **more,
    }
