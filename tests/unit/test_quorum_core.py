"""Unit tests of the Raft core (raftka.raft.quorum), driving one to three cores by hand.

No sockets, no sleeps: time is an integer passed in, messages are delivered by the small
``Cluster`` harness below (which can cut links), flushes complete when the test says.
"""

from __future__ import annotations

import random

import orjson
import pytest

from raftka.raft.quorum import (
    Action,
    BecameLeader,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Flush,
    HighWatermarkChanged,
    InMemoryRaftLog,
    Message,
    NotLeader,
    PersistQuorumState,
    Proposed,
    QuorumConfig,
    QuorumCore,
    QuorumRole,
    QuorumState,
    ResignedLeadership,
    Send,
    SnapshotId,
    SnapshotInstalled,
    VoteRequest,
    VoteResponse,
    message_from_dict,
)

CONFIG = QuorumConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=100,
    request_timeout_ms=150,
    append_linger_ms=0,
    fetch_max_wait_ms=50,
    fetch_snapshot_max_bytes=8,
)


def make_core(
    node_id: int,
    *,
    voters: tuple[int, ...] = (1, 2, 3),
    entries: tuple[tuple[int, int], ...] = (),
    state: QuorumState | None = None,
    now_ms: int = 0,
) -> tuple[QuorumCore, InMemoryRaftLog]:
    """A core whose log holds ``entries`` given as (offset, epoch) pairs."""
    log = InMemoryRaftLog([Entry(o, e, f"{o}@{e}".encode()) for o, e in entries])
    core = QuorumCore(
        node_id=node_id,
        voter_ids=voters,
        log=log,
        state=state or QuorumState(),
        config=CONFIG,
        rng=random.Random(node_id),
        now_ms=now_ms,
    )
    return core, log


class Cluster:
    """Cores wired by a lossless in-memory network; ``cut`` blocks links both ways."""

    def __init__(self, voters: tuple[int, ...] = (1, 2, 3), observers: tuple[int, ...] = ()):
        self.now_ms = 0
        self.cores: dict[int, QuorumCore] = {}
        self.logs: dict[int, InMemoryRaftLog] = {}
        self.persisted: dict[int, QuorumState] = {}
        self.actions: dict[int, list[Action]] = {}
        self.inflight: list[tuple[int, int, Message]] = []
        self.blocked: set[frozenset[int]] = set()
        for node_id in voters + observers:
            core, log = make_core(node_id, voters=voters)
            self.cores[node_id], self.logs[node_id] = core, log
            self.actions[node_id] = []

    def apply(self, node_id: int, actions: list[Action]) -> None:
        self.actions[node_id].extend(actions)
        for action in actions:
            if isinstance(action, PersistQuorumState):
                self.persisted[node_id] = QuorumState(
                    action.epoch, action.voted_id, action.leader_id
                )
            elif isinstance(action, Send):
                self.inflight.append((node_id, action.destination, action.message))
            elif isinstance(action, Flush):
                flushed = self.logs[node_id].flush(action.end_offset)
                self.apply(node_id, self.cores[node_id].on_flushed(flushed, self.now_ms))

    def cut(self, a: int, b: int) -> None:
        self.blocked.add(frozenset((a, b)))

    def isolate(self, node_id: int) -> None:
        for other in self.cores:
            if other != node_id:
                self.cut(node_id, other)

    def heal(self) -> None:
        self.blocked.clear()

    def deliver(self, limit: int = 10_000) -> None:
        """Deliver messages (and what they cause) until none is left."""
        for _ in range(limit):
            if not self.inflight:
                return
            source, destination, message = self.inflight.pop(0)
            if frozenset((source, destination)) in self.blocked:
                continue
            self.apply(destination, self.cores[destination].handle(message, self.now_ms))
        raise AssertionError("the network did not go quiet")

    def advance(self, ms: int, step_ms: int = 5) -> None:
        """Move the clock forward in steps, ticking every core and delivering."""
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms += step_ms
            for node_id, core in self.cores.items():
                self.apply(node_id, core.tick(self.now_ms))
            self.deliver()

    def leaders(self) -> list[int]:
        return [i for i, c in self.cores.items() if c.role is QuorumRole.LEADER]

    def elect(self, node_id: int) -> None:
        """Let ``node_id`` time out first and win (the others' timers are pushed back)."""
        for other, core in self.cores.items():
            if other != node_id:
                core._election_deadline_ms = self.now_ms + 10_000
        self.cores[node_id]._election_deadline_ms = self.now_ms
        self.advance(5)
        assert self.leaders() == [node_id], {i: c.role for i, c in self.cores.items()}

    def propose(self, node_id: int, *payloads: bytes) -> Proposed | NotLeader:
        result, actions = self.cores[node_id].propose(list(payloads), self.now_ms)
        self.apply(node_id, actions)
        return result


