"""Operation histories for the fault suite: what each client asked, what it was told, when.

Theory of operation
-------------------
A history is an append-only JSON Lines file, one *event* per line, written by every
client process of a test through one shared `HistoryWriter`. An operation is two
events from the same ``process``: an ``invoke`` and, later, its completion:

* ``ok``   the operation took effect and the value is its result;
* ``fail`` the operation certainly did not take effect;
* ``info`` the outcome is unknown (a timeout, a lost connection, an ambiguous error).
  The operation may have taken effect, now or later: never read it as failed.

A process runs one operation at a time; an invocation still open when the history ends
counts as ``info``. Fault windows of the nemesis go in the same file as events of
process ``"nemesis"`` and type ``"nemesis"`` (``f`` is ``"start"`` or ``"end"``), so one
file orders everything the test did on one clock.

Every line carries ``index`` (0, 1, 2, ... in file order), ``time_ns`` (monotonic
nanoseconds since the writer started), ``wall_time`` (Unix seconds, for matching server
logs), ``process``, ``type``, ``f`` and ``value``; ``error`` only when a completion has
one. Index, time and write happen under one lock, so file order is real-time order:
if event A's index is below event B's, A was recorded before B.

The ``value`` of each operation the checker understands (records are
``{"topic", "partition", "offset", "value"}``; record values are str or int, and each
sent value is unique within its topic):

* ``send``: invoke ``{"topic", "partition"?, "value"}`` (no partition: the producer's
  partitioner picks); ok ``{"partition", "offset"}`` as the broker assigned them.
* ``poll``: invoke ``{"consumer"}``; ok ``{"consumer", "records": [record, ...]}``.
* ``seek``: invoke and ok ``{"consumer", "topic", "partition", "offset"}``.
* ``final_read``: invoke ``{}`` (or ``{"topics"}``); ok ``{"records": [record, ...]}``,
  every partition of every topic sent to, read from its log start to its end after the
  faults healed. Several final reads (say one per topic) are merged.
* ``assign``: invoke ``{"consumer"?, "group"?}``; ok ``{"group"?, "member",
  "generation", "consumer"?, "partitions": [{"topic", "partition"}, ...]}``.
* ``commit``: invoke and ok ``{"group"?, "member", "generation", "offsets":
  [{"topic", "partition", "offset"}, ...]}``.
* ``group_drain``: invoke and ok ``{"group"}``: after the heal, a fresh member of the
  group resumed from the committed offsets and polled every partition to its end (its
  records are ordinary ``poll`` results).
* ``create_topic`` ``{"topic", "partitions"?, "replication_factor"?}``,
  ``delete_topic`` ``{"topic"}``, ``list_topics`` ``{}`` (ok ``{"topics": [...]}``).

A poll's records keep the order the consumer returned them. Other ``f`` names may
appear; the checker counts them and otherwise ignores them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Literal, Self, TypeGuard

import orjson

# A JSON value as orjson decodes it. Shapes are checked where they are read (checker).
Json = Any

EventType = Literal["invoke", "ok", "fail", "info", "nemesis"]
EVENT_TYPES: Final = frozenset({"invoke", "ok", "fail", "info", "nemesis"})
COMPLETION_TYPES: Final = frozenset({"ok", "fail", "info"})
NEMESIS_PROCESS: Final = "nemesis"

# The operations the checker understands; others are allowed and only counted.
KNOWN_FUNCTIONS: Final = (
    "send",
    "poll",
    "seek",
    "final_read",
    "assign",
    "commit",
    "create_topic",
    "delete_topic",
    "list_topics",
    "txn",
    "pipeline_read",
)

Process = int | str


class HistoryError(ValueError):
    """The history itself is malformed (the harness or a workload broke the format),
    as opposed to an anomaly of the system under test, which the checker reports."""


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a history."""

    index: int
    time_ns: int
    wall_time: float
    process: Process
    type: EventType
    f: str
    value: Json
    error: str | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "index": self.index,
            "time_ns": self.time_ns,
            "wall_time": self.wall_time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, raw: Json, where: str) -> Event:
        if not isinstance(raw, dict):
            raise HistoryError(f"{where}: an event is a JSON object, got {type(raw).__name__}")
        try:
            index, time_ns = raw["index"], raw["time_ns"]
            wall_time, process = raw["wall_time"], raw["process"]
            kind, f, value = raw["type"], raw["f"], raw.get("value")
        except KeyError as missing:
            raise HistoryError(f"{where}: event lacks field {missing}") from None
        error = raw.get("error")
        if not (isinstance(index, int) and isinstance(time_ns, int)):
            raise HistoryError(f"{where}: index and time_ns must be integers")
        if not isinstance(wall_time, int | float):
            raise HistoryError(f"{where}: wall_time must be a number")
        if not isinstance(process, int | str) or isinstance(process, bool):
            raise HistoryError(f"{where}: process must be an int or a str")
        if kind not in EVENT_TYPES:
            raise HistoryError(f"{where}: type {kind!r} is not one of {sorted(EVENT_TYPES)}")
        if not isinstance(f, str):
            raise HistoryError(f"{where}: f must be a string")
        if error is not None and not isinstance(error, str):
            raise HistoryError(f"{where}: error must be a string")
        return cls(index, time_ns, float(wall_time), process, kind, f, value, error)


