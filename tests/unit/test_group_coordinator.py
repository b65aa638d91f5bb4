"""The group coordinator's state machine and offsets, driven through GroupManager with a
fake clock and a fake broker that applies appends in order (or fails them on demand)."""

from __future__ import annotations

import importlib
import io
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.serial import entity_writer

from raftka.broker.coordinator import (
    AppendRecords,
    CommitReply,
    FencedInstanceIdError,
    GroupConfig,
    GroupCoordinatorConfig,
    GroupManager,
    GroupMaxSizeReachedError,
    GroupState,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinReply,
    LeaveMember,
    NonEmptyGroupError,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetMetadataTooLargeError,
    OffsetsRecord,
    Output,
    SyncGroupRequest,
    SyncGroupResponse,
    SyncReply,
)
from raftka.broker.coordinator.group import subscription_topics
from raftka.broker.coordinator.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetsRecordError,
    decode_key,
    group_metadata_record,
    offset_commit_record,
)
from raftka.common.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaError,
    MemberIdRequiredError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftka.common.structs import OffsetAndMetadata, TopicPartition

G = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
RANGE = (("range", b"r-meta"),)


@dataclass
class Broker:
    """A fake broker: applies appends to a list (the partition's log) in emission order,
    collects delayed replies, and keeps the clock."""

    manager: GroupManager
    now_ms: int = 0
    auto_append: bool = True
    log: list[OffsetsRecord] = field(default_factory=list)
    pending: list[AppendRecords] = field(default_factory=list)
    joins: dict[str, JoinGroupResponse] = field(default_factory=dict)
    syncs: dict[str, SyncGroupResponse] = field(default_factory=dict)
    commits: dict[int, OffsetCommitResponse] = field(default_factory=dict)

    def absorb(self, outputs: Iterable[Output]) -> None:
        for out in outputs:
            if isinstance(out, JoinReply):
                assert out.member_id not in self.joins, "two answers to one parked join"
                self.joins[out.member_id] = out.response
            elif isinstance(out, SyncReply):
                assert out.member_id not in self.syncs, "two answers to one parked sync"
                self.syncs[out.member_id] = out.response
            elif isinstance(out, CommitReply):
                self.commits[out.append_id] = out.response
            else:
                self.pending.append(out)
        if self.auto_append:
            self.finish_appends()

    def finish_appends(self, error: type[KafkaError] | None = None) -> None:
        while self.pending:
            append = self.pending.pop(0)
            if error is None:
                self.log.extend(append.records)
            self.absorb(
                self.manager.append_completed(
                    append_id=append.append_id, error=error, now_ms=self.now_ms
                )
            )

    def tick(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.absorb(self.manager.tick(now_ms=now_ms))

    # -- requests ---------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        protocols: tuple[tuple[str, bytes], ...] = RANGE,
        instance: str | None = None,
        client_id: str = "c",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        protocol_type: str = "consumer",
        group_id: str = G,
    ) -> JoinGroupResponse | None:
        """The immediate answer, or None when parked (the answer lands in ``joins``)."""
        self.joins.pop(member_id, None)
        decision = self.manager.join_group(
            JoinGroupRequest(
                group_id=group_id,
                member_id=member_id,
                group_instance_id=instance,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                client_id=client_id,
            ),
            now_ms=self.now_ms,
        )
        self.absorb(decision.outputs)
        return decision.response

    def new_member(self, **kwargs: Any) -> str:
        """The two-step join of a new dynamic member; returns its member id (parked)."""
        first = self.join("", **kwargs)
        assert first is not None and first.error is MemberIdRequiredError
        member_id: str = first.member_id
        assert self.join(member_id, **kwargs) is None
        return member_id

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> SyncGroupResponse | None:
        self.syncs.pop(member_id, None)
        decision = self.manager.sync_group(
            SyncGroupRequest(G, generation, member_id, instance, assignments or {}),
            now_ms=self.now_ms,
        )
        self.absorb(decision.outputs)
        return decision.response

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> object:
        return self.manager.heartbeat(
            HeartbeatRequest(G, generation, member_id, instance), now_ms=self.now_ms
        ).error

    def commit(
        self,
        member_id: str,
        generation: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        group_id: str = G,
    ) -> OffsetCommitResponse | None:
        decision = self.manager.offset_commit(
            OffsetCommitRequest(group_id, generation, member_id, offsets), now_ms=self.now_ms
        )
        self.absorb(decision.outputs)
        if decision.response is not None:
            return decision.response
        return self.commits.get(max(self.commits, default=-1))

    def fetch(self, *tps: TopicPartition, group_id: str = G) -> dict[TopicPartition, int]:
        response = self.manager.offset_fetch(group_id=group_id, partitions=tps or None)
        assert response.error is None, response.error
        return {tp: o.offset for tp, o in response.offsets.items()}

    def state(self) -> GroupState:
        group = self.manager.group(G)
        return GroupState.DEAD if group is None else group.state


def make_broker(*, delay_ms: int = 0, max_size: int | None = None, loaded: bool = True) -> Broker:
    manager = GroupManager(
        config=GroupCoordinatorConfig(
            group=GroupConfig(group_initial_rebalance_delay_ms=delay_ms, group_max_size=max_size)
        ),
        rng=random.Random(7),
        partition_for=lambda group_id: 0,
    )
    if loaded:
        manager.begin_loading(partition=0)
        manager.complete_loading(partition=0, now_ms=0)
    return Broker(manager)


