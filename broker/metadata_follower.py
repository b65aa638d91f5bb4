"""A broker's copy of the cluster metadata: follow the controllers' committed log.

Theory of operation
-------------------
The broker long-polls ``GET /v1/metadata?offset=N&max_wait_ms=M`` on the active
controller as the heartbeats last found it (``active_controller``; as a KRaft observer
fetches from the leader), or, while none is known, on the controllers in turn (each
serves its own committed state, so any of them will do; on an error it moves to the
next one after a backoff). A fetch parked at one controller is left as soon as the
heartbeats name another: a controller cut off from the quorum answers nothing new
until it heals. The follower only reads what the heartbeats learned; it never tells
the controller channel anything. Each payload of the answer (one controller command's
records) is replayed by the rule the controllers replay it with, one function for every
node (:func:`raftka.metadata.loader.replay_payload`): a fresh :class:`MetadataDelta` per
payload, and a payload that does not replay is skipped, exactly as the controllers
skip it, so every node's image is the same. After each payload the new image and
``delta.local_changes(broker_id)`` go to the listener, in log order, before the next
payload is replayed (invariant 5: every broker applies metadata records in log order).
Except at start-up: a starting broker replays up to the high watermark and past its own
registration before the listener hears anything, and then gets the whole image at
once (see :class:`MetadataApplier`), so it never acts on a stale intermediate image.

An answer that carries a snapshot (we were behind the controller's log start) replaces
the image; the local changes are then the difference between the old and the new
image (:func:`local_changes_between`), since no delta describes it.

Requests and answers are the typed messages of ``raftka.common.messages.controller``
(:class:`FetchMetadataRequest`, :class:`FetchMetadataResponse`); payloads stay raw JSON
until the loader decodes them.

The pure part, :class:`MetadataApplier`, takes decoded answers and yields
``(image, changes)``; :class:`MetadataFollower` adds the HTTP loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import aiohttp

from raftka.common.messages import decode, encode
from raftka.common.messages.controller import (
    FetchMetadataRequest,
    FetchMetadataResponse,
    query_params,
)
from raftka.metadata.delta import LocalReplicaChanges
from raftka.metadata.image import FrozenMap, MetadataImage, PartitionRegistration, TopicIdPartition
from raftka.metadata.loader import image_from_snapshot, replay_payload
from raftka.server_common.http_errors import PEER_REQUEST_ERRORS
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp

__all__ = [
    "METADATA_WAIT_MS",
    "MetadataApplier",
    "MetadataFollower",
    "MetadataUpdate",
    "local_changes_between",
]

log = logging.getLogger(__name__)

#: How long one metadata fetch parks on the controller when there is nothing new.
METADATA_WAIT_MS: Final = 5_000
#: Payloads per fetch (the controller's bound is 1000).
METADATA_RECORDS_PER_FETCH: Final = 500
#: Backoff after a failed fetch, before trying the next controller.
METADATA_BACKOFF_MS: Final = 200
#: How long past its max_wait_ms a fetch may take before the controller is taken as
#: unreachable. Generous: a catch-up answer carries up to 500 payloads on a loaded
#: machine; a cut-off active controller is left sooner, when the heartbeats find
#: another (see ``run``).
ATTEMPT_MARGIN_MS: Final = 5_000
#: How often a parked fetch checks whether the heartbeats found another active
#: controller (a flag read, no request).
ACTIVE_CHECK_MS: Final = 100


MetadataUpdate = tuple[MetadataImage, LocalReplicaChanges]


def local_changes_between(
    old: MetadataImage, new: MetadataImage, broker_id: int
) -> LocalReplicaChanges:
    """What ``broker_id`` must do when its image jumps from ``old`` to ``new`` (a
    snapshot): the same answer a delta would give for the records in between."""
    leaders: dict[TopicIdPartition, PartitionRegistration] = {}
    followers: dict[TopicIdPartition, PartitionRegistration] = {}
    deletes: set[TopicIdPartition] = set()
    for topic_id, topic in new.topics.by_id.items():
        old_topic = old.topics.by_id.get(topic_id)
        for index, reg in topic.partitions.items():
            previous = None if old_topic is None else old_topic.partitions.get(index)
            if previous == reg:
                continue
            tp = TopicIdPartition(topic_id, topic.name, index)
            if broker_id not in reg.replicas:
                if previous is not None and broker_id in previous.replicas:
                    deletes.add(tp)
            elif reg.leader == broker_id:
                leaders[tp] = reg
            else:
                followers[tp] = reg
    for topic_id, topic in old.topics.by_id.items():
        new_topic = new.topics.by_id.get(topic_id)
        for index, reg in topic.partitions.items():
            if broker_id in reg.replicas and (
                new_topic is None or index not in new_topic.partitions
            ):
                deletes.add(TopicIdPartition(topic_id, topic.name, index))
    return LocalReplicaChanges(
        leaders=FrozenMap(leaders), followers=FrozenMap(followers), deletes=frozenset(deletes)
    )


class MetadataApplier:
    """Pure: decoded ``/v1/metadata`` answers in, ``(image, local changes)`` out.

    With ``catch_up_first`` (a starting broker) nothing is handed out until the log is
    replayed up to the high watermark of the answer being applied and past
    ``catch_up_to`` (the broker's registration offset): the first update is then the
    whole image at once, with the roles it gives this broker and every delete met on
    the way. A starting broker must not act on an intermediate image: replaying a
    partition's history payload by payload made it leader at old epochs of partitions
    it no longer led, writing those epochs into its leader-epoch cache and truncating
    replicated data later (issue #19, 3). Kafka's broker publishes its first image only
    once caught up, too. Afterwards every payload is an update of its own, in order.
    """

    def __init__(
        self,
        broker_id: int,
        image: MetadataImage = MetadataImage.EMPTY,
        *,
        catch_up_first: bool = False,
        catch_up_to: Callable[[], int] = lambda: -1,
    ) -> None:
        self.broker_id = broker_id
        self.image = image
        self.next_offset = 0 if image.offset < 0 else image.offset + 1
        self.skipped_payloads = 0
        #: Whether updates flow (False while a starting broker catches up).
        self.published = not catch_up_first
        self._catch_up_to = catch_up_to
        self._published_image = image
        self._held_deletes: set[TopicIdPartition] = set()

    def apply_answer(
        self, answer: FetchMetadataResponse | Mapping[str, Any]
    ) -> Iterator[MetadataUpdate]:
        """Each update of one answer, in log order. Raises KafkaError on an answer or a
        snapshot that does not decode (the caller tries another controller). A plain
        mapping (the answer's JSON form, as tests build it) is decoded first."""
        if not isinstance(answer, FetchMetadataResponse):
            answer = decode(encode(answer), FetchMetadataResponse)
        snapshot = answer.snapshot
        if snapshot is not None:
            new = image_from_snapshot(snapshot.end_offset, snapshot.epoch, bytes(snapshot.records))
            changes = local_changes_between(self.image, new, self.broker_id)
            self.image = new
            self.next_offset = snapshot.end_offset
            log.info(
                "loaded a metadata snapshot", extra={"fields": {"end_offset": snapshot.end_offset}}
            )
            yield from self._publish(new, changes)
        for batch in answer.batches:
            if batch.offset < self.next_offset:
                continue  # already applied (an overlapping answer after a failover)
            yield from self._publish(
                *self._apply_payload(batch.offset, batch.epoch, bytes(batch.records))
            )
        self.next_offset = max(self.next_offset, answer.next_offset)
        if (
            not self.published
            and self.next_offset >= answer.high_watermark
            and self.image.offset >= self._catch_up_to()
        ):
            yield self._first_update()

    def _publish(
        self, image: MetadataImage, changes: LocalReplicaChanges
    ) -> Iterator[MetadataUpdate]:
        if self.published:
            yield image, changes
        else:
            # Only deletes are kept: they act on directories left from before the
            # restart, which the final image may no longer name at all.
            self._held_deletes |= changes.deletes

    def _first_update(self) -> MetadataUpdate:
        image = self.image
        roles = local_changes_between(self._published_image, image, self.broker_id)
        changes = LocalReplicaChanges(
            leaders=roles.leaders,
            followers=roles.followers,
            deletes=frozenset(self._held_deletes | roles.deletes),
        )
        self.published = True
        self._held_deletes.clear()
        log.info(
            "metadata caught up; applying the first image",
            extra={
                "fields": {
                    "metadata_offset": image.offset,
                    "leaders": len(changes.leaders),
                    "followers": len(changes.followers),
                    "deletes": len(changes.deletes),
                }
            },
        )
        return image, changes

    def _apply_payload(self, offset: int, epoch: int, payload: bytes) -> MetadataUpdate:
        # The controllers' rule itself, not a copy of it: skipped alike on every node.
        replayed = replay_payload(self.image, offset, epoch, payload)
        if replayed.skipped:
            self.skipped_payloads += 1
        self.image = replayed.image
        self.next_offset = offset + 1
        return replayed.image, replayed.delta.local_changes(self.broker_id)


class MetadataFollower:
    """The HTTP loop around :class:`MetadataApplier`. ``listener`` is awaited for each
    update before the next one is applied."""

    def __init__(
        self,
        *,
        broker_id: int,
        controllers: Sequence[str],
        session: aiohttp.ClientSession,
        listener: Callable[[MetadataImage, LocalReplicaChanges], Awaitable[None]],
        wait_ms: int = METADATA_WAIT_MS,
        catch_up_to: Callable[[], int] = lambda: -1,
        active_controller: Callable[[], str | None] = lambda: None,
        attempt_margin_ms: int = ATTEMPT_MARGIN_MS,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        assert controllers
        self._http = http
        # A broker starts from nothing: it catches up before acting (MetadataApplier).
        self.applier = MetadataApplier(broker_id, catch_up_first=True, catch_up_to=catch_up_to)
        self._controllers = list(controllers)
        self._index = 0
        self._session = session
        self._listener = listener
        self._wait_ms = wait_ms
        self._active_controller = active_controller
        self._attempt_margin_ms = attempt_margin_ms
        self.caught_up = asyncio.Event()  # set once an answer reached the controller's HW

    @property
    def image(self) -> MetadataImage:
        return self.applier.image

    @property
    def offset(self) -> int:
        """The offset of the last applied payload (-1 before any)."""
        return self.applier.image.offset

    async def run(self) -> None:
        while True:
            # The active controller, as the heartbeats last learned it, when known: a
            # controller cut off from the quorum answers nothing new (or nothing at
            # all) until it heals, and a broker parked there missed every change for
            # up to 10 s after a controller isolation (issue #19's fail-over runs).
            address = (
                self._active_controller() or self._controllers[self._index % len(self._controllers)]
            )
            wait_ms = self._wait_ms if self.caught_up.is_set() else 0
            request = FetchMetadataRequest(
                offset=self.applier.next_offset,
                max_wait_ms=wait_ms,
                records_max=METADATA_RECORDS_PER_FETCH,
            )
            fetch = asyncio.ensure_future(self._fetch(address, request))
            try:
                answer = await self._unless_moved(fetch, address)
                if answer is None:
                    continue  # the active controller moved: ask it at once
                for image, changes in self.applier.apply_answer(answer):
                    await self._listener(image, changes)
                if self.applier.next_offset >= answer.high_watermark:
                    self.caught_up.set()
            except asyncio.CancelledError:
                fetch.cancel()
                raise
            # And TypeError, which this loop has always retried on too (a defensive catch
            # around the applier; decoding a record raises MetadataRecordError).
            except (*PEER_REQUEST_ERRORS, TypeError) as e:
                log.warning(
                    "metadata fetch failed; trying the next controller",
                    extra={"fields": {"controller": address, "error": f"{type(e).__name__}: {e}"}},
                )
                self._index += 1
                await asyncio.sleep(METADATA_BACKOFF_MS / 1000)  # a backoff, not synchronisation

    async def _fetch(self, address: str, request: FetchMetadataRequest) -> FetchMetadataResponse:
        # The controller answers a long poll at max_wait_ms; past that plus the margin
        # it is taken as unreachable.
        timeout = aiohttp.ClientTimeout(
            total=(request.max_wait_ms + self._attempt_margin_ms) / 1000
        )
        async with self._session.get(
            self._http.url(address, "/v1/metadata"), params=query_params(request), timeout=timeout
        ) as response:
            raw = await response.read()
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}: {raw[:200]!r}")
        return decode(raw, FetchMetadataResponse)

    async def _unless_moved(
        self, fetch: asyncio.Future[FetchMetadataResponse], address: str
    ) -> FetchMetadataResponse | None:
        """The fetch's answer, or None once the heartbeats name another active
        controller than ``address`` (the fetch is then cancelled)."""
        while True:
            done, _ = await asyncio.wait({fetch}, timeout=ACTIVE_CHECK_MS / 1000)
            if done:
                return fetch.result()
            active = self._active_controller()
            if active is not None and active != address:
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetch
                log.info(
                    "metadata fetch moved to the active controller",
                    extra={"fields": {"from": address, "to": active}},
                )
                return None