@dataclass(frozen=True, slots=True)
class Op:
    """An invocation and its completion (None: still open when the history ended)."""

    invoke: Event
    completion: Event | None

    @property
    def process(self) -> Process:
        return self.invoke.process

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def type(self) -> Literal["ok", "fail", "info"]:
        """The outcome; an operation that never completed is unknown ("info")."""
        if self.completion is None:
            return "info"
        kind = self.completion.type
        assert kind in ("ok", "fail", "info"), kind
        return kind

    @property
    def value(self) -> Json:
        """The result on ok, else what was asked."""
        if self.completion is not None and self.completion.type == "ok":
            return self.completion.value
        return self.invoke.value

    @property
    def error(self) -> str | None:
        return None if self.completion is None else self.completion.error

    def latency_ns(self, end_ns: int) -> int:
        """Completion time minus invocation time; an open operation runs to ``end_ns``."""
        done_ns = end_ns if self.completion is None else self.completion.time_ns
        return max(0, done_ns - self.invoke.time_ns)


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A nemesis fault from its start to its end (None: never healed in this history)."""

    window: int
    kind: str
    targets: tuple[str, ...]
    start_ns: int
    end_ns: int | None


@dataclass(frozen=True, slots=True)
class History:
    """The events of one test, in file order."""

    events: tuple[Event, ...]

    @property
    def end_ns(self) -> int:
        return self.events[-1].time_ns if self.events else 0

    def ops(self) -> tuple[Op, ...]:
        """Pairs each invocation with its process's next completion, in invocation order."""
        open_ops: dict[Process, Event] = {}
        done: dict[int, Op] = {}
        for event in self.events:
            if event.type == "nemesis":
                continue
            where = f"event {event.index}"
            if event.type == "invoke":
                if event.process in open_ops:
                    previous = open_ops[event.process].index
                    raise HistoryError(
                        f"{where}: process {event.process!r} invokes while event {previous}"
                        " is still open (a process runs one operation at a time)"
                    )
                open_ops[event.process] = event
                continue
            invoke = open_ops.pop(event.process, None)
            if invoke is None:
                raise HistoryError(f"{where}: completion without an open invocation")
            if invoke.f != event.f:
                raise HistoryError(f"{where}: completes f={event.f!r} but {invoke.f!r} was invoked")
            done[invoke.index] = Op(invoke, event)
        for invoke in open_ops.values():
            done[invoke.index] = Op(invoke, None)
        return tuple(done[i] for i in sorted(done))

    def fault_windows(self) -> tuple[FaultWindow, ...]:
        """The nemesis windows, in start order."""
        started: dict[int, tuple[Event, Json]] = {}
        windows: list[FaultWindow] = []
        for event in self.events:
            if event.type != "nemesis":
                continue
            value = event.value
            if not isinstance(value, dict) or not isinstance(value.get("window"), int):
                raise HistoryError(f"event {event.index}: a nemesis value carries a window id")
            window = value["window"]
            if event.f == "start":
                started[window] = (event, value)
            elif event.f == "end":
                if window not in started:
                    raise HistoryError(f"event {event.index}: end of unknown window {window}")
                start, start_value = started.pop(window)
                windows.append(_window(window, start_value, start.time_ns, event.time_ns))
            else:
                raise HistoryError(f"event {event.index}: nemesis f is start or end")
        for window, (start, start_value) in started.items():
            windows.append(_window(window, start_value, start.time_ns, None))
        return tuple(sorted(windows, key=lambda w: (w.start_ns, w.window)))


