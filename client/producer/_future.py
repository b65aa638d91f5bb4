"""The blocking ``Producer.send``'s future: a ``concurrent.futures.Future`` built cheaply.

A stock ``concurrent.futures.Future`` allocates a ``threading.Condition`` (with an
RLock, a deque and five bound methods) and two lists per instance: about ten objects
the cyclic garbage collector tracks, per record. With 100k records in flight the
collector's passes over them cost more than the rest of ``send`` (measured: 10.9 µs
per record with them, 5.3 µs with the collector off). :class:`RecordFuture` is the
same type (callers' ``result()``, ``concurrent.futures.wait``, ``as_completed`` and
``asyncio.wrap_future`` work unchanged) with:

- one condition shared by every future of a producer (:class:`FutureGroup`), so the
  sender can complete a whole batch under one acquisition of it;
- ``_waiters`` and ``_done_callbacks`` created on first use, under that condition;
- ``result``/``exception`` that wait in a loop (a shared condition is notified for
  other futures too, where the stock code waits once and would report a timeout).

It starts RUNNING, as ``send`` returned it before: the record is queued and cannot be
cancelled. It relies on the attribute names of ``concurrent.futures._base.Future``,
stable from Python 3.8 to 3.13; tests/unit/test_client_producer_future.py pins the
behaviour.
"""

from __future__ import annotations

import concurrent.futures
import threading
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    RUNNING,
)
from typing import Any, TypeVar

__all__ = ["FutureGroup", "RecordFuture"]

T = TypeVar("T")

_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)


class FutureGroup:
    """The condition shared by one producer's futures. Any thread."""

    def __init__(self) -> None:
        # Reentrant: concurrent.futures.wait acquires it once per future it waits for.
        self.mutex = threading.RLock()
        self.condition = threading.Condition(self.mutex)
        #: Threads inside RecordFuture._wait_done, under the condition: completing a
        #: future notifies only when one waits (most records are never waited on
        #: one by one).
        self.waiting = 0


class RecordFuture(concurrent.futures.Future[T]):
    """A RUNNING ``concurrent.futures.Future`` over a shared condition (see the
    module). Any thread may wait on it; the producer's sender completes it."""

    # Class-level defaults of the fields Future.__init__ would set per instance: a
    # write makes the instance's own. Fewer stores per record.
    _state = RUNNING
    _result: Any = None
    _exception: BaseException | None = None
    #: Whether _waiters or _done_callbacks exist (see __getattr__). A flag, not
    #: ``self.__dict__`` lookups: touching ``__dict__`` makes CPython build a dict
    #: object for the instance, one more for the collector per record.
    _extras = False

    def __init__(self, group: FutureGroup) -> None:
        # Not super().__init__(): that allocates the per-future condition and lists
        # this class exists to avoid.
        self._group = group
        self._condition = group.condition

    def __getattr__(self, name: str) -> Any:
        # Only reached when the attribute is missing: the lists a waiter or a
        # done-callback needs, created on first use. Callers hold the condition
        # (add_done_callback, wait, as_completed); setdefault keeps one list even if
        # not.
        if name in ("_waiters", "_done_callbacks"):
            self._extras = True
            return self.__dict__.setdefault(name, [])
        raise AttributeError(name)

    def done(self) -> bool:
        # One attribute read: the sender asks per record, the lock adds nothing.
        return self._state in _DONE

    def _wait_done(self, timeout: float | None) -> bool:
        if self._state in _DONE:
            return True
        with self._condition:
            self._group.waiting += 1
            try:
                return self._condition.wait_for(lambda: self._state in _DONE, timeout)
            finally:
                self._group.waiting -= 1

    def result(self, timeout: float | None = None) -> T:
        if not self._wait_done(timeout):
            raise concurrent.futures.TimeoutError()
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._wait_done(timeout):
            raise concurrent.futures.TimeoutError()
        return super().exception(0)

    def set_result(self, result: T) -> None:
        # The sender calls this once per record: the bare RLock (a C call) rather
        # than the Condition's Python-level __enter__.
        group = self._group
        with group.mutex:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._state = FINISHED
            if self._extras:
                for waiter in self._waiters:
                    waiter.add_result(self)
            if group.waiting:
                self._condition.notify_all()
        if self._extras:
            self._invoke_callbacks()

    def set_exception(self, exception: BaseException | None) -> None:
        group = self._group
        with group.mutex:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._exception = exception
            self._state = FINISHED
            if self._extras:
                for waiter in self._waiters:
                    waiter.add_exception(self)
            if group.waiting:
                self._condition.notify_all()
        if self._extras:
            self._invoke_callbacks()
