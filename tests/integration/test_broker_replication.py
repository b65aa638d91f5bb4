"""Three controllers and three brokers as real processes on loopback: the data plane.

Each test starts its own cluster (``LocalCluster`` + ``LocalBrokers``, short timeouts)
and checks one guarantee from the outside, through the broker API only:

- acks=all with RF=3 and min.insync.replicas=2 is read back at the acknowledged
  offsets; ListOffsets and the client metadata agree;
- kill -9 of a partition leader while a producer loop runs: every acknowledged record
  is readable afterwards at the offset it was acknowledged with, in order, and no
  record a consumer read (below the HW) disappears (invariant 1, 2);
- a SIGSTOPped follower leaves the ISR and producing goes on; after SIGCONT it catches
  up and rejoins; with only the leader in the ISR, acks=all fails NOT_ENOUGH_REPLICAS
  while acks=1 succeeds;
- a deposed leader (SIGSTOP past its session, SIGCONT) never acknowledges a write in
  its old epoch and truncates its divergent suffix (invariant 3);
- a broker restarted after kill -9 recovers its logs and rejoins every ISR.

The test client is a few lines over HTTP (``_Client``): it refreshes metadata and
retries on NOT_LEADER_OR_FOLLOWER and connection errors, and treats a timeout as an
unknown outcome (never as an acknowledgement). Every wait polls a condition with a
deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.common.record import Record, build_batch, iter_records
from raftka.common.wire import FRAME_CONTENT_TYPE, decode_frame, encode_frame
from raftka.local import LocalCluster, http_json, http_post, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.storage import Log, LogConfig

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 2_500
DEADLINE_S = 20.0


# ---------------------------------------------------------------------------------------
# A minimal client


@dataclass
class _Client:
    brokers: LocalBrokers
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)

    def refresh(self, topic: str) -> dict[str, Any] | None:
        for broker_id in self.brokers.ids:
            node = self.brokers[broker_id]
            if not node.running or node.paused:
                continue
            md = self.brokers.metadata(broker_id)
            if md is None:
                continue
            for t in md["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        self.leaders[(topic, p["partition"])] = p["leader"]
                    return t
        return None

    def address(self, topic: str, partition: int) -> str | None:
        leader = self.leaders.get((topic, partition))
        if leader is None or leader not in self.brokers.brokers:
            return None
        return self.brokers[leader].address

    def produce_once(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        acks: int,
        timeout_ms: int = 5_000,
        address: str | None = None,
    ) -> dict[str, Any]:
        """One produce attempt: the partition's result, or {"error": {"error": "NETWORK"}}."""
        address = address or self.address(topic, partition)
        if address is None:
            return {"error": {"error": "NO_LEADER"}}
        batch = build_batch([Record(v, timestamp_ms=int(time.time() * 1000)) for v in values])
        frame = encode_frame(
            {
                "acks": acks,
                "timeout_ms": timeout_ms,
                "partitions": [{"topic": topic, "partition": partition}],
            },
            "partitions",
            [batch],
        )
        try:
            status, raw, _ = http_post(
                address, "/v1/produce", frame, FRAME_CONTENT_TYPE, timeout_ms / 1000 + 5
            )
        except (OSError, TimeoutError) as e:
            return {"error": {"error": "NETWORK", "message": str(e)}}
        if status == 204:
            return {"error": None}
        body = orjson.loads(raw)
        if "responses" not in body:
            return {"error": body}
        result: dict[str, Any] = body["responses"][0]
        return result

    def produce(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        acks: int = -1,
        deadline_s: float = DEADLINE_S,
    ) -> int:
        """Produce with retries until acknowledged; the base offset. A retry after an
        unknown outcome may duplicate (no idempotence here): callers that count must
        use produce_once."""
        last: Any = None

        def attempt() -> int | None:
            nonlocal last
            result = self.produce_once(topic, partition, values, acks=acks)
            if result["error"] is None:
                return int(result["base_offset"])
            last = result
            self.refresh(topic)
            return None

        return wait_for(attempt, timeout_s=deadline_s, message=lambda: f"produce failed: {last}")

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        address: str | None = None,
        max_wait_ms: int = 0,
    ) -> tuple[dict[str, Any], list[tuple[int, bytes]]]:
        address = address or self.address(topic, partition)
        assert address is not None
        body = orjson.dumps(
            {
                "max_wait_ms": max_wait_ms,
                "partitions": [{"topic": topic, "partition": partition, "fetch_offset": offset}],
            }
        )
        status, raw, ctype = http_post(address, "/v1/fetch", body, "application/json", 10)
        assert status == 200 and ctype == FRAME_CONTENT_TYPE, raw[:300]
        header, payloads = decode_frame(raw, "responses")
        result = header["responses"][0]
        records = [(r.offset, r.value or b"") for r in iter_records(bytes(payloads[0]))]
        return result, [(o, v) for o, v in records if o >= offset]

    def read_all(
        self, topic: str, partition: int, *, address: str | None = None
    ) -> list[tuple[int, bytes]]:
        """Every record below the HW, from offset 0, from the leader."""
        out: list[tuple[int, bytes]] = []
        offset = 0
        for _ in range(100_000):
            result, records = self.fetch(topic, partition, offset, address=address)
            assert result["error"] is None, result
            if not records:
                assert offset >= result["high_watermark"], (offset, result)
                return out
            out += records
            offset = records[-1][0] + 1
        raise AssertionError("read_all did not end")

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> dict[str, Any]:
        address = self.address(topic, partition)
        assert address is not None
        body = orjson.dumps(
            {"partitions": [{"topic": topic, "partition": partition, "timestamp": timestamp}]}
        )
        status, raw, _ = http_post(address, "/v1/list-offsets", body, "application/json", 10)
        assert status == 200, raw
        result: dict[str, Any] = orjson.loads(raw)["responses"][0]
        return result