def _window(window: int, value: Json, start_ns: int, end_ns: int | None) -> FaultWindow:
    targets = value.get("targets") or ()
    return FaultWindow(
        window, str(value.get("kind", "?")), tuple(map(str, targets)), start_ns, end_ns
    )


def parse_lines(lines: Iterable[bytes], source: str = "history") -> History:
    """Parses JSON lines. A last line cut short (a crash mid-write) is dropped; any other
    bad line raises `HistoryError`."""
    events: list[Event] = []
    pending: bytes | None = None
    for number, line in enumerate(lines, start=1):
        if pending is not None:
            raise HistoryError(f"{source}:{number - 1}: line is not valid JSON")
        if not line.strip():
            continue
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.endswith(b"\n"):
                raise HistoryError(f"{source}:{number}: line is not valid JSON") from None
            pending = line  # tolerated only if it is the very last line
            continue
        event = Event.from_json(raw, f"{source}:{number}")
        if events and event.index <= events[-1].index:
            raise HistoryError(f"{source}:{number}: index {event.index} does not increase")
        if events and event.time_ns < events[-1].time_ns:
            raise HistoryError(f"{source}:{number}: time_ns goes backwards")
        events.append(event)
    return History(tuple(events))


def read_history(path: Path | str) -> History:
    """Reads a history file written by `HistoryWriter`."""
    with open(path, "rb") as file:
        return parse_lines(file, str(path))


def dump_history(history: History | Iterable[Event], path: Path | str) -> None:
    """Writes events as a history file (for tests and for copying a history)."""
    events = history.events if isinstance(history, History) else history
    with open(path, "wb") as file:
        for event in events:
            file.write(orjson.dumps(event.to_json()) + b"\n")


@dataclass(frozen=True, slots=True)
class Invocation:
    """An open operation: pass it back to `HistoryWriter.ok`, ``fail`` or ``info``."""

    index: int
    process: Process
    f: str


