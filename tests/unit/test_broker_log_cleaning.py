"""The broker's log cleaner service (broker/log_cleaning.py) and the hooks it needs in
the ReplicaManager, in process: real segment logs in a temp dir, no sockets.

- A cleaner pass runs beside the partition: produces to it are appended and acked,
  parked fetches return the new records, while the pass rewrites. Only its exclusive
  steps (start, swaps, checkpoint) hold the log: then produces wait (and complete once
  it is given back), consumer fetches read nothing and park, ListOffsets by timestamp
  is OFFSET_NOT_AVAILABLE. Retention skips a log being cleaned; a truncation into the
  range aborts the pass; a delete aborts it and happens when it ends.
- The service cleans the dirtiest compacted log; the read-back holds the latest value of
  each key at its original offset; /health counters move.
- A follower truncation moves the cleaner checkpoint down; a delete forgets it.
- Shutdown waits for a running pass; a KafkaStorageError reopens the log.
- The broker's log.cleaner.* keys, and the controller's refusal of topic configs the
  broker cannot honour (the broker's own LogConfig rules, unimplemented keys by name).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from broker_harness import BrokerHarness, register_brokers, run

from raftka.broker.config import BrokerConfig, load_broker_config
from raftka.broker.coordinator.group_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    offset_commit_record,
)
from raftka.broker.coordinator.service import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    GroupCoordinatorService,
)
from raftka.broker.log_cleaning import LogCleanerService
from raftka.common.errors import InvalidConfigError, KafkaStorageError
from raftka.common.record import Record, build_batch, decode_batches, iter_records
from raftka.common.record.batch import decode_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.common.structs import TopicPartition
from raftka.metadata.metadata_records import (
    ConfigRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftka.metadata.topic_config import (
    LOG_CONFIG_KEYS,
    TOPIC_CONFIGS,
    validate_topic_config,
    validate_topic_configs,
)
from raftka.server_common.process_config import ConfigError
from raftka.storage import Log
from raftka.storage import cleaner as cleaner_module
from raftka.storage.cleaner import CleanerStats, LogCleaner, read_cleaner_checkpoint

TOPIC_ID = str(uuid.uuid4())
TP = ("t", 0)
COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
}


class _Harness(BrokerHarness):
    """One broker (id 1) leading ``t-0`` alone (ISR {1}), its topic configs given."""

    def __init__(
        self,
        tmp_path: Path,
        configs: Mapping[str, str],
        cleaner: LogCleaner,
        *,
        topic: str = "t",
    ) -> None:
        super().__init__(tmp_path, cleaner=cleaner)
        self.topic = topic
        self.commit(
            *register_brokers(),
            TopicRecord(name=topic, topic_id=TOPIC_ID),
            *[ConfigRecord("topic", topic, k, v) for k, v in configs.items()],
            PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=(1,), isr=(1,), leader=1),
        )

    async def produce(
        self, *pairs: tuple[bytes, bytes | None], timeout_ms: int = 5_000, age_ms: int = 0
    ) -> Any:
        now = int(time.time() * 1000) - age_ms
        batch = build_batch([Record(v, key=k, timestamp_ms=now) for k, v in pairs])
        (result,) = await self.manager.produce(
            acks=1, timeout_ms=timeout_ms, entries=[(self.topic, 0, batch)]
        )
        return result

    async def read_all(self, offset: int = 0) -> list[Any]:
        """Every record from ``offset`` below the HW (a fetch answers from one segment
        at a time)."""
        out: list[Any] = []
        while True:
            result = await self.consume(offset)
            assert result.error is None, result
            batches = list(decode_batches(result.records))
            if not batches:
                return out
            for batch in batches:
                out += [r for r in batch.records if r.offset >= offset]
                offset = max(offset, batch.header.next_offset)

    def log(self) -> Log:
        found = self.logs.get((self.topic, 0))
        assert found is not None
        return found


async def _fill(h: _Harness, rounds: int = 6, keys: int = 8) -> dict[bytes, tuple[int, bytes]]:
    """``rounds`` updates of ``keys`` keys, one produce per round, rolled into several
    segments by segment.bytes; the latest (offset, value) of each key."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        pairs = [(f"k{i}".encode(), f"v{r}-{i}".encode() * 8) for i in range(keys)]
        result = await h.produce(*pairs)
        assert result.error is None, result
        for i, (k, v) in enumerate(pairs):
            latest[k] = (result.base_offset + i, v)
    return latest


