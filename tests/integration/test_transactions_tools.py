"""``raftka transactions`` and ``raftka groups describe --isolation read_committed``
against real processes (3 controllers + 3 brokers).

- An open transaction of a real transactional producer: ``list`` shows its id Ongoing
  (``--state`` filters; an unknown state is INVALID_REQUEST), ``describe`` shows its
  partition, ``groups describe --isolation read_committed`` counts lag to the LSO (the
  open transaction's first offset) while the default counts it to the high watermark,
  ``find-hanging`` does not report it (its coordinator owns it), and ``abort
  --transactional-id`` aborts it through the coordinator: CompleteAbort, the LSO moves
  to the HW and a read_committed consumer never sees its records.
- A real hanging transaction: a transactional batch whose producer id no coordinator
  knows, produced by raw HTTP. The brokers run with
  ``transaction.partition.verification.enable=false``, since KIP-890's verification
  exists precisely to refuse such a batch. ``find-hanging`` reports it with the values
  ``abort --topic --partition --producer-id --producer-epoch --coordinator-epoch``
  needs; that abort writes the ABORT marker, after which the LSO reaches the HW and
  ``find-hanging`` reports nothing.
- ``dump-log`` is covered in tests/unit (it reads files).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from cli_helpers import invoke_raftka
from click.testing import Result
from http_helpers import led_partition, post_raw

from raftka.client import Consumer, Producer, TopicPartition
from raftka.client.group_admin import GroupAdmin
from raftka.common.record import Record, build_batch
from raftka.common.structs import OffsetAndMetadata
from raftka.common.wire import FRAME_CONTENT_TYPE, encode_frame
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
API_TIMEOUT_MS = 20_000
BROKER_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    # Off so that a hanging transaction can be made at all (see the module docstring).
    "transaction.partition.verification.enable": "false",
}


class Env(RaftkaCluster):
    def run(self, *args: str) -> Result:
        """One ``raftka`` command in-process, against this cluster."""
        return invoke_raftka(self.bootstrap_servers, args, api_timeout_ms=API_TIMEOUT_MS)

    def leader(self, topic: str) -> int:
        p = led_partition(self.brokers, topic, 0)
        assert p is not None, f"{topic}-0 has no leader"
        return int(p["leader"])

    def latest(self, topic: str, isolation_level: int) -> int:
        with GroupAdmin(bootstrap_servers=self.bootstrap_servers) as admin:
            found = admin.partition_offsets(
                [TopicPartition(topic, 0)], -1, isolation_level=isolation_level
            )
        return found[TopicPartition(topic, 0)]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(
        tmp_path_factory.mktemp("txn-tools"), broker_properties=BROKER_PROPERTIES
    ) as env:
        yield env


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


def _rows(output: str) -> list[list[str]]:
    """The tab-separated rows of a command's table, without its header."""
    return [line.split("\t") for line in output.splitlines() if "\t" in line][1:]


