"""Producer state that knows transactions (raftka.broker.producer_state, the KIP-98 part).

Each test appends real RecordBatch v2 bytes (data batches and COMMIT/ABORT control
batches as a coordinator writes them) to a list-of-batches log through the leader's
validate-then-update path, and checks Kafka's rules: a transaction's first offset, the
CompletedTxn a marker answers, the first unstable and last stable offsets, the named
refusals, expiry, truncation, snapshots (v2 and the old v1) and a follower or recovery
rebuild that agrees with the leader, .txnindex entries included.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.producer_state import (
    Append,
    CompletedTxn,
    Duplicate,
    LastMarker,
    ProducerBatch,
    ProducerStateConfig,
    ProducerStateEntry,
    ProducerStateManager,
    Rejected,
)
from raftka.broker.producer_state_snapshot import decode_snapshot, encode_snapshot
from raftka.broker.transaction_recovery import aborted_entry, rebuild_aborted
from raftka.common.errors import CorruptMessageError
from raftka.common.record.batch import DecodedBatch, Record, build_batch, decode_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.storage.transaction_index import AbortedTxn

COMMIT = ControlRecordType.COMMIT
ABORT = ControlRecordType.ABORT


@dataclass
class Leader:
    """A partition leader: producer state in front of a log of decoded batches."""

    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    log: list[DecodedBatch] = field(default_factory=list)
    txn_index: list[AbortedTxn] = field(default_factory=list)
    seq: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.log[-1].header.next_offset if self.log else 0

    def send(
        self, pid: int, *, count: int = 1, epoch: int = 0, txn: bool = True, ts: int = 1_000
    ) -> Rejected | tuple[int, int]:
        seq = self.seq.get((pid, epoch), 0)
        data = build_batch(
            [Record(value=b"v%d" % i, timestamp_ms=ts) for i in range(count)],
            base_offset=self.end,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
        batch = decode_batch(data)
        decision = self.producers.validate_and_prepare(ProducerBatch.from_header(batch.header))
        if isinstance(decision, Rejected):
            return decision
        assert isinstance(decision, Append), decision
        self.producers.update(
            ProducerBatch.from_header(batch.header),
            first_offset=batch.header.base_offset,
            last_offset=batch.header.last_offset,
        )
        self.seq[(pid, epoch)] = seq + count
        self.log.append(batch)
        return batch.header.base_offset, batch.header.last_offset

    def marker(
        self,
        pid: int,
        kind: ControlRecordType,
        *,
        epoch: int = 0,
        coordinator_epoch: int = 0,
        ts: int = 2_000,
        version: int = 1,
    ) -> Rejected | Duplicate | CompletedTxn | None:
        marker = EndTransactionMarker(kind, coordinator_epoch)
        decision = self.producers.validate_end_txn_marker(
            pid, epoch, marker, transaction_version=version
        )
        if not isinstance(decision, Append):
            return decision
        appended = decode_batch(
            build_end_transaction_batch(
                marker, producer_id=pid, producer_epoch=epoch, timestamp_ms=ts, base_offset=self.end
            )
        )
        self.log.append(appended)
        done = self.producers.update_end_txn_marker(
            appended.header, marker, transaction_version=version
        )
        if done is not None and (entry := aborted_entry(self.producers, done)) is not None:
            self.txn_index.append(entry)
        return done


def test_first_transactional_batch_opens_and_a_commit_closes() -> None:
    """The transaction starts at its first batch, later batches keep that start, and the
    COMMIT answers CompletedTxn(first, marker offset, not aborted); LSO follows."""
    leader = Leader()
    assert leader.send(7, count=3) == (0, 2)
    assert leader.send(7, count=2) == (3, 4)
    entry = leader.producers.entry(7)
    assert entry is not None and entry.current_txn_first_offset == 0
    assert leader.producers.first_unstable_offset == 0
    assert leader.producers.last_stable_offset(high_watermark=4) == 0
    done = leader.marker(7, COMMIT)
    assert done == CompletedTxn(producer_id=7, first_offset=0, last_offset=5, is_aborted=False)
    assert leader.txn_index == []  # commits leave no index entry
    entry = leader.producers.entry(7)
    assert entry is not None and entry.current_txn_first_offset == -1
    # The marker is not replicated yet: what the transaction wrote stays unstable.
    leader.producers.on_high_watermark_updated(5)
    assert leader.producers.last_stable_offset(high_watermark=5) == 0
    leader.producers.on_high_watermark_updated(6)
    assert leader.producers.last_stable_offset(high_watermark=6) == 6
    assert leader.producers.last_stable_offset(high_watermark=99) == 99  # nothing unstable
    # The next transactional batch opens a new transaction at its own offset.
    assert leader.send(7) == (6, 6)
    assert leader.producers.first_unstable_offset == 6


def test_abort_indexes_with_the_lso_of_other_open_transactions() -> None:
    """Two producers' transactions interleave: the ABORT of the later one gets an index
    entry whose last stable offset is the earlier one's start; once that one ends too,
    the next abort's entry says the offset after its marker."""
    leader = Leader()
    leader.send(1)  # 0: producer 1 opens at 0
    leader.send(2, count=2)  # 1-2: producer 2 opens at 1
    leader.send(1)  # 3
    assert leader.producers.first_unstable_offset == 0
    assert leader.marker(2, ABORT) == CompletedTxn(2, 1, 4, is_aborted=True)
    assert leader.txn_index == [AbortedTxn(2, 1, 4, last_stable_offset=0)]
    assert leader.marker(1, ABORT) == CompletedTxn(1, 0, 5, is_aborted=True)
    assert leader.txn_index[-1] == AbortedTxn(1, 0, 5, last_stable_offset=6)
    assert leader.producers.ongoing_txns == {}


