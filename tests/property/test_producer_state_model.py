"""Model-based property test of idempotent-producer de-duplication.

How: hypothesis draws a schedule for two simulated idempotent producers talking to one
partition leader (a ProducerStateManager in front of a list-of-headers log). A producer
keeps at most 5 batches in flight, as Kafka's does with idempotence. Each step either
sends a new batch, fills the window of 5 and has all of it appended with the responses
lost (a burst), delivers any in-flight batch (so requests reorder), delivers it with
the response lost (so the producer retries it later), re-delivers a copy of any batch
the producer ever sent (a network duplicate, possibly from an older epoch), or bumps the
producer's epoch, abandoning what is in flight (a delivery timeout). Producers may
start near 2^31-1 so sequences wrap.

Checks: after every step, no record (producer, epoch, sequence) is in the log twice,
each producer epoch's batches sit in the log in sequence order without gaps, a new epoch
starts at 0, a Duplicate answer carries the offsets of the original append, and a
retry of an in-flight batch is a Duplicate exactly when that batch is already in the
log (with 5 in flight it is always inside the window). At the
end, a follower rebuilt from the log's headers has the same state and classifies every
batch ever sent (and the next ones) the same as the leader; so does a manager loaded
from an encoded snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st
from producer_state_helpers import header_of, producer_batch

from raftka.broker.producer_state import (
    SEQUENCE_MAX,
    Append,
    Duplicate,
    ProducerBatch,
    ProducerStateManager,
    Rejected,
    next_sequence,
)
from raftka.broker.producer_state_snapshot import decode_snapshot, encode_snapshot
from raftka.common.record.header import BatchHeader

IN_FLIGHT_MAX = 5  # Kafka's max.in.flight.requests.per.connection cap with idempotence
PIDS = (11, 12)


@dataclass
class Producer:
    pid: int
    next_seq: int
    epoch: int = 0
    # Sent and not yet retired, oldest first. A batch retires once it and every older
    # batch are acknowledged: Kafka's producer receives responses in order on its
    # connection and counts max.in.flight from the oldest unacknowledged batch, so the
    # batches a retry can race with never span more than 5.
    in_flight: list[ProducerBatch] = field(default_factory=list)
    acked: set[ProducerBatch] = field(default_factory=set)
    sent: list[ProducerBatch] = field(default_factory=list)

    def unacked(self) -> list[ProducerBatch]:
        return [b for b in self.in_flight if b not in self.acked]

    def ack(self, b: ProducerBatch) -> None:
        self.acked.add(b)
        while self.in_flight and self.in_flight[0] in self.acked:
            self.acked.discard(self.in_flight.pop(0))

    def new_batch(self, *, count: int, now_ms: int) -> ProducerBatch:
        b = producer_batch(self.pid, self.next_seq, count=count, epoch=self.epoch, ts=now_ms)
        self.next_seq = next_sequence(self.next_seq, count)
        self.sent.append(b)
        return b


@dataclass
class Partition:
    manager: ProducerStateManager = field(default_factory=ProducerStateManager)
    log: list[BatchHeader] = field(default_factory=list)
    next_offset: int = 0
    # (pid, epoch, base seq, last seq) -> (first offset, last offset) of the append
    appended: dict[tuple[int, int, int, int], tuple[int, int]] = field(default_factory=dict)

    @staticmethod
    def key(b: ProducerBatch) -> tuple[int, int, int, int]:
        return (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence)

    def deliver(self, b: ProducerBatch) -> Append | Duplicate | Rejected:
        decision = self.manager.validate_and_prepare(b)
        event(
            type(decision).__name__
            + (f" {decision.error_name}" if isinstance(decision, Rejected) else "")
        )
        key = self.key(b)
        if isinstance(decision, Append):
            first = self.next_offset
            last = first + b.last_offset_delta
            self.next_offset = last + 1
            self.log.append(header_of(b, first))
            self.manager.update(b, first_offset=first, last_offset=last)
            assert key not in self.appended, f"appended twice: {b}"
            self.appended[key] = (first, last)
        elif isinstance(decision, Duplicate):
            assert self.appended[key] == (decision.first_offset, decision.last_offset), b
        return decision


def _check_log(log: list[BatchHeader]) -> None:
    records: set[tuple[int, int, int]] = set()
    last_seq: dict[tuple[int, int], int] = {}
    last_epoch: dict[int, int] = {}
    for h in log:
        for delta in range(h.last_offset_delta + 1):
            record = (h.producer_id, h.producer_epoch, next_sequence(h.base_sequence, delta))
            assert record not in records, f"record {record} twice in the log"
            records.add(record)
        key = (h.producer_id, h.producer_epoch)
        if key in last_seq:
            assert h.base_sequence == next_sequence(last_seq[key]), f"gap or reorder at {h}"
        elif h.producer_id in last_epoch:
            assert h.producer_epoch > last_epoch[h.producer_id], h
            assert h.base_sequence == 0, f"new epoch not starting at 0: {h}"
        last_seq[key] = h.last_sequence
        last_epoch[h.producer_id] = h.producer_epoch


OPS = st.tuples(
    # Weighted towards sending and delivering so most schedules reach a full window.
    st.sampled_from(
        ["send"] * 4 + ["deliver"] * 4 + ["lose"] * 2 + ["network_dup", "bump", "burst"]
    ),
    st.sampled_from(PIDS),
    st.integers(min_value=0, max_value=63),  # which batch
    st.integers(min_value=1, max_value=3),  # record count of a new batch
)


@settings(max_examples=150, deadline=None)
@given(
    starts=st.tuples(
        st.sampled_from([0, SEQUENCE_MAX - 4, SEQUENCE_MAX]),
        st.sampled_from([0, 7, SEQUENCE_MAX - 1]),
    ),
    ops=st.lists(OPS, min_size=30, max_size=200),
)
def test_retries_reorders_and_duplicates_never_duplicate_a_record(
    starts: tuple[int, int], ops: list[tuple[str, int, int, int]]
) -> None:
    producers = {pid: Producer(pid=pid, next_seq=s) for pid, s in zip(PIDS, starts, strict=True)}
    partition = Partition()
    clock_ms = 1_000
    for op, pid, which, count in ops:
        clock_ms += 1
        p = producers[pid]
        if op == "send" and len(p.in_flight) < IN_FLIGHT_MAX:
            p.in_flight.append(p.new_batch(count=count, now_ms=clock_ms))
        elif op in ("deliver", "lose") and p.unacked():
            b = p.unacked()[which % len(p.unacked())]
            was_appended = partition.key(b) in partition.appended
            decision = partition.deliver(b)
            # A retry of an in-flight batch already in the log is always answered with
            # its offsets: with at most 5 in flight it is always inside the window.
            assert isinstance(decision, Duplicate) == was_appended, (b, decision)
            if isinstance(decision, Rejected):
                # In flight, current epoch: only a gap can refuse it; it is retried later.
                assert decision.error_name == "OUT_OF_ORDER_SEQUENCE_NUMBER", decision
            elif op == "deliver":
                p.ack(b)
        elif op == "burst":
            # Fill the in-flight window and get every batch appended with its response
            # lost: the next retries probe the far edge of the retained window.
            while len(p.in_flight) < IN_FLIGHT_MAX:
                p.in_flight.append(p.new_batch(count=count, now_ms=clock_ms))
            for b in p.unacked():
                partition.deliver(b)
        elif op == "network_dup" and p.sent:
            partition.deliver(p.sent[which % len(p.sent)])
        elif op == "bump":
            # The producer gives up on what is in flight (delivery timeout: the application
            # sees an error) and bumps its epoch, restarting at 0. Copies of the abandoned
            # batches can still arrive through network_dup and must be fenced.
            p.epoch += 1
            p.next_seq = 0
            p.in_flight.clear()
            p.acked.clear()
        _check_log(partition.log)

    leader = partition.manager
    follower = ProducerStateManager.rebuilt_from(partition.log)
    assert follower.entries == leader.entries
    snapshot = encode_snapshot(leader.entries.values(), offset=partition.next_offset)
    restored = ProducerStateManager()
    restored.load_entries(decode_snapshot(snapshot, offset=partition.next_offset))
    assert restored.entries == leader.entries

    probes = [b for p in producers.values() for b in p.sent]
    for p in producers.values():
        for epoch in (p.epoch, p.epoch + 1):
            for seq in (p.next_seq, 0, next_sequence(p.next_seq)):
                probes.append(
                    ProducerBatch(
                        producer_id=p.pid,
                        producer_epoch=epoch,
                        base_sequence=seq,
                        last_offset_delta=0,
                        max_timestamp=clock_ms,
                    )
                )
    for b in probes:
        expected = leader.validate_and_prepare(b)
        assert follower.validate_and_prepare(b) == expected, b
        assert restored.validate_and_prepare(b) == expected, b