# ---------------------------------------------------------------------------------------
# Fixtures


@dataclass
class _Env:
    cluster: LocalCluster
    brokers: LocalBrokers
    client: _Client

    def create_topic(
        self, name: str, *, partitions: int = 1, rf: int = 3, min_isr: int = 2
    ) -> dict[str, Any]:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": rf,
                    "configs": {"min.insync.replicas": str(min_isr)},
                }
            ]
        }
        last: Any = None

        def attempt() -> bool:
            nonlocal last
            for node in self.cluster.controllers.values():
                if not node.running or node.paused:
                    continue
                try:
                    status, answer = http_json(node.address, "/v1/topics", method="POST", body=body)
                except OSError as e:
                    last = e
                    continue
                last = answer
                if status == 200:
                    error = answer["topics"][0]["error"]
                    return error is None or error["error"] == "TOPIC_ALREADY_EXISTS"
            return False

        wait_for(attempt, timeout_s=DEADLINE_S, message=lambda: f"create topic failed: {last}")
        return self.wait_partitions(name, lambda p: p["leader"] >= 0 and len(p["isr"]) == rf)

    def wait_partitions(
        self, topic: str, ok: Any, *, timeout_s: float = DEADLINE_S
    ) -> dict[str, Any]:
        """Until every partition of ``topic`` satisfies ``ok`` in a live broker's view."""
        seen: Any = None

        def check() -> dict[str, Any] | None:
            nonlocal seen
            t = self.client.refresh(topic)
            seen = t
            if t is None or not t["partitions"]:
                return None
            return t if all(ok(p) for p in t["partitions"]) else None

        return wait_for(check, timeout_s=timeout_s, message=lambda: f"{topic}: {seen}")

    def wait_isr(
        self, topic: str, partition: int, isr: set[int], *, timeout_s: float = DEADLINE_S
    ) -> None:
        self.wait_partitions(
            topic,
            lambda p: p["partition"] != partition or set(p["isr"]) == isr,
            timeout_s=timeout_s,
        )


