"""Unit tests of the partition replica state (raftka.broker.replication.partition_state).

Each test drives one ``PartitionState`` by hand: metadata transitions, follower fetches
with explicit offsets and a fake clock (plain integers as ``now_ms``), produce checks
and fetch responses, and asserts the numbers Kafka's rules give (HW, ISR proposals,
diverging epochs, truncation offsets, error classes). The leader-epoch cache is the
real ``LeaderEpochFileCache`` held in memory (never flushed).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from partition_state_helpers import LAG_MS, cache, leader

from raftka.broker.replication import (
    EpochEndOffset,
    IsrChangeKind,
    MemoryPartitionLog,
    PartitionState,
    ProducePurgatory,
    ReplicaRole,
)
from raftka.common import errors
from raftka.common.record import Record, build_batch
from raftka.storage.epoch_cache import LeaderEpochFileCache


def follower_of_1(
    broker_id: int,
    *,
    epochs: LeaderEpochFileCache,
    leo: int,
    hw: int = 0,
    epoch: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
) -> PartitionState:
    """Broker ``broker_id`` following broker 1 on t-0 at ``epoch`` (leader and partition
    epoch alike)."""
    state = PartitionState(
        topic="t",
        partition=0,
        local_broker_id=broker_id,
        epochs=epochs,
        log_end_offset=leo,
        high_watermark=hw,
    )
    state.make_follower(
        leader_id=1, leader_epoch=epoch, partition_epoch=epoch, replicas=replicas, isr=isr, now_ms=0
    )
    return state


def fetch(state: PartitionState, replica: int, offset: int, now_ms: int, epoch: int | None = 1):
    return state.on_follower_fetch(
        replica_id=replica,
        fetch_offset=offset,
        last_fetched_epoch=epoch,
        broker_epoch=7,
        registered_epoch=7,
        now_ms=now_ms,
    )


# --------------------------------------------------------------- metadata


def test_stale_metadata_updates_are_ignored_with_a_reason() -> None:
    """Older leader or partition epochs, and exact repeats, change nothing; an equal
    leader epoch with a newer partition epoch (an ISR change) applies."""
    state, _ = leader(epoch=5)
    older = state.make_leader(
        leader_epoch=4, partition_epoch=9, replicas=(1, 2, 3), isr=(1,), now_ms=1
    )
    assert not older.applied and "leader epoch 4" in older.reason
    repeat = state.make_leader(
        leader_epoch=5, partition_epoch=5, replicas=(1, 2, 3), isr=(1,), now_ms=1
    )
    assert not repeat.applied and "already" in repeat.reason
    stale_follow = state.make_follower(
        leader_id=2, leader_epoch=4, partition_epoch=6, replicas=(1, 2, 3), isr=(2,), now_ms=1
    )
    assert not stale_follow.applied and state.role is ReplicaRole.LEADER
    older_partition = state.make_leader(
        leader_epoch=5, partition_epoch=4, replicas=(1, 2, 3), isr=(1,), now_ms=1
    )
    assert not older_partition.applied and "partition epoch" in older_partition.reason
    assert state.committed_isr == {1, 2, 3}
    isr_change = state.make_leader(
        leader_epoch=5, partition_epoch=6, replicas=(1, 2, 3), isr=(1, 2), now_ms=1
    )
    assert isr_change.applied and isr_change.assign_epoch_start_offset is None
    assert state.committed_isr == {1, 2} and state.partition_epoch == 6


def test_becoming_follower_loses_leadership_and_restarts_fetching() -> None:
    """A newer epoch naming another leader turns the leader into a follower of it."""
    state, _ = leader(epoch=3)
    change = state.make_follower(
        leader_id=2, leader_epoch=4, partition_epoch=4, replicas=(1, 2, 3), isr=(2, 3), now_ms=0
    )
    assert change.applied and change.leadership_lost and change.fetch_from_leader == 2
    assert state.role is ReplicaRole.FOLLOWER and state.leader_id == 2 and state.leader_epoch == 4
    assert state.check_produce(acks=-1) is errors.NotLeaderOrFollowerError
    # An ISR-only update for the same leader needs no fetcher restart.
    again = state.make_follower(
        leader_id=2, leader_epoch=4, partition_epoch=5, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=0
    )
    assert again.applied and again.fetch_from_leader is None and not again.leadership_lost


def test_new_leader_keeps_a_lagging_hw_until_followers_fetch() -> None:
    """Becoming leader never moves the HW back; it advances once every ISR member has
    fetched past it (their LEOs are unknown to a new leader)."""
    state, _ = leader(leo=10, hw=6, epoch=2)
    assert state.high_watermark == 6
    assert state.follower(2) is not None and state.follower(2).log_end_offset == -1  # type: ignore[union-attr]
    assert not fetch(state, 2, 4, now_ms=1, epoch=1).high_watermark_moved
    assert state.high_watermark == 6
    fetch(state, 2, 10, now_ms=2, epoch=2)
    assert state.high_watermark == 6  # replica 3 still unknown
    assert fetch(state, 3, 8, now_ms=3, epoch=1).high_watermark_moved
    assert state.high_watermark == 8


def test_new_leader_resets_caught_up_time_so_isr_members_are_not_dropped_at_once() -> None:
    """Followers in the ISR start as caught up at the election time."""
    state, _ = leader(leo=5, hw=5, now_ms=100_000)
    assert state.follower(2).last_caught_up_time_ms == 100_000  # type: ignore[union-attr]
    assert state.maybe_shrink_isr(now_ms=100_000 + LAG_MS) is None


# ------------------------------------------------------------ leader: HW


def test_hw_is_the_minimum_leo_over_the_isr() -> None:
    """HW = min(leader LEO, follower LEOs) over ISR members only, and only forward."""
    state, _ = leader(isr=(1, 2))
    state.on_leader_append(last_offset=9, acks=1)
    assert state.log_end_offset == 10 and state.high_watermark == 0
    r = fetch(state, 2, 7, now_ms=1)
    assert r.high_watermark_moved and state.high_watermark == 7 and r.read_up_to == 10
    fetch(state, 3, 0, now_ms=1)  # not in the ISR: does not hold the HW back
    assert state.high_watermark == 7
    fetch(state, 2, 10, now_ms=2)
    assert state.high_watermark == 10
    assert state.replication_status().check(10) == (True, None)


def test_a_sole_isr_leader_commits_on_append() -> None:
    """With the ISR just the leader, the HW follows the leader's LEO."""
    state, _ = leader(isr=(1,))
    result = state.on_leader_append(last_offset=4, acks=-1)
    assert result.high_watermark_moved and result.wait_for_offset == 5 and not result.respond_now
    assert state.high_watermark == 5


