"""One Kafka connection's SASL state machine (raftka.broker.kafka.authentication):
which requests it lets through at each stage, how a failure ends it, and KIP-368's
re-authentication and session expiry (on an injected clock)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from raftka.broker.kafka.authentication import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    UNAUTHENTICATED_FRAME_MAX,
    ConnectionAuth,
)
from raftka.common.errors import (
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from raftka.server_common.sasl import ScramCredential, new_scram_credential

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0
STORE = {("alice", "SCRAM-SHA-512"): new_scram_credential("SCRAM-SHA-512", "pw")}


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return STORE.get((user, mechanism))


def auth() -> ConnectionAuth:
    return ConnectionAuth(("SCRAM-SHA-512", "PLAIN"), lookup, secret=b"s")


def test_scram_exchange_lets_requests_through_only_once_complete() -> None:
    a = auth()
    assert a.allows(API_VERSIONS) and a.allows(SASL_HANDSHAKE_KEY)
    assert not a.allows(METADATA) and not a.allows(SASL_AUTHENTICATE_KEY)
    assert a.frame_limit(104_857_600) == (UNAUTHENTICATED_FRAME_MAX, "sasl.server.max.receive.size")
    a.handshake("SCRAM-SHA-512")
    assert a.allows(SASL_AUTHENTICATE_KEY)
    assert not a.allows(PRODUCE) and not a.allows(API_VERSIONS)
    client = KafkaPythonScram("alice", "pw", "SCRAM-SHA-512")
    client.process_server_first_message(a.authenticate(client.first_message()))
    assert not a.authenticated and not a.allows(METADATA)
    client.process_server_final_message(a.authenticate(client.final_message()))
    assert a.authenticated and a.principal == "User:alice"
    assert a.allows(METADATA) and a.allows(PRODUCE)
    # A handshake may start a re-authentication (KIP-368); a lone SaslAuthenticate not.
    assert a.allows(SASL_HANDSHAKE_KEY) and not a.allows(SASL_AUTHENTICATE_KEY)
    assert a.frame_limit(104_857_600) == (104_857_600, "socket.request.max.bytes")
    assert a.session_lifetime_ms == 0 and not a.expired()  # reauth_ms 0: no lifetime


def test_a_mechanism_not_enabled_fails_the_connection() -> None:
    a = auth()
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-512, PLAIN"):
        a.handshake("SCRAM-SHA-256")
    assert a.failed and not a.allows(API_VERSIONS) and not a.allows(SASL_HANDSHAKE_KEY)


def test_wrong_plain_password_fails_and_nothing_more_is_read() -> None:
    a = auth()
    a.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationFailedError):
        a.authenticate(b"\0alice\0wrong")
    assert a.failed and a.principal is None
    with pytest.raises(IllegalSaslStateError):
        a.authenticate(b"\0alice\0pw")


def test_out_of_order_steps_fail() -> None:
    a = auth()
    with pytest.raises(IllegalSaslStateError):
        a.authenticate(b"\0alice\0pw")  # no handshake yet
    assert a.failed
    b = auth()
    b.handshake("PLAIN")
    with pytest.raises(IllegalSaslStateError):
        b.handshake("PLAIN")  # twice
    assert b.failed


@settings(max_examples=200, deadline=None)
@given(
    mechanism=st.sampled_from(["SCRAM-SHA-512", "PLAIN"]),
    tokens=st.lists(st.binary(max_size=300), min_size=1, max_size=4),
)
def test_garbage_tokens_never_authenticate(mechanism: str, tokens: list[bytes]) -> None:
    """Random tokens: the connection never authenticates, and every failure is one of
    Kafka's errors (which the listener answers) or a library error it answers as
    SASL_AUTHENTICATION_FAILED; once failed, it stays failed."""
    a = auth()
    a.handshake(mechanism)
    for token in tokens:
        # The listener answers a library error as SASL_AUTHENTICATION_FAILED too.
        with contextlib.suppress(KafkaError, Exception):
            a.authenticate(token)
        if a.failed:
            break
    assert not a.authenticated


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _scram(a: ConnectionAuth, user: str, password: str, *, version: int = 2) -> None:
    """One SCRAM-SHA-512 exchange (after its handshake) with SaslAuthenticate ``version``."""
    client = KafkaPythonScram(user, password, "SCRAM-SHA-512")
    client.process_server_first_message(a.authenticate(client.first_message(), version=version))
    client.process_server_final_message(a.authenticate(client.final_message(), version=version))


def test_a_session_expires_after_its_lifetime_and_reauthentication_renews_it() -> None:
    clock = Clock()
    a = ConnectionAuth(("SCRAM-SHA-512",), lookup, secret=b"s", reauth_ms=3_000, clock_ms=clock)
    a.handshake("SCRAM-SHA-512")
    _scram(a, "alice", "pw")
    assert a.session_lifetime_ms == 3_000 and a.reauthentications == 0
    clock.now += 2_999
    assert not a.expired()
    clock.now += 1
    assert a.expired()  # now only a re-authentication may come (the listener's rule)
    a.handshake("SCRAM-SHA-512")
    assert not a.authenticated and a.principal == "User:alice"  # kept meanwhile
    assert a.allows(SASL_AUTHENTICATE_KEY) and not a.allows(METADATA)
    _scram(a, "alice", "pw")
    assert a.authenticated and a.reauthentications == 1 and not a.expired()
    clock.now += 3_000
    assert a.expired()


def test_a_v0_client_gets_no_lifetime_and_never_expires() -> None:
    clock = Clock()
    a = ConnectionAuth(("SCRAM-SHA-512",), lookup, secret=b"s", reauth_ms=3_000, clock_ms=clock)
    a.handshake("SCRAM-SHA-512")
    _scram(a, "alice", "pw", version=0)
    assert a.authenticated and a.session_lifetime_ms == 0
    clock.now += 10**9
    assert not a.expired()


STORE[("bob", "SCRAM-SHA-512")] = new_scram_credential("SCRAM-SHA-512", "pw2")


def test_reauthentication_may_not_change_principal_or_mechanism() -> None:
    a = ConnectionAuth(("SCRAM-SHA-512", "PLAIN"), lookup, secret=b"s", reauth_ms=1_000)
    a.handshake("SCRAM-SHA-512")
    _scram(a, "alice", "pw")
    a.handshake("SCRAM-SHA-512")
    with pytest.raises(SaslAuthenticationFailedError, match="may not change the principal"):
        _scram(a, "bob", "pw2")
    assert a.failed and not a.allows(METADATA)
    b = ConnectionAuth(("SCRAM-SHA-512", "PLAIN"), lookup, secret=b"s", reauth_ms=1_000)
    b.handshake("SCRAM-SHA-512")
    _scram(b, "alice", "pw")
    with pytest.raises(IllegalSaslStateError, match="session's mechanism SCRAM-SHA-512"):
        b.handshake("PLAIN")
    assert b.failed
    c = ConnectionAuth(("SCRAM-SHA-512",), lookup, secret=b"s", reauth_ms=1_000)
    c.handshake("SCRAM-SHA-512")
    _scram(c, "alice", "pw")
    with pytest.raises(IllegalSaslStateError, match="SaslHandshake v1"):
        c.handshake("SCRAM-SHA-512", version=0)  # unframed tokens cannot interleave
    assert c.failed
