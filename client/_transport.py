"""The I/O edge every client shares: HTTP requests to brokers/controllers and the
metadata cache.

One ``aiohttp.ClientSession`` per client, created lazily on the client's event loop
(constructors do no I/O) and closed with the client. Every request carries a timeout
(``request_timeout_ms`` unless a caller gives a longer one, as a long-polling fetch
does). Wire errors become Kafka's typed exceptions (``error_for_name``); a connection
failure becomes ``NetworkError`` and a client-side timeout ``RequestTimedOutError``,
both retriable, as Kafka's NetworkClient reports a disconnect.

The metadata cache (:class:`MetadataCache`) holds the last ``GET /v1/metadata``
answer as an immutable :class:`ClusterView`; a refresh replaces it whole. It is
refreshed when older than ``metadata_max_age_ms``, when a caller asks for a topic it
does not know, and when a request meets NOT_LEADER_OR_FOLLOWER or
UNKNOWN_TOPIC_OR_PARTITION (``invalidate``). Concurrent refreshes share one request.

A broker that timed out, refused or reset a connection, or sits on a request for long
(:func:`await_unless_leader_moved`), is *suspect* (``mark_suspect``): a refresh asks
it last, so a dead or isolated node cannot hold up the metadata that names its
successor, and a request parked at a leader the refreshed metadata no longer names is
given up (NetworkError, retried at the new leader) instead of waiting out
``request_timeout_ms`` at a zombie (issue #19, 2; Kafka's client treats a request
timeout as a disconnect and refreshes its metadata).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

import aiohttp
import orjson
from aiohappyeyeballs import AddrInfoType

from raftka.client._http_sasl import SASL_PATH, SaslLogin, SessionTokens
from raftka.client.structs import Node, PartitionInfo, TopicPartition
from raftka.common.client_tls import connector_tls
from raftka.common.errors import (
    AuthorizationError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_for_name,
)
from raftka.common.messages import Message, decode, encode
from raftka.common.messages import broker as api
from raftka.common.messages.broker import FramedMessage, decode_frame
from raftka.common.time import monotonic_ms
from raftka.common.wire import FRAME_CONTENT_TYPE

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "ClusterView",
    "ListedOffset",
    "MetadataCache",
    "TopicView",
    "Transport",
    "await_unless_leader_moved",
    "list_offsets",
    "monotonic_ms",
]

log = logging.getLogger(__name__)

#: Bound on one response body (a fetch answer holds at most fetch_max_bytes plus one
#: batch; this is a guard against a runaway peer, not a tuning knob).
RESPONSE_BYTES_MAX: Final = 256 * 1024 * 1024
#: Connections per host the session keeps; requests past it queue in aiohttp.
CONNECTIONS_PER_HOST_MAX: Final = 32
#: How long a produce or fetch may wait (beyond a fetch's own long poll) before the
#: client looks up whether its leader is still the leader, and how often it looks again
#: while the request waits. A metadata request per second per slow broker is the cost.
LEADER_CHECK_MS: Final = 1_000


async def _read_body(response: aiohttp.ClientResponse, where: str) -> bytes:
    """The whole body, at most RESPONSE_BYTES_MAX. (``content.read(n)`` returns what
    has arrived so far, not n bytes: a large fetch answer came back cut short.)"""
    length = response.content_length
    if length is not None and length > RESPONSE_BYTES_MAX:
        raise NetworkError(f"{where}: answer of {length} bytes above {RESPONSE_BYTES_MAX}")
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.content.read(1 << 20):
        size += len(chunk)
        if size > RESPONSE_BYTES_MAX:
            raise NetworkError(f"{where}: answer above {RESPONSE_BYTES_MAX} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


M = TypeVar("M")
F = TypeVar("F", bound=FramedMessage)


def error_from_message(error: api.ErrorObject) -> KafkaError:
    """An answer's error object as the exception of that name."""
    return error_for_name(error.error, error.message)


def decode_answer(what: str, body: bytes | memoryview, answer_type: type[M]) -> M:
    """An answer's JSON as ``answer_type``; a malformed answer is the server's fault
    (UNKNOWN_SERVER_ERROR here), not the request's."""
    try:
        return decode(body, answer_type)
    except KafkaError as e:
        raise UnknownServerError(f"{what}: malformed answer: {e.message}") from None


