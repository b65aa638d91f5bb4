"""The consumer-group workload's history as the checker reads it: the listener's
``assign`` records, ``undelivered`` after a group drain, and re-delivery allowed."""

from __future__ import annotations

import io
from typing import Any, cast

from raftka.chaos.checker import check
from raftka.chaos.group_workload import GroupConfig, _Recorder, group_of
from raftka.chaos.history import History, HistoryWriter, parse_lines
from raftka.client import AsyncConsumer, TopicPartition
from raftka.client.consumer.listener import ConsumerGroupMetadata


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        self.now_ns += 1_000_000
        return self.now_ns


class FakeMember:
    """What the listener reads from its consumer: the group metadata and assignment."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.generation = 0
        self.partitions: set[TopicPartition] = set()

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", self.generation, self.member_id, None)

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)


class Script:
    """Builds a group history through the workload's own listener."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.writer = HistoryWriter(self.buffer, monotonic_ns=FakeClock(), wall_time=lambda: 1.7e9)
        self.members: dict[str, tuple[FakeMember, _Recorder]] = {}

    def op(self, process: str, f: str, value: Any, result: Any = None) -> None:
        inv = self.writer.invoke(process, f, value)
        self.writer.ok(inv, value if result is None else result)

    def send(self, value: int, partition: int, offset: int) -> None:
        self.op(
            "p",
            "send",
            {"topic": "t", "partition": partition, "value": value},
            {"partition": partition, "offset": offset},
        )

    def assign(self, name: str, generation: int, *partitions: int) -> None:
        if name not in self.members:
            fake = FakeMember(f"{name}-id")
            recorder = _Recorder(self.writer, name, "g")
            recorder.consumer = cast(AsyncConsumer, fake)
            self.members[name] = (fake, recorder)
        fake, recorder = self.members[name]
        fake.generation = generation
        fake.partitions = {TopicPartition("t", p) for p in partitions}
        recorder.on_partitions_assigned(set(fake.partitions))

    def poll(self, name: str, *records: tuple[int, int, int]) -> None:
        rs = [{"topic": "t", "partition": p, "offset": o, "value": v} for p, o, v in records]
        self.op(name, "poll", {"consumer": name}, {"consumer": name, "records": rs})

    def final(self, *records: tuple[int, int, int]) -> None:
        rs = [{"topic": "t", "partition": p, "offset": o, "value": v} for p, o, v in records]
        self.op("reader", "final_read", {}, {"records": rs})

    def drain(self) -> None:
        self.op("group-drain", "group_drain", {"group": "g"})

    def history(self) -> History:
        return parse_lines(self.buffer.getvalue().splitlines(keepends=True))


def base() -> Script:
    """Values 0 (p0@0), 1 (p1@0), 2 (p0@1) acked; a and b share the group in generation 1,
    a leaves and generation 2 gives b both partitions; b re-reads p0 from a's last
    committed offset (value 0 delivered twice: at-least-once)."""
    s = Script()
    s.send(0, 0, 0)
    s.send(1, 1, 0)
    s.send(2, 0, 1)
    s.assign("a", 1, 0)
    s.assign("b", 1, 1)
    s.poll("a", (0, 0, 0))
    s.poll("b", (1, 0, 1))
    s.assign("b", 2, 0, 1)
    s.poll("b", (0, 0, 0), (0, 1, 2))
    s.final((0, 0, 0), (0, 1, 2), (1, 0, 1))
    return s


def test_redelivery_through_the_group_is_valid() -> None:
    """The base history delivers value 0 twice (two members, same position) and then
    drains: valid, with no duplicate, split ownership or undelivered value."""
    s = base()
    s.drain()
    result = check(s.history())
    assert result.valid, result.summary()
    assert result.ops["assign"] == {"ok": 3}


def test_listener_records_two_owners_in_one_generation() -> None:
    """b's assignment in generation 1 also holds a's partition 0: the listener's assign
    records make the checker report split_ownership naming both members."""
    s = Script()
    s.send(0, 0, 0)
    s.assign("a", 1, 0)
    s.assign("b", 1, 0, 1)
    s.poll("a", (0, 0, 0))
    s.final((0, 0, 0))
    result = check(s.history())
    assert not result.valid
    assert [k for k in result.found() if k != "unseen"] == ["split_ownership"], result.summary()
    example = result.anomalies["split_ownership"].examples[0]
    assert [m["member"] for m in example["members"]] == ["a-id", "b-id"]


def test_undelivered_after_a_drain() -> None:
    """Value 2 (acked at p0@1) is never polled; after an ok group drain that is an
    anomaly (the group committed past it), before one it is only unseen."""
    s = base()
    s.send(3, 1, 1)
    s.final((1, 1, 3))
    no_drain = check(s.history())
    assert no_drain.valid, no_drain.summary()
    assert no_drain.counts["unseen"] == 1 and no_drain.counts["undelivered"] == 0
    s.drain()
    drained = check(s.history())
    assert not drained.valid
    assert [k for k in drained.found() if k != "unseen"] == ["undelivered"], drained.summary()
    assert drained.anomalies["undelivered"].examples[0]["value"] == 3


def test_group_of_and_config() -> None:
    """The group name derives from the topic (nemeses find its coordinator by it); the
    workload's defaults read with 6 partitions, 3 members and no manual readers."""
    assert group_of("orders") == "orders-group"
    c = GroupConfig()
    assert (c.partitions, c.members, c.consumers, c.min_insync_replicas) == (6, 3, 0, 2)
