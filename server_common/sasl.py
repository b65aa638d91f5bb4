"""SASL on the server side: SCRAM-SHA-256/512 and PLAIN, over stored SCRAM credentials.

Theory of operation
-------------------
A SASL exchange is a few opaque tokens each way (Kafka carries them in
SaslAuthenticate requests; raftka's HTTP API will carry the same tokens). A *session*
here is one exchange on one connection: :meth:`SaslServerSession.step` takes the
client's next token and returns the server's answer, until ``complete`` is true and
``principal`` names who authenticated (``User:<name>``). Any failure raises Kafka's
error, and the session is then finished: a connection that failed once must start
over (Kafka closes it).

The credential store holds only what SCRAM needs (RFC 5802): per user and mechanism a
salt, an iteration count, ``StoredKey`` and ``ServerKey``, never the password. These are
Kafka's ``UserScramCredentialRecord`` fields, so the store is the metadata log's.

- **SCRAM-SHA-256 / SCRAM-SHA-512** (RFC 5802, 7677) run on the ``scramp`` package,
  which implements the message syntax, nonces and proofs; this module adds Kafka's
  rules around it: iteration counts in 4096..16384 as Kafka allows, no channel binding
  (Kafka has none), bounded tokens, and strict order.
- **An unknown user fails like a wrong password.** Kafka answers an unknown user at the
  first message; here the server goes on with a made-up credential (salt derived from
  the user name and a per-server secret, so repeated tries see the same salt) and
  fails at the proof, so neither the answer nor the step it comes at tells a prober
  which users exist.
- **PLAIN** (RFC 4616, for tests and for clients that cannot do SCRAM, only over TLS
  in a real deploy) is checked against the same SCRAM credential: the password is
  salted and hashed with the stored salt and iteration count and its StoredKey
  compared in constant time. An ``authzid`` other than empty or the user itself is
  refused, as Kafka does.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import scramp

from raftka.common.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from raftka.common.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    SASL_MECHANISMS,
    SCRAM_MECHANISMS,
    check_iterations,
    check_mechanism,
    check_salt,
    salted_password,
    scram_keys,
)

__all__ = [
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "SASL_MECHANISMS",
    "SCRAM_MECHANISMS",
    "CredentialLookup",
    "SaslServerSession",
    "ScramCredential",
    "credential_from_salted_password",
    "new_scram_credential",
]

#: Random salt bytes of a new credential (scramp's default length).
SALT_BYTES: Final = 16
#: The largest client token a session reads (Kafka's sasl.server.max.receive.size).
TOKEN_BYTES_MAX: Final = 524_288
_FAILED: Final = "Authentication failed: invalid credentials"


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of a password for one mechanism (RFC 5802)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        size = hashlib.new(check_mechanism(self.mechanism)).digest_size
        check_iterations(self.iterations)
        check_salt(self.salt)
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise UnacceptableCredentialError(
                f"{self.mechanism} keys are {size} bytes, got {len(self.stored_key)} "
                f"and {len(self.server_key)}"
            )


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user name, mechanism) -> that user's credential for it, None when there is none."""


