"""The client's side of SASL on raftka's HTTPS API (server_common/http_sasl.py).

Theory of operation
-------------------
With ``security_protocol="SASL_SSL"`` the client authenticates to each node before its
first request there: it runs the mechanism's exchange with ``POST
/v1/sasl-authenticate`` (SCRAM-SHA-256/512 in two requests, PLAIN in one) and keeps the
session token the node answers, sent as ``Authorization: Bearer`` from then on. A
SCRAM exchange also checks the node: the server's final message must prove it knows
the user's credential, or the client refuses it (scramp checks the signature).

A node may forget a session (it restarted, the session expired after
``connections.max.reauth.ms``, or it was idle for ``connections.max.idle.ms``): a request
sent with a token and answered 401 is sent once more after a new exchange. That is
safe for any request because the node refuses it before any handler runs. Wrong
credentials fail the exchange itself with SASL_AUTHENTICATION_FAILED, which is not
retried.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import scramp

from raftka.common.errors import SaslAuthenticationFailedError, UnknownServerError

__all__ = ["SASL_PATH", "SaslLogin", "SessionTokens"]

#: The exchange's route on every node (server_common/http_sasl.SASL_PATH).
SASL_PATH: Final = "/v1/sasl-authenticate"

#: Posts one exchange request to a node: (address, JSON body) -> the JSON answer,
#: raising the node's error typed.
Post = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class SaslLogin:
    """Who the client authenticates as (Kafka's sasl.mechanism and the PLAIN/SCRAM
    user name and password, which kafka-python calls sasl_plain_*)."""

    mechanism: str
    username: str
    password: str = field(repr=False)


class SessionTokens:
    """The session token of each node, fetched on first use (one exchange per node at
    a time)."""

    def __init__(self, login: SaslLogin, post: Post) -> None:
        self._login = login
        self._post = post
        self._tokens: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def token(self, address: str) -> str:
        """The node's token, authenticating first when there is none."""
        found = self._tokens.get(address)
        if found is not None:
            return found
        lock = self._locks.setdefault(address, asyncio.Lock())
        async with lock:
            found = self._tokens.get(address)
            if found is None:
                found = await self._authenticate(address)
                self._tokens[address] = found
            return found

    def forget(self, address: str, token: str) -> None:
        """Drop ``token`` (the node refused it); the next :meth:`token` authenticates."""
        if self._tokens.get(address) == token:
            del self._tokens[address]

    async def _authenticate(self, address: str) -> str:
        login = self._login
        if login.mechanism == "PLAIN":
            answer = await self._step(address, None, f"\0{login.username}\0{login.password}")
            return _session_token(answer, address)
        client = scramp.ScramClient([login.mechanism], login.username, login.password)
        first = await self._step(address, None, client.get_client_first())
        try:
            client.set_server_first(_text(first, address))
            final = client.get_client_final()
        except scramp.ScramException as e:
            raise SaslAuthenticationFailedError(f"{address}: malformed SCRAM answer: {e}") from None
        exchange = first.get("exchange")
        answer = await self._step(address, exchange, final)
        try:
            client.set_server_final(_text(answer, address))
        except scramp.ScramException as e:
            # The node could not prove it knows the credential: not the cluster asked.
            raise SaslAuthenticationFailedError(
                f"{address}: the node's SCRAM signature is wrong: {e}"
            ) from None
        return _session_token(answer, address)

    async def _step(self, address: str, exchange: object, token: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "mechanism": self._login.mechanism,
            "auth_bytes": base64.b64encode(token.encode("utf-8")).decode("ascii"),
        }
        if exchange is not None:
            body["exchange"] = exchange
        answer = await self._post(address, body)
        if not isinstance(answer, dict):
            raise UnknownServerError(f"{address}{SASL_PATH}: expected a JSON object")
        return answer


def _text(answer: dict[str, Any], address: str) -> str:
    raw = answer.get("auth_bytes")
    try:
        if not isinstance(raw, str):
            raise ValueError
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise SaslAuthenticationFailedError(
            f"{address}{SASL_PATH}: auth_bytes is not base64 UTF-8"
        ) from None


def _session_token(answer: dict[str, Any], address: str) -> str:
    token = answer.get("session_token")
    if answer.get("complete") is not True or not isinstance(token, str) or not token:
        raise SaslAuthenticationFailedError(
            f"{address}{SASL_PATH}: the exchange did not complete with a session token"
        )
    return token
