"""The blocking ``Producer.send``'s future: a ``concurrent.futures.Future`` the sender
completes per batch, not per record (Kafka's ``FutureRecordMetadata``).

A stock ``concurrent.futures.Future`` allocates a ``threading.Condition`` (with an
RLock, a deque and five bound methods) and two lists per instance: about ten objects
the cyclic garbage collector tracks, per record. And completing one future per record
on the producer's loop thread was the largest cost the blocking face had over the
async one (py-spy, 200k records: the loop thread spent about 1 s in ``set_result`` and
the per-record loop around it, while the caller's thread competed for the GIL).

:class:`RecordFuture` is the same type (callers' ``result()``, ``concurrent.futures.wait``,
``as_completed`` and ``asyncio.wrap_future`` work unchanged) built as Kafka builds its
``FutureRecordMetadata``: it points to its batch's :class:`BatchResult` and knows its
index in the batch, and its state, result and exception are read from there. The
sender completes a whole batch with one :meth:`FutureGroup.complete`: a few stores
under one lock, whatever the number of records; the ``RecordMetadata`` is built when a
caller asks for it, in the caller's thread.

- One condition shared by every future of a producer (:class:`FutureGroup`).
- ``_waiters`` and ``_done_callbacks`` created on first use, under that condition;
  such a future is then a *watcher* of its batch, notified one by one at completion.
- ``result``/``exception`` wait in a loop (a shared condition is notified for other
  batches too, where the stock code waits once and would report a timeout).

It is RUNNING until its batch completes: the record is queued and cannot be cancelled,
and only the producer completes it (``set_result``/``set_exception`` are refused). It
relies on the attribute names of ``concurrent.futures._base.Future``, stable from
Python 3.8 to 3.13; tests/unit/test_client_producer_future.py pins the behaviour.
"""

from __future__ import annotations

import concurrent.futures
import threading
from concurrent.futures._base import FINISHED, RUNNING
from typing import Any

from raftka.client.producer.accumulator import BatchResult
from raftka.client.structs import RecordMetadata

__all__ = ["FutureGroup", "RecordFuture"]


class FutureGroup:
    """The condition shared by one producer's futures. Any thread."""

    def __init__(self) -> None:
        # Reentrant: concurrent.futures.wait acquires it once per future it waits for.
        self.mutex = threading.RLock()
        self.condition = threading.Condition(self.mutex)
        #: Threads inside RecordFuture._wait_done, under the condition: completing a
        #: batch notifies only when one waits (most records are never waited on one
        #: by one).
        self.waiting = 0

    def complete(
        self,
        result: BatchResult,
        base_offset: int,
        log_append_time_ms: int,
        error: BaseException | None,
    ) -> None:
        """Complete every future of the batch ``result`` belongs to (once): with
        ``error``, or with offsets from ``base_offset`` (-1: acks=0). Then wake the
        threads waiting and run the done-callbacks of its watchers."""
        with self.mutex:
            if result.done:
                raise concurrent.futures.InvalidStateError(f"batch of {result.tp} completed twice")
            result.base_offset = base_offset
            result.log_append_time_ms = log_append_time_ms
            result.error = error
            # Last: a thread that reads done without the lock sees the fields set.
            result.done = True
            # Taken, not kept: the watchers and the result refer to each other, and
            # concurrent.futures.wait may still register a done future.
            watchers: list[RecordFuture] = result.watchers
            result.watchers = []
            for future in watchers:
                for waiter in future._waiters:
                    if error is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
            if self.waiting:
                self.condition.notify_all()
        for future in watchers:
            future._invoke_callbacks()


class RecordFuture(concurrent.futures.Future[RecordMetadata]):
    """A ``concurrent.futures.Future`` of one record, completed with its batch (see the
    module). Any thread may wait on it."""

    # Class-level default: set on the instance once _waiters or _done_callbacks exist.
    # A flag, not ``self.__dict__`` lookups: touching ``__dict__`` makes CPython build a
    # dict object for the instance, one more for the collector per record.
    _extras = False

    def __init__(  # noqa: PLR0917  (the per-record hot path: positional)
        self,
        group: FutureGroup,
        batch: BatchResult,
        index: int,
        timestamp_ms: int,
        key_size: int,
        value_size: int,
    ) -> None:
        # Not super().__init__(): that allocates the per-future condition and lists
        # this class exists to avoid.
        self._group = group
        self._condition = group.condition
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms
        self._key_size = key_size
        self._value_size = value_size

    def __getattr__(self, name: str) -> Any:
        # Only reached when the attribute is missing: the lists a waiter or a
        # done-callback needs, created on first use, when the future becomes a watcher
        # of its batch. Callers hold the condition (add_done_callback, wait,
        # as_completed), as FutureGroup.complete does; setdefault keeps one list even
        # if not.
        if name in ("_waiters", "_done_callbacks"):
            if not self._extras:
                self._extras = True
                self._batch.watchers.append(self)
            return self.__dict__.setdefault(name, [])
        raise AttributeError(name)

    # The fields concurrent.futures reads directly (wait, as_completed, repr), derived
    # from the batch; nothing but FutureGroup.complete writes them.

    @property
    def _state(self) -> str:  # type: ignore[override]
        return FINISHED if self._batch.done else RUNNING

    @property
    def _exception(self) -> BaseException | None:  # type: ignore[override]
        batch = self._batch
        return batch.error if batch.done else None

    @property
    def _result(self) -> RecordMetadata | None:  # type: ignore[override]
        batch = self._batch
        if not batch.done or batch.error is not None:
            return None
        topic, partition = batch.tp
        base = batch.base_offset
        return RecordMetadata(
            topic,
            partition,
            -1 if base < 0 else base + self._index,
            batch.log_append_time_ms if batch.log_append_time_ms >= 0 else self._timestamp_ms,
            self._key_size,
            self._value_size,
        )

    def done(self) -> bool:
        # One attribute read: no lock needed.
        return self._batch.done

    def _wait_done(self, timeout: float | None) -> bool:
        batch = self._batch
        if batch.done:
            return True
        with self._condition:
            self._group.waiting += 1
            try:
                return self._condition.wait_for(lambda: batch.done, timeout)
            finally:
                self._group.waiting -= 1

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._wait_done(timeout):
            raise concurrent.futures.TimeoutError()
        error = self._batch.error
        if error is not None:
            raise error
        result = self._result
        assert result is not None
        return result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._wait_done(timeout):
            raise concurrent.futures.TimeoutError()
        return self._batch.error

    def set_result(self, result: RecordMetadata) -> None:
        raise concurrent.futures.InvalidStateError(
            f"{self!r} is completed by its producer, with its batch"
        )

    def set_exception(self, exception: BaseException | None) -> None:
        raise concurrent.futures.InvalidStateError(
            f"{self!r} is completed by its producer, with its batch"
        )
