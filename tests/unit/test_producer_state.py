"""Unit tests for the producer-state manager (raftka.broker.producer_state).

Each test drives a ProducerStateManager as a partition leader would: validate a batch,
"append" it at offsets the test chooses, update; then checks the decision Kafka's
rules give (Append, Duplicate with the original offsets, or the named error), the
window of 5, sequence wrap-around, expiry, truncation and follower rebuild.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from producer_state_helpers import header_of, producer_batch

from raftka.broker.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    SEQUENCE_MAX,
    Append,
    Decision,
    Duplicate,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateManager,
    Rejected,
    in_sequence,
    next_sequence,
)
from raftka.common.record.batch import Record, build_batch
from raftka.common.record.header import BatchHeader, parse_header

PID = 1000


def batch(
    seq: int, *, count: int = 1, epoch: int = 0, pid: int = PID, ts: int = 1_000
) -> ProducerBatch:
    return producer_batch(pid, seq, count=count, epoch=epoch, ts=ts)


@dataclass
class Leader:
    """A leader over an in-memory log of headers: validate, append, update."""

    manager: ProducerStateManager = field(default_factory=ProducerStateManager)
    log: list[BatchHeader] = field(default_factory=list)
    next_offset: int = 0

    def produce(self, b: ProducerBatch) -> Decision:
        decision = self.manager.validate_and_prepare(b)
        if isinstance(decision, Append):
            first = self.next_offset
            self.next_offset += b.last_offset_delta + 1
            self.log.append(header_of(b, first))
            self.manager.update(b, first_offset=first, last_offset=self.next_offset - 1)
        return decision


def error_name(decision: Decision) -> str:
    assert isinstance(decision, Rejected), decision
    return decision.error_name


def test_in_sequence_appends_are_accepted_and_advance_the_sequence() -> None:
    """Batches 0, 3 (count 3), 6 follow each other; the entry tracks the last sequence."""
    leader = Leader()
    assert isinstance(leader.produce(batch(0, count=3)), Append)
    assert isinstance(leader.produce(batch(3, count=3)), Append)
    assert isinstance(leader.produce(batch(6)), Append)
    entry = leader.manager.entry(PID)
    assert entry is not None
    assert entry.last_sequence == 6
    assert entry.last_offset == 6
    assert len(leader.log) == 3


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets() -> None:
    """Append 7 batches of 2 records, then retry each of the last 5: Duplicate with the
    offsets and timestamp it was first appended with; the log does not grow."""
    leader = Leader()
    sent = [batch(2 * i, count=2, ts=500 + i) for i in range(7)]
    for b in sent:
        assert isinstance(leader.produce(b), Append)
    for i, b in enumerate(sent[-NUM_BATCHES_TO_RETAIN:], start=2):
        assert leader.produce(b) == Duplicate(
            producer_id=PID, first_offset=2 * i, last_offset=2 * i + 1, timestamp=500 + i
        )
    assert len(leader.log) == 7


def test_a_retry_older_than_the_window_is_out_of_order() -> None:
    """The 6th batch back is no longer retained: its retry is OUT_OF_ORDER_SEQUENCE_NUMBER,
    never appended again."""
    leader = Leader()
    for seq in range(6):
        leader.produce(batch(seq))
    assert error_name(leader.produce(batch(0))) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert isinstance(leader.produce(batch(1)), Duplicate)
    assert len(leader.log) == 6


def test_a_gap_is_out_of_order_and_so_is_a_retry_with_another_size() -> None:
    """Sequence 2 after 0 leaves a gap; a batch at a retained start but another length is
    not the same batch."""
    leader = Leader()
    leader.produce(batch(0))
    leader.produce(batch(1, count=2))
    assert error_name(leader.produce(batch(4))) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert error_name(leader.produce(batch(1, count=1))) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    rejected = leader.produce(batch(4))
    assert isinstance(rejected, Rejected)
    assert rejected.error.code == 45


def test_an_older_epoch_is_invalid_producer_epoch_even_for_a_retained_sequence() -> None:
    """After an epoch bump the old epoch is fenced: even a retry of one of its batches gets
    INVALID_PRODUCER_EPOCH, not its offsets."""
    leader = Leader()
    leader.produce(batch(0, epoch=3))
    assert isinstance(leader.produce(batch(0, epoch=4)), Append)
    assert error_name(leader.produce(batch(1, epoch=3))) == "INVALID_PRODUCER_EPOCH"
    assert error_name(leader.produce(batch(0, epoch=3))) == "INVALID_PRODUCER_EPOCH"


def test_an_epoch_bump_must_restart_at_sequence_zero() -> None:
    """A bumped epoch with sequence 0 is accepted and clears the old epoch's window; with
    any other sequence it is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's rule)."""
    leader = Leader()
    for seq in range(3):
        leader.produce(batch(seq, epoch=0))
    assert error_name(leader.produce(batch(3, epoch=1))) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert isinstance(leader.produce(batch(0, epoch=1)), Append)
    entry = leader.manager.entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert len(entry.batches) == 1
    assert isinstance(leader.produce(batch(0, epoch=1)), Duplicate)