def stable_group(broker: Broker, n: int) -> tuple[list[str], int]:
    """n members through join and sync into Stable; returns (member ids, generation)."""
    ids = [broker.new_member(client_id=f"c{i}") for i in range(n)]
    broker.tick(broker.now_ms)  # delay 0: the join phase ends on the next tick
    generation = broker.joins[ids[0]].generation_id
    leader = broker.joins[ids[0]].leader_id
    for mid in ids:
        if mid != leader:
            assert broker.sync(mid, generation) is None
    broker.sync(leader, generation, {mid: mid.encode() for mid in ids})
    assert broker.state() is GroupState.STABLE
    return ids, generation


# -- join --------------------------------------------------------------------------------


def test_member_id_required_two_step_join() -> None:
    """A join without member id gets MEMBER_ID_REQUIRED and a generated id made of the
    client id and a UUID; rejoining with that id parks the join (the group starts
    preparing a rebalance); a made-up member id is UNKNOWN_MEMBER_ID."""
    broker = make_broker()
    first = broker.join("", client_id="app")
    assert first is not None and first.error is MemberIdRequiredError
    assert first.member_id.startswith("app-") and len(first.member_id) == len("app-") + 36
    assert broker.state() is GroupState.EMPTY
    unknown = broker.join("bogus")
    assert unknown is not None and unknown.error is UnknownMemberIdError
    assert broker.join(first.member_id) is None
    assert broker.state() is GroupState.PREPARING_REBALANCE
    broker.tick(0)
    response = broker.joins[first.member_id]
    assert response.error is None and response.generation_id == 1
    assert response.leader_id == first.member_id
    assert broker.state() is GroupState.COMPLETING_REBALANCE


def test_pending_member_id_lapses_after_session_timeout() -> None:
    """A MEMBER_ID_REQUIRED id not used within the session timeout is forgotten."""
    broker = make_broker()
    first = broker.join("")
    assert first is not None
    broker.tick(SESSION_MS)
    late = broker.join(first.member_id)
    assert late is not None and late.error is UnknownMemberIdError


def test_initial_rebalance_delay_extends_per_joiner_up_to_rebalance_timeout() -> None:
    """From Empty the join phase waits group.initial.rebalance.delay.ms; a member joining
    during the wait extends it by another delay; the extensions stop at the rebalance
    timeout. Both members then get generation 1 together."""
    broker = make_broker(delay_ms=3_000)
    a = broker.new_member(rebalance_ms=7_000)
    broker.tick(2_999)
    assert broker.state() is GroupState.PREPARING_REBALANCE and not broker.joins
    broker.now_ms = 2_000
    b = broker.new_member(rebalance_ms=7_000)
    broker.tick(3_000)  # extended: 3000 + 3000
    assert not broker.joins
    broker.now_ms = 5_000
    c = broker.new_member(rebalance_ms=7_000)
    broker.tick(5_999)
    assert not broker.joins
    # Remaining budget after two delays: 7000 - 3000 - 3000 = 1000 more ms at most.
    broker.tick(6_000)
    assert not broker.joins
    broker.tick(7_000)
    assert {broker.joins[m].generation_id for m in (a, b, c)} == {1}


def test_initial_delay_without_new_joiners_completes_once() -> None:
    """With no member joining during the initial delay the phase ends right after it."""
    broker = make_broker(delay_ms=3_000)
    a = broker.new_member()
    broker.tick(3_000)
    assert broker.joins[a].error is None


def test_rebalance_completes_when_all_members_rejoin() -> None:
    """A Stable group that gets a new member prepares a rebalance; once every known
    member has rejoined the phase ends at once (no timeout), the generation grows."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    c = broker.new_member(client_id="c2")
    assert broker.state() is GroupState.PREPARING_REBALANCE
    assert broker.heartbeat(a, generation) is RebalanceInProgressError
    assert broker.join(a) is None
    assert c not in broker.joins
    assert broker.join(b) is None
    assert {broker.joins[m].generation_id for m in (a, b, c)} == {generation + 1}
    assert broker.state() is GroupState.COMPLETING_REBALANCE
    # The metrics' rebalance counter: one per completed join phase (generation bump).
    group = broker.manager.group(G)
    assert group is not None and group.rebalances == generation + 1


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    """When the rebalance timeout passes, members that did not rejoin are removed and
    the rest continue with the next generation."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    broker.now_ms = 100
    assert broker.join(a, protocols=(("range", b"new"),)) is None
    # b stays alive (heartbeats within its session) but never rejoins.
    for now_ms in range(100, 100 + REBALANCE_MS, 5_000):
        broker.now_ms = now_ms
        assert broker.heartbeat(b, generation) is RebalanceInProgressError
        broker.tick(now_ms)
    broker.tick(100 + REBALANCE_MS - 1)
    assert not broker.joins.get(a)
    broker.tick(100 + REBALANCE_MS)
    assert broker.joins[a].generation_id == generation + 1
    group = broker.manager.group(G)
    assert group is not None and list(group.members) == [a]
    assert broker.heartbeat(b, generation + 1) is UnknownMemberIdError


