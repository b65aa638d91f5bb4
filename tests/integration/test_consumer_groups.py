"""Consumer groups end to end: 3 controllers + 3 brokers + consumers as real processes.

One module-scoped cluster (``env``) serves every test; each test uses its own topic and
group. The brokers run with ``offsets.topic.num.partitions=3`` and a 100 ms initial
rebalance delay; consumers with a 3 s session and 300 ms heartbeats. Checked from the
outside, through the public clients:

- membership: 3 members share 6 partitions (each exactly once), a 4th member (its own
  process) joins and the partitions spread over 4, then it is killed with SIGKILL and
  its partitions move to the others within the session timeout;
- at-least-once under churn: 20k records consumed with commit-after-processing while
  members join, leave, crash (SIGKILL of a member process) and while the coordinator's
  broker is killed and restarted: every record is processed, duplicates stay below what
  could have been uncommitted at each disturbance;
- within one generation no partition has two owners (every member logs (generation,
  member, partitions) at each assignment, in process or not);
- a restarted consumer resumes from the committed offset; ``auto_offset_reset`` applies
  only when the group has no committed offset;
- committed offsets survive a kill -9 of the coordinator's broker;
- auto-commit on its interval and on close; commit_async's callback; a commit with a
  stale generation (session expired while the member's loop was held) and after a
  max_poll_interval_ms leave fails with CommitFailedError; the idle member's
  partitions go to the member that polls;
- pattern subscription (full-name match); cooperative-sticky revokes only the moved
  partitions; seek() in on_partitions_assigned decides the first record returned.

Every client call has a timeout; waits poll a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from raftka.client import (
    Admin,
    AsyncConsumer,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from raftka.client.consumer.listener import ConsumerRebalanceListener
from raftka.client.group_admin import AsyncGroupAdmin
from raftka.client.structs import OffsetAndMetadata
from raftka.common.errors import CommitFailedError, RebalanceInProgressError
from raftka.local import LocalCluster, http_json, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
API_TIMEOUT_MS = 20_000
SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 300
MAX_POLL_RECORDS = 200
GROUP_OPTIONS: dict[str, Any] = {
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
    "max_poll_interval_ms": 15_000,
    "request_timeout_ms": 5_000,
    "retry_backoff_ms": 50,
    "fetch_max_wait_ms": 100,
    "max_poll_records": MAX_POLL_RECORDS,
    "default_api_timeout_ms": API_TIMEOUT_MS,
}

# A group member in its own process, for a real SIGKILL. It logs one JSON line per
# assignment and per processed batch (before committing it) to its output file.
MEMBER_SCRIPT = r"""
import json, sys
from raftka.client import Consumer
from raftka.client.consumer.listener import ConsumerRebalanceListener
from raftka.common.errors import CommitFailedError, RebalanceInProgressError
bootstrap, group, topic, out_path, options = sys.argv[1:6]
out = open(out_path, "a", buffering=1)
consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                    enable_auto_commit=False, client_id="proc", **json.loads(options))
class Log(ConsumerRebalanceListener):
    def on_partitions_assigned(self, assigned):
        md = consumer.group_metadata()
        mine = sorted(p.partition for p in consumer.assignment())
        out.write(json.dumps({"kind": "assigned", "generation": md.generation_id,
            "member": md.member_id, "partitions": mine}) + "\n")
consumer.subscribe([topic], listener=Log())
while True:
    batch = consumer.poll(500)
    values = [int(r.value) for rs in batch.values() for r in rs]
    if values:
        out.write(json.dumps({"kind": "processed", "values": values}) + "\n")
        out.flush()
        try:
            consumer.commit(timeout_ms=10000)
        except (CommitFailedError, RebalanceInProgressError):
            pass
