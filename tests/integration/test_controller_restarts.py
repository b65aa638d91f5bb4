"""kill -9 of all three controllers, then a restart, many times, with snapshots every few
records: every acknowledged write survives, and the three images agree.

One 3-controller ``LocalCluster`` (real processes) runs with
``metadata.log.max.record.bytes.between.snapshots`` so small that a controller writes a
snapshot every few commands. Each round (seeded RNG, the seed printed) a writer thread
creates topics (2 partitions, RF 3 over three fake brokers, some with a config) through
the client path (any controller, NOT_CONTROLLER followed). Either the writer stops after
k writes and the cluster is killed while quiet, or the writer keeps going and all three
are killed as soon as its k-th write is acknowledged, i.e. with the next write in flight
and snapshots being written. All three restart; then every acknowledged topic must be
present with the topic id and config its create answered, on every controller, and the
three images (topics with partitions, replicas, leaders, ISRs, epochs; configs; brokers)
must be equal. A write whose call failed or timed out is "unknown": it may or may not be
there, but if it is, it is there identically everywhere.

The pysyncobj engine runs the same rounds without frequent snapshots: a whole-cluster
kill between pysyncobj writing its compaction dump and shortening its journal loses
acknowledged records on every node (../shared/notes/pysyncobj.md; this suite saw it once
at seed 20261121). That defect has its own xfail test in test_pysyncobj_engine.py; here
the pysyncobj rounds check what it does promise, kill -9 of all nodes without compaction.
"""

from __future__ import annotations

import importlib.util
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from raftka.local import LocalCluster, http_json, wait_for
from raftka.local.metadata_pages import replay_metadata_page
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import (
    RECORD_BYTES_MAX,
    PartitionRecord,
    TopicRecord,
    decode_records,
    encode_records,
)

pytestmark = pytest.mark.slow

SEED = 20261121
SNAPSHOT_BYTES_BETWEEN = 1500  # a create of 2 partitions is ~0.6 KB: a snapshot every ~3
PYSYNCOBJ_SNAPSHOT_BYTES_BETWEEN = 1 << 30  # never within the test
WRITES_PER_ROUND_MAX = 6
REQUEST_TIMEOUT_S = 2.0
CONVERGE_DEADLINE_S = 30.0
PAGES_MAX = 10_000
PYSYNCOBJ_MISSING = importlib.util.find_spec("pysyncobj") is None

ENGINES = [
    pytest.param(("native", 20), id="native-20-rounds"),
    pytest.param(
        ("pysyncobj", 5),
        id="pysyncobj-5-rounds",
        marks=pytest.mark.skipif(
            PYSYNCOBJ_MISSING, reason="pysyncobj is not installed (pip install 'raftka[pysyncobj]')"
        ),
    ),
]


@dataclass
class Ledger:
    """What the clients were told: acknowledged creates (name -> (topic id, configs)) and
    the names whose outcome is unknown."""

    acked: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)


class Writer:
    """Creates topics one after another on a thread, as a client does (any controller,
    follow NOT_CONTROLLER), recording each outcome in the ledger."""

    def __init__(self, cluster: LocalCluster, ledger: Ledger, names: list[str], rng: random.Random):
        self.cluster = cluster
        self.ledger = ledger
        self.bodies: list[dict[str, Any]] = []
        for name in names:
            configs = (
                {"retention.ms": str(rng.randrange(60_000, 10**9))} if rng.random() < 0.5 else {}
            )
            self.bodies.append(
                {"name": name, "num_partitions": 2, "replication_factor": 3, "configs": configs}
            )
        self.acked_count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for body in self.bodies:
            if self.stop.is_set():
                return
            outcome = self._create(body)
            if outcome is None:
                self.ledger.unknown.add(body["name"])
            else:
                self.ledger.acked[body["name"]] = (outcome, dict(body["configs"]))
                self.acked_count += 1

    def _create(self, body: dict[str, Any]) -> str | None:
        """The topic id once acknowledged; None when the outcome is unknown."""
        addresses = [n.address for n in self.cluster.controllers.values()]
        target: str | None = None
        for attempt in range(20):  # bounded: elections settle in well under 20 tries
            if self.stop.is_set():
                return None
            address = target or addresses[attempt % len(addresses)]
            try:
                status, answer = http_json(
                    address,
                    "/v1/topics",
                    method="POST",
                    body={"topics": [body]},
                    timeout_s=REQUEST_TIMEOUT_S,
                )
            except OSError:
                target = None
                continue
            if status == 200:
                result = answer["topics"][0]
                if result["error"] is None:
                    return str(result["topic_id"])
                # A retry after an unknown outcome may find its own create committed.
                assert result["error"]["error"] == "TOPIC_ALREADY_EXISTS", answer
                return None
            target = answer.get("leader_address") if isinstance(answer, dict) else None
            if isinstance(answer, dict) and answer.get("error") == "REQUEST_TIMED_OUT":
                self.ledger.unknown.add(body["name"])  # may commit: a retry may meet it
        return None