def test_markers_of_an_older_epoch_or_coordinator_are_refused_by_name() -> None:
    """A marker with an epoch below the producer's: INVALID_PRODUCER_EPOCH; with a
    coordinator epoch below the last marker's: TRANSACTION_COORDINATOR_FENCED. Nothing
    is appended and the transaction stays open."""
    leader = Leader()
    leader.marker(5, ABORT, epoch=2, coordinator_epoch=3)  # empty: sets both epochs
    leader.send(5, epoch=2)
    before = (leader.end, leader.producers.entries)
    old_epoch = leader.marker(5, COMMIT, epoch=1, coordinator_epoch=3)
    assert isinstance(old_epoch, Rejected)
    assert old_epoch.error_name == "INVALID_PRODUCER_EPOCH"
    old_coordinator = leader.marker(5, COMMIT, epoch=2, coordinator_epoch=2)
    assert isinstance(old_coordinator, Rejected)
    assert old_coordinator.error_name == "TRANSACTION_COORDINATOR_FENCED"
    assert (leader.end, leader.producers.entries) == before
    assert leader.marker(5, COMMIT, epoch=2, coordinator_epoch=4) == CompletedTxn(5, 1, 2, False)


def test_a_marker_with_no_open_transaction_completes_nothing_but_fences() -> None:
    """Kafka: an empty transaction's marker answers no CompletedTxn, but the entry it
    creates carries the epoch, so an older epoch's batch is refused afterwards."""
    leader = Leader()
    assert leader.marker(9, ABORT, epoch=4) is None
    assert leader.txn_index == []
    entry = leader.producers.entry(9)
    assert entry is not None and (entry.producer_epoch, entry.batches) == (4, ())
    refused = leader.send(9, epoch=3)
    assert isinstance(refused, Rejected) and refused.error_name == "INVALID_PRODUCER_EPOCH"
    assert leader.send(9, epoch=4) == (1, 1)


def test_plain_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    leader = Leader()
    leader.send(3, count=2)
    refused = leader.send(3, txn=False)
    assert isinstance(refused, Rejected) and refused.error_name == "INVALID_TXN_STATE"
    leader.marker(3, COMMIT)
    assert leader.send(3, txn=False) == (3, 3)


def test_a_marker_at_a_bumped_epoch_starts_a_new_sequence() -> None:
    """KIP-890 part 2: the coordinator bumps the epoch on every end; the marker carries
    it, so the old epoch's retained window is dropped and the next batch starts at 0."""
    leader = Leader()
    leader.send(4, count=3)
    leader.marker(4, COMMIT, epoch=1)
    entry = leader.producers.entry(4)
    assert entry is not None and (entry.producer_epoch, entry.batches) == (1, ())
    assert leader.send(4, epoch=1) == (4, 4)
    stale = leader.send(4, epoch=0)
    assert isinstance(stale, Rejected) and stale.error_name == "INVALID_PRODUCER_EPOCH"


def test_an_open_transaction_never_expires() -> None:
    manager = Leader(producers=ProducerStateManager(ProducerStateConfig(1_000)))
    manager.send(1, ts=0)
    manager.send(2, ts=0, txn=False)
    assert manager.producers.remove_expired_producers(now_ms=10_000) == (2,)
    manager.marker(1, COMMIT, ts=0)
    assert manager.producers.remove_expired_producers(now_ms=10_000) == (1,)


def test_truncation_keeps_a_transaction_start_below_the_cut() -> None:
    """Producer 1's transaction starts at 0 and its retained window (the last 5 batches)
    is 1..5: truncating at 1 leaves it no batch but keeps the entry with its start, so
    the LSO stays at 0; producer 2's transaction (from 6) is gone with its batch."""
    leader = Leader()
    for _ in range(6):
        leader.send(1)
    leader.send(2)
    leader.producers.truncate_to(1)
    assert leader.producers.ongoing_txns == {1: 0}
    entry = leader.producers.entry(1)
    assert entry is not None and entry.batches == ()
    assert leader.producers.last_stable_offset(high_watermark=1) == 0
    leader.producers.truncate_to(0)
    assert leader.producers.entries == {}


