"""The HTTPS HTTP API's settings and its request policy (server_common/node_http.py),
and the raftka client's ``security_protocol`` (client/config.py).

Config: every wrong or useless setting is refused with a message naming the key. The
policy: an aiohttp app behind the middleware is served on a real TLS socket on
127.0.0.1 and asked with real certificates: a node principal reaches a node route; an
application principal gets CLUSTER_AUTHORIZATION_FAILED there (and everywhere but
/health and /metrics when the node serves nodes only); a certificate no
``ssl.principal.mapping.rules`` rule maps gets SASL_AUTHENTICATION_FAILED.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from https_helpers import https_props

from raftka.client._transport import Transport
from raftka.client.config import ClientConfigError, ProducerConfig
from raftka.common.errors import KafkaError, NetworkError
from raftka.local.certs import CertificateAuthority, IssuedCertificate, new_ca
from raftka.server_cli import combined_configs
from raftka.server_common.http_errors import Handler
from raftka.server_common.metrics import https_api_metrics
from raftka.server_common.node_config import node_config_from_properties
from raftka.server_common.node_http import (
    PLAIN_HTTP,
    PRINCIPAL_KEY,
    HttpsRefusals,
    NodeHttp,
    node_http,
    require_node,
)
from raftka.server_common.process_config import ConfigError

VOTERS = "1@127.0.0.1:9093"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return new_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def node_cert(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue(ca.cafile.parent, "node-1")


@pytest.fixture(scope="module")
def app_cert(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue(ca.cafile.parent, "app")


def _controller(props: dict[str, str]) -> dict[str, str]:
    return {
        "node.id": "1",
        "controller.quorum.voters": VOTERS,
        "metadata.log.dir": "/tmp/unused",
        **props,
    }


def test_an_https_listener_builds_contexts_and_https_urls(
    ca: CertificateAuthority, node_cert: IssuedCertificate
) -> None:
    config = node_config_from_properties(_controller(https_props(ca, node_cert)))
    http = config.http
    assert http.secure and http.scheme == "https"
    assert http.url("127.0.0.1:9094", "/v1/metadata") == "https://127.0.0.1:9094/v1/metadata"
    assert http.server_ssl is not None and http.server_ssl.verify_mode is ssl.CERT_REQUIRED
    assert http.client_ssl is not None and http.client_ssl.check_hostname
    assert http.node_principals == {"User:CN=node-1"}
    plain = node_config_from_properties(_controller({}))
    assert plain.http is PLAIN_HTTP and plain.http.url("h:1", "/x") == "http://h:1/x"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"listener.name.https.ssl.client.auth": "requested"}, "ssl.client.auth=requested"),
        ({"listener.name.https.ssl.client.auth": "none"}, "ssl.client.auth=none"),
        ({"super.users": ""}, "super.users"),
        ({"super.users": "node-1"}, "super.users"),
        ({"listener.name.https.ssl.certfile": "/nonexistent.pem"}, "ssl.certfile"),
        ({"listener.name.https.ssl.cafile": ""}, "ssl.cafile"),
        ({"quorum.engine": "pysyncobj"}, "quorum.engine=pysyncobj"),
        ({"listeners": "CONTROLLER://127.0.0.1:9093"}, "listener.name.https.ssl.cafile"),
    ],
)
def test_wrong_or_useless_https_settings_are_refused_by_name(
    ca: CertificateAuthority, node_cert: IssuedCertificate, change: dict[str, str], named: str
) -> None:
    props = _controller(https_props(ca, node_cert, **change))
    with pytest.raises(ConfigError) as caught:
        node_config_from_properties(props)
    assert named in str(caught.value), caught.value


def test_super_users_on_a_plain_controller_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"super\.users: no HTTPS API or authorizer uses it"):
        node_config_from_properties(_controller({"super.users": "User:CN=node-1"}))


def _client(ca: CertificateAuthority, cert: IssuedCertificate) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.cafile))
    context.load_cert_chain(str(cert.certfile), str(cert.keyfile))
    return context


async def _ask(
    http: NodeHttp,
    client: ssl.SSLContext,
    paths: list[tuple[str, str]],
    acl_paths: frozenset[str] = frozenset(),
) -> list[tuple[int, str]]:
    """Serve a tiny app behind ``http``'s middleware over TLS; ask each (method, path)."""

    async def echo(request: web.Request) -> web.Response:
        if request.path == "/v1/fetch":
            require_node(request, "a follower fetch")
        return web.json_response({"principal": request[PRINCIPAL_KEY]})

    app = web.Application(middlewares=[_render_kafka_errors, http.middleware(None, acl_paths)])
    app.add_routes([web.route("*", "/{tail:.*}", echo)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=http.server_ssl)
    await site.start()
    port = runner.addresses[0][1]
    out: list[tuple[int, str]] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as s:
            for method, path in paths:
                async with s.request(method, f"https://127.0.0.1:{port}{path}") as r:
                    body = await r.json()
                    out.append((r.status, body.get("error") or body["principal"]))
    finally:
        await runner.cleanup()
    return out


@web.middleware
async def _render_kafka_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    # What the servers' error middleware does for require_node's refusal.
    try:
        return await handler(request)
    except KafkaError as e:
        return web.json_response(e.to_wire(), status=403)


def test_node_routes_serve_node_principals_only(
    ca: CertificateAuthority, node_cert: IssuedCertificate, app_cert: IssuedCertificate
) -> None:
    http = node_http(https_props(ca, node_cert))
    paths = [
        ("POST", "/v1/brokers/register"),
        ("POST", "/v1/fetch"),
        ("POST", "/v1/produce"),
        ("GET", "/health"),
    ]
    as_node = asyncio.run(_ask(http, _client(ca, node_cert), paths))
    assert as_node == [(200, "User:CN=node-1")] * 4
    as_app = asyncio.run(_ask(http, _client(ca, app_cert), paths))
    assert as_app == [
        (403, "CLUSTER_AUTHORIZATION_FAILED"),
        (403, "CLUSTER_AUTHORIZATION_FAILED"),
        (200, "User:CN=app"),
        (200, "User:CN=app"),
    ]
    assert http.refusals.cluster_authorization_failed == 2  # the route's and require_node's
    nodes_only = http.serving_nodes_only(True)
    as_app = asyncio.run(_ask(nodes_only, _client(ca, app_cert), paths))
    assert [status for status, _ in as_app] == [403, 403, 403, 200]
    # The copy counts into the same place, which /metrics reads.
    assert http.refusals == HttpsRefusals(failed_authentication=0, cluster_authorization_failed=5)
    scraped = {m.name: m.samples[0] for m in https_api_metrics(nodes_only)}
    refused = scraped["raftka_https_cluster_authorization_failed"]
    assert (refused.labels, refused.value) == ({"listener": "HTTPS"}, 5)
    assert scraped["kafka_server_socketservermetrics_failed_authentication"].value == 0
    assert list(https_api_metrics(PLAIN_HTTP)) == []
    # A broker with the authorizer: the routes whose handlers check ACLs are open to
    # any principal, the node routes stay for nodes.
    as_app = asyncio.run(
        _ask(nodes_only, _client(ca, app_cert), paths, acl_paths=frozenset({"/v1/produce"}))
    )
    assert [status for status, _ in as_app] == [403, 403, 200, 200]


def test_a_certificate_no_rule_maps_is_refused(
    ca: CertificateAuthority, node_cert: IssuedCertificate, app_cert: IssuedCertificate
) -> None:
    rules = "RULE:^CN=(node-[0-9]+)$/$1/"
    http = node_http(
        https_props(ca, node_cert, **{"listener.name.https.ssl.principal.mapping.rules": rules})
    )
    http = NodeHttp(**{**_fields(http), "node_principals": frozenset({"User:node-1"})})
    assert asyncio.run(_ask(http, _client(ca, node_cert), [("GET", "/v1/produce")])) == [
        (200, "User:node-1")
    ]
    assert asyncio.run(_ask(http, _client(ca, app_cert), [("GET", "/health")])) == [
        (401, "SASL_AUTHENTICATION_FAILED")
    ]
    assert http.refusals.failed_authentication == 1


def _fields(http: NodeHttp) -> dict[str, object]:
    return {name: getattr(http, name) for name in NodeHttp.__dataclass_fields__}


_CONTEXT = ssl.create_default_context()


def test_a_ready_ssl_context_is_used_as_given() -> None:
    config = ProducerConfig(
        bootstrap_servers=("h:1",), security_protocol="SSL", ssl_context=_CONTEXT
    )
    assert config.tls_context() is _CONTEXT


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"security_protocol": "SASL_SSL"}, "sasl_plain_username=None: SASL_SSL needs"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "security_protocol='SASL_PLAINTEXT'"),
        ({"security_protocol": "TLS"}, "security_protocol='TLS'"),
        ({"ssl_cafile": "ca.pem"}, "ssl_cafile='ca.pem'"),
        ({"security_protocol": "SSL"}, "ssl_certfile=None"),
        ({"security_protocol": "SSL", "ssl_certfile": "c.pem"}, "ssl_keyfile=None"),
        ({"ssl_context": _CONTEXT}, "ssl_context=<ssl.SSLContext"),
        ({"security_protocol": "SSL", "ssl_context": "ctx"}, "ssl_context='ctx'"),
        (
            {"security_protocol": "SSL", "ssl_context": _CONTEXT, "ssl_certfile": "c.pem"},
            "ssl_certfile='c.pem': ssl_context is given",
        ),
        (
            {"security_protocol": "SSL", "ssl_context": _CONTEXT, "ssl_check_hostname": False},
            "ssl_check_hostname=False: ssl_context is given",
        ),
    ],
)
def test_client_security_options_are_checked_by_name(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ClientConfigError) as caught:
        ProducerConfig(bootstrap_servers=("h:1",), **options)  # type: ignore[arg-type]
    assert caught.value.message.startswith(named), caught.value


