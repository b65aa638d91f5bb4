"""The partition core (``Replica``) over the in-memory log, and the log interface's two
implementations side by side.

Each test drives one or two cores with explicit ``now_ms`` and checks what they return
(the ``Ready`` and the result objects) and what the logs hold: no broker, no network,
no clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from replica_helpers import core, follow, lead, replicate

from raftka.broker.replication import (
    MemoryPartitionLog,
    PartitionLog,
    Replica,
    SegmentPartitionLog,
)
from raftka.common.errors import (
    InvalidRequestError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    StaleBrokerEpochError,
)
from raftka.common.messages import decode
from raftka.common.messages.delete_records import DeleteRecordsRequest
from raftka.common.record import Record, build_batch
from raftka.common.record.header import iter_batches
from raftka.common.structs import EpochEndOffset
from raftka.storage import Log, LogConfig


def batch(*values: bytes, producer_id: int = -1, sequence: int = -1) -> bytes:
    records = [Record(value=v) for v in values]
    return build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


def test_leader_append_reads_leo_from_the_log_and_tells_it_the_hw() -> None:
    """An acks=1 append lands at the log end; the core's LEO is the log's (no copy);
    alone in the ISR the leader moves the HW at once and persists it in the log."""
    log = MemoryPartitionLog()
    r = core(1, log)
    lead(r, isr=(1,))
    out = r.append_as_leader(batch(b"a", b"b"), acks=1)
    assert out.error is None and out.base_offset == 0 and out.wait_for_offset is None
    assert out.ready.high_watermark_moved and out.ready.wake_fetches
    assert r.state.log_end_offset == log.log_end_offset == 2
    assert r.state.high_watermark == log.high_watermark == 2


def test_produce_errors_come_from_the_core() -> None:
    """A follower refuses produces; acks=all below min.insync.replicas is refused
    before anything is appended."""
    r = core(1, min_isr=2)
    follow(r, 2)
    assert isinstance(r.append_as_leader(batch(b"x"), acks=1).error, NotLeaderOrFollowerError)
    leader = core(1, min_isr=2)
    lead(leader, isr=(1,))
    assert isinstance(leader.append_as_leader(batch(b"x"), acks=-1).error, NotEnoughReplicasError)
    assert leader.state.log_end_offset == 0


def test_idempotent_retry_is_answered_with_the_original_offsets() -> None:
    """The same producer id and sequence again is a duplicate (same base offset, the
    log does not grow); a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    r = core(1)
    lead(r, isr=(1,))
    first = r.append_as_leader(batch(b"a", producer_id=7, sequence=0), acks=1)
    r.append_as_leader(batch(b"b"), acks=1)
    again = r.append_as_leader(batch(b"a", producer_id=7, sequence=0), acks=1)
    assert again.duplicate and again.base_offset == first.base_offset == 0
    assert r.state.log_end_offset == 2
    gap = r.append_as_leader(batch(b"c", producer_id=7, sequence=5), acks=1)
    assert isinstance(gap.error, OutOfOrderSequenceNumberError)


def test_acks_all_waits_for_the_follower_and_the_hw_reaches_the_log() -> None:
    """acks=all parks until the ISR follower fetched past the batch; the follower's
    fetch moves the leader's HW (persisted) and the follower learns it next round."""
    leader_log = MemoryPartitionLog()
    leader, follower = core(1, leader_log), core(2)
    lead(leader, isr=(1, 2))
    follow(follower, 1, isr=(1, 2))
    out = leader.append_as_leader(batch(b"a"), acks=-1)
    assert out.wait_for_offset == 1 and leader.state.high_watermark == 0
    read, answer = replicate(follower, leader)
    assert read.records and answer is not None and follower.state.log_end_offset == 1
    read, _ = replicate(follower, leader)  # reports LEO 1: the HW moves
    assert read.ready.high_watermark_moved and leader_log.high_watermark == 1
    assert leader.state.high_watermark == 1 and follower.state.high_watermark == 1
    assert leader.state.replication_status().check(1) == (True, None)


def test_a_new_leader_deduplicates_what_it_replicated_as_follower() -> None:
    """Followers keep the producer table from replicated batches, so after a leader
    change a retry is still a duplicate."""
    leader, follower = core(1), core(2)
    lead(leader, isr=(1, 2))
    follow(follower, 1, isr=(1, 2))
    leader.append_as_leader(batch(b"a", producer_id=9, sequence=0), acks=1)
    replicate(follower, leader)
    lead(follower, epoch=2, isr=(1, 2))
    retry = follower.append_as_leader(batch(b"a", producer_id=9, sequence=0), acks=1)
    assert retry.duplicate and retry.base_offset == 0