def _interleaved_log() -> Leader:
    leader = Leader()
    leader.send(1, count=2)
    leader.send(2)
    leader.send(3, txn=False)
    leader.marker(1, ABORT, coordinator_epoch=1)
    leader.send(2, count=3)
    leader.send(1, epoch=0)
    leader.marker(2, COMMIT, epoch=1, coordinator_epoch=1)
    leader.send(4)
    leader.marker(1, ABORT)  # coordinator epoch 0 < 1: refused, not in the log
    leader.marker(1, ABORT, coordinator_epoch=2)
    return leader


def test_follower_and_recovery_rebuild_agree_with_the_leader() -> None:
    """Replaying the leader's log (batches and markers) gives the same table, the same
    open transactions and the same .txnindex entries, from empty or from a snapshot
    taken at any batch boundary followed by the rest of the log."""
    leader = _interleaved_log()
    assert leader.producers.ongoing_txns == {4: leader.log[-2].header.base_offset}
    follower = ProducerStateManager()
    assert rebuild_aborted(follower, leader.log) == leader.txn_index
    assert follower.entries == leader.producers.entries
    assert len(leader.txn_index) == 2
    for cut in range(len(leader.log) + 1):
        before = ProducerStateManager()
        before.rebuild_from_batches(leader.log[:cut])
        offset = leader.log[cut - 1].header.next_offset if cut else 0
        loaded = ProducerStateManager()
        loaded.load_entries(
            decode_snapshot(encode_snapshot(before.entries.values(), offset=offset), offset=offset)
        )
        assert loaded.entries == before.entries
        entries = rebuild_aborted(loaded, leader.log[cut:])
        assert loaded.entries == leader.producers.entries, cut
        assert entries == [e for e in leader.txn_index if e.last_offset >= offset], cut


def _snapshot_v1(entries: list[ProducerStateEntry], *, offset: int) -> bytes:
    """Version 1 bytes as raftka wrote them before transactions (no last marker)."""
    body = bytearray(struct.pack(">qi", offset, len(entries)))
    for e in entries:
        last = e.batches[-1]
        body += struct.pack(
            ">qhiqiqiqbb",
            e.producer_id,
            e.producer_epoch,
            last.last_sequence,
            last.last_offset,
            last.offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
            1 if e.is_transactional else 0,
            len(e.batches),
        )
        for b in e.batches:
            body += struct.pack(
                ">iqiq", b.last_sequence, b.last_offset, b.offset_delta, b.timestamp
            )
    return struct.pack(">hI", 1, crc32c.crc32c(bytes(body))) + bytes(body)


def test_snapshot_v1_is_still_read_and_v2_keeps_the_last_marker() -> None:
    """A version 1 file decodes to the same entries with no last marker; version 2 keeps
    the open transaction and the last marker; a transaction start or a marker at or
    above the snapshot offset is corruption."""
    leader = Leader()
    leader.send(1, count=2)
    leader.send(2, txn=False)
    entries = list(leader.producers.entries.values())
    assert decode_snapshot(_snapshot_v1(entries, offset=leader.end)) == entries
    leader.marker(2, COMMIT, epoch=1, version=2)
    data = encode_snapshot(leader.producers.entries.values(), offset=leader.end)
    assert struct.unpack_from(">h", data)[0] == 2
    decoded = {e.producer_id: e for e in decode_snapshot(data)}
    assert decoded == leader.producers.entries
    assert decoded[2].last_marker == LastMarker(1, COMMIT, offset=3, timestamp=2_000)
    assert decoded[1].current_txn_first_offset == 0
    body = bytearray(encode_snapshot([leader.producers.entries[1]], offset=2)[6:])
    # current_txn_first_offset: after the body header (offset q, count i: 12 bytes) and
    # pid q, epoch h, last seq i, last offset q, delta i, timestamp q, coordinator
    # epoch i (38 bytes).
    struct.pack_into(">q", body, 12 + 38, 2)
    with pytest.raises(CorruptMessageError, match="transaction fields"):
        decode_snapshot(struct.pack(">hI", 2, crc32c.crc32c(bytes(body))) + bytes(body))
    with pytest.raises(AssertionError):
        encode_snapshot([leader.producers.entries[2]], offset=3)  # its marker is at 3