def sends(actions: list[Action], kind: type[Message]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and isinstance(a.message, kind)]


def test_election_goes_through_pre_vote_first() -> None:
    """A voter whose election timer fires becomes Prospective and sends pre-votes for
    epoch 1 without persisting or moving any epoch; only after a majority grants does it
    become Candidate (persisting its vote), then Leader, and the others follow it."""
    cluster = Cluster()
    core = cluster.cores[1]
    actions = core.tick(10_000)
    assert core.role is QuorumRole.PROSPECTIVE and core.epoch == 0
    assert not [a for a in actions if isinstance(a, PersistQuorumState)]
    pre_votes = sends(actions, VoteRequest)
    assert len(pre_votes) == 2
    assert all(isinstance(s.message, VoteRequest) and s.message.pre_vote for s in pre_votes)
    assert all(s.message.epoch == 1 for s in pre_votes)
    # A pre-vote moves no one's epoch.
    answer = cluster.cores[2].handle(pre_votes[0].message, 0)
    assert cluster.cores[2].epoch == 0
    assert not [a for a in answer if isinstance(a, PersistQuorumState)]
    granted = sends(answer, VoteResponse)[0].message
    assert isinstance(granted, VoteResponse) and granted.vote_granted
    step = core.handle(granted, 10_000)
    assert core.role is QuorumRole.CANDIDATE and core.epoch == 1
    assert step[0] == PersistQuorumState(1, 1, None)
    votes = sends(step, VoteRequest)
    assert votes and not any(
        isinstance(s.message, VoteRequest) and s.message.pre_vote for s in votes
    )
    cluster.now_ms = 10_000
    cluster.apply(1, step)
    cluster.deliver()
    assert cluster.leaders() == [1]
    assert all(c.leader_id == 1 and c.epoch == 1 for c in cluster.cores.values())
    assert cluster.persisted[2] == QuorumState(1, 1, 1)


def test_returning_partitioned_node_does_not_depose_a_healthy_leader() -> None:
    """A follower cut off from everyone keeps failing pre-votes (its epoch stays put);
    when the partition heals, the others (who hear the leader) refuse its pre-vote, so
    the leader keeps its epoch, and the returning node follows it again."""
    cluster = Cluster()
    cluster.elect(1)
    epoch = cluster.cores[1].epoch
    cluster.isolate(3)
    cluster.advance(2_000)
    assert cluster.cores[3].role is QuorumRole.PROSPECTIVE
    assert cluster.cores[3].epoch == epoch
    cluster.heal()
    cluster.advance(500)
    assert cluster.leaders() == [1] and cluster.cores[1].epoch == epoch
    assert cluster.cores[3].role is QuorumRole.FOLLOWER and cluster.cores[3].leader_id == 1


def test_node_stuck_in_a_higher_epoch_rejoins() -> None:
    """A node that ran for an epoch while cut off (so it sits in a higher epoch than the
    healthy leader) cannot win or follow; its pre-vote tells the others the epoch it is
    in, they move to it, and the cluster ends with one leader everyone follows.
    (Found by the simulation, seed 7731.)"""
    cluster = Cluster()
    cluster.elect(1)
    epoch = cluster.cores[1].epoch
    cluster.isolate(3)
    cluster.advance(400)
    stuck = cluster.cores[3]
    assert stuck.role is QuorumRole.PROSPECTIVE
    grant = VoteResponse(2, epoch, 1, True, True, epoch + 1)
    cluster.apply(3, stuck.handle(grant, cluster.now_ms))
    assert stuck.role is QuorumRole.CANDIDATE and stuck.epoch == epoch + 1
    cluster.deliver()  # its vote requests are lost
    cluster.heal()
    cluster.advance(2_000)
    leaders = cluster.leaders()
    assert len(leaders) == 1
    top = cluster.cores[leaders[0]].epoch
    assert top > epoch + 1
    assert all(c.epoch == top and c.leader_id == leaders[0] for c in cluster.cores.values())


