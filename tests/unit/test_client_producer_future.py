"""RecordFuture: the blocking Producer's future, a concurrent.futures.Future that
shares one condition per producer (no per-record Condition for the GC to walk).

Checks that it behaves as a stock RUNNING future for everything callers do with one:
result/exception with and without timeouts (a notification meant for another future
of the group is not a timeout), waiting from another thread, done-callbacks,
concurrent.futures.wait and as_completed, asyncio.wrap_future, and that it cannot be
cancelled or completed twice. Threads wait on events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from raftka.client.producer._future import FutureGroup, RecordFuture


def test_is_a_running_concurrent_future() -> None:
    """isinstance holds; RUNNING: not done, cannot be cancelled; result(timeout) times
    out; once set, result and exception answer at once; a second set is refused."""
    f: RecordFuture[int] = RecordFuture(FutureGroup())
    assert isinstance(f, concurrent.futures.Future)
    assert f.running() and not f.done() and not f.cancelled()
    assert f.cancel() is False
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.exception(0)
    f.set_result(7)
    assert f.done() and f.result() == 7 and f.exception() is None
    with pytest.raises(concurrent.futures.InvalidStateError):
        f.set_result(8)
    g: RecordFuture[int] = RecordFuture(FutureGroup())
    g.set_exception(ValueError("bad"))
    assert isinstance(g.exception(), ValueError)
    with pytest.raises(ValueError, match="bad"):
        g.result()


def test_a_waiter_is_not_fooled_by_another_futures_completion() -> None:
    """Two futures share a group; a thread waits on the second without timeout. The
    first completing notifies the shared condition: the waiter keeps waiting (the stock
    code waits once and would raise TimeoutError) until its own future completes."""
    group = FutureGroup()
    first: RecordFuture[str] = RecordFuture(group)
    second: RecordFuture[str] = RecordFuture(group)
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(second.result())
        except BaseException as e:  # reported by the assertion below
            got.append(e)

    def blocked_waiters() -> int:
        return len(group.condition._waiters)  # type: ignore[attr-defined]

    def until_blocked(what: str) -> None:
        deadline = time.monotonic() + 10
        while blocked_waiters() != 1:
            assert not got, f"the waiter returned early: {got}"
            assert time.monotonic() < deadline, f"the waiter never {what}"
            time.sleep(0.001)  # polling a condition with a deadline, not synchronising

    t = threading.Thread(target=wait)
    t.start()
    until_blocked("blocked")
    first.set_result("one")  # notify_all: the waiter wakes, checks, waits again
    until_blocked("waited again")
    second.set_result("two")
    t.join(10)
    assert got == ["two"]


def test_callbacks_wait_and_as_completed() -> None:
    """add_done_callback runs at completion (or at once when done);
    concurrent.futures.wait and as_completed see completions from another thread."""
    group = FutureGroup()
    futures: list[RecordFuture[int]] = [RecordFuture(group) for _ in range(5)]
    called: list[int] = []
    futures[0].add_done_callback(lambda f: called.append(f.result()))
    completer = threading.Thread(target=lambda: [f.set_result(i) for i, f in enumerate(futures)])
    completer.start()
    done, not_done = concurrent.futures.wait(futures, timeout=10)
    assert len(done) == 5 and not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, 10)) == [
        0,
        1,
        2,
        3,
        4,
    ]
    completer.join(10)
    futures[1].add_done_callback(lambda f: called.append(f.result()))
    assert called == [0, 1]


def test_wrap_future_for_asyncio_callers() -> None:
    """asyncio.wrap_future of a RecordFuture completes on the event loop when the
    producer's thread completes it."""
    f: RecordFuture[str] = RecordFuture(FutureGroup())

    async def main() -> str:
        wrapped = asyncio.wrap_future(f)
        threading.Thread(target=f.set_result, args=("ok",)).start()
        return await asyncio.wait_for(wrapped, 10)

    assert asyncio.run(main()) == "ok"
