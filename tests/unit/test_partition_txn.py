"""The partition core's transaction paths (``Replica``): transactional appends with and
without KIP-890 part 1 guards, WriteTxnMarkers, the last stable offset, read_committed
reads with their aborted transactions, and the follower, restart and recovery paths
keeping the same open transactions and ``.txnindex`` entries. Over the in-memory log
and the segment log; no broker, no network, no clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from replica_helpers import REPLICAS, core, lead, replicate

from raftka.broker.producer_state import VerificationGuard
from raftka.broker.replication import (
    Replica,
    SegmentPartitionLog,
)
from raftka.broker.replication.partition import READ_COMMITTED, ProduceOutcome
from raftka.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotLeaderOrFollowerError,
    TransactionCoordinatorFencedError,
)
from raftka.common.record import Record, build_batch
from raftka.common.record.batch import decode_batches
from raftka.common.record.read_committed import AbortedTransaction, filter_read_committed
from raftka.storage import Log, LogConfig
from raftka.storage.transaction_index import txn_index_file_name

PID, OTHER = 7, 8


def txn(*values: bytes, pid: int = PID, seq: int = 0, epoch: int = 0) -> bytes:
    return build_batch(
        [Record(value=v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def plain(*values: bytes) -> bytes:
    return build_batch([Record(value=v) for v in values])


def marker(
    r: Replica,
    committed: bool,
    *,
    epoch: int = 0,
    coordinator_epoch: int = 3,
    version: int = 1,
    pid: int = PID,
) -> ProduceOutcome:
    return r.write_txn_marker(
        producer_id=pid,
        producer_epoch=epoch,
        committed=committed,
        coordinator_epoch=coordinator_epoch,
        transaction_version=version,
    )


def committed_values(r: Replica, fetch_offset: int = 0) -> tuple[list[bytes], int]:
    read = r.read_for_consumer(
        fetch_offset=fetch_offset,
        max_bytes=1 << 20,
        min_one_batch=True,
        isolation_level=READ_COMMITTED,
    )
    assert read.error is None and read.aborted_transactions is not None
    result = filter_read_committed(
        list(decode_batches(read.records)),
        [AbortedTransaction(a.producer_id, a.first_offset) for a in read.aborted_transactions],
        fetch_offset=fetch_offset,
    )
    return [rec.value or b"" for rec in result.records], result.next_offset


def test_an_open_transaction_holds_the_lso_and_read_committed_stops_below_it() -> None:
    """Verification off (no guards): the batch opens the transaction at its offset;
    read_uncommitted sees everything up to the HW, read_committed only what is below
    the transaction's start."""
    r = core(1)
    lead(r, isr=(1,))
    r.append_as_leader(plain(b"p0"), acks=1)
    out = r.append_as_leader(txn(b"t1", b"t2"), acks=1)
    assert out.error is None and out.base_offset == 1
    r.append_as_leader(plain(b"p3"), acks=1)
    assert r.state.high_watermark == 4 and r.last_stable_offset == 1
    assert r.producers.ongoing_txns == {PID: 1}
    assert committed_values(r) == ([b"p0"], 1)
    uncommitted = r.read_for_consumer(fetch_offset=0, max_bytes=1 << 20, min_one_batch=True)
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 1
    assert len(list(decode_batches(uncommitted.records))) == 3


def test_commit_and_abort_markers_decide_what_read_committed_returns() -> None:
    r = core(1)
    lead(r, isr=(1,))
    r.append_as_leader(txn(b"a1"), acks=1)
    r.append_as_leader(txn(b"b1", pid=OTHER), acks=1)
    abort = marker(r, False)
    assert abort.error is None and abort.base_offset == 2 and abort.wait_for_offset is None
    assert r.last_stable_offset == 1  # OTHER's transaction still open at 1
    commit = marker(r, True, pid=OTHER)
    assert commit.error is None and commit.base_offset == 3
    assert r.last_stable_offset == r.state.high_watermark == 4
    values, position = committed_values(r)
    assert values == [b"b1"] and position == 4
    read = r.read_for_consumer(
        fetch_offset=0, max_bytes=1 << 20, min_one_batch=True, isolation_level=READ_COMMITTED
    )
    assert read.aborted_transactions == (AbortedTransaction(PID, 0),)


def test_marker_checks_fence_old_epochs_and_coordinators_and_repeat_v2_markers() -> None:
    r = core(1)
    lead(r, isr=(1,))
    r.append_as_leader(txn(b"a", epoch=2), acks=1)
    assert isinstance(marker(r, True, epoch=1).error, InvalidProducerEpochError)
    assert marker(r, True, epoch=3, coordinator_epoch=5, version=2).error is None
    end = r.log.log_end_offset
    repeat = marker(r, True, epoch=3, coordinator_epoch=5, version=2)
    assert repeat.duplicate and repeat.base_offset == end - 1 and r.log.log_end_offset == end
    assert isinstance(
        marker(r, False, epoch=4, coordinator_epoch=4, version=2).error,
        TransactionCoordinatorFencedError,
    )


def test_a_follower_refuses_markers() -> None:
    r = core(2)
    r.on_metadata_change(
        leader_id=1, leader_epoch=1, partition_epoch=1, replicas=REPLICAS, isr=REPLICAS, now_ms=0
    )
    assert isinstance(marker(r, True).error, NotLeaderOrFollowerError)


def test_acks_all_marker_waits_for_the_isr() -> None:
    """A marker is written with acks=all: with a follower in the ISR it waits for it."""
    r = core(1)
    lead(r, isr=(1, 2))
    r.append_as_leader(txn(b"a"), acks=1)
    out = marker(r, True)
    assert out.error is None and out.wait_for_offset == 2