def test_vote_refused_to_a_less_up_to_date_candidate() -> None:
    """A voter compares (last epoch, end offset): a shorter log of the same last epoch
    is refused; a log with a higher last epoch wins even when shorter."""
    core, _ = make_core(2, entries=((0, 1), (1, 1), (2, 1)), state=QuorumState(epoch=1))
    out = core.handle(VoteRequest(1, 2, last_epoch=1, last_epoch_end_offset=2, pre_vote=False), 0)
    refusal = sends(out, VoteResponse)[0].message
    assert isinstance(refusal, VoteResponse) and not refusal.vote_granted
    assert core.voted_id is None and core.epoch == 2
    out = core.handle(VoteRequest(3, 2, last_epoch=2, last_epoch_end_offset=1, pre_vote=False), 0)
    grant = sends(out, VoteResponse)[0].message
    assert isinstance(grant, VoteResponse) and grant.vote_granted
    assert core.voted_id == 3


def test_one_vote_per_epoch_and_only_after_it_is_persisted() -> None:
    """A granted vote is persisted before the answer is sent (action order); a second
    candidate in the same epoch is refused, also after a restart from the persisted
    state; repeating the request of the one voted for is granted again."""
    core, log = make_core(2)
    out = core.handle(VoteRequest(1, 5, 0, 0, pre_vote=False), 0)
    persist = [i for i, a in enumerate(out) if a == PersistQuorumState(5, 1, None)]
    send = [i for i, a in enumerate(out) if isinstance(a, Send)]
    assert persist and send and persist[-1] < send[0]
    out = core.handle(VoteRequest(3, 5, 0, 0, pre_vote=False), 0)
    refusal = sends(out, VoteResponse)[0].message
    assert isinstance(refusal, VoteResponse) and not refusal.vote_granted
    again = sends(core.handle(VoteRequest(1, 5, 0, 0, pre_vote=False), 0), VoteResponse)
    assert isinstance(again[0].message, VoteResponse) and again[0].message.vote_granted
    restarted = QuorumCore(
        node_id=2,
        voter_ids=(1, 2, 3),
        log=log,
        state=QuorumState(5, 1, None),
        config=CONFIG,
        rng=random.Random(0),
        now_ms=0,
    )
    out = restarted.handle(VoteRequest(3, 5, 0, 0, pre_vote=False), 0)
    refusal = sends(out, VoteResponse)[0].message
    assert isinstance(refusal, VoteResponse) and not refusal.vote_granted


def _leader_of_epoch_3_over_old_entries(unsafe: bool) -> tuple[QuorumCore, InMemoryRaftLog]:
    """Node 1 holds entries of epochs 1 and 2 nobody else has, then wins epoch 3."""
    core, log = make_core(1, entries=((0, 1), (1, 2)), state=QuorumState(epoch=2))
    core._unsafe_commit_previous_epoch = unsafe
    core.tick(10_000)
    core.handle(VoteResponse(2, 2, None, True, True, 3), 10_000)
    core.handle(VoteResponse(2, 3, None, True, False, 3), 10_000)
    assert core.role is QuorumRole.LEADER and core.epoch == 3
    core.on_flushed(log.end_offset, 10_000)
    return core, log