def error_from_wire(obj: object, default: str = "") -> KafkaError:
    """A wire error object ``{"error", "error_code", "message"}`` as an exception."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), str):
        message = obj.get("message")
        err = error_for_name(obj["error"], message if isinstance(message, str) else "")
        return err
    return UnknownServerError(default or f"unexpected error object {obj!r}")


class Transport:
    """HTTP to raftka nodes for one client. Not thread-safe: used from one event loop."""

    def __init__(
        self,
        *,
        client_id: str,
        request_timeout_ms: int,
        idle_ms: int,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        tls: ssl.SSLContext | None = None,
        sasl: SaslLogin | None = None,
    ) -> None:
        self._client_id = client_id
        #: security_protocol=SASL_SSL: each node's session token (client/_http_sasl.py).
        self._tokens = None if sasl is None else SessionTokens(sasl, self._post_exchange)
        #: security_protocol=SSL: https with this context (its client certificate).
        self._tls = tls
        self._scheme = "http" if tls is None else "https"
        self._request_timeout_ms = request_timeout_ms
        self._idle_ms = idle_ms
        #: setsockopt arguments for every new connection (-1 sizes: the OS default).
        self._socket_options = tuple(
            (socket.SOL_SOCKET, option, size)
            for option, size in (
                (socket.SO_SNDBUF, send_buffer_bytes),
                (socket.SO_RCVBUF, receive_buffer_bytes),
            )
            if size >= 0
        )
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise KafkaError("the client is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=CONNECTIONS_PER_HOST_MAX,
                keepalive_timeout=self._idle_ms / 1000,
                socket_factory=self._new_socket if self._socket_options else None,
                **connector_tls(self._tls),  # type: ignore[arg-type]
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": f"raftka-python ({self._client_id})"},
                read_bufsize=1 << 16,
            )
        return self._session

    def _new_socket(self, addr_info: AddrInfoType) -> socket.socket:
        """A connection's socket with the configured buffer sizes set before it
        connects (a receive buffer set later does not change the TCP window)."""
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        try:
            for level, option, value in self._socket_options:
                sock.setsockopt(level, option, value)
        except OSError:
            sock.close()
            raise
        return sock

    @property
    def request_timeout_ms(self) -> int:
        return self._request_timeout_ms

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def request(
        self,
        address: str,
        method: str,
        path: str,
        *,
        json_body: object = None,
        message: Message | None = None,
        frame_body: bytes | None = None,
        timeout_ms: int | None = None,
        params: Mapping[str, str | Sequence[str]] | None = None,
    ) -> tuple[int, bytes, str]:
        """One request with a JSON body (``message``, or ``json_body`` for APIs without
        message classes yet) or a frame; (status, body, content type). NetworkError
        or RequestTimedOutError when no answer arrives."""
        session = self._get_session()
        total_ms = timeout_ms if timeout_ms is not None else self._request_timeout_ms
        headers: dict[str, str] = {}
        data: bytes | None = None
        if frame_body is not None:
            data = frame_body
            headers["Content-Type"] = FRAME_CONTENT_TYPE
        elif message is not None:
            data = encode(message)
            headers["Content-Type"] = "application/json"
        elif json_body is not None:
            data = orjson.dumps(json_body)
            headers["Content-Type"] = "application/json"
        query: list[tuple[str, str]] = []
        for k, v in (params or {}).items():
            query.extend((k, x) for x in ([v] if isinstance(v, str) else v))
        send = functools.partial(
            self._send, session, address, method, path, data=data, query=query, total_ms=total_ms
        )
        if self._tokens is None or path == SASL_PATH:
            return await send(headers=headers)
        for attempt in (1, 2):
            token = await self._tokens.token(address)
            headers["Authorization"] = f"Bearer {token}"
            answer = await send(headers=headers)
            if answer[0] != 401 or attempt == 2:
                return answer
            # The node forgot the session (restart, connections.max.reauth.ms or .idle.ms)
            # and refused the request before running it: authenticate again, send again.
            self._tokens.forget(address, token)
        raise AssertionError("unreachable")

    async def _post_exchange(self, address: str, body: dict[str, Any]) -> Any:
        return await self.request_json(address, "POST", SASL_PATH, json_body=body)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        address: str,
        method: str,
        path: str,
        *,
        data: bytes | None,
        headers: dict[str, str],
        query: list[tuple[str, str]],
        total_ms: int,
    ) -> tuple[int, bytes, str]:
        try:
            async with session.request(
                method,
                f"{self._scheme}://{address}{path}",
                data=data,
                headers=headers,
                params=query or None,
                timeout=aiohttp.ClientTimeout(total=total_ms / 1000),
            ) as response:
                body = await _read_body(response, f"{address}{path}")
                return response.status, body, response.content_type
        except TimeoutError:
            raise RequestTimedOutError(
                f"{method} {address}{path}: no answer within {total_ms} ms"
            ) from None
        except aiohttp.ClientError as e:
            hint = ""
            if self._scheme == "http" and isinstance(e, aiohttp.ServerDisconnectedError):
                # What an HTTPS API does to a plain request: its TLS handshake fails.
                hint = (
                    " (asked in plain HTTP: if the node's API is HTTPS, give "
                    "security_protocol='SSL' and a certificate, or --command-config)"
                )
            raise NetworkError(f"{method} {address}{path}: {type(e).__name__}: {e}{hint}") from None

    async def request_json(
        self,
        address: str,
        method: str,
        path: str,
        *,
        json_body: object = None,
        timeout_ms: int | None = None,
        params: Mapping[str, str | Sequence[str]] | None = None,
    ) -> Any:
        """A JSON request whose answer is JSON; an error answer raises it typed.
        ``NotControllerError`` keeps the body as ``.body`` (its ``leader_address``)."""
        status, body, _ = await self.request(
            address, method, path, json_body=json_body, timeout_ms=timeout_ms, params=params
        )
        return parse_json_answer(f"{method} {address}{path}", status, body)

    async def request_message(
        self,
        address: str,
        method: str,
        path: str,
        answer_type: type[M],
        *,
        message: Message | None = None,
        timeout_ms: int | None = None,
        params: Mapping[str, str | Sequence[str]] | None = None,
    ) -> M:
        """A request with a message body (or none) whose answer is ``answer_type``; an
        error answer raises it typed, as :meth:`request_json`."""
        what = f"{method} {address}{path}"
        status, body, _ = await self.request(
            address, method, path, message=message, timeout_ms=timeout_ms, params=params
        )
        if status != 200:
            parse_json_answer(what, status, body)  # raises the answer's error
        return decode_answer(what, body, answer_type)

    async def request_frame(
        self,
        address: str,
        path: str,
        answer_type: type[F],
        *,
        message: Message | None = None,
        frame_body: bytes | None = None,
        timeout_ms: int | None = None,
    ) -> tuple[F, list[memoryview]] | None:
        """A request whose answer is a frame (fetch) or JSON (produce), both decoded as
        ``answer_type``; JSON answers come back with no payloads. None for a 204
        (acks=0)."""
        what = f"POST {address}{path}"
        status, body, content_type = await self.request(
            address,
            "POST",
            path,
            message=message,
            frame_body=frame_body,
            timeout_ms=timeout_ms,
        )
        if status == 204:
            return None
        if status == 200 and content_type == FRAME_CONTENT_TYPE:
            try:
                return decode_frame(body, answer_type)
            except KafkaError as e:
                raise UnknownServerError(f"{what}: malformed answer: {e.message}") from None
        if status != 200:
            parse_json_answer(what, status, body)  # raises the answer's error
        return decode_answer(what, body, answer_type), []


def parse_json_answer(what: str, status: int, body: bytes) -> Any:
    try:
        answer = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        raise UnknownServerError(f"{what}: HTTP {status} with a body that is not JSON") from None
    if status >= 400 or (isinstance(answer, dict) and status != 200 and "error" in answer):
        err = error_from_wire(answer, f"{what}: HTTP {status}")
        err.body = answer  # type: ignore[attr-defined]
        raise err
    return answer


# ---------------------------------------------------------------------------------------
# Metadata


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str | None
    error: KafkaError | None
    partitions: tuple[PartitionInfo, ...]

    #: Partitions with a leader now, computed once (the producer asks on every send).
    available_partitions: tuple[int, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        available = tuple(p.partition for p in self.partitions if p.leader is not None)
        object.__setattr__(self, "available_partitions", available)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One metadata answer, immutable. ``topics`` holds only the topics asked for
    (all of them after an unfiltered request)."""

    brokers: Mapping[int, Node] = field(default_factory=dict)
    topics: Mapping[str, TopicView] = field(default_factory=dict)
    controller_id: int | None = None
    controllers: tuple[str, ...] = ()
    fetched_ms: int = -1

    def leader_address(self, tp: TopicPartition) -> tuple[int, str] | None:
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        leader = topic.partitions[tp.partition].leader
        node = None if leader is None else self.brokers.get(leader)
        return None if node is None or leader is None else (leader, f"{node.host}:{node.port}")


