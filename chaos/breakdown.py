"""Where the time goes in a fail-over (issue #19, 4): the steps from a fault's start
to the first acknowledged write on the partition whose leader failed, or to the new
active controller, read from the nodes' process logs and the workload clients' own log.

The steps, each as seconds from the fault's start (wall clock, the history's
``wall_time``):

1. ``fenced_s``: the active controller logged "fenced brokers whose sessions expired"
   naming the failed leader. Its session expired ``broker.session.timeout.ms`` after
   the last heartbeat the controller got; the line is written after the fence and the
   leader elections it causes are committed and replayed on the controller.
2. ``new_leader_s``: a broker logged "became leader" for the partition (it applied
   the new leadership from the metadata log; this can come a few ms *before* the
   controller's own line, which waits for its replay).
3. ``first_ack_s``: the workload's first acknowledged write on the partition
   (:mod:`raftka.chaos.availability`); ``client_s`` = ``first_ack_s - new_leader_s``
   is the client finding the new leader (metadata refresh, retry backoff) plus the
   acks=all round trip through the new ISR.

After a controller fault (:func:`controller_breakdown`): ``leader_lost_s``, a
surviving controller logged "quorum leader changed" with no leader (it stopped hearing
from the leader, ``controller.quorum.fetch.timeout.ms``, and started an election);
``elected_s``, a controller logged a new quorum leader; ``active_s``, the new leader
logged "became the active controller" (after a read barrier: it can commit).

:func:`brokers_see_after` reads when each broker applied metadata committed after a
controller fault: the first "topic config applied" line of the metadata probe's topic
(:mod:`raftka.chaos.metadata_probe`) with a value above every value a broker had applied
before the fault (each probe change sets a larger one).

``client_retries`` counts the producers' retries on the partition between the fault
and the first ack, by error (the sender's "retrying ... after ..." debug line), which
shows what the clients saw while they waited.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import orjson

from raftka.chaos.availability import FENCED_MESSAGE, log_events

__all__ = [
    "BECAME_ACTIVE",
    "BECAME_LEADER",
    "CONFIG_APPLIED",
    "LEADER_CHANGED",
    "ClientLog",
    "LogEvent",
    "LogOffsets",
    "brokers_see_after",
    "controller_breakdown",
    "leader_breakdown",
    "log_time",
]

#: What a broker logs when it takes a partition's leadership (raftka.broker.replication).
BECAME_LEADER: Final = "became leader"
#: What a controller logs when it learns of a new quorum leader, or of none
#: (raftka.metadata.controller_events), and when it can serve as the active controller.
LEADER_CHANGED: Final = "quorum leader changed"
BECAME_ACTIVE: Final = "became the active controller"
#: What a broker logs when a topic's log config changes (raftka.broker.replication).
CONFIG_APPLIED: Final = "topic config applied"
#: The probe's config as the broker's LogConfig prints it.
_PROBE_VALUE = re.compile(r"\bretention_ms=(\d+)")
#: The producer sender's retry line (raftka.client.producer.sender): args (tp, error, n).
RETRY_MESSAGE: Final = "retrying %s after %s (attempt %d)"


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One JSON log line of a node: wall seconds, node name, message, fields."""

    wall: float
    node: str
    message: str
    fields: Mapping[str, Any]


def log_time(text: str) -> float:
    """Unix seconds of a process log's ``time`` (ISO 8601, UTC, ms)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LogOffsets:
    """The sizes of some nodes' process logs now; :meth:`events` reads what each node
    logged after that (the logs grow over a whole campaign)."""

    def __init__(self, logs: Mapping[str, Path]) -> None:
        self._from = {
            node: (path, path.stat().st_size if path.exists() else 0) for node, path in logs.items()
        }

    def events(self, messages: Iterable[str]) -> list[LogEvent]:
        """The JSON lines logged since, whose message is one of ``messages``, by time."""
        wanted = set(messages)
        out = [
            LogEvent(
                log_time(str(raw["time"])),
                node,
                str(raw["message"]),
                raw["fields"] if isinstance(raw.get("fields"), dict) else {},
            )
            for node, (path, offset) in self._from.items()
            if path.exists()
            for raw in log_events(path, wanted, offset)
        ]
        return sorted(out, key=lambda e: e.wall)


class ClientLog(logging.Handler):
    """The clients' debug lines (the producers' sender) as JSON lines in ``stream``: wall
    time, message template, its arguments as text."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        line = {"wall": record.created, "msg": str(record.msg), "args": [str(a) for a in args]}
        self.stream.write(orjson.dumps(line) + b"\n")

    @staticmethod
    def retries(path: Path, topic: str, partition: int) -> list[tuple[float, str]]:
        """(wall, error) of each producer retry on ``topic``-``partition`` in ``path``."""
        # a TopicPartition prints as "topic-partition"; a bare tuple as one
        tps = {f"{topic}-{partition}", str((topic, partition))}
        out: list[tuple[float, str]] = []
        for line in path.read_bytes().splitlines():
            raw = orjson.loads(line)
            args = raw.get("args") or []
            if raw.get("msg") == RETRY_MESSAGE and len(args) == 3 and args[0] in tps:
                out.append((float(raw["wall"]), str(args[1])))
        return out