@pytest.mark.parametrize("unsafe", [False, True])
def test_high_watermark_waits_for_an_entry_of_the_leaders_epoch(unsafe: bool) -> None:
    """Raft's figure 8: a majority holding entries of earlier epochs does not commit
    them; the high watermark moves only when the epoch-3 LeaderChange record reaches a
    majority. The unsafe variant shows the test notices the broken rule."""
    core, log = _leader_of_epoch_3_over_old_entries(unsafe)
    assert log.entries[2].epoch == 3 and log.entries[2].control
    out = core.handle(FetchRequest(2, 3, fetch_offset=2, last_fetched_epoch=2), 10_000)
    advanced = [a for a in out if isinstance(a, HighWatermarkChanged)]
    if unsafe:
        assert advanced == [HighWatermarkChanged(2)]
        return
    assert advanced == [] and core.high_watermark == 0
    out = core.handle(FetchRequest(2, 3, fetch_offset=3, last_fetched_epoch=3), 10_000)
    assert [a for a in out if isinstance(a, HighWatermarkChanged)] == [HighWatermarkChanged(3)]
    assert core.read_index() == 3


def test_leader_counts_its_own_log_only_once_flushed() -> None:
    """With one follower caught up, a proposal commits only after the leader reports its
    own flush (the follower alone is not a majority of three)."""
    cluster = Cluster()
    cluster.elect(1)
    cluster.cut(1, 3)
    core = cluster.cores[1]
    hw = core.high_watermark
    result, actions = core.propose([b"x"], cluster.now_ms)
    assert isinstance(result, Proposed)
    flushes = [a for a in actions if isinstance(a, Flush)]
    cluster.apply(1, [a for a in actions if not isinstance(a, Flush)])
    cluster.advance(60)  # follower 2 fetches and flushes the record
    assert cluster.logs[2].flushed_end_offset == result.end_offset
    assert core.high_watermark == hw
    cluster.apply(1, flushes)
    assert core.high_watermark == result.end_offset


def test_diverging_follower_truncates_and_refetches() -> None:
    """A follower whose tail was written in an epoch the leader never saw is told where
    its last common epoch ends, truncates there, refetches, and ends up with the
    leader's log and high watermark."""
    cluster = Cluster()
    for node_id, entries in {
        1: ((0, 1), (1, 1), (2, 3), (3, 3)),
        2: ((0, 1), (1, 1), (2, 2), (3, 2), (4, 2)),
        3: ((0, 1), (1, 1), (2, 3)),
    }.items():
        cluster.logs[node_id].append([Entry(o, e, f"{o}@{e}".encode()) for o, e in entries])
        cluster.logs[node_id].flush(len(entries))
        cluster.cores[node_id] = QuorumCore(
            node_id=node_id,
            voter_ids=(1, 2, 3),
            log=cluster.logs[node_id],
            state=QuorumState(epoch=3),
            config=CONFIG,
            rng=random.Random(node_id),
            now_ms=0,
        )
    cluster.elect(1)
    cluster.advance(100)
    leader_entries = cluster.logs[1].entries
    assert cluster.logs[2].entries == leader_entries
    assert [(e.offset, e.epoch) for e in leader_entries[:4]] == [(0, 1), (1, 1), (2, 3), (3, 3)]
    assert cluster.cores[2].high_watermark == len(leader_entries)
    diverged = [
        s.message
        for s in sends(cluster.actions[1], FetchResponse)
        if isinstance(s.message, FetchResponse) and s.message.diverging_epoch is not None
    ]
    assert diverged and diverged[0].diverging_epoch == EpochEndOffset(1, 2)


def test_leader_resigns_when_no_majority_fetches_within_fetch_timeout() -> None:
    """A leader cut off from both followers resigns after the fetch timeout: it reports
    ResignedLeadership, refuses proposals, and sends EndQuorumEpoch; the majority side
    elects a new leader in a higher epoch."""
    cluster = Cluster()
    cluster.elect(1)
    epoch = cluster.cores[1].epoch
    cluster.isolate(1)
    cluster.advance(CONFIG.fetch_timeout_ms + 10)
    assert cluster.cores[1].role is QuorumRole.RESIGNED
    assert ResignedLeadership(epoch) in cluster.actions[1]
    assert sends(cluster.actions[1], EndQuorumEpochRequest)
    assert isinstance(cluster.propose(1, b"late"), NotLeader)
    cluster.advance(1_000)
    leaders = cluster.leaders()
    assert len(leaders) == 1 and leaders[0] != 1
    assert cluster.cores[leaders[0]].epoch > epoch