def test_version_2_markers_need_a_bumped_epoch_and_a_repeat_is_a_duplicate() -> None:
    """Transaction version 2 (KIP-890 part 2): a marker at the producer's current epoch
    is fenced (version 1 accepts it); a retry of the last marker with nothing written
    since is answered with its offset, also after a snapshot reload; once the next
    transaction wrote, the same retry is fenced."""
    leader = Leader()
    leader.send(6)  # 0, epoch 0
    same_epoch = leader.marker(6, COMMIT, epoch=0, version=2)
    assert isinstance(same_epoch, Rejected) and same_epoch.error_name == "INVALID_PRODUCER_EPOCH"
    assert leader.marker(6, COMMIT, epoch=1, version=2) == CompletedTxn(6, 0, 1, False)
    assert leader.marker(6, COMMIT, epoch=1, version=2) == Duplicate(6, 1, 1, 2_000)
    wrong_type = leader.marker(6, ABORT, epoch=1, version=2)
    assert isinstance(wrong_type, Rejected)
    reloaded = ProducerStateManager()
    reloaded.load_entries(
        decode_snapshot(encode_snapshot(leader.producers.entries.values(), offset=2))
    )
    marker = EndTransactionMarker(COMMIT, 0)
    assert reloaded.validate_end_txn_marker(6, 1, marker, transaction_version=2) == Duplicate(
        6, 1, 1, 2_000
    )
    leader.send(6, epoch=1)  # the next transaction writes at epoch 1
    late = leader.marker(6, COMMIT, epoch=1, version=2)
    assert isinstance(late, Rejected) and late.error_name == "INVALID_PRODUCER_EPOCH"
    assert leader.end == 3  # no second marker was ever written


def test_header_only_follower_path_still_skips_markers() -> None:
    """Callers with headers only (no marker) keep today's behaviour: control batches
    change nothing, so no transaction is ever closed by them."""
    leader = Leader()
    leader.send(1)
    leader.marker(1, COMMIT)
    follower = ProducerStateManager()
    follower.rebuild_from(b.header for b in leader.log)
    assert follower.ongoing_txns == {1: 0}


_send = st.tuples(
    st.just("send"), st.sampled_from((1, 2)), st.integers(1, 2), st.booleans(), st.integers(0, 1)
)
_end = st.tuples(
    st.just("end"),
    st.sampled_from((1, 2)),
    st.sampled_from((COMMIT, ABORT)),
    st.integers(-1, 1),  # epoch relative to the producer's
    st.integers(-1, 1),  # coordinator epoch relative to the last
    st.sampled_from((1, 2)),  # transaction version
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_send, _end), max_size=30))
def test_random_leader_schedules_agree_with_replay_and_snapshot(
    schedule: list[tuple[object, ...]],
) -> None:
    """Whatever the leader accepts or refuses (older epochs, bumped epochs, stale
    coordinators, plain writes inside transactions, repeated markers): the transaction
    starts and CompletedTxns match a plain tracker of accepted appends, and a follower
    replaying the log, or a snapshot at the end, holds the leader's state and the same
    .txnindex entries."""
    leader = Leader()
    coordinator_epoch = 0
    open_first: dict[int, int] = {}
    for op in schedule:
        pid = op[1]
        assert isinstance(pid, int)
        entry = leader.producers.entry(pid)
        epoch = entry.producer_epoch if entry is not None else 0
        if op[0] == "send":
            _, _, count, txn, bump = op
            assert isinstance(count, int) and isinstance(txn, bool) and isinstance(bump, int)
            offset = leader.end
            if not isinstance(leader.send(pid, count=count, epoch=epoch + bump, txn=txn), Rejected):
                assert txn or pid not in open_first
                if txn:
                    open_first.setdefault(pid, offset)
        else:
            _, _, kind, delta, coord_delta, version = op
            assert isinstance(kind, ControlRecordType)
            assert isinstance(delta, int) and isinstance(coord_delta, int)
            assert isinstance(version, int)
            coordinator_epoch = max(0, coordinator_epoch + coord_delta)
            offset = leader.end
            done = leader.marker(
                pid,
                kind,
                epoch=max(0, epoch + delta),
                coordinator_epoch=coordinator_epoch,
                version=version,
            )
            if isinstance(done, (Rejected, Duplicate)):
                assert leader.end == offset
                continue
            first = open_first.pop(pid, None)
            expected = None if first is None else CompletedTxn(pid, first, offset, kind == ABORT)
            assert done == expected
        assert leader.producers.ongoing_txns == open_first
    follower = ProducerStateManager()
    assert rebuild_aborted(follower, leader.log) == leader.txn_index
    assert follower.entries == leader.producers.entries
    loaded = ProducerStateManager()
    snapshot = encode_snapshot(leader.producers.entries.values(), offset=leader.end)
    loaded.load_entries(decode_snapshot(snapshot))
    assert loaded.entries == leader.producers.entries