def _read_committed(env: Env, topic: str) -> list[bytes | None]:
    consumer = Consumer(
        bootstrap_servers=env.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        seen: list[bytes | None] = []
        end = env.latest(topic, 1)

        def caught_up() -> bool:
            for records in consumer.poll(200).values():
                seen.extend(r.value for r in records)
            return consumer.position(TopicPartition(topic, 0)) >= end

        wait_for(caught_up, timeout_s=DEADLINE_S, message=f"read_committed reached {end}")
        return seen
    finally:
        consumer.close()


def test_list_describe_lag_and_abort_of_an_open_transaction(env: Env) -> None:
    topic = env.create_topic(env.unique_name("tools"))
    group = env.unique_name("g")
    tid = env.unique_name("tid")
    plain = Producer(bootstrap_servers=env.bootstrap_servers, acks="all")
    try:
        for i in range(5):
            plain.send(topic, f"plain-{i}".encode(), partition=0)
        plain.flush()
    finally:
        plain.close()
    with GroupAdmin(bootstrap_servers=env.bootstrap_servers) as admin:
        admin.alter_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(2, "", None)})

    producer = Producer(
        bootstrap_servers=env.bootstrap_servers, transactional_id=tid, max_block_ms=30_000
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"open-{i}".encode(), partition=0)
        producer.flush()

        listed = {r[0]: r for r in _rows(_ok(env.run("transactions", "list")))}
        assert listed[tid][2] == "Ongoing", listed
        ongoing = _rows(_ok(env.run("transactions", "list", "--state", "Ongoing")))
        assert tid in [r[0] for r in ongoing]
        done = _rows(_ok(env.run("transactions", "list", "--state", "CompleteCommit")))
        assert tid not in [r[0] for r in done]
        bad = env.run("transactions", "list", "--state", "Bogus")
        assert bad.exit_code != 0 and "INVALID_REQUEST" in bad.output, bad.output

        (described,) = _rows(_ok(env.run("transactions", "describe", "--transactional-id", tid)))
        assert described[1] == tid and described[4] == "Ongoing", described
        assert described[7] == f"{topic}-0", described
        pid = described[2]

        # Lag: 8 records; the LSO is the open transaction's first offset, 5.
        uncommitted = _rows(_ok(env.run("groups", "describe", "--group", group)))
        assert uncommitted == [[topic, "0", "2", "8", "6", "-"]], uncommitted
        rc = env.run("groups", "describe", "--group", group, "--isolation", "read_committed")
        assert "LAST-STABLE-OFFSET" in _ok(rc)
        assert _rows(rc.stdout) == [[topic, "0", "2", "5", "3", "-"]], rc.stdout

        # Its coordinator owns it: not hanging.
        hanging = _ok(
            env.run("transactions", "find-hanging", "--broker-id", str(env.leader(topic)))
        )
        assert pid not in [r[2] for r in _rows(hanging)], hanging

        aborted = _ok(env.run("transactions", "abort", "--transactional-id", tid))
        assert "Aborted" in aborted, aborted
    finally:
        producer.close()

    def aborted_everywhere() -> bool:
        out = _ok(env.run("transactions", "describe", "--transactional-id", tid))
        return _rows(out)[0][4] == "CompleteAbort" and env.latest(topic, 1) == env.latest(topic, 0)

    wait_for(aborted_everywhere, timeout_s=DEADLINE_S, message="the abort completed")
    assert _read_committed(env, topic) == [f"plain-{i}".encode() for i in range(5)]
    # Nothing left to abort: Kafka's error name, one line.
    again = env.run("transactions", "abort", "--transactional-id", tid)
    assert again.exit_code != 0 and "INVALID_TXN_STATE" in again.output, again.output


def _json(address: str, path: str, body: dict[str, Any]) -> Any:
    return orjson.loads(post_raw(address, path, orjson.dumps(body)))


def test_find_hanging_reports_and_abort_clears_a_hanging_transaction(env: Env) -> None:
    topic = env.create_topic(env.unique_name("hang"))
    leader = env.leader(topic)
    address = env.brokers[leader].address
    # An idempotent producer id: no coordinator has a transactional id for it.
    pid = int(_json(address, "/v1/init-producer-id", {})["producer_id"])
    batch = build_batch(
        [Record(value=b"hanging", timestamp_ms=int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    header = {
        "acks": -1,
        "timeout_ms": 10_000,
        "transactional_id": "not-known-anywhere",
        "partitions": [{"topic": topic, "partition": 0}],
    }
    frame = encode_frame(header, "partitions", [batch])
    answer = orjson.loads(post_raw(address, "/v1/produce", frame, FRAME_CONTENT_TYPE))
    assert answer["responses"][0].get("error") is None, answer
    assert env.latest(topic, 1) == 0 and env.latest(topic, 0) == 1

    found = _rows(_ok(env.run("transactions", "find-hanging", "--broker-id", str(leader))))
    mine = [r for r in found if r[0] == topic]
    assert len(mine) == 1, found
    row = mine[0]
    assert row[1:4] == ["0", str(pid), "0"] and row[5] == "0", row
    assert "no coordinator knows" in row[8], row

    marker = ("transactions", "abort", "--topic", topic, "--partition", "0")
    marker += ("--producer-id", str(pid), "--producer-epoch", row[3])
    # Without --coordinator-epoch: a usage error naming it, nothing written.
    partial = env.run(*marker)
    assert partial.exit_code == 2 and "--coordinator-epoch" in partial.output, partial.output
    _ok(env.run(*marker, "--coordinator-epoch", str(max(int(row[4]), 0))))
    wait_for(
        lambda: env.latest(topic, 1) == env.latest(topic, 0) == 2,
        timeout_s=DEADLINE_S,
        message="the ABORT marker moved the LSO to the HW",
    )
    after = _rows(_ok(env.run("transactions", "find-hanging", "--broker-id", str(leader))))
    assert not [r for r in after if r[0] == topic], after
    assert _read_committed(env, topic) == []


def test_abort_refuses_mixed_or_partial_arguments(env: Env) -> None:
    both = env.run("transactions", "abort", "--transactional-id", "x", "--topic", "t")
    assert both.exit_code == 2 and "cannot go with --topic" in both.output, both.output
    partial = env.run("transactions", "abort", "--topic", "t", "--partition", "0")
    assert partial.exit_code == 2 and "--producer-id" in partial.output, partial.output
    unknown = env.run("transactions", "describe", "--transactional-id", "never-used")
    assert unknown.exit_code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.output, unknown.output
