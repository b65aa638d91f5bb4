"""SASL on raftka's HTTPS API (server_common/http_sasl.py, client/_http_sasl.py).

The server's exchanges and sessions are driven directly (with a fake clock) and by the
client's side of the exchange (SessionTokens, scramp on both ends): SCRAM-SHA-256/512
and PLAIN authenticate; a wrong password, an unknown user, a replayed or out-of-order
message, a mechanism the API does not offer and malformed bodies fail with Kafka's
error and leave no exchange or session behind; sessions expire after
``connections.max.reauth.ms`` and ``connections.max.idle.ms``; exchanges and sessions
are bounded. Then the whole path over real TLS: an aiohttp app behind the node's
middleware, asked by raftka's Transport with ``security_protocol="SASL_SSL"`` and no
certificate, including a server restart that forgets the session (the client
authenticates again and the request goes through once).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from https_helpers import https_props
from hypothesis import given
from hypothesis import strategies as st

from raftka.client._http_sasl import SaslLogin, SessionTokens
from raftka.client._transport import Transport
from raftka.client.config import ClientConfigError, ProducerConfig
from raftka.common.errors import (
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailedError,
)
from raftka.local.certs import CertificateAuthority, IssuedCertificate, new_ca
from raftka.server_common import http_sasl
from raftka.server_common.http_sasl import (
    EXCHANGE_BODY_MAX,
    EXCHANGE_MS,
    SASL_PATH,
    HttpSasl,
    HttpSaslSettings,
    bearer_token,
)
from raftka.server_common.node_http import PRINCIPAL_KEY, node_http
from raftka.server_common.process_config import ConfigError
from raftka.server_common.sasl import ScramCredential, new_scram_credential

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
USERS = {
    ("alice", m): new_scram_credential(m, "alice-secret")
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
}


def _lookup(user: str, mechanism: str) -> ScramCredential | None:
    return USERS.get((user, mechanism))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _server(clock: Clock | None = None, **settings: Any) -> HttpSasl:
    return HttpSasl(HttpSaslSettings(MECHANISMS, **settings), _lookup, clock=clock or Clock())


def _tokens(server: HttpSasl, mechanism: str, user: str, password: str) -> SessionTokens:
    async def post(_address: str, body: dict[str, Any]) -> Any:
        return server.step(body)

    return SessionTokens(SaslLogin(mechanism, user, password), post)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_authenticates_a_session(mechanism: str) -> None:
    server = _server()
    token = asyncio.run(_tokens(server, mechanism, "alice", "alice-secret").token("n:1"))
    assert server.principal(token) == "User:alice"
    assert (server.exchanges, server.sessions) == (0, 1)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user", ["alice", "mallory"])
def test_a_wrong_password_or_unknown_user_fails_the_same_way(mechanism: str, user: str) -> None:
    server = _server()
    with pytest.raises(SaslAuthenticationFailedError) as caught:
        asyncio.run(_tokens(server, mechanism, user, "guess").token("n:1"))
    assert "invalid credentials" in caught.value.message
    assert (server.exchanges, server.sessions) == (0, 0)


def _scram_first(server: HttpSasl, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    first = "n,,n=alice,r=abcdefghijklmnop"
    return server.step(
        {"mechanism": mechanism, "auth_bytes": base64.b64encode(first.encode()).decode()}
    )


def test_a_finished_or_failed_exchange_cannot_go_on() -> None:
    server = _server()
    answer = _scram_first(server)
    assert answer["complete"] is False and server.exchanges == 1
    junk = {"exchange": answer["exchange"], "auth_bytes": base64.b64encode(b"c=biws").decode()}
    with pytest.raises(SaslAuthenticationFailedError):
        server.step(junk)
    # The failed exchange is over: sending to it again (a replay) is out of order.
    with pytest.raises(IllegalSaslStateError, match="no such SASL exchange"):
        server.step(junk)
    assert (server.exchanges, server.sessions) == (0, 0)


def test_a_malformed_next_token_ends_the_exchange() -> None:
    server = _server()
    answer = _scram_first(server)
    with pytest.raises(SaslAuthenticationFailedError, match="not base64"):
        server.step({"exchange": answer["exchange"], "auth_bytes": "***"})
    assert server.exchanges == 0


def test_an_exchange_expires_and_cannot_switch_mechanism() -> None:
    clock = Clock()
    server = _server(clock)
    answer = _scram_first(server)
    with pytest.raises(IllegalSaslStateError, match="not the exchange's"):
        server.step({**answer, "mechanism": "PLAIN"})
    answer = _scram_first(server)
    clock.now += EXCHANGE_MS
    with pytest.raises(IllegalSaslStateError, match="took longer"):
        server.step(answer)
    _scram_first(server)
    assert server.exchanges == 1  # the expired one was dropped when the next came


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected a JSON object"),
        ({"mechanism": "GSSAPI", "auth_bytes": ""}, "'GSSAPI' is not enabled"),
        ({"auth_bytes": ""}, "mechanism: expected"),
        ({"mechanism": "PLAIN", "auth_bytes": "***"}, "not base64"),
        ({"mechanism": "PLAIN", "auth_bytes": 5}, "expected base64 text"),
        ({"mechanism": "PLAIN", "auth_bytes": "A" * 800_000}, "at most 524288 bytes"),
        ({"mechanism": "PLAIN", "auth_bytes": "", "exchange": 7}, "exchange: expected"),
    ],
)
def test_malformed_requests_are_refused_with_kafkas_error(body: object, message: str) -> None:
    server = _server()
    with pytest.raises(SaslAuthenticationFailedError, match=message):
        server.step(body)
    assert (server.exchanges, server.sessions) == (0, 0)


@given(
    st.one_of(
        st.none(),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(
            st.sampled_from(["mechanism", "exchange", "auth_bytes", "other"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=40), st.sampled_from(MECHANISMS)),
        ),
    )
)
def test_no_body_authenticates_or_raises_anything_but_kafkas_errors(body: object) -> None:
    server = _server()
    try:
        answer = server.step(body)
    except KafkaError:
        answer = None
    assert server.sessions == 0
    assert answer is None or answer["complete"] is False


def test_sessions_expire_after_reauth_and_idle_times() -> None:
    clock = Clock()
    server = _server(clock, reauth_ms=10_000, idle_ms=3_000)
    token = asyncio.run(_tokens(server, "PLAIN", "alice", "alice-secret").token("n:1"))
    for _ in range(3):  # used every 2.5 s: never idle for 3 s
        clock.now += 2_500
        assert server.principal(token) == "User:alice"
    clock.now += 2_500  # 10 s after it was authenticated
    with pytest.raises(SaslAuthenticationFailedError, match=r"connections\.max\.reauth\.ms"):
        server.principal(token)
    token = asyncio.run(_tokens(server, "PLAIN", "alice", "alice-secret").token("n:1"))
    clock.now += 3_000
    with pytest.raises(SaslAuthenticationFailedError, match=r"connections\.max\.idle\.ms"):
        server.principal(token)
    with pytest.raises(SaslAuthenticationFailedError, match="unknown session token"):
        server.principal(token)  # an expired session is gone
    assert server.sessions == 0


def test_exchanges_and_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_sasl, "EXCHANGES_MAX", 3)
    monkeypatch.setattr(http_sasl, "SESSIONS_MAX", 2)
    server = _server()
    firsts = [_scram_first(server) for _ in range(5)]
    assert server.exchanges == 3
    with pytest.raises(IllegalSaslStateError):
        server.step(firsts[0])  # the oldest was dropped
    tokens = [
        asyncio.run(_tokens(server, "PLAIN", "alice", "alice-secret").token("n:1"))
        for _ in range(3)
    ]
    assert server.sessions == 2
    with pytest.raises(SaslAuthenticationFailedError):
        server.principal(tokens[0])
    assert server.principal(tokens[2]) == "User:alice"


def test_bearer_tokens_are_read_from_the_authorization_header() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


# -- settings -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return new_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def node_cert(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue(ca.cafile.parent, "node-1")


_SASL = "listener.name.https.sasl.enabled.mechanisms"


def test_sasl_on_the_https_api_requests_certificates_instead_of_requiring_them(
    ca: CertificateAuthority, node_cert: IssuedCertificate
) -> None:
    http = node_http(https_props(ca, node_cert, **{_SASL: "SCRAM-SHA-512, PLAIN"}))
    assert http.sasl == HttpSaslSettings(("SCRAM-SHA-512", "PLAIN"), reauth_ms=0, idle_ms=600_000)
    assert http.server_ssl is not None and http.server_ssl.verify_mode is ssl.CERT_OPTIONAL
    assert node_http(https_props(ca, node_cert)).sasl is None


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({_SASL: "GSSAPI"}, f"{_SASL}: 'GSSAPI' is not served"),
        (
            {_SASL: "PLAIN", "listener.name.https.ssl.client.auth": "none"},
            "listener.name.https.ssl.client.auth=none",
        ),
        (
            {"listener.name.https.connections.max.reauth.ms": "1000"},
            "listener.name.https.connections.max.reauth.ms: the HTTPS API has no SASL",
        ),
        (
            {_SASL: "PLAIN", "listener.name.https.connections.max.idle.ms": "0"},
            "listener.name.https.connections.max.idle.ms must be at least 1, got 0",
        ),
        (
            {_SASL: "PLAIN", "listener.name.https.connections.max.reauth.ms": "x"},
            "listener.name.https.connections.max.reauth.ms must be an integer, got 'x'",
        ),
    ],
)
def test_wrong_sasl_settings_are_refused_by_name(
    ca: CertificateAuthority, node_cert: IssuedCertificate, change: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        node_http(https_props(ca, node_cert, **change))
    assert str(caught.value).startswith(named), caught.value


def test_sasl_settings_without_an_https_api_are_refused() -> None:
    with pytest.raises(ConfigError, match=f"{_SASL}: the HTTP API is not HTTPS"):
        node_http({"listeners": "CONTROLLER://127.0.0.1:9093", _SASL: "PLAIN"})


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism='PLAIN': security_protocol is PLAINTEXT"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
            "sasl_mechanism='GSSAPI': expected one of",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_plain_username": "alice"},
            "sasl_plain_username='alice': SASL_SSL needs",
        ),
    ],
)
def test_client_sasl_options_are_checked_by_name(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ClientConfigError) as caught:
        ProducerConfig(bootstrap_servers=("h:1",), **options)
    assert caught.value.message.startswith(named), caught.value


def test_the_client_password_stays_out_of_its_config_repr() -> None:
    config = ProducerConfig(
        bootstrap_servers=("h:1",),
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    assert "alice-secret" not in repr(config)
    assert config.sasl_login() == SaslLogin("SCRAM-SHA-256", "alice", "alice-secret")
    assert config.tls_context() is not None  # no certificate: TLS only checks the node


# -- over real TLS --------------------------------------------------------------------


async def _serve(
    ca: CertificateAuthority, node_cert: IssuedCertificate, port: int = 0
) -> tuple[web.AppRunner, int]:
    http = node_http(https_props(ca, node_cert, **{_SASL: ",".join(MECHANISMS)}))

    async def whoami(request: web.Request) -> web.Response:
        return web.json_response({"principal": request[PRINCIPAL_KEY]})

    app = web.Application(middlewares=[http.middleware(_lookup)])
    app.add_routes([web.post("/whoami", whoami)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=http.server_ssl, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1]


def _transport(ca: CertificateAuthority, *, sasl: bool = True, **login: str) -> Transport:
    options = {"sasl_plain_username": "alice", "sasl_plain_password": "alice-secret", **login}
    config = ProducerConfig(
        bootstrap_servers=("h:1",),
        security_protocol="SASL_SSL",
        ssl_cafile=str(ca.cafile),
        **options,  # type: ignore[arg-type]
    )
    return Transport(
        client_id="t",
        request_timeout_ms=10_000,
        idle_ms=60_000,
        tls=config.tls_context(),
        sasl=config.sasl_login() if sasl else None,
    )


def _ask(transport: Transport, port: int) -> Callable[[], Any]:
    async def ask() -> Any:
        return await transport.request_json(f"127.0.0.1:{port}", "POST", "/whoami")

    return ask


def test_the_client_authenticates_over_tls_and_again_after_the_node_forgets(
    ca: CertificateAuthority, node_cert: IssuedCertificate
) -> None:
    async def run() -> None:
        runner, port = await _serve(ca, node_cert)
        transport = _transport(ca, sasl_mechanism="SCRAM-SHA-512")
        try:
            assert await _ask(transport, port)() == {"principal": "User:alice"}
            # A restarted node has no sessions: the stale token is refused, the client
            # authenticates again and the request is answered.
            await runner.cleanup()
            runner, port = await _serve(ca, node_cert, port)
            assert await _ask(transport, port)() == {"principal": "User:alice"}
            wrong = _transport(ca, sasl_mechanism="SCRAM-SHA-256", sasl_plain_password="nope")
            with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
                await _ask(wrong, port)()
            await wrong.close()
            # Neither a certificate nor a session: refused, naming how to authenticate.
            anonymous = _transport(ca, sasl=False)
            with pytest.raises(SaslAuthenticationFailedError, match="no client certificate"):
                await _ask(anonymous, port)()
            await anonymous.close()
        finally:
            await transport.close()
            await runner.cleanup()

    asyncio.run(run())


def test_exchange_requests_are_bounded_before_anything_is_read(
    ca: CertificateAuthority, node_cert: IssuedCertificate
) -> None:
    """Unauthenticated callers: a body above EXCHANGE_BODY_MAX, a chunked body (no
    Content-Length), a GET and a body that is not JSON are refused 401."""

    async def chunks() -> Any:
        yield b"{}"

    async def run() -> list[tuple[int, str]]:
        runner, port = await _serve(ca, node_cert)
        url = f"https://127.0.0.1:{port}{SASL_PATH}"
        context = ssl.create_default_context(cafile=str(ca.cafile))
        out: list[tuple[int, str]] = []
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
                for method, data in (
                    ("POST", b" " * (EXCHANGE_BODY_MAX + 1)),
                    ("POST", chunks()),
                    ("GET", None),
                    ("POST", b"not json"),
                ):
                    async with s.request(method, url, data=data) as r:
                        out.append((r.status, (await r.json())["message"]))
        finally:
            await runner.cleanup()
        return out

    answers = asyncio.run(run())
    assert [status for status, _ in answers] == [401] * 4
    assert "Content-Length of at most" in answers[0][1]
    assert "Content-Length of at most" in answers[1][1]
    assert "takes POST" in answers[2][1]
    assert "expected a JSON object" in answers[3][1]