def test_leader_gets_all_metadata_and_protocol_is_voted() -> None:
    """The first member leads and alone receives every member's metadata for the chosen
    protocol; the protocol is the one most members prefer among those all support."""
    broker = make_broker()
    a = broker.new_member(protocols=(("range", b"a-r"), ("rr", b"a-rr")))
    b = broker.new_member(protocols=(("rr", b"b-rr"), ("range", b"b-r")))
    c = broker.new_member(protocols=(("rr", b"c-rr"), ("sticky", b"c-s"), ("range", b"c-r")))
    broker.tick(0)
    leader = broker.joins[a]
    assert leader.leader_id == a and leader.protocol_name == "rr"
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (a, b"a-rr"),
        (b, b"b-rr"),
        (c, b"c-rr"),
    ]
    assert broker.joins[b].members == () and broker.joins[b].leader_id == a


def test_protocol_tie_goes_to_leader_preference() -> None:
    """With equal votes the leader's preference order decides."""
    broker = make_broker()
    a = broker.new_member(protocols=(("range", b""), ("rr", b"")))
    broker.new_member(protocols=(("rr", b""), ("range", b"")))
    broker.tick(0)
    assert broker.joins[a].protocol_name == "range"


def test_inconsistent_protocols_are_refused() -> None:
    """A member sharing no protocol (or protocol type) with the group is refused with
    INCONSISTENT_GROUP_PROTOCOL; an empty protocol list too."""
    broker = make_broker()
    stable_group(broker, 1)
    kwargs: dict[str, Any]
    for kwargs in (
        {"protocols": (("sticky", b""),)},
        {"protocol_type": "connect"},
        {"protocols": ()},
    ):
        response = broker.join("", **kwargs)
        assert response is not None and response.error is InconsistentGroupProtocolError


def test_leader_leaving_passes_leadership_on() -> None:
    """When the leader leaves, the next member leads the next generation."""
    broker = make_broker()
    (a, b, c), _ = stable_group(broker, 3)
    broker.manager.leave_group(group_id=G, members=(LeaveMember(a),), now_ms=0)
    broker.join(b)
    broker.join(c)
    assert broker.joins[c].leader_id == b and broker.joins[b].members


def test_session_timeout_bounds_and_group_id_and_max_size() -> None:
    """Session timeouts outside [6000, 1800000] get INVALID_SESSION_TIMEOUT, an empty
    group id INVALID_GROUP_ID, a member beyond group.max.size GROUP_MAX_SIZE_REACHED."""
    broker = make_broker(max_size=2)
    for session_ms in (5_999, 1_800_001):
        response = broker.join("", session_ms=session_ms)
        assert response is not None and response.error is InvalidSessionTimeoutError
    response = broker.join("", group_id="")
    assert response is not None and response.error is InvalidGroupIdError
    broker.new_member()
    broker.new_member()
    full = broker.join("")
    assert full is not None and full.error is GroupMaxSizeReachedError


def test_follower_rejoin_in_stable_changes_nothing_but_leader_rejoin_rebalances() -> None:
    """A follower rejoining a Stable group with the same metadata gets the current
    generation back at once; the leader rejoining starts a rebalance."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    again = broker.join(b)
    assert again is not None and again.generation_id == generation and again.error is None
    assert broker.state() is GroupState.STABLE
    assert broker.join(a) is None
    assert broker.state() is GroupState.PREPARING_REBALANCE


# -- sync --------------------------------------------------------------------------------


def test_sync_waits_for_leader_and_persists_before_release() -> None:
    """Followers' SyncGroup waits for the leader's; the leader's assignment is appended
    first and only its completion releases every member's assignment and makes the
    group Stable. Members the leader left out get an empty assignment."""
    broker = make_broker()
    broker.auto_append = False
    a, b, c = (broker.new_member(client_id=f"c{i}") for i in range(3))
    broker.tick(0)
    generation = broker.joins[a].generation_id
    assert broker.sync(b, generation) is None
    assert broker.sync(a, generation, {a: b"A", b: b"B"}) is None
    assert not broker.syncs and len(broker.pending) == 1
    assert broker.state() is GroupState.COMPLETING_REBALANCE
    broker.finish_appends()
    assert broker.syncs[a].assignment == b"A" and broker.syncs[b].assignment == b"B"
    assert c not in broker.syncs
    assert broker.state() is GroupState.STABLE
    late = broker.sync(c, generation)
    assert late is not None and late.assignment == b""
    assert decode_key(broker.log[-1].key).group_id == G


def test_sync_append_failure_answers_error_and_rebalances() -> None:
    """If the group's append fails, waiting members get the coordinator error
    (NOT_ENOUGH_REPLICAS -> COORDINATOR_NOT_AVAILABLE) and the group rebalances."""
    broker = make_broker()
    broker.auto_append = False
    a = broker.new_member()
    broker.tick(0)
    broker.sync(a, 1, {a: b"A"})
    broker.finish_appends(NotEnoughReplicasError)
    assert broker.syncs[a].error is not None
    assert broker.syncs[a].error.name == "COORDINATOR_NOT_AVAILABLE"
    assert broker.state() is GroupState.PREPARING_REBALANCE


def test_sync_errors() -> None:
    """SyncGroup: unknown member -> UNKNOWN_MEMBER_ID, wrong generation ->
    ILLEGAL_GENERATION, during the join phase -> REBALANCE_IN_PROGRESS; parked syncs
    are answered REBALANCE_IN_PROGRESS when a rebalance starts before the leader syncs."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    unknown = broker.sync("nobody", generation)
    assert unknown is not None and unknown.error is UnknownMemberIdError
    stale = broker.sync(a, generation - 1)
    assert stale is not None and stale.error is IllegalGenerationError
    broker.join(a)
    during = broker.sync(b, generation)
    assert during is not None and during.error is RebalanceInProgressError
    broker.join(b)
    assert broker.sync(b, generation + 1) is None  # waits for the leader
    broker.new_member()  # a new member restarts the rebalance
    assert broker.syncs[b].error is RebalanceInProgressError