# ------------------------------------------------------- leader: ISR changes


def test_lagging_follower_dropped_after_lag_time_then_re_added() -> None:
    """Replica 3 stops fetching: after replica.lag.time.max.ms it is proposed out of
    the ISR (the ISR itself changes only when the response commits it); once it catches
    up it is proposed back in and the metadata update commits it."""
    state, _ = leader(isr=(1, 2, 3))
    state.on_leader_append(last_offset=9, acks=-1)
    fetch(state, 2, 10, now_ms=1_000)
    fetch(state, 3, 4, now_ms=1_000)  # behind since time 0
    assert state.high_watermark == 4
    assert state.maybe_shrink_isr(now_ms=LAG_MS) is None  # exactly the bound: still in
    proposal = state.maybe_shrink_isr(now_ms=LAG_MS + 1)
    assert proposal is not None and proposal.kind is IsrChangeKind.SHRINK
    assert proposal.new_isr == (1, 2) and proposal.changed == (3,)
    assert proposal.partition_epoch == 1 and proposal.leader_epoch == 1
    assert state.maybe_shrink_isr(now_ms=LAG_MS + 2) is None  # one in flight at a time
    assert state.committed_isr == {1, 2, 3} and state.high_watermark == 4
    outcome = state.on_alter_partition_response(
        proposal=proposal, error=None, leader_epoch=1, partition_epoch=2, isr=(1, 2)
    )
    assert outcome.applied and outcome.high_watermark_moved and outcome.isr_changed
    assert state.committed_isr == {1, 2} and state.high_watermark == 10
    # Replica 3 fetches but is still below the HW: not in sync yet.
    assert fetch(state, 3, 8, now_ms=LAG_MS + 5).isr_proposal is None
    result = fetch(state, 3, 10, now_ms=LAG_MS + 6)
    expand = result.isr_proposal
    assert expand is not None and expand.kind is IsrChangeKind.EXPAND
    assert expand.new_isr == (1, 2, 3) and expand.partition_epoch == 2
    # While pending, the maximal ISR (with 3) holds the HW; min.insync uses committed.
    assert state.maximal_isr == {1, 2, 3} and state.committed_isr == {1, 2}
    state.on_leader_append(last_offset=11, acks=1)
    fetch(state, 2, 12, now_ms=LAG_MS + 7)
    assert state.high_watermark == 10  # replica 3 is at 10
    change = state.make_leader(
        leader_epoch=1, partition_epoch=3, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=LAG_MS + 8
    )
    assert change.applied and state.pending_isr_change is None
    assert state.committed_isr == {1, 2, 3}


