"""The produce purgatory: acks=all requests waiting for the high watermark, pure.

A leader answers an acks=all produce only once every in-sync replica holds the records,
that is once the partition's HW reaches the offset after the last appended record.
Until then the request waits here with a deadline (request.timeout.ms). Whoever drives
the broker tells the purgatory what happened to each partition and gets back the
requests that are now decided:

- ``on_hw_advanced`` / ``on_isr_changed``: the waiters whose offset the HW reached
  complete, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the (maximal) ISR is below
  min.insync.replicas at that moment (Kafka's checkEnoughReplicasReachOffset);
- ``on_leadership_lost``: every waiter of the partition fails with
  NOT_LEADER_OR_FOLLOWER;
- ``expire(now_ms)``: waiters past their deadline fail with REQUEST_TIMED_OUT.

One entry is one (request, partition) pair; a multi-partition produce is answered by
the shell once all its pairs are decided. The size is bounded (``WAITERS_MAX``) and
``add`` raises ``PurgatoryFullError`` beyond it, so an overloaded broker refuses work
instead of growing without limit. Not thread safe.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from raftka.broker.replication.partition_state import ReplicationStatus
from raftka.common.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)

#: Default bound on the waiting (request, partition) pairs of one broker.
WAITERS_MAX: Final = 100_000

K = TypeVar("K", bound=Hashable)


class PurgatoryFullError(Exception):
    """The purgatory holds its maximum number of waiters; the caller should answer the
    produce with an error (or apply backpressure) rather than park it."""


@dataclass(frozen=True, slots=True)
class Completion(Generic[K]):
    request_id: int
    partition: K
    # None: replicated as asked. Otherwise the Kafka error to answer with.
    error: type[KafkaError] | None


@dataclass(order=True, slots=True)
class _Waiter(Generic[K]):
    required_offset: int
    request_id: int
    deadline_ms: int = field(compare=False)
    partition: K = field(compare=False)
    # Unique per add: names the waiter in the deadline heap.
    seq: int = field(compare=False)


class ProducePurgatory(Generic[K]):
    """Waiting acks=all produces keyed by partition and required offset."""

    def __init__(self, *, waiters_max: int = WAITERS_MAX) -> None:
        if waiters_max < 1:
            raise ValueError("waiters_max must be at least 1")
        self.waiters_max = waiters_max
        # Per partition, sorted by required offset: completion pops a prefix.
        self._by_partition: dict[K, list[_Waiter[K]]] = {}
        self._live: dict[tuple[int, K], _Waiter[K]] = {}
        # (deadline, seq); entries of decided waiters are dropped lazily when they reach
        # the top, or all at once when they outnumber the live ones (bounded memory).
        self._deadlines: list[tuple[int, int]] = []
        self._by_seq: dict[int, _Waiter[K]] = {}
        self._next_seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, item: tuple[int, K]) -> bool:
        return item in self._live

    def add(self, *, request_id: int, partition: K, required_offset: int, deadline_ms: int) -> None:
        """Park a produce until the partition's HW reaches ``required_offset``."""
        key = (request_id, partition)
        if key in self._live:
            raise ValueError(f"request {request_id} already waits on {partition!r}")
        if len(self._live) >= self.waiters_max:
            raise PurgatoryFullError(
                f"purgatory full: {len(self._live)} waiters (waiters_max={self.waiters_max})"
            )
        waiter = _Waiter(required_offset, request_id, deadline_ms, partition, self._next_seq)
        self._next_seq += 1
        bisect.insort(self._by_partition.setdefault(partition, []), waiter)
        self._live[key] = waiter
        self._by_seq[waiter.seq] = waiter
        if len(self._deadlines) >= 2 * self.waiters_max:
            self._deadlines = [(w.deadline_ms, w.seq) for w in self._by_seq.values()]
            heapq.heapify(self._deadlines)
        heapq.heappush(self._deadlines, (deadline_ms, waiter.seq))
        assert len(self._live) == len(self._by_seq) <= self.waiters_max
        assert len(self._deadlines) <= 2 * self.waiters_max

    def _remove(self, waiter: _Waiter[K]) -> None:
        del self._live[(waiter.request_id, waiter.partition)]
        del self._by_seq[waiter.seq]

    def on_hw_advanced(self, *, partition: K, status: ReplicationStatus) -> list[Completion[K]]:
        """The partition's HW moved: complete the waiters it reached."""
        return self._try_complete(partition, status)

    def on_isr_changed(self, *, partition: K, status: ReplicationStatus) -> list[Completion[K]]:
        """The partition's ISR changed: a shrink may move the HW and decide waiters,
        some with NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
        return self._try_complete(partition, status)

    def _try_complete(self, partition: K, status: ReplicationStatus) -> list[Completion[K]]:
        if not status.is_leader:
            return self.on_leadership_lost(partition=partition)
        waiters = self._by_partition.get(partition)
        if not waiters:
            return []
        done: list[Completion[K]] = []
        cut = 0
        for waiter in waiters:
            finished, error = status.check(waiter.required_offset)
            if not finished:
                break
            cut += 1
            self._remove(waiter)
            done.append(Completion(waiter.request_id, partition, error))
        del waiters[:cut]
        if not waiters:
            del self._by_partition[partition]
        return done

    def on_leadership_lost(self, *, partition: K) -> list[Completion[K]]:
        """This broker no longer leads the partition: fail all its waiters."""
        waiters = self._by_partition.pop(partition, [])
        for waiter in waiters:
            self._remove(waiter)
        return [Completion(w.request_id, partition, NotLeaderOrFollowerError) for w in waiters]

    def expire(self, *, now_ms: int) -> list[Completion[K]]:
        """Fail the waiters whose deadline is at or before ``now_ms``."""
        done: list[Completion[K]] = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, seq = heapq.heappop(self._deadlines)
            waiter = self._by_seq.get(seq)
            if waiter is None:
                continue  # already decided
            self._remove(waiter)
            waiters = self._by_partition[waiter.partition]
            at = bisect.bisect_left(waiters, waiter)
            assert waiters[at] is waiter
            del waiters[at]
            if not waiters:
                del self._by_partition[waiter.partition]
            done.append(Completion(waiter.request_id, waiter.partition, RequestTimedOutError))
        return done

    def next_deadline_ms(self) -> int | None:
        """When ``expire`` next has work, for the shell's timer (None: nothing waits)."""
        while self._deadlines and self._deadlines[0][1] not in self._by_seq:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None