class HistoryWriter:
    """Appends events to a history file. Thread-safe: any thread of the test may record.

    Each event is written and flushed before the call returns, so a crash of the test
    process keeps every event recorded so far (``fsync=True`` also survives a machine
    crash, at a cost per event). Use `HistoryWriter.open` or pass an open binary file.
    """

    def __init__(
        self,
        file: BinaryIO,
        *,
        fsync: bool = False,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self._file = file
        self._fsync = fsync
        self._monotonic_ns = monotonic_ns
        self._wall_time = wall_time
        self._start_ns = monotonic_ns()
        self._lock = threading.Lock()
        self._index_next = 0
        self._window_next = 0
        self._open: dict[Process, Invocation] = {}  # at most one per process

    @classmethod
    def open(cls, path: Path | str, *, fsync: bool = False) -> HistoryWriter:
        """Creates the file (refusing to overwrite an existing history)."""
        return cls(open(path, "xb"), fsync=fsync)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def invoke(self, process: Process, f: str, value: Json = None) -> Invocation:
        """Records that ``process`` starts operation ``f``."""
        with self._lock:
            if process == NEMESIS_PROCESS:
                raise HistoryError("process 'nemesis' is reserved for fault windows")
            if process in self._open:
                raise HistoryError(f"process {process!r} already has an open operation")
            index = self._write_locked(process, "invoke", f, value, None)
            invocation = Invocation(index, process, f)
            self._open[process] = invocation
            return invocation

    def ok(self, invocation: Invocation, value: Json = None) -> None:
        """The operation took effect; ``value`` is its result."""
        self._complete(invocation, "ok", value, None)

    def fail(self, invocation: Invocation, error: str, value: Json = None) -> None:
        """The operation certainly did not take effect (e.g. a rejected request)."""
        self._complete(invocation, "fail", value, error)

    def info(self, invocation: Invocation, error: str, value: Json = None) -> None:
        """The outcome is unknown (timeout, lost connection): it may have taken effect."""
        self._complete(invocation, "info", value, error)

    def fault_start(self, kind: str, targets: Iterable[str]) -> int:
        """Records the start of a fault window; returns its id for `fault_end`."""
        with self._lock:
            window = self._window_next
            self._window_next += 1
            value = {"window": window, "kind": kind, "targets": list(targets)}
            self._write_locked(NEMESIS_PROCESS, "nemesis", "start", value, None)
            return window

    def fault_end(self, window: int, kind: str, targets: Iterable[str] = ()) -> None:
        """Records that the fault ``window`` healed."""
        with self._lock:
            assert 0 <= window < self._window_next, window
            value = {"window": window, "kind": kind, "targets": list(targets)}
            self._write_locked(NEMESIS_PROCESS, "nemesis", "end", value, None)

    def _complete(
        self, invocation: Invocation, kind: EventType, value: Json, error: str | None
    ) -> None:
        with self._lock:
            if self._open.get(invocation.process) != invocation:
                raise HistoryError(f"{invocation} is not the open operation of its process")
            del self._open[invocation.process]
            self._write_locked(invocation.process, kind, invocation.f, value, error)

    def _write_locked(
        self, process: Process, kind: EventType, f: str, value: Json, error: str | None
    ) -> int:
        index = self._index_next
        self._index_next += 1
        event = Event(
            index=index,
            time_ns=self._monotonic_ns() - self._start_ns,
            wall_time=self._wall_time(),
            process=process,
            type=kind,
            f=f,
            value=value,
            error=error,
        )
        self._file.write(orjson.dumps(event.to_json()) + b"\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        return index


def iter_records(value: Json, where: str) -> Iterator[tuple[str, int, int, str | int]]:
    """The ``(topic, partition, offset, value)`` records of a poll or final read result."""
    records = value.get("records") if isinstance(value, dict) else None
    if not isinstance(records, list):
        raise HistoryError(f"{where}: result needs a 'records' list")
    for record in records:
        yield read_record(record, where)


def read_record(record: Json, where: str) -> tuple[str, int, int, str | int]:
    """One ``{"topic", "partition", "offset", "value"}`` record, checked."""
    if not isinstance(record, dict):
        raise HistoryError(f"{where}: a record is an object")
    topic, partition = record.get("topic"), record.get("partition")
    offset, value = record.get("offset"), record.get("value")
    if not isinstance(topic, str):
        raise HistoryError(f"{where}: record topic must be a string")
    if not _is_int(partition) or not _is_int(offset):
        raise HistoryError(f"{where}: record partition and offset must be integers")
    return topic, partition, offset, check_value(value, where)


def check_value(value: Json, where: str) -> str | int:
    if isinstance(value, str) or _is_int(value):
        return value
    raise HistoryError(f"{where}: record values must be str or int, got {value!r}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