def test_caught_up_time_uses_the_previous_fetch_when_chasing_the_leo() -> None:
    """A follower reaching the leader's LEO as of its previous fetch counts as caught
    up at that previous fetch's time (Kafka's rule), not now and not never."""
    state, _ = leader(isr=(1, 2, 3))
    state.on_leader_append(last_offset=9, acks=1)
    fetch(state, 2, 5, now_ms=1_000)  # leader LEO 10 at this fetch
    assert state.follower(2).last_caught_up_time_ms == 0  # type: ignore[union-attr]
    state.on_leader_append(last_offset=19, acks=1)
    fetch(state, 2, 10, now_ms=2_000)  # reached LEO-at-previous-fetch (10), not 20
    assert state.follower(2).last_caught_up_time_ms == 1_000  # type: ignore[union-attr]
    fetch(state, 2, 20, now_ms=3_000)
    assert state.follower(2).last_caught_up_time_ms == 3_000  # type: ignore[union-attr]


def test_expansion_needs_the_leader_epoch_start_offset() -> None:
    """A follower at or above the HW but below where this leader's epoch starts is not
    yet in sync: its log may still end in a suffix the leader lacks."""
    state, _ = leader(leo=10, hw=4, epoch=2, isr=(1, 2), epochs=cache((1, 0)))
    r = fetch(state, 3, 6, now_ms=1, epoch=1)
    assert r.error is None and r.isr_proposal is None
    r = fetch(state, 3, 10, now_ms=2, epoch=1)
    assert r.isr_proposal is not None and r.isr_proposal.new_isr == (1, 2, 3)


def test_alter_partition_errors() -> None:
    """INELIGIBLE_REPLICA reverts to the committed ISR; FENCED_LEADER_EPOCH keeps the
    proposal pending until metadata; NOT_CONTROLLER asks for a retry; an answer to a
    proposal no longer in flight is ignored."""
    state, _ = leader(isr=(1, 2))
    proposal = fetch(state, 3, 0, now_ms=1).isr_proposal
    assert proposal is not None and state.maximal_isr == {1, 2, 3}
    retry = state.on_alter_partition_response(proposal=proposal, error=errors.NotControllerError)
    assert retry.retry == proposal and state.pending_isr_change == proposal
    fenced = state.on_alter_partition_response(
        proposal=proposal, error=errors.FencedLeaderEpochError
    )
    assert not fenced.applied and state.pending_isr_change == proposal
    reverted = state.on_alter_partition_response(
        proposal=proposal, error=errors.IneligibleReplicaError
    )
    assert reverted.isr_changed and state.pending_isr_change is None
    assert state.maximal_isr == {1, 2}
    late = state.on_alter_partition_response(
        proposal=proposal, error=None, leader_epoch=1, partition_epoch=2, isr=(1, 2, 3)
    )
    assert not late.applied and state.committed_isr == {1, 2}


def test_stale_broker_epoch_fetch_is_rejected() -> None:
    """After a fetch with broker epoch 7, one from an older incarnation (5) is fenced."""
    state, _ = leader()
    assert fetch(state, 2, 0, now_ms=1).error is None
    old = state.on_follower_fetch(
        replica_id=2,
        fetch_offset=0,
        last_fetched_epoch=None,
        broker_epoch=5,
        registered_epoch=5,
        now_ms=2,
    )
    assert old.error is errors.StaleBrokerEpochError
    assert fetch(state, 9, 0, now_ms=1).error is errors.NotLeaderOrFollowerError  # not a replica


