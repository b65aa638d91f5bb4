"""Three real controller processes on loopback, driven over HTTP, once per quorum engine
(native Raft, and pysyncobj when it is installed).

Each test starts a cluster with ``raftka.local.LocalCluster`` (one OS process per
controller, the local quorum timeouts: election 250 ms, fetch 500 ms), then checks one
guarantee from the outside: an active controller is elected and followers redirect
writes to it; after kill -9 of the active controller a new one is elected and commits
(the time is printed; the bound here is a generous liveness check, the 2 s / 1 s
figures are measured by bench/controller_bench.py failover) with no committed record
lost; a SIGSTOPped follower does not stop the other two and catches up to the same log
after SIGCONT; a SIGSTOPped *active* controller is replaced, a request queued on its
socket while it was stopped does not commit on its stale image, and after SIGCONT it
steps down, redirects writes and ends with the same log; every committed topic
survives kill -9 of all three and a restart; a broker that stops heartbeating is fenced
after broker.session.timeout.ms and its partitions get new leaders from their ISRs.
Every wait is a condition polled with a deadline.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.local import LocalCluster, NodeProcess, http_json, wait_for
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import record_from_dict

pytestmark = pytest.mark.slow

FAILOVER_BOUND_S = 10.0
WRITE_DEADLINE_S = 20.0


PYSYNCOBJ_MISSING = importlib.util.find_spec("pysyncobj") is None
ENGINES = [
    pytest.param("native", id="native"),
    pytest.param(
        "pysyncobj",
        id="pysyncobj",
        marks=pytest.mark.skipif(
            PYSYNCOBJ_MISSING, reason="pysyncobj is not installed (pip install 'raftka[pysyncobj]')"
        ),
    ),
]


def engine_properties(engine: str) -> dict[str, str]:
    """What a LocalCluster needs to run ``engine`` (pysyncobj requires its password)."""
    if engine == "pysyncobj":
        return {"quorum.pysyncobj.password": "integration-test-secret"}
    return {}


# Long enough that a fake broker registered once stays unfenced through any failover
# a test provokes (a write can wait out a 3 s request to a SIGSTOPped leader); the
# fencing test uses a short one.
SESSION_TIMEOUT_LONG_MS = 60_000
SESSION_TIMEOUT_SHORT_MS = 2_000


@contextlib.contextmanager
def running_cluster(tmp_path: Path, engine: str, session_timeout_ms: int) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path,
        controllers=3,
        engine=engine,
        extra_properties={
            "broker.session.timeout.ms": str(session_timeout_ms),
            **engine_properties(engine),
        },
    ) as c:
        c.start()
        yield c


@pytest.fixture(params=ENGINES)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path, request.param, SESSION_TIMEOUT_LONG_MS) as c:
        yield c


@pytest.fixture(params=ENGINES)
def fencing_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path, request.param, SESSION_TIMEOUT_SHORT_MS) as c:
        yield c


def write(
    cluster: LocalCluster, path: str, body: object, *, deadline_s: float = WRITE_DEADLINE_S
) -> Any:
    """A write as a client does it: try any live controller, follow NOT_CONTROLLER to
    the address it names, retry while an election runs."""
    live = [n for n in cluster.controllers.values() if n.running and not n.paused]
    target: str | None = None
    last: object = None

    def attempt() -> Any:
        nonlocal target, last
        address = target or live[int(time.monotonic() * 10) % len(live)].address
        try:
            status, answer = http_json(address, path, method="POST", body=body, timeout_s=3)
        except OSError as e:
            last, target = e, None
            return None
        if status == 200:
            return answer
        last = answer
        target = answer.get("leader_address") if isinstance(answer, dict) else None
        return None

    return wait_for(attempt, timeout_s=deadline_s, message=lambda: f"{path} failed: {last}")


def create_topic(cluster: LocalCluster, name: str, **fields: Any) -> None:
    answer = write(cluster, "/v1/topics", {"topics": [{"name": name, **fields}]})
    error = answer["topics"][0]["error"]
    # A retried create may find its own earlier attempt committed.
    assert error is None or error["error"] == "TOPIC_ALREADY_EXISTS", answer


def read_log(address: str) -> tuple[MetadataImage, list[tuple[int, Any]]]:
    """The committed metadata of one controller (GET /v1/metadata from 0) as an image
    and as its (offset, records) list."""
    image = MetadataImage.EMPTY
    batches: list[tuple[int, Any]] = []
    offset = 0
    for _ in range(10_000):
        status, page = http_json(address, f"/v1/metadata?offset={offset}&records_max=1000")
        assert status == 200, page
        if page["snapshot"] is not None:
            snap = page["snapshot"]
            records = [record_from_dict(r) for r in snap["records"]]
            image = image_from_records(records, snap["end_offset"] - 1, snap["epoch"])
            batches.append((-1, snap["records"]))
        for batch in page["batches"]:
            delta = MetadataDelta(image)
            delta.replay_all(record_from_dict(r) for r in batch["records"])
            delta.offset = batch["offset"]
            image = delta.apply()
            batches.append((batch["offset"], batch["records"]))
        if page["next_offset"] >= page["high_watermark"] or page["next_offset"] == offset:
            return image, batches
        offset = page["next_offset"]
    raise AssertionError("metadata log did not end")


def topics_on(address: str) -> set[str]:
    try:
        return set(read_log(address)[0].topics.by_name)
    except OSError:
        return set()


def wait_has_topics(node: NodeProcess, names: set[str], *, timeout_s: float) -> None:
    wait_for(
        lambda: names <= topics_on(node.address),
        timeout_s=timeout_s,
        message=lambda: f"controller {node.node_id} has {topics_on(node.address)}",
    )


def register_one_broker(cluster: LocalCluster) -> None:
    """Topics need a usable broker (RF 1 by default): register and unfence one."""
    epoch = write(
        cluster,
        "/v1/brokers/register",
        {"broker_id": 1, "incarnation_id": str(uuid.uuid4()), "endpoints": []},
    )["broker_epoch"]
    write(
        cluster,
        "/v1/brokers/heartbeat",
        {"broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": epoch},
    )


def test_failover_keeps_every_committed_topic(cluster: LocalCluster) -> None:
    """Followers redirect to the active controller; kill -9 of it elects another within
    the bound, which commits; every survivor's log holds every topic created before."""
    leader = cluster.wait_leader()
    follower = next(n for n in cluster.controllers.values() if n.node_id != leader)

    def redirect() -> dict[str, Any] | None:
        # A follower refuses at once, but names the leader only once the leader's first
        # append (or heartbeat) has reached it: until then the hint is null, as Kafka's is.
        status, answer = http_json(
            follower.address, "/v1/topics", method="POST", body={"topics": [{"name": "t0"}]}
        )
        assert status == 503 and answer["error"] == "NOT_CONTROLLER", answer
        return answer if answer.get("leader_address") else None

    answer = wait_for(redirect, timeout_s=10, message="the follower never named the leader")
    assert answer["leader_address"] == cluster.controllers[leader].address
    register_one_broker(cluster)
    names = [f"before-{i}" for i in range(5)]
    for name in names:
        create_topic(cluster, name)

    cluster.controllers[leader].kill()
    started = time.monotonic()
    create_topic(cluster, "after-failover")
    elapsed = time.monotonic() - started
    print(f"failover: a new active controller committed {elapsed:.2f} s after kill -9")
    assert elapsed < FAILOVER_BOUND_S
    new_leader = cluster.wait_leader(excluding=(leader,))
    assert new_leader != leader

    expected = {*names, "after-failover"}
    for node in cluster.controllers.values():
        if node.node_id == leader:
            continue
        wait_has_topics(node, expected, timeout_s=10)