def _error_name(text: str) -> str:
    """The first word of a client error's text (its class or Kafka name)."""
    head = text.split(":", 1)[0].strip()
    return head.split()[0] if head else "?"


def leader_breakdown(
    events: Sequence[LogEvent],
    *,
    start: float,
    topic: str,
    partition: int,
    leader_id: int,
    first_ack_s: float | None,
    retries: Iterable[tuple[float, str]] = (),
) -> dict[str, Any]:
    """The steps (module doc) of one leader fault that began at ``start`` (wall) on
    ``topic``-``partition`` whose leader was broker ``leader_id``; a step not found is
    None."""
    fenced = next(
        (
            e
            for e in events
            if e.wall >= start
            and e.message == FENCED_MESSAGE
            and leader_id in (e.fields.get("brokers") or [])
        ),
        None,
    )
    name = f"{topic}-{partition}"
    became = next(
        (
            e
            for e in events
            if e.wall >= start and e.message == BECAME_LEADER and e.fields.get("partition") == name
        ),
        None,
    )
    new_leader_s = None if became is None else round(became.wall - start, 3)
    end = start + first_ack_s if first_ack_s is not None else float("inf")
    seen = Counter(_error_name(error) for wall, error in retries if start <= wall <= end)
    return {
        "fenced_s": None if fenced is None else round(fenced.wall - start, 3),
        "new_leader_s": new_leader_s,
        "new_leader": None if became is None else became.node,
        "first_ack_s": None if first_ack_s is None else round(first_ack_s, 3),
        "client_s": None
        if first_ack_s is None or new_leader_s is None
        else round(first_ack_s - new_leader_s, 3),
        "client_retries": dict(seen),
    }


def controller_breakdown(events: Sequence[LogEvent], *, start: float, old: str) -> dict[str, Any]:
    """The steps (module doc) of a fault that began at ``start`` (wall) on the active
    controller named ``old`` (c1..); a step not found is None."""
    after = [e for e in events if e.wall >= start]
    lost = next(
        (
            e
            for e in after
            if e.message == LEADER_CHANGED and e.node != old and e.fields.get("leader_id") is None
        ),
        None,
    )
    elected = next(
        (e for e in after if e.message == LEADER_CHANGED and e.fields.get("leader_id") is not None),
        None,
    )
    active = next((e for e in after if e.message == BECAME_ACTIVE), None)
    return {
        "leader_lost_s": None if lost is None else round(lost.wall - start, 3),
        "elected_s": None if elected is None else round(elected.wall - start, 3),
        "active_s": None if active is None else round(active.wall - start, 3),
        "new_controller": None if active is None else active.node,
    }


def brokers_see_after(
    events: Sequence[LogEvent], *, start: float, topic: str, brokers: Iterable[str]
) -> dict[str, float | None]:
    """Per broker (node name), seconds from ``start`` (wall) until it applied a change
    of ``topic``'s probe config committed after ``start`` (module doc); None: not seen
    in ``events``."""
    name = f"{topic}-0"
    applied: list[tuple[LogEvent, int]] = []
    for e in events:
        found = _PROBE_VALUE.search(str(e.fields.get("config", "")))
        if e.message == CONFIG_APPLIED and e.fields.get("partition") == name and found:
            applied.append((e, int(found.group(1))))
    before = max((value for e, value in applied if e.wall <= start), default=-1)
    out: dict[str, float | None] = {}
    for broker in brokers:
        newer = [
            e.wall for e, value in applied if e.node == broker and e.wall > start and value > before
        ]
        out[broker] = round(min(newer) - start, 3) if newer else None
    return out
