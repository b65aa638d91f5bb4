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

Re-authentication (KIP-368) is not served: a second SaslHandshake on an authenticated
connection closes it, and SaslAuthenticate answers a session lifetime of 0 (none).
"""

from __future__ import annotations

import enum
from typing import Final

from raftka.common.errors import IllegalSaslStateError, UnsupportedSaslMechanismError
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
        self, mechanisms: tuple[str, ...], lookup: CredentialLookup, *, secret: bytes
    ) -> None:
        self.mechanisms = mechanisms
        self._lookup = lookup
        self._secret = secret
        self._stage = _Stage.HANDSHAKE
        self._session: SaslServerSession | None = None
        #: ``User:<name>`` once authenticated.
        self.principal: str | None = None

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
        """Whether a request of ``api_key`` may come now (else: close the connection)."""
        if self._stage is _Stage.HANDSHAKE:
            return api_key in (_API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
        if self._stage is _Stage.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE_KEY
        if self._stage is _Stage.DONE:
            return api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
        return False

    def frame_limit(self, socket_request_max_bytes: int) -> tuple[int, str]:
        """The largest frame accepted now, and the setting that says so."""
        if self.authenticated or socket_request_max_bytes <= UNAUTHENTICATED_FRAME_MAX:
            return socket_request_max_bytes, "socket.request.max.bytes"
        return UNAUTHENTICATED_FRAME_MAX, "sasl.server.max.receive.size"

    def handshake(self, mechanism: str, *, version: int = 1) -> None:
        """SaslHandshake: start ``mechanism``'s exchange (its tokens unframed after
        ``version`` 0), or raise Kafka's error (the connection then closes after the
        answer)."""
        if self._stage is not _Stage.HANDSHAKE:
            self._stage = _Stage.FAILED
            raise IllegalSaslStateError("SaslHandshake is only accepted once, first")
        if mechanism not in self.mechanisms:
            self._stage = _Stage.FAILED
            raise UnsupportedSaslMechanismError(
                f"{mechanism!r} is not enabled on this listener "
                f"(sasl.enabled.mechanisms: {', '.join(self.mechanisms)})"
            )
        self._session = SaslServerSession(mechanism, self._lookup, secret=self._secret)
        self._stage = _Stage.AUTHENTICATE if version >= 1 else _Stage.AUTHENTICATE_UNFRAMED

    def authenticate(self, token: bytes) -> bytes:
        """SaslAuthenticate: the server's token for the client's, or raise Kafka's
        error (the connection then closes after the answer)."""
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
            self.principal = self._session.principal
            self._stage = _Stage.DONE
        return answer