def test_client_ssl_files_that_cannot_be_loaded_are_named(
    tmp_path: Path, ca: CertificateAuthority, app_cert: IssuedCertificate
) -> None:
    good = {
        "security_protocol": "SSL",
        "ssl_cafile": str(ca.cafile),
        "ssl_certfile": str(app_cert.certfile),
        "ssl_keyfile": str(app_cert.keyfile),
    }
    context = ProducerConfig(bootstrap_servers=("h:1",), **good).tls_context()  # type: ignore[arg-type]
    assert context is not None and context.verify_mode is ssl.CERT_REQUIRED
    for option in ("ssl_cafile", "ssl_certfile"):
        config = ProducerConfig(
            bootstrap_servers=("h:1",),
            **{**good, option: str(tmp_path / "missing.pem")},  # type: ignore[arg-type]
        )
        with pytest.raises(ClientConfigError, match=f"INVALID_CONFIG: {option} "):
            config.tls_context()


def test_a_combined_process_serves_both_listeners_over_https(
    ca: CertificateAuthority, node_cert: IssuedCertificate, tmp_path: Path
) -> None:
    props = {
        **https_props(ca, node_cert),
        "node.id": "1",
        "process.roles": "controller,broker",
        "controller.quorum.voters": VOTERS,
        "listeners": "HTTPS://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "log.dirs": str(tmp_path / "logs"),
    }
    controller, broker = combined_configs(props)
    assert controller is not None and broker is not None
    assert controller.http.secure and broker.http.secure
    assert controller.listen_port == 9093 and broker.listen_port == 9092
    # SASL on the HTTPS API holds for both listeners too.
    sasl = {**props, "listener.name.https.sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    controller, broker = combined_configs(sasl)
    assert controller is not None and broker is not None
    assert controller.http.sasl is not None and broker.http.sasl is not None
    assert controller.http.sasl.mechanisms == broker.http.sasl.mechanisms == ("SCRAM-SHA-256",)


def test_inter_broker_listener_name_may_only_name_the_http_api(
    ca: CertificateAuthority, node_cert: IssuedCertificate, tmp_path: Path
) -> None:
    base = {
        **https_props(ca, node_cert),
        "node.id": "101",
        "process.roles": "broker",
        "controller.quorum.voters": VOTERS,
        "listeners": "HTTPS://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9094",
        "log.dirs": str(tmp_path / "logs"),
    }
    _, broker = combined_configs({**base, "inter.broker.listener.name": "HTTPS"})
    assert broker is not None and broker.http.secure
    with pytest.raises(ConfigError, match=r"inter\.broker\.listener\.name=PLAINTEXT: the nodes"):
        combined_configs({**base, "inter.broker.listener.name": "PLAINTEXT"})


def test_refused_tls_handshakes_count_as_failed_authentications(
    ca: CertificateAuthority,
    node_cert: IssuedCertificate,
    app_cert: IssuedCertificate,
    tmp_path: Path,
) -> None:
    """No client certificate, one from another CA, and plain HTTP on the TLS port each
    fail the handshake and count once (raftka's client in plain HTTP hears how to ask
    over HTTPS); a bare TCP connect (a port probe) and a trusted client do not."""
    http = node_http(https_props(ca, node_cert))
    stranger = new_ca(tmp_path / "other").issue(tmp_path / "other", "node-1")
    no_cert = ssl.create_default_context(cafile=str(ca.cafile))

    async def attempt(port: int, tls: ssl.SSLContext | None) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await asyncio.wait_for(reader.read(), timeout=10)
            writer.close()
        except (OSError, ssl.SSLError):
            pass  # refused, as it should be; the count below is what the test checks

    async def counted(expected: int, *, exactly: bool = True) -> int:
        for _ in range(1000):
            if http.refusals.failed_authentication >= expected:
                break
            await asyncio.sleep(0.01)  # the server notes the failure on its own turn
        found = http.refusals.failed_authentication
        assert found == expected if exactly else found >= expected, "refused handshakes"
        return found

    async def health(request: web.Request) -> web.Response:
        return web.json_response({})

    async def body() -> None:
        app = web.Application(middlewares=[http.middleware()])
        app.add_routes([web.get("/health", health)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=http.server_ssl)
        await site.start()
        port = runner.addresses[0][1]
        try:
            await attempt(port, no_cert)
            await counted(1)
            await attempt(port, _client(ca, stranger))
            await counted(2)
            await attempt(port, None)  # plain HTTP
            await counted(3)
            # raftka's client asking in plain HTTP is told what to change.
            plain = Transport(client_id="t", request_timeout_ms=5_000, idle_ms=1_000)
            try:
                with pytest.raises(NetworkError, match=r"security_protocol='SSL'"):
                    await plain.request(f"127.0.0.1:{port}", "GET", "/health")
            finally:
                await plain.close()
            # aiohttp tries a disconnected GET twice: each try is a refused handshake.
            refused = await counted(4, exactly=False)
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=_client(ca, app_cert))
                ) as s,
                s.get(f"https://127.0.0.1:{port}/health") as r,
            ):
                assert r.status == 200
            await counted(refused)
        finally:
            await runner.cleanup()

    asyncio.run(body())
