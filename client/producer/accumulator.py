"""The producer's record accumulator: per-partition queues of batches. A pure core.

Theory of operation (Kafka's RecordAccumulator, simplified):

- ``append`` adds a record to the last open batch of its partition, or opens a new
  batch when that one cannot take it (``batch_size`` reached). A record larger than
  ``batch_size`` gets a batch of its own, as in Kafka.
- A partition is *ready* when its first batch is full (closed, or not the last in its
  queue), has waited ``linger_ms``, a flush or close is in progress, and it is not
  backing off after a failed attempt. ``ready`` also says when the next partition will
  become ready, so the sender sleeps exactly that long.
- ``drain`` hands the first batch of a partition to the sender; ``reenqueue`` puts a
  failed batch back at the head (order is kept: the sender mutes a partition while it
  has a batch in flight), with ``retry_backoff_ms`` before the next attempt.
- ``expire`` removes batches that waited ``delivery_timeout_ms`` since creation.
- Memory: every record's estimated size counts against ``buffer_memory`` from
  ``append`` until its batch is released (acknowledged or failed). Waiting for room is
  the caller's business (it does the I/O and owns the clock); ``has_room`` answers.

No I/O, no clock: time comes in as ``now_ms``. Each record carries an opaque handle
(the producer's future) that comes back with its batch.

Thread safety: every public method may be called from any thread. One lock (a
``threading.Condition``) guards the queues, the batches still open for appends and the
byte count; each method holds it briefly (``ready`` and ``expire`` for one pass over the
partitions). The blocking ``Producer`` appends from its callers' threads while the
sender drains on the producer's loop thread; the lock is what lets ``send`` skip the
hop to that thread. A batch that ``drain`` returned is closed for appends, so the
sender reads its records and handles without the lock. ``wait_for_room`` is the only
method that blocks (a caller's thread waiting for ``release``); never call it on an
event loop.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from raftka.client.structs import TopicPartition
from raftka.common.errors import IllegalStateError
from raftka.common.record import Record
from raftka.common.record.header import HEADER_SIZE
from raftka.common.record.varint import VARINT_BYTES_MAX, VARLONG_BYTES_MAX

__all__ = [
    "RECORD_OVERHEAD_MAX",
    "AppendResult",
    "BatchResult",
    "ProducerBatch",
    "ReadyCheck",
    "RecordAccumulator",
    "record_size",
]

H = TypeVar("H")

#: Per-record framing bound: length, attributes, timestamp and offset deltas, key and
#: value lengths, header count.
RECORD_OVERHEAD_MAX: Final = 1 + VARINT_BYTES_MAX * 5 + VARLONG_BYTES_MAX
#: Records per batch; Kafka bounds it only by size, a named bound keeps a batch of
#: empty records from growing without limit.
RECORDS_PER_BATCH_MAX: Final = 100_000


def record_size(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]
) -> int:
    """An upper bound of the record's encoded size inside a batch (uncompressed)."""
    size = RECORD_OVERHEAD_MAX + len(key or b"") + len(value or b"")
    for hkey, hvalue in headers:
        size += 2 * VARINT_BYTES_MAX + len(hkey.encode("utf-8")) + len(hvalue or b"")
    return size