"""


@dataclass
class Env:
    cluster: LocalCluster
    brokers: LocalBrokers
    admin: Admin
    tmp: Path

    @property
    def bootstrap(self) -> str:
        return self.brokers.bootstrap_servers

    def topic(self, name: str, partitions: int) -> str:
        self.admin.create_topics(
            [NewTopic(name, partitions, 3, configs={"min.insync.replicas": "2"})],
            timeout_ms=API_TIMEOUT_MS,
        )

        def known() -> bool:
            for b in self.brokers.ids:
                md = self.brokers.metadata(b) if self.brokers[b].running else None
                topics = {t["name"]: t for t in (md or {"topics": []})["topics"]}
                t = topics.get(name)
                if t is None or any(p["leader"] < 0 for p in t["partitions"]):
                    return False
            return True

        wait_for(known, timeout_s=DEADLINE_S, message=lambda: f"{name} not known everywhere")
        return name

    def produce(
        self, topic: str, count: int, *, chunk: int | None = None, pace_s: float = 0
    ) -> None:
        """Records with values ``0..count-1``; in chunks ``pace_s`` apart when asked
        (so that consumers are still busy while the test disturbs the group)."""
        chunk = chunk or count
        with Producer(bootstrap_servers=self.bootstrap, max_block_ms=API_TIMEOUT_MS) as producer:
            for start in range(0, count, chunk):
                for i in range(start, min(start + chunk, count)):
                    producer.send(topic, str(i).encode(), key=str(i).encode())
                producer.flush(timeout_ms=API_TIMEOUT_MS)
                time.sleep(pace_s)  # pacing the load, not synchronisation

    def coordinator_of(self, group: str) -> int:
        """The broker id coordinating ``group``, asked of any running broker."""

        def find() -> int | None:
            for b in self.brokers.ids:
                if not self.brokers[b].running:
                    continue
                try:
                    _, answer = http_json(
                        self.brokers[b].address,
                        "/v1/find-coordinator",
                        method="POST",
                        body={"key": group},
                    )
                except OSError:
                    continue
                if isinstance(answer, dict) and answer.get("error") is None:
                    node = int(answer["node_id"])
                    if self.brokers[node].running:
                        return node
            return None

        found: int = wait_for(find, timeout_s=DEADLINE_S, message=f"no coordinator for {group}")
        return found


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp: Path = tmp_path_factory.mktemp("groups")
    props = {
        "replica.lag.time.max.ms": "1500",
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "100",
        "group.min.session.timeout.ms": "1000",
    }
    with (
        RaftkaCluster.start(
            tmp,
            controller_properties={"broker.session.timeout.ms": "2500"},
            broker_properties=props,
        ) as cluster,
        Admin(
            bootstrap_servers=cluster.bootstrap_servers, default_api_timeout_ms=API_TIMEOUT_MS
        ) as admin,
    ):
        yield Env(cluster.controllers, cluster.brokers, admin, tmp)


# ---------------------------------------------------------------------------------------
# In-process members (async consumers on the test's loop)


@dataclass
class Ledger:
    """What every member saw: assignments (generation, member, partitions) and the
    values it processed (before committing them)."""

    assignments: list[tuple[int, str, frozenset[int]]] = field(default_factory=list)
    processed: list[int] = field(default_factory=list)

    def read_process_log(self, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # the last line of a killed process may be cut
            if entry["kind"] == "assigned":
                self.assignments.append(
                    (entry["generation"], entry["member"], frozenset(entry["partitions"]))
                )
            else:
                self.processed.extend(entry["values"])

    def check_one_owner_per_generation(self) -> None:
        owners: dict[tuple[int, int], str] = {}
        for generation, member, partitions in self.assignments:
            for p in partitions:
                other = owners.setdefault((generation, p), member)
                assert other == member, (
                    f"partition {p} owned by {other} and {member} in generation {generation}"
                )


class Member:
    """An AsyncConsumer polling in a task, committing after processing each batch."""

    def __init__(self, env: Env, group: str, topic: str, ledger: Ledger, **options: Any) -> None:
        self.ledger = ledger
        self.consumer = AsyncConsumer(
            bootstrap_servers=env.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **{**GROUP_OPTIONS, **options},
        )
        member = self

        class Log(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                md = member.consumer.group_metadata()
                ledger.assignments.append(
                    (
                        md.generation_id,
                        md.member_id,
                        frozenset(tp.partition for tp in member.consumer.assignment()),
                    )
                )

        self.consumer.subscribe([topic], listener=Log())
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.poll(200)
            values = [int(r.value) for rs in batch.values() for r in rs]
            if not values:
                continue
            self.ledger.processed.extend(values)
            # On a rebalance the commit fails: the new owner starts from the last commit.
            with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                await self.consumer.commit(timeout_ms=10_000)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def generation(self) -> int:
        return self.consumer.group_metadata().generation_id

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.close()


class ProcessMember:
    """A member in its own process (MEMBER_SCRIPT), for a real SIGKILL."""

    def __init__(self, env: Env, group: str, topic: str, out: Path) -> None:
        options = {k: v for k, v in GROUP_OPTIONS.items() if k != "default_api_timeout_ms"}
        self._stderr = out.with_suffix(".err").open("wb")
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-c",
                MEMBER_SCRIPT,
                env.bootstrap,
                group,
                topic,
                str(out),
                json.dumps(options),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def kill(self) -> None:
        """SIGKILL (no leave, no commit) and reap."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)
        self._stderr.close()