def read_image(address: str) -> MetadataImage:
    """A controller's committed metadata, replayed from GET /v1/metadata as a broker
    would (a snapshot first when the log's prefix was snapshotted)."""
    image, offset = MetadataImage.EMPTY, 0
    for _ in range(PAGES_MAX):
        status, page = http_json(address, f"/v1/metadata?offset={offset}&records_max=1000")
        assert status == 200, page
        image = replay_metadata_page(image, page)
        if page["next_offset"] >= page["high_watermark"] or page["next_offset"] == offset:
            return image
        offset = page["next_offset"]
    raise AssertionError("metadata log did not end")


def comparable(image: MetadataImage) -> list[Any]:
    """The image's content without the log position (each node snapshots on its own)."""
    return [r.to_dict() for r in image.to_records()]


def check_round(cluster: LocalCluster, ledger: Ledger, seed: int) -> MetadataImage:
    """Wait until the three images are equal and hold every acknowledged topic."""
    last: list[str] = []

    def converged() -> MetadataImage | None:
        try:
            images = [read_image(n.address) for n in cluster.controllers.values()]
        except OSError as e:
            last[:] = [str(e)]
            return None
        views = [comparable(image) for image in images]
        names = [set(image.topics.by_name) for image in images]
        last[:] = [f"controller {i + 1}: {len(n)} topics" for i, n in enumerate(names)]
        if all(v == views[0] for v in views) and set(ledger.acked) <= names[0]:
            return images[0]
        return None

    image = wait_for(
        converged,
        timeout_s=CONVERGE_DEADLINE_S,
        message=lambda: f"seed {seed}: images differ or miss acknowledged topics: {last}",
    )
    for name, (topic_id, configs) in ledger.acked.items():
        topic = image.topics.topic_by_name(name)
        assert topic is not None, (seed, name)
        assert str(topic.topic_id) == topic_id, (seed, name, topic.topic_id, topic_id)
        assert len(topic.partitions) == 2, (seed, name)
        for partition in topic.partitions.values():
            assert partition.leader in partition.isr, (seed, name, partition)
        for key, value in configs.items():
            assert image.configs.topic_config(name).get(key) == value, (seed, name, key)
    return image


@pytest.fixture(params=ENGINES)
def engine_rounds(request: pytest.FixtureRequest) -> tuple[str, int]:
    engine, rounds = request.param
    return str(engine), int(rounds)


@pytest.fixture
def cluster(tmp_path: Path, engine_rounds: tuple[str, int]) -> Iterator[LocalCluster]:
    engine, _ = engine_rounds
    # pysyncobj compacts only when raftka saves a snapshot; see the module docstring.
    between = SNAPSHOT_BYTES_BETWEEN if engine == "native" else PYSYNCOBJ_SNAPSHOT_BYTES_BETWEEN
    props = {
        "metadata.log.max.record.bytes.between.snapshots": str(between),
        "broker.session.timeout.ms": "600000",  # fake brokers registered once stay usable
    }
    if engine == "pysyncobj":
        props["quorum.pysyncobj.password"] = "restart-test-secret"
    with LocalCluster(tmp_path, controllers=3, engine=engine, extra_properties=props) as c:
        c.start()
        yield c