def test_paused_controller_catches_up(cluster: LocalCluster) -> None:
    """SIGSTOP one follower: the other two keep committing; after SIGCONT it catches up
    to the very same log (payload by payload)."""
    register_one_broker(cluster)
    leader = cluster.wait_leader()
    paused = next(n for n in cluster.controllers.values() if n.node_id != leader)
    paused.pause()
    for i in range(5):
        create_topic(cluster, f"while-paused-{i}")
    paused.resume()

    def logs_equal() -> bool:
        logs = [read_log(n.address)[1] for n in cluster.controllers.values()]
        return all(log == logs[0] for log in logs) and len(logs[0]) >= 7

    wait_for(logs_equal, timeout_s=15, message="the three logs differ")
    assert {f"while-paused-{i}" for i in range(5)} <= topics_on(paused.address)


def test_committed_topics_survive_killing_all(cluster: LocalCluster) -> None:
    """kill -9 of all three controllers, then a restart: every committed topic is still
    there, and the restarted quorum accepts writes again."""
    register_one_broker(cluster)
    names = {f"durable-{i}" for i in range(5)}
    for name in sorted(names):
        create_topic(cluster, name)
    cluster.kill_all_and_restart()
    cluster.wait_leader()
    create_topic(cluster, "after-restart")
    for node in cluster.controllers.values():
        wait_has_topics(node, names | {"after-restart"}, timeout_s=15)


class Heartbeats:
    """Fake brokers' heartbeat loop on a thread (a periodic duty, not a wait)."""

    def __init__(self, cluster: LocalCluster, epochs: dict[int, int]) -> None:
        self.cluster = cluster
        self.epochs = epochs
        self.silent: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for broker_id, epoch in list(self.epochs.items()):
                if broker_id in self.silent:
                    continue
                body = {
                    "broker_id": broker_id,
                    "broker_epoch": epoch,
                    "current_metadata_offset": epoch,
                }
                with contextlib.suppress(TimeoutError):  # the next beat retries
                    write(self.cluster, "/v1/brokers/heartbeat", body, deadline_s=2)
            self.stop.wait(0.3)


