"""``raftka up`` and ``raftka server`` as real processes on loopback.

- ``raftka up`` (a subprocess, tmp data dir, free base port) writes cluster.json and
  becomes healthy (polled through ``raftka status --json``); a record produced with the
  client library reads back; SIGTERM makes it exit 0 with every child gone; a second
  ``raftka up`` on the same dir refuses while the first runs, and after the stop
  resumes with the same ports and the record still there.
- Three ``raftka server`` processes with roles controller+broker form a cluster and
  serve a produce and a fetch; SIGTERM stops each with exit 0.

Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from raftka.local import free_port_run, free_ports, http_json, wait_for
from raftka.local.processes import port_in_use
from raftka.local.up import is_raftka_process

pytestmark = pytest.mark.slow

DEADLINE_S = 45.0
API_TIMEOUT_MS = 20_000


def _raftka(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "raftka", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _status(data_dir: Path) -> dict[str, Any] | None:
    done = subprocess.run(
        [sys.executable, "-m", "raftka", "status", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return orjson.loads(done.stdout) if done.returncode == 0 else None


def _wait_healthy(data_dir: Path, up: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    def healthy() -> dict[str, Any] | None:
        assert up.poll() is None, f"raftka up exited {up.returncode}:\n{log.read_text()}"
        if not (data_dir / "cluster.json").exists():
            return None
        status = _status(data_dir)
        return status if status is not None and status["healthy"] else None

    return wait_for(healthy, timeout_s=DEADLINE_S, message=lambda: log.read_text()[-3000:])


def _console_overview(address: str) -> dict[str, Any]:
    """The console's overview once it answers (it starts after the cluster is ready)."""

    def overview() -> dict[str, Any] | None:
        try:
            answer = http_json(address, "/api/cluster", timeout_s=10)
        except OSError:
            return None
        status, body = answer
        return body["overview"] if status == 200 else None

    return wait_for(overview, timeout_s=DEADLINE_S, message=f"the console at {address}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def _produce_and_read(bootstrap: str, topic: str, *, create: bool) -> list[bytes]:
    if create:
        with Admin(bootstrap_servers=bootstrap, default_api_timeout_ms=API_TIMEOUT_MS) as admin:
            admin.create_topics([NewTopic(topic, 1, 3)], timeout_ms=API_TIMEOUT_MS)

        def produced() -> bool:
            try:
                with Producer(bootstrap_servers=bootstrap, max_block_ms=API_TIMEOUT_MS) as p:
                    p.send(topic, b"kept", key=b"k").result(API_TIMEOUT_MS / 1000)
                return True
            except Exception:
                return False  # leaders not known yet everywhere: try again

        wait_for(produced, timeout_s=DEADLINE_S, message=f"could not produce to {topic}")
    got: list[bytes] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + DEADLINE_S
        while not got:
            assert time.monotonic() < deadline, "record not read back"
            for records in consumer.poll(1_000).values():
                got.extend(r.value for r in records if r.value is not None)
    return got


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_up_status_stop_and_resume(tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """up -> healthy -> produce/read -> second up refused -> SIGTERM exits 0, children
    gone -> up again: same ports, the record is still there."""
    data = tmp_path / "data"
    log = tmp_path / "up.log"
    # 3 controllers, 3 brokers, then the brokers' Kafka listeners, then the web console
    base = free_port_run(10)
    up = _raftka("up", "--data-dir", str(data), "--base-port", str(base), log=log)
    procs.append(up)
    status = _wait_healthy(data, up, log)
    cluster = orjson.loads((data / "cluster.json").read_bytes())
    assert cluster["up_pid"] == up.pid
    assert [n["port"] for n in cluster["nodes"]] == list(range(base, base + 6))
    assert [n["kafka_port"] for n in cluster["nodes"]] == [None] * 3 + list(
        range(base + 6, base + 9)
    )
    assert status["bootstrap_servers"] == cluster["bootstrap_servers"]
    assert status["kafka_bootstrap_servers"] == cluster["kafka_bootstrap_servers"]
    assert {b["state"] for b in status["brokers"]} == {"unfenced"}
    assert _produce_and_read(cluster["bootstrap_servers"], "kept", create=True) == [b"kept"]
    console = f"127.0.0.1:{base + 9}"
    assert f"web console: http://{console}/" in log.read_text()
    overview = _console_overview(console)
    assert [b["state"] for b in overview["brokers"]] == ["unfenced"] * 3, overview

    refused = subprocess.run(
        [sys.executable, "-m", "raftka", "up", "--data-dir", str(data)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode == 1
    assert b"in use by a running cluster" in refused.stderr

    child_pids = [n["pid"] for n in cluster["nodes"]]
    assert _stop(up) == 0, log.read_text()[-3000:]
    assert not [pid for pid in child_pids if is_raftka_process(pid)]
    assert not port_in_use("127.0.0.1", base + 9), "the web console outlived raftka up"
    stopped = orjson.loads((data / "cluster.json").read_bytes())
    assert stopped["up_pid"] is None and {n["pid"] for n in stopped["nodes"]} == {None}

    again = _raftka("up", "--data-dir", str(data), log=log)
    procs.append(again)
    _wait_healthy(data, again, log)
    resumed = orjson.loads((data / "cluster.json").read_bytes())
    assert [n["port"] for n in resumed["nodes"]] == list(range(base, base + 6))
    assert _produce_and_read(resumed["bootstrap_servers"], "kept", create=False) == [b"kept"]
    assert _stop(again) == 0, log.read_text()[-3000:]
    assert "stopped" in log.read_text()


def test_combined_mode_serves_produce_and_fetch(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Three controller+broker processes: each broker registers and is unfenced, a
    record round-trips, SIGTERM stops each with exit 0."""
    ports = free_ports(6)
    controller_ports, broker_ports = ports[:3], ports[3:]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(controller_ports))
    for i in range(3):
        node_dir = tmp_path / f"node-{i + 1}"
        node_dir.mkdir()
        config = node_dir / "server.properties"
        config.write_text(
            f"node.id={i + 1}\n"
            "process.roles=controller,broker\n"
            f"listeners=PLAINTEXT://127.0.0.1:{broker_ports[i]},"
            f"CONTROLLER://127.0.0.1:{controller_ports[i]}\n"
            f"controller.quorum.voters={voters}\n"
            f"log.dirs={node_dir / 'logs'}\n"
            "controller.quorum.election.timeout.ms=250\n"
            "controller.quorum.fetch.timeout.ms=500\n"
            "broker.heartbeat.interval.ms=250\n"
            "broker.session.timeout.ms=3000\n"
            "controlled.shutdown.timeout.ms=5000\n"
        )
        procs.append(_raftka("server", "--config", str(config), log=node_dir / "process.log"))

    def unfenced(port: int) -> bool:
        try:
            status, body = http_json(f"127.0.0.1:{port}", "/health", timeout_s=1.0)
        except OSError:
            return False
        return status == 200 and body.get("fenced") is False

    for proc, port in zip(procs, broker_ports, strict=True):

        def ready(proc: subprocess.Popen[bytes] = proc, port: int = port) -> bool:
            assert proc.poll() is None, f"raftka server exited {proc.returncode}"
            return unfenced(port)

        wait_for(ready, timeout_s=DEADLINE_S, message=f"combined broker on {port} not unfenced")
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in broker_ports)
    assert _produce_and_read(bootstrap, "combined", create=True) == [b"kept"]
    assert (tmp_path / "node-1" / "logs" / "__cluster_metadata").is_dir()
    # All at once, as a service manager stops a host's nodes: one by one, the last
    # node's broker would wait out controlled.shutdown.timeout.ms for a lost quorum.
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0, 0]
