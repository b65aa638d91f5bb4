"""Seeded deterministic simulation of the Raft core (VOPR-style).

Each seed builds a cluster of ``QuorumCore`` voters (3 or 5) and one observer on a fake
clock and an in-memory network that drops, delays (so reorders) and duplicates
messages, partitions nodes (isolate one, split minority/majority, heal) and crashes
nodes, losing their unflushed log suffix and restarting them from the persisted quorum
state only; nodes snapshot committed prefixes, and laggards catch up from snapshots
fetched in chunks. Clients propose records to whoever believes it leads. Flushes complete
after a random delay, so a crash really loses acknowledged-looking data.

After every step the checker asserts: at most one leader per epoch; each node's epoch
never falls (across restarts too: it is persisted); each node's high watermark never
falls within an incarnation; an entry at or below any node's high watermark
(committed) never changes and every later leader holds it; two logs that share an
(offset, epoch) share the entry and the epoch of the entry before it (log matching); a
fetch offset never exceeds what the fetcher has flushed; a snapshot holds exactly the
committed entries below its end.
At the end the network heals, every node restarts, and a leader must be elected and
commit a new record on every node within a bound.

A failure names its seed; replay one with ``RAFTKA_SIM_SEED=<seed>``. The CI default runs
seeds 0..999 (about 30 s here); ``RAFTKA_SIM_SEEDS=20000`` (and ``RAFTKA_SIM_SEED_START``)
for long runs, ``RAFTKA_SIM_STEPS`` for longer histories per seed (default 300 steps of
5 ms).
"""

from __future__ import annotations

import heapq
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from raftka.raft.quorum import (
    Action,
    BecameLeader,
    Entry,
    FetchRequest,
    Flush,
    HighWatermarkChanged,
    InMemoryRaftLog,
    Message,
    PersistQuorumState,
    Proposed,
    QuorumConfig,
    QuorumCore,
    QuorumRole,
    QuorumState,
    Send,
    SnapshotId,
    SnapshotInstalled,
    VoteResponse,
    message_from_dict,
)

CONFIG = QuorumConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=100,
    request_timeout_ms=150,
    append_linger_ms=5,
    fetch_max_wait_ms=50,
    fetch_max_records=20,
    fetch_snapshot_max_bytes=64,
)
TICK_MS = 5
OBSERVER_ID = 100


class InvariantViolationError(AssertionError):
    pass