def new_scram_credential(
    mechanism: str, password: str, *, iterations: int = ITERATIONS_MIN, salt: bytes | None = None
) -> ScramCredential:
    """A credential for ``password`` (a random salt unless one is given)."""
    salt_ = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password, salt_, iterations)
    return credential_from_salted_password(mechanism, salt_, salted, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a salted password, as Kafka's controller derives it from
    an AlterUserScramCredentials upsertion; UNACCEPTABLE_CREDENTIAL when the salted
    password is not the mechanism's hash length."""
    size = hashlib.new(check_mechanism(mechanism)).digest_size
    if len(salted) != size:
        raise UnacceptableCredentialError(
            f"a {mechanism} salted password is {size} bytes, got {len(salted)}"
        )
    stored_key, server_key = scram_keys(mechanism, salted)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


class SaslServerSession:
    """One SASL exchange on one connection, for one mechanism."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, *, secret: bytes) -> None:
        if mechanism not in SASL_MECHANISMS:
            raise UnsupportedSaslMechanismError(
                f"{mechanism!r} is not enabled; this server offers {', '.join(SASL_MECHANISMS)}"
            )
        self.mechanism = mechanism
        self._lookup = lookup
        self._secret = secret
        self._steps = 0
        self._failed = False
        self._user: str | None = None
        self._known = False
        self.complete = False
        self._scram: scramp.core.ScramServer | None = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = scramp.ScramMechanism(mechanism).make_server(self._credential_for)

    @property
    def principal(self) -> str:
        if not self.complete or self._user is None:
            raise IllegalSaslStateError("the SASL exchange has not completed")
        return f"User:{self._user}"

    def step(self, token: bytes) -> bytes:
        """The server's answer to the client's next token; raises Kafka's error (and the
        session is over) when the token is out of order, malformed or wrong."""
        if self._failed or self.complete:
            raise IllegalSaslStateError("the SASL exchange is already over on this connection")
        if len(token) > TOKEN_BYTES_MAX:
            self._failed = True
            raise SaslAuthenticationFailedError(
                f"SASL token of {len(token)} bytes is above {TOKEN_BYTES_MAX}"
            )
        self._steps += 1
        try:
            if self._scram is None:
                return self._plain(token)
            return self._scram_step(self._scram, token)
        except SaslAuthenticationFailedError:
            self._failed = True
            raise

    # -- SCRAM ------------------------------------------------------------------------

    def _scram_step(self, server: scramp.core.ScramServer, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
            if self._steps == 1:
                if text.startswith(("p=", "y,")):
                    # Channel binding: Kafka has none (no -PLUS mechanisms).
                    raise SaslAuthenticationFailedError("SCRAM channel binding is not supported")
                server.set_client_first(text)
                first: str = server.get_server_first()
                return first.encode()
            _accept_longer_nonce(server, text)
            server.set_client_final(text)
        except scramp.ScramException as exc:
            raise SaslAuthenticationFailedError(
                _FAILED if self._steps > 1 else f"malformed SCRAM message: {exc}"
            ) from None
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("SCRAM messages are UTF-8") from None
        if not self._known:
            # The made-up credential cannot verify a proof; scramp would have refused it
            # already, this only keeps that from resting on chance.
            raise SaslAuthenticationFailedError(_FAILED)
        self.complete = True
        final: str = server.get_server_final()
        return final.encode()

    def _credential_for(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        found = self._lookup(user, self.mechanism)
        self._known = found is not None
        if found is None:
            found = self._decoy(user)
        return found.salt, found.stored_key, found.server_key, found.iterations

    def _decoy(self, user: str) -> ScramCredential:
        """A stable, unverifiable credential for a user that does not exist."""
        digest = hmac.new(self._secret, f"{self.mechanism}\0{user}".encode(), "sha256").digest()
        keys = hashlib.sha512(digest).digest()
        size = hashlib.new(SCRAM_MECHANISMS[self.mechanism]).digest_size
        return ScramCredential(
            self.mechanism, digest, keys[:size], keys[-size:][::-1], ITERATIONS_MIN
        )

    # -- PLAIN ------------------------------------------------------------------------

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailedError("PLAIN: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("PLAIN: the token is not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationFailedError("PLAIN: user name and password are required")
        if authzid and authzid != user:
            raise SaslAuthenticationFailedError(
                "PLAIN: an authorization id other than the user is not supported"
            )
        self._user = user
        # Any SCRAM credential of the user verifies the password; the strongest first.
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self._lookup(user, mechanism)
            if credential is not None and _password_matches(credential, password):
                self.complete = True
                return b""
        raise SaslAuthenticationFailedError(_FAILED)


def _password_matches(credential: ScramCredential, password: str) -> bool:
    again = new_scram_credential(
        credential.mechanism, password, iterations=credential.iterations, salt=credential.salt
    )
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _accept_longer_nonce(server: scramp.core.ScramServer, client_final: str) -> None:
    """Kafka's rule for the client-final nonce: it must *end with* the server's nonce
    (ScramSaslServer's ``endsWith``), where RFC 5802 and scramp want it equal.
    librdkafka up to 2.0 (Debian 12's kcat) sends its own nonce, then the server's
    (which already starts with it), and Kafka accepts that. The proof still covers the
    message as sent, so only the nonce check is relaxed, exactly as far as Kafka's."""
    expected = server.nonce  # a str, or scramp's Nonce (newer scramp), whose str is it
    if not expected:
        return
    for attribute in client_final.split(","):
        if attribute.startswith("r="):
            sent = attribute[2:]
            if sent != str(expected) and sent.endswith(str(expected)):
                server.nonce = type(expected)(sent)
            return
