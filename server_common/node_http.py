"""raftka's HTTP API over TLS, with client certificates, for controllers and brokers.

Theory of operation
-------------------
Every node serves raftka's HTTP API on the first entry of ``listeners``. When that
entry is named ``HTTPS`` (``listeners=HTTPS://host:port``, on a controller, a broker
or a combined node) the API is served over TLS 1.2+ and every connection must present
a client certificate signed by the listener's CA: the certificate is how a request is
authenticated. With ``listener.name.https.sasl.enabled.mechanisms`` a request may
instead carry the session token of a SCRAM or PLAIN login
(:mod:`raftka.server_common.http_sasl`, whose route the middleware serves itself);
TLS then requests a certificate instead of requiring one. Its settings are the TLS
settings of :mod:`raftka.server_common.tls` under Kafka's per-listener prefix
``listener.name.https.`` (``listener.name.https.ssl.certfile``, ``...ssl.keyfile``,
``...ssl.cafile``; ``...ssl.client.auth`` may only be ``required``, or ``requested``
with SASL), and
``listener.name.https.ssl.principal.mapping.rules`` names each request's principal
after its certificate's subject (Kafka's rules, :mod:`raftka.server_common.ssl_principal`;
a subject no rule maps is refused with SASL_AUTHENTICATION_FAILED, HTTP 401).

The node principals are Kafka's ``super.users``: the routes only nodes call (Raft
messages, broker registration and heartbeats, AlterPartition, producer-id blocks, the
brokers' metadata fetch, WriteTxnMarkers, and a fetch that names a replica id) answer
any other principal CLUSTER_AUTHORIZATION_FAILED (HTTP 403), as Kafka checks
CLUSTER_ACTION on them. The other routes serve any authenticated principal, unless
the broker runs the authorizer (``authorizer.class.name``): then only ``super.users``
may use the HTTP API, but for the routes raftka's client needs to produce, consume,
join groups and run transactions, whose handlers check Kafka's ACLs
(:mod:`raftka.broker.http_acls`).

A node whose API is HTTPS talks HTTPS to every other node, presenting its own
certificate (``ssl.certfile``) and checking the peer's against ``ssl.cafile`` and, unless
``ssl.endpoint.identification.algorithm`` is empty, its host name: the whole cluster
is HTTPS or none of it is. :class:`NodeHttp` carries the scheme and the contexts to
every place that builds a peer's URL or an aiohttp session.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from raftka.common.acl import parse_principal
from raftka.common.client_tls import connector_tls
from raftka.common.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailedError,
)
from raftka.server_common.http_errors import Handler, json_response
from raftka.server_common.http_sasl import (
    EXCHANGE_BODY_MAX,
    SASL_PATH,
    HttpSasl,
    HttpSaslSettings,
    bearer_token,
)
from raftka.server_common.listener_map import listener_names
from raftka.server_common.process_config import ConfigError, int_property
from raftka.server_common.sasl import SASL_MECHANISMS, CredentialLookup
from raftka.server_common.ssl_principal import (
    NoMatchingRuleError,
    SslPrincipalMapper,
    subject_name,
)
from raftka.server_common.tls import (
    TLS_KEYS,
    ClientAuth,
    client_context,
    on_handshake_failure,
    server_context,
    tls_settings,
)

__all__ = [
    "HTTPS_KEYS",
    "HTTPS_LISTENER",
    "PLAIN_HTTP",
    "PRINCIPAL_KEY",
    "HttpsRefusals",
    "NodeHttp",
    "api_listener_name",
    "node_http",
    "parse_super_users",
    "require_node",
]

#: The name of the first ``listeners`` entry that turns TLS on for the HTTP API.
HTTPS_LISTENER: Final = "HTTPS"
_PREFIX: Final = "listener.name.https."
_RULES_KEY: Final = _PREFIX + "ssl.principal.mapping.rules"
#: SASL on the HTTPS API (server_common/http_sasl.py), with Kafka's per-listener names.
_SASL_KEY: Final = _PREFIX + "sasl.enabled.mechanisms"
_REAUTH_KEY: Final = _PREFIX + "connections.max.reauth.ms"
_IDLE_KEY: Final = _PREFIX + "connections.max.idle.ms"
#: The keys only an HTTPS HTTP API reads (refused by name on a plain one).
HTTPS_KEYS: Final = frozenset(
    {_PREFIX + k for k in TLS_KEYS} | {_RULES_KEY, _SASL_KEY, _REAUTH_KEY, _IDLE_KEY}
)

#: Where the middleware leaves a request's principal (``User:...``).
PRINCIPAL_KEY: Final = web.RequestKey("raftka.principal", str)
_NODE_KEY: Final = web.RequestKey("raftka.is_node", bool)


@dataclass(slots=True)
class HttpsRefusals:
    """What an HTTPS API refused, for ``/metrics``. Every copy of a NodeHttp shares
    one."""

    #: A TLS handshake the server context refused (no certificate, another CA, not
    #: TLS: :func:`~raftka.server_common.tls.on_handshake_failure`), or a request
    #: refused 401 (a certificate no ``ssl.principal.mapping.rules`` rule maps).
    failed_authentication: int = 0
    #: 403: a principal that is not a node on a node route or a nodes-only API.
    cluster_authorization_failed: int = 0

    def handshake_failed(self, error: ssl.SSLError) -> None:
        self.failed_authentication += 1


_REFUSALS_KEY: Final = web.RequestKey("raftka.https_refusals", HttpsRefusals)

#: Paths only nodes call (a fetch naming a replica id is checked by its handler).
_NODE_PATHS: Final = frozenset(
    {
        "/v1/brokers/register",
        "/v1/brokers/heartbeat",
        "/v1/alter-partition",
        "/v1/producer-ids",
        "/v1/write-txn-markers",
    }
)
# Paths any authenticated principal may read even where the API is for nodes only:
# a liveness probe and the Prometheus scrape.
_OPEN_PATHS: Final = frozenset({"/health", "/metrics"})


@dataclass(frozen=True, slots=True)
class NodeHttp:
    """How a node serves its HTTP API and reaches its peers': the scheme, the TLS
    contexts, the principal mapping and the node principals (all empty for HTTP)."""

    scheme: str = "http"
    server_ssl: ssl.SSLContext | None = None
    client_ssl: ssl.SSLContext | None = None
    mapper: SslPrincipalMapper | None = None
    node_principals: frozenset[str] = frozenset()
    #: Only node principals use this HTTP API, but for the routes whose handlers
    #: check ACLs (``middleware``'s ``acl_paths``): a controller's (it checks no ACLs),
    #: and a broker's when it runs the authorizer.
    nodes_only: bool = False
    #: SASL beside client certificates (listener.name.https.sasl.enabled.mechanisms).
    sasl: HttpSaslSettings | None = None
    refusals: HttpsRefusals = dataclasses.field(default_factory=HttpsRefusals, compare=False)

    @property
    def secure(self) -> bool:
        return self.server_ssl is not None

    def url(self, address: str, path: str) -> str:
        """A peer's URL: ``address`` is ``host:port``, ``path`` starts with ``/``."""
        return f"{self.scheme}://{address}{path}"

    def connector(self, **kwargs: Any) -> aiohttp.TCPConnector:
        """A connector for sessions to peers (presenting this node's certificate)."""
        if self.client_ssl is not None:
            kwargs.update(connector_tls(self.client_ssl))
        return aiohttp.TCPConnector(**kwargs)

    def serving_nodes_only(self, nodes_only: bool) -> NodeHttp:
        """This, serving only node principals when ``nodes_only``."""
        return dataclasses.replace(self, nodes_only=nodes_only)

    def middleware(
        self, lookup: CredentialLookup | None = None, acl_paths: frozenset[str] = frozenset()
    ) -> Middleware:
        """Authenticates each request by its session token (SASL) or its certificate
        and keeps node routes for nodes (see the module doc). ``lookup`` finds the SCRAM
        credentials of the node's metadata image; an API with SASL needs it.
        ``acl_paths``: the routes whose handlers check Kafka's ACLs themselves (a
        broker's, :mod:`raftka.broker.http_acls`), open to any principal even where
        the API is for nodes only."""
        mapper = self.mapper
        assert mapper is not None, "only an HTTPS API authenticates"
        refusals = self.refusals
        sasl = None
        if self.sasl is not None:
            assert lookup is not None, "an API with SASL needs the credentials"
            sasl = HttpSasl(self.sasl, lookup)

        async def exchange(request: web.Request, sasl: HttpSasl) -> web.Response:
            try:
                if request.method != "POST":
                    raise SaslAuthenticationFailedError(f"{SASL_PATH} takes POST")
                size = request.content_length
                if size is None or size > EXCHANGE_BODY_MAX:
                    # Unauthenticated: bounded as Kafka bounds a frame before SASL
                    # completes (sasl.server.max.receive.size), not by the API's limit.
                    raise SaslAuthenticationFailedError(
                        f"an exchange request needs a Content-Length of at most "
                        f"{EXCHANGE_BODY_MAX} bytes"
                    )
                try:
                    body = orjson.loads(await request.read())
                except orjson.JSONDecodeError:
                    raise SaslAuthenticationFailedError("expected a JSON object") from None
                return json_response(sasl.step(body))
            except KafkaError as e:
                refusals.failed_authentication += 1
                return _refuse(e, 401)

        def principal_of(request: web.Request) -> str | KafkaError:
            token = bearer_token(request.headers.get(hdrs.AUTHORIZATION))
            if token is not None:
                if sasl is None:
                    return SaslAuthenticationFailedError(
                        f"this HTTPS API has no SASL ({_SASL_KEY} is not set): authenticate "
                        "with a client certificate"
                    )
                try:
                    return sasl.principal(token)
                except KafkaError as e:
                    return e
            transport = request.transport
            ssl_object = None if transport is None else transport.get_extra_info("ssl_object")
            der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
            if der is None:
                # Without SASL the context requires a certificate, so only a connection
                # TLS did not cover gets here; refuse it all the same.
                if sasl is None:
                    return SaslAuthenticationFailedError("no client certificate")
                return SaslAuthenticationFailedError(
                    "no client certificate and no session: authenticate with POST "
                    f"{SASL_PATH} ({', '.join(sasl.settings.mechanisms)}) or a certificate"
                )
            try:
                return mapper.principal(subject_name(der))
            except NoMatchingRuleError as e:
                return SaslAuthenticationFailedError(str(e))

        @web.middleware
        async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
            if sasl is not None and request.path == SASL_PATH:
                return await exchange(request, sasl)
            principal = principal_of(request)
            if isinstance(principal, KafkaError):
                refusals.failed_authentication += 1
                return _refuse(principal, 401)
            is_node = principal in self.node_principals
            request[PRINCIPAL_KEY] = principal
            request[_NODE_KEY] = is_node
            request[_REFUSALS_KEY] = refusals
            if not is_node and request.path not in _OPEN_PATHS:
                refusal = None
                if request.path in _NODE_PATHS:
                    refusal = (
                        f"{principal} is not a node (super.users): {request.path} is for nodes only"
                    )
                elif self.nodes_only and request.path not in acl_paths:
                    refusal = (
                        f"{principal} is not in super.users: {request.path} on this node's "
                        "HTTP API checks no ACLs, so it serves super.users only (the Kafka "
                        "listener serves every API under the ACLs)"
                    )
                if refusal is not None:
                    refusals.cluster_authorization_failed += 1
                    return _refuse(ClusterAuthorizationFailedError(refusal), 403)
            return await handler(request)

        return authenticate