# -- heartbeat, expiry, leave ---------------------------------------------------------------


def test_heartbeat_errors_and_session_expiry_triggers_rebalance() -> None:
    """Heartbeat answers UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / NONE; a member silent
    for session.timeout.ms is removed at the next tick and the group rebalances."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    assert broker.heartbeat("nobody", generation) is UnknownMemberIdError
    assert broker.heartbeat(a, generation + 1) is IllegalGenerationError
    broker.now_ms = 5_000
    assert broker.heartbeat(a, generation) is None
    broker.tick(SESSION_MS - 1)
    assert broker.state() is GroupState.STABLE
    broker.tick(SESSION_MS)  # b's last sign of life was at 0
    group = broker.manager.group(G)
    assert group is not None and b not in group.members
    assert broker.state() is GroupState.PREPARING_REBALANCE
    assert broker.heartbeat(a, generation) is RebalanceInProgressError
    assert broker.join(a) is None
    assert broker.joins[a].generation_id == generation + 1


def test_heartbeat_during_completing_rebalance_is_fine() -> None:
    """Between its JoinGroup answer and its SyncGroup a member may heartbeat (NONE)."""
    broker = make_broker()
    a = broker.new_member()
    broker.tick(0)
    assert broker.state() is GroupState.COMPLETING_REBALANCE
    assert broker.heartbeat(a, 1) is None


def test_leave_one_and_many() -> None:
    """LeaveGroup removes one or many members (unknown ones get UNKNOWN_MEMBER_ID); the
    group rebalances; when the last member leaves it becomes Empty with the next
    generation, persisted."""
    broker = make_broker()
    (a, b, c), generation = stable_group(broker, 3)
    decision = broker.manager.leave_group(group_id=G, members=(LeaveMember(a),), now_ms=0)
    assert decision.response is not None and decision.response.members[0].error is None
    assert broker.state() is GroupState.PREPARING_REBALANCE
    decision = broker.manager.leave_group(
        group_id=G, members=(LeaveMember(b), LeaveMember(c), LeaveMember("x")), now_ms=0
    )
    broker.absorb(decision.outputs)
    assert decision.response is not None
    assert [r.error for r in decision.response.members] == [None, None, UnknownMemberIdError]
    assert broker.state() is GroupState.EMPTY
    group = broker.manager.group(G)
    assert group is not None and group.generation_id == generation + 1
    assert len(broker.log) == 2  # the Stable group, then the Empty one


def test_leaving_member_with_parked_join_is_answered() -> None:
    """A member removed while its JoinGroup is parked gets UNKNOWN_MEMBER_ID for it."""
    broker = make_broker(delay_ms=3_000)
    a = broker.new_member()
    broker.absorb(
        broker.manager.leave_group(group_id=G, members=(LeaveMember(a),), now_ms=0).outputs
    )
    assert broker.joins[a].error is UnknownMemberIdError


# -- static membership ---------------------------------------------------------------------


def test_static_member_rejoin_replaces_member_without_rebalance() -> None:
    """A known group.instance.id joining without member id takes a new member id in
    place of the old one, keeps its assignment, and causes no rebalance (the group is
    persisted first); the old member id is then FENCED_INSTANCE_ID."""
    broker = make_broker()
    assert broker.join("", instance="i-1") is None  # static: no MEMBER_ID_REQUIRED
    broker.tick(0)
    old = next(iter(broker.joins))
    generation = broker.joins[old].generation_id
    broker.sync(old, generation, {old: b"mine"})
    log_size = len(broker.log)
    assert broker.join("", instance="i-1") is None
    new = next(m for m in broker.joins if m != old)
    rejoined = broker.joins[new]
    assert rejoined.generation_id == generation and rejoined.skip_assignment
    assert broker.state() is GroupState.STABLE and len(broker.log) == log_size + 1
    assert broker.heartbeat(old, generation, instance="i-1") is FencedInstanceIdError
    assert broker.heartbeat(new, generation, instance="i-1") is None
    synced = broker.sync(new, generation, instance="i-1")
    assert synced is not None and synced.assignment == b"mine"


# -- offsets -------------------------------------------------------------------------------


def test_commit_from_stale_generation_or_unknown_member_is_rejected() -> None:
    """Within generation N+1 a commit with generation N is ILLEGAL_GENERATION; an
    unknown member UNKNOWN_MEMBER_ID; the current generation is accepted."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    broker.join(a)
    broker.join(b)
    broker.sync(b, generation + 1)
    broker.sync(a, generation + 1, {a: b"", b: b""})
    stale = broker.commit(a, generation, {TP0: OffsetAndMetadata(5)})
    assert stale is not None and stale.errors == {TP0: IllegalGenerationError}
    unknown = broker.commit("nobody", generation + 1, {TP0: OffsetAndMetadata(5)})
    assert unknown is not None and unknown.errors == {TP0: UnknownMemberIdError}
    ok = broker.commit(a, generation + 1, {TP0: OffsetAndMetadata(5)})
    assert ok is not None and ok.errors == {TP0: None}
    assert broker.fetch(TP0) == {TP0: 5}


