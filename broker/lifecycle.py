"""A broker's life with the controllers: registration, heartbeats, controlled shutdown.

:class:`ControllerChannel` sends a write to the *active* controller: it remembers the
last one that answered, follows ``NOT_CONTROLLER`` redirects (``leader_address``) of
the newest quorum epoch it knows, and on a connection error, a silent controller (each
attempt has its own timeout within the request's deadline) or an election in progress
moves to the next controller after a backoff, until the request's deadline. Errors
other than those come back as the matching :class:`KafkaError`.

:class:`BrokerLifecycle` (Kafka's BrokerLifecycleManager):

1. ``register()``: POST /v1/brokers/register with a fresh incarnation id (one per
   process start, as Kafka's), retried until it succeeds: a restarted broker whose
   previous incarnation's session is still alive gets DUPLICATE_BROKER_REGISTRATION
   until the controller fences that session, and then registers. The answer is the
   broker epoch; the broker starts fenced.
2. ``run_heartbeats()``: every ``broker.heartbeat.interval.ms`` a heartbeat with the
   offset of the last metadata payload applied; the controller unfences the broker
   once that offset reaches its epoch. STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED
   (the controller lost or replaced our registration) make it register again.
3. ``controlled_shutdown(timeout_ms)``: heartbeats with ``want_shutdown`` until the
   controller answers ``should_shutdown`` (it has moved our leaderships away and every
   active broker has seen that) or the bound passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import aiohttp
import orjson

from raftka.common.errors import (
    BrokerIdNotRegisteredError,
    KafkaError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    UnknownServerError,
    error_for_name,
)
from raftka.common.messages import Message, decode_value, encode
from raftka.common.messages.controller import (
    QUORUM_EPOCH_HEADER,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    EndpointData,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from raftka.common.time import monotonic_ms
from raftka.server_common.metrics import add_remote
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp

__all__ = ["BrokerLifecycle", "ControllerChannel"]

log = logging.getLogger(__name__)

#: Backoff bounds between attempts at the controllers.
RETRY_BACKOFF_MIN_MS: Final = 50
RETRY_BACKOFF_MAX_MS: Final = 1_000
#: Bound on redirects followed for one attempt (a redirect loop during an election).
REDIRECTS_MAX: Final = 3
#: Default bound on one attempt at one controller (Kafka's
#: ``controller.quorum.request.timeout.ms`` default); the broker passes its setting.
ATTEMPT_TIMEOUT_MS: Final = 2_000
#: How long a controller that did not answer is passed over (in the epoch it failed
#: in) before it is tried again. Forever would strand a broker whose every voter failed
#: while it was cut off: after the heal the followers' redirects name the same leader
#: in the same epoch, and without an expiry it was never tried again (its heartbeats
#: went to followers only, and the controller fenced it for good; seen in a fail-over
#: campaign after the leader-host isolations). An election, which gives a new epoch,
#: normally comes well within this.
FAILURE_MEMORY_MS: Final = 3_000
# Errors after which trying again (elsewhere, or later) may succeed.
_RETRY_NAMES: Final = frozenset(
    {"NOT_CONTROLLER", "REQUEST_TIMED_OUT", "LEADER_NOT_AVAILABLE", "UNKNOWN_SERVER_ERROR"}
)


class ControllerChannel:
    """Writes to the active controller, with redirects and retries.

    What it knows of the quorum: the highest quorum epoch any controller's answer named
    (the ``Raftka-Quorum-Epoch`` header of every answer, ``leader_epoch`` of a
    NOT_CONTROLLER body), the controller that last answered as the active one, and each
    controller that last failed to answer, with the epoch known then. A redirect is
    followed only when it is of the known epoch or newer and does not name a controller
    that failed us in that epoch within the last ``failure_memory_ms``: voters that
    have not yet noticed a dead leader keep pointing at it until they elect another,
    and following them there would spend every attempt on the dead node (issue #19,
    brokers fenced after a controller failover). For the same reason, when no active
    controller is known, the next voter tried is one that has not failed recently in
    the known epoch. The memory expires so that a broker cut off from every voter
    finds the same leader again once the partition heals. Each attempt gets
    at most ``attempt_timeout_ms`` and never more than what is left of the caller's
    deadline, so a silent controller costs one short attempt (with ``raftka up``'s
    settings that is the whole heartbeat: both are 1 s). A 200 stamped with an epoch
    older than the known one (a deposed leader that has not heard yet) is returned but
    not remembered as the active controller.
    """

    def __init__(
        self,
        controllers: Sequence[str],
        session: aiohttp.ClientSession,
        *,
        attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS,
        failure_memory_ms: int = FAILURE_MEMORY_MS,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        assert controllers
        self._http = http
        assert attempt_timeout_ms > 0, attempt_timeout_ms
        assert failure_memory_ms >= 0, failure_memory_ms
        self._controllers = list(controllers)
        self._active: str | None = None
        self._index = 0
        self._session = session
        self._attempt_timeout_ms = attempt_timeout_ms
        #: The highest quorum epoch seen in any controller's answer (-1 before any).
        self.known_epoch = -1
        self._failure_memory_ms = failure_memory_ms
        #: Controllers that did not answer: the epoch known when they failed, and when.
        self._failed_in_epoch: dict[str, tuple[int, int]] = {}

    @property
    def active_address(self) -> str | None:
        """The controller that last answered as the active one (None if unknown)."""
        return self._active

    def _learn_epoch(self, epoch: object) -> None:
        if isinstance(epoch, int) and epoch > self.known_epoch:
            self.known_epoch = epoch

    def _failed_recently(self, address: str, epoch: int) -> bool:
        """Whether ``address`` failed to answer in ``epoch`` (or later) within the
        failure memory (a later epoch may have a new leader there, and a failure long
        ago may have been a partition that healed: both are worth a try again)."""
        failed = self._failed_in_epoch.get(address)
        return (
            failed is not None
            and failed[0] >= epoch
            and monotonic_ms() - failed[1] < self._failure_memory_ms
        )

    def _failed_now(self, address: str) -> bool:
        return self._failed_recently(address, self.known_epoch)

    def _next_address(self) -> str:
        """The active controller if known, else the next voter in turn that has not
        failed us in the known epoch (any, when all have). Taking the next index blindly
        could name the controller that just failed again: the index does not move when a
        redirect or an answer finds the active one, so after "B answered, B went silent"
        the next index may well be B's, and each heartbeat spent on a silent controller
        costs a whole heartbeat deadline (issue #19: two heartbeats in a row at a paused
        controller, and the new one fenced every broker one session after it took over)."""
        if self._active is not None:
            return self._active
        count = len(self._controllers)
        for step in range(count):
            address = self._controllers[(self._index + step) % count]
            if not self._failed_now(address):
                self._index += step
                return address
        return self._controllers[self._index % count]

    def _should_follow(self, leader: object, leader_epoch: object, address: str) -> bool:
        """Whether a NOT_CONTROLLER answer's redirect is worth an attempt."""
        if not isinstance(leader, str) or leader == address:
            return False
        epoch = leader_epoch if isinstance(leader_epoch, int) else -1
        if epoch < self.known_epoch:
            return False  # an older leadership than one we have seen: not active
        return not self._failed_recently(leader, epoch)

    async def _post_once(
        self, address: str, path: str, body: bytes, timeout_ms: int, method: str = "POST"
    ) -> tuple[int, Any, int | None]:
        """The status, the decoded body and the quorum epoch the answer names."""
        timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000)
        async with self._session.request(
            method,
            self._http.url(address, path),
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=timeout,
        ) as response:
            raw = await response.read()
            header = response.headers.get(QUORUM_EPOCH_HEADER, "")
            epoch = int(header) if header.lstrip("-").isdigit() else None
            self._learn_epoch(epoch)
            return response.status, orjson.loads(raw) if raw else {}, epoch

    async def post(
        self,
        path: str,
        body: Message | Mapping[str, Any],
        *,
        timeout_ms: int,
        retry_names: frozenset[str] = _RETRY_NAMES,
        method: str = "POST",
    ) -> dict[str, Any]:
        """:meth:`_post`; a request forwarded to the controller counts the wait as its
        remote time (Kafka's RemoteTimeMs of a forwarded admin request)."""
        parked = time.perf_counter()
        try:
            return await self._post(
                path, body, timeout_ms=timeout_ms, retry_names=retry_names, method=method
            )
        finally:
            add_remote(time.perf_counter() - parked)

    async def _post(
        self,
        path: str,
        body: Message | Mapping[str, Any],
        *,
        timeout_ms: int,
        retry_names: frozenset[str],
        method: str,
    ) -> dict[str, Any]:
        """The answer of the active controller, or the KafkaError it sent (one not in
        ``retry_names``); RequestTimedOutError once ``timeout_ms`` has passed. ``body``
        is a message of ``raftka.common.messages.controller`` (or its plain form);
        ``method`` is the route's (``DELETE /v1/topics``)."""
        data = encode(body)
        deadline_ms = monotonic_ms() + timeout_ms
        backoff_ms = RETRY_BACKOFF_MIN_MS
        last = "no attempt"
        while True:
            address = self._next_address()
            redirects = 0
            while True:
                remaining = deadline_ms - monotonic_ms()
                if remaining <= 0:
                    break
                try:
                    status, answer, epoch = await self._post_once(
                        address, path, data, min(self._attempt_timeout_ms, remaining), method
                    )
                except (aiohttp.ClientError, TimeoutError, OSError, orjson.JSONDecodeError) as e:
                    last = f"{address}: {type(e).__name__}: {e}"
                    self._failed_in_epoch[address] = (self.known_epoch, monotonic_ms())
                    if self._active == address:
                        self._active = None
                    self._index += 1
                    break
                self._failed_in_epoch.pop(address, None)
                if status == 200 and isinstance(answer, dict):
                    if epoch is not None and epoch < self.known_epoch:
                        # A deposed leader that has not heard of the newer epoch yet
                        # (a paused one just resumed): its answer stands (a write it
                        # answered was committed), but it is not the active controller,
                        # and heartbeats that stuck to it would never reach the one that
                        # is, which fences every broker a session after it took over.
                        if self._active == address:
                            self._active = None
                        self._index += 1
                    else:
                        self._active = address
                    return answer
                name = answer.get("error") if isinstance(answer, dict) else None
                message = answer.get("message", "") if isinstance(answer, dict) else ""
                last = f"{address}: {name}: {message}"
                if name == NotControllerError.name:
                    leader = answer.get("leader_address")
                    leader_epoch = answer.get("leader_epoch")
                    follow = self._should_follow(leader, leader_epoch, address)
                    self._learn_epoch(leader_epoch)
                    self._active = None
                    if follow and redirects < REDIRECTS_MAX:
                        assert isinstance(leader, str)
                        redirects += 1
                        address = leader
                        continue
                    self._index += 1
                    break
                if isinstance(name, str) and name not in retry_names:
                    self._active = address
                    raise error_for_name(name, str(message))
                if name is None:
                    raise UnknownServerError(f"{address}{path}: HTTP {status}")
                break
            remaining = deadline_ms - monotonic_ms()
            if remaining <= 0:
                raise RequestTimedOutError(f"{path}: no controller answered in time ({last})")
            await asyncio.sleep(min(backoff_ms, remaining) / 1000)  # backoff between attempts
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MAX_MS)


