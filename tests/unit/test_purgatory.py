"""Unit tests of the acks=all produce purgatory (raftka.broker.replication.purgatory).

Waiters are added by hand with required offsets and deadlines; replication statuses
are built directly, so each test states the HW, ISR size and leadership it feeds in
and checks which requests complete, with which Kafka error, and when.
"""

from __future__ import annotations

import pytest

from raftka.broker.replication import (
    Completion,
    ProducePurgatory,
    PurgatoryFullError,
    ReplicationStatus,
)
from raftka.common.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)


def status(hw: int, *, isr: int = 3, min_isr: int = 2, leader: bool = True) -> ReplicationStatus:
    return ReplicationStatus(
        is_leader=leader, high_watermark=hw, maximal_isr_size=isr, min_insync_replicas=min_isr
    )


def test_hw_completes_waiters_it_reached_in_offset_order() -> None:
    """Only waiters with required offset <= HW complete, lowest offset first; other
    partitions are untouched."""
    p: ProducePurgatory[str] = ProducePurgatory()
    p.add(request_id=1, partition="a", required_offset=10, deadline_ms=100)
    p.add(request_id=2, partition="a", required_offset=5, deadline_ms=100)
    p.add(request_id=3, partition="a", required_offset=20, deadline_ms=100)
    p.add(request_id=4, partition="b", required_offset=1, deadline_ms=100)
    done = p.on_hw_advanced(partition="a", status=status(10))
    assert [(c.request_id, c.error) for c in done] == [(2, None), (1, None)]
    assert len(p) == 2 and (3, "a") in p and (4, "b") in p
    assert p.on_hw_advanced(partition="a", status=status(19)) == []


def test_shrunk_isr_completes_with_not_enough_replicas_after_append() -> None:
    """When the maximal ISR is below min.insync.replicas, every waiter completes with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND at once, whether or not the HW reached it: under
    the minimum the HW stays put (KIP-966), so waiting would only end in a timeout.
    With the ISR big enough, a waiter above the HW keeps waiting."""
    p: ProducePurgatory[str] = ProducePurgatory()
    p.add(request_id=1, partition="a", required_offset=5, deadline_ms=100)
    p.add(request_id=2, partition="a", required_offset=9, deadline_ms=100)
    assert p.on_isr_changed(partition="a", status=status(5, isr=2)) == [Completion(1, "a", None)]
    assert len(p) == 1
    done = p.on_isr_changed(partition="a", status=status(5, isr=1))
    assert [(c.request_id, c.error) for c in done] == [(2, NotEnoughReplicasAfterAppendError)]
    assert len(p) == 0


def test_leadership_lost_fails_all_waiters_of_the_partition() -> None:
    """Losing leadership fails every waiter of that partition, directly or through a
    status that says this broker no longer leads."""
    p: ProducePurgatory[str] = ProducePurgatory()
    p.add(request_id=1, partition="a", required_offset=5, deadline_ms=100)
    p.add(request_id=2, partition="b", required_offset=5, deadline_ms=100)
    p.add(request_id=3, partition="b", required_offset=6, deadline_ms=100)
    done = p.on_leadership_lost(partition="a")
    assert [(c.request_id, c.error) for c in done] == [(1, NotLeaderOrFollowerError)]
    done = p.on_hw_advanced(partition="b", status=status(100, leader=False))
    assert {c.request_id for c in done} == {2, 3}
    assert all(c.error is NotLeaderOrFollowerError for c in done) and len(p) == 0


def test_expiry_times_out_by_deadline_and_skips_decided_waiters() -> None:
    """expire() fails waiters at or past their deadline with REQUEST_TIMED_OUT;
    waiters already completed never time out; next_deadline_ms tracks the earliest
    live deadline."""
    p: ProducePurgatory[str] = ProducePurgatory()
    p.add(request_id=1, partition="a", required_offset=5, deadline_ms=100)
    p.add(request_id=2, partition="a", required_offset=9, deadline_ms=200)
    p.add(request_id=3, partition="b", required_offset=9, deadline_ms=150)
    assert p.next_deadline_ms() == 100
    p.on_hw_advanced(partition="a", status=status(5))
    assert p.next_deadline_ms() == 150
    assert p.expire(now_ms=149) == []
    done = p.expire(now_ms=200)
    assert [(c.request_id, c.partition, c.error) for c in done] == [
        (3, "b", RequestTimedOutError),
        (2, "a", RequestTimedOutError),
    ]
    assert len(p) == 0 and p.next_deadline_ms() is None


def test_bounded_size_and_duplicates() -> None:
    """A full purgatory refuses new waiters with PurgatoryFullError; room frees up when
    waiters complete; the same (request, partition) cannot wait twice."""
    p: ProducePurgatory[str] = ProducePurgatory(waiters_max=2)
    p.add(request_id=1, partition="a", required_offset=1, deadline_ms=10)
    with pytest.raises(ValueError, match="already waits"):
        p.add(request_id=1, partition="a", required_offset=2, deadline_ms=10)
    p.add(request_id=2, partition="a", required_offset=2, deadline_ms=10)
    with pytest.raises(PurgatoryFullError, match="waiters_max=2"):
        p.add(request_id=3, partition="a", required_offset=3, deadline_ms=10)
    p.on_hw_advanced(partition="a", status=status(1))
    p.add(request_id=3, partition="a", required_offset=3, deadline_ms=10)
    assert len(p) == 2


def test_deadline_heap_stays_bounded_under_churn() -> None:
    """Many waiters that complete before their deadline do not pile up in the deadline
    heap beyond twice the bound."""
    p: ProducePurgatory[str] = ProducePurgatory(waiters_max=4)
    for i in range(1_000):
        p.add(request_id=i, partition="a", required_offset=i, deadline_ms=10**9)
        p.on_hw_advanced(partition="a", status=status(i))
        assert len(p._deadlines) <= 8
    assert len(p) == 0 and p.next_deadline_ms() is None