def register_brokers(cluster: LocalCluster) -> None:
    for broker_id in (1, 2, 3):
        body: dict[str, Any] = {
            "broker_id": broker_id,
            "incarnation_id": str(uuid.uuid4()),
            "endpoints": [],
        }
        epoch = client_write(cluster, "/v1/brokers/register", body)["broker_epoch"]
        beat = {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": epoch}
        client_write(cluster, "/v1/brokers/heartbeat", beat)


def client_write(cluster: LocalCluster, path: str, body: object) -> Any:
    target: list[str | None] = [None]
    turn = [0]

    def attempt() -> Any:
        nodes = list(cluster.controllers.values())
        address = target[0] or nodes[turn[0] % len(nodes)].address
        turn[0] += 1
        try:
            status, answer = http_json(address, path, method="POST", body=body, timeout_s=3)
        except OSError:
            target[0] = None
            return None
        if status == 200:
            return answer
        target[0] = answer.get("leader_address") if isinstance(answer, dict) else None
        return None

    return wait_for(attempt, timeout_s=30, message=f"{path} did not succeed")


def snapshots_written(cluster: LocalCluster) -> int:
    return sum(
        n.log_path.read_text(errors="replace").count('"wrote metadata snapshot"')
        for n in cluster.controllers.values()
    )


def test_kill_all_controllers_repeatedly_loses_no_acknowledged_write(
    cluster: LocalCluster, engine_rounds: tuple[str, int]
) -> None:
    """See the module docstring: ``rounds`` kill -9 of all three at a seeded moment."""
    engine, rounds = engine_rounds
    register_brokers(cluster)
    ledger = Ledger()
    started = time.monotonic()
    in_flight_rounds = 0
    for rnd in range(rounds):
        seed = SEED + rnd
        rng = random.Random(seed)
        cluster.wait_leader()
        count = rng.randint(1, WRITES_PER_ROUND_MAX)
        kill_at = rng.randint(0, count - 1)
        while_writing = rng.random() < 0.6 and kill_at < count
        names = [f"r{rnd}-t{i}" for i in range(count)]
        writer = Writer(cluster, ledger, names, rng)
        writer.thread.start()
        if while_writing:
            in_flight_rounds += 1

            def reached(w: Writer = writer, k: int = kill_at) -> bool:
                return w.acked_count >= k or not w.thread.is_alive()

            wait_for(
                reached,
                timeout_s=30,
                message=f"seed {seed}: the writer made no progress",
            )
            cluster.kill_all_and_restart()
            writer.stop.set()
            writer.thread.join(timeout=60)
        else:
            writer.thread.join(timeout=120)
            cluster.kill_all_and_restart()
        assert not writer.thread.is_alive()
        check_round(cluster, ledger, seed)
    elapsed = time.monotonic() - started
    snapshots = snapshots_written(cluster)
    unknown = len(ledger.unknown - set(ledger.acked))
    print(
        f"{engine}: {rounds} rounds ({in_flight_rounds} killed with a write in flight) in "
        f"{elapsed:.1f} s; {len(ledger.acked)} acknowledged, {unknown} unknown; "
        f"{snapshots} snapshots written"
    )
    if engine == "native":
        assert snapshots > 0, "the test is meant to kill controllers around snapshots"


def test_a_snapshot_larger_than_one_record_bound_decodes() -> None:
    """A snapshot is one record list holding the whole image; 60,000 partitions of RF 3
    encode to more than the 16 MiB bound on a single record, and must still decode (a
    controller that cannot decode its own snapshot cannot restart). Records only, no
    processes: encode_records, then decode_records, compared record by record."""
    records: list[Any] = []
    for t in range(60):
        topic_id = str(uuid.uuid4())
        records.append(TopicRecord(name=f"big-{t}", topic_id=topic_id))
        for p in range(1000):
            replicas = (1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3)
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                )
            )
    data = encode_records(records)
    assert len(data) > RECORD_BYTES_MAX, len(data)
    assert decode_records(data) == records
