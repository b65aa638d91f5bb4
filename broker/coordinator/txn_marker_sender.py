"""The transaction coordinator's marker sender (Kafka's TransactionMarkerChannelManager).

Theory of operation
-------------------
Once a PrepareCommit/PrepareAbort is durable, the coordinator's core emits
:class:`SendTxnMarkers`: write a COMMIT or ABORT control record for one producer to each
partition of the transaction. :meth:`TxnMarkerSender.send` starts one task per
transaction that, until every partition is done:

1. groups the partitions still due by their leader in this broker's metadata image (a
   partition whose topic no longer exists counts as done: a deleted topic needs no
   marker, as in Kafka);
2. POSTs one ``/v1/write-txn-markers`` (WriteTxnMarkersRequest) per leader broker, over
   the broker's aiohttp session, all leaders at once; the markers of every transaction
   waiting for the same leader go in one request (a per-leader queue drained one
   request at a time, as Kafka's per-broker queue);
3. reports the partitions answered ``null`` (or a non-retriable error other than the
   fencing ones, logged: retrying cannot help) through ``on_written``, which the
   service turns into the core's ``markers_written``;
4. sleeps a backoff (doubling from ``backoff_ms`` to ``backoff_max_ms``) before the next
   round for the rest: a leader that moved, is not there yet, or answers a retriable
   error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...) or no answer at all (a
   broker without the route answers HTTP 404) is asked again, never in a hot loop.

TRANSACTION_COORDINATOR_FENCED, PRODUCER_FENCED or INVALID_PRODUCER_EPOCH from a leader
means a newer coordinator (or a newer epoch) owns the transaction: the task stops
without reporting (Kafka's removeMarkersForTxn); the new coordinator re-sends from its
own load. A task is cancelled when its ``__transaction_state`` partition is unloaded or
the broker stops. Markers are idempotent at the partition, so a re-send after a lost
answer is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final

import aiohttp

from raftka.broker.coordinator.transaction_coordinator import SendTxnMarkers
from raftka.broker.coordinator.transaction_state import TransactionResult
from raftka.common.errors import (
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    error_for_name,
)
from raftka.common.messages import decode, encode
from raftka.common.messages.transactions import (
    TxnTopic,
    WritableTxnMarker,
    WritableTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from raftka.common.structs import TopicPartition
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import NO_LEADER
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp

__all__ = ["MarkerOutcome", "TxnMarkerSender", "marker_request", "route_markers"]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_PATH: Final = "/v1/write-txn-markers"
#: Errors that say another coordinator (or producer epoch) owns the transaction now.
_FENCED: Final = frozenset(
    e.name
    for e in (TransactionCoordinatorFencedError, ProducerFencedError, InvalidProducerEpochError)
)
#: Markers in one WriteTxnMarkers request at most (the rest go in the next).
MARKERS_PER_REQUEST_MAX: Final = 1_000
#: A failing transaction is logged on its first failed round and then every this many.
_LOG_EVERY_ROUNDS: Final = 20


@dataclass(frozen=True, slots=True)
class MarkerOutcome:
    """One leader's answer: the partitions done, and whether it fenced us."""

    done: frozenset[TopicPartition] = frozenset()
    fenced: bool = False
    #: Why the rest is not done (for the log), None when everything is.
    problem: str | None = None


def route_markers(
    image: MetadataImage, partitions: Iterable[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], set[TopicPartition], set[TopicPartition]]:
    """(leader -> its partitions, partitions whose topic is gone (done), partitions
    without a leader now (retried))."""
    by_leader: dict[int, list[TopicPartition]] = {}
    gone: set[TopicPartition] = set()
    leaderless: set[TopicPartition] = set()
    for tp in sorted(partitions):
        if image.topics.topic_by_name(tp.topic) is None:
            gone.add(tp)
            continue
        reg = image.topics.partition_by_name(tp.topic, tp.partition)
        if reg is None:
            gone.add(tp)  # the topic exists without this partition: nothing to mark
        elif reg.leader == NO_LEADER:
            leaderless.add(tp)
        else:
            by_leader.setdefault(reg.leader, []).append(tp)
    return by_leader, gone, leaderless


