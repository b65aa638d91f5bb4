"""Transactional offset commits in the group coordinator (KIP-98, KIP-447): pending until
the producer's marker, COMMIT makes them visible unless a later record of the key holds
it, ABORT drops them, require_stable reports them, and a reload of the log (records,
transactional batches and control markers) gives the same answer as the live
coordinator. A fake broker keeps the partition's log as a list of entries."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeAlias

import pytest
from broker_harness import broker_config
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.coordinator import (
    AppendRecords,
    CommitReply,
    GroupConfig,
    GroupCoordinatorConfig,
    GroupManager,
    GroupState,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetsRecord,
    Output,
    SyncGroupRequest,
)
from raftka.broker.coordinator.group_manager import (
    ReplayedTxnMarker,
    ReplayedTxnRecord,
    TxnOffsetCommitRequest,
)
from raftka.broker.coordinator.group_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_value,
)
from raftka.broker.coordinator.service import GroupCoordinatorService, replay_items
from raftka.broker.producer_state import BatchMetadata, ProducerStateEntry
from raftka.common.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    KafkaError,
    NotEnoughReplicasError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from raftka.common.record import Record, build_batch, decode_batches
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
    encode_control_key,
)
from raftka.common.structs import OffsetAndMetadata, TopicPartition

G = "g"
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)

#: A log entry: offsets records of a batch (producer id -1: plain) or a marker.
Entry: TypeAlias = tuple[int, tuple[OffsetsRecord, ...]] | ReplayedTxnMarker


def _manager() -> GroupManager:
    return GroupManager(
        config=GroupCoordinatorConfig(group=GroupConfig(group_initial_rebalance_delay_ms=0)),
        rng=random.Random(3),
        partition_for=lambda group_id: 0,
    )


def _replay_items(
    log: Iterable[Entry],
) -> list[OffsetsRecord | ReplayedTxnRecord | ReplayedTxnMarker]:
    items: list[OffsetsRecord | ReplayedTxnRecord | ReplayedTxnMarker] = []
    for entry in log:
        if isinstance(entry, ReplayedTxnMarker):
            items.append(entry)
            continue
        producer_id, records = entry
        if producer_id < 0:
            items.extend(records)
        else:
            items.extend(ReplayedTxnRecord(r, producer_id) for r in records)
    return items


@dataclass
class Coordinator:
    """The manager plus a log: appends go into the log when emitted (emission order is
    log order, as the broker guarantees) and complete when ``finish`` says so."""

    manager: GroupManager = field(default_factory=_manager)
    log: list[Entry] = field(default_factory=list)
    queued: list[AppendRecords] = field(default_factory=list)
    replies: dict[int, OffsetCommitResponse] = field(default_factory=dict)
    now_ms: int = 0

    def __post_init__(self) -> None:
        self.manager.begin_loading(partition=0)
        self.manager.complete_loading(partition=0, now_ms=0)

    def absorb(self, outputs: Iterable[Output]) -> None:
        for out in outputs:
            if isinstance(out, CommitReply):
                self.replies[out.append_id] = out.response
            elif isinstance(out, AppendRecords):
                self.log.append((out.producer_id, out.records))
                self.queued.append(out)

    def finish(self, count: int | None = None, error: type[KafkaError] | None = None) -> None:
        """Complete the first ``count`` queued appends (None: all) in order."""
        n = len(self.queued) if count is None else count
        for _ in range(n):
            out = self.queued.pop(0)
            if error is not None:
                # A failed append is not in the log (the fake's choice: it never was).
                self.log.remove((out.producer_id, out.records))
            self.absorb(
                self.manager.append_completed(
                    append_id=out.append_id, error=error, now_ms=self.now_ms
                )
            )

    def commit(self, tp: TopicPartition, offset: int) -> int:
        decision = self.manager.offset_commit(
            OffsetCommitRequest(G, -1, "", {tp: OffsetAndMetadata(offset)}), now_ms=self.now_ms
        )
        assert decision.response is None, decision.response
        self.absorb(decision.outputs)
        return self.queued[-1].append_id

    def txn_commit(
        self,
        producer_id: int,
        offsets: dict[TopicPartition, int],
        *,
        generation: int = -1,
        member: str = "",
        instance: str | None = None,
    ) -> OffsetCommitResponse | None:
        decision = self.manager.txn_offset_commit(
            TxnOffsetCommitRequest(
                group_id=G,
                producer_id=producer_id,
                producer_epoch=0,
                offsets={tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
                generation_id=generation,
                member_id=member,
                group_instance_id=instance,
            ),
            now_ms=self.now_ms,
        )
        self.absorb(decision.outputs)
        return decision.response

    def marker(self, producer_id: int, committed: bool) -> None:
        """The leader appended a marker, then called the hook (as TXNP's path does)."""
        self.log.append(ReplayedTxnMarker(producer_id, committed))
        self.manager.complete_transaction(partition=0, producer_id=producer_id, committed=committed)

    def delete(self, tp: TopicPartition) -> None:
        if self.manager.group(G) is None:
            return
        decision = self.manager.delete_offsets(group_id=G, partitions=(tp,), now_ms=self.now_ms)
        assert decision.response is not None and decision.response.error is None
        self.absorb(decision.outputs)

    def visible(self, *, require_stable: bool = False) -> dict[TopicPartition, object]:
        response = self.manager.offset_fetch(
            group_id=G, partitions=(TP0, TP1), require_stable=require_stable
        )
        assert response.error is None
        return {tp: response.errors.get(tp) or response.offsets[tp].offset for tp in (TP0, TP1)}

    def reloaded(self) -> Coordinator:
        fresh = Coordinator.__new__(Coordinator)
        fresh.manager = _manager()
        fresh.log = list(self.log)
        fresh.queued = []
        fresh.replies = {}
        fresh.now_ms = self.now_ms
        fresh.manager.begin_loading(partition=0)
        fresh.manager.replay(partition=0, records=_replay_items(fresh.log))
        fresh.manager.complete_loading(partition=0, now_ms=self.now_ms)
        return fresh


def test_txn_offsets_pending_until_commit_marker() -> None:
    c = Coordinator()
    c.commit(TP0, 5)
    c.finish()
    assert c.txn_commit(7, {TP0: 10, TP1: 11}) is None  # parked until appended
    c.finish()
    assert list(c.replies.values())[-1].errors == {TP0: None, TP1: None}
    assert c.visible() == {TP0: 5, TP1: -1}
    assert c.visible(require_stable=True) == {
        TP0: UnstableOffsetCommitError,
        TP1: UnstableOffsetCommitError,
    }
    assert c.manager.pending_transactional(0) == {7: {(G, TP0): 10, (G, TP1): 11}}
    c.marker(7, committed=True)
    assert c.visible() == c.visible(require_stable=True) == {TP0: 10, TP1: 11}
    assert c.manager.pending_transactional(0) == {}
    assert c.reloaded().visible() == {TP0: 10, TP1: 11}


def test_abort_marker_drops_pending_offsets() -> None:
    c = Coordinator()
    c.commit(TP0, 5)
    c.txn_commit(7, {TP0: 10})
    c.finish()
    c.marker(7, committed=False)
    assert c.visible(require_stable=True) == {TP0: 5, TP1: -1}
    assert c.reloaded().visible(require_stable=True) == {TP0: 5, TP1: -1}


def test_later_plain_commit_wins_over_committed_transaction() -> None:
    """Kafka orders by the log: a plain commit written after the transactional record
    survives the COMMIT; one written before it does not."""
    c = Coordinator()
    c.txn_commit(7, {TP0: 10, TP1: 11})
    c.finish()
    c.commit(TP0, 20)  # after the txn record in the log
    c.marker(7, committed=True)  # arrives before the plain commit's append completes
    c.finish()
    assert c.visible() == {TP0: 20, TP1: 11}
    assert c.reloaded().visible() == {TP0: 20, TP1: 11}


def test_pending_offsets_survive_reload_and_marker_during_load_applies_after() -> None:
    c = Coordinator()
    c.txn_commit(7, {TP0: 10})
    c.txn_commit(8, {TP1: 11})
    c.finish()
    fresh = Coordinator.__new__(Coordinator)
    fresh.manager = _manager()
    fresh.manager.begin_loading(partition=0)
    fresh.manager.replay(partition=0, records=_replay_items(c.log))
    # The leader writes producer 7's COMMIT while the load is still reading.
    fresh.manager.complete_transaction(partition=0, producer_id=7, committed=True)
    loading = fresh.manager.offset_fetch(group_id=G, partitions=(TP0,))
    assert loading.error is CoordinatorLoadInProgressError
    fresh.manager.complete_loading(partition=0, now_ms=0)
    fetched = fresh.manager.offset_fetch(group_id=G, partitions=(TP0, TP1), require_stable=True)
    assert fetched.offsets[TP0].offset == 10 and fetched.errors == {TP1: UnstableOffsetCommitError}
    assert fresh.manager.pending_transactional(0) == {8: {(G, TP1): 11}}
    assert fresh.manager.group(G) is not None  # a group with only txn offsets is loaded


def test_failed_txn_append_leaves_nothing_pending_and_epoch_errors_pass_through() -> None:
    c = Coordinator()
    c.txn_commit(7, {TP0: 10})
    c.finish(error=NotEnoughReplicasError)
    (reply,) = c.replies.values()
    assert reply.errors == {TP0: CoordinatorNotAvailableError}
    c.txn_commit(7, {TP0: 11})
    c.finish(error=InvalidProducerEpochError)
    assert list(c.replies.values())[-1].errors == {TP0: InvalidProducerEpochError}
    assert c.manager.pending_transactional(0) == {}
    c.marker(7, committed=True)
    assert c.visible() == {TP0: -1, TP1: -1}


def test_unload_drops_pending_and_a_marker_for_an_unowned_partition_is_ignored() -> None:
    c = Coordinator()
    c.txn_commit(7, {TP0: 10})
    c.finish()
    c.manager.unload(partition=0, now_ms=0)
    c.manager.complete_transaction(partition=0, producer_id=7, committed=True)
    assert c.manager.pending_transactional(0) == {}


def test_offset_delete_and_group_delete_take_pending_offsets_with_them() -> None:
    c = Coordinator()
    c.txn_commit(7, {TP0: 10, TP1: 11})
    c.finish()
    c.delete(TP0)
    c.finish()
    c.marker(7, committed=True)
    assert c.visible() == {TP0: -1, TP1: 11}
    assert c.reloaded().visible() == {TP0: -1, TP1: 11}
    c.txn_commit(8, {TP0: 12})
    c.finish()
    decision = c.manager.delete_groups(group_ids=(G,), now_ms=0)
    c.absorb(decision.outputs)
    c.finish()
    assert decision.response is not None and decision.response.results == {G: None}
    c.marker(8, committed=True)
    assert c.manager.offset_fetch(group_id=G, partitions=(TP0,)).offsets[TP0].offset == -1
    assert c.reloaded().manager.committed(G) == {}


def test_pending_offsets_do_not_expire() -> None:
    c = Coordinator()
    c.commit(TP0, 5)
    c.finish()
    c.txn_commit(7, {TP0: 10})
    c.finish()
    c.now_ms = 8 * 24 * 3_600_000  # past offsets.retention.minutes
    c.absorb(c.manager.tick(now_ms=c.now_ms))
    c.finish()
    assert c.visible() == {TP0: 5, TP1: -1}
    c.marker(7, committed=True)
    assert c.visible() == {TP0: 10, TP1: -1}


def _join(member_id: str, instance: str | None) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=G,
        member_id=member_id,
        group_instance_id=instance,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        client_id="c",
    )