def test_unknown_producer_follows_kafka_after_kip_360() -> None:
    """No state for the producer id: sequence 0 and any other sequence are both accepted
    (Kafka >= 2.5); the strict legacy mode answers UNKNOWN_PRODUCER_ID for seq != 0."""
    leader = Leader()
    assert isinstance(leader.produce(batch(0, pid=1)), Append)
    assert isinstance(leader.produce(batch(57, pid=2)), Append)
    assert isinstance(leader.produce(batch(58, pid=2)), Append)

    strict = Leader(ProducerStateManager(ProducerStateConfig(unknown_producer_id_strict=True)))
    assert isinstance(strict.produce(batch(0, pid=1)), Append)
    rejected = strict.produce(batch(57, pid=2))
    assert error_name(rejected) == "UNKNOWN_PRODUCER_ID"
    assert isinstance(rejected, Rejected)
    assert rejected.error.code == 59


def test_sequences_wrap_from_int_max_to_zero() -> None:
    """A batch ending at 2^31-1 is followed by sequence 0; a batch straddling the wrap
    (2^31-2 .. 1) is followed by 2 and is recognised as a duplicate."""
    assert next_sequence(SEQUENCE_MAX) == 0
    assert in_sequence(SEQUENCE_MAX, 0)
    assert not in_sequence(SEQUENCE_MAX, SEQUENCE_MAX + 1)
    leader = Leader()
    assert isinstance(leader.produce(batch(SEQUENCE_MAX - 1, count=2)), Append)
    assert isinstance(leader.produce(batch(0)), Append)
    straddle = batch(SEQUENCE_MAX, count=3)  # MAX, 0, 1
    other = Leader()
    other.produce(batch(SEQUENCE_MAX - 1))
    assert isinstance(other.produce(straddle), Append)
    assert straddle.last_sequence == 1
    assert isinstance(other.produce(batch(2)), Append)
    assert other.produce(straddle) == Duplicate(
        producer_id=PID, first_offset=1, last_offset=3, timestamp=1_000
    )
    assert error_name(other.produce(batch(SEQUENCE_MAX))) == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_non_idempotent_batches_bypass_producer_state() -> None:
    """producer_id -1 is always appended and leaves no state."""
    leader = Leader()
    plain = batch(-1, pid=-1, epoch=-1)
    assert isinstance(leader.produce(plain), Append)
    assert isinstance(leader.produce(plain), Append)
    assert leader.manager.entries == {}


def test_malformed_idempotent_headers_are_invalid_record() -> None:
    """A producer id with a negative sequence or epoch cannot be tracked: INVALID_RECORD."""
    manager = ProducerStateManager()
    assert error_name(manager.validate_and_prepare(batch(-1))) == "INVALID_RECORD"
    assert error_name(manager.validate_and_prepare(batch(0, epoch=-1))) == "INVALID_RECORD"


def test_expiration_removes_idle_producers_by_last_batch_timestamp() -> None:
    """A producer whose last batch timestamp is expiration_ms old goes; a fresher one stays;
    afterwards the expired one is unknown again (any sequence accepted)."""
    config = ProducerStateConfig(producer_id_expiration_ms=1_000)
    leader = Leader(ProducerStateManager(config))
    leader.produce(batch(0, pid=1, ts=10_000))
    leader.produce(batch(0, pid=2, ts=10_500))
    assert leader.manager.remove_expired_producers(now_ms=10_999) == ()
    assert leader.manager.remove_expired_producers(now_ms=11_000) == (1,)
    assert set(leader.manager.entries) == {2}
    assert isinstance(leader.produce(batch(40, pid=1, ts=11_000)), Append)
    assert ProducerStateManager().config.producer_id_expiration_ms == 86_400_000
    with pytest.raises(ValueError, match="producer_id_expiration_ms"):
        ProducerStateConfig(producer_id_expiration_ms=0)


