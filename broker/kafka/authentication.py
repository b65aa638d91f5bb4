"""One Kafka connection's SASL authentication on a SASL_PLAINTEXT / SASL_SSL listener.

Theory of operation
-------------------
Kafka's exchange (KIP-43, KIP-152): the client may ask ApiVersions, then sends
SaslHandshake naming a mechanism, then SaslAuthenticate requests carrying the
mechanism's tokens until the server says it is done. Only then may it send any other
request. :class:`ConnectionAuth` is that state machine for one connection; the
listener asks :meth:`allows` before handling each frame (a request out of order closes
the connection, as Kafka's SaslServerAuthenticator does) and closes the connection
after answering once :attr:`failed` is set (a wrong mechanism, a bad token, wrong
credentials), so a client gets one clean error and must reconnect to try again.

The tokens themselves are checked by :class:`~raftka.server_common.sasl.
SaslServerSession` (SCRAM-SHA-256/512, PLAIN) against the SCRAM credentials in the
metadata image. Until the exchange completes a frame may be at most
``sasl.server.max.receive.size`` bytes (:data:`UNAUTHENTICATED_FRAME_MAX`), not
``socket.request.max.bytes``: an unauthenticated client cannot make the broker buffer
100 MB.

SaslHandshake v1 puts the tokens inside SaslAuthenticate requests (KIP-152). After a
v0 handshake the tokens come unframed instead: each a 4-byte size and the token, no
request header, answered the same way (:attr:`ConnectionAuth.unframed`); a failure then
has no error to carry, so the connection just closes, as Kafka's does. Both are served
because librdkafka enables SASL only when the broker's SaslHandshake range includes
v0, even though it then uses v1 (kcat on Debian 12 refuses a v1-only broker).

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` above 0, the last
SaslAuthenticate of an exchange (v1 or later: a v0 client cannot be told) answers that
session lifetime, and the session expires after it. An expired connection may still
re-authenticate, but any other request closes it (the listener checks
:meth:`ConnectionAuth.expired`), as Kafka's broker does. A client re-authenticates on
the same connection, at any time, with a SaslHandshake (v1: tokens inside requests) of
the same mechanism and a new exchange, as the same principal: a different mechanism
closes the connection with ILLEGAL_SASL_STATE, a different principal with
SASL_AUTHENTICATION_FAILED. Until the new exchange completes, only SaslAuthenticate
may come, and requests keep the principal of the session being renewed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

from raftka.common.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from raftka.common.time import monotonic_ms
from raftka.server_common.sasl import TOKEN_BYTES_MAX, CredentialLookup, SaslServerSession

__all__ = [
    "SASL_AUTHENTICATE_KEY",
    "SASL_HANDSHAKE_KEY",
    "UNAUTHENTICATED_FRAME_MAX",
    "ConnectionAuth",
]

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
_API_VERSIONS_KEY: Final = 18
#: Kafka's sasl.server.max.receive.size default: the largest frame before authentication.
UNAUTHENTICATED_FRAME_MAX: Final = TOKEN_BYTES_MAX


class _Stage(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    #: after SaslHandshake v0: the tokens come unframed
    AUTHENTICATE_UNFRAMED = "authenticate-unframed"
    DONE = "done"
    FAILED = "failed"


class ConnectionAuth:
    """The SASL state of one connection (see the module doc)."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        lookup: CredentialLookup,
        *,
        secret: bytes,
        reauth_ms: int = 0,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.mechanisms = mechanisms
        self._lookup = lookup
        self._secret = secret
        self._reauth_ms = reauth_ms
        self._clock_ms = clock_ms
        self._stage = _Stage.HANDSHAKE
        self._session: SaslServerSession | None = None
        self._mechanism: str | None = None
        #: When the session expires (None: never), on ``clock_ms``.
        self._expires_ms: int | None = None
        #: ``User:<name>`` once authenticated (kept while re-authenticating).
        self.principal: str | None = None
        #: The session lifetime the last completed exchange answered (0: none).
        self.session_lifetime_ms = 0
        #: Completed re-authentications (KIP-368) of this connection.
        self.reauthentications = 0

    @property
    def authenticated(self) -> bool:
        return self._stage is _Stage.DONE

    @property
    def failed(self) -> bool:
        return self._stage is _Stage.FAILED

    @property
    def unframed(self) -> bool:
        """Whether the next frame is a bare SASL token (after SaslHandshake v0)."""
        return self._stage is _Stage.AUTHENTICATE_UNFRAMED

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may come now (else: close the connection).
        After authentication a SaslHandshake starts a re-authentication."""
        if self._stage is _Stage.HANDSHAKE:
            return api_key in (_API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
        if self._stage is _Stage.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE_KEY
        if self._stage is _Stage.DONE:
            return api_key != SASL_AUTHENTICATE_KEY
        return False

    def expired(self) -> bool:
        """Whether the session outlived its lifetime (KIP-368): the connection may only
        re-authenticate now."""
        return (
            self._stage is _Stage.DONE
            and self._expires_ms is not None
            and self._clock_ms() >= self._expires_ms
        )

    def frame_limit(self, socket_request_max_bytes: int) -> tuple[int, str]:
        """The largest frame accepted now, and the setting that says so."""
        if self.authenticated or socket_request_max_bytes <= UNAUTHENTICATED_FRAME_MAX:
            return socket_request_max_bytes, "socket.request.max.bytes"
        return UNAUTHENTICATED_FRAME_MAX, "sasl.server.max.receive.size"

    def handshake(self, mechanism: str, *, version: int = 1) -> None:
        """SaslHandshake: start ``mechanism``'s exchange (its tokens unframed after
        ``version`` 0), or raise Kafka's error (the connection then closes after the
        answer)."""
        if self._stage is _Stage.DONE:
            self._reauthentication(mechanism, version)
        elif self._stage is not _Stage.HANDSHAKE:
            self._stage = _Stage.FAILED
            raise IllegalSaslStateError("SaslHandshake out of turn")
        if mechanism not in self.mechanisms:
            self._stage = _Stage.FAILED
            raise UnsupportedSaslMechanismError(
                f"{mechanism!r} is not enabled on this listener "
                f"(sasl.enabled.mechanisms: {', '.join(self.mechanisms)})"
            )
        self._session = SaslServerSession(mechanism, self._lookup, secret=self._secret)
        self._mechanism = mechanism
        self._stage = _Stage.AUTHENTICATE if version >= 1 else _Stage.AUTHENTICATE_UNFRAMED

    def _reauthentication(self, mechanism: str, version: int) -> None:
        """A SaslHandshake on an authenticated connection (KIP-368): the same mechanism,
        tokens inside SaslAuthenticate requests."""
        if version < 1:
            self._stage = _Stage.FAILED
            raise IllegalSaslStateError("re-authentication needs SaslHandshake v1 or later")
        if mechanism != self._mechanism:
            self._stage = _Stage.FAILED
            raise IllegalSaslStateError(
                f"re-authentication must use the session's mechanism {self._mechanism}, "
                f"not {mechanism}"
            )

    def authenticate(self, token: bytes, *, version: int = 0) -> bytes:
        """SaslAuthenticate (of ``version``): the server's token for the client's, or
        raise Kafka's error (the connection then closes after the answer)."""
        stages = (_Stage.AUTHENTICATE, _Stage.AUTHENTICATE_UNFRAMED)
        if self._stage not in stages or self._session is None:
            self._stage = _Stage.FAILED
            raise IllegalSaslStateError("SaslAuthenticate before a SaslHandshake")
        try:
            answer = self._session.step(token)
        except Exception:
            self._stage = _Stage.FAILED
            raise
        if self._session.complete:
            principal = self._session.principal
            if self.principal is not None:
                if principal != self.principal:
                    self._stage = _Stage.FAILED
                    raise SaslAuthenticationFailedError(
                        f"re-authentication may not change the principal ({self.principal})"
                    )
                self.reauthentications += 1
            self.principal = principal
            self._stage = _Stage.DONE
            # SaslAuthenticate v0 has no field to tell the client, which then could not
            # know to re-authenticate: its session never expires (Kafka's rule).
            self.session_lifetime_ms = self._reauth_ms if version >= 1 else 0
            self._expires_ms = (
                self._clock_ms() + self.session_lifetime_ms if self.session_lifetime_ms else None
            )
        return answer