class ConnectionConfig(Protocol):
    """The options a client's transport and metadata cache are built from (producer,
    consumer and admin configs all have them)."""

    @property
    def client_id(self) -> str: ...
    @property
    def request_timeout_ms(self) -> int: ...
    @property
    def connections_max_idle_ms(self) -> int: ...
    @property
    def bootstrap_servers(self) -> tuple[str, ...]: ...
    @property
    def metadata_max_age_ms(self) -> int: ...
    @property
    def retry_backoff_ms(self) -> int: ...
    @property
    def send_buffer_bytes(self) -> int: ...
    @property
    def receive_buffer_bytes(self) -> int: ...
    def tls_context(self) -> ssl.SSLContext | None: ...
    def sasl_login(self) -> SaslLogin | None: ...


def open_connection(config: ConnectionConfig) -> tuple[Transport, MetadataCache]:
    """A client's transport and its metadata cache (no I/O yet)."""
    transport = Transport(
        client_id=config.client_id,
        request_timeout_ms=config.request_timeout_ms,
        idle_ms=config.connections_max_idle_ms,
        send_buffer_bytes=config.send_buffer_bytes,
        receive_buffer_bytes=config.receive_buffer_bytes,
        tls=config.tls_context(),
        sasl=config.sasl_login(),
    )
    metadata = MetadataCache(
        transport,
        bootstrap_servers=config.bootstrap_servers,
        metadata_max_age_ms=config.metadata_max_age_ms,
        retry_backoff_ms=config.retry_backoff_ms,
        request_timeout_ms=config.request_timeout_ms,
    )
    return transport, metadata


