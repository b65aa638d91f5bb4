"""The Kafka listener: an asyncio server speaking Kafka's binary protocol.

Theory of operation: each connection has a reader (this module's
:meth:`KafkaListener._serve`) and a writer task. The reader takes one frame at a time
(:mod:`.framing`), starts its handler as a task and queues that task; the writer
awaits the queued tasks in order and writes each answer, so responses leave strictly in
request order while later requests are already being handled (pipelining). Produce
requests of one connection run one after another (each waits for the previous one to
finish), as Kafka's muted channel runs them, so an idempotent producer's batches reach
the log in the order it sent them. A connection holds at most
:data:`IN_FLIGHT_MAX` requests; the reader stops reading until the writer catches up.

Limits, with Kafka's names: ``socket.request.max.bytes`` (a larger declared size
closes the connection, as Kafka does), ``connections.max.idle.ms`` (no request and
none in flight for that long closes it), ``max.connections`` (a connection beyond it is
closed at once; Kafka's acceptor waits instead, see docs/kafka-protocol.md).
A frame that does not parse, an unknown API key or an unsupported version of an API
other than ApiVersions closes the connection (Kafka's behaviour); nothing else of the
broker is affected.

On a SASL_PLAINTEXT or SASL_SSL listener every connection first authenticates
(:mod:`.authentication`): a request out of turn closes it, frames are bounded by
``sasl.server.max.receive.size`` until it has, and each SaslHandshake/SaslAuthenticate
is answered before the next frame is read, so the exchange moves one step at a time;
a failed step is answered, then the connection is closed.

On an SSL listener that asks for client certificates (``ssl.client.auth=required`` or
``requested``), a connection whose client sent one is that certificate's principal
(:mod:`raftka.server_common.ssl_principal`, ``ssl.principal.mapping.rules``); a
certificate no rule maps fails authentication and the connection is closed before any
request is read, as Kafka does. Without a certificate the principal is
``User:ANONYMOUS``. A TLS handshake the listener refuses (no certificate where one is
required, another CA, not TLS) never reaches this module, but is counted as a failed
authentication all the same (:func:`raftka.server_common.tls.on_handshake_failure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

from raftka.broker.config import KafkaListenerConfig
from raftka.broker.kafka import apis
from raftka.broker.kafka.authentication import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    ConnectionAuth,
)
from raftka.broker.kafka.framing import SIZE, FrameError, frame_size, parse_fixed
from raftka.server_common.metrics import RequestMetrics, RequestTimer
from raftka.server_common.sasl import ScramCredential
from raftka.server_common.ssl_principal import NoMatchingRuleError, subject_name
from raftka.server_common.tls import on_handshake_failure

if TYPE_CHECKING:
    from raftka.broker.server import BrokerServer

__all__ = ["IN_FLIGHT_MAX", "KafkaListener"]

log = logging.getLogger(__name__)

#: A request's handler task and its timer, queued for the connection's writer.
_Answer = tuple["asyncio.Task[bytes | None]", RequestTimer]

#: Requests one connection may have in flight (read, answer not yet written).
IN_FLIGHT_MAX: Final = 64
#: How long close() waits for the connections to wind down after their sockets close.
CLOSE_WAIT_S: Final = 5.0


class KafkaListener:
    """One broker's Kafka listener; :meth:`start` binds, :meth:`close` stops."""

    def __init__(self, server: BrokerServer, config: KafkaListenerConfig) -> None:
        self._config = config
        self._apis = apis.KafkaApis(server)
        self._metrics = server.metrics.requests
        self._server: asyncio.Server | None = None
        #: open connections: their serving task and writer
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        # Read by the broker's metrics (kafka_server_socketservermetrics_*).
        self.connections_refused = 0
        self.authentication_failures = 0
        self.authentication_successes = 0
        # KIP-368: completed re-authentications, and connections closed for using an
        # expired session (Kafka's successful-reauthentication-total and
        # expired-connections-killed-count).
        self.reauthentication_successes = 0
        self.expired_connections_killed = 0
        # SCRAM's stand-in credential for unknown users derives from this (sasl.py), so
        # a prober sees the same salt for a user on every try against this broker.
        self._sasl_secret = os.urandom(32)

        def lookup(user: str, mechanism: str) -> ScramCredential | None:
            # The image of the moment: a user added or removed counts at once.
            return server.manager.image.scram_credential(user, mechanism)

        self._lookup = lookup
        if config.ssl_context is not None:
            on_handshake_failure(config.ssl_context, self._handshake_failed)

    def _handshake_failed(self, error: ssl.SSLError) -> None:
        # Kafka counts a failed TLS handshake as a failed authentication.
        self.authentication_failures += 1
        log.debug("kafka connection: TLS handshake failed", extra={"fields": {"error": str(error)}})

    @property
    def security_protocol(self) -> str:
        """The listener's name (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."""
        return self._config.security_protocol

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _new_auth(self) -> ConnectionAuth | None:
        if not self._config.sasl_mechanisms:
            return None
        return ConnectionAuth(
            self._config.sasl_mechanisms,
            self._lookup,
            secret=self._sasl_secret,
            reauth_ms=self._config.connections_max_reauth_ms,
        )

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the kernel's pick for port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept,
            self._config.host,
            self._config.port,
            reuse_address=True,
            # SSL: every connection's TLS handshake comes first (a failed one never
            # reaches _accept); the context was built, files loaded, from the config.
            ssl=self._config.ssl_context,
        )
        log.info(
            "kafka listener",
            extra={
                "fields": {
                    "listen": f"{self._config.host}:{self._config.port}",
                    "security_protocol": self._config.security_protocol,
                }
            },
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing the sockets ends each connection's loop (never cancel the tasks
        # asyncio's start_server made: Python 3.11 logs their cancellation as an error).
        tasks = list(self._connections)
        for writer in self._connections.values():
            writer.transport.abort()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self._config.max_connections:
            self.connections_refused += 1
            log.warning(
                "kafka connection refused: max.connections",
                extra={"fields": {"max_connections": self._config.max_connections}},
            )
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else "unknown"
        try:
            tls_principal = self._certificate_principal(writer, host)
            await self._serve(reader, writer, host, tls_principal)
        except FrameError as e:
            log.info("kafka connection closed", extra={"fields": {"peer": host, "reason": str(e)}})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _certificate_principal(self, writer: asyncio.StreamWriter, host: str) -> str | None:
        """The principal of the client's certificate (None: no mapper, or no certificate
        sent); FrameError, counted as a failed authentication, when no rule maps it."""
        mapper = self._config.principal_mapper
        if mapper is None:
            return None
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return None
        try:
            principal = mapper.principal(subject_name(der))
        except NoMatchingRuleError as e:
            self.authentication_failures += 1
            raise FrameError(f"TLS authentication failed: {e}") from None
        self.authentication_successes += 1
        log.debug("kafka connection authenticated", extra={"fields": {"peer": host}})
        return principal

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        tls_principal: str | None = None,
    ) -> None:
        answers: asyncio.Queue[_Answer | None] = asyncio.Queue()
        slots = asyncio.Semaphore(IN_FLIGHT_MAX)
        write_task = asyncio.create_task(_write_in_order(answers, writer, slots, self._metrics))
        last_produce: asyncio.Task[bytes | None] | None = None
        idle_s = self._config.connections_max_idle_ms / 1000
        auth = self._new_auth()
        max_bytes = self._config.socket_request_max_bytes
        ended = False
        try:
            while True:
                prefix = await self._next_prefix(reader, slots, idle_s, write_task)
                if prefix is None:
                    ended = True
                    return
                limit, name = (
                    (max_bytes, "socket.request.max.bytes")
                    if auth is None
                    else auth.frame_limit(max_bytes)
                )
                size = frame_size(prefix, limit, name)
                frame = await reader.readexactly(size)
                # Its arrival: its queue time runs from here to its handler's start.
                timer = RequestTimer(time.perf_counter())
                if auth is not None and auth.unframed:
                    # After SaslHandshake v0: a bare token, answered bare, in turn.
                    await slots.acquire()
                    task = asyncio.create_task(_unframed_step(auth, frame, timer))
                    answers.put_nowait((task, timer))
                    if not await self._after_sasl_step(auth, task, host):
                        ended = True
                        return
                    continue
                key, version, _ = parse_fixed(frame)
                if auth is not None and key != SASL_HANDSHAKE_KEY and auth.expired():
                    # KIP-368: only a re-authentication may use an expired session.
                    self.expired_connections_killed += 1
                    log.info(
                        "kafka connection closed: its SASL session expired",
                        extra={"fields": {"peer": host, "api_key": key}},
                    )
                    ended = True
                    return
                if auth is not None and not auth.allows(key):
                    self.authentication_failures += 1
                    raise FrameError(
                        f"api key {key} is not allowed "
                        f"{'after' if auth.authenticated else 'before'} SASL authentication"
                    )
                # A slot first: no coroutine is made that a close could leave unawaited.
                await slots.acquire()
                call = self._apis.prepare(
                    frame, key, version, host, timer, auth=auth, tls_principal=tls_principal
                )
                if key == apis.PRODUCE_KEY:
                    # Produce requests of one connection append in the order sent.
                    call = _after(last_produce, call)
                task = asyncio.create_task(call)
                if key == apis.PRODUCE_KEY:
                    last_produce = task
                answers.put_nowait((task, timer))
                sasl_step = key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
                if (
                    auth is not None
                    and sasl_step
                    and not await self._after_sasl_step(auth, task, host)
                ):
                    ended = True
                    return
        finally:
            answers.put_nowait(None)
            if ended and not write_task.done():
                # The client stopped sending: what it sent before still gets answered.
                await write_task
            elif write_task.done():
                write_task.result()
            else:
                # The connection broke: stop writing (pending handlers are cancelled).
                write_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await write_task

    async def _after_sasl_step(
        self, auth: ConnectionAuth, task: asyncio.Task[bytes | None], host: str
    ) -> bool:
        """Wait for one SASL step (the state it leaves decides how the next frame is
        read) and count its outcome; False when it failed and the connection ends."""
        was_authenticated = auth.authenticated
        reauthentications = auth.reauthentications
        await asyncio.wait({task})
        if auth.reauthentications > reauthentications:
            self.reauthentication_successes += 1
        elif auth.authenticated and not was_authenticated:
            self.authentication_successes += 1
        if not auth.failed:
            return True
        self.authentication_failures += 1
        log.info(
            "kafka connection closed: SASL authentication failed",
            extra={"fields": {"peer": host}},
        )
        # Kafka's connection.failed.authentication.delay.ms: the answer goes out now,
        # the close comes later, which slows a password guesser down and lets the client
        # read the error before the connection ends.
        await asyncio.sleep(self._config.failed_authentication_delay_ms / 1000)
        return False

    async def _next_prefix(
        self,
        reader: asyncio.StreamReader,
        slots: asyncio.Semaphore,
        idle_s: float,
        write_task: asyncio.Task[None],
    ) -> bytes | None:
        """The next size prefix; None at end of stream or when the connection was idle
        (nothing received and nothing in flight) for connections.max.idle.ms."""
        while True:
            read = asyncio.ensure_future(reader.readexactly(SIZE.size))
            done, _ = await asyncio.wait(
                {read, write_task}, timeout=idle_s, return_when=asyncio.FIRST_COMPLETED
            )
            if write_task in done:
                await _cancelled(read)
                write_task.result()  # a write failed: raise it
                return None
            if read in done:
                try:
                    return read.result()
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise FrameError("connection closed inside a size prefix") from None
                    return None
            await _cancelled(read)
            in_flight = IN_FLIGHT_MAX - _free(slots)
            if in_flight == 0:
                raise FrameError(f"idle for connections.max.idle.ms ({int(idle_s * 1000)} ms)")


