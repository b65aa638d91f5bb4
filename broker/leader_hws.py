"""The high watermarks of partitions with no replica on this broker, for consumer lag.

Theory of operation
-------------------
A group coordinator exports the lag of every partition its groups committed
(``raftka.broker.metrics``). A partition with a replica here uses that replica's HW.
For the others :class:`LeaderHighWatermarks` asks their leaders, at scrape time:
``GET /metrics`` awaits :meth:`LeaderHighWatermarks.refresh` before the collectors run,
and the collector reads :meth:`LeaderHighWatermarks.get`.

- **One round trip per leader**: ListOffsets(latest) (the HW, what a read_uncommitted
  consumer can reach) over the brokers' HTTP API, one request per leader broker for
  all its partitions, every leader in parallel.
- **Never hangs**: the whole refresh is bounded by ``timeout_s``; a leader that does not
  answer in time (down, partitioned, paused) leaves its partitions without a lag series
  for that scrape rather than with a stale one, and the scrape goes on.
- **Cheap when scraped often**: answers are reused for ``max_age_s``; scrapes that come
  together (two Prometheus servers) share one refresh.
- **Only what is needed**: partitions this broker has no replica of and some group it
  coordinates committed. A broker that coordinates nothing asks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

import aiohttp

from raftka.common.errors import KafkaError
from raftka.common.messages import broker as api
from raftka.common.messages import decode, encode
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import NO_LEADER
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp

__all__ = ["LATEST_TIMESTAMP", "LeaderHighWatermarks"]

log = logging.getLogger(__name__)

#: ListOffsets' "latest" timestamp: the high watermark.
LATEST_TIMESTAMP: Final = -1
#: A scrape waits at most this long for the leaders (Prometheus' default scrape
#: timeout is 10 s; a scrape must stay well inside it).
TIMEOUT_S_DEFAULT: Final = 1.0
#: Answers younger than this are reused.
MAX_AGE_S_DEFAULT: Final = 1.0

Key = tuple[str, int]


class LeaderHighWatermarks:
    """See the module docstring. ``wanted`` names the partitions to know (those the
    coordinated groups committed that have no replica here); ``address_of`` maps a
    broker id to its HTTP address; ``session`` is None before the broker starts."""

    def __init__(
        self,
        *,
        image: Callable[[], MetadataImage],
        address_of: Callable[[int], str | None],
        session: Callable[[], aiohttp.ClientSession | None],
        wanted: Callable[[], Iterable[Key]],
        timeout_s: float = TIMEOUT_S_DEFAULT,
        max_age_s: float = MAX_AGE_S_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        self._http = http
        self._image = image
        self._address_of = address_of
        self._session = session
        self._wanted = wanted
        self._timeout_s = timeout_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._hws: dict[Key, int] = {}
        self._refreshed_at: float | None = None
        self._lock = asyncio.Lock()
        #: Refreshes that asked the leaders (tests and /health read it).
        self.refreshes = 0

    def get(self, topic: str, partition: int) -> int | None:
        """The leader's HW at the last refresh; None when unknown (not asked, or its
        leader did not answer in time)."""
        return self._hws.get((topic, partition))

    async def refresh(self) -> None:
        """Ask the leaders of the wanted partitions for their HW (see the module
        docstring); returns within about ``timeout_s`` whatever they do."""
        async with self._lock:
            now = self._clock()
            if self._refreshed_at is not None and now - self._refreshed_at < self._max_age_s:
                return
            session = self._session()
            wanted = set(self._wanted())
            if session is None or not wanted:
                self._hws = {}
                self._refreshed_at = now
                return
            by_leader: dict[int, list[Key]] = {}
            topics = self._image().topics
            for tp in wanted:
                reg = topics.partition_by_name(*tp)
                if reg is not None and reg.leader != NO_LEADER:
                    by_leader.setdefault(reg.leader, []).append(tp)
            asks = [
                asyncio.ensure_future(self._ask(session, address, tps))
                for leader, tps in by_leader.items()
                if (address := self._address_of(leader)) is not None
            ]
            hws: dict[Key, int] = {}
            if asks:
                done, pending = await asyncio.wait(asks, timeout=self._timeout_s)
                for task in pending:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                for task in done:
                    hws.update(task.result())
            self._hws = hws
            self._refreshed_at = self._clock()
            self.refreshes += 1

    async def _ask(
        self, session: aiohttp.ClientSession, address: str, tps: list[Key]
    ) -> dict[Key, int]:
        request = api.ListOffsetsRequest(
            partitions=tuple(
                api.ListOffsetsPartition(topic=t, partition=p, timestamp=LATEST_TIMESTAMP)
                for t, p in tps
            )
        )
        try:
            async with session.post(
                self._http.url(address, "/v1/list-offsets"),
                data=encode(request),
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}: {raw[:200]!r}")
            answer = decode(raw, api.ListOffsetsResponse)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KafkaError) as e:
            # One leader's failure costs only its partitions' lag series.
            log.debug(
                "lag: a leader's HW unknown", extra={"fields": {"leader": address, "error": str(e)}}
            )
            return {}
        return {
            (r.topic, r.partition): r.offset
            for r in answer.responses
            if r.error is None and r.offset >= 0
        }
