"""The producer's record accumulator, a pure core driven with a fake clock (now_ms).

Checks batching by batch_size, readiness by linger_ms, flush and close hurrying every
batch, backoff after a failed attempt keeping order, delivery-timeout expiry, and the
buffer_memory accounting that send()'s back-pressure relies on.
"""

from __future__ import annotations

from raftka.client.producer.accumulator import RecordAccumulator, record_size
from raftka.client.structs import TopicPartition
from raftka.common.record import Record

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
    result = acc.append(TP, rec, size, 1, now_ms=1000)
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
    assert [a.new_batch for a in appended].count(True) == 2
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
