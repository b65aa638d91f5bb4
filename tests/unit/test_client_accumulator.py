"""The producer's record accumulator, a pure core driven with a fake clock (now_ms).

Checks batching by batch_size, readiness by linger_ms, flush and close hurrying every
batch, backoff after a failed attempt keeping order, delivery-timeout expiry, and the
buffer_memory accounting that send()'s back-pressure relies on; then what the
blocking producer relies on from several threads: appends racing a draining sender,
waiting for room, and when an append asks for the sender to be woken.
"""

from __future__ import annotations

import sys
import threading

import pytest

from raftka.client.producer.accumulator import RecordAccumulator, record_size
from raftka.client.structs import TopicPartition
from raftka.common.errors import IllegalStateError
from raftka.common.record import Record
from raftka.common.record.header import HEADER_SIZE

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _acc(**kw: int) -> RecordAccumulator[int]:
    args = {
        "batch_size": 1000,
        "linger_ms": 5,
        "buffer_memory": 100_000,
        "retry_backoff_ms": 100,
        "delivery_timeout_ms": 10_000,
    }
    args.update(kw)
    return RecordAccumulator(**args)


def _rec(n: int = 10) -> tuple[Record, int]:
    value = b"x" * n
    return Record(value, None, 0), record_size(None, value, ())


def test_linger_makes_a_partition_ready_and_says_when() -> None:
    """A lone small batch becomes ready only after linger_ms; ready() reports the
    moment it will be, so the sender can sleep exactly that long."""
    acc = _acc()
    rec, size = _rec()
    result, _, _ = acc.append(TP, rec, size, 1, now_ms=1000)
    assert result.new_batch and not result.batch_full
    check = acc.ready(1002, set())
    assert check.ready == () and check.next_ready_ms == 1005
    assert acc.ready(1005, set()).ready == (TP,)


def test_batch_size_closes_batches() -> None:
    """Records join the open batch until batch_size; then a new batch starts and the
    full one is ready at once (no linger)."""
    acc = _acc(batch_size=300)
    rec, size = _rec(50)
    appended = [acc.append(TP, rec, size, i, now_ms=0) for i in range(4)]
    assert [a.new_batch for a, _, _ in appended].count(True) == 2
    # Each append names its batch and the record's index in it.
    assert [(b.handles[i], i) for _, b, i in appended] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert acc.ready(0, set()).ready == (TP,)
    first = acc.drain(TP)
    assert first is not None and first.handles == [0, 1]
    assert first.size_bytes <= 300


def test_record_larger_than_batch_size_gets_its_own_batch() -> None:
    """As in Kafka, a record above batch_size is not rejected: it is a batch alone."""
    acc = _acc(batch_size=100)
    big, big_size = _rec(500)
    small, small_size = _rec(1)
    acc.append(TP, small, small_size, 0, now_ms=0)
    acc.append(TP, big, big_size, 1, now_ms=0)
    acc.append(TP, small, small_size, 2, now_ms=0)
    handles = []
    while (b := acc.drain(TP)) is not None:
        handles.append(b.handles)
    assert handles == [[0], [1], [2]]


def test_flush_and_close_hurry_every_batch() -> None:
    """During a flush (or close) a batch is ready before its linger ends."""
    acc = _acc(linger_ms=1000)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    assert acc.ready(1, set()).ready == ()
    acc.begin_flush()
    assert acc.ready(1, set()).ready == (TP,)
    acc.end_flush()
    assert acc.ready(1, set()).ready == ()
    acc.closing = True
    assert acc.ready(1, set()).ready == (TP,)


def test_muted_partition_is_not_ready() -> None:
    """The sender mutes a partition with a batch in flight; it is not drained."""
    acc = _acc(linger_ms=0)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    acc.append(TP1, rec, size, 1, now_ms=0)
    assert acc.ready(0, {TP}).ready == (TP1,)


def test_reenqueue_keeps_order_and_backs_off() -> None:
    """A failed batch goes back before later ones and waits retry_backoff_ms."""
    acc = _acc(linger_ms=0)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    first = acc.drain(TP)
    assert first is not None
    acc.append(TP, rec, size, 1, now_ms=1)
    acc.reenqueue(first, now_ms=10)
    check = acc.ready(50, set())
    assert check.ready == () and check.next_ready_ms == 110
    assert acc.ready(110, set()).ready == (TP,)
    again = acc.drain(TP)
    assert again is first and again.attempts == 2
    later = acc.drain(TP)
    assert later is not None and later.handles == [1]


def test_expire_after_delivery_timeout() -> None:
    """Queued batches older than delivery_timeout_ms are handed back for failing."""
    acc = _acc(delivery_timeout_ms=100, linger_ms=1000)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    acc.append(TP1, rec, size, 1, now_ms=50)
    assert acc.expire(99) == []
    expired = acc.expire(100)
    assert [b.handles for b in expired] == [[0]]
    assert acc.has_queued()


def test_buffer_memory_accounting() -> None:
    """has_room reflects appended-but-unreleased bytes; release frees them."""
    rec, size = _rec(100)
    acc = _acc(buffer_memory=size * 2, linger_ms=0)
    assert acc.has_room(size)
    acc.append(TP, rec, size, 0, now_ms=0)
    acc.append(TP1, rec, size, 1, now_ms=0)
    assert not acc.has_room(1)
    batch = acc.drain(TP)
    assert batch is not None
    assert not acc.has_room(1)  # in flight still counts
    acc.release(batch)
    assert acc.has_room(size) and not acc.has_room(size + 1)
    assert acc.buffered_bytes == size


