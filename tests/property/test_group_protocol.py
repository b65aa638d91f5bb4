"""Property tests for the group coordinator: random sequences of joins, syncs,
heartbeats, leaves, commits, clock advances, static restarts and failed or delayed
appends, played by a few simulated consumers against one GroupManager. After every
step the invariants hold: generations never go back; a Stable group's members hold
exactly the leader's assignment of the current generation; within a generation a
partition has at most one owner; a commit is accepted exactly when Kafka's rules say so.
At the end, replaying the appended records into a fresh manager reproduces the groups
(Stable and Empty ones) and every committed offset."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from raftka.broker import coordinator
from raftka.broker.coordinator.group_records import (
    GroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
)
from raftka.common.errors import (
    MemberIdRequiredError,
    NotEnoughReplicasError,
    UnknownMemberIdError,
)
from raftka.common.structs import OffsetAndMetadata, TopicPartition

G = "g"
MANUAL = "manual"
CLIENTS = 4
STATIC_CLIENT = 3
INSTANCE = "instance-3"
PARTITIONS = tuple(TopicPartition("t", p) for p in range(5))


@dataclass
class Client:
    """What one simulated consumer knows about itself."""

    member_id: str = ""
    generation: int = -1
    leader: bool = False
    join_members: tuple[str, ...] = ()
    synced_generation: int = -1
    parked: bool = False

    def reset(self) -> None:
        self.member_id, self.generation, self.leader, self.join_members = "", -1, False, ()
        self.parked = False


@dataclass
class Harness:
    manager: coordinator.GroupManager
    clients: list[Client]
    now_ms: int = 0
    log: list[coordinator.OffsetsRecord] = field(default_factory=list)
    pending: list[coordinator.AppendRecords] = field(default_factory=list)
    fail_next: bool = False
    last_generation: int = 0
    # A deleted group comes back with generation 0: keys are (incarnation, generation).
    incarnation: int = 0
    last_group: object = None
    leader_assignment: dict[tuple[int, int], dict[str, bytes]] = field(default_factory=dict)
    # (incarnation, generation) -> partition -> owner identities (the instance id for the
    # static client: a restarted static member is the same owner).
    owners: dict[tuple[int, int], dict[int, set[str]]] = field(default_factory=dict)

    def client_of(self, member_id: str) -> Client | None:
        return next((c for c in self.clients if c.member_id == member_id), None)

    def identity(self, member_id: str) -> str:
        client = self.client_of(member_id)
        static = client is self.clients[STATIC_CLIENT]
        return INSTANCE if static else member_id

    def absorb(self, outputs: tuple[coordinator.Output, ...]) -> None:
        for out in outputs:
            if isinstance(out, coordinator.AppendRecords):
                self.pending.append(out)
            elif isinstance(out, coordinator.JoinReply):
                self.on_join(out.member_id, out.response)
            elif isinstance(out, coordinator.SyncReply):
                response = out.response
                client = self.client_of(out.member_id)
                if client is None:
                    continue
                client.parked = False
                if response.error is not None:
                    client.generation = -1  # rejoin
                    continue
                client.synced_generation = client.generation
                key = (self.incarnation, client.generation)
                by_partition = self.owners.setdefault(key, {})
                for p in decode_assignment(response.assignment):
                    by_partition.setdefault(p, set()).add(self.identity(out.member_id))
            else:
                assert isinstance(out, coordinator.CommitReply)

    def on_join(self, member_id: str, response: coordinator.JoinGroupResponse) -> None:
        client = self.client_of(member_id)
        if client is None:
            return  # a fenced or forgotten incarnation
        client.parked = False
        if response.error is not None:
            client.reset()
            return
        client.generation = response.generation_id
        client.leader = response.leader_id == member_id and not response.skip_assignment
        client.join_members = tuple(m.member_id for m in response.members)

    def flush(self) -> None:
        while self.pending:
            append = self.pending.pop(0)
            error = None
            if self.fail_next and may_fail(append):
                self.fail_next = False
                error = NotEnoughReplicasError
            else:
                self.log.extend(append.records)
            self.absorb(
                self.manager.append_completed(
                    append_id=append.append_id, error=error, now_ms=self.now_ms
                )
            )


def may_fail(append: coordinator.AppendRecords) -> bool:
    """Only appends the coordinator answers for may fail: commits and assignments (an
    unanswered store, like Kafka's, is assumed to succeed)."""
    for record in append.records:
        if record.value is None:
            return False
        key = decode_key(record.key)
        if (
            isinstance(key, GroupMetadataKey)
            and not decode_group_metadata_value(record.value).members
        ):
            return False
    return True


def decode_assignment(raw: bytes) -> list[int]:
    return [int(p) for p in raw.decode().split(",") if p]


def new_manager() -> coordinator.GroupManager:
    manager = coordinator.GroupManager(
        config=coordinator.GroupCoordinatorConfig(
            group=coordinator.GroupConfig(group_initial_rebalance_delay_ms=3_000, group_max_size=5)
        ),
        rng=random.Random(0),
        partition_for=lambda group_id: 0,
    )
    manager.begin_loading(partition=0)
    manager.complete_loading(partition=0, now_ms=0)
    return manager


# -- actions -------------------------------------------------------------------------------


def act_join(h: Harness, c: int, fresh_static: bool) -> None:
    client = h.clients[c]
    instance = INSTANCE if c == STATIC_CLIENT else None
    if fresh_static and instance is not None:
        client.reset()  # a restarted static consumer: same instance id, no member id
    decision = h.manager.join_group(
        coordinator.JoinGroupRequest(
            group_id=G,
            member_id=client.member_id,
            group_instance_id=instance,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=20_000,
            protocol_type="consumer",
            protocols=(("range", b"m"),),
            client_id=f"c{c}",
        ),
        now_ms=h.now_ms,
    )
    response = decision.response
    if instance is not None and client.member_id == "":
        group = h.manager.group(G)
        if group is not None and INSTANCE in group.static_members:
            # The parked answer will be addressed to the id the coordinator gave us.
            client.member_id = group.static_members[INSTANCE]
    client.parked = response is None
    if response is not None:
        if response.error is MemberIdRequiredError:
            client.member_id = response.member_id
        elif client.member_id:
            h.on_join(client.member_id, response)
    h.absorb(decision.outputs)


def act_sync(h: Harness, c: int) -> None:
    client = h.clients[c]
    if not client.member_id or client.generation < 0:
        return
    assignments: dict[str, bytes] = {}
    if client.leader:
        members = client.join_members
        for member_id in members:
            assignments[member_id] = b""
        for i, tp in enumerate(PARTITIONS):
            target = members[i % len(members)]
            assignments[target] = (assignments[target].decode() + f"{tp.partition},").encode()
        h.leader_assignment.setdefault((h.incarnation, client.generation), assignments)
    instance = INSTANCE if c == STATIC_CLIENT else None
    decision = h.manager.sync_group(
        coordinator.SyncGroupRequest(G, client.generation, client.member_id, instance, assignments),
        now_ms=h.now_ms,
    )
    client.parked = decision.response is None
    if decision.response is not None:
        h.absorb((coordinator.SyncReply(G, client.member_id, decision.response),))
    h.absorb(decision.outputs)


def act_heartbeat(h: Harness, c: int) -> None:
    client = h.clients[c]
    if client.member_id:
        instance = INSTANCE if c == STATIC_CLIENT else None
        error = h.manager.heartbeat(
            coordinator.HeartbeatRequest(G, client.generation, client.member_id, instance),
            now_ms=h.now_ms,
        ).error
        if error in (UnknownMemberIdError, coordinator.FencedInstanceIdError):
            client.reset()
        elif error is not None:
            client.generation = -1


def act_progress(h: Harness, c: int) -> None:
    """What a well-behaved consumer does next: join, sync, or heartbeat."""
    client = h.clients[c]
    if client.parked:
        return
    if not client.member_id or client.generation < 0:
        act_join(h, c, fresh_static=False)
    elif client.synced_generation != client.generation:
        act_sync(h, c)
    else:
        act_heartbeat(h, c)


def act_leave(h: Harness, c: int) -> None:
    client = h.clients[c]
    if client.member_id:
        decision = h.manager.leave_group(
            group_id=G, members=(coordinator.LeaveMember(client.member_id),), now_ms=h.now_ms
        )
        client.reset()
        h.absorb(decision.outputs)


def act_commit(h: Harness, c: int, offset: int) -> None:
    client = h.clients[c]
    instance = INSTANCE if c == STATIC_CLIENT else None
    group = h.manager.group(G)
    generation = client.generation
    if group is None:
        expected = generation < 0
    else:
        known = group.static_members.get(INSTANCE) if instance else None
        fenced = known is not None and known != client.member_id
        expected = not fenced and (
            (generation < 0 and group.state is coordinator.GroupState.EMPTY)
            or (
                group.state is not coordinator.GroupState.COMPLETING_REBALANCE
                and client.member_id in group.members
                and generation == group.generation_id
            )
        )
    offsets = {PARTITIONS[offset % len(PARTITIONS)]: OffsetAndMetadata(offset)}
    decision = h.manager.offset_commit(
        coordinator.OffsetCommitRequest(G, generation, client.member_id, offsets, instance),
        now_ms=h.now_ms,
    )
    accepted = decision.response is None
    assert accepted == expected, (decision, group and group.state, generation)
    h.absorb(decision.outputs)


def act_manual_commit(h: Harness, offset: int) -> None:
    offsets = {PARTITIONS[offset % len(PARTITIONS)]: OffsetAndMetadata(offset, "m")}
    decision = h.manager.offset_commit(
        coordinator.OffsetCommitRequest(MANUAL, -1, "", offsets), now_ms=h.now_ms
    )
    assert decision.response is None
    h.absorb(decision.outputs)


def act_advance(h: Harness, delta_ms: int) -> None:
    h.now_ms += delta_ms
    h.absorb(h.manager.tick(now_ms=h.now_ms))


_CLIENT = st.integers(0, CLIENTS - 1)
_BY_KIND: dict[str, st.SearchStrategy[tuple[object, ...]]] = {
    "progress_all": st.tuples(st.just("progress_all")),
    "progress": st.tuples(st.just("progress"), _CLIENT),
    "advance": st.tuples(st.just("advance"), st.sampled_from([100, 1_000, 3_000, 6_000, 12_000])),
    "flush": st.tuples(st.just("flush")),
    "commit": st.tuples(st.just("commit"), _CLIENT, st.integers(0, 1000)),
    "join": st.tuples(st.just("join"), _CLIENT, st.booleans()),
    "sync": st.tuples(st.just("sync"), _CLIENT),
    "heartbeat": st.tuples(st.just("heartbeat"), _CLIENT),
    "leave": st.tuples(st.just("leave"), _CLIENT),
    "manual_commit": st.tuples(st.just("manual_commit"), st.integers(0, 1000)),
    "fail_next": st.tuples(st.just("fail_next")),
    "delete": st.tuples(st.just("delete")),
}
# Repeated kinds weigh more: well-behaved consumers, time and appends moving on are what
# lets a group reach Stable between the disruptive steps.
_KINDS = (
    ["progress_all"] * 8
    + ["progress"] * 3
    + ["advance"] * 4
    + ["flush"] * 4
    + ["commit"] * 3
    + ["join", "sync", "heartbeat", "leave", "manual_commit", "fail_next", "delete"]
)
ACTIONS = st.sampled_from(_KINDS).flatmap(lambda kind: _BY_KIND[kind])


def act_progress_all(h: Harness) -> None:
    for c in range(CLIENTS):
        act_progress(h, c)


def act_flush(h: Harness) -> None:
    h.flush()


def act_delete(h: Harness) -> None:
    decision = h.manager.delete_groups(group_ids=(G, MANUAL), now_ms=h.now_ms)
    h.absorb(decision.outputs)


def act_fail_next(h: Harness) -> None:
    h.fail_next = True


# An action is (kind, *arguments); each kind's arguments are those its strategy draws.
_ACTS: dict[str, Callable[..., None]] = {
    "progress_all": act_progress_all,
    "progress": act_progress,
    "advance": act_advance,
    "flush": act_flush,
    "commit": act_commit,
    "join": act_join,
    "sync": act_sync,
    "heartbeat": act_heartbeat,
    "leave": act_leave,
    "manual_commit": act_manual_commit,
    "fail_next": act_fail_next,
    "delete": act_delete,
}
assert set(_ACTS) == set(_BY_KIND)


def step(h: Harness, action: tuple[object, ...]) -> None:
    kind, *arguments = action
    _ACTS[str(kind)](h, *arguments)


def check_invariants(h: Harness) -> None:
    group = h.manager.group(G)
    if group is None:
        return
    if group is not h.last_group:
        h.last_group, h.incarnation, h.last_generation = group, h.incarnation + 1, 0
    assert group.generation_id >= h.last_generation, "generation went back"
    h.last_generation = group.generation_id
    assert group.leader_id is None or group.leader_id in group.members
    for m in group.members.values():
        assert not m.awaiting_sync or group.state is coordinator.GroupState.COMPLETING_REBALANCE
    if group.state is coordinator.GroupState.STABLE:
        expected = h.leader_assignment[(h.incarnation, group.generation_id)]
        assert sorted(m.assignment for m in group.members.values()) == sorted(expected.values())
    for generation, by_partition in h.owners.items():
        for partition, owners in by_partition.items():
            assert len(owners) <= 1, (generation, partition, owners)


def check_replay(h: Harness) -> None:
    h.fail_next = False
    h.flush()
    fresh = coordinator.GroupManager(
        config=coordinator.GroupCoordinatorConfig(), rng=random.Random(1), partition_for=lambda g: 0
    )
    fresh.begin_loading(partition=0)
    fresh.replay(partition=0, records=h.log)
    fresh.complete_loading(partition=0, now_ms=h.now_ms)
    for group_id in (G, MANUAL):
        assert fresh.committed(group_id) == h.manager.committed(group_id)
        original, loaded = h.manager.group(group_id), fresh.group(group_id)
        if loaded is not None:
            assert original is not None, f"{group_id} was deleted but replay revived it"
        if original is None or original.state not in (
            coordinator.GroupState.STABLE,
            coordinator.GroupState.EMPTY,
        ):
            continue
        never_persisted = original.generation_id == 0 and not h.manager.committed(group_id)
        if original.state is coordinator.GroupState.EMPTY and never_persisted:
            continue  # nothing to reproduce
        assert loaded is not None
        assert loaded.state is original.state
        assert loaded.generation_id == original.generation_id
        assert loaded.protocol_type == original.protocol_type
        assert loaded.protocol_name == original.protocol_name
        assert loaded.leader_id == original.leader_id
        # Members, their metadata and assignments, leader, protocol, generation. The state
        # timestamp matters (and must survive) only for an Empty consumer group: its
        # offsets' retention counts from it.
        keep_time = (
            original.state is coordinator.GroupState.EMPTY and original.protocol_type is not None
        )
        stored, expected = loaded.metadata_value(), original.metadata_value()
        if not keep_time:
            stored = replace(stored, current_state_timestamp_ms=None)
            expected = replace(expected, current_state_timestamp_ms=None)
        assert stored == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(ACTIONS, min_size=20, max_size=80))
def test_random_group_sessions_keep_the_invariants(actions: list[tuple[object, ...]]) -> None:
    """Each step is played, then the invariants are checked; the replay check ends it."""
    h = Harness(new_manager(), [Client() for _ in range(CLIENTS)])
    stable_seen = False
    for action in actions:
        step(h, action)
        check_invariants(h)
        group = h.manager.group(G)
        stable_seen |= group is not None and group.state is coordinator.GroupState.STABLE
    # Shown by --hypothesis-show-statistics: how often the runs reach the interesting parts.
    event(f"reached Stable: {stable_seen}")
    event(f"partitions owned: {bool(h.owners)}")
    check_replay(h)