def test_truncate_to_drops_batches_at_or_above_the_offset() -> None:
    """Producer 1 has batches at 0,2,4; producer 2 only at 3. Truncating at 3 keeps
    producer 1's batches below 3 and forgets producer 2; the truncated batch of producer
    1 is no longer a duplicate but the next in sequence."""
    leader = Leader()
    leader.produce(batch(0, pid=1))  # 0
    leader.produce(batch(1, pid=1))  # 1
    leader.produce(batch(2, pid=1))  # 2
    leader.produce(batch(0, pid=2))  # 3
    leader.produce(batch(3, pid=1))  # 4
    leader.manager.truncate_to(3)
    assert set(leader.manager.entries) == {1}
    entry = leader.manager.entry(1)
    assert entry is not None
    assert [b.last_offset for b in entry.batches] == [0, 1, 2]
    assert entry.last_sequence == 2
    assert isinstance(leader.manager.validate_and_prepare(batch(3, pid=1)), Append)
    # After truncation the state matches a rebuild from the surviving log.
    rebuilt = ProducerStateManager.rebuilt_from(h for h in leader.log if h.base_offset < 3)
    assert rebuilt.entries == leader.manager.entries


def test_follower_rebuild_equals_leader_state() -> None:
    """A follower applying the leader's log headers (including non-idempotent batches, an
    epoch bump and a wrap) ends with the same entries and classifies retries the same."""
    leader = Leader()
    sent = [
        batch(0, pid=1),
        batch(0, pid=-1, epoch=-1),
        batch(SEQUENCE_MAX, pid=2, count=2),
        *[batch(s, pid=1, count=2) for s in range(1, 15, 2)],
        batch(0, pid=2, epoch=1),
        batch(1, pid=2, epoch=1),
    ]
    for b in sent:
        assert isinstance(leader.produce(b), Append), b
    follower = ProducerStateManager.rebuilt_from(leader.log)
    assert follower.entries == leader.manager.entries
    probes = [*sent, batch(15, pid=1), batch(2, pid=2, epoch=1), batch(1, pid=2)]
    for b in probes:
        assert follower.validate_and_prepare(b) == leader.manager.validate_and_prepare(b)


def test_follower_path_skips_validation_but_keeps_a_contiguous_window() -> None:
    """A follower applies what the leader wrote even across a gap (e.g. state expired on
    the leader only): it restarts the window there rather than keep a broken one."""
    follower = ProducerStateManager()
    follower.update_from_follower_batch(header_of(batch(0), 0))
    follower.update_from_follower_batch(header_of(batch(1), 1))
    follower.update_from_follower_batch(header_of(batch(9), 2))
    entry = follower.entry(PID)
    assert entry is not None
    assert [b.first_sequence for b in entry.batches] == [9]


def test_header_from_real_batch_bytes() -> None:
    """ProducerBatch.from_header reads the codec's header of real RecordBatch bytes, and
    a control batch (transaction marker) leaves no state yet."""
    raw = build_batch(
        [Record(timestamp_ms=7, key=None, value=b"x", headers=()) for _ in range(3)],
        base_offset=40,
        producer_id=9,
        producer_epoch=2,
        base_sequence=12,
        is_transactional=True,
    )
    header = parse_header(raw)
    b = ProducerBatch.from_header(header)
    assert b == ProducerBatch(
        producer_id=9,
        producer_epoch=2,
        base_sequence=12,
        last_offset_delta=2,
        max_timestamp=7,
        is_transactional=True,
    )
    manager = ProducerStateManager()
    manager.update_from_follower_batch(header)
    entry = manager.entry(9)
    assert entry is not None
    assert entry.is_transactional
    assert (entry.batches[0].first_offset, entry.batches[0].last_offset) == (40, 42)
    control = parse_header(
        build_batch(
            [Record(timestamp_ms=7, key=b"\x00\x00\x00\x00", value=b"", headers=())],
            producer_id=10,
            producer_epoch=0,
            is_control=True,
        )
    )
    manager.update_from_follower_batch(control)
    assert manager.entry(10) is None