def keep_newer_leaders(old: ClusterView, new: ClusterView) -> ClusterView:
    """``new``, except that a partition whose leader epoch went *down* keeps its old
    entry (Kafka's KIP-320 rule): a broker that is cut off and deposed still believes
    it leads, and a client that followed its stale answer would fetch from a shorter
    log and reset its position. Only the same topic (same id) is compared."""
    topics = dict(new.topics)
    changed = False
    for name, fresh in new.topics.items():
        before = old.topics.get(name)
        if (
            before is None
            or before.topic_id != fresh.topic_id
            or fresh.topic_id is None
            or len(before.partitions) > len(fresh.partitions)
        ):
            continue
        parts = list(fresh.partitions)
        for i, p in enumerate(before.partitions):
            if p.leader_epoch > parts[i].leader_epoch:
                parts[i] = p
                changed = True
        topics[name] = TopicView(fresh.name, fresh.topic_id, fresh.error, tuple(parts))
    if not changed:
        return new
    return ClusterView(
        brokers=new.brokers,
        topics=topics,
        controller_id=new.controller_id,
        controllers=new.controllers,
        fetched_ms=new.fetched_ms,
    )


def parse_cluster_view(answer: api.MetadataResponse, now_ms: int) -> ClusterView:
    brokers = {
        b.id: Node(b.id, b.host, b.port, b.rack)
        for b in answer.brokers
        if b.host is not None and b.port is not None
    }
    topics: dict[str, TopicView] = {}
    for t in answer.topics:
        parts = [
            PartitionInfo(
                topic=t.name,
                partition=p.partition,
                leader=None if p.leader is None or p.leader < 0 else p.leader,
                leader_epoch=p.leader_epoch,
                replicas=p.replicas,
                isr=p.isr,
                offline_replicas=tuple(r for r in p.replicas if r not in brokers),
                elr=p.eligible_leader_replicas,
            )
            for p in sorted(t.partitions, key=lambda p: p.partition)
        ]
        error = None if t.error is None else error_from_message(t.error)
        topics[t.name] = TopicView(t.name, t.topic_id, error, tuple(parts))
    return ClusterView(
        brokers=brokers,
        topics=topics,
        controller_id=answer.controller_id,
        controllers=answer.controllers,
        fetched_ms=now_ms,
    )