def test_commit_during_rebalance_phases() -> None:
    """While preparing a rebalance the current generation may still commit (consumers
    commit when partitions are revoked); while waiting for the leader's assignment a
    commit gets REBALANCE_IN_PROGRESS."""
    broker = make_broker()
    (a, b), generation = stable_group(broker, 2)
    broker.join(a)
    during = broker.commit(b, generation, {TP0: OffsetAndMetadata(1)})
    assert during is not None and during.errors == {TP0: None}
    broker.join(b)
    completing = broker.commit(b, generation + 1, {TP0: OffsetAndMetadata(2)})
    assert completing is not None and completing.errors == {TP0: RebalanceInProgressError}


def test_manual_commits_with_generation_minus_one() -> None:
    """With no group (or an Empty one) generation -1 commits are accepted; a positive
    generation for an unknown group is ILLEGAL_GENERATION; an active group refuses -1."""
    broker = make_broker()
    refused = broker.commit("", 3, {TP0: OffsetAndMetadata(1)}, group_id="manual")
    assert refused is not None and refused.errors == {TP0: IllegalGenerationError}
    ok = broker.commit("", -1, {TP0: OffsetAndMetadata(7, "m")}, group_id="manual")
    assert ok is not None and ok.errors == {TP0: None}
    assert broker.fetch(TP0, TP1, group_id="manual") == {TP0: 7, TP1: -1}
    stable_group(broker, 1)
    active = broker.commit("", -1, {TP0: OffsetAndMetadata(1)})
    assert active is not None and active.errors == {TP0: UnknownMemberIdError}


def test_commit_visible_only_after_append() -> None:
    """A commit is not fetchable until its append completes; a failed append is not
    visible at all and answers a coordinator error; oversized metadata is refused."""
    broker = make_broker()
    broker.auto_append = False
    broker.commit("", -1, {TP0: OffsetAndMetadata(9)})
    assert broker.fetch(TP0) == {TP0: -1}
    broker.finish_appends()
    assert broker.fetch(TP0) == {TP0: 9}
    response = broker.commit("", -1, {TP0: OffsetAndMetadata(10)})
    assert response is not None  # the earlier reply; the new one waits
    broker.finish_appends(NotEnoughReplicasError)
    assert broker.fetch(TP0) == {TP0: 9}
    failed = broker.commits[max(broker.commits)]
    assert failed.errors[TP0] is not None and failed.errors[TP0].name == "COORDINATOR_NOT_AVAILABLE"
    big = broker.commit("", -1, {TP1: OffsetAndMetadata(1, "x" * 4097)})
    assert big is not None and big.errors == {TP1: OffsetMetadataTooLargeError}


def test_offsets_expire_after_retention_once_group_is_empty() -> None:
    """Offsets of a consumer group expire offsets.retention.minutes after it became
    Empty (never while it has members); a manual group's offsets expire that long after
    each commit; expiry writes tombstones and finally deletes the group."""
    broker = make_broker()
    retention_ms = 7 * 24 * 60 * 60_000
    (a,), generation = stable_group(broker, 1)
    broker.commit(a, generation, {TP0: OffsetAndMetadata(3)})
    broker.commit("", -1, {TP0: OffsetAndMetadata(4)}, group_id="manual")
    # Keep a alive well past the retention: nothing expires while it is a member.
    for now_ms in range(0, retention_ms + 1, 600_000):
        broker.now_ms = now_ms
        broker.heartbeat(a, generation)
        broker.tick(now_ms)
    assert broker.fetch(TP0) == {TP0: 3}
    assert broker.fetch(TP0, group_id="manual") == {TP0: -1}
    assert broker.manager.group("manual") is None
    left_ms = broker.now_ms
    broker.absorb(
        broker.manager.leave_group(group_id=G, members=(LeaveMember(a),), now_ms=left_ms).outputs
    )
    assert broker.state() is GroupState.EMPTY
    broker.tick(left_ms + retention_ms - 1)
    assert broker.fetch(TP0) == {TP0: 3}
    broker.tick(left_ms + retention_ms + 600_000)
    assert broker.fetch(TP0) == {TP0: -1}
    assert broker.state() is GroupState.DEAD
    assert broker.log[-1].value is None


# -- admin ---------------------------------------------------------------------------------


def test_describe_list_delete() -> None:
    """DescribeGroups shows state, protocol type, protocol and members (metadata and
    assignment only when Stable); ListGroups lists with a state filter; DeleteGroups
    deletes only Empty groups (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND when
    unknown) and writes tombstones for the group and its offsets."""
    broker = make_broker()
    (a,), generation = stable_group(broker, 1)
    (described,) = broker.manager.describe_groups(group_ids=(G,))
    assert (described.state, described.protocol_type, described.protocol) == (
        "Stable",
        "consumer",
        "range",
    )
    assert described.members[0].assignment == a.encode()
    assert described.members[0].metadata == b"r-meta"
    assert described.members[0].client_id == "c0"
    (unknown,) = broker.manager.describe_groups(group_ids=("nope",))
    assert unknown.state == "Dead" and unknown.error is None
    broker.commit("", -1, {TP0: OffsetAndMetadata(1)}, group_id="manual")
    listed = broker.manager.list_groups()
    assert {(g.group_id, g.state) for g in listed.groups} == {(G, "Stable"), ("manual", "Empty")}
    assert [g.group_id for g in broker.manager.list_groups(states=frozenset({"Empty"})).groups] == [
        "manual"
    ]
    decision = broker.manager.delete_groups(group_ids=(G, "manual", "nope"), now_ms=0)
    broker.absorb(decision.outputs)
    assert decision.response is not None
    assert decision.response.results == {
        G: NonEmptyGroupError,
        "manual": None,
        "nope": GroupIdNotFoundError,
    }
    assert broker.manager.group("manual") is None
    assert broker.fetch(TP0, group_id="manual") == {TP0: -1}
    assert [r.value for r in broker.log[-2:]] == [None, None]
    del generation


