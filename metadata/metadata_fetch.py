"""Serving the committed metadata log to observers (brokers, tools): a long poll.

Theory of operation
-------------------
An observer asks for the committed payloads from ``offset``. If there are some, it gets
up to ``records_max`` of them at once. If it is at the end, the request parks until a
commit is applied on this node (:class:`CommitSignal` wakes it: no polling) or until
``max_wait_ms`` passes, then answers with what there is, possibly nothing. An observer
whose offset lies below the log start (the prefix was snapshotted away) gets the latest
snapshot instead: its records and its end offset, flagged ``snapshot``, and must
replace its image with it before fetching on from ``next_offset``.

Every payload is one command's records as a JSON array (``encode_records``); they are
passed through to the response as raw JSON (``msgspec.Raw``), never decoded and
re-encoded. Offsets skip the engine's control entries (each new leader's no-op), so an
empty answer's ``next_offset`` may lie past ``offset``: the observer continues there.

Any controller serves this from its own committed state; a follower may be a little
behind the leader, which only delays an observer, never shows it uncommitted state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from raftka.common.errors import OffsetOutOfRangeError
from raftka.common.messages.controller import (
    METADATA_RECORDS_MAX,
    METADATA_WAIT_MS_MAX,
    FetchMetadataResponse,
    MetadataBatch,
    MetadataSnapshot,
)
from raftka.common.time import wait_event
from raftka.raft.quorum.engine import CommittedRecord, QuorumEngine

__all__ = [
    "METADATA_RECORDS_MAX",
    "METADATA_WAIT_MS_MAX",
    "CommitSignal",
    "MetadataFetchResult",
    "fetch_metadata",
]


class CommitSignal:
    """Wakes every task waiting for "something new was applied". Thread-safe notify:
    an engine may deliver commits on its own thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id: int | None = None
        self._event = asyncio.Event()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: parked fetches answer at once from then on."""
        return self._closed

    def close(self) -> None:
        """Wake every parked fetch for good (the controller is stopping). Until it is
        woken, a fetch whose observer went away keeps its connection busy, and aiohttp's
        shutdown waits for it: up to the observer's whole max_wait_ms (5 s for a
        broker)."""
        self._closed = True
        self.notify()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the waiters run on; notify from other threads goes through it."""
        self._loop = loop
        self._thread_id = threading.get_ident()

    def waiter(self) -> asyncio.Event:
        """Take this before checking the condition, so a notify in between is not lost."""
        return self._event

    def notify(self) -> None:
        if self._loop is None or threading.get_ident() == self._thread_id:
            self._fire()
        else:
            self._loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    @staticmethod
    async def wait(waiter: asyncio.Event, timeout_ms: int) -> bool:
        """True if notified within ``timeout_ms``."""
        if timeout_ms <= 0:
            return waiter.is_set()
        return await wait_event(waiter, timeout_ms / 1000)


@dataclass(frozen=True, slots=True)
class MetadataFetchResult:
    """Payloads from the requested offset, or (``snapshot_end_offset`` set) a snapshot
    whose records replace the observer's image. ``next_offset`` is where to go on."""

    batches: tuple[CommittedRecord, ...]
    next_offset: int
    high_watermark: int
    snapshot_end_offset: int | None = None
    snapshot_epoch: int | None = None
    snapshot_data: bytes | None = None

    def to_message(self) -> FetchMetadataResponse:
        """The answer; payloads pass through as raw JSON, never re-encoded."""
        snapshot = None
        if self.snapshot_end_offset is not None:
            assert self.snapshot_data is not None and self.snapshot_epoch is not None
            snapshot = MetadataSnapshot(
                end_offset=self.snapshot_end_offset,
                epoch=self.snapshot_epoch,
                records=msgspec.Raw(self.snapshot_data),
            )
        return FetchMetadataResponse(
            snapshot=snapshot,
            batches=[
                MetadataBatch(offset=b.offset, epoch=b.epoch, records=msgspec.Raw(b.payload))
                for b in self.batches
            ],
            next_offset=self.next_offset,
            high_watermark=self.high_watermark,
        )


async def fetch_metadata(
    engine: QuorumEngine,
    signal: CommitSignal,
    *,
    offset: int,
    records_max: int,
    max_wait_ms: int,
    clock_ms: Callable[[], int],
) -> MetadataFetchResult:
    """Committed payloads from ``offset`` (see the module doc); parks up to
    ``max_wait_ms`` when there are none. Raises OffsetOutOfRangeError when ``offset`` is
    below the log start and this node holds no snapshot (it cannot happen once the
    engine dropped a prefix, since it only drops what a snapshot covers)."""
    assert offset >= 0 and 0 < records_max <= METADATA_RECORDS_MAX, (offset, records_max)
    deadline_ms = clock_ms() + min(max(max_wait_ms, 0), METADATA_WAIT_MS_MAX)
    while True:
        waiter = signal.waiter()
        high_watermark = engine.high_watermark
        if signal.closed:
            # Stopping: the engine's log may be closed already; nothing new is coming.
            return MetadataFetchResult((), offset, high_watermark)
        try:
            batches = tuple(engine.read_committed(offset, records_max))
        except OffsetOutOfRangeError:
            snapshot = engine.latest_snapshot()
            if snapshot is None:
                raise
            end_offset, epoch, data = snapshot
            return MetadataFetchResult(
                batches=(),
                next_offset=end_offset,
                high_watermark=max(high_watermark, end_offset),
                snapshot_end_offset=end_offset,
                snapshot_epoch=epoch,
                snapshot_data=data,
            )
        if batches:
            return MetadataFetchResult(batches, batches[-1].offset + 1, high_watermark)
        remaining_ms = deadline_ms - clock_ms()
        if remaining_ms <= 0 or not await CommitSignal.wait(waiter, remaining_ms):
            # Nothing committed in [offset, high_watermark) but control entries.
            return MetadataFetchResult((), max(offset, high_watermark), high_watermark)