async def _wait(cond: Any, message: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, message() if callable(message) else message
        await asyncio.sleep(0.05)  # polling a condition with a deadline


def _logged_assignment(path: Path, partitions: set[int]) -> bool:
    """Whether the process member's log holds an assignment of exactly `partitions`."""
    if not path.exists():
        return False
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line being written
        if entry["kind"] == "assigned" and set(entry["partitions"]) == partitions:
            return True
    return False


def _balanced(members: list[Member], partitions: int, extra: set[int] | None = None) -> bool:
    owned = [m.partitions() for m in members] + ([extra] if extra is not None else [])
    flat = [p for s in owned for p in s]
    return sorted(flat) == list(range(partitions)) and all(owned)


def test_members_share_partitions_and_rebalance(env: Env) -> None:
    """3 members cover 6 partitions once each; a 4th (a process) joins and the 6 spread
    over 4; SIGKILL of the 4th gives its partitions back to the 3 within the session
    timeout (plus one heartbeat and the rebalance)."""
    topic = env.topic("share", 6)
    group = "share-group"
    out = env.tmp / "share-member.jsonl"
    ledger = Ledger()

    async def scenario() -> None:
        members = [Member(env, group, topic, ledger) for _ in range(3)]
        try:
            await _wait(
                lambda: _balanced(members, 6) and len({m.generation() for m in members}) == 1,
                lambda: (
                    f"3 members did not share 6 partitions: {[m.partitions() for m in members]}"
                ),
            )
            proc = ProcessMember(env, group, topic, out)
            try:

                def four_way() -> bool:
                    mine = [m.partitions() for m in members]
                    return sum(map(len, mine)) == 4 and all(len(s) >= 1 for s in mine)

                def process_logged_its_share() -> bool:
                    # The in-process members can see the 4-way split before the process
                    # member has run its listener on its own SyncGroup answer; killing it
                    # then would leave no assignment of its in the ledger.
                    rest = set(range(6)).difference(*(m.partitions() for m in members))
                    return bool(rest) and _logged_assignment(out, rest)

                await _wait(
                    lambda: four_way() and process_logged_its_share(),
                    lambda: (
                        f"no 4-way split logged by the process member: "
                        f"{[m.partitions() for m in members]}"
                    ),
                )
            finally:
                proc.kill()
            killed_at = time.monotonic()
            await _wait(
                lambda: _balanced(members, 6),
                lambda: f"partitions not back: {[m.partitions() for m in members]}",
            )
            elapsed = time.monotonic() - killed_at
            assert elapsed < SESSION_TIMEOUT_MS / 1000 + 3, f"took {elapsed:.1f} s"
        finally:
            for m in members:
                await m.close()

    asyncio.run(scenario())
    ledger.read_process_log(out)
    ledger.check_one_owner_per_generation()
    assert any(member.startswith("proc") for _, member, _ in ledger.assignments)


def test_at_least_once_under_churn_and_coordinator_kill(env: Env) -> None:
    """20k records, commit after processing, members joining, leaving, crashing
    (SIGKILL) and the coordinator's broker killed (kill -9) and restarted: every record
    processed; duplicates <= disturbances x members x max_poll_records; one owner per
    partition per generation."""
    topic = env.topic("churn", 6)
    group = "churn-group"
    total = 20_000
    ledger = Ledger()
    out = env.tmp / "churn-member.jsonl"
    disturbances = 0

    def progress() -> int:
        return len(set(ledger.processed))

    async def scenario() -> None:
        nonlocal disturbances
        # About 10 s of load, so that every disturbance below hits a busy group.
        producing = asyncio.create_task(
            asyncio.to_thread(env.produce, topic, total, chunk=500, pace_s=0.2)
        )
        a = Member(env, group, topic, ledger)
        b = Member(env, group, topic, ledger)
        members = [a, b]
        proc = None
        try:
            await _wait(lambda: progress() > 2_000, "no progress with 2 members")
            proc = ProcessMember(env, group, topic, out)  # joins
            disturbances += 1
            await _wait(lambda: out.exists() and "processed" in out.read_text(), "member idle")
            proc.kill()  # crashes
            disturbances += 1
            await b.close()  # leaves
            members.remove(b)
            disturbances += 1
            c = Member(env, group, topic, ledger)  # joins
            members.append(c)
            disturbances += 1
            before = progress()
            await _wait(lambda: progress() > before + 1_000, "no progress after churn")
            coordinator = env.coordinator_of(group)
            await asyncio.to_thread(env.brokers[coordinator].kill)
            disturbances += 1
            before = progress()
            await _wait(lambda: progress() > before + 500, "no progress without the coordinator")
            await asyncio.to_thread(env.brokers[coordinator].start)
            await asyncio.to_thread(env.brokers.wait_unfenced, coordinator)
            await producing
            await _wait(
                lambda: len(set(ledger.processed) | _process_values(out)) >= total,
                lambda: f"only {progress()} of {total} records processed",
                timeout_s=60,
            )
        finally:
            producing.cancel()
            if proc is not None:
                proc.kill()
            for m in members:
                await m.close()

    asyncio.run(scenario())
    ledger.read_process_log(out)
    seen = Counter(ledger.processed)
    missing = set(range(total)) - set(seen)
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    duplicates = sum(seen.values()) - total
    bound = disturbances * 3 * MAX_POLL_RECORDS
    assert duplicates <= bound, f"{duplicates} duplicates > {bound}"
    ledger.check_one_owner_per_generation()


def _process_values(path: Path) -> set[int]:
    ledger = Ledger()
    ledger.read_process_log(path)
    return set(ledger.processed)


def test_restart_resumes_from_committed_offset(env: Env) -> None:
    """With no committed offset, auto_offset_reset decides (latest: nothing old is
    read); after a commit at offset 30, a new consumer of the group starts at 30 even
    with auto_offset_reset=latest."""
    topic = env.topic("resume", 1)
    group = "resume-group"
    env.produce(topic, 50)
    tp = TopicPartition(topic, 0)

    async def scenario() -> None:
        options = {**GROUP_OPTIONS, "enable_auto_commit": False}
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap, group_id=group, auto_offset_reset="latest", **options
        ) as first:
            first.subscribe([topic])
            await _wait_assigned(first)
            assert await first.position(tp, timeout_ms=API_TIMEOUT_MS) == 50
            assert await first.committed([tp], timeout_ms=API_TIMEOUT_MS) == {tp: None}
            await first.commit({tp: OffsetAndMetadata(30, "", None)}, timeout_ms=API_TIMEOUT_MS)
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap, group_id=group, auto_offset_reset="latest", **options
        ) as second:
            second.subscribe([topic])
            got: list[int] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < 20:
                assert time.monotonic() < deadline, f"read {got}"
                batch = await second.poll(500)
                got.extend(r.offset for rs in batch.values() for r in rs)
            assert got[:20] == list(range(30, 50))

    asyncio.run(scenario())