def test_a_diverging_follower_truncates_its_log_and_producer_state() -> None:
    """A follower with a suffix from a deposed leader's epoch cuts it off when the new
    leader names the divergence, forgets the producer batches it held there, and then
    replicates the new leader's records."""
    old, new = core(1), core(2)
    lead(old, isr=(1, 2))
    follow(new, 1, isr=(1, 2))
    old.append_as_leader(batch(b"a"), acks=1)
    replicate(new, old)
    old.append_as_leader(batch(b"lost", producer_id=5, sequence=0), acks=1)  # only on 1
    lead(new, epoch=2, isr=(2,))
    new.append_as_leader(batch(b"b"), acks=1)
    follow(old, 2, epoch=2, isr=(2,))
    read, answer = replicate(old, new)
    assert read.diverging_epoch == EpochEndOffset(1, 1)
    assert answer is not None and answer.truncated == (2, 1)
    assert old.state.log_end_offset == 1 and old.producers.entry(5) is None
    replicate(old, new)
    assert old.log.read(0, 1 << 20) == new.log.read(0, 1 << 20)


def test_delete_records_moves_the_start_and_followers_follow() -> None:
    """DeleteRecords up to the HW moves the leader's log start (above it:
    OFFSET_OUT_OF_RANGE); the follower moves its own start from the next fetch answer;
    a follower that fell below the leader's start restarts its log there."""
    leader, follower, late = core(1), core(2), core(3)
    lead(leader, isr=(1, 2))
    follow(follower, 1, isr=(1, 2))
    follow(late, 1, isr=(1, 2))
    for v in (b"a", b"b", b"c", b"d"):
        leader.append_as_leader(batch(v), acks=1)
        replicate(follower, leader)
    replicate(follower, leader)
    assert leader.state.high_watermark == 4
    error, _ = leader.delete_records(5)
    assert isinstance(error, OffsetOutOfRangeError)
    target, ready = leader.delete_records(3)
    assert target == 3 and ready.wake_fetches and leader.state.log_start_offset == 3
    replicate(follower, leader)
    assert follower.state.log_start_offset == 3 and leader.low_watermark() == 0
    replicate(follower, leader)  # its next fetch reports the start it moved to
    assert leader.low_watermark() == 3
    replicate(late, leader)  # fetches from 0 < 3: out of range, restarts at 3
    assert late.state.log_start_offset == late.state.log_end_offset == 3
    replicate(late, leader)
    assert late.state.log_end_offset == 4


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_follower_restarted_inside_a_batch_starts_at_its_base(
    on_disk: bool, tmp_path: Path
) -> None:
    """The leader's log start inside a batch (DeleteRecords): a follower restarted
    there gets the whole batch from its base and restarts its log at that base instead
    of failing the append forever (Kafka's Partition does the same), on either log."""
    follower_log: PartitionLog = (
        SegmentPartitionLog(Log.open(tmp_path / "t-0", LogConfig(), clock_ms=lambda: 0))
        if on_disk
        else MemoryPartitionLog()
    )
    leader, late = core(1), core(3, follower_log)
    lead(leader, isr=(1,))
    leader.append_as_leader(batch(b"a", b"b", b"c"), acks=1)
    leader.delete_records(1)
    follow(late, 1, isr=(1,))
    replicate(late, leader)  # out of range: restarts empty at 1
    assert late.state.log_start_offset == late.state.log_end_offset == 1
    replicate(late, leader)
    assert late.state.log_end_offset == 3 and late.state.high_watermark == 3


def test_tick_proposes_dropping_a_lagging_follower() -> None:
    """Past replica.lag.time.max.ms without catching up, the leader's tick proposes an
    ISR without that follower (one proposal in flight)."""
    leader = core(1)
    lead(leader, isr=(1, 2))
    leader.append_as_leader(batch(b"a"), acks=1)
    assert leader.tick(500).isr_proposal is None
    proposal = leader.tick(5_000).isr_proposal
    assert proposal is not None and proposal.new_isr == (1,)
    assert leader.tick(6_000).isr_proposal is None
    outcome, ready = leader.on_alter_partition_response(
        proposal=proposal, error=None, leader_epoch=1, partition_epoch=2, isr=(1,)
    )
    assert outcome.applied and ready.high_watermark_moved and leader.state.high_watermark == 1


def _follower_fetch(
    leader: Replica,
    replica_id: int,
    fetch_offset: int,
    *,
    broker_epoch: int,
    registered_epoch: int | None,
    now_ms: int = 0,
):
    return leader.on_follower_fetch(
        replica_id=replica_id,
        fetch_offset=fetch_offset,
        last_fetched_epoch=1 if fetch_offset else None,
        broker_epoch=broker_epoch,
        registered_epoch=registered_epoch,
        now_ms=now_ms,
        max_bytes=1 << 20,
        current_leader_epoch=1,
    )