def test_end_quorum_epoch_lets_the_preferred_successor_run_first() -> None:
    """On a graceful resignation the leader ranks followers by how far they fetched; the
    first runs at once and wins, the lagging one does not run first."""
    cluster = Cluster()
    cluster.elect(1)
    cluster.cut(1, 3)
    cluster.propose(1, b"a", b"b")
    cluster.advance(20)
    cluster.heal()
    # Node 3 has not fetched "a", "b" yet; node 2 has.
    cluster.apply(1, cluster.cores[1].resign(cluster.now_ms))
    end = sends(cluster.actions[1], EndQuorumEpochRequest)[0].message
    assert isinstance(end, EndQuorumEpochRequest) and end.preferred_successors == (2, 3)
    cluster.cut(1, 3)  # keep 3 behind until the election is over
    cluster.deliver()
    cluster.advance(5)
    assert cluster.leaders() == [2]
    assert not [a for a in cluster.actions[3] if isinstance(a, BecameLeader)]


def test_observer_replicates_but_never_votes_or_counts() -> None:
    """An observer finds the leader by asking a voter, replicates the log and learns the
    high watermark, but refuses to vote, never runs for election, and its fetches do not
    count toward the high watermark."""
    cluster = Cluster(observers=(100,))
    cluster.elect(1)
    cluster.advance(400)
    observer = cluster.cores[100]
    assert observer.role is QuorumRole.FOLLOWER and observer.leader_id == 1
    result = cluster.propose(1, b"x")
    assert isinstance(result, Proposed)
    cluster.advance(20)
    assert cluster.logs[100].entries == cluster.logs[1].entries
    assert observer.high_watermark == result.end_offset
    out = observer.handle(VoteRequest(2, observer.epoch, 9, 99, pre_vote=False), 0)
    refusal = sends(out, VoteResponse)[0].message
    assert isinstance(refusal, VoteResponse) and not refusal.vote_granted
    # With both other voters gone, observer fetches do not commit anything.
    cluster.isolate(2)
    cluster.isolate(3)
    hw = cluster.cores[1].high_watermark
    cluster.propose(1, b"y")
    cluster.advance(100)
    assert cluster.cores[1].high_watermark == hw
    assert len(cluster.logs[100].entries) == len(cluster.logs[1].entries)
    cluster.advance(5_000)
    assert observer.role in (QuorumRole.FOLLOWER, QuorumRole.UNATTACHED)


def test_stale_and_duplicate_messages_are_ignored_or_fenced() -> None:
    """A fetch from an older epoch gets FENCED_LEADER_EPOCH with the current leader; an
    old BeginQuorumEpoch changes nothing; a duplicated fetch answer appends nothing."""
    cluster = Cluster()
    cluster.elect(1)
    cluster.apply(1, cluster.cores[1].resign(cluster.now_ms))
    cluster.deliver()
    cluster.elect(2)  # epoch 2, led by 2
    leader = cluster.cores[2]
    out = leader.handle(FetchRequest(3, 1, 0, 0), cluster.now_ms)
    fenced = sends(out, FetchResponse)[0].message
    assert isinstance(fenced, FetchResponse)
    assert fenced.error == "FENCED_LEADER_EPOCH" and fenced.leader_id == 2
    follower = cluster.cores[3]
    out = follower.handle(BeginQuorumEpochRequest(1, 1), cluster.now_ms)
    assert follower.leader_id == 2 and follower.epoch == 2
    answer = sends(out, BeginQuorumEpochResponse)[0].message
    assert isinstance(answer, BeginQuorumEpochResponse) and answer.error == "FENCED_LEADER_EPOCH"
    end = cluster.logs[3].end_offset
    stale = FetchResponse(2, 2, 2, end, cluster.logs[3].last_epoch, 0, (Entry(end, 2, b"z"),))
    follower.handle(stale, cluster.now_ms)
    follower.handle(stale, cluster.now_ms)  # the duplicate
    assert cluster.logs[3].end_offset == end + 1
    old_epoch = FetchResponse(1, 1, 1, end + 1, 2, 0, (Entry(end + 1, 1, b"old"),))
    follower.handle(old_epoch, cluster.now_ms)
    assert cluster.logs[3].end_offset == end + 1


