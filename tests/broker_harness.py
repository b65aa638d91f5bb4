"""Broker 1 in process, for the tests of the ReplicaManager and the services around it.

Test modules cannot import each other (``--import-mode=importlib``), so the set-up they
share lives here, on pytest's ``pythonpath``: the broker's config (nothing listens, no
controller), the metadata fetch answers a controller would give, the brokers' registration
records, a fake clock, and :class:`BrokerHarness`, a ReplicaManager over real segment logs
in a temp dir that is fed committed metadata through a MetadataApplier as the broker's
metadata follower feeds it. No sockets. Each test module subclasses the harness with the
produce/fetch helpers and the topic layout it needs.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from raftka.broker.config import BrokerConfig
from raftka.broker.metadata_follower import MetadataApplier, MetadataUpdate
from raftka.broker.replication.manager import FetchPartition, ReplicaManager
from raftka.metadata.metadata_records import Endpoint, MetadataRecord, RegisterBrokerRecord
from raftka.storage.cleaner import LogCleaner
from raftka.storage.log_manager import LogManager


def run(body: Callable[[], Awaitable[None]]) -> None:
    """Run a test's async body on a fresh loop."""
    asyncio.run(body())  # type: ignore[arg-type]


#: How long ``until`` waits for a condition before failing.
UNTIL_DEADLINE_S = 10.0


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait (on the loop) until ``check()``; fail naming ``what`` after the deadline."""
    deadline = time.monotonic() + UNTIL_DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)  # a poll of a condition with a deadline


class Clock:
    """A fake millisecond clock that moves only when a test moves ``now_ms``."""

    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def broker_config(root: Path, **overrides: Any) -> BrokerConfig:
    """Broker 1's config, its log dir ``root/logs``; the listener and controller
    addresses are never dialled (tests drive the ReplicaManager directly)."""
    return BrokerConfig(
        node_id=1,
        listen_host="127.0.0.1",
        listen_port=1,
        advertised_host="127.0.0.1",
        advertised_port=1,
        log_dirs=(root / "logs",),
        controllers=("127.0.0.1:2",),
        **overrides,
    )


def register_brokers(ids: Iterable[int] = (1, 2, 3)) -> list[MetadataRecord]:
    """A registration for each broker id, with broker epoch = id and port 9000 + id.

    Unfenced: a fenced broker's follower fetches are refused (KIP-903), and a controller
    elects no fenced leader."""
    return [
        RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=str(uuid.uuid4()),
            broker_epoch=b,
            endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
            fenced=False,
        )
        for b in ids
    ]


def metadata_answer(
    payloads: Sequence[Sequence[MetadataRecord]], first_offset: int, *, high_watermark: int
) -> dict[str, Any]:
    """A controller's metadata fetch answer (its JSON form): one batch per payload, at
    offsets from ``first_offset``, all of epoch 1; no snapshot."""
    return {
        "snapshot": None,
        "batches": [
            {"offset": first_offset + i, "epoch": 1, "records": [r.to_dict() for r in records]}
            for i, records in enumerate(payloads)
        ],
        "next_offset": first_offset + len(payloads),
        "high_watermark": high_watermark,
    }


class BrokerHarness:
    """Broker 1's ReplicaManager over real segment logs under ``root/logs``.

    ``clock`` (the fake :class:`Clock`, or any ms clock) drives both the manager and its
    logs, as one broker has one clock; without it they use their real clocks. ``config``
    overrides BrokerConfig fields. The broker's epoch is 1; AlterPartition is not
    answered (a test that expects ISR changes replaces ``manager.alter_partition``).
    """

    def __init__(
        self,
        root: Path,
        *,
        clock: Callable[[], int] | None = None,
        cleaner: LogCleaner | None = None,
        **config: Any,
    ) -> None:
        self.config = broker_config(root, **config)
        clocked: dict[str, Any] = {} if clock is None else {"clock_ms": clock}
        self.logs = LogManager(self.config.log_dirs, cleaner=cleaner, **clocked)
        self.manager = ReplicaManager(config=self.config, logs=self.logs, **clocked)
        self.manager.broker_epoch = lambda: 1
        self.applier = MetadataApplier(broker_id=1)
        self.offset = 0

    def _updates(self, records: Sequence[MetadataRecord]) -> Iterator[MetadataUpdate]:
        """The updates of the next committed batch, ``records``."""
        self.offset += 1
        answer = metadata_answer([records], self.offset, high_watermark=self.offset + 1)
        return self.applier.apply_answer(answer)

    def commit(self, *records: MetadataRecord) -> None:
        """Commit ``records`` as one batch and apply it (the manager's synchronous path)."""
        for image, changes in self._updates(records):
            self.manager.apply_metadata(image, changes)

    async def commit_on_workers(self, *records: MetadataRecord) -> None:
        """Commit ``records`` as one batch and apply it as the broker does: new logs are
        opened on the I/O workers first (``ReplicaManager.on_metadata``)."""
        for image, changes in self._updates(records):
            await self.manager.on_metadata(image, changes)

    async def consume(self, offset: int = 0, max_wait_ms: int = 0) -> Any:
        """A consumer's fetch of ``t-0`` from ``offset`` (reads below the HW only)."""
        (result,) = await self.manager.fetch(
            replica_id=-1,
            broker_epoch=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            partitions=[FetchPartition("t", 0, offset)],
        )
        return result


class AppendGate:
    """Wraps a log's ``append_as_leader`` so each call waits for ``open`` on its worker
    thread (a slow disk), counting calls in flight at once."""

    def __init__(self, log: Any) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.running = 0
        self.max_running = 0
        self._lock = threading.Lock()
        self._real = log.append_as_leader
        log.append_as_leader = self

    def __call__(self, data: bytes, epoch: int) -> Any:
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        self.entered.set()
        try:
            self.open.wait(UNTIL_DEADLINE_S)
            return self._real(data, epoch)
        finally:
            with self._lock:
                self.running -= 1