def test_kip_890_guards_decide_whether_a_first_transactional_batch_is_appended() -> None:
    """With guards (verification on): no guard -> INVALID_TXN_STATE; the guard taken
    before verifying -> appended; later batches of the open transaction need none; a
    marker between the guard and the append voids it."""
    r = core(1)
    lead(r, isr=(1,))
    refused = r.append_as_leader(txn(b"a"), acks=1, txn_guards={})
    assert isinstance(refused.error, InvalidTxnStateError) and r.log.log_end_offset == 0
    guard = r.producers.verification_guard(PID)
    assert r.append_as_leader(txn(b"a"), acks=1, txn_guards={PID: guard}).error is None
    assert r.append_as_leader(txn(b"b", seq=1), acks=1, txn_guards={}).error is None
    stale = r.producers.verification_guard(PID)
    assert marker(r, True).error is None
    late = r.append_as_leader(txn(b"c", seq=2), acks=1, txn_guards={PID: stale})
    assert isinstance(late.error, InvalidTxnStateError)
    assert "marker" in str(late.error)
    fresh: VerificationGuard = r.producers.verification_guard(PID)
    assert r.append_as_leader(txn(b"c", seq=2), acks=1, txn_guards={PID: fresh}).error is None


def test_a_follower_that_becomes_leader_has_the_same_lso_and_aborted_index() -> None:
    leader, follower = core(1), core(2)
    lead(leader, isr=(1, 2))
    follower.on_metadata_change(
        leader_id=1, leader_epoch=1, partition_epoch=1, replicas=REPLICAS, isr=(1, 2), now_ms=0
    )
    leader.append_as_leader(txn(b"a"), acks=1)
    leader.append_as_leader(txn(b"x", pid=OTHER), acks=1)
    marker(leader, False)
    leader.append_as_leader(txn(b"b", seq=1), acks=1)  # PID's next transaction
    for _ in range(2):
        replicate(follower, leader)
    assert leader.state.high_watermark == follower.state.high_watermark == 4
    assert follower.producers.ongoing_txns == leader.producers.ongoing_txns == {OTHER: 1, PID: 3}
    assert follower.log.collect_aborted(0, 4) == leader.log.collect_aborted(0, 4)
    lead(follower, epoch=2, isr=(2,))
    assert follower.last_stable_offset == leader.last_stable_offset == 1
    assert committed_values(follower) == committed_values(leader)


def _segment_core(path: Path) -> tuple[Replica, Log]:
    log = Log.open(path, LogConfig(segment_bytes=300), clock_ms=lambda: 0)
    r = core(1, SegmentPartitionLog(log))
    lead(r, isr=(1,))
    return r, log


@pytest.mark.parametrize("lose_index", [False, True])
def test_a_restart_keeps_the_txnindex_and_the_lso(tmp_path: Path, lose_index: bool) -> None:
    """Aborts in several segments, an open transaction at the end: after a reopen the
    .txnindex answers the same aborted transactions and the LSO is the open
    transaction's start. With ``lose_index`` the newest segment's .txnindex is gone (a
    crash between the marker and its entry): the replay on open writes it back."""
    path = tmp_path / "t-0"
    r, log = _segment_core(path)
    for i in range(4):
        r.append_as_leader(txn(b"v" * 40, seq=2 * i), acks=1)
        r.append_as_leader(txn(b"w" * 40, seq=2 * i + 1), acks=1)
        marker(r, committed=i % 2 == 0)
    r.append_as_leader(plain(b"p"), acks=1)
    open_at = r.append_as_leader(txn(b"open", seq=8), acks=1).base_offset
    assert log.segment_count > 2
    end = r.state.high_watermark
    before = log.collect_aborted(0, end)
    assert [a.first_offset for a in before] == [3, 9]
    values_before = committed_values(r)
    assert r.last_stable_offset == open_at
    log.close()
    if lose_index:
        base = max(b for b in log.segment_base_offsets if b <= 11)
        (path / txn_index_file_name(base)).unlink()
    r, log = _segment_core(path)
    assert log.collect_aborted(0, end) == before
    assert r.producers.ongoing_txns == {PID: open_at}
    assert r.last_stable_offset == open_at
    assert committed_values(r) == values_before
    log.close()


def test_truncation_drops_the_entries_of_markers_it_removes(tmp_path: Path) -> None:
    r, log = _segment_core(tmp_path / "t-0")
    r.append_as_leader(txn(b"a"), acks=1)
    marker(r, False)
    assert len(log.collect_aborted(0, 2)) == 1
    log.truncate_to(1)
    assert log.collect_aborted(0, 1) == []
    log.close()


def test_a_truncated_replica_that_becomes_leader_is_not_held_back_by_old_markers() -> None:
    """Truncation rebuilds producer state from the log; the transactions the replay
    completed below the HW must not hold the LSO back (they are replicated)."""
    old, new = core(1), core(2)
    lead(old, isr=(1, 2))
    new.on_metadata_change(
        leader_id=1, leader_epoch=1, partition_epoch=1, replicas=REPLICAS, isr=(1, 2), now_ms=0
    )
    old.append_as_leader(txn(b"a"), acks=1)
    marker(old, False)
    for _ in range(2):
        replicate(new, old)
    old.append_as_leader(plain(b"lost"), acks=1)  # only on 1
    lead(new, epoch=2, isr=(2,))
    new.append_as_leader(plain(b"b"), acks=1)
    old.on_metadata_change(
        leader_id=2, leader_epoch=2, partition_epoch=2, replicas=REPLICAS, isr=(2,), now_ms=0
    )
    replicate(old, new)  # the diverging answer: truncated to 2, state rebuilt
    assert old.log.log_end_offset == old.state.high_watermark == 2
    lead(old, epoch=3, isr=(1,))
    assert old.last_stable_offset == old.state.high_watermark == 2