def _stable_member(c: Coordinator, instance: str | None = None) -> tuple[str, int]:
    m = c.manager
    first = m.join_group(_join("", instance), now_ms=0)
    c.absorb(first.outputs)
    if first.response is not None and first.response.member_id and instance is None:
        member_id = first.response.member_id  # MEMBER_ID_REQUIRED: join again with it
        c.absorb(
            m.join_group(
                _join(member_id, None),
                now_ms=0,
            ).outputs
        )
    c.absorb(m.tick(now_ms=0))
    group = m.group(G)
    assert group is not None
    (member_id,) = group.members
    sync = m.sync_group(SyncGroupRequest(G, group.generation_id, member_id, instance, {}), now_ms=0)
    c.absorb(sync.outputs)
    c.finish()
    assert group.state is GroupState.STABLE
    return member_id, group.generation_id


def test_kip_447_fencing() -> None:
    """Kafka's doTxnCommitOffsets: member id and generation are checked when given."""
    c = Coordinator.__new__(Coordinator)
    c.manager, c.log, c.queued, c.replies, c.now_ms = _manager(), [], [], {}, 0
    c.manager.begin_loading(partition=0)
    c.manager.complete_loading(partition=0, now_ms=0)
    member, generation = _stable_member(c)
    stale = c.txn_commit(7, {TP0: 1}, generation=generation + 1, member=member)
    assert stale is not None and stale.errors == {TP0: IllegalGenerationError}
    unknown = c.txn_commit(7, {TP0: 1}, generation=generation, member="zombie")
    assert unknown is not None and unknown.errors == {TP0: UnknownMemberIdError}
    assert c.txn_commit(7, {TP0: 1}, generation=generation, member=member) is None
    assert c.txn_commit(8, {TP1: 2}) is None  # no group metadata given: not checked
    c.finish()
    assert c.manager.pending_transactional(0) == {7: {(G, TP0): 1}, 8: {(G, TP1): 2}}