class MetadataCache:
    """The client's view of the cluster, refreshed on demand. One event loop."""

    def __init__(
        self,
        transport: Transport,
        *,
        bootstrap_servers: Sequence[str],
        metadata_max_age_ms: int,
        retry_backoff_ms: int,
        request_timeout_ms: int,
    ) -> None:
        self._transport = transport
        self._bootstrap = tuple(bootstrap_servers)
        self._max_age_ms = metadata_max_age_ms
        self._backoff_ms = retry_backoff_ms
        self._request_timeout_ms = request_timeout_ms
        self.view = ClusterView()
        #: Topics this client uses; every refresh asks for all of them.
        self._topics: set[str] = set()
        self._refreshing: asyncio.Future[ClusterView] | None = None
        self._stale = True
        self._next_address = 0
        #: Brokers that failed to answer, asked last until one answers a refresh.
        self._suspects: set[str] = set()
        #: The broker that answered the last refresh, asked first while it answers:
        #: Kafka's clients prefer a node they are connected to (leastLoadedNode). With
        #: a plain rotation, a broker that hangs without refusing (paused, cut off)
        #: cost a whole request timeout every few calls, not only once.
        self._answering: str | None = None

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._topics)

    def add_topics(self, topics: Sequence[str]) -> None:
        new = set(topics) - self._topics
        if new:
            self._topics |= new
            self._stale = True

    def invalidate(self) -> None:
        self._stale = True

    def mark_suspect(self, address: str) -> None:
        """``address`` timed out or failed a connection: refresh, asking it last."""
        self._suspects.add(address)
        self._stale = True

    @property
    def suspects(self) -> frozenset[str]:
        return frozenset(self._suspects)

    def needs_refresh(self, now_ms: int) -> bool:
        return (
            self._stale
            or self.view.fetched_ms < 0
            or now_ms - self.view.fetched_ms >= self._max_age_ms
        )

    def broker_addresses(self) -> list[str]:
        """Known brokers and the bootstrap servers, rotated on each call (whom to ask
        for something any broker answers)."""
        return self._addresses()

    def _addresses(self) -> list[str]:
        known = [f"{n.host}:{n.port}" for n in self.view.brokers.values()]
        ordered = list(dict.fromkeys([*known, *self._bootstrap]))
        # Rotate so that a dead broker is not always asked first; suspects go last; the
        # broker that answered the last refresh goes first while it is no suspect.
        start = self._next_address % len(ordered)
        self._next_address += 1
        rotated = ordered[start:] + ordered[:start]
        first = self._answering
        if first in self._suspects or first not in rotated:
            first = None
        return (
            ([first] if first is not None else [])
            + [a for a in rotated if a not in self._suspects and a != first]
            + [a for a in rotated if a in self._suspects]
        )

    async def refresh(self, *, all_topics: bool = False) -> ClusterView:
        """Fetch metadata (sharing an in-flight refresh). Tries every known broker once
        and raises the last error if none answers."""
        if self._refreshing is not None and not all_topics:
            return await asyncio.shield(self._refreshing)
        future: asyncio.Future[ClusterView] = asyncio.get_running_loop().create_future()
        if not all_topics:
            self._refreshing = future
        try:
            view = await self._fetch(all_topics)
        except BaseException as e:
            if not future.done():
                future.set_exception(e)
                future.exception()  # mark retrieved: the caller raises it
            raise
        finally:
            if self._refreshing is future:
                self._refreshing = None
        future.set_result(view)
        return view

    async def refresh_with_backoff(self) -> None:
        """A refresh for a background loop (the producer's sender, the consumer's
        fetcher): a failure is not raised but followed by a ``retry_backoff_ms`` pause,
        so a loop that starts the next refresh when this one ends does not spin while
        every broker refuses."""
        try:
            await self.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
            await asyncio.sleep(self._backoff_ms / 1000)  # a backoff, not synchronisation

    async def _fetch(self, all_topics: bool) -> ClusterView:
        params = None if all_topics else {"topics": ",".join(sorted(self._topics))}
        last: KafkaError = NetworkError("no broker to ask for metadata")
        for address in self._addresses():
            try:
                answer = await self._transport.request_message(
                    address, "GET", "/v1/metadata", api.MetadataResponse, params=params
                )
            except KafkaError as e:
                last = e
                if isinstance(e, NetworkError | RequestTimedOutError):
                    self._suspects.add(address)
                if address == self._answering:
                    self._answering = None
                continue
            self._suspects.discard(address)
            self._answering = address
            view = keep_newer_leaders(self.view, parse_cluster_view(answer, monotonic_ms()))
            if not all_topics:
                self.view = view
                self._stale = False
            return view
        raise last

    def cached_topic(self, topic: str, now_ms: int) -> TopicView | None:
        """The topic's metadata if ``wait_for_topic`` would return it at once (the
        topic is tracked, the view fresh, the topic usable), else None. No I/O and
        no waiting: the producer's per-record fast path."""
        if topic not in self._topics or self.needs_refresh(now_ms):
            return None
        cached = self.view.topics.get(topic)
        if cached is None or cached.error is not None or not cached.partitions:
            return None
        return cached

    async def wait_for_topic(self, topic: str, deadline_ms: int) -> TopicView:
        """The topic's metadata with at least one partition, refreshing with backoff
        until ``deadline_ms``; then the last error (UnknownTopicOrPartitionError if the
        cluster said it has no such topic, else KafkaTimeoutError). A topic the
        principal may not DESCRIBE raises TopicAuthorizationFailedError at once, as
        Kafka's clients do: waiting would not change the ACLs' answer."""
        self.add_topics([topic])
        last: KafkaError | None = None
        while True:
            now = monotonic_ms()
            cached = self.view.topics.get(topic)
            usable = cached is not None and cached.error is None and bool(cached.partitions)
            if usable and cached is not None and not self.needs_refresh(now):
                return cached
            if now >= deadline_ms:
                if isinstance(last, UnknownTopicOrPartitionError):
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} not present in metadata after waiting: {last.message}"
                    )
                raise KafkaTimeoutError(
                    f"topic {topic!r} not present in metadata in time"
                    + (f" (last error: {last})" if last is not None else "")
                )
            try:
                view = await asyncio.wait_for(
                    self.refresh(), timeout=max(deadline_ms - now, 1) / 1000
                )
            except TimeoutError:
                continue
            except KafkaError as e:
                last = e
                view = self.view
                if cached is not None and cached.error is None and cached.partitions:
                    return cached  # stale but usable: a request will tell if it moved
            found = view.topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return found
            if found is not None and found.error is not None:
                if isinstance(found.error, AuthorizationError):
                    raise found.error
                last = found.error
            await asyncio.sleep(min(self._backoff_ms, max(deadline_ms - monotonic_ms(), 0)) / 1000)


