"""The blocking face: one background event-loop thread per client.

``Producer``, ``Consumer`` and ``Admin`` each own a :class:`LoopThread` and run their
async twin on it; a public call that needs the loop submits a coroutine to it and
waits in the calling thread (``asyncio.run_coroutine_threadsafe``), so the async core
is the only implementation and its I/O state lives on one thread. Calls serialised on
the loop are safe from several threads at once.

The per-record calls do not hop: ``Producer.send`` appends to the accumulator under its
lock in the caller's thread and wakes the sender with ``call_soon_threadsafe`` once per
batch; ``Consumer.poll`` returns records already fetched in the caller's thread. Those
paths touch only state guarded by a lock (the accumulator, the fetcher's buffer) or
immutable snapshots the loop replaces whole (the metadata view); see each class.

The thread starts on the first call (constructors do no I/O and start no thread) and
stops at ``close()``. It is a daemon thread so a program that forgets ``close()`` can
still exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from raftka.common.errors import IllegalStateError, KafkaTimeoutError

__all__ = ["LoopThread", "chain_future"]

T = TypeVar("T")

#: How long close() waits for the loop thread to end after its loop stopped.
THREAD_JOIN_TIMEOUT_S: Final = 10.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"{self._name} is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name=self._name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def started(self) -> bool:
        return self._loop is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            loop = self.loop
        except BaseException:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it. ``timeout_s`` is a safety net on
        top of the coroutine's own timeouts: past it the coroutine is cancelled and
        KafkaTimeoutError raised."""
        if self.in_loop_thread():
            coro.close()
            raise IllegalStateError(
                f"{self._name}: a blocking call from inside the client's own loop (a callback?)"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaTimeoutError(f"{self._name}: no result within {timeout_s} s") from None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if threading.current_thread() is not thread:
            thread.join(THREAD_JOIN_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()


def chain_future(
    source: asyncio.Future[T], loop: asyncio.AbstractEventLoop
) -> concurrent.futures.Future[T]:
    """A concurrent future that completes with ``source`` (which lives on ``loop``)."""
    target: concurrent.futures.Future[T] = concurrent.futures.Future()
    target.set_running_or_notify_cancel()

    def copy(done: asyncio.Future[T]) -> None:
        if done.cancelled():
            # A running concurrent future cannot be cancelled; report it instead.
            target.set_exception(concurrent.futures.CancelledError())
        elif (exc := done.exception()) is not None:
            target.set_exception(exc)
        else:
            target.set_result(done.result())

    loop.call_soon_threadsafe(source.add_done_callback, copy)
    return target


class ClosingOnExit:
    """``with`` support for the blocking faces: the block's end calls ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
