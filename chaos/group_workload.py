"""Workload (c) of the fault suite: a consumer group under faults and membership churn.

Theory of operation
-------------------
The producers are the queue workload's (idempotent, ``acks=all``, unique integers) on
one topic of 6 partitions (RF 3, ``min.insync.replicas=2``). Instead of manually
assigned readers, members of one consumer group (``<topic>-group``, eager ``range``
assignment, auto-commit off) subscribe with a rebalance listener, poll, and after each
non-empty poll commit exactly what that poll returned (``offset + 1`` per partition).
Membership churns: after ``churn_after_s`` the first member closes (leaving the group)
and a new one joins, on top of whatever the nemesis does.

What goes into the history (formats in :mod:`raftka.chaos.history`):

* ``poll`` per member (process ``member-i``), as in the queue workload;
* ``commit`` with the member id and generation the commit was sent with: ``ok``, ``fail``
  when the coordinator rejected it (CommitFailed, RebalanceInProgress, IllegalGeneration,
  UnknownMemberId: it did not happen), ``info`` on a timeout or any other error;
* ``assign`` from the listener, under process ``member-i:rebalance`` (the member's own
  process is inside its ``poll`` when the listener runs): the generation, the member id
  and the member's whole assignment after the rebalance. The checker finds a partition
  owned by two members of one generation (``split_ownership``) and a commit accepted
  from an older generation (``stale_commit``).

After the heal the runner calls :meth:`GroupWorkload.final_read`: the direct read of
every partition (the queue workload's), then a fresh member resumes from the committed
offsets and polls until it holds every partition at or past its end; that records
``group_drain``, after which an acknowledged value no poll ever returned is an anomaly
(``undelivered``): at-least-once means the group may deliver a record twice, never not
at all. Delivering twice is allowed: re-reading a position is not a ``duplicate`` (which
means one value at two positions).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from raftka.chaos.history import HistoryWriter, Json
from raftka.chaos.workloads import (
    POLL_WAIT_MS,
    REQUEST_TIMEOUT_MS,
    RETRY_PAUSE_S,
    QueueConfig,
    QueueWorkload,
    _close_quietly,
    _error,
    _record,
)
from raftka.client import AsyncConsumer, OffsetAndMetadata, TopicPartition
from raftka.client.consumer.listener import ConsumerRebalanceListener
from raftka.common.errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = ["GroupConfig", "GroupWorkload", "group_of"]

# The broker's group.min.session.timeout.ms is 6 s: the shortest session allowed, so a
# killed member or coordinator is noticed within a few seconds of a short run.
SESSION_TIMEOUT_MS: Final = 6_000
HEARTBEAT_INTERVAL_MS: Final = 1_000
# Also the rebalance timeout: a rebalance waits at most this long for a silent member.
MAX_POLL_INTERVAL_MS: Final = 10_000
# The group drain: the fresh member's polls until it holds every partition at its end.
DRAIN_POLLS_MAX: Final = 100_000

# The coordinator rejected the commit: it certainly did not take effect.
_COMMIT_REJECTED: Final = (
    CommitFailedError,
    RebalanceInProgressError,
    IllegalGenerationError,
    UnknownMemberIdError,
)


def group_of(topic: str) -> str:
    """The consumer group the workload on ``topic`` uses (nemeses target its coordinator)."""
    return f"{topic}-group"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig(QueueConfig):
    partitions: int = 6
    consumers: int = 0  # no manually assigned readers: the group members read
    members: int = 3
    churn_after_s: float | None = 5.0  # None: no churn


class _Recorder(ConsumerRebalanceListener):
    """Records each assignment as an ``assign`` op of ``<member>:rebalance``."""

    def __init__(self, history: HistoryWriter, name: str, group: str) -> None:
        self.history = history
        self.name = name
        self.group = group
        self.consumer: AsyncConsumer | None = None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self.consumer is not None, "listener used before its consumer was set"
        meta = self.consumer.group_metadata()
        process = f"{self.name}:rebalance"
        inv = self.history.invoke(process, "assign", {"consumer": self.name, "group": self.group})
        partitions: list[Json] = [
            {"topic": tp.topic, "partition": tp.partition}
            for tp in sorted(self.consumer.assignment())
        ]
        self.history.ok(
            inv,
            {
                "group": self.group,
                "member": meta.member_id,
                "generation": meta.generation_id,
                "consumer": self.name,
                "partitions": partitions,
            },
        )


class GroupWorkload(QueueWorkload):
    """The queue workload's producers, read by a churning consumer group."""

    def __init__(
        self,
        *,
        history: HistoryWriter,
        bootstrap_servers: Sequence[str],
        bootstrap_controllers: Sequence[str],
        config: GroupConfig = GroupConfig(),
    ) -> None:
        super().__init__(
            history=history,
            bootstrap_servers=bootstrap_servers,
            bootstrap_controllers=bootstrap_controllers,
            config=config,
        )
        self.group_config = config
        self.group = group_of(config.topic)

    async def run(self, stop: threading.Event) -> None:
        c = self.group_config
        tasks = [self._producer(i, stop) for i in range(c.producers)]
        leave = asyncio.Event()
        tasks.append(self._member("member-0", stop, leave))
        tasks += [self._member(f"member-{i}", stop, None) for i in range(1, c.members)]
        if c.churn_after_s is not None:
            tasks.append(self._churn(c.churn_after_s, stop, leave))
        await asyncio.gather(*tasks)

    async def _churn(self, after_s: float, stop: threading.Event, leave: asyncio.Event) -> None:
        """After ``after_s``: member-0 leaves, a new member joins (unless stopped first)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + after_s
        while not stop.is_set() and loop.time() < deadline:
            await asyncio.sleep(RETRY_PAUSE_S)
        if stop.is_set():
            return
        leave.set()
        await self._member(f"member-{self.group_config.members}", stop, None)

    def _group_consumer(self, name: str) -> tuple[AsyncConsumer, _Recorder]:
        recorder = _Recorder(self.history, name, self.group)
        consumer = AsyncConsumer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=f"chaos-{name}",
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            default_api_timeout_ms=REQUEST_TIMEOUT_MS,
            metadata_max_age_ms=2_000,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            partition_assignment_strategy=("range",),
        )
        recorder.consumer = consumer
        consumer.subscribe([self.config.topic], listener=recorder)
        return consumer, recorder

    async def _poll(self, consumer: AsyncConsumer, name: str) -> list[dict[str, Json]] | None:
        """One recorded poll: its records, or None when the outcome is unknown."""
        inv = self.history.invoke(name, "poll", {"consumer": name})
        try:
            async with asyncio.timeout(self.config.op_timeout_s):
                batches = await consumer.poll(timeout_ms=POLL_WAIT_MS)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc))
            return None
        records = [_record(r) for tp in sorted(batches) for r in batches[tp]]
        self.history.ok(inv, {"consumer": name, "records": records})
        return records

    async def _member(self, name: str, stop: threading.Event, leave: asyncio.Event | None) -> None:
        consumer, _ = self._group_consumer(name)
        try:
            while not stop.is_set() and not (leave is not None and leave.is_set()):
                records = await self._poll(consumer, name)
                if records is None:
                    await asyncio.sleep(RETRY_PAUSE_S)
                elif records:
                    await self._commit(consumer, name, records)
        finally:
            await _close_quietly(consumer, self.config.op_timeout_s)

    async def _commit(
        self, consumer: AsyncConsumer, name: str, records: list[dict[str, Json]]
    ) -> None:
        """Commit what one poll returned: the next offset of each partition it touched."""
        nexts: dict[TopicPartition, int] = {}
        for r in records:
            topic, partition, offset = r["topic"], r["partition"], r["offset"]
            assert isinstance(topic, str) and isinstance(partition, int)
            assert isinstance(offset, int)
            tp = TopicPartition(topic, partition)
            nexts[tp] = max(nexts.get(tp, 0), offset + 1)
        meta = consumer.group_metadata()
        value: dict[str, Json] = {
            "group": self.group,
            "member": meta.member_id,
            "generation": meta.generation_id,
            "offsets": [
                {"topic": tp.topic, "partition": tp.partition, "offset": o}
                for tp, o in sorted(nexts.items())
            ],
        }
        inv = self.history.invoke(name, "commit", value)
        try:
            async with asyncio.timeout(self.config.op_timeout_s):
                await consumer.commit(
                    {tp: OffsetAndMetadata(o) for tp, o in nexts.items()},
                    timeout_ms=int(self.config.op_timeout_s * 1000) - 500,
                )
        except _COMMIT_REJECTED as exc:
            self.history.fail(inv, _error(exc), value)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc), value)
        else:
            self.history.ok(inv, value)

    # --- after healing ---------------------------------------------------------------

    async def final_read(self, timeout_s: float) -> bool:
        """The direct read of every partition, then the group drain (see the module
        doc), each within ``timeout_s``. Returns whether both completed."""
        direct = await super().final_read(timeout_s)
        return await self.drain(timeout_s) and direct

    async def drain(self, timeout_s: float) -> bool:
        """A fresh member resumes from the committed offsets and polls until it holds
        every partition at or past its end (taken first); records ``group_drain`` ok,
        or info if that did not happen within ``timeout_s``."""
        name = "group-reader"
        inv = self.history.invoke("group-drain", "group_drain", {"group": self.group})
        consumer, _ = self._group_consumer(name)
        try:
            async with asyncio.timeout(timeout_s):
                await self._drain(consumer, name)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.history.info(inv, _error(exc), {"group": self.group})
            return False
        finally:
            await _close_quietly(consumer, self.config.op_timeout_s)
        self.history.ok(inv, {"group": self.group})
        return True

    async def _drain(self, consumer: AsyncConsumer, name: str) -> None:
        while True:
            try:
                ends = await consumer.end_offsets(self.partitions, timeout_ms=REQUEST_TIMEOUT_MS)
                break
            except KafkaError:
                await asyncio.sleep(RETRY_PAUSE_S)
        for _ in range(DRAIN_POLLS_MAX):
            if await self._poll(consumer, name) is None:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if consumer.assignment() != set(self.partitions):
                continue  # still joining (or the group has not settled)
            try:
                behind = [
                    tp
                    for tp in self.partitions
                    if await consumer.position(tp, timeout_ms=REQUEST_TIMEOUT_MS) < ends[tp]
                ]
            except KafkaError:
                continue
            if not behind:
                return
        raise TimeoutError(f"group drain: not at the end after {DRAIN_POLLS_MAX} polls")
