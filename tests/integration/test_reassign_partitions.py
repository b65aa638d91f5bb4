"""``raftka partitions reassign`` (kafka-reassign-partitions) against real processes:
three controllers and four brokers.

A partition on brokers [101, 102, 103], led by 101, is moved to [102, 103, 104] while
an idempotent producer writes to it with acks=all: the new replica copies the log, the
move completes, 101 (the leader) leaves, and every acknowledged record is read back
at its offset, once. ``--generate`` proposes a plan over the given brokers; ``--verify``
and ``--list`` report; ``--cancel`` takes a partition back to its original replicas;
``--throttle`` slows a move to its rate, and ``--verify`` removes the throttle.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from raftka.__main__ import cli
from raftka.client import Consumer, NewTopic, Producer, TopicPartition
from raftka.common.errors import KafkaError
from raftka.local import wait_for
from raftka.local.processes import http_json
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
API_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(
        tmp_path_factory.mktemp("reassign"),
        brokers=4,
        controller_properties={"auto.leader.rebalance.enable": "false"},
        kafka_listener=True,
    ) as env:
        yield env


def _run(env: RaftkaCluster, *args: str, avoid: int | None = None) -> Result:
    """One command; ``avoid``: a (paused) broker left out of the bootstrap list."""
    servers = ",".join(env.brokers[b].address for b in env.brokers.ids if b != avoid)
    return CliRunner().invoke(
        cli,
        [
            "partitions",
            "reassign",
            *args,
            "--bootstrap-server",
            servers,
            "--api-timeout-ms",
            str(API_TIMEOUT_MS),
        ],
    )


def _file(path: Path, partitions: list[dict[str, object]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return str(path)


def _replicas(env: RaftkaCluster, topic: str) -> dict[int, tuple[int, ...]]:
    (d,) = env.admin.describe_topics([topic])
    return {p.partition: p.replicas for p in d.partitions}


def _wait_replicas(env: RaftkaCluster, topic: str, replicas: dict[int, tuple[int, ...]]) -> None:
    """Until a broker's metadata shows ``replicas``: the controller answers that a move
    completed (list_partition_reassignments) as soon as it commits, and the broker that
    describe_topics asks may apply that record a moment later."""
    wait_for(
        lambda: _replicas(env, topic) == replicas,
        timeout_s=DEADLINE_S,
        message=lambda: f"{topic}: replicas {_replicas(env, topic)}, not {replicas}",
    )


def test_moving_the_leaders_replica_under_load_loses_nothing(
    env: RaftkaCluster, tmp_path: Path
) -> None:
    topic = "moving"
    env.admin.create_topics(
        [
            NewTopic(
                topic,
                replica_assignment={0: (101, 102, 103)},
                configs={"min.insync.replicas": "2"},
            )
        ],
        timeout_ms=API_TIMEOUT_MS,
    )
    env.wait_topic(topic, 1)
    acked: dict[int, bytes] = {}
    failures: list[BaseException] = []
    stop = threading.Event()
    moved = threading.Event()
    after_move = [0]

    def produce() -> None:
        with Producer(
            bootstrap_servers=env.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            max_block_ms=API_TIMEOUT_MS,
        ) as producer:
            i = 0
            while not stop.is_set():
                value = b"v-%d" % i
                try:
                    meta = producer.send(topic, value, partition=0).result(timeout=30)
                except KafkaError as e:  # a send that failed was not acknowledged
                    failures.append(e)
                else:
                    acked[meta.offset] = value
                    if moved.is_set():
                        after_move[0] += 1
                i += 1

    writer = threading.Thread(target=produce, name="writer")
    writer.start()
    try:
        wait_for(
            lambda: len(acked) >= 200,
            timeout_s=DEADLINE_S,
            message=lambda: f"no 200 acks before the move: {len(acked)}, {failures[:3]}",
        )
        plan = _file(
            tmp_path / "plan.json",
            [
                {
                    "topic": topic,
                    "partition": 0,
                    "replicas": [102, 103, 104],
                    "log_dirs": ["any"] * 3,
                }
            ],
        )
        result = _run(
            env, "--execute", "--reassignment-json-file", plan, "--wait", "--timeout-s", "60"
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == "Current partition replica assignment"
        assert json.loads(lines[2]) == {
            "version": 1,
            "partitions": [
                {
                    "topic": topic,
                    "partition": 0,
                    "replicas": [101, 102, 103],
                    "log_dirs": ["any"] * 3,
                }
            ],
        }
        assert f"Successfully started partition reassignments for {topic}-0" in lines
        assert lines[-1] == "Every partition reassignment completed."
        moved.set()
        wait_for(
            lambda: after_move[0] >= 100, timeout_s=DEADLINE_S, message="no 100 acks after the move"
        )
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive()

    _wait_replicas(env, topic, {0: (102, 103, 104)})
    verify = _run(env, "--verify", "--reassignment-json-file", plan)
    assert verify.exit_code == 0, verify.output
    assert f"Reassignment of partition {topic}-0 is completed." in verify.output
    assert _run(env, "--list").output.strip() == "No partition reassignments found."
    # 101 deleted its replica; 104 holds one.
    wait_for(
        lambda: not (env.brokers[101].data_dir / "logs" / f"{topic}-0").exists(),
        timeout_s=DEADLINE_S,
        message="broker 101 kept its replica after leaving",
    )
    described = env.admin.describe_log_dirs([104])
    assert any(TopicPartition(topic, 0) in d.replica_infos for d in described[104].values())

    # Every acknowledged record at its offset, and no value twice.
    tp = TopicPartition(topic, 0)
    end = max(acked) + 1
    read: dict[int, bytes] = {}
    with Consumer(
        bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        wait_for(
            lambda: (
                read.update(
                    {r.offset: r.value for rs in consumer.poll(500).values() for r in rs if r.value}
                )
                or (len(read) >= end and read)
            ),
            timeout_s=DEADLINE_S,
            message=f"did not read back {end} records",
        )
    lost = {o: v for o, v in acked.items() if read.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records not at their offset: {sorted(lost)[:10]}"
    values = list(read.values())
    assert len(values) == len(set(values)), "a record was written twice"


def test_generate_cancel_and_refusals(env: RaftkaCluster, tmp_path: Path) -> None:
    env.create_topic("plan", partitions=2, replication_factor=2)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": "plan"}], "version": 1}))
    out = _run(
        env, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "101,104"
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"]
    assert [p["replicas"] for p in proposed] == [[101, 104], [104, 101]]

    # A move to a broker that cannot catch up (paused) stays in progress; cancel it.
    current = _replicas(env, "plan")[0]
    spare = next(b for b in env.brokers.ids if b not in current)
    env.brokers[spare].pause()
    try:
        plan = _file(
            tmp_path / "slow.json",
            [{"topic": "plan", "partition": 0, "replicas": [spare, *current[1:]]}],
        )
        started = _run(env, "--execute", "--reassignment-json-file", plan, avoid=spare)
        assert started.exit_code == 0, started.output
        listed = _run(env, "--list", avoid=spare).output
        assert listed.startswith("plan-0: replicas: "), listed
        assert (
            "still in progress"
            in _run(env, "--verify", "--reassignment-json-file", plan, avoid=spare).output
        )
        cancelled = _run(env, "--cancel", "--reassignment-json-file", plan, avoid=spare)
        assert cancelled.exit_code == 0, cancelled.output
        assert (
            cancelled.output.strip() == "Successfully cancelled partition reassignments for: plan-0"
        )
    finally:
        env.brokers[spare].resume()

    bad = _file(tmp_path / "bad.json", [{"topic": "plan", "partition": 0, "replicas": [101, 999]}])
    refused = _run(env, "--execute", "--reassignment-json-file", bad)
    assert refused.exit_code == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in refused.output, refused.output
    # Back on the original brokers (a cancel keeps Kafka's order: the target's
    # replicas first, then those that were to leave; the preferred leader may change).
    # Waited for: the admin client may ask the broker that was just resumed, whose
    # metadata catches up with the committed cancel only after it is running again.
    wait_for(
        lambda: sorted(_replicas(env, "plan")[0]) == sorted(current),
        timeout_s=DEADLINE_S,
        message=f"plan-0 did not go back to {sorted(current)} after the cancel",
    )
    nothing = _run(env, "--verify")
    assert nothing.exit_code == 2 and "--reassignment-json-file" in nothing.output


def test_kafka_python_reassignments_over_the_kafka_listener(env: RaftkaCluster) -> None:
    """kafka-python's alter/list_partition_reassignments through the Kafka listener:
    a reordering completes at once, an unregistered broker is
    INVALID_REPLICA_ASSIGNMENT, a cancel of nothing NO_REASSIGNMENT_IN_PROGRESS, and
    nothing is listed as in progress."""
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
    )

    env.create_topic("kp-move", partitions=1, replication_factor=2)
    before = _replicas(env, "kp-move")[0]
    admin = KafkaAdminClient(
        bootstrap_servers=env.brokers.kafka_bootstrap_servers, request_timeout_ms=20_000
    )
    try:
        tp = KpTopicPartition("kp-move", 0)
        assert admin.alter_partition_reassignments({tp: list(reversed(before))}) == {tp: None}
        wait_for(
            lambda: _replicas(env, "kp-move")[0] == tuple(reversed(before)),
            timeout_s=DEADLINE_S,
            message="the reordering did not complete",
        )
        refused = admin.alter_partition_reassignments({tp: [before[0], 999]})
        assert refused[tp] is InvalidReplicationAssignmentError, refused
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()


def test_throttled_move_is_slowed_and_the_throttle_is_removed(
    env: RaftkaCluster, tmp_path: Path
) -> None:
    """``--execute --throttle``: a partition holding ~2 MB moves from [101, 102, 103]
    to [102, 103, 104] at 200 KB/s, so its copy to 104 takes at least half of
    size/rate (the throttle is real), while a produce and consume on an unthrottled
    topic goes on during the move; ``--verify`` then removes every throttle config
    (describe shows them gone), and every acknowledged record is read back."""
    topic, free = "throttled", "unthrottled"
    rate = 200_000
    env.admin.create_topics(
        [
            NewTopic(topic, replica_assignment={0: (101, 102, 103)}),
            NewTopic(free, replica_assignment={0: (101, 102, 103)}),
        ],
        timeout_ms=API_TIMEOUT_MS,
    )
    env.wait_topic(topic, 1)
    env.wait_topic(free, 1)
    acked: dict[int, bytes] = {}
    with Producer(bootstrap_servers=env.bootstrap_servers, acks="all") as producer:
        futures = [
            (i, producer.send(topic, b"%06d" % i + bytes(10_000), partition=0)) for i in range(200)
        ]
        for i, future in futures:
            acked[future.result(timeout=30).offset] = b"%06d" % i + bytes(10_000)
    size = sum(len(v) for v in acked.values())

    plan = _file(
        tmp_path / "throttled.json",
        [{"topic": topic, "partition": 0, "replicas": [102, 103, 104]}],
    )
    refused = _run(env, "--verify", "--reassignment-json-file", plan, "--throttle", "1")
    assert refused.exit_code == 2 and "--throttle goes with --execute only" in refused.output

    started_s = time.monotonic()
    result = _run(env, "--execute", "--reassignment-json-file", plan, "--throttle", str(rate))
    assert result.exit_code == 0, result.output
    assert f"The inter-broker throttle limit was set to {rate} B/s" in result.output
    throttles = env.admin.describe_configs([topic])[topic]
    assert throttles["leader.replication.throttled.replicas"].value == "0:101,0:102,0:103"
    assert throttles["follower.replication.throttled.replicas"].value == "0:104"

    # An unthrottled topic replicates and serves as usual while the copy is throttled.
    tp_free = TopicPartition(free, 0)
    with Producer(bootstrap_servers=env.bootstrap_servers, acks="all") as producer:
        free_offsets = [
            producer.send(free, b"f-%d" % i).result(timeout=10).offset for i in range(50)
        ]
    with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([tp_free])
        got: list[bytes] = []
        wait_for(
            lambda: (
                got.extend(r.value or b"" for rs in c.poll(200).values() for r in rs)
                or len(got) >= 50
            ),
            timeout_s=DEADLINE_S,
            message=lambda: f"unthrottled topic: read {len(got)} of 50",
        )
    assert got[:50] == [b"f-%d" % i for i in range(50)] and free_offsets == list(range(50))
    assert env.admin.list_partition_reassignments(), "the throttled move ended too soon"
    _status, health = http_json(env.brokers[104].address, "/health")
    assert health["replication_quotas"]["follower"]["rate_bytes_per_s"] == rate, health

    wait_for(
        lambda: not env.admin.list_partition_reassignments(),
        timeout_s=DEADLINE_S,
        message="the throttled move did not complete",
    )
    elapsed_s = time.monotonic() - started_s
    assert elapsed_s >= 0.5 * size / rate, f"{size} bytes moved in {elapsed_s:.1f} s"
    _wait_replicas(env, topic, {0: (102, 103, 104)})

    verify = _run(env, "--verify", "--reassignment-json-file", plan)
    assert verify.exit_code == 0, verify.output
    assert "Throttle was removed." in verify.output
    assert (
        "Throttle was removed."
        not in _run(env, "--verify", "--reassignment-json-file", plan).output
    )
    described = env.admin.describe_configs([topic])[topic]
    assert described["leader.replication.throttled.replicas"].source == "DEFAULT_CONFIG"
    assert described["follower.replication.throttled.replicas"].source == "DEFAULT_CONFIG"
    rate_keys = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    wait_for(
        lambda: (
            not any(
                k in entries
                for entries in env.admin.describe_broker_configs().values()
                for k in rate_keys
            )
        ),
        timeout_s=DEADLINE_S,
        message="a broker still describes a throttle rate",
    )

    read: dict[int, bytes] = {}
    with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        wait_for(
            lambda: (
                read.update(
                    {r.offset: r.value for rs in c.poll(500).values() for r in rs if r.value}
                )
                or len(read) >= len(acked)
            ),
            timeout_s=DEADLINE_S,
            message=f"did not read back {len(acked)} records",
        )
    lost = [o for o, v in acked.items() if read.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records not at their offset: {lost[:10]}"
