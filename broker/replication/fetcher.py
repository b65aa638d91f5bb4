"""Replica fetchers: one long-poll loop per source broker on a follower.

Theory of operation
-------------------
:class:`ReplicaFetcherManager` keeps one :class:`ReplicaFetcher` per leader broker this
broker follows, and moves a partition between them when metadata names a new leader
(``set_leader``) or forgets it when this broker leads or drops the partition
(``remove``). A fetcher sends one ``POST /v1/fetch`` for all its partitions (each from
its log end offset, with the epoch of its last record, ``last_fetched_epoch``, and the
leader epoch it believes current), waits up to ``replica.fetch.wait.max.ms`` on the
leader, and hands each partition's answer to the :class:`ReplicaManager`:

- records: the partition core appends them and moves its HW (follower HW =
  min(leader HW, LEO)) (``Replica.on_fetch_answer``);
- a diverging epoch: the core truncates its log and epoch cache;
- a throttled replica (``follower.replication.throttled.replicas``, see
  :mod:`raftka.broker.replication.quota`) outside the ISR is left out of the request
  while this broker's follower quota is exceeded, until it has room again;
- an error: the partition backs off for ``replica.fetch.backoff.ms`` (the leader may
  not have learned its leadership yet, or metadata is moving); other partitions of the
  same fetcher go on.

An answer is applied only if the partition is still ours to fetch from that leader in
the leader epoch the request named; metadata may have moved on while it was in flight.
The fetcher with nothing to fetch waits on an event (set when a partition is added).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from raftka.broker.replication.manager import Partition, ReplicaManager
from raftka.common.errors import OffsetOutOfRangeError
from raftka.common.messages import broker as api
from raftka.common.messages import encode
from raftka.common.structs import EpochEndOffset
from raftka.common.time import monotonic_ms, wait_event
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.server_common.http_errors import PEER_REQUEST_ERRORS
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp
from raftka.storage.log_manager import PartitionKey

__all__ = ["ReplicaFetcher", "ReplicaFetcherManager"]

log = logging.getLogger(__name__)

#: Extra time a fetch request may take beyond its long poll before we give up on it.
FETCH_SLACK_MS: Final = 5_000

#: Starts a named background task from a coroutine factory (the broker's supervisor
#: restarts a fetcher that dies, as Kafka restarts its fetcher threads).
Spawn = Callable[[str, Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


def _plain_spawn(name: str, factory: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(factory(), name=name)


@dataclass(frozen=True, slots=True)
class _Sent:
    partition: Partition
    leader_epoch: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class _FetcherLinks:
    """What every fetcher of one broker is handed (see ReplicaFetcherManager)."""

    manager: ReplicaManager
    session: aiohttp.ClientSession
    address_of: Callable[[int], str | None]
    broker_epoch: Callable[[], int]
    spawn: Spawn
    http: NodeHttp


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, *, leader_id: int, links: _FetcherLinks) -> None:
        self.leader_id = leader_id
        self._spawn = links.spawn
        self.partitions: set[PartitionKey] = set()
        self._backoff_until: dict[PartitionKey, int] = {}
        self._manager = links.manager
        self._session = links.session
        self._http = links.http
        self._address_of = links.address_of
        self._broker_epoch = links.broker_epoch
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0

    def start(self) -> None:
        self._task = self._spawn(f"replica-fetcher-{self.leader_id}", self.run)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def add(self, tp: PartitionKey) -> None:
        self.partitions.add(tp)
        self._backoff_until.pop(tp, None)
        self._wake.set()

    def discard(self, tp: PartitionKey) -> None:
        self.partitions.discard(tp)
        self._backoff_until.pop(tp, None)

    def _due(self, now: int) -> list[PartitionKey]:
        return sorted(tp for tp in self.partitions if self._backoff_until.get(tp, 0) <= now)

    async def run(self) -> None:
        config = self._manager.config
        while True:
            now = monotonic_ms()
            due = self._due(now)
            if not due:
                self._wake.clear()
                waits = [u - now for tp, u in self._backoff_until.items() if tp in self.partitions]
                timeout = max(min(waits), 1) / 1000 if waits else None
                await wait_event(self._wake, timeout)
                continue
            address = self._address_of(self.leader_id)
            if address is None:
                self._back_off(due, config.replica_fetch_backoff_ms)
                continue
            try:
                await self._fetch_once(address, due)
            except asyncio.CancelledError:
                raise
            except PEER_REQUEST_ERRORS as e:
                log.warning(
                    "replica fetch failed",
                    extra={
                        "fields": {"leader": self.leader_id, "error": f"{type(e).__name__}: {e}"}
                    },
                )
                self._back_off(due, config.replica_fetch_backoff_ms)

    def _back_off(self, tps: list[PartitionKey], backoff_ms: int) -> None:
        until = monotonic_ms() + backoff_ms
        for tp in tps:
            self._backoff_until[tp] = until

    async def _fetch_once(self, address: str, due: list[PartitionKey]) -> None:
        config = self._manager.config
        sent: list[_Sent] = []
        entries: list[api.FetchPartition] = []
        quotas = self._manager.quotas
        held_back: list[PartitionKey] = []
        now = self._manager.now_ms()
        for tp in due:
            p = self._manager.partitions.get(tp)
            if p is None or not p.replica.follows(self.leader_id):
                self.discard(tp)
                continue
            if (
                quotas.follower_throttled(*tp)
                and self._manager.broker_id not in p.state.committed_isr
                and quotas.follower.exceeded(now)
            ):
                held_back.append(tp)  # Kafka's shouldFollowerThrottle: not this round
                continue
            position = p.replica.fetch_position()
            sent.append(_Sent(p, position.leader_epoch, position.fetch_offset))
            entries.append(
                api.FetchPartition(
                    topic=tp[0],
                    partition=tp[1],
                    fetch_offset=position.fetch_offset,
                    partition_max_bytes=config.replica_fetch_max_bytes,
                    current_leader_epoch=position.leader_epoch,
                    last_fetched_epoch=position.last_fetched_epoch,
                    log_start_offset=position.log_start_offset,
                )
            )
        if held_back:
            # Asked for again once the quota has room; the rest are fetched now.
            self._back_off(held_back, quotas.follower.delay_ms(now))
        if not entries:
            return
        wait_ms = config.replica_fetch_wait_max_ms
        request = api.FetchRequest(
            replica_id=self._manager.broker_id,
            broker_epoch=self._broker_epoch(),
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=config.replica_fetch_response_max_bytes,
            partitions=tuple(entries),
        )
        timeout = aiohttp.ClientTimeout(total=(wait_ms + FETCH_SLACK_MS) / 1000)
        async with self._session.post(
            self._http.url(address, "/v1/fetch"),
            data=encode(request),
            headers={"Content-Type": "application/json"},
            timeout=timeout,
        ) as response:
            raw = await response.read()
            if response.status != 200 or response.content_type != FRAME_CONTENT_TYPE:
                raise ValueError(f"fetch answered HTTP {response.status}: {raw[:200]!r}")
        self.fetches += 1
        header, payloads = api.decode_frame(raw, api.FetchResponse)
        # Each partition's answer is appended (or truncates) inline or on an I/O worker
        # (the manager's choice); the partitions of one answer go at once, and the next
        # fetch waits for them all. One partition (the common case): no task.
        applies = [
            self._apply(item, bytes(payload), s)
            for item, payload, s in zip(header.responses, payloads, sent, strict=True)
        ]
        applied = [await applies[0]] if len(applies) == 1 else await asyncio.gather(*applies)
        failed = [s.partition.tp for s, ok in zip(sent, applied, strict=True) if not ok]
        if failed:
            self._back_off(failed, config.replica_fetch_backoff_ms)

    def _current(self, s: _Sent) -> bool:
        """Whether the answer to ``s`` still applies: the partition is still ours, still
        follows this leader from the position the fetch was sent from."""
        p = s.partition
        tp = p.tp
        return (
            tp in self.partitions
            and self._manager.partitions.get(tp) is p
            and p.replica.follows(self.leader_id)
            and _position(p) == (s.leader_epoch, s.fetch_offset)
        )

    async def _apply(self, item: api.FetchPartitionResponse, records: bytes, s: _Sent) -> bool:
        """One partition's answer; False when it should back off."""
        p = s.partition
        tp = p.tp
        if not self._current(s):
            return True  # metadata moved on while the fetch was in flight: ignore it
        current = functools.partial(self._current, s)  # checked again in the strand
        hw = item.high_watermark
        log_start = item.log_start_offset
        if item.error is not None:
            name = item.error.error
            if name == OffsetOutOfRangeError.name and log_start >= 0:
                await self._manager.on_follower_out_of_range(
                    p, leader_log_start_offset=log_start, current=current
                )
            log.debug(
                "replica fetch error",
                extra={"fields": {"partition": f"{tp[0]}-{tp[1]}", "error": name}},
            )
            return False
        diverging = item.diverging_epoch
        if diverging is not None:
            await self._manager.on_follower_diverging(
                p,
                diverging=EpochEndOffset(diverging.epoch, diverging.end_offset),
                leader_high_watermark=hw,
                leader_log_start_offset=max(log_start, 0),
                current=current,
            )
            return True
        if not records and p.replica.state.fetch_response_is_idle(
            leader_high_watermark=hw, leader_log_start_offset=log_start
        ):
            # An idle partition: nothing to append or move. Skipping it here keeps a
            # fetch of many partitions, most idle, from queueing a job per partition
            # (a thread hop when appends run on the I/O workers).
            return True
        if records and self._manager.quotas.follower_throttled(*tp):
            self._manager.quotas.follower.record(len(records), self._manager.now_ms())
        await self._manager.on_follower_records(
            p,
            records=records,
            leader_high_watermark=hw,
            leader_log_start_offset=max(log_start, 0),
            current=current,
        )
        return True


def _position(p: Partition) -> tuple[int, int]:
    position = p.replica.fetch_position()
    return (position.leader_epoch, position.fetch_offset)


class ReplicaFetcherManager:
    """One fetcher per leader broker; partitions move between them with metadata."""

    def __init__(
        self,
        *,
        manager: ReplicaManager,
        session: aiohttp.ClientSession,
        address_of: Callable[[int], str | None],
        broker_epoch: Callable[[], int],
        spawn: Spawn = _plain_spawn,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        self._links = _FetcherLinks(manager, session, address_of, broker_epoch, spawn, http)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    def set_leader(self, tp: PartitionKey, leader_id: int) -> None:
        self.remove(tp)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(leader_id=leader_id, links=self._links)
            self.fetchers[leader_id] = fetcher
            fetcher.start()
        fetcher.add(tp)
        self._leader_of[tp] = leader_id

    def remove(self, tp: PartitionKey) -> None:
        leader_id = self._leader_of.pop(tp, None)
        if leader_id is not None and leader_id in self.fetchers:
            self.fetchers[leader_id].discard(tp)

    async def close(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        self._leader_of.clear()
