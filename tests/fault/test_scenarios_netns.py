"""Jepsen-style scenarios on network-namespace hosts: the queue workload under one fault.

One cluster for the module (3 controllers on n1..n3, 3 brokers on n4..n6, each node on
its own namespace host and address); each test runs the queue workload (acks=all, RF 3,
min.insync.replicas=2, producers and manually assigned consumers on the runner) on its
own topic under a fixed fault schedule, heals, measures how long the quorum and every
partition leader take to come back, reads everything, and checks the history with the
Jepsen queue checker. Each test asserts: no lost acknowledged write, no offset with two
values, no other anomaly (polls going back included: the suite once found the consumer
resetting after a deposed leader answered, fixed with KIP-320's rules, and a test below
keeps the minimal reproduction), a complete final read,
recovery within RECOVERY_BOUND_S, and a report folder with a non-trivial timeline PNG.
Measured figures are printed (``-s``) and quoted in docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from raftka.chaos.availability import FencingWatch, first_ack_after_fault
from raftka.chaos.history import HistoryWriter
from raftka.chaos.nemesis import FaultLog, Isolate
from raftka.chaos.nodes import ChaosCluster
from raftka.chaos.runner import RunResult, ScheduledFault
from raftka.chaos.workloads import QueueConfig, QueueWorkload
from raftka.client import AsyncConsumer, AsyncProducer, TopicPartition
from raftka.common.errors import KafkaError
from raftka.local import wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow]

# The chaos cluster's broker.session.timeout.ms (raftka.chaos.nodes), in seconds.
SESSION_S = 2.5
# Issue #19's goal for a leader's isolation is session + 2 s; 1.5 s more of margin for
# a loaded CI machine.
FIRST_ACK_BOUND_S = SESSION_S + 2.0 + 1.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    data = tmp_path_factory.mktemp("chaos-netns")
    prefix = f"rks{os.getpid() % 10000:04d}"
    with ChaosCluster.create(data, placement="netns", prefix=prefix) as c:
        c.start()
        yield c


def fault_details(result: RunResult) -> list[dict[str, object]]:
    lines = (result.out_dir / "faults.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines]


def one_partition_topic(cluster: ChaosCluster, tmp_path: Path, topic: str) -> str:
    """Create a one-partition queue topic; the name of its leader broker."""
    assert cluster.netns is not None
    with HistoryWriter.open(tmp_path / "setup.jsonl") as history:
        setup = QueueWorkload(
            history=history,
            bootstrap_servers=cluster.bootstrap_servers,
            bootstrap_controllers=cluster.bootstrap_controllers,
            config=QueueConfig(topic=topic, partitions=1),
        ).setup()
        asyncio.run(setup)
    leader: str = wait_for(lambda: cluster.leader_of(topic, 0), timeout_s=20, message="no leader")
    return leader


def controller_logs(cluster: ChaosCluster) -> list[Path]:
    return [cluster.specs[n].data_dir / "process.log" for n in cluster.controller_names]


def test_active_controller_isolated(
    cluster: ChaosCluster, scenario: Callable[..., RunResult]
) -> None:
    """The active controller's host is cut off from every other host for 8 s: the other
    two controllers elect a new leader, brokers follow it, and the queue loses nothing.
    No broker is fenced: each is alive and reachable from the new majority, and its
    heartbeats must find the new active controller within a session (issue #19)."""
    watch = FencingWatch(controller_logs(cluster))
    faults = [ScheduledFault(1.5, "isolate-controller", (), 8.0)]
    scenario(cluster, "isolatectl", faults)
    assert not watch.fenced(), f"healthy brokers were fenced: {watch.fenced()}"


def test_leader_broker_isolated(cluster: ChaosCluster, scenario: Callable[..., RunResult]) -> None:
    """The host of partition 1's leader is cut off for 8 s (past the 2.5 s broker
    session): the controller fences it and elects a leader from the ISR; the old leader
    must not acknowledge writes alone, and truncates on return. The producers leave the
    zombie: the first acknowledgement on partition 1 after the isolation comes within
    FIRST_ACK_BOUND_S (issue #19)."""
    faults = [ScheduledFault(1.5, "isolate-leader", (), 8.0, (("partition", 1.0),))]
    result = scenario(cluster, "isolateleader", faults)
    took = first_ack_after_fault(result.out_dir / "history.jsonl", 1)
    print(f"first ack on partition 1 after the isolation: {took} s")
    assert took is not None and took <= FIRST_ACK_BOUND_S, (
        f"first ack on partition 1 {took} s after the isolation (bound {FIRST_ACK_BOUND_S} s)"
    )


def test_majority_minority_split(cluster: ChaosCluster, scenario: Callable[..., RunResult]) -> None:
    """A majority (c2, c3, b102, b103) and a minority (c1, b101) for 10 s: the minority's
    controller cannot lead and its broker is fenced; writes continue in the majority
    with min.insync.replicas=2 and nothing acknowledged is lost."""
    faults = [ScheduledFault(1.5, "split", ("c1", "b101"), 10.0)]
    scenario(cluster, "split", faults)


def test_consumer_never_goes_back_when_a_deposed_leader_answers(
    cluster: ChaosCluster, tmp_path: Path
) -> None:
    """Regression (the split scenario once saw polls go back): a one-partition topic
    gets 20 records, then its leader is isolated (it keeps believing it leads, with a
    log that stops at ~20). While a producer appends 300 more through the new leader, a
    consumer (metadata refreshed every 100 ms, rotating over all brokers, the deposed one
    included) reads from offset 0 for up to 10 s. Its offsets on the partition must
    only go forward: stale metadata (an older leader epoch) is ignored, fetches carry
    current_leader_epoch, and an OFFSET_OUT_OF_RANGE from a leader older than the records
    already read refreshes metadata instead of resetting the position."""
    topic = "deposed"
    leader = one_partition_topic(cluster, tmp_path, topic)
    others = [b for b in cluster.broker_names if b != leader]
    servers = [cluster.specs[b].address for b in others]

    async def produce(producer: AsyncProducer, start: int, count: int) -> None:
        for i in range(start, start + count):
            async with asyncio.timeout(10):
                await (await producer.send(topic, str(i).encode(), partition=0))

    async def body() -> list[int]:
        before = AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0)
        await produce(before, 0, 20)
        await before.close()
        isolate = Isolate(cluster.netns, cluster.host_of(leader), log=FaultLog())
        await asyncio.to_thread(isolate.apply)
        try:
            await asyncio.to_thread(
                wait_for,
                lambda: (
                    (cluster.partition_view(others[0], topic) or {}).get(0, (-1, []))[0]
                    not in (-1, int(leader[1:]))
                ),
                timeout_s=20,
                message="no new leader",
            )
            producer = AsyncProducer(
                bootstrap_servers=servers,
                linger_ms=0,
                request_timeout_ms=3000,
                delivery_timeout_ms=8000,
            )
            consumer = AsyncConsumer(
                bootstrap_servers=cluster.bootstrap_servers,
                auto_offset_reset="earliest",
                metadata_max_age_ms=100,
                request_timeout_ms=2000,
                default_api_timeout_ms=2000,
            )
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            offsets: list[int] = []
            produced = asyncio.create_task(produce(producer, 20, 300))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while loop.time() < deadline:
                with contextlib.suppress(KafkaError, TimeoutError):
                    async with asyncio.timeout(3):
                        batches = await consumer.poll(timeout_ms=100)
                    offsets += [r.offset for rs in batches.values() for r in rs]
                if offsets and offsets[-1] >= 319:
                    break
            await produced
            await producer.close()
            await consumer.close()
            return offsets
        finally:
            await asyncio.to_thread(isolate.heal)

    offsets = asyncio.run(body())
    assert offsets, "the consumer read nothing"
    backwards = [(a, b) for a, b in itertools.pairwise(offsets) if b <= a]
    assert not backwards, f"consumer went back: {backwards[:5]} (read {len(offsets)})"


