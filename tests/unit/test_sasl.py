"""The server side of SASL (SCRAM-SHA-256/512, PLAIN) against two independent client
implementations: kafka-python's SCRAM client and scramp's."""

from __future__ import annotations

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from raftka.common.errors import (
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from raftka.server_common.sasl import (
    TOKEN_BYTES_MAX,
    SaslServerSession,
    ScramCredential,
    new_scram_credential,
)

SECRET = b"per-server secret"
STORE = {
    ("alice", m): new_scram_credential(m, "alice-pw") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
}
STORE[("a,b=c", "SCRAM-SHA-256")] = new_scram_credential("SCRAM-SHA-256", "odd-pw")


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return STORE.get((user, mechanism))


def session(mechanism: str) -> SaslServerSession:
    return SaslServerSession(mechanism, lookup, secret=SECRET)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_scram_client_authenticates(mechanism: str) -> None:
    client = KafkaPythonScram("alice", "alice-pw", mechanism)
    server = session(mechanism)
    client.process_server_first_message(server.step(client.first_message()))
    final = server.step(client.final_message())
    client.process_server_final_message(final)  # checks the server's signature
    assert server.complete and server.principal == "User:alice"


def test_scramp_client_with_an_escaped_user_name() -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], "a,b=c", "odd-pw")
    server = session("SCRAM-SHA-256")
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.principal == "User:a,b=c"


def _second_step_error(user: str, password: str) -> tuple[bytes, str]:
    client = KafkaPythonScram(user, password, "SCRAM-SHA-256")
    server = session("SCRAM-SHA-256")
    first = server.step(client.first_message())
    client.process_server_first_message(first)
    with pytest.raises(SaslAuthenticationFailedError) as failed:
        server.step(client.final_message())
    assert not server.complete
    with pytest.raises(IllegalSaslStateError):
        server.principal  # noqa: B018
    # The session is over: nothing more is read on it.
    with pytest.raises(IllegalSaslStateError):
        server.step(client.final_message())
    salt = dict(p.split("=", 1) for p in first.decode().split(","))["s"]
    return salt.encode(), failed.value.message


def test_a_wrong_password_and_an_unknown_user_fail_alike() -> None:
    _, wrong = _second_step_error("alice", "guess")
    salt_1, unknown = _second_step_error("nobody", "guess")
    assert wrong == unknown == "Authentication failed: invalid credentials"
    # The made-up salt is stable per user (a prober cannot tell by asking twice) ...
    salt_2, _ = _second_step_error("nobody", "other guess")
    assert salt_1 == salt_2
    # ... and differs between users, as real salts do.
    assert _second_step_error("somebody", "x")[0] != salt_1


def test_a_replayed_final_message_fails() -> None:
    client = KafkaPythonScram("alice", "alice-pw", "SCRAM-SHA-256")
    first = session("SCRAM-SHA-256")
    client.process_server_first_message(first.step(client.first_message()))
    final = client.final_message()
    first.step(final)
    replay = session("SCRAM-SHA-256")
    replay.step(client.first_message())  # same client nonce, a new server nonce
    with pytest.raises(SaslAuthenticationFailedError):
        replay.step(final)


def test_channel_binding_oversized_and_out_of_order_tokens() -> None:
    with pytest.raises(SaslAuthenticationFailedError, match="channel binding"):
        session("SCRAM-SHA-256").step(b"p=tls-unique,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationFailedError, match="above"):
        session("SCRAM-SHA-256").step(b"x" * (TOKEN_BYTES_MAX + 1))
    with pytest.raises(UnsupportedSaslMechanismError, match="GSSAPI"):
        session("GSSAPI")


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=300), st.binary(max_size=300), st.sampled_from(["SCRAM-SHA-256", "PLAIN"])
)
def test_garbage_never_authenticates_and_only_kafka_errors_escape(
    first: bytes, second: bytes, mechanism: str
) -> None:
    server = session(mechanism)
    try:
        server.step(first)
        server.step(second)
    except KafkaError:
        pass
    # Random bytes never carry alice's password or a valid proof.
    assert not server.complete


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    ok = session("PLAIN")
    assert ok.step(b"\0alice\0alice-pw") == b"" and ok.principal == "User:alice"
    assert session("PLAIN").step(b"alice\0alice\0alice-pw") == b""
    for token, needle in [
        (b"\0alice\0wrong", "invalid credentials"),
        (b"\0nobody\0alice-pw", "invalid credentials"),
        (b"bob\0alice\0alice-pw", "authorization id"),
        (b"alice-pw", "authzid NUL user NUL password"),
        (b"\0alice\0", "required"),
    ]:
        with pytest.raises(SaslAuthenticationFailedError, match=needle):
            session("PLAIN").step(token)


def test_credentials_keep_kafkas_iteration_bounds() -> None:
    with pytest.raises(UnacceptableCredentialError, match=r"4096\.\.16384"):
        new_scram_credential("SCRAM-SHA-256", "pw", iterations=1000)
    with pytest.raises(UnsupportedSaslMechanismError):
        new_scram_credential("SCRAM-SHA-1", "pw")
    assert new_scram_credential("SCRAM-SHA-512", "pw", iterations=8192).iterations == 8192


def _proof(mechanism: str, password: str, server_first: str, auth_message: str) -> str:
    """RFC 5802's ClientProof, computed here so the test can send a final message that
    no library client would build."""
    import base64
    import hashlib
    import hmac

    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(p.split("=", 1) for p in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    signature = hmac.new(stored_key, auth_message.encode(), name).digest()
    return base64.b64encode(
        bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    ).decode()


@pytest.mark.parametrize("password", ["alice-pw", "wrong"])
def test_librdkafka_2_0_nonce_is_accepted_as_kafka_accepts_it(password: str) -> None:
    """librdkafka <= 2.0 (Debian 12's kcat) repeats its nonce before the server's in the
    final message; Kafka only checks that the nonce ends with the server's, so the
    right password authenticates and a wrong one still fails."""
    mechanism = "SCRAM-SHA-512"
    server = session(mechanism)
    first_bare = "n=alice,r=client-nonce-1"
    server_first = server.step(("n,," + first_bare).encode()).decode()
    combined = dict(p.split("=", 1) for p in server_first.split(","))["r"]
    without_proof = f"c=biws,r=client-nonce-1{combined}"
    proof = _proof(
        mechanism, password, server_first, f"{first_bare},{server_first},{without_proof}"
    )
    final = f"{without_proof},p={proof}".encode()
    if password == "alice-pw":
        assert server.step(final).startswith(b"v=")
        assert server.principal == "User:alice"
    else:
        with pytest.raises(SaslAuthenticationFailedError):
            server.step(final)


def test_a_nonce_that_does_not_end_with_the_servers_fails() -> None:
    server = session("SCRAM-SHA-256")
    first_bare = "n=alice,r=client-nonce-2"
    server_first = server.step(("n,," + first_bare).encode()).decode()
    without_proof = "c=biws,r=client-nonce-2-made-up"
    proof = _proof(
        "SCRAM-SHA-256", "alice-pw", server_first, f"{first_bare},{server_first},{without_proof}"
    )
    with pytest.raises(SaslAuthenticationFailedError):
        server.step(f"{without_proof},p={proof}".encode())