class BrokerLifecycle:
    """Registration, heartbeats and controlled shutdown of one broker."""

    def __init__(
        self,
        *,
        broker_id: int,
        channel: ControllerChannel,
        endpoint: tuple[str, str, int],
        rack: str | None,
        metadata_offset: Callable[[], int],
        heartbeat_interval_ms: int,
        request_timeout_ms: int,
        extra_endpoints: tuple[tuple[str, str, int], ...] = (),
        clean_shutdown: bool = False,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation_id = str(uuid.uuid4())
        self.broker_epoch: int | None = None
        self.is_fenced = True
        self.in_controlled_shutdown = False
        self._channel = channel
        self._endpoint = endpoint
        # Registered after the HTTP endpoint, which stays first (peers fall back to
        # endpoints[0] for it): the Kafka listener's (raftka.broker.kafka).
        self._extra_endpoints = extra_endpoints
        self._rack = rack
        self._metadata_offset = metadata_offset
        self._interval_ms = heartbeat_interval_ms
        self._request_timeout_ms = request_timeout_ms
        # The first registration reports how the previous run ended; a later one of
        # this same process (after a lost session) lost no records.
        self._clean_shutdown = clean_shutdown
        self.registered = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._shutting_down = False

    async def register(self) -> int:
        """Register until it succeeds; returns the broker epoch."""
        name, host, port = self._endpoint
        body = RegisterBrokerRequest(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            rack=self._rack,
            clean_shutdown=self._clean_shutdown,
            endpoints=[
                EndpointData(name=name, host=host, port=port),
                *(EndpointData(name=n, host=h, port=p) for n, h, p in self._extra_endpoints),
            ],
        )
        while True:
            try:
                # DUPLICATE_BROKER_REGISTRATION is retriable here: it clears once the
                # controller fences our previous incarnation's session.
                answer = await self._channel.post(
                    "/v1/brokers/register",
                    body,
                    timeout_ms=self._request_timeout_ms,
                    retry_names=_RETRY_NAMES | {"DUPLICATE_BROKER_REGISTRATION"},
                )
            except RequestTimedOutError as e:
                log.warning(
                    "registration not answered; retrying", extra={"fields": {"error": str(e)}}
                )
                continue
            epoch = decode_value(answer, RegisterBrokerResponse).broker_epoch
            self.broker_epoch = epoch
            self._clean_shutdown = True
            self.is_fenced = True
            self.unfenced.clear()
            self.registered.set()
            log.info(
                "registered with the controller",
                extra={"fields": {"broker_id": self.broker_id, "broker_epoch": epoch}},
            )
            return epoch

    async def heartbeat(self, *, want_shutdown: bool = False) -> BrokerHeartbeatResponse:
        assert self.broker_epoch is not None, "register first"
        raw = await self._channel.post(
            "/v1/brokers/heartbeat",
            BrokerHeartbeatRequest(
                broker_id=self.broker_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=max(self._metadata_offset(), -1),
                want_fence=False,
                want_shutdown=want_shutdown,
            ),
            timeout_ms=min(self._request_timeout_ms, max(self._interval_ms * 2, 1_000)),
        )
        answer = decode_value(raw, BrokerHeartbeatResponse)
        was_fenced = self.is_fenced
        self.is_fenced = answer.is_fenced
        self.in_controlled_shutdown = answer.in_controlled_shutdown
        if self.is_fenced:
            self.unfenced.clear()
        else:
            self.unfenced.set()
        if was_fenced != self.is_fenced:
            log.info(
                "fencing changed",
                extra={"fields": {"fenced": self.is_fenced, "broker_epoch": self.broker_epoch}},
            )
        return answer

    async def run_heartbeats(self) -> None:
        """Heartbeat forever (until cancelled or a controlled shutdown starts)."""
        while not self._shutting_down:
            try:
                await self.heartbeat()
            except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as e:
                log.warning(
                    "registration lost; registering again", extra={"fields": {"error": str(e)}}
                )
                await self.register()
                continue
            except KafkaError as e:
                log.warning("heartbeat failed", extra={"fields": {"error": str(e)}})
            await asyncio.sleep(self._interval_ms / 1000)  # the heartbeat period

    async def controlled_shutdown(self, *, timeout_ms: int) -> bool:
        """Ask the controller to move our leaderships away; True once it agreed."""
        self._shutting_down = True
        if self.broker_epoch is None:
            return True
        deadline_ms = monotonic_ms() + timeout_ms
        # Fast at first: the controller grants it once every broker replayed the moves.
        pause_ms = min(self._interval_ms, 200)
        while monotonic_ms() < deadline_ms:
            try:
                answer = await self.heartbeat(want_shutdown=True)
                if answer.should_shutdown:
                    log.info("controlled shutdown granted")
                    return True
            except KafkaError as e:
                log.warning(
                    "controlled shutdown heartbeat failed", extra={"fields": {"error": str(e)}}
                )
            await asyncio.sleep(pause_ms / 1000)  # the heartbeat period while waiting
        log.warning(
            "controlled shutdown not granted in time", extra={"fields": {"timeout_ms": timeout_ms}}
        )
        return False