#: A plain-HTTP node (the default).
PLAIN_HTTP: Final = NodeHttp()


def _refuse(error: KafkaError, status: int) -> web.Response:
    return json_response(error.to_wire(), status)


def require_node(request: web.Request, what: str) -> None:
    """Raise CLUSTER_AUTHORIZATION_FAILED unless the request came from a node principal
    over HTTPS (a plain-HTTP API authenticates nobody and so refuses nobody)."""
    if request.get(PRINCIPAL_KEY) is not None and not request.get(_NODE_KEY, False):
        request[_REFUSALS_KEY].cluster_authorization_failed += 1
        raise ClusterAuthorizationFailedError(
            f"{request[PRINCIPAL_KEY]} is not a node (super.users): {what} is for nodes only"
        )


def api_listener_name(props: Mapping[str, str]) -> str:
    """The upper-case name of the first ``listeners`` entry ("" when unnamed or unset)."""
    names = listener_names(props.get("listeners", ""))
    return names[0] if names else ""


def parse_super_users(props: Mapping[str, str]) -> frozenset[str]:
    """``super.users`` (``;``-separated principals); ConfigError for a malformed one."""
    users = [p.strip() for p in props.get("super.users", "").split(";") if p.strip()]
    for principal in users:
        try:
            parse_principal(principal)
        except KafkaError:
            raise ConfigError(
                f"super.users: {principal!r} is not a principal (<type>:<name>, e.g. User:admin)"
            ) from None
    return frozenset(users)


