"""Does metadata commit again after a controller fault? (issue #19, 4: "metadata
commits again within 2 s")

:class:`MetadataProbe` asks every controller, each from its own thread, over and over
for one small metadata change: a topic config alter (``retention.ms`` of a probe topic,
a new value each time, so every success is a new committed record; the controller
answers ``POST /v1/configs`` only once its records are committed and replayed). Only
the active controller commits; the others answer NOT_CONTROLLER at once; a killed one
refuses the connection, a cut-off one times out after ``timeout_s``. Asking every
controller directly, instead of through the admin client, measures the quorum and not
the client's own timeouts and backoffs: the first success after a fault is the first
change the new active controller committed, seen within ``interval_s`` plus one round
trip of it happening.

:func:`first_commit_after` (pure) reads the probe's attempts: seconds from a fault's
start to the first committed change after it, by the rule of
:mod:`raftka.chaos.availability` for acknowledged writes (an answer to a request sent
before the fault that arrives within ``grace_s`` may already have been on its way).
Times are wall-clock seconds, as in a history's ``wall_time``, so the two can be
matched.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from raftka.chaos.availability import GRACE_S
from raftka.local.processes import http_json

__all__ = ["PROBE_CONFIG", "MetadataProbe", "ProbeAttempt", "first_commit_after", "read_attempts"]

#: The config the probe sets, to ``PROBE_BASE_MS`` (7 days) plus a counter that starts
#: at the probe's start time in ms, so values only grow, also from one probe to the next
#: (how :func:`raftka.chaos.breakdown.brokers_see_after` tells new changes from old
#: ones); no retention ever acts on the probe topic.
PROBE_CONFIG: Final = "retention.ms"
PROBE_BASE_MS: Final = 7 * 24 * 3600 * 1000
INTERVAL_S: Final = 0.1
TIMEOUT_S: Final = 1.0
STOP_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class ProbeAttempt:
    """One request: to ``controller``, sent at ``invoke`` and answered (or given up)
    at ``done`` (wall seconds); ``ok`` when the change was committed."""

    controller: str
    invoke: float
    done: float
    ok: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProbeAttempt:
        return cls(
            str(raw["controller"]),
            float(raw["invoke"]),
            float(raw["done"]),
            bool(raw["ok"]),
            None if raw.get("error") is None else str(raw["error"]),
        )


def first_commit_after(
    start: float, attempts: Iterable[ProbeAttempt], *, grace_s: float = GRACE_S
) -> float | None:
    """Seconds from ``start`` (wall) to the first committed change after it: a success
    that completed after ``start`` and was either sent after it or answered more than
    ``grace_s`` after it. None when there is none."""
    done = [
        a.done - start
        for a in attempts
        if a.ok and a.done > start and (a.invoke >= start or a.done - start > grace_s)
    ]
    return min(done) if done else None


def read_attempts(path: Path) -> list[ProbeAttempt]:
    """The attempts a probe wrote to ``path`` (JSON lines)."""
    return [
        ProbeAttempt.from_json(orjson.loads(line))
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]


class MetadataProbe:
    """Alters ``topic``'s :data:`PROBE_CONFIG` through each of ``controllers``
    (addresses) until :meth:`stop`; every attempt goes to ``path`` as a JSON line.
    A context manager (started on enter, stopped on exit)."""

    def __init__(
        self,
        controllers: Sequence[str],
        topic: str,
        path: Path,
        *,
        interval_s: float = INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        if not controllers:
            raise ValueError("a metadata probe needs at least one controller address")
        self.controllers = list(controllers)
        self.topic = topic
        self.path = path
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._counter = itertools.count(int(time.time() * 1000))
        self._lock = threading.Lock()  # the counter and the file
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._file = path.open("ab")

    def start(self) -> None:
        for address in self.controllers:
            thread = threading.Thread(
                target=self._loop, args=(address,), name=f"metadata-probe-{address}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + STOP_TIMEOUT_S)
        stuck = [t.name for t in self._threads if t.is_alive()]
        with self._lock:
            self._file.close()
        if stuck:
            raise RuntimeError(f"metadata probe threads did not stop: {stuck}")

    def __enter__(self) -> MetadataProbe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _body(self) -> dict[str, Any]:
        with self._lock:
            value = PROBE_BASE_MS + next(self._counter)
        return {
            "resources": [
                {
                    "resource_type": "topic",
                    "resource_name": self.topic,
                    "ops": [{"name": PROBE_CONFIG, "op": "SET", "value": str(value)}],
                }
            ],
            "validate_only": False,
        }

    def _loop(self, address: str) -> None:
        while not self._stop.is_set():
            body = self._body()
            invoke = time.time()
            ok, error = False, None
            try:
                status, answer = http_json(
                    address, "/v1/configs", method="POST", body=body, timeout_s=self.timeout_s
                )
                ok, error = _committed(status, answer)
            except (OSError, TimeoutError, ValueError) as exc:
                error = type(exc).__name__
            attempt = ProbeAttempt(address, invoke, time.time(), ok, error)
            with self._lock:
                if not self._file.closed:
                    self._file.write(orjson.dumps(attempt.to_json()) + b"\n")
                    self._file.flush()
            # the probe's pace between attempts, not a synchronisation
            self._stop.wait(self.interval_s)


def _committed(status: int, answer: Any) -> tuple[bool, str | None]:
    """(committed, the error name otherwise) of one ``POST /v1/configs`` answer."""
    if status != 200:
        name = answer.get("error") if isinstance(answer, dict) else None
        return False, str(name or f"HTTP {status}")
    resources = answer.get("resources") if isinstance(answer, dict) else None
    if not isinstance(resources, list) or len(resources) != 1:
        return False, "malformed answer"
    error = resources[0].get("error") if isinstance(resources[0], dict) else "malformed answer"
    if error is None:
        return True, None
    return False, str(error.get("error") if isinstance(error, dict) else error)
