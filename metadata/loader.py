"""The metadata loader: committed metadata payloads in, the next image out (Kafka's
``MetadataLoader``).

Theory of operation
-------------------
The metadata log is a sequence of *payloads*, one per controller command, each a JSON
array of metadata records (``encode_records``). Every node (every controller, through
its quorum engine's commit listener, and every broker, through its metadata follower)
turns that log into a :class:`MetadataImage` with the one rule of this module,
:func:`replay_payload`:

* a fresh :class:`MetadataDelta` per payload over the current image;
* the payload's records are decoded and replayed in order;
* if any of them does not decode or does not replay (a :class:`KafkaError`), the whole
  payload is **skipped**: the delta is discarded, the error is logged, and an empty
  delta at the payload's offset takes its place. Replay is deterministic, so every
  node skips the same payloads and every image stays equal;
* the delta's offset becomes the payload's, its epoch the larger of the payload's and
  the image's, and ``delta.apply()`` is the next image.

A snapshot (``image.to_records()`` encoded the same way) replaces the image whole:
:func:`image_from_snapshot`.

:class:`MetadataLoader` is the controllers' commit listener built on that rule: it
holds the current image (an immutable value swapped under a lock, since an engine may
call it from its own thread), wakes long polls (:class:`CommitSignal`) after each
commit and writes a snapshot through the engine once
``metadata.log.max.record.bytes.between.snapshots`` payload bytes were committed since
the last one (encoded off the event loop). Brokers use :func:`replay_payload` from
``raftka.broker.metadata_follower``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftka.common.errors import KafkaError, NotControllerError, RequestTimedOutError
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_fetch import CommitSignal
from raftka.metadata.metadata_records import decode_records, encode_records
from raftka.raft.quorum.engine import CommittedRecord, QuorumEngine

__all__ = [
    "MetadataLoader",
    "PayloadReplay",
    "image_from_snapshot",
    "replay_payload",
]

log = logging.getLogger("raftka.metadata.loader")


@dataclass(frozen=True, slots=True)
class PayloadReplay:
    """One payload replayed: the delta (empty if skipped), the image it yields, and
    the error that made it skip (None when it replayed)."""

    delta: MetadataDelta
    image: MetadataImage
    error: KafkaError | None

    @property
    def skipped(self) -> bool:
        return self.error is not None


def replay_payload(image: MetadataImage, offset: int, epoch: int, payload: bytes) -> PayloadReplay:
    """THE replay-or-skip rule (module doc): ``payload`` at ``offset`` over ``image``."""
    assert offset > image.offset, (offset, image.offset)
    delta = MetadataDelta(image)
    error: KafkaError | None = None
    try:
        delta.replay_all(decode_records(payload))
    except KafkaError as e:
        # Deterministic on every node: each skips the same payload.
        error = e
        log.error(
            "skipping a committed metadata payload that does not replay",
            extra={"fields": {"offset": offset, "error": str(e)}},
        )
        delta = MetadataDelta(image)
    delta.offset, delta.epoch = offset, max(epoch, image.epoch)
    return PayloadReplay(delta, delta.apply(), error)


def image_from_snapshot(end_offset: int, epoch: int, data: bytes) -> MetadataImage:
    """The image a snapshot covering offsets ``< end_offset`` describes."""
    return image_from_records(decode_records(data), end_offset - 1, epoch)


class MetadataLoader:
    """The controllers' commit listener: committed payloads -> the current image.

    ``image`` is read from the event loop while an engine may call the handlers from its
    own thread: the image is immutable and swapped as one reference under a lock.
    """

    def __init__(
        self,
        *,
        snapshot_bytes_between: int,
        on_leader_change: Callable[[int | None, int], None] | None = None,
    ) -> None:
        assert snapshot_bytes_between > 0
        self._lock = threading.Lock()
        self._image = MetadataImage.EMPTY
        self._bytes_since_snapshot = 0
        self._snapshot_bytes_between = snapshot_bytes_between
        self._on_leader_change = on_leader_change
        self._engine: QuorumEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.signal = CommitSignal()
        self.skipped_payloads = 0
        self.snapshots_written = 0
        self._snapshot_encoding = False
        self._snapshot_again = False  # one fell due while another was encoding

    def attach(self, engine: QuorumEngine, loop: asyncio.AbstractEventLoop) -> None:
        self._engine = engine
        self._loop = loop
        self.signal.bind(loop)

    @property
    def image(self) -> MetadataImage:
        return self._image

    # -- CommitListener ---------------------------------------------------------------

    def handle_commit(self, records: Sequence[CommittedRecord]) -> None:
        with self._lock:
            image = self._image
            for committed in records:
                replayed = replay_payload(
                    image, committed.offset, committed.epoch, committed.payload
                )
                if replayed.skipped:
                    self.skipped_payloads += 1
                image = replayed.image
                self._bytes_since_snapshot += len(committed.payload)
            self._image = image
            snapshot_due = self._bytes_since_snapshot >= self._snapshot_bytes_between
            if snapshot_due:
                self._bytes_since_snapshot = 0
        if snapshot_due:
            self._schedule_snapshot()
        self.signal.notify()

    def handle_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        image = image_from_snapshot(end_offset, epoch, data)
        with self._lock:
            self._image = image
            self._bytes_since_snapshot = 0
        log.info(
            "loaded metadata snapshot",
            extra={"fields": {"end_offset": end_offset, "epoch": epoch}},
        )
        self.signal.notify()

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if self._on_leader_change is not None:
            self._on_leader_change(leader_id, epoch)

    # -- snapshots --------------------------------------------------------------------

    def _schedule_snapshot(self) -> None:
        loop = self._loop
        if loop is None:
            self.write_snapshot()
            return
        # Not from inside the engine's callback: the engine may not expect re-entry.
        loop.call_soon_threadsafe(self._encode_snapshot_off_loop)

    def _encode_snapshot_off_loop(self) -> None:
        """Encode the image on a worker thread, then save it on the loop. Encoding a
        large image takes seconds (100,000 partitions: ~3 s); on the loop it stalled
        the quorum's fetches past the fetch timeout, and every snapshot caused an
        election. The image is immutable, so the thread reads it safely. One snapshot
        at a time: one that falls due meanwhile is taken as soon as it finishes, of the
        image as it is then (so the last commits before a quiet period are covered)."""
        image = self._image
        if self._engine is None or image.offset < 0:
            return
        if self._snapshot_encoding:
            self._snapshot_again = True
            return
        loop = self._loop
        assert loop is not None
        self._snapshot_encoding = True
        encoded = loop.run_in_executor(None, lambda: encode_records(image.to_records()))

        def save(done: asyncio.Future[bytes]) -> None:
            self._snapshot_encoding = False
            try:
                data = done.result()
            except Exception:
                log.exception("encoding a metadata snapshot failed")
            else:
                self._save_snapshot(image.offset + 1, data)
            if self._snapshot_again:
                self._snapshot_again = False
                self._encode_snapshot_off_loop()

        encoded.add_done_callback(save)

    def write_snapshot(self) -> None:
        """Snapshot the current image through the engine (covers offsets < end)."""
        image = self._image
        if self._engine is None or image.offset < 0:
            return
        self._save_snapshot(image.offset + 1, encode_records(image.to_records()))

    def _save_snapshot(self, end_offset: int, data: bytes) -> None:
        engine = self._engine
        assert engine is not None
        try:
            engine.save_snapshot(end_offset, data)
        except Exception:
            log.exception("writing a metadata snapshot failed")
            return
        self.snapshots_written += 1
        log.info("wrote metadata snapshot", extra={"fields": {"end_offset": end_offset}})

    async def wait_applied(self, offset: int, timeout_ms: int, clock_ms: Callable[[], int]) -> None:
        """Until the image includes the payload at ``offset``; RequestTimedOutError."""
        deadline_ms = clock_ms() + timeout_ms
        while True:
            waiter = self.signal.waiter()
            if self._image.offset >= offset:
                return
            if self.signal.closed:
                raise NotControllerError("the controller is shutting down")
            remaining = deadline_ms - clock_ms()
            if remaining <= 0 or not await CommitSignal.wait(waiter, remaining):
                if self._image.offset >= offset:
                    return
                raise RequestTimedOutError(
                    f"the record at offset {offset} committed but was not applied in time"
                )
