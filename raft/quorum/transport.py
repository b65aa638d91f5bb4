"""The quorum's peer protocol over aiohttp: one-way JSON messages.

Every core message is one ``POST /v1/raft/message`` whose body is its typed wire
message (``raftka.common.messages.raft``, :func:`encode_message`); the receiver answers
``202 Accepted`` at once, before the core looks at it, and any answer the core has
travels back as another POST the other way.
Raft is built for a network that loses messages (the core retries on its own timers),
so the transport never retries: a failed POST is logged at debug and forgotten.

Sending: one persistent ``aiohttp.ClientSession`` (keep-alive connections), one sender
task per peer draining a bounded queue in order; when the queue is full the oldest
message is dropped (``PEER_QUEUE_MAX``): newer messages describe newer state, and the
core resends what still matters. Each POST has a connect and a total timeout of
``controller.quorum.request.timeout.ms``.

Receiving: a body that is not a valid message is refused with 400 INVALID_REQUEST
naming the field (:func:`decode_message` checks every type and bound); a sender that
is neither a configured voter nor an observer with 400 INCONSISTENT_VOTER_SET (Kafka's
name for "not in my voter set"). Nothing a peer sends can raise out of the handler.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Final

import aiohttp
import orjson
from aiohttp import web

from raftka.common.errors import InconsistentVoterSetError, InvalidRequestError, KafkaError
from raftka.raft.quorum.messages import Message, decode_message, encode_message
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp

MESSAGE_PATH: Final = "/v1/raft/message"
# Messages waiting for one peer; beyond it the oldest are dropped.
PEER_QUEUE_MAX: Final = 256
# Largest request body accepted (a fetch response carries up to fetch.max.records
# entries of up to 1 MiB each, or a snapshot chunk; base64 inflates by 4/3).
REQUEST_BODY_BYTES_MAX: Final = 64 * 1024 * 1024
_READ_CHUNK_BYTES: Final = 256 * 1024

logger = logging.getLogger("raftka.raft.quorum")


def _error_response(error: KafkaError) -> web.Response:
    return web.Response(
        status=400, body=orjson.dumps(error.to_wire()), content_type="application/json"
    )


# ---------------------------------------------------------------- validation


def parse_message(body: bytes) -> Message:
    """The message in a request body; InvalidRequestError naming the field if it is not
    a valid one (the typed wire messages of ``raftka.common.messages.raft``)."""
    try:
        return decode_message(body)
    except InvalidRequestError as e:
        raise InvalidRequestError(f"not a quorum message: {e.message}") from None


# ---------------------------------------------------------------- transport


class RaftTransport:
    """Sends core messages to peers and hands received ones to ``deliver``.

    ``deliver`` is called on the event loop with each valid message (it must not
    block: the engine queues it for its driver task). Start with :meth:`start` on the
    running loop, stop with :meth:`close`.
    """

    def __init__(
        self,
        *,
        node_id: int,
        peers: Mapping[int, tuple[str, int]],
        allowed_senders: Collection[int],
        request_timeout_ms: int,
        deliver: Callable[[Message], None],
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        self._node_id = node_id
        self._http = http
        self._peers = dict(peers)
        self._allowed = frozenset(allowed_senders)
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_ms / 1000, connect=request_timeout_ms / 1000
        )
        self._deliver = deliver
        self._session: aiohttp.ClientSession | None = None
        self._queues: dict[int, collections.deque[Message]] = {}
        self._ready: dict[int, asyncio.Event] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._busy: set[int] = set()
        self.dropped_messages = 0
        self.failed_posts = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.post(MESSAGE_PATH, self._handle)]

    async def start(self) -> None:
        assert self._session is None
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            connector=self._http.connector(limit=0, keepalive_timeout=60),
        )

    def send(self, destination: int, message: Message) -> None:
        """Queue ``message`` for ``destination`` (fire and forget)."""
        if self._session is None or destination not in self._peers:
            logger.debug("no route to node %s for %s", destination, type(message).__name__)
            return
        queue = self._queues.get(destination)
        if queue is None:
            queue = self._queues[destination] = collections.deque()
            self._ready[destination] = asyncio.Event()
            self._senders[destination] = asyncio.create_task(
                self._sender(destination), name=f"raft-send-{self._node_id}->{destination}"
            )
        if len(queue) >= PEER_QUEUE_MAX:
            queue.popleft()
            self.dropped_messages += 1
        queue.append(message)
        self._ready[destination].set()

    def idle(self) -> bool:
        """Nothing queued or in flight (for a graceful stop)."""
        return not self._busy and not any(self._queues.values())

    async def _sender(self, destination: int) -> None:
        host, port = self._peers[destination]
        url = self._http.url(f"{host}:{port}", MESSAGE_PATH)
        queue = self._queues[destination]
        ready = self._ready[destination]
        while True:
            if not queue:
                ready.clear()
                await ready.wait()
                continue
            message = queue.popleft()
            session = self._session
            if session is None:
                return
            self._busy.add(destination)
            try:
                body = encode_message(message)
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    if response.status != 202:
                        text = await response.text()
                        self.failed_posts += 1
                        logger.debug(
                            "node %s refused %s: %s %s",
                            destination,
                            type(message).__name__,
                            response.status,
                            text,
                        )
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                self.failed_posts += 1
                logger.debug("POST to node %s failed: %r", destination, e)
            finally:
                self._busy.discard(destination)

    async def _handle(self, request: web.Request) -> web.Response:
        if request.content_length is not None and request.content_length > REQUEST_BODY_BYTES_MAX:
            return _error_response(InvalidRequestError("request body too large"))
        # Read the stream ourselves: the application's client_max_size (1 MiB by
        # default) would refuse a snapshot chunk or a full fetch response.
        chunks: list[bytes] = []
        size = 0
        try:
            while chunk := await request.content.read(_READ_CHUNK_BYTES):
                size += len(chunk)
                if size > REQUEST_BODY_BYTES_MAX:
                    return _error_response(InvalidRequestError("request body too large"))
                chunks.append(chunk)
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as e:
            return _error_response(InvalidRequestError(f"cannot read body: {e}"))
        body = b"".join(chunks)
        try:
            message = parse_message(body)
        except InvalidRequestError as e:
            return _error_response(e)
        if message.sender_id not in self._allowed:
            return _error_response(
                InconsistentVoterSetError(
                    f"node {message.sender_id} is neither a voter nor an observer of "
                    f"node {self._node_id}'s quorum"
                )
            )
        self._deliver(message)
        return web.Response(status=202)

    async def close(self) -> None:
        tasks = list(self._senders.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._senders.clear()
        self._queues.clear()
        session, self._session = self._session, None
        if session is not None:
            await session.close()