@dataclass(eq=False, slots=True)
class BatchResult:
    """A batch's outcome, shared by the futures of its records (Kafka's
    ProduceRequestResult): the blocking producer's futures read it, so the sender
    completes a batch, not each record (see :mod:`._future`, which writes it)."""

    tp: TopicPartition
    done: bool = False
    #: The first record's offset (-1: acks=0, or failed).
    base_offset: int = -1
    log_append_time_ms: int = -1
    error: BaseException | None = None
    #: Futures waited on one by one or given done-callbacks: notified one by one.
    watchers: list[Any] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class ProducerBatch(Generic[H]):
    tp: TopicPartition
    created_ms: int
    records: list[Record] = field(default_factory=list)
    handles: list[H] = field(default_factory=list)
    #: Estimated batch size: the batch header plus each record's bound.
    size_bytes: int = HEADER_SIZE
    #: True once no record may join (full, or handed to the sender).
    closed: bool = False
    attempts: int = 0
    retry_after_ms: int = 0
    #: Idempotence: set on the first drain and kept for every retry (-1: none).
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    result: BatchResult = field(init=False)

    def __post_init__(self) -> None:
        self.result = BatchResult(self.tp)

    def try_append(self, record: Record, size: int, handle: H, batch_size: int) -> bool:
        if self.closed:
            return False
        if self.records and (
            self.size_bytes + size > batch_size or len(self.records) >= RECORDS_PER_BATCH_MAX
        ):
            self.closed = True
            return False
        self.records.append(record)
        self.handles.append(handle)
        self.size_bytes += size
        if self.size_bytes >= batch_size:
            self.closed = True
        return True

    @property
    def records_bytes(self) -> int:
        """The bytes counted against buffer_memory."""
        return self.size_bytes - HEADER_SIZE


@dataclass(frozen=True, slots=True)
class AppendResult:
    new_batch: bool
    #: The batch holding the record is now full (the sticky partitioner may switch).
    batch_full: bool
    #: The sender would not look at this partition in time unless woken (see
    #: "Waking the sender" in :meth:`RecordAccumulator.append`).
    wake_sender: bool = False


#: The possible results, shared: append runs once per record.
_APPEND_RESULTS: Final = {
    (new, full, wake): AppendResult(new_batch=new, batch_full=full, wake_sender=wake)
    for new in (False, True)
    for full in (False, True)
    for wake in (False, True)
}


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    ready: tuple[TopicPartition, ...]
    #: When the next not-yet-ready partition becomes ready (None: no batch waits).
    #: The sender must look again by then: appends rely on it to skip wake-ups.
    next_ready_ms: int | None


