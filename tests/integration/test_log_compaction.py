"""Log compaction on real brokers (invariant 8): a compacted topic keeps the latest value
of every key, loses deleted keys after delete.retention.ms, and no offset ever changes,
on every replica, across a kill -9 of the leader while its cleaner runs.

Scale: the issue's workload is 100k updates over 1k keys; CI runs ``UPDATES`` over
``KEYS`` (the same 100 updates per key, ~10% tombstones), set by
``RAFTKA_COMPACTION_UPDATES`` (the key count follows: UPDATES // 100) to run the full
size by hand. Segments are small (``segment.bytes``) and young (``segment.ms``) so the
log rolls into many cleanable segments; each wait is on a condition with a deadline
(the cleaner checkpoint of every replica, the cleaner's /health counters), never a
sleep.

Between phases the log's active segment is rolled by producing a "sentinel" record after
segment.ms, so every update sits in a cleanable segment; the wait then nudges with
another sentinel if a replica's segments were cut elsewhere.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.common.record import Record, build_batch, decode_batches
from raftka.common.wire import FRAME_CONTENT_TYPE, decode_frame, encode_frame
from raftka.local import LocalCluster, http_json, http_post, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.storage import Log, LogConfig
from raftka.storage.cleaner import read_cleaner_checkpoint

pytestmark = pytest.mark.slow

UPDATES = int(os.environ.get("RAFTKA_COMPACTION_UPDATES", "20000"))
KEYS = max(1, UPDATES // 100)
TOMBSTONE_SHARE = 0.10
BATCH = 100  # records per produce request
TOPIC = "compacted"
SEGMENT_MS = 400
DELETE_RETENTION_MS = 1_500
DEADLINE_S = 30.0
KILL_ROUNDS = 4
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "segment.ms": str(SEGMENT_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.insync.replicas": "2",
}

Acked = dict[int, tuple[bytes, bytes | None]]  # offset -> (key, value or None)


@dataclass
class _Env:
    cluster: LocalCluster
    brokers: LocalBrokers
    leader: int = -1

    def refresh(self) -> dict[str, Any] | None:
        for broker_id in self.brokers.ids:
            node = self.brokers[broker_id]
            if not node.running:
                continue
            md = self.brokers.metadata(broker_id)
            for t in (md or {}).get("topics", []):
                if t["name"] == TOPIC and t["partitions"]:
                    self.leader = t["partitions"][0]["leader"]
                    return dict(t["partitions"][0])
        return None

    def wait_partition(self, ok: Any, what: str) -> dict[str, Any]:
        seen: Any = None

        def check() -> dict[str, Any] | None:
            nonlocal seen
            seen = self.refresh()
            return seen if seen is not None and ok(seen) else None

        return wait_for(check, timeout_s=DEADLINE_S, message=lambda: f"{what}: {seen}")

    def create_topic(self) -> None:
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": 1,
                    "replication_factor": 3,
                    "configs": TOPIC_CONFIGS,
                }
            ]
        }

        def attempt() -> bool:
            for node in self.cluster.controllers.values():
                try:
                    status, answer = http_json(node.address, "/v1/topics", method="POST", body=body)
                except OSError:
                    continue
                if status == 200:
                    error = answer["topics"][0]["error"]
                    assert error is None or error["error"] == "TOPIC_ALREADY_EXISTS", error
                    return True
            return False

        wait_for(attempt, timeout_s=DEADLINE_S, message="create topic")
        self.wait_partition(lambda p: p["leader"] >= 0 and len(p["isr"]) == 3, "topic ready")

    def produce(self, records: list[Record]) -> int:
        """acks=all until acknowledged; the base offset. Retries only on answers that
        say nothing was appended (no leader, not leader, timeout before append is not
        retried: the test fails rather than guess)."""
        last: Any = None

        def attempt() -> int | None:
            nonlocal last
            if self.leader < 0 or not self.brokers[self.leader].running:
                self.refresh()
                return None
            batch = build_batch(records)
            frame = encode_frame(
                {
                    "acks": -1,
                    "timeout_ms": 10_000,
                    "partitions": [{"topic": TOPIC, "partition": 0}],
                },
                "partitions",
                [batch],
            )
            try:
                _status, raw, _ = http_post(
                    self.brokers[self.leader].address, "/v1/produce", frame, FRAME_CONTENT_TYPE, 15
                )
            except OSError as e:
                last = e
                self.refresh()
                return None
            body = orjson.loads(raw)
            result = body["responses"][0] if "responses" in body else body
            last = result
            if result.get("error") is None:
                return int(result["base_offset"])
            name = result["error"]["error"]
            # All retriable: a new leader, or (right after creation) a broker that has
            # not yet applied the record naming the topic: Kafka's propagation is
            # eventual, and its clients retry UNKNOWN_TOPIC_OR_PARTITION too.
            retriable = (
                "NOT_LEADER_OR_FOLLOWER",
                "LEADER_NOT_AVAILABLE",
                "UNKNOWN_TOPIC_OR_PARTITION",
            )
            assert name in retriable, result
            self.refresh()
            return None

        return wait_for(attempt, timeout_s=DEADLINE_S, message=lambda: f"produce: {last}")

    def read_all(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """Every record below the HW from the leader: (offset, key, value)."""
        out: list[tuple[int, bytes | None, bytes | None]] = []
        offset = 0
        for _ in range(1_000_000):
            body = orjson.dumps(
                {
                    "max_wait_ms": 0,
                    "partitions": [{"topic": TOPIC, "partition": 0, "fetch_offset": offset}],
                }
            )
            address = self.brokers[self.leader].address
            status, raw, ctype = http_post(address, "/v1/fetch", body, "application/json", 15)
            assert status == 200 and ctype == FRAME_CONTENT_TYPE, raw[:300]
            header, payloads = decode_frame(raw, "responses")
            result = header["responses"][0]
            assert result["error"] is None, result
            batches = list(decode_batches(bytes(payloads[0])))
            if not batches:
                if offset >= result["high_watermark"]:
                    return out
                continue  # the cleaner held the log: nothing this time, ask again
            for batch in batches:
                out += [(r.offset, r.key, r.value) for r in batch.records if r.offset >= offset]
                # Past empty batches too (a header the cleaner kept for producer state).
                offset = max(offset, batch.header.next_offset)
        raise AssertionError("read_all did not end")

    def log_dir(self, broker_id: int) -> Path:
        return self.brokers[broker_id].data_dir / "logs"

    def checkpoint(self, broker_id: int) -> int:
        return read_cleaner_checkpoint(self.log_dir(broker_id)).get((TOPIC, 0), -1)

    def cleaner(self, broker_id: int) -> dict[str, Any]:
        health = self.brokers[broker_id].health() or {}
        return dict(health.get("log_cleaner") or {})

    def wait_cleaned_past(self, offset: int, acked: Acked, sentinels: list[int]) -> None:
        """Until every replica's cleaner checkpoint is above ``offset`` (its segment was
        cleaned). A sentinel produced after segment.ms rolls the active segment."""
        last_sentinel = [time.monotonic()]

        def check() -> bool:
            if all(self.checkpoint(b) > offset for b in self.brokers.ids):
                return True
            if time.monotonic() - last_sentinel[0] > 2 * SEGMENT_MS / 1000:
                record = Record(b"s", key=b"sentinel", timestamp_ms=int(time.time() * 1000))
                at = self.produce([record])
                acked[at] = (b"sentinel", b"s")
                sentinels.append(at)
                last_sentinel[0] = time.monotonic()
            return False

        wait_for(
            check,
            timeout_s=DEADLINE_S,
            message=lambda: (
                f"checkpoints {[self.checkpoint(b) for b in self.brokers.ids]} "
                f"not past {offset}; cleaners {[self.cleaner(b) for b in self.brokers.ids]}"
            ),
        )


@pytest.fixture
def env(tmp_path: Path) -> Iterator[_Env]:
    with LocalCluster(tmp_path, extra_properties={"broker.session.timeout.ms": "2500"}) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster,
            extra_properties={"log.cleaner.backoff.ms": "100", "replica.lag.time.max.ms": "3000"},
        ) as brokers:
            brokers.start()
            yield _Env(cluster, brokers)


def _produce_updates(
    env: _Env, acked: Acked, rng: random.Random, count: int, *, tombstones: float = TOMBSTONE_SHARE
) -> None:
    for start in range(0, count, BATCH):
        now = int(time.time() * 1000)
        records = []
        for _ in range(min(BATCH, count - start)):
            key = f"k{rng.randrange(KEYS):05d}".encode()
            value = None if rng.random() < tombstones else f"v{rng.getrandbits(40)}".encode()
            records.append(Record(value, key=key, timestamp_ms=now))
        base = env.produce(records)
        for i, r in enumerate(records):
            assert r.key is not None
            acked[base + i] = (r.key, r.value)


def _latest(acked: Acked) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(acked):
        key, value = acked[offset]
        latest[key] = (offset, value)
    return latest


def _check(
    records: list[tuple[int, bytes | None, bytes | None]],
    acked: Acked,
    cleaned_to: int,
    *,
    expired_below: int,
) -> None:
    """What a compacted log must hold (invariant 8), read at ``records``."""
    latest = _latest(acked)
    by_offset = {o: (k, v) for o, k, v in records}
    assert len(by_offset) == len(records), "an offset read twice"
    # Every record is one the producer was acknowledged, at its original offset.
    for offset, (key, value) in by_offset.items():
        assert acked.get(offset) == (key, value), (offset, key, value, acked.get(offset))
    # Exactly the latest value of each live key.
    for key, (offset, value) in latest.items():
        if value is not None:
            assert by_offset.get(offset) == (key, value), (key, offset, value)
    # In the cleaned section no superseded record is left ...
    for offset, (key, _value) in by_offset.items():
        assert key is not None
        if offset < cleaned_to:
            assert latest[key][0] == offset or latest[key][0] >= cleaned_to, (
                f"superseded record {offset} of {key!r} survived the clean"
            )
    # ... and a key deleted by a tombstone older than delete.retention.ms (those below
    # ``expired_below``) is gone entirely: neither its tombstone nor a value.
    for key, (offset, value) in latest.items():
        if value is None and offset < min(cleaned_to, expired_below):
            assert not [o for o, (k, _) in by_offset.items() if k == key], key
    assert len(records) < len(acked), "nothing was compacted"


def _read_stopped_replica(path: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    opened = Log.open(path, LogConfig(cleanup_policy="compact"))
    try:
        out: list[tuple[int, bytes | None, bytes | None]] = []
        offset = opened.log_start_offset
        while offset < opened.log_end_offset:
            data = opened.read(offset, 1 << 20, whole_batches=True)
            batches = list(decode_batches(data))
            if not batches:
                break
            for batch in batches:
                out += [(r.offset, r.key, r.value) for r in batch.records if r.offset >= offset]
                offset = max(offset, batch.header.next_offset)
        return out
    finally:
        opened.close()


def test_compaction_keeps_latest_values_and_offsets_across_leader_kill9(env: _Env) -> None:
    rng = random.Random(8)
    acked: Acked = {}
    sentinels: list[int] = []
    timings: dict[str, float] = {}
    started = time.monotonic()
    env.create_topic()

    # Phase 1: N updates over K keys, ~10% tombstones; every replica cleans them.
    _produce_updates(env, acked, rng, UPDATES)
    timings["produce"] = time.monotonic() - started
    env.wait_cleaned_past(max(acked), acked, sentinels)
    timings["first clean"] = time.monotonic() - started
    cleaned_to = min(env.checkpoint(b) for b in env.brokers.ids)
    _check(env.read_all(), acked, cleaned_to, expired_below=0)
    assert all(env.cleaner(b).get("passes_cleaned", 0) >= 1 for b in env.brokers.ids)

    # Phase 2: past delete.retention.ms a new pass (made due by a few more updates)
    # removes the tombstones and the keys they deleted.
    # (No tombstones in these updates: they would be younger than the retention.)
    expired_below = max(acked) + 1
    deadline = time.time() + DELETE_RETENTION_MS / 1000
    _produce_updates(env, acked, rng, BATCH, tombstones=0)
    wait_for(lambda: time.time() > deadline + 0.2, timeout_s=DEADLINE_S, message="retention")
    _produce_updates(env, acked, rng, BATCH, tombstones=0)
    env.wait_cleaned_past(max(acked), acked, sentinels)
    cleaned_to = min(env.checkpoint(b) for b in env.brokers.ids)
    _check(env.read_all(), acked, cleaned_to, expired_below=expired_below)
    timings["tombstones gone"] = time.monotonic() - started

    # Phase 3: kill -9 the leader while its cleaner runs a pass. Each round makes a pass
    # due (updates, then a sentinel after segment.ms rolls the active segment) and polls
    # the leader's /health as fast as it answers for ``cleaning`` naming the partition.
    # A pass over this log takes milliseconds, so a round can miss it; after
    # KILL_ROUNDS the kill comes right after a pass was seen to start instead.
    victim = env.leader
    _produce_updates(env, acked, rng, UPDATES // 4)
    seen: dict[str, Any] = {}
    mid_pass = False
    for _ in range(KILL_ROUNDS):
        _produce_updates(env, acked, rng, BATCH)
        rolls_at = time.time() + SEGMENT_MS / 1000
        before = env.cleaner(victim).get("passes_started", 0)
        wait_for(lambda at=rolls_at: time.time() > at, timeout_s=DEADLINE_S, message="segment.ms")
        at = env.produce([Record(b"s", key=b"sentinel", timestamp_ms=int(time.time() * 1000))])
        acked[at] = (b"sentinel", b"s")
        poll_until = time.monotonic() + 3.0
        while time.monotonic() < poll_until:  # a deadline-bounded poll, no sleep
            seen = env.cleaner(victim)
            if seen.get("cleaning") == f"{TOPIC}-0":
                mid_pass = True
                break
        if mid_pass:
            break
    if not mid_pass:
        wait_for(
            lambda: env.cleaner(victim).get("passes_started", 0) > before,
            timeout_s=DEADLINE_S,
            message=lambda: f"no pass began: {env.cleaner(victim)}",
        )
    env.brokers[victim].kill()
    timings["killed mid-pass"] = float(mid_pass)
    env.wait_partition(lambda p: p["leader"] not in (-1, victim), "new leader")
    env.brokers[victim].start()
    env.brokers.wait_unfenced(victim)
    env.wait_partition(lambda p: len(p["isr"]) == 3, "ISR whole again")
    env.wait_cleaned_past(max(acked), acked, sentinels)
    cleaned_to = min(env.checkpoint(b) for b in env.brokers.ids)
    _check(env.read_all(), acked, cleaned_to, expired_below=expired_below)
    timings["after kill"] = time.monotonic() - started

    # Every replica, read from its files after a clean stop.
    hw = env.refresh()
    assert hw is not None
    for broker_id in env.brokers.ids:
        assert env.brokers[broker_id].terminate() == 0
    for broker_id in env.brokers.ids:
        path = env.log_dir(broker_id) / f"{TOPIC}-0"
        records = _read_stopped_replica(path)
        _check(records, acked, env.checkpoint(broker_id), expired_below=expired_below)
        assert {o for o, _, _ in records} <= set(acked)

    # dump-log on a cleaned segment shows the checkpoint and the gaps.
    leader_dir = env.log_dir(victim) / f"{TOPIC}-0"
    first_segment = sorted(leader_dir.glob("*.log"))[0]
    dumped = subprocess.run(
        [sys.executable, "-m", "raftka", "dump-log", str(first_segment)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "Cleaner checkpoint (first dirty offset):" in dumped, dumped[:2000]
    assert "gap" in dumped.lower(), dumped[:2000]
    timings["total"] = time.monotonic() - started
    print(f"updates={UPDATES} keys={KEYS} timings={timings}")
