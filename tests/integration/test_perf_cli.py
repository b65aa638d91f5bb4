"""``raftka perf produce`` / ``raftka perf consume`` against a real small cluster.

Starts 3 controllers and 3 brokers on loopback (real OS processes), creates a topic
(3 partitions, RF 3), then runs both commands as a user would, through click's runner
in this process: the producer's summary line must name exactly the requested record
count and Kafka's fields, and the consumer's table row must show that many records
read back. An unreachable bootstrap server must fail with one ``Error:`` line and
exit code 1. Each command has its own deadline (request and idle timeouts); nothing
sleeps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from raftka.perf_cli import perf_command
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

API_TIMEOUT_MS = 20_000
# Enough that a fetch answer with the default 1 MiB per partition spans many socket
# reads (an answer read with one StreamReader.read(n) once came back cut short).
RECORDS = 20_000


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with RaftkaCluster.start(tmp_path_factory.mktemp("perf")) as cluster:
        cluster.create_topic("perf", partitions=3)
        yield cluster.bootstrap_servers


def test_produce_then_consume_report_the_requested_count(bootstrap: str) -> None:
    """The produce summary names RECORDS records with Kafka's fields, the consume row
    reads RECORDS records back (from the beginning)."""
    runner = CliRunner()
    produced = runner.invoke(
        perf_command,
        [
            "produce",
            "--topic",
            "perf",
            "--num-records",
            str(RECORDS),
            "--record-size",
            "100",
            "--acks",
            "all",
            "--bootstrap-server",
            bootstrap,
        ],
    )
    assert produced.exit_code == 0, produced.output
    summary = produced.output.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"{RECORDS} records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
        r"latency, [\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, "
        r"[\d.]+ ms 99.9th\.",
        summary,
    ), summary
    consumed = runner.invoke(
        perf_command,
        [
            "consume",
            "--topic",
            "perf",
            "--messages",
            str(RECORDS),
            "--from-beginning",
            "--bootstrap-server",
            bootstrap,
        ],
    )
    assert consumed.exit_code == 0, consumed.output
    header, row = consumed.output.strip().splitlines()[-2:]
    assert header.startswith("start.time, end.time, data.consumed.in.MB"), header
    cells = [c.strip() for c in row.split(",")]
    assert int(cells[4]) == RECORDS, row
    assert float(cells[2]) == pytest.approx(RECORDS * 100 / 1024 / 1024, abs=1e-3), row


def test_missing_topic_is_created_first(bootstrap: str) -> None:
    """By default a missing topic is created (the cluster's default partitions and
    replication factor) before producing, and the run reports every record sent."""
    result = CliRunner().invoke(
        perf_command,
        ["produce", "--topic", "fresh", "--num-records", "50", "--bootstrap-server", bootstrap],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "created topic fresh", result.output
    assert lines[-1].startswith("50 records sent, "), result.output


def test_unknown_topic_fails_with_one_line(bootstrap: str) -> None:
    """With --no-create-topic, a topic that does not exist: exit 1 and a single
    ``Error:`` line."""
    result = CliRunner().invoke(
        perf_command,
        [
            "produce",
            "--no-create-topic",
            "--topic",
            "absent",
            "--num-records",
            "10",
            "--max-block-ms",
            "1000",
            "--bootstrap-server",
            bootstrap,
        ],
    )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