class CheckedLog(InMemoryRaftLog):
    """An in-memory log that reports every append to the cluster-wide matching check."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self._sim = sim

    def append(self, entries: Sequence[Entry]) -> None:
        prev_epoch = self.last_epoch
        for entry in entries:
            self._sim.check_log_matching(entry, prev_epoch)
            prev_epoch = entry.epoch
        super().append(entries)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._sim.check_snapshot(data, snapshot_id.end_offset)
        super().install_snapshot(snapshot_id, data)


@dataclass
class Node:
    node_id: int
    log: CheckedLog
    state: QuorumState
    core: QuorumCore | None
    incarnation: int = 0
    high_watermark: int = 0
    epoch_max: int = 0


@dataclass(order=True)
class Event:
    time_ms: int
    seq: int
    kind: str = field(compare=False)
    node_id: int = field(compare=False)
    incarnation: int = field(compare=False, default=0)
    message: Message | None = field(compare=False, default=None)
    offset: int = field(compare=False, default=0)


class Simulation:
    def __init__(self, seed: int, voters: int = 3, *, unsafe: str | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.voter_ids = tuple(range(1, voters + 1))
        self.node_ids = (*self.voter_ids, OBSERVER_ID)
        self.now_ms = 0
        self.unsafe = unsafe
        self.events: list[Event] = []
        self.seq = 0
        self.blocked: set[frozenset[int]] = set()
        self.drop_rate = self.rng.choice([0.0, 0.02, 0.1])
        self.dup_rate = self.rng.choice([0.0, 0.02])
        self.delay_max_ms = self.rng.choice([2, 10, 40])
        self.leaders_by_epoch: dict[int, int] = {}
        self.committed: dict[int, Entry] = {}
        self.matching: dict[tuple[int, int], tuple[bytes, bool, int]] = {}
        self.proposals = 0
        self.faults_on = True
        self.marker_epoch = -1
        self.marker = 0
        self.nodes: dict[int, Node] = {}
        for node_id in self.node_ids:
            node = Node(node_id, CheckedLog(self), QuorumState(), None)
            self.nodes[node_id] = node
            self.start(node)

    # ---------------------------------------------------------------- plumbing

    def fail(self, what: str) -> None:
        raise InvariantViolationError(
            f"seed {self.seed} at t={self.now_ms}ms: {what} (replay: RAFTKA_SIM_SEED={self.seed})"
        )

    def start(self, node: Node) -> None:
        node.incarnation += 1
        node.high_watermark = 0
        core = QuorumCore(
            node_id=node.node_id,
            voter_ids=self.voter_ids,
            log=node.log,
            state=node.state,
            config=CONFIG,
            rng=random.Random(self.rng.getrandbits(32)),
            now_ms=self.now_ms,
        )
        if self.unsafe is not None:
            setattr(core, self.unsafe, True)
        node.core = core

    def crash(self, node: Node) -> None:
        node.core = None
        node.log.crash()

    def push(self, delay_ms: int, kind: str, node_id: int, **kw: object) -> None:
        self.seq += 1
        event = Event(self.now_ms + delay_ms, self.seq, kind, node_id, **kw)  # type: ignore[arg-type]
        heapq.heappush(self.events, event)

    def send(self, source: int, destination: int, message: Message) -> None:
        if frozenset((source, destination)) in self.blocked:
            return
        if self.rng.random() < self.drop_rate:
            return
        # Round-trip through the wire shape, as the transport will.
        message = message_from_dict(message.to_dict())
        copies = 2 if self.rng.random() < self.dup_rate else 1
        for _ in range(copies):
            delay = self.rng.randint(1, self.delay_max_ms)
            self.push(delay, "deliver", destination, message=message)

    def run_actions(self, node: Node, actions: list[Action]) -> None:
        for action in actions:
            assert node.core is not None
            if isinstance(action, PersistQuorumState):
                node.state = QuorumState(action.epoch, action.voted_id, action.leader_id)
            elif isinstance(action, Send):
                message = action.message
                if (
                    isinstance(message, FetchRequest)
                    and message.fetch_offset > node.log.flushed_end_offset
                ):
                    self.fail(f"node {node.node_id} fetches from unflushed {message}")
                self.send(node.node_id, action.destination, message)
                if self.crash_mid_batch(action.message):
                    self.crash(node)  # the rest of the batch is never carried out
                    return
            elif isinstance(action, Flush):
                delay = self.rng.choice([0, 1, 5, 20])
                self.push(
                    delay,
                    "flush",
                    node.node_id,
                    incarnation=node.incarnation,
                    offset=action.end_offset,
                )
            elif isinstance(action, HighWatermarkChanged):
                self.on_high_watermark(node, action.high_watermark)
            elif isinstance(action, BecameLeader):
                self.on_leader(node, action.epoch)
            elif isinstance(action, SnapshotInstalled):
                assert node.log.latest_snapshot_id == action.snapshot_id
        self.check_node(node)

    def crash_mid_batch(self, message: Message) -> bool:
        """Now and then a node dies right after a send, before the rest of its batch;
        most often right after granting a vote, where ordering matters most."""
        if not self.faults_on:
            return False
        granted = isinstance(message, VoteResponse) and message.vote_granted
        return self.rng.random() < (0.2 if granted and not message.pre_vote else 0.001)

    # ---------------------------------------------------------------- checks

    def check_log_matching(self, entry: Entry, prev_epoch: int) -> None:
        key = (entry.offset, entry.epoch)
        seen = self.matching.setdefault(key, (entry.payload, entry.control, prev_epoch))
        if seen != (entry.payload, entry.control, prev_epoch):
            self.fail(f"log matching broken at {key}: {seen} vs {entry}/{prev_epoch}")

    def on_high_watermark(self, node: Node, high_watermark: int) -> None:
        if high_watermark < node.high_watermark:
            self.fail(f"node {node.node_id} HW fell {node.high_watermark} -> {high_watermark}")
        start = max(node.high_watermark, node.log.start_offset)
        entries = node.log.read(start, high_watermark - start)
        for entry in entries:
            known = self.committed.setdefault(entry.offset, entry)
            if known != entry:
                self.fail(f"committed entry changed at {entry.offset}: {known} vs {entry}")
        node.high_watermark = high_watermark

    def on_leader(self, node: Node, epoch: int) -> None:
        other = self.leaders_by_epoch.setdefault(epoch, node.node_id)
        if other != node.node_id:
            self.fail(f"two leaders in epoch {epoch}: {other} and {node.node_id}")
        for offset, entry in self.committed.items():
            if offset >= node.log.start_offset and node.log.entry_at(offset) != entry:
                self.fail(f"new leader {node.node_id} (epoch {epoch}) lacks committed {entry}")

    def check_node(self, node: Node) -> None:
        core = node.core
        assert core is not None
        if core.epoch < node.epoch_max:
            self.fail(f"node {node.node_id} epoch fell {node.epoch_max} -> {core.epoch}")
        node.epoch_max = core.epoch
        if core.high_watermark != node.high_watermark:
            self.fail(f"node {node.node_id} HW {core.high_watermark} not announced")

    def check_committed_held(self) -> None:
        """Every committed entry is still on a majority of voters' logs."""
        for offset, entry in self.committed.items():
            holders = sum(
                1
                for v in self.voter_ids
                if offset < self.nodes[v].log.start_offset  # in its (checked) snapshot
                or self.nodes[v].log.entry_at(offset) == entry
            )
            if holders < len(self.voter_ids) // 2 + 1:
                self.fail(f"committed {entry} held by only {holders} voters")

    def check_snapshot(self, data: bytes, end_offset: int) -> None:
        """A snapshot holds exactly the committed entries below its end offset."""
        lines = data.decode().splitlines()
        if len(lines) != end_offset:
            self.fail(f"snapshot to {end_offset} holds {len(lines)} entries")
        for line in lines:
            offset, epoch, payload = line.split(":")
            entry = self.committed.get(int(offset))
            if entry is None or (entry.epoch, entry.payload.hex()) != (int(epoch), payload):
                self.fail(f"snapshot entry {line} is not the committed {entry}")

    def take_snapshot(self, node: Node) -> None:
        """The state machine snapshots part of what it knows to be committed."""
        core, log = node.core, node.log
        assert core is not None
        top = min(core.high_watermark, log.flushed_end_offset)
        if top <= log.start_offset:
            return
        end = self.rng.randint(log.start_offset + 1, top)
        data = (log.snapshot_data or b"") + b"".join(
            f"{e.offset}:{e.epoch}:{e.payload.hex()}\n".encode()
            for e in log.read(log.start_offset, end - log.start_offset)
        )
        self.check_snapshot(data, end)
        log.create_snapshot(end, data)

    # ---------------------------------------------------------------- driving

    def step(self, faults: bool) -> None:
        self.now_ms += TICK_MS
        while self.events and self.events[0].time_ms <= self.now_ms:
            event = heapq.heappop(self.events)
            node = self.nodes[event.node_id]
            if node.core is None:
                continue
            if event.kind == "deliver":
                assert event.message is not None
                if frozenset((event.message.sender_id, node.node_id)) in self.blocked:
                    continue
                self.run_actions(node, node.core.handle(event.message, self.now_ms))
            elif event.incarnation == node.incarnation:
                flushed = node.log.flush(event.offset)
                self.run_actions(node, node.core.on_flushed(flushed, self.now_ms))
        for node in self.nodes.values():
            if node.core is not None:
                self.run_actions(node, node.core.tick(self.now_ms))
        if faults:
            self.inject_faults()
        self.propose()

    def propose(self) -> None:
        if self.rng.random() >= 0.3:
            return
        for node in self.nodes.values():
            if node.core is not None and node.core.role is QuorumRole.LEADER:
                self.proposals += 1
                payload = f"{self.seed}:{self.proposals}".encode()
                result, actions = node.core.propose([payload], self.now_ms)
                assert isinstance(result, Proposed)
                self.run_actions(node, actions)

    def inject_faults(self) -> None:
        r = self.rng.random()
        live = [n for n in self.nodes.values() if n.core is not None]
        dead = [n for n in self.nodes.values() if n.core is None]
        if r < 0.01 and live:
            self.crash(self.pick_often_leader(live))
        elif r < 0.05 and dead:
            self.start(self.rng.choice(dead))
        elif r < 0.07:
            self.partition()
        elif r < 0.075 and live:
            node = self.rng.choice(live)
            assert node.core is not None
            self.run_actions(node, node.core.resign(self.now_ms))
        elif r < 0.085 and live:
            self.take_snapshot(self.rng.choice(live))

    def pick_often_leader(self, nodes: list[Node]) -> Node:
        """A random node, but a leader half the time: faults there hurt most."""
        leaders = [n for n in nodes if n.core is not None and n.core.role is QuorumRole.LEADER]
        if leaders and self.rng.random() < 0.5:
            return self.rng.choice(leaders)
        return self.rng.choice(nodes)

    def partition(self) -> None:
        kind = self.rng.choice(["heal", "isolate", "split"])
        self.blocked = set()
        ids = list(self.node_ids)
        if kind == "isolate":
            lone = self.pick_often_leader(list(self.nodes.values())).node_id
            self.blocked = {frozenset((lone, o)) for o in ids if o != lone}
        elif kind == "split":
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.blocked = {frozenset((a, b)) for a in ids[:cut] for b in ids[cut:]}

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step(faults=True)
        self.check_committed_held()
        self.heal_and_converge()

    def heal_and_converge(self) -> None:
        """After the faults stop: within a bound a leader commits a new record; then,
        within a bound proportional to how far each node lags (records to fetch,
        snapshot chunks), every node's high watermark reaches it."""
        self.blocked = set()
        self.drop_rate = 0.0
        self.faults_on = False
        for node in self.nodes.values():
            if node.core is None:
                self.start(node)
        elect_ms = 20 * CONFIG.election_timeout_ms + 2 * CONFIG.fetch_timeout_ms
        marker = self.run_until(elect_ms, "a leader commits a new record", self.commit_marker)
        leader_log = next(
            n.log for n in self.nodes.values() if n.core and n.core.role is QuorumRole.LEADER
        )
        round_trip_ms = 2 * self.delay_max_ms + 20 + 2 * TICK_MS
        lag = max(marker - n.high_watermark for n in self.nodes.values())
        chunks = len(leader_log.snapshot_data or b"") // CONFIG.fetch_snapshot_max_bytes
        rounds = lag // CONFIG.fetch_max_records + chunks + 10
        self.run_until(
            rounds * round_trip_ms + CONFIG.fetch_timeout_ms,
            f"every node's high watermark reaches {marker}",
            lambda: (
                marker if all(n.high_watermark >= marker for n in self.nodes.values()) else None
            ),
        )
        self.check_committed_held()

    def commit_marker(self) -> int | None:
        leaders = [n for n in self.nodes.values() if n.core and n.core.role is QuorumRole.LEADER]
        if len(leaders) != 1:
            return None
        node = leaders[0]
        assert node.core is not None
        if self.marker_epoch != node.core.epoch:
            result, actions = node.core.propose([b"final"], self.now_ms)
            assert isinstance(result, Proposed)
            self.marker_epoch, self.marker = result.epoch, result.end_offset
            self.run_actions(node, actions)
        return self.marker if node.core.high_watermark >= self.marker else None

    def run_until(self, bound_ms: int, what: str, done: Callable[[], int | None]) -> int:
        deadline_ms = self.now_ms + bound_ms
        while self.now_ms < deadline_ms:
            self.step(faults=False)
            result = done()
            if result is not None:
                return result
        states = {
            n.node_id: (n.core.role.name, n.core.epoch, n.high_watermark)
            for n in self.nodes.values()
            if n.core
        }
        self.fail(f"not done within {bound_ms}ms after healing: {what}: {states}")
        raise AssertionError("unreachable")