def node_http(props: Mapping[str, str]) -> NodeHttp:
    """The node's :class:`NodeHttp` from its flattened config (loading the certificate
    files now, so that a listener that cannot load them refuses to start); ConfigError
    naming the key when a setting is wrong or given without an HTTPS API."""
    if api_listener_name(props) != HTTPS_LISTENER:
        given = sorted(k for k in props if k in HTTPS_KEYS)
        if given:
            raise ConfigError(
                f"{given[0]}: the HTTP API is not HTTPS (name the first listeners entry "
                "HTTPS://host:port to serve it over TLS)"
            )
        return PLAIN_HTTP
    settings = tls_settings(props, "https")
    # Only the prefixed key counts: a broker's plain ssl.client.auth is its Kafka SSL
    # listener's, which may ask for less.
    auth_key = _PREFIX + "ssl.client.auth"
    sasl = _sasl_settings(props)
    if sasl is None:
        if auth_key in props and settings.client_auth is not ClientAuth.REQUIRED:
            raise ConfigError(
                f"{auth_key}={settings.client_auth.value}: without {_SASL_KEY} the HTTPS API "
                "authenticates every client by its certificate, so it must be required"
            )
        settings = dataclasses.replace(settings, client_auth=ClientAuth.REQUIRED)
    elif auth_key not in props:
        # Clients may authenticate by SASL instead; the nodes still present theirs.
        settings = dataclasses.replace(settings, client_auth=ClientAuth.REQUESTED)
    elif settings.client_auth is ClientAuth.NONE:
        raise ConfigError(
            f"{auth_key}=none: the nodes authenticate to each other by certificate, so "
            "the HTTPS API must at least request one (requested)"
        )
    if settings.certfile is None or settings.cafile is None:
        raise ConfigError(
            f"listeners: an HTTPS API needs {_PREFIX}ssl.certfile, {_PREFIX}ssl.keyfile "
            f"and {_PREFIX}ssl.cafile"
        )
    nodes = parse_super_users(props)
    if not nodes:
        raise ConfigError(
            "super.users: an HTTPS API needs the nodes' principals (e.g. User:CN=broker-1), "
            "or no node could reach another"
        )
    refusals = HttpsRefusals()
    server_ssl = server_context(settings)
    on_handshake_failure(server_ssl, refusals.handshake_failed)
    return NodeHttp(
        scheme="https",
        refusals=refusals,
        server_ssl=server_ssl,
        client_ssl=client_context(settings),
        mapper=SslPrincipalMapper.from_rules(props.get(_RULES_KEY, "DEFAULT"), key=_RULES_KEY),
        node_principals=nodes,
        sasl=sasl,
    )


def _sasl_settings(props: Mapping[str, str]) -> HttpSaslSettings | None:
    """SASL on the HTTPS API, or None when its mechanisms are not set (certificates
    only); ConfigError naming the key for a wrong value."""
    given = [m.strip() for m in props.get(_SASL_KEY, "").split(",") if m.strip()]
    for mechanism in given:
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"{_SASL_KEY}: {mechanism!r} is not served (raftka serves "
                f"{', '.join(SASL_MECHANISMS)})"
            )
    for key in (_REAUTH_KEY, _IDLE_KEY):
        if key in props and not given:
            raise ConfigError(f"{key}: the HTTPS API has no SASL sessions ({_SASL_KEY} is unset)")
    if not given:
        return None
    reauth = int_property(props, _REAUTH_KEY, 0, 0)
    idle = int_property(props, _IDLE_KEY, 600_000, 1)
    return HttpSaslSettings(tuple(dict.fromkeys(given)), reauth_ms=reauth, idle_ms=idle)