@pytest.fixture
def env(tmp_path: Path) -> Iterator[_Env]:
    with LocalCluster(
        tmp_path, extra_properties={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    ) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(cluster, extra_properties={"replica.lag.time.max.ms": "1500"}) as brokers:
            brokers.start()
            yield _Env(cluster, brokers, _Client(brokers))


def _read_log_dir(path: Path) -> list[tuple[int, bytes]]:
    """Every record of a stopped broker's partition log, read from its files."""
    opened = Log.open(path, LogConfig())
    try:
        out: list[tuple[int, bytes]] = []
        offset = opened.log_start_offset
        while offset < opened.log_end_offset:
            data = opened.read(offset, 1 << 20, whole_batches=True)
            records = [(r.offset, r.value or b"") for r in iter_records(data)]
            out += [(o, v) for o, v in records if o >= offset]
            offset = records[-1][0] + 1
        return out
    finally:
        opened.close()


# ---------------------------------------------------------------------------------------
# Tests


def test_acks_all_read_back_list_offsets_and_metadata(env: _Env) -> None:
    """RF=3, min.insync=2: acks=all produces are acknowledged at consecutive offsets and
    read back from the leader in order; ListOffsets earliest/latest/by-time agree; a
    follower's fetch as a consumer is NOT_LEADER_OR_FOLLOWER naming the leader."""
    topic = env.create_topic("orders", partitions=2)
    client = env.client
    acked: list[tuple[int, bytes]] = []
    for i in range(10):
        values = [f"r{i}-{j}".encode() for j in range(3)]
        base = client.produce("orders", 0, values, acks=-1)
        acked += [(base + j, v) for j, v in enumerate(values)]
    assert [o for o, _ in acked] == list(range(30))
    assert client.read_all("orders", 0) == acked
    assert client.list_offsets("orders", 0, -2)["offset"] == 0
    assert client.list_offsets("orders", 0, -1)["offset"] == 30
    assert client.list_offsets("orders", 0, 0)["offset"] == 0
    assert client.list_offsets("orders", 0, int(time.time() * 1000) + 60_000)["offset"] == -1
    md = env.brokers.metadata(env.brokers.ids[0])
    assert md is not None and md["controller_id"] in env.cluster.controllers
    assert {b["id"] for b in md["brokers"]} == set(env.brokers.ids)
    p0 = topic["partitions"][0]
    follower = next(b for b in p0["replicas"] if b != p0["leader"])
    result, _ = client.fetch("orders", 0, 0, address=env.brokers[follower].address)
    assert result["error"]["error"] == "NOT_LEADER_OR_FOLLOWER"
    assert result["current_leader"]["leader_id"] == p0["leader"]
    unknown = client.produce_once("nope", 0, [b"x"], acks=1, address=env.brokers[follower].address)
    assert unknown["error"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    status, raw, _ = http_post(
        client.address("orders", 0) or "", "/v1/fetch", b"{", "application/json", 5
    )
    assert status == 400 and orjson.loads(raw)["error"] == "INVALID_REQUEST"
    bad_acks = client.produce_once("orders", 0, [b"x"], acks=2)
    assert bad_acks["error"]["error"] == "INVALID_REQUIRED_ACKS"
    # Every replica converges on the leader's log (read after a clean stop).
    env.wait_isr("orders", 0, set(p0["replicas"]))
    for broker_id in env.brokers.ids:
        assert env.brokers[broker_id].terminate() == 0
        assert (
            env.brokers[broker_id].data_dir / "logs" / "orders-0" / ".kafka_cleanshutdown"
        ).exists()
        assert _read_log_dir(env.brokers[broker_id].data_dir / "logs" / "orders-0") == acked


def test_leader_kill9_loses_no_acknowledged_record(env: _Env) -> None:
    """A producer loop (acks=all) and a consumer run while the leader is killed -9:
    afterwards every acknowledged record is at its acknowledged offset, in order, and
    every record the consumer read below the HW is still there."""
    env.create_topic("events")
    client = env.client
    acked: dict[int, bytes] = {}
    consumed: dict[int, bytes] = {}
    stop = threading.Event()
    consumer_errors: list[str] = []

    def consume() -> None:
        offset = 0
        while not stop.is_set():
            try:
                result, records = client.fetch("events", 0, offset, max_wait_ms=100)
            except (OSError, AssertionError) as e:
                consumer_errors.append(str(e))
                client.refresh("events")
                continue
            if result["error"] is not None:
                client.refresh("events")
                continue
            for o, v in records:
                assert o < result["high_watermark"]
                consumed[o] = v
            if records:
                offset = records[-1][0] + 1

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    killed: int | None = None
    seq = 0
    deadline = time.monotonic() + 40
    try:
        while len(acked) < 60 and time.monotonic() < deadline:
            if len(acked) == 20 and killed is None:
                killed = client.leaders[("events", 0)]
                env.brokers[killed].kill()
            value = f"v{seq}".encode()
            seq += 1
            result = client.produce_once("events", 0, [value], acks=-1, timeout_ms=3_000)
            if result["error"] is None:
                offset = int(result["base_offset"])
                assert offset not in acked, (offset, acked[offset], value)
                acked[offset] = value
            else:
                # NOT_LEADER, timeouts, connection errors: unknown outcome, move on.
                client.refresh("events")
    finally:
        stop.set()
        reader.join(timeout=10)
    assert killed is not None and len(acked) >= 60, (killed, len(acked))
    records = dict(client.read_all("events", 0))
    for offset, value in acked.items():
        assert records.get(offset) == value, (offset, value, records.get(offset))
    assert sorted(records) == list(range(len(records))), "offsets are dense"
    for offset, value in consumed.items():
        assert records.get(offset) == value, (
            f"consumer read {offset}={value!r}, now {records.get(offset)!r}"
        )


def test_follower_pause_leaves_isr_and_rejoins_min_isr_enforced(env: _Env) -> None:
    """A SIGSTOPped follower leaves the ISR (replica.lag.time.max.ms) and acks=all goes
    on with two replicas; with both followers stopped only the leader is in the ISR and
    acks=all fails NOT_ENOUGH_REPLICAS while acks=1 succeeds; after SIGCONT both catch
    up and rejoin the ISR."""
    topic = env.create_topic("lag")
    client = env.client
    p0 = topic["partitions"][0]
    leader = p0["leader"]
    followers = [b for b in p0["replicas"] if b != leader]
    client.produce("lag", 0, [b"before"], acks=-1)
    env.brokers[followers[0]].pause()
    # acks=all waits out the shrink, then completes with the two left.
    client.produce("lag", 0, [b"during-one"], acks=-1)
    env.wait_isr("lag", 0, {leader, followers[1]})
    env.brokers[followers[1]].pause()
    env.wait_isr("lag", 0, {leader})
    result = client.produce_once("lag", 0, [b"all"], acks=-1)
    assert result["error"]["error"] == "NOT_ENOUGH_REPLICAS", result
    assert client.produce_once("lag", 0, [b"one"], acks=1)["error"] is None
    for f in followers:
        env.brokers[f].resume()
    env.wait_isr("lag", 0, {leader, *followers})
    client.produce("lag", 0, [b"after"], acks=-1)
    values = [v for _, v in client.read_all("lag", 0)]
    assert values == [b"before", b"during-one", b"one", b"after"], values


def test_deposed_leader_never_acknowledges_and_truncates(env: _Env) -> None:
    """The leader appends a record no follower has (acks=1 while both followers are
    SIGSTOPped for a moment), then is SIGSTOPped past its session timeout: another
    replica is elected. An acks=all produce sent to the paused old leader is never
    acknowledged once it resumes; it rejoins as a follower, its divergent suffix
    truncated, and its log on disk equals the new leader's."""
    topic = env.create_topic("zombie")
    client = env.client
    replicas = topic["partitions"][0]["replicas"]
    old = topic["partitions"][0]["leader"]
    followers = [b for b in replicas if b != old]
    client.produce("zombie", 0, [b"a", b"b"], acks=-1)
    for f in followers:
        env.brokers[f].pause()
    # A follower fetch parked on the leader before the pause would carry the next
    # append to it on resume: wait until none is parked (their long poll is 200 ms).
    wait_for(
        lambda: (env.brokers[old].health() or {}).get("fetch_waiters") == 0,
        timeout_s=5,
        message="follower fetches still parked on the leader",
    )
    unreplicated = client.produce_once("zombie", 0, [b"unreplicated"], acks=1)
    assert unreplicated["error"] is None and unreplicated["base_offset"] == 2, unreplicated
    old_address = env.brokers[old].address
    env.brokers[old].pause()
    for f in followers:
        env.brokers[f].resume()
    outcome: dict[str, Any] = {}

    def zombie_write() -> None:
        outcome.update(
            client.produce_once(
                "zombie", 0, [b"zombie"], acks=-1, timeout_ms=8_000, address=old_address
            )
        )

    writer = threading.Thread(target=zombie_write, daemon=True)
    writer.start()
    env.wait_partitions("zombie", lambda p: p["leader"] not in (old, -1))
    client.produce("zombie", 0, [b"c"], acks=-1)
    env.brokers[old].resume()
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert outcome["error"] is not None, f"the deposed leader acknowledged: {outcome}"
    env.wait_isr("zombie", 0, set(replicas))
    client.produce("zombie", 0, [b"d"], acks=-1)
    expected = client.read_all("zombie", 0)
    # A fetch the leader read just before our pause may still have carried the
    # unreplicated record (acks=1 promises nothing more); it is then kept everywhere.
    values = [v for _, v in expected if v != b"unreplicated"]
    assert values == [b"a", b"b", b"c", b"d"], expected
    assert env.brokers[old].terminate() == 0
    assert _read_log_dir(env.brokers[old].data_dir / "logs" / "zombie-0") == expected


def test_broker_restart_after_kill9_recovers_and_rejoins(env: _Env) -> None:
    """kill -9 a broker holding replicas of two partitions, produce on, restart it: it
    recovers its logs and rejoins the ISR of every partition, holding every record."""
    topic = env.create_topic("restart", partitions=2)
    client = env.client
    for p in (0, 1):
        client.produce("restart", p, [f"p{p}-early".encode()], acks=-1)
    victim = env.brokers.ids[0]
    env.brokers[victim].kill()
    env.wait_partitions("restart", lambda p: victim not in p["isr"])
    for p in (0, 1):
        client.produce("restart", p, [f"p{p}-late".encode()], acks=-1)
    env.brokers[victim].start()
    env.brokers.wait_unfenced(victim)
    env.wait_partitions("restart", lambda p: set(p["isr"]) == set(p["replicas"]))
    for p in (0, 1):
        assert [v for _, v in client.read_all("restart", p)] == [
            f"p{p}-early".encode(),
            f"p{p}-late".encode(),
        ]
    del topic