# ---------------------------------------------------------------------------------------
# Leaving a silent leader


async def await_unless_leader_moved(
    request: Awaitable[M],
    *,
    metadata: MetadataCache,
    broker_id: int,
    address: str,
    partitions: Collection[TopicPartition],
    check_after_ms: int,
) -> M:
    """The answer of ``request`` to the leader ``broker_id`` of ``partitions``; but if
    it has not come after ``check_after_ms``, the broker is suspect and the metadata is
    refreshed (every LEADER_CHECK_MS while it waits): once the metadata names another
    leader for one of ``partitions``, the request is cancelled and NetworkError raised,
    so the caller retries at the new leader (an idempotent producer's batch under the
    same sequence) instead of waiting for a zombie. A request that fails to connect, is
    reset or times out marks the broker suspect too.

    The request is awaited in the caller's task and the check is a timer: an answer
    that comes in time costs no extra task and no extra event-loop turns. (Wrapping
    every request in its own task and ``asyncio.wait`` cost three loop turns per
    request; the perf producer enqueues a batch of records per turn, so acks=all
    latency rose from ~65 ms to ~240 ms at the same throughput.)"""
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()
    assert caller is not None
    moved: list[NetworkError] = []
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        while True:
            metadata.mark_suspect(address)
            refresh = asyncio.ensure_future(metadata.refresh())
            # The refresh may outlive this request: never leave its error unretrieved.
            refresh.add_done_callback(_retrieve)
            await asyncio.wait({refresh})
            gone = [
                tp
                for tp in partitions
                if (leader := metadata.view.leader_address(tp)) is not None
                and leader[0] != broker_id
            ]
            if gone:
                moved.append(
                    NetworkError(
                        f"{address} (broker {broker_id}) gave no answer and is no longer the "
                        f"leader of {', '.join(str(tp) for tp in gone)}; retrying at the new "
                        "leader"
                    )
                )
                caller.cancel()
                return
            await asyncio.sleep(LEADER_CHECK_MS / 1000)  # the next check, not synchronisation

    def start_watch() -> None:
        nonlocal watcher
        watcher = loop.create_task(watch())

    timer = loop.call_later(check_after_ms / 1000, start_watch)
    try:
        answer = await request
    except asyncio.CancelledError:
        # Our own cancel (the leader moved) becomes NetworkError; a cancel from
        # elsewhere (or as well) stays a cancel.
        if moved and caller.uncancel() == 0:
            raise moved[0] from None
        raise
    except (NetworkError, RequestTimedOutError):
        metadata.mark_suspect(address)
        if moved:
            caller.uncancel()  # as below: the request turned the cancel into this error
        raise
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
    if moved:
        # The watcher's cancel reached a request that swallowed it and answered: keep
        # the answer, and take back the cancel so that the caller's task does not
        # count it (asyncio.timeout reads that count).
        caller.uncancel()
    return answer


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