def test_expire_takes_the_expired_prefix_of_each_queue() -> None:
    """Expiry removes, per partition, exactly the batches past delivery_timeout_ms: a
    retried (re-enqueued, oldest) head and the old batches behind it go, the young tail
    stays queued in order, and a partition left empty is dropped."""
    acc = _acc(delivery_timeout_ms=100, linger_ms=1000, batch_size=1)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    acc.append(TP, rec, size, 1, now_ms=10)
    acc.append(TP, rec, size, 2, now_ms=60)
    acc.append(TP1, rec, size, 3, now_ms=10)
    head = acc.drain(TP)
    assert head is not None
    acc.reenqueue(head, now_ms=20)
    assert [b.handles for b in acc.expire(109)] == [[0]]
    assert [b.handles for b in acc.expire(110)] == [[1], [3]]
    assert acc.queue_sizes("t") == {0: 1}
    assert acc.expire(159) == []
    assert [b.handles for b in acc.expire(160)] == [[2]]
    assert not acc.has_queued()


def test_unreleased_batches_are_what_a_flush_waits_for() -> None:
    """A batch counts as unreleased from its first append, through drain and
    re-enqueue, until release; the list is oldest first."""
    acc = _acc(batch_size=1)
    rec, size = _rec()
    acc.append(TP, rec, size, 0, now_ms=0)
    acc.append(TP1, rec, size, 1, now_ms=1)
    first = acc.drain(TP)
    assert first is not None
    assert [b.handles for b in acc.unreleased_batches()] == [[0], [1]]
    acc.release(first)
    assert [b.handles for b in acc.unreleased_batches()] == [[1]]


def test_append_asks_for_a_wake_up_only_when_the_sender_would_look_too_late() -> None:
    """Waking the sender from another thread is costly, so append says when it is
    needed: a new batch when the sender has no plan to look (or a later one), not again
    until the sender's next ready(); not for a partition with a request in flight (its
    answer wakes the sender); a full batch when the sender's plan is later than now."""
    rec, size = _rec()
    acc = _acc(batch_size=HEADER_SIZE + 3 * size, linger_ms=5)  # 3 records fill a batch
    assert acc.append(TP, rec, size, 0, now_ms=0)[0].wake_sender  # no plan yet
    assert not acc.append(TP1, rec, size, 1, now_ms=0)[0].wake_sender  # a wake is on its way
    check = acc.ready(1, set())
    assert check.next_ready_ms == 5  # the sender will look at 5
    tp2 = TopicPartition("t", 2)
    assert not acc.append(tp2, rec, size, 2, now_ms=1)[0].wake_sender  # due at 6 >= 5
    # A batch filling up is due now, before the planned look at 5.
    results = [acc.append(TP, rec, size, 3, now_ms=2)[0] for _ in range(2)]
    assert results[-1].batch_full and results[-1].wake_sender
    # Muted (in flight): the answer wakes the sender, whatever its plan.
    acc.ready(3, {TopicPartition("t", 3)})
    acc.drain(TP)
    acc.ready(3, {TP, TopicPartition("t", 3)})
    assert not acc.append(TopicPartition("t", 3), rec, size, 4, now_ms=3)[0].wake_sender


def test_appends_from_several_threads_while_a_sender_drains() -> None:
    """Four threads append 2,000 records each to two partitions while this thread
    drains and releases batches: no record is lost or duplicated, the byte count
    returns to zero, and each thread's records keep their order within a partition."""
    acc: RecordAccumulator[tuple[int, int]] = RecordAccumulator(
        batch_size=300,
        linger_ms=0,
        buffer_memory=10_000_000,
        retry_backoff_ms=0,
        delivery_timeout_ms=10**9,
    )
    rec, size = _rec()
    per_thread = 2_000

    def work(n: int) -> None:
        for i in range(per_thread):
            acc.append(TP if i % 2 else TP1, rec, size, (n, i), now_ms=i)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    drained: dict[TopicPartition, list[tuple[int, int]]] = {TP: [], TP1: []}

    def drain_ready() -> None:
        for tp in acc.ready(10**6, set()).ready:
            batch = acc.drain(tp)
            assert batch is not None
            drained[tp].extend(batch.handles)
            acc.release(batch)

    # A tiny switch interval makes the GIL change hands inside append and drain.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            drain_ready()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(interval)
    while acc.has_queued():
        drain_ready()
    assert sum(len(h) for h in drained.values()) == 4 * per_thread
    assert acc.buffered_bytes == 0 and not acc.has_queued()
    for tp, handles in drained.items():
        for n in range(4):
            mine = [i for m, i in handles if m == n]
            assert mine == sorted(mine) and len(mine) == per_thread // 2, (tp, n)


def test_wait_for_room_returns_once_a_release_frees_enough() -> None:
    """wait_for_room blocks a caller's thread until release() frees room (True) or
    the timeout passes (False); close wakes it too. The order of the waiter and the
    release does not matter: the condition is checked under the lock."""
    acc = _acc(buffer_memory=100)
    rec, size = _rec(50)
    acc.append(TP, rec, size, 0, now_ms=0)
    assert not acc.has_room(size)
    assert acc.wait_for_room(size, 0.01) is False
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(acc.wait_for_room(size, 30)))
    waiter.start()
    batch = acc.drain(TP)
    assert batch is not None
    acc.release(batch)
    waiter.join(30)
    assert outcome == [True]
    acc.append(TP, rec, size, 1, now_ms=1)
    waiter = threading.Thread(target=lambda: outcome.append(acc.wait_for_room(size, 30)))
    waiter.start()
    acc.begin_close()
    waiter.join(30)
    assert outcome == [True, True]
    with pytest.raises(IllegalStateError):
        acc.append(TP, rec, size, 2, now_ms=2)
