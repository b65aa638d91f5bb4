"""Consumer-group rebalance latency on a local cluster (3 controllers + 3 brokers).

Measures, with ``--members`` consumers (default 10) on a topic of ``--partitions``
partitions (default 100):

* **kill -> rebalanced**: a member stops without LeaveGroup (its process's sockets
  close, as after a crash); the time until the remaining members all hold a
  generation newer than the one before and cover every partition once. Dominated by
  ``session.timeout.ms`` (``--session-timeout-ms``, default 3000).
* **join -> first record**: a new member subscribes; the time until its first
  ``poll`` returns records (the rebalance plus the first fetch).

Usage: ``python bench/group_bench.py [--members 10] [--partitions 100] [--rounds 3]``.
Members run as AsyncConsumers on one event loop of this process; the cluster runs as
separate processes under a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from raftka.client import Admin, AsyncConsumer, NewTopic, Producer
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers

TOPIC = "group-bench"
GROUP = "group-bench"
DEADLINE_S = 60.0


class Member:
    def __init__(self, bootstrap: str, session_timeout_ms: int) -> None:
        self.consumer = AsyncConsumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=False,  # every assignment starts at 0: records at once
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=max(session_timeout_ms // 10, 50),
            max_poll_interval_ms=30_000,
            fetch_max_wait_ms=100,
            retry_backoff_ms=20,
        )
        self.consumer.subscribe([TOPIC])
        self.first_record_s: float | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.poll(100)
            if batch and self.first_record_s is None:
                self.first_record_s = time.monotonic()

    def generation(self) -> int:
        return self.consumer.group_metadata().generation_id

    async def crash(self) -> None:
        """Stop without LeaveGroup: the coordinator learns only by session expiry."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer._shutdown()  # closes sockets, sends nothing

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.close()


def _covered(members: list[Member], partitions: int, after_generation: int) -> bool:
    if any(m.generation() <= after_generation for m in members):
        return False
    if len({m.generation() for m in members}) != 1:
        return False
    owned = [tp.partition for m in members for tp in m.consumer.assignment()]
    return sorted(owned) == list(range(partitions))


async def _until(cond: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.005)  # measurement resolution


async def bench(
    bootstrap: str, members_n: int, partitions: int, rounds: int, session_ms: int
) -> None:
    members = [Member(bootstrap, session_ms) for _ in range(members_n)]
    kill_s: list[float] = []
    join_s: list[float] = []
    try:
        await _until(lambda: _covered(members, partitions, 0), "initial assignment")
        for _ in range(rounds):
            before = max(m.generation() for m in members)
            victim = members.pop()
            started = time.monotonic()
            await victim.crash()
            await _until(lambda b=before: _covered(members, partitions, b), "rebalance after kill")
            kill_s.append(time.monotonic() - started)
            before = max(m.generation() for m in members)
            started = time.monotonic()
            newcomer = Member(bootstrap, session_ms)
            members.append(newcomer)
            await _until(lambda n=newcomer: n.first_record_s is not None, "first record")
            assert newcomer.first_record_s is not None
            join_s.append(newcomer.first_record_s - started)
            await _until(lambda b=before: _covered(members, partitions, b), "rebalance after join")
    finally:
        for m in members:
            await m.close()

    def show(name: str, values: list[float]) -> None:
        ms = [v * 1000 for v in values]
        print(
            f"{name}: median {statistics.median(ms):.0f} ms, min {min(ms):.0f} ms, "
            f"max {max(ms):.0f} ms over {len(ms)} rounds"
        )

    print(f"{members_n} members, {partitions} partitions, session.timeout.ms={session_ms}")
    show("kill -> rebalanced", kill_s)
    show("join -> first record", join_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=3_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="group-bench-") as tmp,
        LocalCluster(Path(tmp)) as cluster,
    ):
        cluster.start()
        cluster.wait_leader()
        props = {
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "100",
            "group.min.session.timeout.ms": "500",
        }
        with LocalBrokers(cluster, extra_properties=props) as brokers:
            brokers.start()
            bootstrap = brokers.bootstrap_servers
            with Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=30_000) as admin:
                admin.create_topics([NewTopic(TOPIC, args.partitions, 3)])
                wait_for(lambda: TOPIC in admin.list_topics(), timeout_s=30, message="no topic")
            with Producer(bootstrap_servers=bootstrap, max_block_ms=30_000) as producer:
                for i in range(args.partitions * 20):
                    producer.send(TOPIC, b"x", partition=i % args.partitions)
                producer.flush(timeout_ms=30_000)
            asyncio.run(
                bench(
                    bootstrap,
                    args.members,
                    args.partitions,
                    args.rounds,
                    args.session_timeout_ms,
                )
            )


if __name__ == "__main__":
    main()
