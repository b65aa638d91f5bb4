"""SCRAM's key derivation (RFC 5802), shared by the client that makes a credential and
the controller that stores it.

Kafka's AlterUserScramCredentials carries a *salted password* (``Hi(password, salt,
iterations)``, PBKDF2 with the mechanism's hash), never the password: the client
salts and hashes, the controller derives ``StoredKey`` and ``ServerKey`` from the salted
password and writes them to the metadata log. Both halves live here because the client
layer may not import the server's (``raftka.server_common.sasl`` builds on this).

The password is prepared with SASLprep (RFC 4013) as the ``scramp`` package does, so a
credential made here verifies in a scramp exchange.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from scramp.utils import saslprep

from raftka.common.errors import UnacceptableCredentialError, UnsupportedSaslMechanismError

__all__ = [
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "SALT_BYTES_MIN",
    "SASL_MECHANISMS",
    "SCRAM_MECHANISMS",
    "check_iterations",
    "check_mechanism",
    "check_salt",
    "salted_password",
    "scram_keys",
]

#: Kafka's SCRAM mechanisms and the hash each uses.
SCRAM_MECHANISMS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: The SASL mechanisms raftka serves and its clients log in with: SCRAM, and PLAIN
#: checked against the same credentials.
SASL_MECHANISMS: Final = (*SCRAM_MECHANISMS, "PLAIN")
#: Kafka's bounds on a SCRAM credential's iteration count.
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384
#: The shortest salt the server's SCRAM (scramp) accepts; a credential with a shorter
#: one could never authenticate, so it is refused when it is made.
SALT_BYTES_MIN: Final = 12


def check_mechanism(mechanism: str) -> str:
    """The hash name of a SCRAM mechanism; UNSUPPORTED_SASL_MECHANISM otherwise."""
    hash_name = SCRAM_MECHANISMS.get(mechanism)
    if hash_name is None:
        raise UnsupportedSaslMechanismError(
            f"{mechanism!r} is not a SCRAM mechanism ({', '.join(SCRAM_MECHANISMS)})"
        )
    return hash_name


def check_iterations(iterations: int) -> None:
    """UNACCEPTABLE_CREDENTIAL outside Kafka's 4096..16384."""
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise UnacceptableCredentialError(
            f"iterations must be in {ITERATIONS_MIN}..{ITERATIONS_MAX}, got {iterations}"
        )


def check_salt(salt: bytes) -> None:
    """UNACCEPTABLE_CREDENTIAL for a salt shorter than SALT_BYTES_MIN."""
    if len(salt) < SALT_BYTES_MIN:
        raise UnacceptableCredentialError(
            f"the salt must be at least {SALT_BYTES_MIN} bytes, got {len(salt)}"
        )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(SASLprep(password), salt, iterations)`` for ``mechanism``."""
    hash_name = check_mechanism(mechanism)
    check_iterations(iterations)
    check_salt(salt)
    prepared = saslprep(password).encode("utf-8")
    return hashlib.pbkdf2_hmac(hash_name, prepared, salt, iterations)


def scram_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of a salted password: ``H(HMAC(salted, "Client Key"))``
    and ``HMAC(salted, "Server Key")``."""
    hash_name = check_mechanism(mechanism)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    return stored_key, server_key
