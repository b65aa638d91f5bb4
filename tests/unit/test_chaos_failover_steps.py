"""The fail-over benchmark's own measurements (issue #19, 4): the metadata probe after
a controller fault, and the steps of a leader fault read from process logs."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.chaos import breakdown
from raftka.chaos.availability import FENCED_MESSAGE
from raftka.chaos.metadata_probe import (
    PROBE_CONFIG,
    MetadataProbe,
    ProbeAttempt,
    first_commit_after,
    read_attempts,
)
from raftka.local.processes import wait_for

# --- first_commit_after ---------------------------------------------------------------


def test_first_commit_after_skips_failures_and_answers_already_on_their_way() -> None:
    start = 1000.0
    attempts = [
        ProbeAttempt("c1", 999.5, 999.9, True),  # before the fault
        ProbeAttempt("c1", 999.9, 1000.1, True),  # sent before, answered within the grace
        ProbeAttempt("c2", 1000.0, 1000.4, False, "NOT_CONTROLLER"),
        ProbeAttempt("c3", 1000.2, 1001.3, True),  # the new controller's first commit
        ProbeAttempt("c3", 1001.4, 1001.5, True),
    ]
    assert first_commit_after(start, attempts) == pytest.approx(1.3)
    # a request sent before the fault and answered after the grace did commit after it
    late = [ProbeAttempt("c2", 999.9, 1000.8, True)]
    assert first_commit_after(start, late) == pytest.approx(0.8)
    assert first_commit_after(start, attempts[:3]) is None


def test_read_attempts_reads_what_the_probe_wrote(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    attempts = [ProbeAttempt("a:1", 1.0, 2.0, True), ProbeAttempt("b:2", 1.5, 2.5, False, "x")]
    path.write_bytes(b"".join(orjson.dumps(a.to_json()) + b"\n" for a in attempts))
    assert read_attempts(path) == attempts


# --- MetadataProbe against two fake controllers ----------------------------------------


def _controller(active: bool, bodies: list[dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    """A fake controller answering POST /v1/configs: committed when ``active`` (the
    body kept in ``bodies``), else 503 NOT_CONTROLLER."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer: dict[str, Any]
            if active:
                bodies.append(body)
                resource = {"resource_type": "topic", "resource_name": "probe", "error": None}
                status, answer = 200, {"resources": [resource]}
            else:
                status, answer = 503, {"error": "NOT_CONTROLLER", "error_code": 41}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def committed() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def controllers(committed: list[dict[str, Any]]) -> Iterator[list[str]]:
    """An active controller and a standby one, on loopback."""
    handlers = (_controller(True, committed), _controller(False, []))
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), h) for h in handlers]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_probe_commits_through_the_active_controller_only(
    controllers: list[str], committed: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "probe.jsonl"
    with MetadataProbe(controllers, "probe", path, interval_s=0.01):
        wait_for(
            lambda: sum(1 for a in read_attempts(path) if a.ok) >= 3,
            timeout_s=10.0,
            message="the probe committed nothing through the active controller",
        )
    attempts = read_attempts(path)
    active, standby = controllers
    assert {a.controller for a in attempts if a.ok} == {active}
    refused = [a for a in attempts if a.controller == standby]
    assert refused and all(not a.ok and a.error == "NOT_CONTROLLER" for a in refused)
    assert all(a.invoke <= a.done for a in attempts)
    # every change sets a new value, so each success is a new committed record
    ops = [body["resources"][0]["ops"][0] for body in committed]
    assert len({op["value"] for op in ops}) == len(ops) >= 3
    assert {op["name"] for op in ops} == {PROBE_CONFIG}


def test_probe_records_a_dead_controller_as_not_committed(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    with MetadataProbe(["127.0.0.1:1"], "probe", path, interval_s=0.01, timeout_s=0.5):
        wait_for(
            lambda: path.exists() and len(read_attempts(path)) >= 2,
            timeout_s=10.0,
            message="no attempt recorded",
        )
    assert all(not a.ok and a.error for a in read_attempts(path))


def test_probe_needs_a_controller(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one controller"):
        MetadataProbe([], "probe", tmp_path / "p.jsonl")


# --- the steps of a leader fault -------------------------------------------------------


def _line(when: str, message: str, **fields: Any) -> bytes:
    return orjson.dumps({"time": when, "level": "INFO", "message": message, "fields": fields})


def test_leader_breakdown_reads_the_steps_logged_after_the_offsets(tmp_path: Path) -> None:
    c1, b102 = tmp_path / "c1.log", tmp_path / "b102.log"
    # before the offsets: an earlier fault's lines, which must not count
    c1.write_bytes(_line("2026-11-27T16:00:00.000Z", FENCED_MESSAGE, brokers=[101]) + b"\n")
    b102.write_bytes(b"")
    offsets = breakdown.LogOffsets({"c1": c1, "b102": b102, "b103": tmp_path / "missing.log"})
    start = breakdown.log_time("2026-11-27T16:10:00.000Z")
    with c1.open("ab") as f:
        f.write(b"Traceback (not JSON)\n")
        f.write(_line("2026-11-27T16:10:03.012Z", FENCED_MESSAGE, brokers=[101]) + b"\n")
    with b102.open("ab") as f:
        f.write(_line("2026-11-27T16:10:03.007Z", breakdown.BECAME_LEADER, partition="t-1") + b"\n")
        f.write(_line("2026-11-27T16:10:03.008Z", breakdown.BECAME_LEADER, partition="t-0") + b"\n")
        f.write(_line("2026-11-27T16:10:03.009Z", "unrelated", partition="t-0") + b"\n")
    events = offsets.events([FENCED_MESSAGE, breakdown.BECAME_LEADER])
    assert [e.node for e in events] == ["b102", "b102", "c1"]
    retries = [
        (start - 1.0, "NetworkError: before the fault"),
        (start + 0.5, "NetworkError: cannot connect"),
        (start + 1.5, "NetworkError: cannot connect"),
        (start + 2.9, "RequestTimedOutError: acks"),
        (start + 9.0, "NetworkError: after the first ack"),
    ]
    steps = breakdown.leader_breakdown(
        events,
        start=start,
        topic="t",
        partition=0,
        leader_id=101,
        first_ack_s=3.1,
        retries=retries,
    )
    assert steps == {
        "fenced_s": 3.012,
        "new_leader_s": 3.008,
        "new_leader": "b102",
        "first_ack_s": 3.1,
        "client_s": pytest.approx(0.092),
        "client_retries": {"NetworkError": 2, "RequestTimedOutError": 1},
    }
    # another broker's fence, or no new leader: the step is missing, not invented
    other = breakdown.leader_breakdown(
        events, start=start, topic="t", partition=2, leader_id=103, first_ack_s=None
    )
    assert other["fenced_s"] is None and other["new_leader_s"] is None
    assert other["client_s"] is None


def test_client_log_keeps_the_senders_retry_lines(tmp_path: Path) -> None:
    stream = io.BytesIO()
    logger = logging.getLogger("raftka.client.test_breakdown")
    handler = breakdown.ClientLog(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("retrying %s after %s (attempt %d)", ("t", 0), "NetworkError: x", 2)
        logger.debug("retrying %s after %s (attempt %d)", ("t", 1), "NetworkError: y", 1)
        logger.debug("metadata refresh failed: %s", "z")
    finally:
        logger.removeHandler(handler)
    path = tmp_path / "client.jsonl"
    path.write_bytes(stream.getvalue())
    (retry,) = breakdown.ClientLog.retries(path, "t", 0)
    assert retry[1] == "NetworkError: x"


def test_controller_breakdown_reads_the_election_after_the_fault(tmp_path: Path) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("c1", "c2", "c3")}
    for path in logs.values():
        path.write_bytes(b"")
    offsets = breakdown.LogOffsets(logs)
    start = breakdown.log_time("2026-11-27T16:10:00.000Z")
    lines: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
        # the old leader (c2, cut off) gives up too; that is not a survivor noticing
        "c2": [("00.300", breakdown.LEADER_CHANGED, {"leader_id": None, "epoch": 3})],
        "c1": [
            ("00.451", breakdown.LEADER_CHANGED, {"leader_id": None, "epoch": 3}),
            ("00.502", breakdown.LEADER_CHANGED, {"leader_id": 1, "epoch": 3}),
            ("00.556", breakdown.BECAME_ACTIVE, {"node_id": 1, "epoch": 3}),
        ],
        "c3": [("00.528", breakdown.LEADER_CHANGED, {"leader_id": 1, "epoch": 3})],
    }
    for name, entries in lines.items():
        with logs[name].open("ab") as f:
            for when, message, fields in entries:
                f.write(_line(f"2026-11-27T16:10:{when}Z", message, **fields) + b"\n")
    events = offsets.events([breakdown.LEADER_CHANGED, breakdown.BECAME_ACTIVE])
    steps = breakdown.controller_breakdown(events, start=start, old="c2")
    assert steps == {
        "leader_lost_s": 0.451,
        "elected_s": 0.502,
        "active_s": 0.556,
        "new_controller": "c1",
    }
    assert breakdown.controller_breakdown(events, start=start + 1.0, old="c2") == dict.fromkeys(
        ("leader_lost_s", "elected_s", "active_s", "new_controller")
    )


def test_brokers_see_after_takes_only_changes_newer_than_the_fault(tmp_path: Path) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("b101", "b102")}
    for path in logs.values():
        path.write_bytes(b"")
    offsets = breakdown.LogOffsets(logs)
    start = breakdown.log_time("2026-11-27T16:10:00.000Z")

    def applied(node: str, when: str, value: int, partition: str = "probe-0") -> None:
        config = f"LogConfig(segment_bytes=1, retention_ms={value}, retention_bytes=-1)"
        line = _line(
            f"2026-11-27T16:10:{when}Z",
            breakdown.CONFIG_APPLIED,
            partition=partition,
            config=config,
        )
        with logs[node].open("ab") as f:
            f.write(line + b"\n")

    applied("b101", "00.000", 10)  # the last change before the fault (b101 saw it)
    applied("b101", "00.700", 11)  # committed after it
    applied("b102", "01.000", 9)  # b102 catching up on older changes: not yet
    applied("b102", "01.100", 12, partition="other-0")  # another topic's config
    applied("b102", "08.250", 11)
    events = offsets.events([breakdown.CONFIG_APPLIED])
    seen = breakdown.brokers_see_after(
        events, start=start, topic="probe", brokers=["b101", "b102", "b103"]
    )
    assert seen == {"b101": 0.7, "b102": 8.25, "b103": None}
