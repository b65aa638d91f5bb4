"""``raftka leaders elect`` (kafka-leader-election) against real processes.

Three controllers (with the automatic preferred-leader rebalance off, so that only the
command moves leaders) and three brokers; a topic of three partitions, each preferring
another broker. Killing the broker that prefers ``p-0`` moves that leadership away;
once it is back in the ISR, ``--election-type preferred --all-topic-partitions``
moves the leadership back to it and reports it, a second run finds nothing to do, and
``--topic --partition`` on a balanced partition says the replica is already elected.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from raftka.__main__ import cli
from raftka.client import TopicPartition
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
API_TIMEOUT_MS = 20_000
TOPIC = "elect"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(
        tmp_path_factory.mktemp("elect"),
        controller_properties={"auto.leader.rebalance.enable": "false"},
        kafka_listener=True,
    ) as env:
        yield env


def _run(env: RaftkaCluster, *args: str) -> Result:
    return CliRunner().invoke(
        cli,
        [
            "leaders",
            "elect",
            *args,
            "--bootstrap-server",
            env.bootstrap_servers,
            "--api-timeout-ms",
            str(API_TIMEOUT_MS),
        ],
    )


def _leaders(env: RaftkaCluster) -> dict[int, tuple[int | None, tuple[int, ...], tuple[int, ...]]]:
    (d,) = env.admin.describe_topics([TOPIC])
    return {p.partition: (p.leader, p.replicas, p.isr) for p in d.partitions}


def test_preferred_election_moves_leadership_back(env: RaftkaCluster) -> None:
    env.create_topic(TOPIC, partitions=3, configs={"min.insync.replicas": "1"})
    before = _leaders(env)
    assert all(leader == replicas[0] for leader, replicas, _ in before.values()), before
    preferred = before[0][1][0]

    env.brokers[preferred].kill()
    wait_for(
        lambda: _leaders(env)[0][0] not in (None, preferred),
        timeout_s=DEADLINE_S,
        message=f"p-0's leadership did not leave the killed broker {preferred}",
    )
    env.brokers[preferred].start()
    env.brokers.wait_unfenced(preferred)
    wait_for(
        lambda: all(preferred in isr for _, _, isr in _leaders(env).values()),
        timeout_s=DEADLINE_S,
        message=f"broker {preferred} did not rejoin every ISR",
    )
    moved = {i for i, (leader, replicas, _) in _leaders(env).items() if leader != replicas[0]}
    assert 0 in moved, "p-0 should still be led by another broker (no automatic rebalance)"

    result = _run(env, "--election-type", "preferred", "--all-topic-partitions")
    assert result.exit_code == 0, result.output
    names = ", ".join(str(TopicPartition(TOPIC, i)) for i in sorted(moved))
    assert result.output.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {names}"
    ]
    after = _leaders(env)
    assert all(leader == replicas[0] for leader, replicas, _ in after.values()), after

    again = _run(env, "--election-type", "preferred", "--all-topic-partitions")
    assert (again.exit_code, again.output) == (0, ""), again.output
    one = _run(env, "--election-type", "PREFERRED", "--topic", TOPIC, "--partition", "1")
    assert one.exit_code == 0, one.output
    assert one.output.splitlines() == [f"Valid replica already elected for partitions {TOPIC}-1"]


def test_election_errors_are_reported_per_partition(env: RaftkaCluster) -> None:
    """An unknown partition is reported with Kafka's error name and the command exits 1;
    naming partitions two ways is a usage error."""
    result = _run(env, "--election-type", "unclean", "--topic", "nope", "--partition", "0")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(
        "Error completing leader election (UNCLEAN) for partition: nope-0: "
        "UNKNOWN_TOPIC_OR_PARTITION"
    ), lines
    assert lines[-1] == "Error: 1 replica(s) could not be elected", lines
    both = _run(env, "--election-type", "preferred", "--all-topic-partitions", "--topic", TOPIC)
    assert both.exit_code == 2 and "one way" in both.output, both.output


def test_confluent_kafka_elect_leaders_over_the_kafka_listener(env: RaftkaCluster) -> None:
    """librdkafka's ElectLeaders (through the Kafka listener, forwarded to the
    controller): a balanced partition answers ELECTION_NOT_NEEDED, an unknown one
    UNKNOWN_TOPIC_OR_PARTITION, per partition."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CkTopicPartition
    from confluent_kafka.admin import AdminClient

    env.create_topic("elect-ck", partitions=1)
    admin = AdminClient({"bootstrap.servers": env.brokers.kafka_bootstrap_servers})
    future = admin.elect_leaders(
        ElectionType.PREFERRED,
        [CkTopicPartition("elect-ck", 0), CkTopicPartition("elect-ck", 5)],
    )
    results = {(tp.topic, tp.partition): e for tp, e in future.result(timeout=30).items()}
    assert set(results) == {("elect-ck", 0), ("elect-ck", 5)}, results
    codes = {tp: None if e is None else e.code() for tp, e in results.items()}
    # Kafka's codes: ELECTION_NOT_NEEDED 84, UNKNOWN_TOPIC_OR_PARTITION 3.
    assert codes == {("elect-ck", 0): 84, ("elect-ck", 5): 3}, results