def marker_request(
    markers: SendTxnMarkers, partitions: Iterable[TopicPartition]
) -> WriteTxnMarkersRequest:
    """The WriteTxnMarkersRequest of ``markers`` for ``partitions`` (one leader's)."""
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=markers.producer_id,
                producer_epoch=markers.producer_epoch,
                transaction_result=markers.result is TransactionResult.COMMIT,
                topics=tuple(TxnTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
                coordinator_epoch=markers.coordinator_epoch,
                transaction_version=markers.transaction_version,
            ),
        )
    )


def marker_outcome(
    answer: WriteTxnMarkersResponse, markers: SendTxnMarkers, asked: Iterable[TopicPartition]
) -> MarkerOutcome:
    """What one leader's answer settles among the ``asked`` partitions."""
    asked_set = set(asked)
    done: set[TopicPartition] = set()
    problems: list[str] = []
    fenced = False
    for result in answer.markers:
        if result.producer_id != markers.producer_id:
            continue
        for topic in result.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp not in asked_set:
                    continue
                if p.error is None:
                    done.add(tp)
                    continue
                if p.error.error in _FENCED:
                    fenced = True
                elif error_for_name(p.error.error).retriable:
                    problems.append(f"{tp}: {p.error.error}")
                else:
                    # Retrying cannot help; Kafka gives up on the partition too.
                    log.error(
                        "a transaction marker was refused for good",
                        extra={
                            "fields": {
                                "transactional_id": markers.transactional_id,
                                "partition": str(tp),
                                "error": p.error.error,
                                "message": p.error.message,
                            }
                        },
                    )
                    done.add(tp)
    missing = asked_set - done
    if missing and not problems and not fenced:
        problems.append(f"no answer for {sorted(str(tp) for tp in missing)}")
    return MarkerOutcome(frozenset(done), fenced, "; ".join(problems) or None)


