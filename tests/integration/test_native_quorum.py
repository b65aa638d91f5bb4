"""Integration tests of NativeQuorumEngine: three engines in one process, real sockets.

Each engine has its own aiohttp server (web.AppRunner/TCPSite on 127.0.0.1, a free
port) and its own data directory (real segment files, quorum-state, snapshots). The
tests drive real elections with short timeouts, commit records, crash or stop nodes,
restart them from their directories and check every node's CommitListener saw the same
committed records in the same order. They wait on conditions with deadlines and a
message (``wait_until``), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from raftka.common.errors import KafkaTimeoutError
from raftka.local import free_ports
from raftka.raft.quorum import NativeQuorumEngine, QuorumConfig
from raftka.raft.quorum.engine import CommittedRecord, NotLeaderError
from raftka.raft.quorum.messages import VoteRequest
from raftka.raft.quorum.transport import MESSAGE_PATH

CONFIG = QuorumConfig(
    election_timeout_ms=300,
    fetch_timeout_ms=800,
    election_backoff_max_ms=200,
    request_timeout_ms=500,
    append_linger_ms=2,
    fetch_max_wait_ms=200,
    fetch_max_records=100,
    fetch_snapshot_max_bytes=1024,  # several chunks for the snapshot test
)
TIMEOUT_S = 10.0


class Listener:
    """A state machine that keeps every payload; snapshots are its list as JSON."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.next_offset = 0
        self.snapshots_loaded = 0
        self.leaders: list[tuple[int | None, int]] = []

    def handle_commit(self, records: Sequence[CommittedRecord]) -> None:
        for record in records:
            assert record.offset >= self.next_offset, (record.offset, self.next_offset)
            self.payloads.append(record.payload)
            self.next_offset = record.offset + 1

    def handle_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        self.payloads = [p.encode() for p in orjson.loads(data)]
        self.next_offset = end_offset
        self.snapshots_loaded += 1

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))

    def snapshot(self) -> bytes:
        return orjson.dumps([p.decode() for p in self.payloads])


def free_port() -> int:
    # Below the ephemeral range, as every test port (see raftka.local's free_ports).
    return free_ports(1)[0]


class Node:
    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], data_dir: Path) -> None:
        self.node_id = node_id
        self.voters = voters
        self.data_dir = data_dir
        self.listener = Listener()
        self.engine: NativeQuorumEngine | None = None
        self.runner: web.AppRunner | None = None

    @property
    def e(self) -> NativeQuorumEngine:
        assert self.engine is not None
        return self.engine

    async def start(self) -> None:
        self.listener = Listener()
        self.engine = NativeQuorumEngine(self.node_id, self.voters, self.data_dir, CONFIG)
        app = web.Application()
        app.add_routes(self.engine.routes())
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, *self.voters[self.node_id]).start()
        await self.engine.start(self.listener)

    async def stop(self, *, graceful: bool) -> None:
        if self.engine is not None:
            if graceful:
                await self.engine.stop()
            else:
                await self.engine.abort()  # no resignation: as a crash
        if self.runner is not None:
            await self.runner.cleanup()
        self.engine = self.runner = None

    @property
    def up(self) -> bool:
        return self.engine is not None