# ---------------------------------------------------------- leader: produce


def test_not_enough_replicas_before_and_after_append() -> None:
    """acks=all with the committed ISR below min.insync.replicas is refused before the
    append (NOT_ENOUGH_REPLICAS); a request appended while the ISR was big enough that
    completes after a shrink gets NOT_ENOUGH_REPLICAS_AFTER_APPEND, and the shrink below
    min.insync.replicas does not move the HW over the record (KIP-966's strict min
    ISR: the replica that left still counts as having everything below the HW)."""
    state, _ = leader(isr=(1,), min_isr=2)
    assert state.check_produce(acks=-1) is errors.NotEnoughReplicasError
    assert state.check_produce(acks=1) is None
    assert state.check_produce(acks=0) is None
    assert state.check_produce(acks=2) is errors.InvalidRequiredAcksError

    state, _ = leader(isr=(1, 2), min_isr=2)
    purgatory: ProducePurgatory[str] = ProducePurgatory()
    assert state.check_produce(acks=-1) is None
    appended = state.on_leader_append(last_offset=4, acks=-1)
    assert appended.wait_for_offset == 5
    purgatory.add(request_id=1, partition="t-0", required_offset=5, deadline_ms=30_000)
    assert purgatory.on_hw_advanced(partition="t-0", status=state.replication_status()) == []
    proposal = state.maybe_shrink_isr(now_ms=LAG_MS + 1)
    assert proposal is not None and proposal.new_isr == (1,)
    outcome = state.on_alter_partition_response(
        proposal=proposal, error=None, leader_epoch=1, partition_epoch=2, isr=(1,)
    )
    assert not outcome.high_watermark_moved and state.high_watermark == 0
    done = purgatory.on_isr_changed(partition="t-0", status=state.replication_status())
    assert [(c.request_id, c.error) for c in done] == [
        (1, errors.NotEnoughReplicasAfterAppendError)
    ]
    assert state.check_produce(acks=-1) is errors.NotEnoughReplicasError


def test_acks_modes() -> None:
    """acks=1 answers after the local append, acks=0 never, acks=all waits."""
    state, _ = leader()
    one = state.on_leader_append(last_offset=0, acks=1)
    zero = state.on_leader_append(last_offset=1, acks=0)
    assert one.respond_now and one.wait_for_offset is None
    assert not zero.respond_now and zero.wait_for_offset is None


# ------------------------------------------------------------ fetch bounds


def test_consumer_fetch_bounds_and_epoch_checks() -> None:
    """Consumers read up to the HW, followers up to the LEO; offsets outside [log
    start, LEO] are out of range; KIP-320 epoch checks fence old and unknown epochs."""
    state, _ = leader(epoch=4, isr=(1, 2))
    state.on_leader_append(last_offset=9, acks=1)
    assert fetch(state, 2, 6, now_ms=1, epoch=4).read_up_to == 10
    assert state.check_consumer_fetch(fetch_offset=0).read_up_to == 6
    assert state.check_consumer_fetch(fetch_offset=8).read_up_to == 8  # nothing readable
    assert state.check_consumer_fetch(fetch_offset=11).error is errors.OffsetOutOfRangeError
    state.on_log_start_offset(log_start_offset=3)
    assert state.check_consumer_fetch(fetch_offset=2).error is errors.OffsetOutOfRangeError
    assert state.check_consumer_fetch(fetch_offset=3, current_leader_epoch=4).error is None
    assert (
        state.check_consumer_fetch(fetch_offset=3, current_leader_epoch=3).error
        is errors.FencedLeaderEpochError
    )
    assert (
        state.check_consumer_fetch(fetch_offset=3, current_leader_epoch=5).error
        is errors.UnknownLeaderEpochError
    )
    assert fetch(state, 2, 11, now_ms=2, epoch=None).error is errors.OffsetOutOfRangeError
    assert fetch(state, 2, 2, now_ms=2, epoch=None).error is errors.OffsetOutOfRangeError


