"""A SCRAM exchange between a scramp client and raftka's SaslServerSession, for the
tests that check a stored credential (test modules cannot import each other)."""

from __future__ import annotations

import os

import scramp

from raftka.common.errors import SaslAuthenticationFailedError
from raftka.server_common.sasl import CredentialLookup, SaslServerSession


def scram_authenticates(lookup: CredentialLookup, mechanism: str, user: str, password: str) -> bool:
    """Whether a scramp client with ``password`` authenticates as ``user`` against a
    SaslServerSession over ``lookup``; the client checks the server's proof too."""
    session = SaslServerSession(mechanism, lookup, secret=os.urandom(32))
    client = scramp.ScramClient([mechanism], user, password)
    try:
        first = session.step(client.get_client_first().encode())
        client.set_server_first(first.decode())
        final = session.step(client.get_client_final().encode())
    except SaslAuthenticationFailedError:
        return False
    client.set_server_final(final.decode())
    return session.complete and session.principal == f"User:{user}"
