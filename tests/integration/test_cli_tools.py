"""The client command line (``raftka topics|produce|consume``) and Admin.delete_records
against one real cluster (3 controllers + 3 brokers as processes), started once for
this module.

Most commands run in-process through click's CliRunner (the process boundary does not
matter for what they print); the error cases run the real ``raftka`` command
(``python -m raftka``) as a subprocess, since "no traceback, one line, non-zero exit"
is about what a person sees in a terminal.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import invoke_raftka
from click.testing import Result

from raftka.client import Consumer, Producer, TopicPartition
from raftka.common.errors import OffsetOutOfRangeError
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
API_TIMEOUT_MS = 20_000


class Env(RaftkaCluster):
    def run(self, *args: str, stdin: bytes | None = None) -> Result:
        """One ``raftka`` command in-process, against this cluster."""
        return invoke_raftka(
            self.bootstrap_servers, args, api_timeout_ms=API_TIMEOUT_MS, stdin=stdin
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(tmp_path_factory.mktemp("cli")) as env:
        yield env


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


def _raftka(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """The real command in a child process (bounded: every command has a timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "raftka", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env={**os.environ, "RAFTKA_BOOTSTRAP_SERVERS": ""},
        check=False,
    )


def test_topics_create_describe_alter_list_delete(env: Env) -> None:
    """create with --config shows up in describe (partitions with leader/replicas/ISR
    and the non-default config); alter sets and deletes configs and adds partitions;
    list names the topic until delete removes it."""
    out = _ok(
        env.run(
            "topics", "create", "--topic", "cli-admin", "--partitions", "2",
            "--replication-factor", "3", "--config", "retention.ms=600000",
        )
    )  # fmt: skip
    assert out == "Created topic cli-admin.\n"
    env.wait_topic("cli-admin", 2)
    lines = _ok(env.run("topics", "describe", "--topic", "cli-admin")).splitlines()
    assert lines[0].startswith("Topic: cli-admin\tTopicId: ")
    assert "PartitionCount: 2\tReplicationFactor: 3\tConfigs: retention.ms=600000" in lines[0]
    assert len(lines) == 3
    for p, line in enumerate(lines[1:]):
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        assert fields["Partition"] == str(p)
        assert int(fields["Leader"]) in (101, 102, 103)
        assert sorted(fields["Replicas"].split(",")) == ["101", "102", "103"]
        assert fields["Isr"]
    out = _ok(
        env.run(
            "topics", "alter", "--topic", "cli-admin", "--add-config", "cleanup.policy=delete",
            "--add-config", "segment.ms=3600000", "--delete-config", "retention.ms",
            "--partitions", "4",
        )
    )  # fmt: skip
    assert "Updated config for topic cli-admin." in out
    assert "now has 4 partitions" in out
    env.wait_topic("cli-admin", 4)
    lines = _ok(env.run("topics", "describe", "--topic", "cli-admin")).splitlines()
    assert "PartitionCount: 4" in lines[0]
    assert "segment.ms=3600000" in lines[0]
    assert "retention.ms" not in lines[0]
    assert len(lines) == 5
    assert "cli-admin" in _ok(env.run("topics", "list")).splitlines()
    assert _ok(env.run("topics", "delete", "--topic", "cli-admin")) == "Deleted topic cli-admin.\n"
    wait_for(
        lambda: "cli-admin" not in _ok(env.run("topics", "list")).splitlines(),
        timeout_s=DEADLINE_S,
        message="cli-admin still listed after delete",
    )


def test_produce_consume_round_trip(env: Env) -> None:
    """Keyed lines produced to partition 0 read back with --from-beginning/--print-key
    and --max-messages; --partition/--offset start in the middle; --timeout-ms ends a
    consume that runs out of records; --print-timestamp prefixes CreateTime."""
    _ok(env.run("topics", "create", "--topic", "cli-data", "--partitions", "2"))
    env.wait_topic("cli-data", 2)
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(10))
    _ok(env.run("produce", "cli-data", "--key-separator", ":", "--partition", "0", stdin=lines))
    _ok(env.run("produce", "cli-data", "--partition", "1", stdin=b"plain\n"))

    out = _ok(
        env.run(
            "consume", "cli-data", "--partition", "0", "--from-beginning", "--max-messages", "10",
            "--print-key", "--key-separator", "=",
        )
    )  # fmt: skip
    assert out.splitlines() == [f"k{i}=v{i}" for i in range(10)]

    out = _ok(
        env.run(
            "consume", "cli-data", "--partition", "0", "--offset", "7", "--max-messages", "2",
        )
    )  # fmt: skip
    assert out.splitlines() == ["v7", "v8"]

    # Every partition from the beginning, stopping when idle: all 11 records.
    result = env.run("consume", "cli-data", "--from-beginning", "--timeout-ms", "1500")
    assert sorted(_ok(result).splitlines()) == sorted([f"v{i}" for i in range(10)] + ["plain"])
    assert "Processed a total of 11 messages" in result.stderr

    out = _ok(
        env.run(
            "consume", "cli-data", "--partition", "1", "--offset", "earliest",
            "--max-messages", "1", "--print-timestamp", "--print-key",
        )
    )  # fmt: skip
    timestamp, key, value = out.rstrip("\n").split("\t")
    assert timestamp.startswith("CreateTime:") and int(timestamp.split(":")[1]) > 0
    assert (key, value) == ("null", "plain")