@pytest.mark.parametrize(
    ("replica_id", "broker_epoch", "registered_epoch", "error"),
    [
        (2, -1, 1, StaleBrokerEpochError),  # no epoch at all
        (2, 0, 1, StaleBrokerEpochError),  # an older incarnation
        (2, 2, 1, StaleBrokerEpochError),  # newer than the image: not yet vouched for
        (2, 1, None, StaleBrokerEpochError),  # fenced or unregistered
        (9, 1, 1, NotLeaderOrFollowerError),  # not a replica of the partition
    ],
)
def test_an_impostor_follower_fetch_is_refused_and_changes_nothing(
    replica_id: int, broker_epoch: int, registered_epoch: int | None, error: type
) -> None:
    """Invariant 9 (KIP-903): with the follower's real log behind, a fetch in its name
    at the leader's LEO with any broker epoch but its registration's (or from a broker
    outside the replica set) is refused; the HW, the follower's progress and the ISR
    state are exactly as before."""
    leader = core(1)
    lead(leader, isr=(1, 2))
    leader.append_as_leader(batch(b"a", b"b"), acks=1)
    assert leader.state.high_watermark == 0
    before = (leader.state.follower(2), leader.state.high_watermark, leader.state.maximal_isr)
    read = _follower_fetch(
        leader,
        replica_id,
        2,
        broker_epoch=broker_epoch,
        registered_epoch=registered_epoch,
        now_ms=10,
    )
    assert isinstance(read.error, error) and not read.records
    assert read.high_watermark == 0 and not read.ready.high_watermark_moved
    assert read.ready.isr_proposal is None
    assert (leader.state.follower(2), leader.state.high_watermark, leader.state.maximal_isr) == (
        before
    )
    # The real follower, with its registered epoch, is credited.
    real = _follower_fetch(leader, 2, 2, broker_epoch=1, registered_epoch=1, now_ms=11)
    assert real.error is None and leader.state.high_watermark == 2


def test_a_follower_restarted_with_an_empty_disk_leaves_the_isr_until_caught_up() -> None:
    """A new incarnation (a higher registered epoch) fetching from offset 0 while the
    HW is 2 lost committed records: the leader proposes it out of the ISR at once, the
    HW does not fall, and it is proposed back only once it holds everything committed."""
    leader = core(1)
    lead(leader, isr=(1, 2))
    leader.append_as_leader(batch(b"a", b"b"), acks=1)
    assert _follower_fetch(leader, 2, 2, broker_epoch=1, registered_epoch=1).error is None
    assert leader.state.high_watermark == 2
    empty = _follower_fetch(leader, 2, 0, broker_epoch=5, registered_epoch=5, now_ms=100)
    assert empty.error is None and empty.records
    proposal = empty.ready.isr_proposal
    assert proposal is not None and proposal.new_isr == (1,) and proposal.changed == (2,)
    assert leader.state.high_watermark == 2
    outcome, _ = leader.on_alter_partition_response(
        proposal=proposal, error=None, leader_epoch=1, partition_epoch=2, isr=(1,)
    )
    assert outcome.applied and leader.state.committed_isr == {1}
    # Catching up halfway is not enough; holding everything committed is.
    half = _follower_fetch(leader, 2, 1, broker_epoch=5, registered_epoch=5, now_ms=200)
    assert half.error is None and half.ready.isr_proposal is None
    back = _follower_fetch(leader, 2, 2, broker_epoch=5, registered_epoch=5, now_ms=300)
    assert back.ready.isr_proposal is not None and back.ready.isr_proposal.new_isr == (1, 2)


def test_memory_and_segment_logs_agree(tmp_path: Path) -> None:
    """The same core calls over the segment log and over the in-memory log give the
    same offsets, epochs, bytes and HW: the simulation's log stands for the real one."""
    segment = Log.open(tmp_path / "t-0", LogConfig(), clock_ms=lambda: 0)
    logs: list[PartitionLog] = [SegmentPartitionLog(segment), MemoryPartitionLog()]
    seen = []
    for log in logs:
        r = core(1, log)
        lead(r, isr=(1,))
        r.append_as_leader(batch(b"a", b"b", producer_id=3, sequence=0), acks=1)
        lead(r, epoch=2, isr=(1,))
        r.append_as_leader(batch(b"c"), acks=1)
        r.delete_records(1)
        data = log.read(0 if log.log_start_offset == 0 else log.log_start_offset, 1 << 20)
        headers = [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(data)]
        seen.append(
            (
                log.log_start_offset,
                log.log_end_offset,
                r.state.high_watermark,
                log.end_offset_for(1, log.log_end_offset),
                headers,
            )
        )
    segment.close()
    assert seen[0] == seen[1]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}', "partition"),
        (b'{"partitions": [{"topic": "", "partition": 0, "offset": 1}]}', "topic"),
        (b'{"partitions": [{"topic": "t", "partition": 0}]}', "offset"),
        (b'{"partitions": [], "timeout_ms": 1.5}', "timeout_ms"),
        (b'{"partitions": {}}', "partitions"),
        (b"[]", "object"),
        (b"not json", "JSON"),
    ],
)
def test_delete_records_bad_input_is_invalid_request_naming_the_field(
    body: bytes, field: str
) -> None:
    """The typed DeleteRecords request refuses bad input with INVALID_REQUEST that
    names the offending field."""
    with pytest.raises(InvalidRequestError, match=field):
        decode(body, DeleteRecordsRequest)


def test_delete_records_request_decodes_kafka_defaults() -> None:
    """timeout_ms defaults to 30 s; -1 (the HW) and other offsets decode (their meaning
    is the broker's per-partition answer)."""
    request = decode(
        b'{"partitions": [{"topic": "t", "partition": 0, "offset": -1}]}', DeleteRecordsRequest
    )
    assert request.timeout_ms == 30_000 and request.partitions[0].offset == -1