async def _wait_assigned(consumer: AsyncConsumer) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        await consumer.poll(100)


def test_committed_offsets_survive_coordinator_kill(env: Env) -> None:
    """Offsets committed (acks=all on __consumer_offsets) are read back from the next
    coordinator after a kill -9 of the one that took them, and after its restart."""
    topic = env.topic("survive", 3)
    group = "survive-group"
    offsets = {TopicPartition(topic, p): OffsetAndMetadata(10 + p, f"m{p}", None) for p in range(3)}

    async def committed() -> dict[TopicPartition, OffsetAndMetadata | None]:
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap, group_id=group, **GROUP_OPTIONS
        ) as consumer:
            return await consumer.committed(list(offsets), timeout_ms=API_TIMEOUT_MS)

    async def commit() -> None:
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            **GROUP_OPTIONS,
        ) as consumer:
            consumer.assign(list(offsets))
            await consumer.commit(offsets, timeout_ms=API_TIMEOUT_MS)

    asyncio.run(commit())
    coordinator = env.coordinator_of(group)
    env.brokers[coordinator].kill()
    try:
        assert env.coordinator_of(group) != coordinator
        assert asyncio.run(committed()) == offsets
    finally:
        env.brokers[coordinator].start()
        env.brokers.wait_unfenced(coordinator)
    assert asyncio.run(committed()) == offsets


