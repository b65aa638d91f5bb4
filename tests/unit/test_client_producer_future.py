"""RecordFuture: the blocking Producer's future, a concurrent.futures.Future that
shares one condition per producer and is completed with its batch
(FutureGroup.complete), not one by one.

Checks that it behaves as a stock RUNNING future for everything callers do with one:
result/exception with and without timeouts (a notification meant for another batch of
the group is not a timeout), waiting from another thread, done-callbacks,
concurrent.futures.wait and as_completed, asyncio.wrap_future; that its metadata is
its batch's base offset plus its index; and that it cannot be cancelled, completed by
hand, or completed twice. Threads wait on events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from raftka.client.producer._future import FutureGroup, RecordFuture
from raftka.client.producer.accumulator import BatchResult
from raftka.client.structs import RecordMetadata, TopicPartition

TP = TopicPartition("t", 2)


def _future(group: FutureGroup, batch: BatchResult, index: int = 0) -> RecordFuture:
    return RecordFuture(group, batch, index, 1_000 + index, 3, 10)


def test_is_a_running_concurrent_future_completed_by_its_batch() -> None:
    """isinstance holds; RUNNING: not done, cannot be cancelled; result(timeout) times
    out; once its batch completes, result and exception answer at once, with offset
    base + index; completing the batch again, or the future by hand, is refused."""
    group, batch = FutureGroup(), BatchResult(TP)
    f, g = _future(group, batch, 0), _future(group, batch, 4)
    assert isinstance(f, concurrent.futures.Future)
    assert f.running() and not f.done() and not f.cancelled()
    assert f.cancel() is False
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.exception(0)
    group.complete(batch, 70, -1, None)
    assert f.done() and not f.running() and f.exception() is None
    assert f.result() == RecordMetadata("t", 2, 70, 1_000, 3, 10)
    assert g.result() == RecordMetadata("t", 2, 74, 1_004, 3, 10)
    assert "finished" in repr(g)
    with pytest.raises(concurrent.futures.InvalidStateError):
        group.complete(batch, 80, -1, None)
    with pytest.raises(concurrent.futures.InvalidStateError):
        f.set_result(f.result())
    with pytest.raises(concurrent.futures.InvalidStateError):
        f.set_exception(ValueError("no"))


def test_acks_0_log_append_time_and_errors() -> None:
    """acks=0 (base -1): offset -1. A LogAppendTime batch: the broker's time, not the
    record's. A failed batch: every future raises its error."""
    group = FutureGroup()
    no_acks, appended, failed = BatchResult(TP), BatchResult(TP), BatchResult(TP)
    f0, f1, f2 = _future(group, no_acks, 3), _future(group, appended, 1), _future(group, failed)
    group.complete(no_acks, -1, -1, None)
    group.complete(appended, 5, 42, None)
    group.complete(failed, -1, -1, ValueError("bad"))
    assert f0.result().offset == -1
    assert f1.result().offset == 6 and f1.result().timestamp == 42
    assert isinstance(f2.exception(), ValueError)
    with pytest.raises(ValueError, match="bad"):
        f2.result()


def test_a_future_of_a_completed_batch_is_done_at_once() -> None:
    """send builds the future after the append: its batch may have completed already."""
    group, batch = FutureGroup(), BatchResult(TP)
    group.complete(batch, 9, -1, None)
    f = _future(group, batch, 2)
    assert f.done() and f.result(0).offset == 11
    called: list[int] = []
    f.add_done_callback(lambda done: called.append(done.result().offset))
    assert called == [11] and not batch.watchers


def test_a_waiter_is_not_fooled_by_another_batchs_completion() -> None:
    """Two batches share a group; a thread waits on the second's future without
    timeout. The first completing notifies the shared condition: the waiter keeps
    waiting (the stock code waits once and would raise TimeoutError) until its own
    batch completes."""
    group = FutureGroup()
    first_batch, second_batch = BatchResult(TP), BatchResult(TP)
    second = _future(group, second_batch)
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(second.result().offset)
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
    group.complete(first_batch, 1, -1, None)  # notify_all: the waiter wakes, waits again
    until_blocked("waited again")
    group.complete(second_batch, 2, -1, None)
    t.join(10)
    assert got == [2]


def test_callbacks_wait_and_as_completed() -> None:
    """add_done_callback runs at its batch's completion (or at once when done), once;
    concurrent.futures.wait and as_completed see completions from another thread, one
    batch completing several futures at once."""
    group = FutureGroup()
    batches = [BatchResult(TP), BatchResult(TP)]
    futures = [_future(group, batches[i // 3], i % 3) for i in range(6)]
    called: list[int] = []
    futures[0].add_done_callback(lambda f: called.append(f.result().offset))
    futures[4].add_done_callback(lambda f: called.append(f.result().offset))
    assert batches[0].watchers == [futures[0]]

    def complete() -> None:
        group.complete(batches[0], 10, -1, None)
        group.complete(batches[1], 20, -1, None)

    completer = threading.Thread(target=complete)
    completer.start()
    done, not_done = concurrent.futures.wait(futures, timeout=10)
    assert len(done) == 6 and not not_done
    offsets = sorted(f.result().offset for f in concurrent.futures.as_completed(futures, 10))
    assert offsets == [10, 11, 12, 20, 21, 22]
    completer.join(10)
    futures[1].add_done_callback(lambda f: called.append(f.result().offset))
    assert called == [10, 21, 11]


def test_wait_first_exception_sees_a_failed_batch() -> None:
    """concurrent.futures.wait(FIRST_EXCEPTION) returns when a batch fails."""
    group = FutureGroup()
    ok, bad = BatchResult(TP), BatchResult(TP)
    futures = [_future(group, ok), _future(group, bad)]
    threading.Thread(target=group.complete, args=(bad, -1, -1, ValueError("x"))).start()
    done, not_done = concurrent.futures.wait(
        futures, timeout=10, return_when=concurrent.futures.FIRST_EXCEPTION
    )
    assert done == {futures[1]} and not_done == {futures[0]}


def test_wrap_future_for_asyncio_callers() -> None:
    """asyncio.wrap_future of a RecordFuture completes on the event loop when the
    producer's thread completes its batch."""
    group, batch = FutureGroup(), BatchResult(TP)
    f = _future(group, batch, 1)

    async def main() -> RecordMetadata:
        wrapped = asyncio.wrap_future(f)
        threading.Thread(target=group.complete, args=(batch, 5, -1, None)).start()
        return await asyncio.wait_for(wrapped, 10)

    assert asyncio.run(main()).offset == 6