def test_replica_below_log_start_catches_up_from_a_chunked_snapshot() -> None:
    """When the leader has snapshotted (dropping its log prefix), a replica that was
    away is answered with the snapshot id, fetches the snapshot in 8-byte chunks,
    installs it (SnapshotInstalled; its high watermark jumps to the snapshot end) and
    then fetches the entries after it. A chunk for the wrong position is ignored."""
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"a", b"b", b"c")
    cluster.advance(20)
    leader_log = cluster.logs[1]
    hw = cluster.cores[1].high_watermark
    assert hw == leader_log.end_offset == 4
    snapshot_id = leader_log.create_snapshot(3, b"state-after-offset-2")
    assert snapshot_id == SnapshotId(3, 1) and leader_log.start_offset == 3
    cluster.heal()
    cluster.advance(200)
    log3 = cluster.logs[3]
    assert log3.latest_snapshot_id == snapshot_id
    assert log3.snapshot_data == b"state-after-offset-2"
    assert SnapshotInstalled(snapshot_id) in cluster.actions[3]
    assert log3.start_offset == 3 and log3.entries == leader_log.entries
    assert cluster.cores[3].high_watermark == hw
    chunks = sends(cluster.actions[3], FetchSnapshotRequest)
    assert [s.message.position for s in chunks if isinstance(s.message, FetchSnapshotRequest)][
        :3
    ] == [0, 8, 16]
    # A stray chunk changes nothing.
    stray = FetchSnapshotResponse(1, cluster.cores[3].epoch, 1, snapshot_id, 8, 20, b"xxxxxxxx")
    assert cluster.cores[3].handle(stray, cluster.now_ms) == []