def test_subscribe_and_assign_are_exclusive(env: Env) -> None:
    """subscribe() after assign() and assign() after subscribe() raise IllegalStateError;
    subscribe() without group_id too."""
    from raftka.common.errors import IllegalStateError

    consumer = AsyncConsumer(bootstrap_servers=env.bootstrap, group_id="x")
    consumer.assign([TopicPartition("t", 0)])
    with pytest.raises(IllegalStateError, match="assign"):
        consumer.subscribe(["t"])
    other = AsyncConsumer(bootstrap_servers=env.bootstrap, group_id="x")
    other.subscribe(["t"])
    with pytest.raises(IllegalStateError, match="subscribe"):
        other.assign([TopicPartition("t", 0)])
    with pytest.raises(IllegalStateError, match="group_id"):
        AsyncConsumer(bootstrap_servers=env.bootstrap).subscribe(["t"])


def test_groups_command(env: Env) -> None:
    """``raftka groups``: list and describe (state, member with its assignment,
    committed offset, log end, lag) an active group; reset-offsets is refused while it
    is active, plans without --execute and applies with it once the group is empty;
    delete removes it."""
    from click.testing import CliRunner

    from raftka.client.cli.groups import groups_command

    topic = env.topic("cli", 2)
    group = "cli-group"
    env.produce(topic, 40)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(
            groups_command, [*args, "--bootstrap-server", env.bootstrap], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        return result.output

    async def active_then_closed() -> None:
        options = {**GROUP_OPTIONS, "enable_auto_commit": False}
        async with AsyncConsumer(
            bootstrap_servers=env.bootstrap, group_id=group, auto_offset_reset="earliest", **options
        ) as consumer:
            consumer.subscribe([topic])
            read = 0
            deadline = time.monotonic() + DEADLINE_S
            while read < 40:
                assert time.monotonic() < deadline, f"read {read} of 40"
                read += sum(len(rs) for rs in (await consumer.poll(500)).values())
            await consumer.commit(
                {TopicPartition(topic, 0): OffsetAndMetadata(5, "", None)},
                timeout_ms=API_TIMEOUT_MS,
            )
            await asyncio.to_thread(check_active, consumer.group_metadata().member_id)

    def check_active(member_id: str) -> None:
        assert group in run("list")
        described = run("describe", group)
        assert "state Stable" in described and member_id in described, described
        line = next(x for x in described.splitlines() if x.startswith(f"{topic}\t0\t"))
        _, _, current, end, lag, owner = line.split("\t")
        assert int(current) == 5 and int(lag) == int(end) - 5 and owner == member_id, line
        refused = runner.invoke(
            groups_command,
            [
                "reset-offsets",
                group,
                "--topic",
                topic,
                "--to-earliest",
                "--execute",
                "--bootstrap-server",
                env.bootstrap,
            ],
        )
        assert refused.exit_code == 1 and "NON_EMPTY_GROUP" in refused.output, refused.output

    asyncio.run(active_then_closed())
    plan = run("reset-offsets", group, "--topic", topic, "--to-latest")
    assert "Dry run" in plan
    run("reset-offsets", group, "--topic", topic, "--shift-by", "-100", "--execute")
    described = run("describe", group)
    assert "state Empty" in described
    for p in range(2):
        line = next(x for x in described.splitlines() if x.startswith(f"{topic}\t{p}\t"))
        assert line.split("\t")[2] == "0", line
    run("delete", group)
    assert group not in run("list")


# ---------------------------------------------------------------------------------------
# Auto-commit, commit_async, max_poll_interval_ms, patterns, cooperative, seek in listener


def _consumer(env: Env, group: str, **options: Any) -> AsyncConsumer:
    """An AsyncConsumer of ``group`` reading from the earliest offset, with the module's
    short session (``options`` override)."""
    merged: dict[str, Any] = {**GROUP_OPTIONS, "enable_auto_commit": False, **options}
    return AsyncConsumer(
        bootstrap_servers=env.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        **merged,
    )


async def _read(consumer: AsyncConsumer, count: int) -> list[ConsumerRecord]:
    """Poll until ``count`` records arrived (in poll order), within the deadline."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        batch = await consumer.poll(200)
        got.extend(r for rs in batch.values() for r in rs)
    return got


def _poll_forever(consumer: AsyncConsumer) -> asyncio.Task[None]:
    """A task that keeps ``consumer`` in its group (polls, discards nothing it needs)."""

    async def run() -> None:
        while True:
            await consumer.poll(200)

    return asyncio.get_running_loop().create_task(run())


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _group_offsets(env: Env, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
    async with AsyncGroupAdmin(
        bootstrap_servers=env.bootstrap, default_api_timeout_ms=API_TIMEOUT_MS
    ) as admin:
        return await admin.list_offsets(group, timeout_ms=API_TIMEOUT_MS)


def test_auto_commit_on_interval_and_on_close(env: Env) -> None:
    """enable_auto_commit with a 200 ms interval: after reading 30 records and polling
    on, the committed offset reaches the position (30). Then a member with a 60 s
    interval (so only close() can commit) resumes at 30, reads 10 more and closes: the
    group's committed offset is 40 and a new member's first record is offset 40."""
    topic = env.topic("autocommit", 1)
    group = "autocommit-group"
    tp = TopicPartition(topic, 0)
    env.produce(topic, 30)

    async def scenario() -> None:
        async with _consumer(
            env, group, enable_auto_commit=True, auto_commit_interval_ms=200
        ) as first:
            first.subscribe([topic])
            await _read(first, 30)
            position = await first.position(tp, timeout_ms=API_TIMEOUT_MS)
            assert position == 30
            deadline = time.monotonic() + DEADLINE_S
            while True:
                committed = await first.committed([tp], timeout_ms=API_TIMEOUT_MS)
                if committed[tp] is not None and committed[tp].offset == position:
                    break
                assert time.monotonic() < deadline, f"auto-commit did not reach 30: {committed}"
                await first.poll(100)  # auto-commit runs from poll, as in Kafka
        await asyncio.to_thread(env.produce, topic, 10)
        second = _consumer(env, group, enable_auto_commit=True, auto_commit_interval_ms=60_000)
        try:
            second.subscribe([topic])
            offsets = [r.offset for r in await _read(second, 10)]
            assert offsets[:10] == list(range(30, 40))
            assert (await _group_offsets(env, group))[tp].offset == 30  # nothing yet
        finally:
            await second.close()
        assert (await _group_offsets(env, group))[tp].offset == 40
        await asyncio.to_thread(env.produce, topic, 5)
        async with _consumer(env, group) as third:
            third.subscribe([topic])
            assert [r.offset for r in await _read(third, 5)][:5] == list(range(40, 45))

    asyncio.run(scenario())


def test_commit_async_and_stale_generation(env: Env) -> None:
    """commit_async(callback): the callback gets the positions and no error, and
    committed() reads them back. Then the member's event loop is held (so its heartbeats
    cannot run) while a second member joins: the session expires, the second member gets
    both partitions, and the first member's commit with its old generation fails with
    CommitFailedError."""
    topic = env.topic("commitasync", 2)
    group = "commitasync-group"
    env.produce(topic, 20)

    async def scenario() -> None:
        async with _consumer(env, group) as first:
            first.subscribe([topic])
            await _read(first, 20)
            assert len(first.assignment()) == 2
            seen: list[tuple[dict[TopicPartition, OffsetAndMetadata], Exception | None]] = []
            task = first.commit_async(callback=lambda o, e: seen.append((dict(o), e)))
            async with asyncio.timeout(DEADLINE_S):
                await task
            positions = {
                tp: await first.position(tp, timeout_ms=API_TIMEOUT_MS) for tp in first.assignment()
            }
            assert sum(positions.values()) == 20
            assert len(seen) == 1, seen
            offsets, error = seen[0]
            assert error is None
            assert {tp: om.offset for tp, om in offsets.items()} == positions
            committed = await first.committed(list(positions), timeout_ms=API_TIMEOUT_MS)
            assert {tp: om.offset for tp, om in committed.items() if om} == positions
            generation = first.group_metadata().generation_id
            # Held on purpose: this call blocks the loop, so no heartbeat of `first`
            # runs until the other member owns everything.
            other = take_over()
            try:
                assert first.group_metadata().generation_id == generation  # still thinks so
                with pytest.raises(CommitFailedError):
                    await first.commit(timeout_ms=API_TIMEOUT_MS)
            finally:
                await asyncio.to_thread(other.close)

    def take_over() -> Consumer:
        options = {**GROUP_OPTIONS, "enable_auto_commit": False}
        other = Consumer(
            bootstrap_servers=env.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            **options,
        )
        try:
            other.subscribe([topic])

            def owns_all() -> bool:
                other.poll(200)
                return len(other.assignment()) == 2

            wait_for(owns_all, timeout_s=DEADLINE_S, message="the second member never got both")
        except BaseException:
            other.close()
            raise
        return other

    asyncio.run(scenario())


def test_max_poll_interval_leaves_the_group(env: Env) -> None:
    """A member with max_poll_interval_ms=1500 that stops calling poll() (its loop and
    heartbeats still run) leaves the group by itself: the other member gets both
    partitions within the deadline, and the idle member's commit fails with
    CommitFailedError (its partitions went elsewhere)."""
    topic = env.topic("maxpoll", 2)
    group = "maxpoll-group"
    env.produce(topic, 10)

    async def scenario() -> None:
        idle = _consumer(env, group, max_poll_interval_ms=1_500)
        busy = _consumer(env, group)
        idle.subscribe([topic])
        busy.subscribe([topic])
        polling = _poll_forever(busy)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not (
                len(idle.assignment()) == 1
                and len(busy.assignment()) == 1
                and idle.group_metadata().generation_id == busy.group_metadata().generation_id
            ):
                assert time.monotonic() < deadline, (
                    f"no 1+1 split: {idle.assignment()} {busy.assignment()}"
                )
                await idle.poll(100)
            stopped = time.monotonic()
            # `idle` no longer polls from here on.
            await _wait(
                lambda: len(busy.assignment()) == 2,
                lambda: f"busy member did not get both: {busy.assignment()}",
            )
            assert time.monotonic() - stopped >= 1.5 - 0.2, "taken before the poll interval"
            with pytest.raises(CommitFailedError):
                await idle.commit(
                    {TopicPartition(topic, 0): OffsetAndMetadata(1, "", None)},
                    timeout_ms=API_TIMEOUT_MS,
                )
        finally:
            await _stop(polling)
            await busy.close()
            await idle.close()

    asyncio.run(scenario())


def test_pattern_subscription(env: Env) -> None:
    """subscribe(pattern=...) assigns the partitions of the topics the whole name of
    which matches (as Kafka's Matcher.matches), not ``pattern-x3-decoy`` where the
    pattern only matches a prefix, and records of each matching topic arrive."""
    matching = [env.topic("pattern-x1", 2), env.topic("pattern-x2", 1)]
    decoy = env.topic("pattern-x3-decoy", 1)
    for t in [*matching, decoy]:
        env.produce(t, 3)

    async def scenario() -> None:
        async with _consumer(env, "pattern-group") as consumer:
            consumer.subscribe(pattern=r"pattern-x\d")
            records = await _read(consumer, 6)
            assert {r.topic for r in records} == set(matching)
            assert consumer.assignment() == {
                TopicPartition("pattern-x1", 0),
                TopicPartition("pattern-x1", 1),
                TopicPartition("pattern-x2", 0),
            }
            assert consumer.subscription() == set(matching)

    asyncio.run(scenario())


def test_cooperative_rebalance_revokes_only_moved_partitions(env: Env) -> None:
    """cooperative-sticky for both members: the first owns 4 partitions; when the second
    joins, the first's listener hears on_partitions_revoked with exactly the partitions
    that moved (never all 4), and every partition ends with exactly one owner."""
    topic = env.topic("cooperative", 4)
    group = "cooperative-group"
    everything = {TopicPartition(topic, p) for p in range(4)}
    revoked: list[set[TopicPartition]] = []

    class Record(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
            revoked.append(set(partitions))

    async def scenario() -> None:
        options = {"partition_assignment_strategy": ["cooperative-sticky"]}
        first = _consumer(env, group, **options)
        second = _consumer(env, group, **options)
        first.subscribe([topic], listener=Record())
        tasks = [_poll_forever(first)]
        try:
            await _wait(lambda: first.assignment() == everything, "first never owned all 4")
            assert revoked == []
            second.subscribe([topic])
            tasks.append(_poll_forever(second))

            def settled() -> bool:
                a, b = first.assignment(), second.assignment()
                return len(a) == 2 and len(b) == 2 and a | b == everything

            await _wait(
                settled,
                lambda: f"no 2+2 split: {first.assignment()} {second.assignment()}",
            )
            kept, moved = first.assignment(), second.assignment()
            assert not kept & moved
            assert revoked, "the first member revoked nothing"
            assert all(r and r <= moved for r in revoked), f"revoked {revoked}, moved {moved}"
            assert set().union(*revoked) == moved
        finally:
            for t in tasks:
                await _stop(t)
            await second.close()
            await first.close()

    asyncio.run(scenario())


def test_seek_in_on_partitions_assigned(env: Env) -> None:
    """A listener that seeks to offset 7 in on_partitions_assigned: the first records
    the consumer returns start at 7 (not at auto_offset_reset=earliest's 0)."""
    topic = env.topic("seekassigned", 1)
    env.produce(topic, 20)

    async def scenario() -> None:
        consumer = _consumer(env, "seekassigned-group")

        class SeekTo7(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                for tp in assigned:
                    consumer.seek(tp, 7)

        try:
            consumer.subscribe([topic], listener=SeekTo7())
            offsets = [r.offset for r in await _read(consumer, 13)]
            assert offsets[:13] == list(range(7, 20))
        finally:
            await consumer.close()

    asyncio.run(scenario())