def test_state_walk_through_every_transition() -> None:
    """Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> PreparingRebalance
    -> CompletingRebalance -> PreparingRebalance -> Empty -> (deleted) Dead, each step
    caused by the request Kafka would see."""
    broker = make_broker()
    seen = [broker.state()]

    def step() -> None:
        seen.append(broker.state())

    a = broker.new_member()
    step()
    b = broker.new_member()
    broker.tick(0)  # the (zero) initial delay passes
    step()
    broker.sync(b, 1)
    broker.sync(a, 1, {a: b"", b: b""})
    step()
    broker.join(a)  # the leader rejoins
    step()
    broker.join(b)  # everyone is back
    step()
    broker.new_member()  # someone new before the leader synced
    step()
    group = broker.manager.group(G)
    assert group is not None
    leave = tuple(LeaveMember(m) for m in group.members)
    broker.absorb(broker.manager.leave_group(group_id=G, members=leave, now_ms=0).outputs)
    step()
    broker.manager.delete_groups(group_ids=(G,), now_ms=0)
    step()
    assert [s.value for s in seen] == [
        "Dead",  # no group yet
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "PreparingRebalance",
        "CompletingRebalance",
        "PreparingRebalance",
        "Empty",
        "Dead",
    ]
    assert group.state is GroupState.DEAD


# -- loading ---------------------------------------------------------------------------------


def test_load_in_progress_then_served_then_not_coordinator_after_unload() -> None:
    """Requests for a partition being loaded get COORDINATOR_LOAD_IN_PROGRESS; after
    replaying the log the groups and offsets are back (Stable with members and their
    assignments); after unloading every request gets NOT_COORDINATOR and parked requests
    are answered with it."""
    source = make_broker()
    (a, b), generation = stable_group(source, 2)
    source.commit(a, generation, {TP0: OffsetAndMetadata(11, "meta", 3)})
    source.commit("", -1, {TP1: OffsetAndMetadata(5)}, group_id="manual")
    source.commit("", -1, {TP1: OffsetAndMetadata(6)}, group_id="manual")

    target = make_broker(loaded=False)
    response = target.join("")
    assert response is not None and response.error is NotCoordinatorError
    target.manager.begin_loading(partition=0)
    response = target.join("")
    assert response is not None and response.error is CoordinatorLoadInProgressError
    assert target.manager.offset_fetch(group_id=G, partitions=None).error is (
        CoordinatorLoadInProgressError
    )
    target.manager.replay(partition=0, records=source.log[:3])
    target.manager.replay(partition=0, records=source.log[3:])
    target.manager.complete_loading(partition=0, now_ms=50_000)
    target.now_ms = 50_000
    assert target.state() is GroupState.STABLE
    assert target.heartbeat(b, generation) is None
    synced = target.sync(b, generation)
    assert synced is not None and synced.assignment == b.encode()
    assert target.manager.offset_fetch(group_id=G, partitions=(TP0,)).offsets == {
        TP0: OffsetAndMetadata(11, "meta", 3)
    }
    assert target.fetch(TP1, group_id="manual") == {TP1: 6}

    target.join(a)  # parked: the leader rejoins
    outputs = target.manager.unload(partition=0, now_ms=50_000)
    target.absorb(outputs)
    assert target.joins[a].error is NotCoordinatorError
    assert target.heartbeat(b, generation) is NotCoordinatorError
    assert target.manager.group(G) is None


@pytest.mark.parametrize("error", [None, NotEnoughReplicasError])
def test_unload_answers_pending_commits(error: type[KafkaError] | None) -> None:
    """A commit whose append has not completed when the partition is unloaded is
    answered NOT_COORDINATOR; the late append completion is ignored."""
    broker = make_broker()
    broker.auto_append = False
    broker.commit("", -1, {TP0: OffsetAndMetadata(1)})
    broker.absorb(broker.manager.unload(partition=0, now_ms=0))
    (reply,) = broker.commits.values()
    assert reply.errors == {TP0: NotCoordinatorError}
    append = broker.pending.pop()
    assert broker.manager.append_completed(append_id=append.append_id, error=error, now_ms=0) == ()


