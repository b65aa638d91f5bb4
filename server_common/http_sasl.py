"""SASL on raftka's HTTP API: Kafka's SCRAM exchange in requests, then a session token.

Theory of operation
-------------------
On the Kafka listener a SASL exchange authenticates a connection. HTTP has no
connection to authenticate (a client's requests may arrive over several, and a
connection may close between any two), so raftka's HTTPS API authenticates a
*session* instead: the client runs the exchange with ``POST /v1/sasl-authenticate``,
one request per client token, and the last answer carries an opaque session token
the client then sends as ``Authorization: Bearer <token>`` on every request to that
node. The tokens are checked by the same :class:`~raftka.server_common.sasl.
SaslServerSession` as the Kafka listener's (SCRAM-SHA-256/512, PLAIN), against the same
SCRAM credentials in the metadata image, so a user added with ``raftka users add``
authenticates on both.

The request and answer carry Kafka's SaslAuthenticate field names as JSON:
``{"mechanism", "exchange", "auth_bytes"}`` (``auth_bytes`` in base64, ``exchange``
absent on the first request) and ``{"exchange", "auth_bytes", "complete",
"session_token", "session_lifetime_ms"}``. A failed step ends the exchange with
SASL_AUTHENTICATION_FAILED (HTTP 401), and the client starts over, as a Kafka client
reconnects.

Lifetimes, with Kafka's names under the HTTPS listener's prefix:

- ``connections.max.reauth.ms`` (default 0: none): a session expires that long after
  it was authenticated (KIP-368's session lifetime); the answer says so in
  ``session_lifetime_ms``, and a request with an expired token is answered 401 with
  SASL_AUTHENTICATION_FAILED naming the expiry, so the client re-authenticates.
- ``connections.max.idle.ms`` (default 600000): a session unused that long expires, as
  an idle Kafka connection is closed.

Bounds, so that unauthenticated clients cannot make a node hold unbounded state:
an exchange must finish within :data:`EXCHANGE_MS`; at most :data:`EXCHANGES_MAX`
exchanges and :data:`SESSIONS_MAX` sessions are held, the oldest dropped first (a
dropped session is re-authenticated like an expired one). Sessions are a node's own:
a client authenticates to each node it talks to, as a Kafka client does per
connection, and a node's restart ends its sessions.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from raftka.common.errors import IllegalSaslStateError, SaslAuthenticationFailedError
from raftka.common.time import monotonic_ms
from raftka.server_common.sasl import TOKEN_BYTES_MAX, CredentialLookup, SaslServerSession

__all__ = [
    "EXCHANGES_MAX",
    "EXCHANGE_BODY_MAX",
    "EXCHANGE_MS",
    "SASL_PATH",
    "SESSIONS_MAX",
    "HttpSasl",
    "HttpSaslSettings",
    "bearer_token",
]

#: The route of the exchange (served by the authenticating middleware itself).
SASL_PATH: Final = "/v1/sasl-authenticate"
#: How long one exchange may take from its first request to its last.
EXCHANGE_MS: Final = 30_000
#: Exchanges in progress a node holds at most (the oldest is dropped first).
EXCHANGES_MAX: Final = 1024
#: Authenticated sessions a node holds at most (the least recently used dropped first).
SESSIONS_MAX: Final = 10_000
#: The largest exchange request body: a largest token in base64, and the JSON around it.
EXCHANGE_BODY_MAX: Final = (TOKEN_BYTES_MAX // 3 + 1) * 4 + 1024
_BEARER: Final = "Bearer "


@dataclass(frozen=True, slots=True)
class HttpSaslSettings:
    """What an HTTPS API's SASL serves (see the module doc for each setting)."""

    mechanisms: tuple[str, ...]
    #: connections.max.reauth.ms: 0 means sessions never expire by age.
    reauth_ms: int = 0
    #: connections.max.idle.ms.
    idle_ms: int = 600_000


@dataclass(slots=True)
class _Exchange:
    session: SaslServerSession
    deadline_ms: int