def _seeds() -> list[int]:
    one = os.environ.get("RAFTKA_SIM_SEED")
    if one is not None:
        return [int(one)]
    first = int(os.environ.get("RAFTKA_SIM_SEED_START", "0"))
    return list(range(first, first + int(os.environ.get("RAFTKA_SIM_SEEDS", "1000"))))


STEPS_PER_SEED = int(os.environ.get("RAFTKA_SIM_STEPS", "300"))


def test_simulation_holds_invariants_over_many_seeds() -> None:
    """Runs every seed (3 voters for even seeds, 5 for odd) through faults, then heals;
    any invariant violation fails with the seed to replay."""
    started = time.monotonic()
    seeds = _seeds()
    for seed in seeds:
        Simulation(seed, voters=3 if seed % 2 == 0 else 5).run(STEPS_PER_SEED)
    elapsed = time.monotonic() - started
    print(f"{len(seeds)} seeds x {STEPS_PER_SEED} steps in {elapsed:.1f}s")


@pytest.mark.parametrize(
    "unsafe", ["_unsafe_skip_vote_log_check", "_unsafe_send_vote_before_persist"]
)
def test_simulation_catches_a_broken_rule(unsafe: str) -> None:
    """Turns on one deliberately broken rule (votes without the log check; committing an
    entry of a previous epoch) and expects the checker to report a violation for some
    seed: proof that the invariants are not vacuous."""
    for seed in range(2000):
        try:
            Simulation(seed, voters=3, unsafe=unsafe).run(STEPS_PER_SEED)
        except (InvariantViolationError, AssertionError) as exc:
            print(f"{unsafe} caught at seed {seed}: {exc}")
            return
    pytest.fail(f"the checker never noticed {unsafe}")