def test_replay_latest_value_wins_and_tombstones_delete() -> None:
    """Replay keeps the latest value per key; a tombstone deletes an offset or a group; a
    group whose metadata was deleted but that still has offsets comes back Empty."""
    source = make_broker()
    source.commit("", -1, {TP0: OffsetAndMetadata(1)})
    source.commit("", -1, {TP0: OffsetAndMetadata(2), TP1: OffsetAndMetadata(3)})
    source.commit("", -1, {TP0: OffsetAndMetadata(4)}, group_id="gone")
    source.absorb(source.manager.delete_groups(group_ids=("gone",), now_ms=0).outputs)
    (a,), generation = stable_group(source, 1)
    tombstone_g = group_metadata_record(GroupMetadataKey(G), None)
    tombstone_tp1 = offset_commit_record(OffsetCommitKey(G, "t", 1), None)
    target = make_broker(loaded=False)
    target.manager.begin_loading(partition=0)
    target.manager.replay(partition=0, records=[*source.log, tombstone_tp1])
    target.manager.complete_loading(partition=0, now_ms=0)
    assert target.fetch(TP0, TP1) == {TP0: 2, TP1: -1}
    assert target.manager.group("gone") is None
    assert target.state() is GroupState.STABLE
    assert target.heartbeat(a, generation) is None
    # Now without the group's metadata: only the offsets keep it alive, as an Empty group.
    again = make_broker(loaded=False)
    again.manager.begin_loading(partition=0)
    again.manager.replay(partition=0, records=[*source.log, tombstone_g])
    again.manager.complete_loading(partition=0, now_ms=0)
    assert again.state() is GroupState.EMPTY and again.fetch(TP0) == {TP0: 2}


def test_replay_refuses_records_of_another_partition() -> None:
    """A record whose group maps to another __consumer_offsets partition is corrupt."""
    manager = GroupManager(
        config=GroupCoordinatorConfig(),
        rng=random.Random(1),
        partition_for=lambda group_id: 0 if group_id == G else 1,
    )
    manager.begin_loading(partition=0)
    with pytest.raises(OffsetsRecordError):
        manager.replay(
            partition=0, records=[group_metadata_record(GroupMetadataKey("other"), None)]
        )


def test_delete_with_commit_in_flight_stays_deleted() -> None:
    """A commit accepted before DeleteGroups but appended after it succeeds, yet the
    group's tombstones (which cover that partition) follow it: memory and a replay agree
    the offsets are gone."""
    broker = make_broker()
    broker.auto_append = False
    broker.commit("", -1, {TP0: OffsetAndMetadata(5)})
    decision = broker.manager.delete_groups(group_ids=(G,), now_ms=0)
    assert decision.response is not None and decision.response.results == {G: None}
    broker.absorb(decision.outputs)
    broker.finish_appends()
    assert next(iter(broker.commits.values())).errors == {TP0: None}
    assert broker.fetch(TP0) == {TP0: -1} and broker.manager.group(G) is None
    fresh = make_broker(loaded=False)
    fresh.manager.begin_loading(partition=0)
    fresh.manager.replay(partition=0, records=broker.log)
    fresh.manager.complete_loading(partition=0, now_ms=0)
    assert fresh.manager.group(G) is None and fresh.fetch(TP0) == {TP0: -1}


def test_static_member_fencing_on_join_sync_commit_and_leave_by_instance() -> None:
    """After a static member was replaced, its old member id is FENCED_INSTANCE_ID on
    join, sync and commit; an admin LeaveGroup by instance id alone removes it."""
    broker = make_broker()
    broker.join("", instance="i-1")
    broker.tick(0)
    old = next(iter(broker.joins))
    broker.sync(old, 1, {old: b"x"})
    broker.join("", instance="i-1")
    fenced = broker.join(old, instance="i-1")
    assert fenced is not None and fenced.error is FencedInstanceIdError
    synced = broker.sync(old, 1, instance="i-1")
    assert synced is not None and synced.error is FencedInstanceIdError
    commit = broker.manager.offset_commit(
        OffsetCommitRequest(G, 1, old, {TP0: OffsetAndMetadata(1)}, group_instance_id="i-1"),
        now_ms=0,
    )
    assert commit.response is not None and commit.response.errors == {TP0: FencedInstanceIdError}
    decision = broker.manager.leave_group(group_id=G, members=(LeaveMember("", "i-1"),), now_ms=0)
    broker.absorb(decision.outputs)
    assert decision.response is not None and decision.response.members[0].error is None
    assert broker.state() is GroupState.EMPTY


def test_commit_with_its_own_retention_expires_then() -> None:
    """A commit carrying retention_time_ms (OffsetCommit v2-v4) expires at commit time +
    that retention, not after offsets.retention.minutes."""
    broker = make_broker()
    decision = broker.manager.offset_commit(
        OffsetCommitRequest(G, -1, "", {TP0: OffsetAndMetadata(1)}, retention_time_ms=60_000),
        now_ms=0,
    )
    broker.absorb(decision.outputs)
    broker.tick(0)  # a retention check: nothing due
    broker.tick(600_000)  # the next check: due since 60 s, far before the 7 days
    assert broker.fetch(TP0) == {TP0: -1}
    fresh = make_broker()
    fresh.absorb(
        fresh.manager.offset_commit(
            OffsetCommitRequest(G, -1, "", {TP0: OffsetAndMetadata(1)}, retention_time_ms=60_000),
            now_ms=0,
        ).outputs
    )
    fresh.tick(59_999)
    assert fresh.fetch(TP0) == {TP0: 1}


def test_next_deadline_tells_the_driver_when_to_tick() -> None:
    """next_deadline_ms is the earliest session expiry (or join deadline, or retention
    check): ticking just before it changes nothing, at it the member expires."""
    broker = make_broker()
    broker.tick(0)  # runs the first retention check; the next is 600 s later
    (a,), generation = stable_group(broker, 1)
    broker.now_ms = 1_000
    broker.heartbeat(a, generation)
    assert broker.manager.next_deadline_ms() == 1_000 + SESSION_MS
    broker.tick(1_000 + SESSION_MS - 1)
    assert broker.state() is GroupState.STABLE
    broker.tick(1_000 + SESSION_MS)
    assert broker.state() is GroupState.EMPTY