def test_fetch_responses_stay_within_fetch_max_bytes() -> None:
    """A lagging follower gets entries in responses of at most fetch_max_bytes of payload
    (always at least one entry, however large), and still ends up with the whole log."""
    cluster = Cluster()
    cluster.elect(1)
    budget = CONFIG.fetch_max_bytes
    big = b"x" * (budget // 3 + 1)  # three of these exceed one response
    cluster.isolate(3)
    for _ in range(4):
        assert isinstance(cluster.propose(1, big), Proposed)
    assert isinstance(cluster.propose(1, b"y" * (budget + 1)), Proposed)  # alone > budget
    cluster.advance(50)
    cluster.heal()
    cluster.actions[3].clear()
    cluster.advance(200)
    responses = [
        s.message
        for s in cluster.actions[1]
        if isinstance(s, Send) and isinstance(s.message, FetchResponse) and s.destination == 3
    ]
    sizes = [sum(len(e.payload) for e in r.entries) for r in responses if r.entries]
    assert sizes and all(
        size <= budget or len(r.entries) == 1
        for size, r in zip(sizes, [r for r in responses if r.entries], strict=True)
    )
    assert max(len(r.entries) for r in responses if r.entries) >= 2
    assert cluster.logs[3].end_offset == cluster.logs[1].end_offset


def test_restart_as_leader_comes_back_resigned() -> None:
    """A node whose persisted state says it led the epoch restarts Resigned (it cannot
    know what it promised) and takes no proposals."""
    core, _ = make_core(1, state=QuorumState(4, 1, 1))
    assert core.role is QuorumRole.RESIGNED
    result, _ = core.propose([b"x"], 0)
    assert result == NotLeader(4, 1)


@pytest.mark.parametrize(
    "message",
    [
        VoteRequest(1, 3, 2, 10, pre_vote=True),
        VoteResponse(2, 3, None, True, True, 3),
        BeginQuorumEpochRequest(1, 3),
        BeginQuorumEpochResponse(2, 3, 1),
        EndQuorumEpochRequest(1, 3, (2, 3)),
        EndQuorumEpochResponse(2, 3, None, "FENCED_LEADER_EPOCH"),
        FetchRequest(2, 3, 7, 2),
        FetchResponse(1, 3, 1, 7, 2, 5, (Entry(7, 3, b"\x00\xff", False),)),
        FetchResponse(1, 3, 1, 7, 2, 5, diverging_epoch=EpochEndOffset(1, 4)),
        FetchResponse(1, 3, 1, 0, 0, 5, snapshot_id=SnapshotId(9, 2)),
        FetchSnapshotRequest(2, 3, SnapshotId(9, 2), 16),
        FetchSnapshotResponse(1, 3, 1, SnapshotId(9, 2), 16, 40, b"\x01\x02"),
    ],
)
def test_messages_round_trip_through_json(message: Message) -> None:
    """Every message survives to_dict -> orjson -> message_from_dict unchanged, and the
    transport's encode -> parse_message (the typed wire messages): a diverging epoch (a
    NamedTuple) was once refused on receipt with a TypeError, every time."""
    from raftka.raft.quorum.messages import encode_message
    from raftka.raft.quorum.transport import parse_message

    assert message_from_dict(orjson.loads(orjson.dumps(message.to_dict()))) == message
    assert parse_message(encode_message(message)) == message
    assert parse_message(orjson.dumps(message.to_dict())) == message


def test_wire_format_is_the_one_to_dict_wrote() -> None:
    """The typed wire messages keep the JSON the hand-written to_dict produced: the
    ``type`` tag, base64 payloads, epoch/end-offset objects, entries as objects."""
    from raftka.raft.quorum.messages import encode_message

    message = FetchResponse(
        1, 3, 1, 7, 2, 5, (Entry(7, 3, b"\x00\xff", False),), EpochEndOffset(1, 4)
    )
    assert orjson.loads(encode_message(message)) == {
        "type": "FetchResponse",
        "sender_id": 1,
        "epoch": 3,
        "leader_id": 1,
        "fetch_offset": 7,
        "last_fetched_epoch": 2,
        "high_watermark": 5,
        "entries": [{"offset": 7, "epoch": 3, "payload": "AP8=", "control": False}],
        "diverging_epoch": {"epoch": 1, "end_offset": 4},
        "error": None,
        "snapshot_id": None,
    }
    snapshot = orjson.loads(encode_message(FetchSnapshotRequest(2, 3, SnapshotId(9, 2), 16)))
    assert snapshot["snapshot_id"] == {"epoch": 2, "end_offset": 9}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "VoteRequest", "sender_id": 1, "epoch": "5"}, "$.epoch"),
        ({"type": "NoSuchMessage", "sender_id": 1, "epoch": 5}, "NoSuchMessage"),
        ({"type": "FetchRequest", "sender_id": 1, "epoch": 5, "fetch_offset": 0}, "last_fetched"),
        (
            {
                "type": "FetchResponse",
                "sender_id": 1,
                "epoch": 5,
                "leader_id": 1,
                "fetch_offset": 0,
                "last_fetched_epoch": 0,
                "high_watermark": 0,
                "entries": [{"offset": -1, "epoch": 0, "payload": ""}],
            },
            "$.entries[0].offset",
        ),
        ({"type": "BeginQuorumEpochRequest", "sender_id": True, "epoch": 1}, "$.sender_id"),
    ],
)
def test_bad_peer_messages_are_refused_naming_the_field(body: object, field: str) -> None:
    """INVALID_REQUEST, naming what is wrong; nothing reaches the core."""
    from raftka.common.errors import InvalidRequestError
    from raftka.raft.quorum.transport import parse_message

    with pytest.raises(InvalidRequestError) as caught:
        parse_message(orjson.dumps(body))
    assert field in caught.value.message


def test_config_from_kafka_properties() -> None:
    """Dotted Kafka names map onto the dataclass; unknown quorum keys are refused;
    defaults are Kafka's."""
    config = QuorumConfig.from_properties(
        {"controller.quorum.election.timeout.ms": "250", "node.id": 1}
    )
    assert config.election_timeout_ms == 250 and config.fetch_timeout_ms == 2000
    assert QuorumConfig().append_linger_ms == 25
    with pytest.raises(ValueError):
        QuorumConfig.from_properties({"controller.quorum.electoin.timeout.ms": 1})