def _assert_one_line_error(run: subprocess.CompletedProcess[bytes], name: str) -> None:
    stderr = run.stderr.decode()
    assert run.returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert name in lines[0], stderr


def test_errors_are_one_line_without_traceback(env: Env) -> None:
    """The real command, for an unknown topic (describe, produce, consume), a bad
    config value, and an unreachable bootstrap server (bounded by --api-timeout-ms):
    one line naming Kafka's error on stderr, a non-zero exit, no traceback."""
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]
    _assert_one_line_error(
        _raftka("topics", "describe", "--topic", "no-such-topic", *bootstrap),
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    _assert_one_line_error(
        _raftka("produce", "no-such-topic", *bootstrap, stdin=b"x\n"),
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    _assert_one_line_error(
        _raftka("consume", "no-such-topic", "--max-messages", "1", *bootstrap),
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    _assert_one_line_error(
        _raftka(
            "topics", "create", "--topic", "bad-config", "--config", "retention.ms=forever",
            *bootstrap,
        ),
        "INVALID_CONFIG",
    )  # fmt: skip
    started = time.monotonic()
    _assert_one_line_error(
        _raftka("topics", "list", "--bootstrap-server", "127.0.0.1:1", "--api-timeout-ms", "1500"),
        "NETWORK_EXCEPTION",
    )
    assert time.monotonic() - started < 30, "the unreachable bootstrap was not bounded"


# --------------------------------------------------------------------- delete_records


def _log_start_on_disk(env: Env, broker_id: int, topic: str) -> int:
    path = env.brokers[broker_id].data_dir / "logs" / f"{topic}-0" / "log-start-offset-checkpoint"
    lines = path.read_text().split("\n")
    return int(lines[2])


def test_delete_records_moves_the_log_start_on_every_replica(env: Env) -> None:
    """100 records, delete before 40: the low watermark answered is 40, ListOffsets
    earliest is 40, every replica's log start checkpoint on disk is 40 (followers
    follow the leader), a consumer seeking to 10 is reset by auto_offset_reset
    (earliest -> 40, latest -> 100) or gets OFFSET_OUT_OF_RANGE with none; an offset
    above the high watermark is OFFSET_OUT_OF_RANGE; -1 means the high watermark."""
    topic = "delete-records"
    env.create_topic(topic)
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as producer:
        for i in range(100):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(timeout_ms=API_TIMEOUT_MS)

    assert env.admin.delete_records({tp: 40}, timeout_ms=API_TIMEOUT_MS) == {tp: 40}
    assert env.admin.list_offsets({tp: "earliest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset == 40
    assert {b: _log_start_on_disk(env, b, topic) for b in env.brokers.ids} == {
        b: 40 for b in env.brokers.ids
    }
    # Deleting below the current start again changes nothing.
    assert env.admin.delete_records({tp: 20}, timeout_ms=API_TIMEOUT_MS) == {tp: 40}

    for reset, expected in (("earliest", 40), ("latest", 100)):
        with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset=reset) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 10)
            deadline = time.monotonic() + DEADLINE_S
            if reset == "earliest":
                got: list[int] = []
                while not got:
                    assert time.monotonic() < deadline, "no record after the reset"
                    got = [r.offset for rs in consumer.poll(1_000).values() for r in rs]
                assert got[0] == expected
            else:
                while consumer.position(tp, API_TIMEOUT_MS) != expected:
                    assert time.monotonic() < deadline, "the position was not reset to latest"
                    consumer.poll(200)
    with Consumer(bootstrap_servers=env.bootstrap_servers, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 10)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                consumer.poll(500)

    with pytest.raises(OffsetOutOfRangeError):
        env.admin.delete_records({tp: 101}, timeout_ms=API_TIMEOUT_MS)
    assert env.admin.delete_records({tp: -1}, timeout_ms=API_TIMEOUT_MS) == {tp: 100}
    assert env.admin.list_offsets({tp: "earliest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset == 100


def test_records_delete_log_dirs_and_topic_reports(env: Env, tmp_path: Path) -> None:
    """The operator tools of kafka-delete-records, kafka-log-dirs and kafka-topics'
    reports: ``records delete`` with Kafka's offset file moves the log start and prints
    the low watermark; ``log-dirs describe`` lists the partition in a log dir of every
    replica with the bytes written; the min-ISR reports name the partitions whose ISR
    is at (or below) the topic's min.insync.replicas, and a healthy topic is in no
    under-replicated or unavailable report."""
    topic = "operator-tools"
    env.create_topic(topic, partitions=2, configs={"min.insync.replicas": "3"})
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=env.bootstrap_servers, max_block_ms=API_TIMEOUT_MS) as producer:
        for i in range(20):
            producer.send(topic, b"value-%d" % i, partition=0)
        producer.flush(timeout_ms=API_TIMEOUT_MS)

    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        '{"partitions": [{"topic": "operator-tools", "partition": 0, "offset": 5}], "version": 1}'
    )
    out = _ok(env.run("records", "delete", "--offset-json-file", str(offsets)))
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: operator-tools-0\tlow_watermark: 5",
    ]
    assert env.admin.list_offsets({tp: "earliest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset == 5

    out = _ok(env.run("log-dirs", "describe", "--topic-list", topic))
    head, received, document = out.splitlines()
    assert head == "Querying brokers for log directories information"
    assert received == "Received log directory information from brokers " + ",".join(
        str(b) for b in sorted(env.brokers.ids)
    )
    parsed = json.loads(document)
    assert parsed["version"] == 1
    sizes: dict[int, dict[str, int]] = {}
    for broker in parsed["brokers"]:
        for d in broker["logDirs"]:
            assert d["error"] is None, d
            for p in d["partitions"]:
                assert p["isFuture"] is False and p["offsetLag"] >= 0, p
                sizes.setdefault(broker["broker"], {})[p["partition"]] = p["size"]
    assert set(sizes) == set(env.brokers.ids), f"a replica is missing from {sizes}"
    for broker_id, by_partition in sizes.items():
        assert set(by_partition) == {f"{topic}-0", f"{topic}-1"}, (broker_id, by_partition)
        assert by_partition[f"{topic}-0"] > 0, f"broker {broker_id} stores no bytes of {topic}-0"

    def report(option: str) -> list[str]:
        return _ok(env.run("topics", "describe", "--topic", topic, option)).splitlines()

    for healthy in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert report(healthy) == [], healthy
    assert report("--under-min-isr-partitions") == []
    at_min = report("--at-min-isr-partitions")
    assert [line.split("\t")[2] for line in at_min] == ["Partition: 0", "Partition: 1"], at_min
    assert all(line.startswith(f"\tTopic: {topic}") for line in at_min), at_min
    bad = env.run("topics", "describe", "--at-min-isr-partitions", "--unavailable-partitions")
    assert bad.exit_code == 2 and "one report option at a time" in bad.output, bad.output


def test_configs_describe_and_alter_topics_and_brokers(env: Env) -> None:
    """kafka-configs: a topic's overrides are its dynamic configs (``--all`` adds the
    defaults); --alter sets and deletes, with a bracketed list value; ``--all`` lists
    the properties a broker was started with, altering a static broker key is refused
    by name, and a dynamic one (a replication throttle rate) is set, described,
    validated and deleted."""
    topic = "configs-tool"
    env.create_topic(topic, configs={"retention.ms": "86400000"})

    def configs(*args: str) -> str:
        return _ok(env.run("configs", "--entity-type", *args))

    assert configs("topics", "--entity-name", topic, "--describe").splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  retention.ms=86400000 sensitive=false"
        " synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}",
    ]
    out = configs(
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        "cleanup.policy=[compact,delete],segment.ms=3600000",
        "--delete-config",
        "retention.ms",
    )
    assert out.strip() == f"Completed updating config for topic {topic}."
    lines = configs("topics", "--entity-name", topic, "--describe").splitlines()
    assert lines[1:] == [
        "  cleanup.policy=compact,delete sensitive=false"
        " synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
        "  segment.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=3600000}",
    ]
    everything = configs("topics", "--entity-name", topic, "--describe", "--all")
    assert "  max.message.bytes=" in everything and "DEFAULT_CONFIG" in everything

    broker = str(env.brokers.ids[0])
    assert configs("brokers", "--entity-name", broker, "--describe").splitlines() == [
        f"Dynamic configs for broker {broker} are:"
    ]
    static = configs("brokers", "--entity-name", broker, "--describe", "--all")
    assert (
        f"  node.id={broker} sensitive=false synonyms={{STATIC_BROKER_CONFIG:node.id={broker}}}"
        in static
    )
    refused = env.run(
        "configs",
        "--entity-type",
        "brokers",
        "--entity-name",
        broker,
        "--alter",
        "--add-config",
        "log.retention.ms=1",
    )
    assert refused.exit_code == 1
    assert refused.output.startswith("Error: INVALID_CONFIG: "), refused.output
    assert "log.retention.ms" in refused.output

    # The dynamic broker configs raftka honours (the replication throttles): set,
    # described by the broker as DYNAMIC_BROKER_CONFIG, refused when bad, deleted.
    def alter(*args: str) -> Result:
        return env.run(
            "configs", "--entity-type", "brokers", "--entity-name", broker, "--alter", *args
        )

    rate = "leader.replication.throttled.rate"
    set_ = alter("--add-config", f"{rate}=1048576")
    assert set_.exit_code == 0, set_.output
    assert set_.output.strip() == f"Completed updating config for broker {broker}."
    line = f"  {rate}=1048576 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{rate}=1048576}}"
    wait_for(
        lambda: line in configs("brokers", "--entity-name", broker, "--describe").splitlines(),
        timeout_s=30,
        message="the broker did not describe its dynamic throttle rate",
    )
    negative = alter("--add-config", f"{rate}=-1")
    assert negative.exit_code == 1
    assert negative.output.startswith(
        f"Error: INVALID_CONFIG: Invalid value -1 for configuration {rate}"
    ), negative.output
    assert alter("--delete-config", rate).exit_code == 0
    wait_for(
        lambda: rate not in configs("brokers", "--entity-name", broker, "--describe"),
        timeout_s=30,
        message="the deleted throttle rate is still described",
    )
    # --entity-default: every broker's default, described under its own source.
    default = ["configs", "--entity-type", "brokers", "--entity-default", "--alter"]
    set_default = env.run(*default, "--add-config", f"{rate}=2048")
    assert set_default.exit_code == 0, set_default.output
    assert set_default.output.strip() == "Completed updating config for default broker."
    line = f"  {rate}=2048 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=2048}}"
    wait_for(
        lambda: line in configs("brokers", "--entity-name", broker, "--describe", "--all"),
        timeout_s=30,
        message="the broker did not describe the default throttle rate",
    )
    assert env.run(*default, "--delete-config", rate).exit_code == 0


def test_ctrl_c_ends_produce_and_consume_cleanly(env: Env) -> None:
    """SIGINT to a running ``raftka produce`` (stdin still open, one line sent) and to a
    ``raftka consume`` (waiting for more after printing one record): both exit 0
    without a traceback; the record produced arrived; consume reports its count."""
    topic = "cli-interrupt"
    env.create_topic(topic)
    tp = TopicPartition(topic, 0)
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]
    produce = subprocess.Popen(
        [sys.executable, "-m", "raftka", "produce", topic, *bootstrap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert produce.stdin is not None
        produce.stdin.write(b"first\n")
        produce.stdin.flush()
        wait_for(
            lambda: env.admin.list_offsets({tp: "latest"})[tp].offset == 1,
            timeout_s=DEADLINE_S,
            message="the produced line never arrived",
        )
        _interrupt(produce)
    finally:
        produce.kill()

    consume = subprocess.Popen(
        [sys.executable, "-m", "raftka", "consume", topic, "--from-beginning", *bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert consume.stdout is not None
        ready, _, _ = select.select([consume.stdout], [], [], DEADLINE_S)
        assert ready, "consume printed nothing"
        assert consume.stdout.readline() == b"first\n"
        stderr = _interrupt(consume)
    finally:
        consume.kill()
    assert b"Processed a total of 1 messages" in stderr, stderr.decode()


def _interrupt(process: subprocess.Popen[bytes]) -> bytes:
    """SIGINT to ``process``; its stderr, once it exited 0 without a traceback."""
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=DEADLINE_S)
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr, stderr.decode()
    return stderr