# -- OffsetDelete ------------------------------------------------------------------------


def _kafka_subscription(version: int, *topics: str) -> bytes:
    """A Java consumer's subscription metadata: int16 version, then that version."""
    module = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}")
    cls = module.ConsumerProtocolSubscription
    fields = {"topics": topics, "user_data": None, "owned_partitions": (), "generation_id": -1}
    out = io.BytesIO()
    entity_writer(cls)(
        out, cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
    )
    return version.to_bytes(2, "big") + out.getvalue()


def _delete_offsets(broker: Broker, group_id: str, *tps: TopicPartition) -> OffsetDeleteResponse:
    decision = broker.manager.delete_offsets(
        group_id=group_id, partitions=tps, now_ms=broker.now_ms
    )
    broker.absorb(decision.outputs)
    assert decision.response is not None
    return decision.response


def _replayed(broker: Broker) -> Broker:
    fresh = make_broker(loaded=False)
    fresh.manager.begin_loading(partition=0)
    fresh.manager.replay(partition=0, records=broker.log)
    fresh.manager.complete_loading(partition=0, now_ms=broker.now_ms)
    return fresh


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_topics_of_kafka_and_raftka_consumers(version: int) -> None:
    """A Java consumer's ConsumerProtocolSubscription (any version; a newer one is read
    as the newest known) and raftka's JSON both give their topics; garbage gives None."""
    assert subscription_topics(_kafka_subscription(version, "a", "b")) == ("a", "b")
    newer = (9).to_bytes(2, "big") + _kafka_subscription(3, "a")[2:]
    assert subscription_topics(newer) == ("a",)
    assert subscription_topics(b'{"topics": ["x"], "generation_id": -1}') == ("x",)
    for garbage in (b"", b"\x00", b"\xff\xff", b"r-meta", b"{", b'{"topics": 3}'):
        assert subscription_topics(garbage) is None


def test_offset_delete_follows_kafkas_rules() -> None:
    """OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group; an Empty group's offsets
    go (tombstones; a partition with none is fine too), and the group with its last
    one; a consumer group with members keeps the offsets of the topics it subscribes to
    (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; a non-consumer group with members
    is NON_EMPTY_GROUP. A replay of the log agrees with memory."""
    broker = make_broker()
    assert _delete_offsets(broker, "nope", TP0).error is GroupIdNotFoundError
    two = TopicPartition("u", 0)
    broker.commit("", -1, {TP0: OffsetAndMetadata(1), TP1: OffsetAndMetadata(2)}, group_id="m")
    response = _delete_offsets(broker, "m", TP0, two)
    assert response.error is None and response.errors == {TP0: None, two: None}
    assert broker.log[-1].value is None and broker.manager.group("m") is not None
    assert broker.fetch(TP0, TP1, group_id="m") == {TP0: -1, TP1: 2}
    assert _replayed(broker).fetch(TP0, TP1, group_id="m") == {TP0: -1, TP1: 2}
    assert _delete_offsets(broker, "m", TP1).errors == {TP1: None}
    assert broker.manager.group("m") is None  # its last offset: the group goes too
    assert _replayed(broker).manager.group("m") is None

    # A consumer group subscribed to "t", with offsets of "t" and of "u".
    member = broker.new_member(protocols=(("range", _kafka_subscription(1, "t")),))
    broker.tick(broker.now_ms)
    generation = broker.joins[member].generation_id
    broker.sync(member, generation, {member: b""})
    assert broker.state() is GroupState.STABLE
    broker.commit(member, generation, {TP0: OffsetAndMetadata(5), two: OffsetAndMetadata(6)})
    response = _delete_offsets(broker, G, TP0, two)
    assert response.errors == {TP0: GroupSubscribedToTopicError, two: None}
    assert broker.fetch(TP0, two) == {TP0: 5, two: -1}
    assert _replayed(broker).fetch(TP0, two) == {TP0: 5, two: -1}

    other = broker.new_member(protocol_type="connect", group_id="connect")
    broker.tick(broker.now_ms)
    assert broker.manager.group("connect") is not None and other
    assert _delete_offsets(broker, "connect", TP0).error is NonEmptyGroupError


def test_offset_delete_coordinator_errors_and_in_flight_commit() -> None:
    """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as for OffsetCommit; a commit
    accepted before the delete but appended after it stays deleted, in memory and in a
    replay (the tombstone follows it in the log)."""
    assert _delete_offsets(make_broker(loaded=False), G, TP0).error is NotCoordinatorError
    loading = make_broker(loaded=False)
    loading.manager.begin_loading(partition=0)
    assert _delete_offsets(loading, G, TP0).error is CoordinatorLoadInProgressError
    assert _delete_offsets(make_broker(), "", TP0).error is InvalidGroupIdError

    broker = make_broker()
    broker.commit("", -1, {TP1: OffsetAndMetadata(1)})
    broker.auto_append = False
    broker.commit("", -1, {TP0: OffsetAndMetadata(5)})
    assert _delete_offsets(broker, G, TP0).errors == {TP0: None}
    broker.finish_appends()
    assert next(reversed(broker.commits.values())).errors == {TP0: None}
    assert broker.fetch(TP0, TP1) == {TP0: -1, TP1: 1}
    assert _replayed(broker).fetch(TP0, TP1) == {TP0: -1, TP1: 1}