class TxnMarkerSender:
    """See the module docstring. The broker's event loop only."""

    def __init__(
        self,
        *,
        image: Callable[[], MetadataImage],
        address_of: Callable[[int], str | None],
        session: Callable[[], aiohttp.ClientSession | None],
        on_written: Callable[[SendTxnMarkers, frozenset[TopicPartition]], None],
        request_timeout_ms: int,
        backoff_ms: int = 100,
        backoff_max_ms: int = 5_000,
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        self._http = http
        self._image = image
        self._address_of = address_of
        self._session = session
        self._on_written = on_written
        self._request_timeout_ms = request_timeout_ms
        self._backoff_ms = backoff_ms
        self._backoff_max_ms = backoff_max_ms
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._channels: dict[int, _LeaderChannel] = {}
        #: Rounds that failed to finish, over every transaction (for tests and health).
        self.retries = 0

    def send(self, markers: SendTxnMarkers) -> None:
        """Deliver ``markers`` (replacing an older delivery for the same id: the core
        emits a new one only once the previous transaction is complete or reloaded)."""
        tid = markers.transactional_id
        old = self._tasks.pop(tid, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._deliver(markers))
        self._tasks[tid] = task
        task.add_done_callback(lambda t: self._forget(tid, t))

    def _forget(self, tid: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(tid) is task:
            del self._tasks[tid]
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "transaction marker delivery failed",
                extra={"fields": {"transactional_id": tid, "error": repr(task.exception())}},
            )

    def pending(self) -> frozenset[str]:
        """The transactional ids whose markers are being delivered."""
        return frozenset(self._tasks)

    def health(self) -> dict[str, int]:
        return {"pending": len(self._tasks), "retries": self.retries}

    def cancel(self, which: Callable[[str], bool]) -> None:
        """Stop delivering for every transactional id ``which`` selects."""
        for tid in [t for t in self._tasks if which(t)]:
            self._tasks.pop(tid).cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for channel in self._channels.values():
            channel.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _deliver(self, markers: SendTxnMarkers) -> None:
        remaining = set(markers.partitions)
        backoff_ms = self._backoff_ms
        rounds = 0
        while remaining:
            by_leader, gone, leaderless = route_markers(self._image(), remaining)
            leaders = sorted(by_leader)
            outcomes = await asyncio.gather(
                *(self._post(leader, markers, by_leader[leader]) for leader in leaders)
            )
            if any(o.fenced for o in outcomes):
                log.info(
                    "transaction markers fenced: a newer coordinator owns the transaction",
                    extra={"fields": {"transactional_id": markers.transactional_id}},
                )
                return
            done = set(gone)
            for outcome in outcomes:
                done |= outcome.done
            done &= remaining
            if done:
                remaining -= done
                self._on_written(markers, frozenset(done))
            if not remaining:
                return
            rounds += 1
            self.retries += 1
            if rounds == 1 or rounds % _LOG_EVERY_ROUNDS == 0:
                problems = [o.problem for o in outcomes if o.problem]
                if leaderless:
                    problems.append(f"no leader for {sorted(str(tp) for tp in leaderless)}")
                log.warning(
                    "transaction markers not written yet; retrying",
                    extra={
                        "fields": {
                            "transactional_id": markers.transactional_id,
                            "rounds": rounds,
                            "remaining": len(remaining),
                            "problems": "; ".join(problems),
                            "backoff_ms": backoff_ms,
                        }
                    },
                )
            await asyncio.sleep(backoff_ms / 1000)  # the retry backoff
            backoff_ms = min(backoff_ms * 2, self._backoff_max_ms)

    async def _post(
        self, leader: int, markers: SendTxnMarkers, partitions: list[TopicPartition]
    ) -> MarkerOutcome:
        channel = self._channels.get(leader)
        if channel is None:
            channel = self._channels[leader] = _LeaderChannel(leader, self._request)
        (marker,) = marker_request(markers, partitions).markers
        result = await channel.send(marker)
        if isinstance(result, str):
            return MarkerOutcome(problem=result)
        return marker_outcome(WriteTxnMarkersResponse(markers=(result,)), markers, partitions)

    async def _request(
        self, leader: int, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse | str:
        """One WriteTxnMarkers to ``leader``: its answer, or what went wrong."""
        address = self._address_of(leader)
        session = self._session()
        if address is None or session is None:
            return f"broker {leader} has no address"
        try:
            async with session.post(
                self._http.url(address, WRITE_TXN_MARKERS_PATH),
                data=encode(request),
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self._request_timeout_ms / 1000),
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    return f"broker {leader}: HTTP {response.status}: {raw[:200]!r}"
            return decode(raw, WriteTxnMarkersResponse)
        except (aiohttp.ClientError, TimeoutError, OSError, KafkaError) as e:
            return f"broker {leader}: {type(e).__name__}: {e}"


class _LeaderChannel:
    """The markers bound for one leader broker (Kafka's per-broker marker queue): the
    transactions that ask while a request to it is in flight go together in the next
    one, so N concurrent transactions cost one request per leader, not N. At most one
    marker per producer id per request (its answer is matched by producer id)."""

    def __init__(
        self,
        leader: int,
        request: Callable[[int, WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse | str]],
    ) -> None:
        self._leader = leader
        self._request = request
        self._queue: list[
            tuple[WritableTxnMarker, asyncio.Future[WritableTxnMarkerResult | str]]
        ] = []
        self._drain: asyncio.Task[None] | None = None

    async def send(self, marker: WritableTxnMarker) -> WritableTxnMarkerResult | str:
        """The leader's result for ``marker``, or what went wrong."""
        future: asyncio.Future[WritableTxnMarkerResult | str] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((marker, future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.get_running_loop().create_task(self._drain_queue())
        return await future

    async def _drain_queue(self) -> None:
        while self._queue:
            batch: list[tuple[WritableTxnMarker, asyncio.Future[WritableTxnMarkerResult | str]]]
            batch, rest, producers = [], [], set()
            for marker, future in self._queue:
                if future.done():
                    continue  # its delivery was cancelled
                if marker.producer_id in producers or len(batch) >= MARKERS_PER_REQUEST_MAX:
                    rest.append((marker, future))
                    continue
                producers.add(marker.producer_id)
                batch.append((marker, future))
            self._queue = rest
            if not batch:
                continue
            try:
                answer = await self._request(
                    self._leader, WriteTxnMarkersRequest(markers=tuple(m for m, _ in batch))
                )
            except Exception as e:  # a bug below must not leave the deliveries waiting
                answer = f"broker {self._leader}: {type(e).__name__}: {e}"
            for marker, future in batch:
                if future.done():
                    continue
                if isinstance(answer, str):
                    future.set_result(answer)
                    continue
                found = [r for r in answer.markers if r.producer_id == marker.producer_id]
                future.set_result(
                    found[0] if found else f"broker {self._leader}: no answer for the marker"
                )

    def close(self) -> None:
        if self._drain is not None:
            self._drain.cancel()
        for _, future in self._queue:
            future.cancel()
        self._queue.clear()