def test_producer_with_default_timeouts_leaves_an_isolated_leader(
    cluster: ChaosCluster, tmp_path: Path
) -> None:
    """Issue #19, 2: a producer with Kafka's default request.timeout.ms (30 s) writes
    acks=all to a one-partition topic; its leader's host is cut off. The producer must
    not wait for the zombie's answer: its first acknowledgement after the isolation
    (through the new leader) comes within FIRST_ACK_BOUND_S, and the records it had in
    flight keep their sequence numbers (no duplicate offset for a value)."""
    topic = "zombie30"
    leader = one_partition_topic(cluster, tmp_path, topic)

    async def body() -> tuple[float, dict[int, list[int]]]:
        loop = asyncio.get_running_loop()
        acked: list[tuple[float, int, int]] = []
        producer = AsyncProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0)
        stop = asyncio.Event()

        async def produce() -> None:
            i = 0
            while not stop.is_set():
                futures = [await producer.send(topic, str(i + k).encode()) for k in range(5)]
                for k, future in enumerate(futures):
                    md = await future
                    acked.append((loop.time(), i + k, md.offset))
                i += 5

        task = asyncio.create_task(produce())
        isolate = Isolate(cluster.netns, cluster.host_of(leader), log=FaultLog())
        try:
            await asyncio.to_thread(
                lambda: wait_for(lambda: len(acked) >= 50, timeout_s=20, message="no load")
            )
            await asyncio.to_thread(isolate.apply)
            cut_at = loop.time()
            first = await asyncio.to_thread(
                lambda: wait_for(
                    lambda: next((t for t, _, _ in acked if t > cut_at + 0.3), None),
                    timeout_s=30,
                    message="no acknowledgement after the isolation",
                )
            )
        finally:
            stop.set()
            await asyncio.to_thread(isolate.heal)
        async with asyncio.timeout(60):
            await task
            await producer.close()
        by_value: dict[int, list[int]] = {}
        for _, value, offset in acked:
            by_value.setdefault(value, []).append(offset)
        return first - cut_at, by_value

    took, by_value = asyncio.run(body())
    print(f"first ack {took:.2f} s after isolating the leader (request.timeout.ms 30 s)")
    assert took <= FIRST_ACK_BOUND_S, f"first ack {took:.2f} s after the isolation"
    offsets = [o for offs in by_value.values() for o in offs]
    assert len(offsets) == len(set(offsets)), "an offset was acknowledged for two values"


# Last in the file: this scenario once left a follower busy-looping (fixed in
# Log.truncate_to; tests/unit/test_log_truncate_epochs.py), which slowed what followed.
def test_jepsen_2013_isr_shrinks_to_leader_then_leader_isolated(
    cluster: ChaosCluster, scenario: Callable[..., RunResult]
) -> None:
    """Kafka 2013: both followers of partition 0 are cut off until the ISR is the leader
    alone, then the leader is isolated instead and the followers come back. With
    min.insync.replicas=2 the lone leader may acknowledge nothing, and with unclean
    election off no out-of-date follower may take over: no acknowledged write is lost.
    The fault log must show that the ISR did shrink to the leader (else the scenario did
    not test what it claims)."""
    faults = [ScheduledFault(1.5, "jepsen-2013", (), 14.0, (("partition", 0.0),))]
    result = scenario(cluster, "jepsen2013", faults)
    starts = [e for e in fault_details(result) if e["event"] == "start"]
    detail = starts[0]["detail"]
    assert isinstance(detail, dict) and detail["isr_shrunk_to_leader"] is True, detail