class RecordAccumulator(Generic[H]):
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
    ) -> None:
        assert batch_size >= 0 and linger_ms >= 0 and buffer_memory >= 1
        self._batch_size = max(batch_size, 1)
        self._linger_ms = linger_ms
        self._buffer_memory = buffer_memory
        self._backoff_ms = retry_backoff_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch[H]]] = {}
        self._flushes = 0
        #: Guards every field below and the open batches. ``with self._lock`` on the
        #: bare lock (a C call): a Condition's __enter__ is a Python frame per call.
        self._lock = threading.Lock()
        #: Signals released room to wait_for_room, over the same lock.
        self._room = threading.Condition(self._lock)
        #: Set by close: appends are refused from then on (see ``append``).
        self.closing = False
        #: When the sender looks at the queues next, as the last ``ready`` computed it
        #: (None: only when woken); an append that opens a batch due earlier, or fills
        #: one, must wake it. Set to the append's time when it asks for a wake-up, so
        #: later appends do not ask again before the sender's next ``ready``.
        self._sender_next_ms: int | None = None
        #: The sender's muted partitions (its own set, as last passed to ``ready``):
        #: their requests' answers wake the sender anyway.
        self._muted: frozenset[TopicPartition] | set[TopicPartition] = frozenset()
        #: Bytes of records appended and not yet released.
        self.buffered_bytes = 0
        #: Batches created and not yet released (queued or with the sender); a dict
        #: for its insertion order.
        self._unreleased: dict[ProducerBatch[H], None] = {}

    # --------------------------------------------------------------- appending

    def has_room(self, size: int) -> bool:
        """Whether a record of ``size`` bytes fits in buffer_memory now. A record
        alone larger than buffer_memory never fits (the caller rejects it first)."""
        # One attribute read: no lock needed for an answer that may change right after.
        return self.buffered_bytes + size <= self._buffer_memory

    def wait_for_room(self, size: int, timeout_s: float) -> bool:
        """Block the calling thread until ``size`` bytes fit in buffer_memory (True) or
        ``timeout_s`` passed (False). For the blocking producer's callers only: an
        event loop must not block (the async face waits on an asyncio event)."""
        with self._lock:
            return self._room.wait_for(
                lambda: self.closing or self.buffered_bytes + size <= self._buffer_memory,
                timeout_s,
            )

    def append(
        self, tp: TopicPartition, record: Record, size: int, handle: H, now_ms: int
    ) -> tuple[AppendResult, ProducerBatch[H], int]:
        """Add the record to its partition's open batch (or a new one): what it did,
        the batch, and the record's index in it (a plain tuple: once per record).
        Raises IllegalStateError once ``closing`` is set: the sender may already have
        drained its last batch, so a later record would never be sent.

        Waking the sender: waking it from another thread costs a system call on the
        loop's self-pipe, which under the GIL often means waiting for the loop thread
        to let go of it, so ``wake_sender`` is True only when the sender would
        otherwise look too late: the record opened a batch (due after ``linger_ms``)
        or filled one (due now), its partition has no request in flight (that answer
        wakes the sender), and the sender's next look, as the last ``ready`` planned
        it, is later than the batch's due time or not planned at all. The sender must
        therefore sleep no longer than ``ReadyCheck.next_ready_ms`` after ``ready``."""
        assert size > 0
        with self._lock:
            if self.closing:
                raise IllegalStateError("cannot send after the producer has been closed")
            queue = self._queues.get(tp)
            if queue and queue[-1].try_append(record, size, handle, self._batch_size):
                self.buffered_bytes += size
                batch = queue[-1]
                if not batch.closed:
                    # The common case, one record into an open batch that is not yet
                    # full: nothing is due earlier than before, so no wake decision.
                    return _APPEND_RESULTS[False, False, False], batch, len(batch.records) - 1
                new_batch = False
            else:
                if queue is None:
                    queue = self._queues[tp] = deque()
                if queue and queue[-1].created_ms > now_ms:
                    # Callers on several threads read the clock before taking the
                    # lock, so one may arrive with an older now_ms than the batch
                    # another just opened; expire() relies on creation order.
                    now_ms = queue[-1].created_ms
                batch = ProducerBatch(tp, now_ms)
                ok = batch.try_append(record, size, handle, self._batch_size)
                assert ok, "an empty batch takes any record"
                queue.append(batch)
                self._unreleased[batch] = None
                new_batch = True
                self.buffered_bytes += size
            full = batch.closed
            wake = False
            if (new_batch or full) and tp not in self._muted:
                due_ms = now_ms if full else batch.created_ms + self._linger_ms
                next_ms = self._sender_next_ms
                if next_ms is None or next_ms > due_ms:
                    wake = True
                    self._sender_next_ms = now_ms
            return _APPEND_RESULTS[new_batch, full, wake], batch, len(batch.records) - 1

    # --------------------------------------------------------------- draining

    def begin_close(self) -> None:
        """Refuse appends from now on and hurry every queued batch; wakes the threads
        waiting for room (they then find the producer closed)."""
        with self._lock:
            self.closing = True
            self._room.notify_all()

    def begin_flush(self) -> None:
        with self._lock:
            self._flushes += 1

    def end_flush(self) -> None:
        with self._lock:
            assert self._flushes > 0
            self._flushes -= 1

    def ready(
        self, now_ms: int, muted: frozenset[TopicPartition] | set[TopicPartition]
    ) -> ReadyCheck:
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        with self._lock:
            hurry = self._flushes > 0 or self.closing
            for tp, queue in self._queues.items():
                if not queue or tp in muted:
                    continue
                head = queue[0]
                if head.retry_after_ms > now_ms:
                    due = head.retry_after_ms
                elif hurry or head.closed or len(queue) > 1:
                    ready.append(tp)
                    continue
                else:
                    due = head.created_ms + self._linger_ms
                    if due <= now_ms:
                        ready.append(tp)
                        continue
                next_ms = due if next_ms is None else min(next_ms, due)
            self._sender_next_ms = next_ms
            self._muted = muted
        return ReadyCheck(tuple(ready), next_ms)

    def head(self, tp: TopicPartition) -> ProducerBatch[H] | None:
        """The partition's first queued batch (the next ``drain``), or None."""
        with self._lock:
            queue = self._queues.get(tp)
            return queue[0] if queue else None

    def drain(self, tp: TopicPartition) -> ProducerBatch[H] | None:
        """Hand the partition's first batch to the sender (it is closed for appends)."""
        with self._lock:
            return self._drain_locked(tp)

    def _drain_locked(self, tp: TopicPartition) -> ProducerBatch[H] | None:
        queue = self._queues.get(tp)
        if not queue:
            return None
        batch = queue.popleft()
        if not queue:
            del self._queues[tp]
        batch.closed = True
        batch.attempts += 1
        return batch

    def drain_more(self, tp: TopicPartition, bytes_left: int) -> ProducerBatch[H] | None:
        """After :meth:`drain` took a first-attempt batch of ``tp``: the next queued
        batch too, if it is full (or a flush or close hurries everything), has never
        been sent, and fits in ``bytes_left``. Several batches of one partition then
        travel in one request, one after the other in the log."""
        with self._lock:
            queue = self._queues.get(tp)
            if not queue:
                return None
            head = queue[0]
            if head.attempts or not (head.closed or self._flushes > 0 or self.closing):
                return None
            if head.size_bytes > bytes_left:
                return None
            return self._drain_locked(tp)

    def reenqueue(self, batch: ProducerBatch[H], now_ms: int) -> None:
        """A failed attempt goes back to the head of its partition's queue."""
        assert batch.closed
        with self._lock:
            batch.retry_after_ms = now_ms + self._backoff_ms
            self._queues.setdefault(batch.tp, deque()).appendleft(batch)

    def release(self, batch: ProducerBatch[H]) -> None:
        """The batch is done (acknowledged or failed): its memory is free."""
        with self._lock:
            self.buffered_bytes -= batch.records_bytes
            assert self.buffered_bytes >= 0, self.buffered_bytes
            found = self._unreleased.pop(batch, False)
            assert found is None, "a batch released twice"
            # Threads in wait_for_room; next to nothing when none waits.
            self._room.notify_all()

    def unreleased_batches(self) -> list[ProducerBatch[H]]:
        """Every batch appended to and not yet released, oldest first (what a flush
        waits for)."""
        with self._lock:
            return list(self._unreleased)

    def delivery_expired(self, batch: ProducerBatch[H], now_ms: int) -> bool:
        return now_ms - batch.created_ms >= self._delivery_timeout_ms

    def expire(self, now_ms: int) -> list[ProducerBatch[H]]:
        """Remove and return queued batches past delivery_timeout_ms (not released:
        the caller fails their records, then calls ``release``).

        A queue is in creation order (``append`` adds at the tail; ``reenqueue`` puts
        back at the head a batch older than every other one queued), so the expired
        batches are a prefix: stop at the first that has not expired. A sender turn
        costs O(partitions + expired), not O(queued batches)."""
        expired: list[ProducerBatch[H]] = []
        cutoff_ms = now_ms - self._delivery_timeout_ms
        emptied: list[TopicPartition] = []
        with self._lock:
            for tp, queue in self._queues.items():
                if not queue or queue[0].created_ms > cutoff_ms:
                    continue
                while queue and queue[0].created_ms <= cutoff_ms:
                    batch = queue.popleft()
                    # An expired batch may still be the open one: no record may join
                    # it once it is failed.
                    batch.closed = True
                    expired.append(batch)
                if not queue:
                    emptied.append(tp)
            for tp in emptied:
                del self._queues[tp]
        return expired

    def abort_all(self) -> list[ProducerBatch[H]]:
        """Remove every queued batch (close without flush)."""
        with self._lock:
            batches = [b for q in self._queues.values() for b in q]
            for batch in batches:
                batch.closed = True
            self._queues.clear()
        return batches

    def head_size(self, tp: TopicPartition) -> int:
        """The estimated size of the partition's first batch (0 if none)."""
        with self._lock:
            queue = self._queues.get(tp)
            return queue[0].size_bytes if queue else 0

    def has_queued(self) -> bool:
        with self._lock:
            return any(self._queues.values())

    def queue_sizes(self, topic: str) -> dict[int, int]:
        with self._lock:
            return {tp.partition: len(q) for tp, q in self._queues.items() if tp.topic == topic}