def test_silent_broker_is_fenced_and_loses_leadership(fencing_cluster: LocalCluster) -> None:
    """Three fake brokers register and heartbeat; an RF=3 topic is created; one broker
    goes silent: after broker.session.timeout.ms (2 s here) it is fenced, leaves every
    ISR, and each partition it led gets a new leader from its ISR."""
    cluster = fencing_cluster
    epochs: dict[int, int] = {}
    for broker_id in (1, 2, 3):
        answer = write(
            cluster,
            "/v1/brokers/register",
            {
                "broker_id": broker_id,
                "incarnation_id": str(uuid.uuid4()),
                "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + broker_id}],
            },
        )
        epochs[broker_id] = answer["broker_epoch"]
    beats = Heartbeats(cluster, epochs)
    beats.thread.start()
    try:
        leader = cluster.wait_leader()
        address = cluster.controllers[leader].address
        wait_for(
            lambda: (
                all(not b.fenced for b in read_log(address)[0].cluster.brokers.values())
                and len(read_log(address)[0].cluster.brokers) == 3
            ),
            timeout_s=10,
            message="the three brokers were not unfenced",
        )
        create_topic(cluster, "replicated", num_partitions=3, replication_factor=3)
        image = read_log(address)[0]
        topic = image.topics.topic_by_name("replicated")
        assert topic is not None
        led = {i: p.leader for i, p in topic.partitions.items()}
        victim = led[0]
        beats.silent.add(victim)
        silenced = time.monotonic()

        def fenced() -> MetadataImage | None:
            img = read_log(address)[0]
            broker = img.cluster.broker(victim)
            return img if broker is not None and broker.fenced else None

        image = wait_for(fenced, timeout_s=15, message=f"broker {victim} was not fenced")
        print(f"broker {victim} fenced {time.monotonic() - silenced:.2f} s after going silent")
        topic = image.topics.topic_by_name("replicated")
        assert topic is not None
        for index, partition in topic.partitions.items():
            assert victim not in partition.isr, (index, partition)
            assert partition.leader != victim and partition.leader in partition.isr
            if led[index] == victim:
                assert partition.leader_epoch > 0
    finally:
        beats.stop.set()
        beats.thread.join(timeout=10)


def test_paused_active_controller_steps_down_and_rejoins(cluster: LocalCluster) -> None:
    """SIGSTOP the active controller and queue a create-topics request on its socket
    (the kernel accepts it; the process reads it after SIGCONT). The other two elect a
    new active controller and commit, among others, the same topic. SIGCONT: the queued
    request, run on the deposed leader's stale image, must not commit (if it answers
    success, its topic id is the one every log holds, and no node skipped a payload);
    once the old leader has learned the new epoch it reports itself a follower and
    answers NOT_CONTROLLER naming the new active controller; then all three logs are
    identical, offset by offset."""
    register_one_broker(cluster)
    old_id = cluster.wait_leader()
    old = cluster.controllers[old_id]
    old.pause()
    stale: dict[str, Any] = {}

    def send_stale() -> None:
        try:
            stale["answer"] = http_json(
                old.address,
                "/v1/topics",
                method="POST",
                body={"topics": [{"name": "twice"}]},
                timeout_s=30,
            )
        except OSError as e:
            stale["answer"] = (-1, str(e))

    sender = threading.Thread(target=send_stale, daemon=True)
    sender.start()
    for i in range(3):
        create_topic(cluster, f"while-leader-paused-{i}")
    create_topic(cluster, "twice")
    new_id = cluster.wait_leader(excluding=(old_id,))
    assert new_id != old_id
    old.resume()
    sender.join(timeout=40)
    assert not sender.is_alive()

    def stepped_down() -> dict[str, Any] | None:
        health = old.health()
        if health is None or health["role"] == "leader" or health["active_controller"]:
            return None
        leader_id = health["leader_id"]
        return health if leader_id is not None and leader_id != old_id else None

    health = wait_for(stepped_down, timeout_s=15, message=lambda: f"old leader: {old.health()}")
    status, answer = http_json(
        old.address, "/v1/topics", method="POST", body={"topics": [{"name": "refused"}]}
    )
    assert status == 503 and answer["error"] == "NOT_CONTROLLER", answer
    assert answer["leader_address"] == cluster.controllers[health["leader_id"]].address, answer
    create_topic(cluster, "after-heal")

    expected = {f"while-leader-paused-{i}" for i in range(3)} | {"twice", "after-heal"}

    def logs_equal() -> list[tuple[MetadataImage, list[tuple[int, Any]]]] | None:
        # read_log raises MetadataReplayError on a payload that does not replay.
        logs = [read_log(n.address) for n in cluster.controllers.values()]
        same = all(log[1] == logs[0][1] for log in logs)
        return logs if same and expected <= set(logs[0][0].topics.by_name) else None

    logs = wait_for(logs_equal, timeout_s=15, message="the three logs differ")
    image = logs[0][0]
    assert "refused" not in image.topics.by_name
    status, answer = stale["answer"]
    if status == 200 and answer["topics"][0]["error"] is None:
        twice = image.topics.topic_by_name("twice")
        assert twice is not None
        assert answer["topics"][0]["topic_id"] == str(twice.topic_id), (answer, twice)