# ---------------------------------------------------------------------------------------
# ListOffsets: used by the consumer (positions) and the admin (list_offsets)

#: Kafka's ListOffsets sentinel timestamps.
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int | None


async def list_offsets(
    transport: Transport,
    metadata: MetadataCache,
    timestamps: Mapping[TopicPartition, int],
    *,
    deadline_ms: int,
    retry_backoff_ms: int,
    isolation_level: int = 0,
) -> dict[TopicPartition, ListedOffset]:
    """ListOffsets for each partition at its leader, retrying retriable errors
    (refreshing metadata) until ``deadline_ms``; then KafkaTimeoutError naming the last
    error. A non-retriable per-partition error is raised as is. ``isolation_level`` 1
    (read_committed): "latest" is the last stable offset."""
    metadata.add_topics(sorted({tp.topic for tp in timestamps}))
    remaining = dict(timestamps)
    results: dict[TopicPartition, ListedOffset] = {}
    last: KafkaError | None = None
    while remaining:
        if metadata.needs_refresh(monotonic_ms()) or any(
            metadata.view.leader_address(tp) is None for tp in remaining
        ):
            try:
                await metadata.refresh()
            except KafkaError as e:
                last = e
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in remaining:
            leader = metadata.view.leader_address(tp)
            if leader is None:
                topic = metadata.view.topics.get(tp.topic)
                if topic is not None and isinstance(topic.error, AuthorizationError):
                    raise topic.error  # not DESCRIBE: no wait changes the ACLs' answer
                if topic is not None and topic.error is not None:
                    last = topic.error
                elif topic is not None and tp.partition >= len(topic.partitions):
                    last = UnknownTopicOrPartitionError(f"{tp} does not exist")
                else:
                    last = last or KafkaTimeoutError(f"no leader known for {tp}")
                continue
            by_leader.setdefault(leader[1], []).append(tp)
        for address, tps in by_leader.items():
            request = api.ListOffsetsRequest(
                isolation_level=isolation_level,
                partitions=tuple(
                    api.ListOffsetsPartition(
                        topic=tp.topic, partition=tp.partition, timestamp=remaining[tp]
                    )
                    for tp in tps
                ),
            )
            timeout = max(1, min(transport.request_timeout_ms, deadline_ms - monotonic_ms()))
            try:
                answer = await transport.request_message(
                    address,
                    "POST",
                    "/v1/list-offsets",
                    api.ListOffsetsResponse,
                    message=request,
                    timeout_ms=timeout,
                )
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
                metadata.invalidate()
                continue
            for r in answer.responses:
                tp = TopicPartition(r.topic, r.partition)
                if tp not in remaining:
                    continue
                if r.error is not None:
                    error = error_from_message(r.error)
                    if not error.retriable:
                        raise error
                    last = error
                    metadata.invalidate()
                    continue
                results[tp] = ListedOffset(r.offset, r.timestamp, r.leader_epoch)
                del remaining[tp]
        if not remaining:
            break
        now = monotonic_ms()
        if now >= deadline_ms:
            if isinstance(last, UnknownTopicOrPartitionError):
                raise UnknownTopicOrPartitionError(
                    f"list offsets for {sorted(map(str, remaining))}: {last.message}"
                )
            raise KafkaTimeoutError(
                f"list offsets for {sorted(map(str, remaining))} did not complete in time"
                + (f"; last error: {last}" if last is not None else "")
            )
        await asyncio.sleep(min(retry_backoff_ms, deadline_ms - now) / 1000)
    return results