def test_kip_447_static_member_fenced() -> None:
    c = Coordinator.__new__(Coordinator)
    c.manager, c.log, c.queued, c.replies, c.now_ms = _manager(), [], [], {}, 0
    c.manager.begin_loading(partition=0)
    c.manager.complete_loading(partition=0, now_ms=0)
    old, generation = _stable_member(c, instance="i-1")
    # The same instance joins again: a new member id replaces the old one.
    c.absorb(
        c.manager.join_group(
            _join("", "i-1"),
            now_ms=0,
        ).outputs
    )
    fenced = c.txn_commit(7, {TP0: 1}, generation=generation, member=old, instance="i-1")
    assert fenced is not None and fenced.errors == {TP0: FencedInstanceIdError}


# -- the model -------------------------------------------------------------------------


def _model(log: Iterable[Entry]) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
    """Visible offsets and partitions with pending transactional offsets, from the log
    alone: later record wins, a plain tombstone ends every pending value of its key."""
    committed: dict[TopicPartition, tuple[int, int]] = {}
    pending: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
    for position, entry in enumerate(log):
        if isinstance(entry, ReplayedTxnMarker):
            done = pending.pop(entry.producer_id, {})
            for tp, (offset, at) in done.items():
                if entry.committed and (tp not in committed or committed[tp][1] < at):
                    committed[tp] = (offset, at)
            continue
        producer_id, records = entry
        for record in records:
            key = decode_key(record.key)
            if not isinstance(key, OffsetCommitKey):
                continue  # group metadata
            tp = TopicPartition(key.topic, key.partition)
            if record.value is None:
                committed.pop(tp, None)
                for offsets in pending.values():
                    offsets.pop(tp, None)
                continue
            value = (decode_offset_commit_value(record.value).offset, position)
            if producer_id < 0:
                committed[tp] = value
            else:
                pending.setdefault(producer_id, {})[tp] = value
    return (
        {tp: v[0] for tp, v in committed.items()},
        {tp for offsets in pending.values() for tp in offsets},
    )