async def wait_until(predicate: Callable[[], bool], message: Callable[[], str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT_S}s: {message()}")
        await asyncio.sleep(0.005)


async def cluster(tmp_path: Path) -> list[Node]:
    voters = {i: ("127.0.0.1", free_port()) for i in (1, 2, 3)}
    nodes = [Node(i, voters, tmp_path / f"node-{i}") for i in (1, 2, 3)]
    for node in nodes:
        await node.start()
    return nodes


def leader_of(nodes: list[Node]) -> Node | None:
    leaders = [n for n in nodes if n.up and n.e.is_leader]
    if len(leaders) != 1:
        return None
    leader = leaders[0]
    agreed = all(n.e.leader_id == leader.node_id for n in nodes if n.up)
    return leader if agreed else None


async def elected(nodes: list[Node]) -> Node:
    await wait_until(
        lambda: leader_of(nodes) is not None,
        lambda: f"no agreed leader: {[(n.node_id, n.e.role, n.e.epoch) for n in nodes if n.up]}",
    )
    leader = leader_of(nodes)
    assert leader is not None
    return leader


async def append(leader: Node, payloads: list[bytes]) -> int:
    return await leader.e.append(payloads, timeout_ms=5000)


async def all_applied(nodes: list[Node], expected: list[bytes]) -> None:
    await wait_until(
        lambda: all(n.listener.payloads == expected for n in nodes if n.up),
        lambda: f"listeners differ: {[(n.node_id, len(n.listener.payloads)) for n in nodes]}",
    )


async def shutdown(nodes: list[Node]) -> None:
    for node in nodes:
        await node.stop(graceful=False)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_elect_commit_replicate_and_errors(tmp_path: Path) -> None:
    """A leader is elected; appends commit and every listener sees the same records in
    order; a follower refuses appends and read barriers with NotLeaderError naming the
    leader; the leader's read barrier covers its commits; describe shows the voters."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            leader = await elected(nodes)
            expected: list[bytes] = []
            last = -1
            for i in range(10):
                batch = [f"r{i}-{j}".encode() for j in range(i % 3 + 1)]
                offset = await append(leader, batch)
                assert offset > last
                last = offset
                expected += batch
            await all_applied(nodes, expected)
            barrier = await leader.e.read_barrier(timeout_ms=2000)
            assert barrier > last
            follower = next(n for n in nodes if n is not leader)
            with pytest.raises(NotLeaderError) as info:
                await follower.e.append([b"x"], timeout_ms=1000)
            assert info.value.leader_id == leader.node_id
            with pytest.raises(NotLeaderError):
                await follower.e.read_barrier(timeout_ms=1000)
            committed = follower.e.read_committed(0, 1000)
            assert [r.payload for r in committed] == expected
            info_ = leader.e.describe()
            assert info_.leader_id == leader.node_id and info_.role == "leader"
            await wait_until(
                lambda: all(v.log_end_offset >= last for v in leader.e.describe().voters),
                lambda: f"describe: {leader.e.describe()}",
            )
        finally:
            await shutdown(nodes)

    run(scenario)


@pytest.mark.parametrize("graceful", [False, True], ids=["crash", "graceful"])
def test_leader_loss_new_leader_and_restart(tmp_path: Path, graceful: bool) -> None:
    """Stopping the leader (crash: no resignation; graceful: EndQuorumEpoch) elects a new
    leader among the two others, which commits; no committed record is lost; the old
    leader restarts from its directory and catches up to the same records."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            old = await elected(nodes)
            old_epoch = old.e.epoch
            expected = [f"a{i}".encode() for i in range(20)]
            for i in range(0, 20, 5):
                await append(old, expected[i : i + 5])
            await all_applied(nodes, expected)
            started = time.monotonic()
            await old.stop(graceful=graceful)
            new = await elected(nodes)
            took_s = time.monotonic() - started
            assert new is not old and new.e.epoch > old_epoch
            assert took_s < 5.0, took_s
            more = [f"b{i}".encode() for i in range(10)]
            await append(new, more)
            expected += more
            await all_applied(nodes, expected)
            await old.start()  # same directory, same port
            await all_applied(nodes, expected)
            assert old.e.leader_id == new.node_id
        finally:
            await shutdown(nodes)

    run(scenario)


def test_far_behind_follower_catches_up_through_snapshot(tmp_path: Path) -> None:
    """A follower that is down while the leader commits and snapshots (moving its log
    start past the follower's end) restarts, fetches the snapshot in chunks, installs
    it, hands it to its listener and then follows the log like the others."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            leader = await elected(nodes)
            expected = [f"s{i}".encode() for i in range(5)]
            await append(leader, expected)
            await all_applied(nodes, expected)
            lagging = next(n for n in nodes if n is not leader)
            lagging_end = lagging.e.log_end_offset
            await lagging.stop(graceful=False)
            for i in range(10):
                batch = [f"t{i}-{j}-{'x' * 50}".encode() for j in range(20)]
                await append(leader, batch)
                expected += batch
            up = [n for n in nodes if n.up]
            await all_applied(up, expected)
            for node in up:
                node.e.save_snapshot(node.e.applied_offset, node.listener.snapshot())
            assert leader.e.log_start_offset > lagging_end
            tail = [b"after-snapshot"]
            await append(leader, tail)
            expected += tail
            await lagging.start()
            await all_applied(nodes, expected)
            assert lagging.listener.snapshots_loaded == 1
            assert lagging.e.log_start_offset == leader.e.log_start_offset
            # A restart of the snapshotting node loads its own snapshot first.
            await leader.stop(graceful=True)
            await leader.start()
            assert leader.listener.snapshots_loaded == 1
            await all_applied(nodes, expected)
        finally:
            await shutdown(nodes)

    run(scenario)


def test_no_quorum_times_out_with_outcome_unknown(tmp_path: Path) -> None:
    """With both followers stopped the leader cannot commit: append raises
    KafkaTimeoutError, and its outcome is unknown: once the followers return, the record
    either commits everywhere or nowhere (here the old leader's log is the longest, so
    it normally commits); every node agrees either way."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            leader = await elected(nodes)
            await append(leader, [b"before"])
            followers = [n for n in nodes if n is not leader]
            for node in followers:
                await node.stop(graceful=False)
            with pytest.raises(KafkaTimeoutError):
                await leader.e.append([b"unknown"], timeout_ms=300)
            # Without a majority fetching, the leader resigns after the fetch timeout.
            await wait_until(lambda: not leader.e.is_leader, lambda: "leader did not resign")
            with pytest.raises(NotLeaderError):
                await leader.e.append([b"refused"], timeout_ms=300)
            for node in followers:
                await node.start()
            new = await elected(nodes)
            await append(new, [b"after"])
            reference = new.listener.payloads
            assert reference[0] == b"before" and reference[-1] == b"after"
            assert reference[1:-1] in ([], [b"unknown"])
            assert b"refused" not in reference
            await all_applied(nodes, reference)
        finally:
            await shutdown(nodes)

    run(scenario)


def test_transport_refuses_bad_messages(tmp_path: Path) -> None:
    """Malformed JSON gets 400 INVALID_REQUEST, a message from a node that is not a
    voter 400 INCONSISTENT_VOTER_SET, a bad field type 400 INVALID_REQUEST; the node
    keeps working (it still elects and commits)."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            host, port = nodes[0].voters[1]
            url = f"http://{host}:{port}{MESSAGE_PATH}"
            stranger = VoteRequest(99, 5, 0, 0, pre_vote=True).to_dict()
            bad_type = VoteRequest(2, 5, 0, 0, pre_vote=True).to_dict() | {"epoch": "5"}
            async with aiohttp.ClientSession() as session:
                for body, error in [
                    (b"{not json", "INVALID_REQUEST"),
                    (b"[1, 2]", "INVALID_REQUEST"),
                    (orjson.dumps({"type": "Nope", "sender_id": 2}), "INVALID_REQUEST"),
                    (orjson.dumps(bad_type), "INVALID_REQUEST"),
                    (orjson.dumps(stranger), "INCONSISTENT_VOTER_SET"),
                ]:
                    async with session.post(url, data=body) as response:
                        assert response.status == 400, body
                        assert (await response.json())["error"] == error, body
            leader = await elected(nodes)
            await append(leader, [b"still-works"])
            await all_applied(nodes, [b"still-works"])
        finally:
            await shutdown(nodes)

    run(scenario)


def test_append_latency_measurement(tmp_path: Path) -> None:
    """Not an assertion on speed: 500 sequential single-record appends on the 3-node
    in-process cluster, printing p50/p99 latency for docs/benchmarks.md (run with -s).
    It does check that every append committed, in order."""

    async def scenario() -> None:
        nodes = await cluster(tmp_path)
        try:
            leader = await elected(nodes)
            await append(leader, [b"warm-up"])
            latencies_ms: list[float] = []
            last = -1
            for i in range(500):
                started = time.perf_counter()
                offset = await append(leader, [f"m{i}".encode()])
                latencies_ms.append((time.perf_counter() - started) * 1000)
                assert offset == last + 1 or last == -1
                last = offset
            q = statistics.quantiles(latencies_ms, n=100)
            print(
                f"\nappend latency, 500 sequential appends, 3 nodes in one process, "
                f"linger {CONFIG.append_linger_ms} ms: p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms, "
                f"max {max(latencies_ms):.2f} ms"
            )
        finally:
            await shutdown(nodes)

    run(scenario)
