"""Availability read from a fault run (issue #19, 5): what the scenarios in
``tests/fault`` assert beside safety, so that a fail-over regression fails CI.

- :func:`first_ack_after_fault`: seconds from the first fault's start to the first
  acknowledged send on a partition that completed more than ``grace_s`` after it (an
  answer already on its way when the fault began is not the new leader's), from the
  run's ``history.jsonl``.
- :class:`FencingWatch`: the "fenced brokers whose sessions expired" lines the
  controllers logged after the watch began (their process logs, read from the offset
  each had then), found by :func:`log_events`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

__all__ = ["FENCED_MESSAGE", "FencingWatch", "first_ack_after_fault", "log_events"]

#: What the active controller logs when it fences brokers whose sessions expired
#: (raftka.metadata.controller_events).
FENCED_MESSAGE = "fenced brokers whose sessions expired"


def _events(history: Path) -> Iterable[dict[str, Any]]:
    for line in history.read_bytes().splitlines():
        if line.strip():
            yield orjson.loads(line)


def first_ack_after_fault(history: Path, partition: int, grace_s: float = 0.3) -> float | None:
    """Seconds from the first fault's start to the first acknowledged send on
    ``partition`` completing after start + ``grace_s``; None if there is none."""
    start_ns: int | None = None
    for event in _events(history):
        if start_ns is None:
            if event.get("type") == "nemesis" and event.get("f") == "start":
                start_ns = int(event["time_ns"])
            continue
        value = event.get("value")
        if (
            event.get("type") == "ok"
            and event.get("f") == "send"
            and isinstance(value, dict)
            and value.get("partition") == partition
            and int(event["time_ns"]) - start_ns > grace_s * 1e9
        ):
            return (int(event["time_ns"]) - start_ns) / 1e9
    return None


def log_events(path: Path, message: str, since_bytes: int = 0) -> list[dict[str, Any]]:
    """The JSON log lines of a raftka process log whose message is ``message``, from
    byte ``since_bytes`` on (lines that are not JSON are skipped)."""
    with path.open("rb") as f:
        f.seek(since_bytes)
        lines = f.read().splitlines()
    out: list[dict[str, Any]] = []
    for line in lines:
        if message.encode() not in line:
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("message") == message:
            out.append(event)
    return out


class FencingWatch:
    """Fencing by session expiry logged by controllers after ``__init__``."""

    def __init__(self, logs: Iterable[Path]) -> None:
        self._from = {path: path.stat().st_size if path.exists() else 0 for path in logs}

    def fenced(self) -> list[dict[str, Any]]:
        return [
            {"log": str(path), **event}
            for path, offset in self._from.items()
            for event in log_events(path, FENCED_MESSAGE, offset)
        ]