async def _cleanable(
    tmp_path: Path, cleaner: LogCleaner
) -> tuple[_Harness, dict[bytes, tuple[int, bytes]], LogCleanerService]:
    """A harness over ``cleaner`` whose ``t-0`` is filled (:func:`_fill`, its latest
    values returned) and rolled past, so every filled segment is cleanable; and the
    service to clean it."""
    h = _Harness(tmp_path, COMPACT, cleaner)
    latest = await _fill(h)
    await h.produce((b"roll", b"r"))  # the fill's last segment is not the active one
    return h, latest, LogCleanerService(h.manager, cleaner, backoff_ms=10_000)


def test_a_held_log_queues_produces_parks_fetches_and_defers_a_delete(tmp_path: Path) -> None:
    async def body() -> None:
        cleaner = LogCleaner()
        h = _Harness(tmp_path, COMPACT, cleaner)
        await _fill(h)
        end = h.log().log_end_offset
        handed = h.manager.begin_clean(TP)
        assert handed is not None and handed[0] is h.log()
        assert h.manager.begin_clean(TP) is None, "one pass per log"
        # One exclusive step of the pass (a swap) holds the log.
        assert await h.manager.hold_for_cleaner(TP)
        produce = asyncio.create_task(h.produce((b"k0", b"late")))
        fetch = asyncio.create_task(h.consume(end, max_wait_ms=10_000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not produce.done() and not fetch.done()
        assert h.log().log_end_offset == end, "nothing appended while the cleaner holds it"
        empty = await h.consume(0)
        assert empty.error is None and empty.records == b""
        (by_time,) = h.manager.list_offsets([("t", 0, 0)])
        assert by_time.error is not None and by_time.error.name == "OFFSET_NOT_AVAILABLE"
        # A consumer's own error needs no log: answered at once.
        beyond = await h.consume(end + 100)
        assert beyond.error is not None and beyond.error.name == "OFFSET_OUT_OF_RANGE"
        # DeleteRecords moves the log start but leaves the segments to retention.
        segments = h.log().segment_count
        second = h.log().segment_base_offsets[1]
        target, _ = h.manager.partitions[TP].replica.delete_records(second)
        assert target == second and h.log().log_start_offset == second
        assert h.log().segment_count == segments
        assert h.manager.enforce_retention() == 0, "retention skips a log being cleaned"
        h.manager.release_cleaner(TP)
        # The step is over, the pass goes on: the produce and the fetch complete.
        appended = await asyncio.wait_for(produce, 5)
        assert appended.error is None and appended.base_offset == end
        woken = await asyncio.wait_for(fetch, 5)
        assert [r.value for r in iter_records(woken.records)] == [b"late"]
        assert h.manager.enforce_retention() == 0, "retention skips a log being cleaned"
        h.manager.end_clean(TP)
        assert h.manager.enforce_retention() == 1, "the segment below the start goes now"

        # A produce waits no longer than its timeout: REQUEST_TIMED_OUT (retriable).
        handed = h.manager.begin_clean(TP)
        assert handed is not None and await h.manager.hold_for_cleaner(TP)
        late = await h.produce((b"k1", b"x"), timeout_ms=20)
        assert late.error is not None and late.error.name == "REQUEST_TIMED_OUT"
        h.manager.release_cleaner(TP)
        # A topic delete during a pass asks it to abort and happens when it ends.
        h.commit(RemoveTopicRecord(topic_id=TOPIC_ID))
        assert handed[2].is_set(), "the pass was not asked to abort"
        assert not await h.manager.hold_for_cleaner(TP), "an aborted pass swaps nothing"
        assert TP in h.manager.partitions and h.logs.get(TP) is not None
        h.manager.end_clean(TP)
        assert TP not in h.manager.partitions and h.logs.get(TP) is None
        await h.manager.close()

    run(body)


def test_service_cleans_latest_values_at_original_offsets_and_counts(tmp_path: Path) -> None:
    async def body() -> None:
        h, latest, service = await _cleanable(tmp_path, LogCleaner())
        assert service.choose(int(time.time() * 1000)) == TP
        before = h.log().size_bytes
        stats = await service.clean_one()
        assert stats is not None and stats.cleaned, stats
        assert h.log().size_bytes < before
        assert not h.manager.is_cleaning(TP)
        health = service.health()
        assert health["passes_started"] == 1 and health["passes_cleaned"] == 1
        assert health["last_cleaned"] == "t-0" and health["cleaning"] is None
        assert read_cleaner_checkpoint(h.log().path.parent)[TP] == stats.end_offset
        records = await h.read_all()
        got = {r.key: (r.offset, r.value) for r in records}
        for key, (offset, value) in latest.items():
            assert got[key] == (offset, value)
        below = [r.key for r in records if r.offset < stats.end_offset]
        assert len(below) == len(set(below)), "one record per key in the cleaned section"
        # Nothing dirty is left: the next look finds no work.
        assert await service.clean_one() is None
        await service.close()
        await h.manager.close()

    run(body)


def test_truncation_moves_the_checkpoint_down_and_delete_forgets_it(tmp_path: Path) -> None:
    async def body() -> None:
        h, _, service = await _cleanable(tmp_path, LogCleaner())
        stats = await service.clean_one()
        assert stats is not None and stats.cleaned
        data_dir = h.log().path.parent
        assert read_cleaner_checkpoint(data_dir)[TP] == stats.end_offset
        h.manager.partitions[TP].replica.log.truncate_to(stats.end_offset - 3)
        assert read_cleaner_checkpoint(data_dir)[TP] == stats.end_offset - 3
        h.manager.stop_replica(TP, delete=True, topic_id=TOPIC_ID)
        assert TP not in read_cleaner_checkpoint(data_dir)
        await service.close()
        await h.manager.close()

    run(body)


class _BlockingCleaner(LogCleaner):
    """clean_once waits for ``release`` (a pass in progress), then raises ``error``."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()
        self.error = error

    def clean_once(self, log: Log, now_ms: int, **kwargs: Any) -> CleanerStats:
        self.started.set()
        assert self.release.wait(10), "never released"
        if self.error is not None:
            raise self.error
        return super().clean_once(log, now_ms, **kwargs)


def test_shutdown_waits_for_a_running_pass(tmp_path: Path) -> None:
    async def body() -> None:
        cleaner = _BlockingCleaner()
        h, _, service = await _cleanable(tmp_path, cleaner)
        run = asyncio.create_task(service.run())
        assert await asyncio.to_thread(cleaner.started.wait, 10)
        assert h.manager.is_cleaning(TP) and service.health()["cleaning"] == "t-0"
        closing = asyncio.create_task(service.close())
        run.cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        assert not closing.done(), "close returned under a running pass"
        assert h.manager.is_cleaning(TP), "the log was given back under a running pass"
        cleaner.release.set()
        await asyncio.wait_for(closing, 10)
        with pytest.raises(asyncio.CancelledError):
            await run
        assert not h.manager.is_cleaning(TP)
        await h.manager.close()

    run(body)


def test_a_storage_error_reopens_the_log(tmp_path: Path) -> None:
    async def body() -> None:
        cleaner = _BlockingCleaner(KafkaStorageError("disk on fire"))
        cleaner.release.set()
        h, latest, service = await _cleanable(tmp_path, cleaner)
        old = h.manager.partitions[TP]
        assert await service.clean_one() is None
        assert service.health()["storage_errors"] == 1
        new = h.manager.partitions[TP]
        assert new is not old and new.log is not old.log and new.state.is_leader
        got = {r.key: (r.offset, r.value) for r in await h.read_all()}
        assert all(got[k] == v for k, v in latest.items())
        await service.close()
        await h.manager.close()

    run(body)


# ------------------------------------------------- a pass beside the partition's traffic


class _Pause:
    """Stops the next cleaner pass once its first group's ``.cleaned`` file is written
    (before its swap; the pass holds nothing then) until :meth:`resume`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

        def point(step: str) -> None:
            if step == "fsync .cleaned" and not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(10), "the test never resumed the pass"

        monkeypatch.setattr(cleaner_module, "_crash_point", point)

    async def start(
        self, h: _Harness, service: LogCleanerService
    ) -> asyncio.Task[CleanerStats | None]:
        """A pass over t-0, stopped; started again if it found the log held by an I/O
        worker's job (a producer-state snapshot after a roll), as run() would."""
        deadline = time.monotonic() + 10
        while True:  # bounded by the deadline
            await h.manager.wait_clean_ended(TP)
            task = asyncio.create_task(service.clean_one())
            while not task.done():
                if await asyncio.to_thread(self.reached.wait, 0.05):
                    return task
            assert task.result() is None, f"the pass ended without stopping: {task}"
            assert time.monotonic() < deadline, f"no pass started: {service.health()}"

    def resume(self) -> None:
        self.go.set()


def test_produces_and_fetches_go_on_during_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        h, latest, service = await _cleanable(tmp_path, LogCleaner())
        pause = _Pause(monkeypatch)
        task = await pause.start(h, service)
        assert h.manager.is_cleaning(TP) and service.health()["cleaning"] == "t-0"
        end = h.log().log_end_offset
        fetch = asyncio.create_task(h.consume(end, max_wait_ms=10_000))
        appended = await asyncio.wait_for(h.produce((b"k0", b"during")), 5)
        assert appended.error is None and appended.base_offset == end
        woken = await asyncio.wait_for(fetch, 5)
        assert [r.value for r in iter_records(woken.records)] == [b"during"]
        assert not task.done(), "the pass ended before the produce: nothing was shown"
        pause.resume()
        stats = await asyncio.wait_for(task, 10)
        assert stats is not None and stats.cleaned, stats
        got = {r.key: (r.offset, r.value) for r in await h.read_all()}
        assert got[b"k0"] == (end, b"during")
        assert all(got[k] == v for k, v in latest.items() if k != b"k0")
        await service.close()
        await h.manager.close()

    run(body)


def test_a_truncation_during_a_pass_aborts_it_and_keeps_every_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        h, _, service = await _cleanable(tmp_path, LogCleaner())
        before = [(r.offset, r.key, r.value) for r in await h.read_all()]
        pause = _Pause(monkeypatch)
        task = await pause.start(h, service)
        # Into the second segment, below the pass's end (the active segment's base).
        cut = h.log().segment_base_offsets[1] + 1
        h.manager.partitions[TP].replica.log.truncate_to(cut)
        cut = h.log().log_end_offset  # the base of the batch holding the cut
        pause.resume()
        stats = await asyncio.wait_for(task, 10)
        assert stats is not None and stats.aborted and "truncated" in stats.reason, stats
        assert service.health()["passes_aborted"] == 1
        after = [(r.offset, r.key, r.value) for r in await h.read_all()]
        assert after == [row for row in before if row[0] < cut]
        assert not [n.name for n in h.log().path.iterdir() if n.suffix in (".cleaned", ".swap")]
        # The next pass cleans what the truncation left.
        again = await service.clean_one()
        assert again is not None and again.cleaned, again
        await service.close()
        await h.manager.close()

    run(body)


def test_delete_records_and_retention_during_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords moves the log start at once; retention leaves the segments below it
    until the pass ends (Kafka's retention skips a log being cleaned)."""

    async def body() -> None:
        h, latest, service = await _cleanable(tmp_path, LogCleaner())
        pause = _Pause(monkeypatch)
        task = await pause.start(h, service)
        start = h.log().segment_base_offsets[1]
        target, _ = h.manager.partitions[TP].replica.delete_records(start)
        assert target == start and h.log().log_start_offset == start
        assert await h.manager.enforce_retention_on_workers() == 0
        pause.resume()
        stats = await asyncio.wait_for(task, 10)
        assert stats is not None and stats.cleaned, stats
        assert h.log().log_start_offset == start
        assert await h.manager.enforce_retention_on_workers() >= 1
        got = {r.key: (r.offset, r.value) for r in await h.read_all(start)}
        assert all(got[k] == v for k, v in latest.items() if v[0] >= start)
        await service.close()
        await h.manager.close()

    run(body)


def test_a_topic_delete_during_a_pass_aborts_it_then_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        h, _, service = await _cleanable(tmp_path, LogCleaner())
        path = h.log().path
        pause = _Pause(monkeypatch)
        task = await pause.start(h, service)
        h.commit(RemoveTopicRecord(topic_id=TOPIC_ID))
        assert TP in h.manager.partitions, "the delete waits for the pass"
        pause.resume()
        stats = await asyncio.wait_for(task, 10)
        assert stats is not None and stats.aborted, stats
        assert TP not in h.manager.partitions and h.logs.get(TP) is None
        assert not path.exists()
        await service.close()
        await h.manager.close()

    run(body)


# ------------------------------------------------------------------- configuration


def _broker(tmp_path: Path, extra: str) -> BrokerConfig:
    path = tmp_path / "broker.properties"
    path.write_text(
        "node.id=101\nprocess.roles=broker\n"
        "controller.quorum.voters=1@127.0.0.1:9093\n"
        f"listeners=PLAINTEXT://127.0.0.1:9092\nlog.dirs={tmp_path}/logs\n" + extra
    )
    return load_broker_config(path)


def test_broker_cleaner_keys_have_kafkas_defaults_and_refuse_what_raftka_cannot_do(
    tmp_path: Path,
) -> None:
    config = _broker(tmp_path, "")
    assert config.log_cleaner_enable is True and config.log_cleaner_backoff_ms == 15_000
    assert config.cleaner_config().dedupe_buffer_bytes == 128 * 1024 * 1024
    config = _broker(
        tmp_path,
        "log.cleaner.enable=false\nlog.cleaner.backoff.ms=50\n"
        "log.cleaner.dedupe.buffer.size=1048576\nlog.cleaner.threads=1\n",
    )
    assert not config.log_cleaner_enable and config.log_cleaner_backoff_ms == 50
    assert config.cleaner_config().dedupe_buffer_bytes == 1_048_576
    for extra, needle in [
        ("log.cleaner.threads=2\n", "log.cleaner.threads"),
        ("log.cleaner.dedupe.buffer.size=1\n", "log.cleaner.dedupe.buffer.size"),
        ("log.cleaner.enable=maybe\n", "log.cleaner.enable"),
        ("log.cleaner.io.max.bytes.per.second=1\n", "log.cleaner.io.max.bytes.per.second"),
    ]:
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
            _broker(tmp_path, extra)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cleanup.policy", "compacted"),
        ("min.cleanable.dirty.ratio", "2"),
        ("segment.bytes", "1"),
        ("segment.index.bytes", "4"),  # Kafka's table allows 4; the log needs 12
        ("compression.type", "brotli"),  # not one of Kafka's codecs
        ("preallocate", "true"),
        ("segment.jitter.ms", "100"),
    ],
)
def test_controller_refuses_what_the_broker_cannot_honour_by_name(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        validate_topic_config(key, value)


def test_the_values_raftka_implements_pass_and_joined_rules_are_checked() -> None:
    for key, value in [
        ("compression.type", "producer"),
        ("compression.type", "gzip"),  # the leader re-encodes batches in it
        ("preallocate", "false"),
        ("segment.jitter.ms", "0"),
        ("cleanup.policy", "compact,delete"),
        ("segment.index.bytes", "12"),
    ]:
        validate_topic_config(key, value)
    validate_topic_configs(OFFSETS_TOPIC_CONFIGS)
    assert OFFSETS_TOPIC_CONFIGS["cleanup.policy"] == "compact"
    with pytest.raises(InvalidConfigError, match=r"min\.compaction\.lag\.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    # Every key the segment log reads is a topic config the controller knows.
    assert set(TOPIC_CONFIGS) >= LOG_CONFIG_KEYS


def test_a_topic_recreated_while_its_log_is_held_gets_a_new_log_after_the_pass(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        h = _Harness(tmp_path, COMPACT, LogCleaner())
        await _fill(h, rounds=2)
        old_log = h.log()
        assert h.manager.begin_clean(TP) is not None
        new_id = str(uuid.uuid4())
        h.commit(
            RemoveTopicRecord(topic_id=TOPIC_ID),
            TopicRecord(name="t", topic_id=new_id),
            PartitionRecord(partition_id=0, topic_id=new_id, replicas=(1,), isr=(1,), leader=1),
        )
        assert h.manager.partitions[TP].topic_id == TOPIC_ID, "untouched during the pass"
        h.manager.end_clean(TP)
        p = h.manager.partitions[TP]
        assert p.topic_id == new_id and p.log is not old_log and p.state.is_leader
        assert p.log.log_end_offset == 0
        await h.manager.close()

    run(body)


def test_the_coordinator_loads_a_compacted_offsets_partition(tmp_path: Path) -> None:
    """__consumer_offsets cleaned (superseded commits gone, a deleted group's tombstones
    and keys gone after delete.retention.ms, offset gaps): the coordinator's load gives
    the latest committed offset of every live key, as a replay of the whole log would."""

    async def body() -> None:
        cleaner = LogCleaner()
        configs = {**OFFSETS_TOPIC_CONFIGS, "segment.bytes": "2048", "delete.retention.ms": "0"}
        h = _Harness(tmp_path, configs, cleaner, topic=OFFSETS_TOPIC)
        expected: dict[TopicPartition, int] = {}
        for offset in range(40):
            tp = TopicPartition("orders", offset % 4)
            records = [
                offset_commit_record(
                    OffsetCommitKey("g", tp.topic, tp.partition),
                    OffsetCommitValue(offset, -1, "", int(time.time() * 1000)),
                ),
                offset_commit_record(
                    OffsetCommitKey("gone", tp.topic, tp.partition),
                    OffsetCommitValue(offset, -1, "", int(time.time() * 1000)),
                ),
            ]
            produced = await h.produce(*[(r.key, r.value) for r in records], age_ms=60_000)
            assert produced.error is None
            expected[tp] = offset
        tombstones = [
            offset_commit_record(OffsetCommitKey("gone", "orders", i), None) for i in range(4)
        ]
        produced = await h.produce(*[(r.key, r.value) for r in tombstones], age_ms=60_000)
        assert produced.error is None
        h.log().roll()  # every record in a cleanable segment (old: tombstones expire)
        service = LogCleanerService(h.manager, cleaner, backoff_ms=10_000)
        stats = await service.clean_one()
        assert stats is not None and stats.cleaned and stats.tombstones_removed == 4
        coordinator = GroupCoordinatorService(
            config=h.config, replicas=h.manager, channel=lambda: None
        )
        coordinator.on_metadata()
        await asyncio.gather(*coordinator._tasks)  # the load
        assert coordinator.core.list_groups().error is None
        fetched = coordinator.core.offset_fetch(group_id="g", partitions=None)
        assert fetched.error is None
        assert {tp: v.offset for tp, v in fetched.offsets.items()} == expected
        gone = coordinator.core.offset_fetch(group_id="gone", partitions=None)
        assert gone.error is None and not gone.offsets
        coordinator.close()
        await service.close()
        await h.manager.close()

    run(body)


def test_begin_clean_names_the_batch_holding_each_producers_state(tmp_path: Path) -> None:
    """A producer's state is in its last data batch, or, once a marker's epoch bump
    emptied its batches, in that marker (Kafka's LastRecord): the cleaner keeps it."""

    async def body() -> None:
        h = _Harness(tmp_path, COMPACT, LogCleaner())
        await _fill(h, rounds=1, keys=8)  # offsets 0-7: the state below is of them
        producers = h.manager.partitions[TP].producers

        def apply(pid: int, epoch: int, at: int, *, marker: bool) -> None:
            if marker:
                raw = build_end_transaction_batch(
                    EndTransactionMarker(ControlRecordType.COMMIT, 1),
                    producer_id=pid,
                    producer_epoch=epoch,
                    timestamp_ms=1,
                    base_offset=at,
                )
            else:
                raw = build_batch(
                    [Record(b"v", key=b"k")],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=0,
                    is_transactional=True,
                    base_offset=at,
                )
            producers.apply_batch(decode_batch(raw))

        apply(5, 0, 1, marker=False)
        apply(5, 0, 2, marker=True)  # same epoch: the data batch holds the state
        apply(6, 0, 3, marker=False)
        apply(6, 1, 4, marker=True)  # the bump empties producer 6's batches
        handed = h.manager.begin_clean(TP)
        assert handed is not None
        assert {pid: handed[1][pid] for pid in (5, 6)} == {5: 1, 6: 4}
        h.manager.end_clean(TP)
        await h.manager.close()

    run(body)
