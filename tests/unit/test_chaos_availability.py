"""raftka.chaos.availability over hand-written histories and controller logs."""

from __future__ import annotations

from pathlib import Path

import orjson

from raftka.chaos.availability import FENCED_MESSAGE, FencingWatch, first_ack_after_fault


def _write(path: Path, events: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))


def _send_ok(t_s: float, partition: int) -> dict[str, object]:
    value = {"partition": partition, "offset": 1}
    return {"type": "ok", "f": "send", "time_ns": int(t_s * 1e9), "value": value}


def test_first_ack_after_fault_skips_answers_in_flight_and_other_partitions(
    tmp_path: Path,
) -> None:
    history = tmp_path / "history.jsonl"
    start = {"type": "nemesis", "f": "start", "time_ns": int(10e9), "value": {}}
    _write(
        history,
        [
            _send_ok(9.0, 1),  # before the fault
            start,
            _send_ok(10.1, 1),  # within the grace: already on its way
            _send_ok(12.0, 0),  # another partition
            _send_ok(14.5, 1),
            _send_ok(15.0, 1),
        ],
    )
    assert first_ack_after_fault(history, 1) == 4.5
    assert first_ack_after_fault(history, 2) is None


def test_fencing_watch_reports_only_what_was_logged_after_it_began(tmp_path: Path) -> None:
    log = tmp_path / "process.log"
    line = orjson.dumps({"message": FENCED_MESSAGE, "fields": {"brokers": [101]}}) + b"\n"
    log.write_bytes(line)
    watch = FencingWatch([log])
    assert watch.fenced() == []
    with log.open("ab") as f:
        f.write(b"not json " + FENCED_MESSAGE.encode() + b"\n")
        f.write(orjson.dumps({"message": "other"}) + b"\n" + line)
    (event,) = watch.fenced()
    assert event["fields"] == {"brokers": [101]}
