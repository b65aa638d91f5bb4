"""The error contract of raftka's HTTP APIs, shared by controllers and brokers.

Every failed request answers a JSON object with Kafka's error name and code and a
message (:meth:`KafkaError.to_wire`), never a traceback: a KafkaError raised by a
handler is rendered by the server's own function (which picks the HTTP status and may
add fields, e.g. NOT_CONTROLLER's leader address); aiohttp's own 4xx (unknown path,
body too large) become INVALID_REQUEST; anything else is logged and answered as
UNKNOWN_SERVER_ERROR with status 500, and the process stays up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from raftka.common.errors import InvalidRequestError, KafkaError, UnknownServerError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: What a request to a peer's HTTP API raises when the peer is down, slow, or answers
#: an error or a body that does not decode: the broker's background loops (replica
#: and metadata fetchers) log it and try again later or elsewhere.
PEER_REQUEST_ERRORS: Final = (
    aiohttp.ClientError,
    TimeoutError,
    OSError,
    KafkaError,
    ValueError,
    KeyError,
)


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_middleware(
    render: Callable[[KafkaError], web.Response], log: logging.Logger
) -> Middleware:
    """An aiohttp middleware applying the contract above, with ``render`` for KafkaErrors."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except KafkaError as e:
            return render(e)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            body: dict[str, Any] = {
                "error": InvalidRequestError.name,
                "error_code": InvalidRequestError.code,
                "message": f"{request.method} {request.path}: {e.reason}",
            }
            return json_response(body, e.status)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("request failed", extra={"fields": {"path": request.path}})
            return json_response(UnknownServerError(f"{type(e).__name__}: {e}").to_wire(), 500)

    return middleware