def test_offset_for_leader_epoch_from_a_client() -> None:
    """OffsetForLeaderEpoch (KIP-101/KIP-320): the leader answers where the largest
    epoch <= the one asked ends (its LEO for the current epoch), after the epoch checks
    of a consumer fetch; a follower answers NOT_LEADER_OR_FOLLOWER."""
    epochs = cache((1, 0), (3, 4))
    state, _ = leader(leo=7, hw=7, epoch=5, epochs=epochs)
    state.on_leader_append(last_offset=9, acks=1)  # LEO 10, epoch 5 starts at 7
    assert state.end_offset_for_epoch(leader_epoch=5) == (None, EpochEndOffset(5, 10))
    assert state.end_offset_for_epoch(leader_epoch=2) == (None, EpochEndOffset(1, 4))
    assert state.end_offset_for_epoch(leader_epoch=4, current_leader_epoch=5) == (
        None,
        EpochEndOffset(3, 7),
    )
    assert state.end_offset_for_epoch(leader_epoch=9) == (None, EpochEndOffset(-1, -1))
    undefined = EpochEndOffset(-1, -1)
    assert state.end_offset_for_epoch(leader_epoch=5, current_leader_epoch=4) == (
        errors.FencedLeaderEpochError,
        undefined,
    )
    assert state.end_offset_for_epoch(leader_epoch=5, current_leader_epoch=6) == (
        errors.UnknownLeaderEpochError,
        undefined,
    )
    follower = follower_of_1(2, epochs=cache((5, 0)), leo=3, epoch=5, replicas=(1, 2), isr=(1, 2))
    assert follower.end_offset_for_epoch(leader_epoch=5) == (
        errors.NotLeaderOrFollowerError,
        undefined,
    )


# --------------------------------------------------------- diverging epochs


def test_kip101_follower_with_a_suffix_from_an_old_epoch() -> None:
    """KIP-101: the follower wrote offsets 2-3 in epoch 2 as a leader that crashed
    before they replicated; the new leader's epoch 3 starts at 2. The follower's fetch
    (offset 4, last epoch 2) diverges at (epoch 1, end 2); it truncates to 2 and the
    next fetch (offset 2, last epoch 1) is accepted."""
    state, _ = leader(leo=2, hw=2, epoch=3, epochs=cache((1, 0)), isr=(1, 3))
    state.on_leader_append(last_offset=5, acks=1)
    r = fetch(state, 3, 4, now_ms=1, epoch=2)
    assert r.diverging_epoch == EpochEndOffset(1, 2) and r.read_up_to == 0
    assert state.follower(3).log_end_offset == -1  # type: ignore[union-attr]

    follower = follower_of_1(
        3, epochs=cache((1, 0), (2, 2)), leo=4, hw=2, epoch=3, replicas=(1, 2, 3), isr=(1, 3)
    )
    out = follower.on_fetch_response(
        leader_high_watermark=2,
        leader_log_start_offset=0,
        diverging_epoch=r.diverging_epoch,
        appended_up_to=4,
    )
    assert out.truncate_to == 2 and follower.log_end_offset == 2
    assert fetch(state, 3, 2, now_ms=2, epoch=1).diverging_epoch is None


def test_diverging_within_the_same_epoch_truncates_to_the_leaders_end() -> None:
    """The follower has epoch 2 up to offset 8 but the leader's epoch 2 ended at 5
    (epoch 3 started there): fetch (8, epoch 2) diverges at (2, 5); truncate to 5."""
    state, _ = leader(leo=5, hw=5, epoch=3, epochs=cache((2, 0)), isr=(1,))
    r = fetch(state, 2, 8, now_ms=1, epoch=2)
    assert r.diverging_epoch == EpochEndOffset(2, 5)
    follower = follower_of_1(
        2, epochs=cache((2, 0)), leo=8, hw=5, epoch=3, replicas=(1, 2, 3), isr=(1,)
    )
    out = follower.on_fetch_response(
        leader_high_watermark=5,
        leader_log_start_offset=0,
        diverging_epoch=r.diverging_epoch,
        appended_up_to=8,
    )
    assert out.truncate_to == 5 and follower.high_watermark == 5