async def _cancelled(read: asyncio.Future[bytes]) -> None:
    """Cancel a pending read and collect its outcome (whatever it was)."""
    read.cancel()
    with contextlib.suppress(asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError):
        await read


def _free(slots: asyncio.Semaphore) -> int:
    # asyncio.Semaphore has no public count; its _value is stable CPython API.
    return slots._value


async def _after(
    previous: asyncio.Task[bytes | None] | None, call: Coroutine[Any, Any, bytes | None]
) -> bytes | None:
    if previous is not None and not previous.done():
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.shield(previous)
    return await call


async def _unframed_step(auth: ConnectionAuth, token: bytes, timer: RequestTimer) -> bytes | None:
    """One unframed SASL token (after SaslHandshake v0) and its unframed answer; None
    (nothing sent: v0 has no way to say why) when it failed."""
    timer.api = "SaslAuthenticate"
    timer.started = time.perf_counter()
    try:
        answer = auth.authenticate(token)
    except Exception:  # the failure is in auth.failed; the listener closes
        answer = None
    timer.ready = time.perf_counter()
    return None if answer is None else SIZE.pack(len(answer)) + answer


async def _write_in_order(
    answers: asyncio.Queue[_Answer | None],
    writer: asyncio.StreamWriter,
    slots: asyncio.Semaphore,
    metrics: RequestMetrics,
) -> None:
    """Write each queued request's answer in request order (None: none, acks=0), and
    record its times once sent (the response queue: ready until taken here)."""
    try:
        while True:
            answer = await answers.get()
            if answer is None:
                return
            task, timer = answer
            try:
                frame = await task
            except BaseException:
                timer.picked = time.perf_counter()
                metrics.record(timer, timer.picked, response_queue=True)
                raise
            finally:
                slots.release()
            timer.picked = time.perf_counter()
            if frame is not None:
                writer.write(frame)
                await writer.drain()
            metrics.record(timer, time.perf_counter(), response_queue=True)
    finally:
        # Handlers still running belong to a closed connection.
        while not answers.empty():
            pending = answers.get_nowait()
            if pending is not None:
                pending[0].cancel()