@dataclass(slots=True)
class _Session:
    principal: str
    #: None: no age limit (connections.max.reauth.ms=0).
    expires_ms: int | None
    last_used_ms: int


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None without one)."""
    if authorization is None or not authorization.startswith(_BEARER):
        return None
    return authorization[len(_BEARER) :].strip() or None


class HttpSasl:
    """One node's SASL exchanges and sessions on its HTTP API. Not thread-safe: used
    from the node's event loop."""

    def __init__(
        self,
        settings: HttpSaslSettings,
        lookup: CredentialLookup,
        *,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.settings = settings
        self._lookup = lookup
        self._clock = clock
        # SCRAM's stand-in credential for unknown users derives from this (sasl.py).
        self._secret = os.urandom(32)
        self._exchanges: OrderedDict[str, _Exchange] = OrderedDict()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    @property
    def exchanges(self) -> int:
        return len(self._exchanges)

    def step(self, body: object) -> dict[str, Any]:
        """The answer to one exchange request (see the module doc for its fields);
        raises Kafka's error (the exchange is then over) for anything wrong."""
        now = self._clock()
        self._drop_expired_exchanges(now)
        if not isinstance(body, dict):
            raise SaslAuthenticationFailedError("expected a JSON object")
        mechanism = body.get("mechanism")
        exchange_id = body.get("exchange")
        if exchange_id is None:
            if not isinstance(mechanism, str):
                raise SaslAuthenticationFailedError("mechanism: expected a mechanism name")
            if mechanism not in self.settings.mechanisms:
                raise SaslAuthenticationFailedError(
                    f"mechanism {mechanism!r} is not enabled on this API; it offers "
                    f"{', '.join(self.settings.mechanisms)}"
                )
            session = SaslServerSession(mechanism, self._lookup, secret=self._secret)
            exchange_id = secrets.token_urlsafe(16)
            exchange = _Exchange(session, now + EXCHANGE_MS)
        else:
            if not isinstance(exchange_id, str):
                raise SaslAuthenticationFailedError("exchange: expected the id an answer gave")
            found = self._exchanges.pop(exchange_id, None)
            if found is None or found.deadline_ms <= now:
                raise IllegalSaslStateError(
                    "no such SASL exchange in progress (it finished, failed or took longer "
                    f"than {EXCHANGE_MS} ms): start over"
                )
            if mechanism is not None and mechanism != found.session.mechanism:
                raise IllegalSaslStateError(
                    f"mechanism {mechanism!r} is not the exchange's "
                    f"({found.session.mechanism}): start over"
                )
            exchange = found
        # A failing step raises and the exchange is not put back: it is over (so is one
        # whose next token is malformed).
        answer = exchange.session.step(_auth_bytes(body.get("auth_bytes")))
        reply: dict[str, Any] = {
            "exchange": exchange_id,
            "auth_bytes": base64.b64encode(answer).decode("ascii"),
            "complete": exchange.session.complete,
        }
        if not exchange.session.complete:
            self._exchanges[exchange_id] = exchange
            while len(self._exchanges) > EXCHANGES_MAX:
                self._exchanges.popitem(last=False)
            return reply
        reauth_ms = self.settings.reauth_ms
        session_token = secrets.token_urlsafe(32)
        self._sessions[session_token] = _Session(
            exchange.session.principal, now + reauth_ms if reauth_ms > 0 else None, now
        )
        while len(self._sessions) > SESSIONS_MAX:
            self._sessions.popitem(last=False)
        reply["session_token"] = session_token
        reply["session_lifetime_ms"] = reauth_ms
        return reply

    def principal(self, token: str) -> str:
        """The principal a session token authenticated; SASL_AUTHENTICATION_FAILED when
        the token is unknown or its session expired (the client re-authenticates)."""
        now = self._clock()
        session = self._sessions.get(token)
        if session is None:
            raise SaslAuthenticationFailedError(
                f"unknown session token: authenticate with POST {SASL_PATH}"
            )
        why = None
        if session.expires_ms is not None and now >= session.expires_ms:
            why = f"the session expired (connections.max.reauth.ms={self.settings.reauth_ms})"
        elif now - session.last_used_ms >= self.settings.idle_ms:
            why = f"the session was idle (connections.max.idle.ms={self.settings.idle_ms})"
        if why is not None:
            del self._sessions[token]
            raise SaslAuthenticationFailedError(f"{why}: authenticate again with POST {SASL_PATH}")
        session.last_used_ms = now
        self._sessions.move_to_end(token)
        return session.principal

    def _drop_expired_exchanges(self, now: int) -> None:
        # Oldest first: each exchange gets the same time, so the expired ones lead.
        while self._exchanges:
            oldest = next(iter(self._exchanges.values()))
            if oldest.deadline_ms > now:
                return
            self._exchanges.popitem(last=False)


def _auth_bytes(value: object) -> bytes:
    if not isinstance(value, str):
        raise SaslAuthenticationFailedError("auth_bytes: expected base64 text")
    if len(value) > (TOKEN_BYTES_MAX // 3 + 1) * 4:  # base64 of TOKEN_BYTES_MAX
        raise SaslAuthenticationFailedError(
            f"auth_bytes: a token is at most {TOKEN_BYTES_MAX} bytes"
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SaslAuthenticationFailedError("auth_bytes: not base64") from None