def test_follower_without_the_leaders_epoch_cuts_to_its_own_epoch_end() -> None:
    """The leader answers epoch 3, which the follower never had (it has 1 then 4): the
    follower truncates to where its epoch 1 ends (3), and the HW follows down."""
    follower = follower_of_1(
        2, epochs=cache((1, 0), (4, 3)), leo=6, hw=4, epoch=5, replicas=(1, 2), isr=(1,)
    )
    out = follower.on_fetch_response(
        leader_high_watermark=9,
        leader_log_start_offset=0,
        diverging_epoch=EpochEndOffset(3, 7),
        appended_up_to=6,
    )
    assert out.truncate_to == 3 and follower.log_end_offset == 3 and follower.high_watermark == 3


def test_follower_hw_is_min_of_leader_hw_and_own_leo_and_never_falls() -> None:
    """Follower HW = min(leader HW, own LEO); a lower leader HW does not move it back."""
    follower = follower_of_1(2, epochs=cache((1, 0)), leo=0, epoch=1, replicas=(1, 2), isr=(1, 2))
    out = follower.on_fetch_response(
        leader_high_watermark=10,
        leader_log_start_offset=0,
        diverging_epoch=None,
        appended_up_to=6,
    )
    assert out.high_watermark_moved and follower.high_watermark == 6
    follower.on_fetch_response(
        leader_high_watermark=3,
        leader_log_start_offset=2,
        diverging_epoch=None,
        appended_up_to=8,
    )
    assert follower.high_watermark == 6 and follower.log_start_offset == 2


def test_invariants_are_asserted() -> None:
    """Handing the core an impossible input trips an assertion instead of limping on."""
    state, _ = leader(leo=5, hw=5)
    with pytest.raises(AssertionError):
        state.on_leader_append(last_offset=2, acks=1)
    with pytest.raises(ValueError):
        state.make_leader(leader_epoch=9, partition_epoch=9, replicas=(1, 2), isr=(2,), now_ms=0)


def test_a_state_over_a_log_reads_its_offsets_and_keeps_no_copy() -> None:
    """Built over a log, the state's LEO and log start are the log's, whatever changed
    the log; an append it is told about must already be in the log; offsets and
    epochs cannot be given besides a log."""
    log = MemoryPartitionLog()
    state = PartitionState(topic="t", partition=0, local_broker_id=1, log=log)
    state.make_leader(leader_epoch=1, partition_epoch=1, replicas=(1,), isr=(1,), now_ms=0)
    log.assign_epoch(1, 0)
    info = log.append_as_leader(build_batch([Record(value=b"a"), Record(value=b"b")]), 1)
    assert state.log_end_offset == 2 and state.high_watermark == 0
    state.on_leader_append(last_offset=info.last_offset, acks=1)
    assert state.high_watermark == 2
    with pytest.raises(AssertionError, match="the log holds the append"):
        state.on_leader_append(last_offset=5, acks=1)
    with pytest.raises(ValueError, match="come from the log"):
        PartitionState(topic="t", partition=0, local_broker_id=1, log=log, log_end_offset=2)
    with pytest.raises(ValueError, match="needs a log"):
        PartitionState(topic="t", partition=0, local_broker_id=1)


@settings(max_examples=300, deadline=None)
@given(
    leo=st.integers(0, 20),
    hw_back=st.integers(0, 20),
    leader_hw=st.integers(0, 40),
    leader_log_start=st.integers(0, 40),
)
def test_an_idle_fetch_answer_is_exactly_one_that_changes_nothing(
    leo: int, hw_back: int, leader_hw: int, leader_log_start: int
) -> None:
    """fetch_response_is_idle (the follower's skip of an empty answer) holds exactly
    when on_fetch_response would move neither the HW nor the log start."""
    hw = max(0, leo - hw_back)
    follower = follower_of_1(
        2, epochs=cache((1, 0)), leo=leo, hw=hw, epoch=1, replicas=(1, 2), isr=(1, 2)
    )
    idle = follower.fetch_response_is_idle(
        leader_high_watermark=leader_hw, leader_log_start_offset=leader_log_start
    )
    before = (follower.high_watermark, follower.log_start_offset, follower.log_end_offset)
    out = follower.on_fetch_response(
        leader_high_watermark=leader_hw,
        leader_log_start_offset=leader_log_start,
        diverging_epoch=None,
        appended_up_to=leo,
    )
    after = (follower.high_watermark, follower.log_start_offset, follower.log_end_offset)
    assert idle == (before == after), (before, after, out)
    if idle:
        assert not out.high_watermark_moved and out.log_start_offset == -1