_TPS = st.sampled_from([TP0, TP1])
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), _TPS, st.integers(0, 99)),
        st.tuples(st.just("txn"), st.sampled_from([1, 2]), _TPS, st.integers(100, 199)),
        st.tuples(st.just("marker"), st.sampled_from([1, 2]), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 3)),
        st.tuples(st.just("delete"), _TPS),
        st.tuples(st.just("reload")),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_live_and_reloaded_coordinator_match_the_log_model(ops: list[tuple[object, ...]]) -> None:
    """Random interleavings of plain and transactional commits, COMMIT/ABORT markers,
    OffsetDelete, delayed append completions and reloads: the live coordinator (once its
    appends completed) and one reloaded from the log show what the model reads in it."""
    c = Coordinator()
    for op in ops:
        kind = op[0]
        if kind == "commit":
            c.commit(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "txn":
            c.txn_commit(op[1], {op[2]: op[3]})  # type: ignore[arg-type, dict-item]
            c.finish()  # the client waits for the answer before it can end the txn
        elif kind == "marker":
            c.finish()  # the marker follows the producer's records (and any before them)
            c.marker(op[1], op[2])  # type: ignore[arg-type]
        elif kind == "finish":
            c.finish(min(op[1], len(c.queued)))  # type: ignore[call-overload]
        elif kind == "delete":
            c.delete(op[1])  # type: ignore[arg-type]
        else:
            c.finish()
            c = c.reloaded()
    c.finish()
    visible, pending = _model(c.log)
    expected = {tp: visible.get(tp, -1) for tp in (TP0, TP1)}
    assert c.visible() == expected
    stable = {tp: UnstableOffsetCommitError if tp in pending else o for tp, o in expected.items()}
    assert c.visible(require_stable=True) == stable
    reloaded = c.reloaded()
    assert reloaded.visible() == expected
    assert reloaded.visible(require_stable=True) == stable


@pytest.mark.parametrize("committed", [True, False])
def test_marker_of_another_producer_changes_nothing(committed: bool) -> None:
    c = Coordinator()
    c.txn_commit(7, {TP0: 10})
    c.finish()
    c.marker(8, committed)
    assert c.visible(require_stable=True) == {TP0: UnstableOffsetCommitError, TP1: -1}


# -- the load path's decoding of the log (service.replay_items) -------------------------


def _offsets_batch(producer_id: int, offsets: dict[TopicPartition, int]) -> bytes:
    records = [
        Record(
            encode_offset_commit_value(OffsetCommitValue(o, -1, "", 0)),
            encode_key(OffsetCommitKey(G, tp.topic, tp.partition)),
            0,
        )
        for tp, o in offsets.items()
    ]
    if producer_id < 0:
        return build_batch(records)
    return build_batch(
        records, producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def _marker(producer_id: int, control: ControlRecordType) -> bytes:
    return build_end_transaction_batch(
        EndTransactionMarker(control, coordinator_epoch=1),
        producer_id=producer_id,
        producer_epoch=0,
        timestamp_ms=0,
    )


def test_load_replays_transactional_batches_and_control_markers_from_log_bytes() -> None:
    """A partition's bytes as the leader stores them (a plain batch, transactional
    batches of two producers, a COMMIT and an ABORT marker written with the control
    codec, a KRaft control record the coordinator skips) load into what they mean; a
    control batch with a broken marker is refused (the load logs and skips it)."""
    leader_change = build_batch(
        [Record(b"\0\0", encode_control_key(ControlRecordType.LEADER_CHANGE), 0)],
        is_control=True,
    )
    log = b"".join(
        [
            _offsets_batch(-1, {TP0: 1, TP1: 2}),
            _offsets_batch(7, {TP0: 10}),
            _offsets_batch(8, {TP1: 20}),
            leader_change,
            _marker(7, ControlRecordType.COMMIT),
            _offsets_batch(9, {TP1: 30}),
            _marker(8, ControlRecordType.ABORT),
        ]
    )
    items = [item for batch in decode_batches(log) for item in replay_items(batch)]
    manager = _manager()
    manager.begin_loading(partition=0)
    manager.replay(partition=0, records=items)
    manager.complete_loading(partition=0, now_ms=0)
    fetched = manager.offset_fetch(group_id=G, partitions=(TP0, TP1), require_stable=True)
    assert fetched.offsets[TP0].offset == 10
    assert fetched.errors == {TP1: UnstableOffsetCommitError}  # producer 9 is still open
    assert manager.committed(G)[TP1].offset == 2  # producer 8 aborted
    assert manager.pending_transactional(0) == {9: {(G, TP1): 30}}
    broken = build_batch(
        [Record(b"\0", encode_control_key(ControlRecordType.COMMIT), 0)],
        producer_id=7,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    with pytest.raises(CorruptMessageError):
        list(replay_items(next(decode_batches(broken))))


# -- the sequences of the coordinator's transactional batches (service) ---------------


@dataclass
class _Producers:
    entries: dict[int, ProducerStateEntry] = field(default_factory=dict)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.entries.get(producer_id)


@dataclass
class _Replicas:
    """What GroupCoordinatorService._txn_sequence and on_metadata read of the replica
    manager: the offsets partition 0, led here, empty, with its producer state."""

    producers: _Producers = field(default_factory=_Producers)
    leader: bool = True

    @property
    def partitions(self) -> dict[tuple[str, int], Any]:
        log = SimpleNamespace(log_start_offset=0, log_end_offset=0)
        p = SimpleNamespace(
            state=SimpleNamespace(is_leader=self.leader, leader_epoch=1),
            producers=self.producers,
            log=log,
        )
        return {("__consumer_offsets", 0): p}


def _append(producer_id: int, epoch: int, records: int) -> AppendRecords:
    record = OffsetsRecord(b"k", b"v")
    return AppendRecords(1, G, 0, (record,) * records, producer_id, epoch)


def _entry(producer_id: int, epoch: int, last_sequence: int) -> ProducerStateEntry:
    return ProducerStateEntry(
        producer_id=producer_id,
        producer_epoch=epoch,
        batches=(BatchMetadata(0, last_sequence, 0, last_sequence, 0),),
        last_timestamp=0,
    )


def test_txn_batch_sequences_continue_producer_state_and_restart_on_leadership(
    tmp_path: Path,
) -> None:
    """The coordinator's transactional batches carry the producer's next sequence at
    the partition: from producer state for its first one, then counted; a new epoch
    starts at 0; becoming leader again asks producer state again (another leader may
    have written meanwhile)."""

    async def body() -> None:
        replicas = _Replicas()
        service = GroupCoordinatorService(
            config=broker_config(tmp_path),
            replicas=replicas,  # type: ignore[arg-type]
            channel=lambda: None,
        )
        service.on_metadata()  # leads partition 0 (an empty log: loaded at once)
        await asyncio.gather(*service._tasks)
        assert service._txn_sequence(_append(7, 0, 2)) == 0  # unknown producer
        assert service._txn_sequence(_append(7, 0, 1)) == 2
        replicas.producers.entries[8] = _entry(8, 3, last_sequence=9)
        assert service._txn_sequence(_append(8, 3, 1)) == 10
        assert service._txn_sequence(_append(8, 4, 1)) == 0  # a bumped epoch
        # Lost and regained leadership; another leader wrote up to sequence 41.
        replicas.leader = False
        service.on_metadata()
        replicas.producers.entries[7] = _entry(7, 0, last_sequence=41)
        replicas.leader = True
        service.on_metadata()
        assert service._txn_sequence(_append(7, 0, 1)) == 42
        service.close()

    asyncio.run(body())
