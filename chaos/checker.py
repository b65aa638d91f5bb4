"""The queue checker: reads a history and finds what a replicated log must never do.

Theory of operation
-------------------
Every ``send`` carries a value unique within its topic, so a value names one intended
record. The checker gathers every observation of the log: send acknowledgements
(``partition``, ``offset``), each record a poll returned and the final read taken after
all faults healed. From those it derives, per topic-partition, which values were seen
at which offsets, and judges:

=====================  ==============================================================
kind                   definition
=====================  ==============================================================
lost                   an acknowledged (ok) send whose value is absent from the final
                       read of its topic
duplicate              a value read (poll or final read) at two positions
                       (partition, offset) of its topic
inconsistent_offset    one (topic, partition, offset) observed holding two values,
                       across send acks, polls and the final read
vanished               a value some poll returned that the final read lacks (the
                       poll read data that later disappeared, e.g. above the HW)
poll_backwards         a consumer returned offset O on a partition after having
                       returned O or later, with no seek or reassignment in between
poll_skip              a consumer jumped from its position P to offset O > P on a
                       partition although some offset in [P, O) is known to hold a
                       record (gaps nobody saw a record in are allowed: compaction,
                       transaction markers)
ack_offset_mismatch    an ok send acknowledged at (partition, offset) whose value the
                       final read holds only at other positions
phantom                a value read that no send ever carried (corruption)
failed_send_present    a send recorded as ``fail`` whose value was read: ``fail``
                       must mean "did not happen"; workloads record ambiguous errors
                       as ``info``
split_ownership        one partition assigned to two members in the same generation
                       of a group
stale_commit           an ok commit of generation G invoked after some member of the
                       group had already completed an assign of a generation > G
undelivered            an acknowledged send no poll returned although an ok
                       ``group_drain`` says a fresh group member resumed from the
                       committed offsets and read every partition to its end: the
                       group committed past a record nobody consumed (at-least-once
                       broken). Judged only with an ok ``group_drain``
unseen                 informational: an acknowledged value no poll returned (it may
                       still be in the final read); does not make a history invalid
=====================  ==============================================================

Sends with an unknown outcome (``info`` or never completed) may or may not appear:
they are never lost, and the checker counts how many did appear. Judgements that need
the final read (lost, vanished, ack_offset_mismatch) are skipped without one, and the
result is then incomplete, hence not valid. "Before" always means file order, which is
real-time order (see `raftka.chaos.history`).

A poll's consumer is ``value["consumer"]`` (ok value, else invoke value, else the
process). A consumer's position on a partition is forgotten on an ok ``assign`` naming
it (``consumer``, else ``member``) and on a poll with an unknown outcome (it may have
consumed records nobody recorded); an ok ``seek`` sets it.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import orjson

from raftka.chaos.history import (
    History,
    HistoryError,
    Json,
    Op,
    check_value,
    iter_records,
)

ANOMALY_KINDS: Final[Mapping[str, str]] = {
    "lost": "acknowledged send missing from the final read",
    "duplicate": "value read at two positions of its topic",
    "inconsistent_offset": "one offset observed with two values",
    "vanished": "value returned by a poll, missing from the final read",
    "poll_backwards": "consumer went back on a partition without seek or rebalance",
    "poll_skip": "consumer skipped offsets known to hold records",
    "ack_offset_mismatch": "acknowledged offset differs from the final read's",
    "phantom": "value read that no send carried",
    "failed_send_present": "send recorded as failed, yet its value was read",
    "split_ownership": "partition owned by two members in one generation",
    "stale_commit": "commit accepted from a stale generation",
    "undelivered": "acknowledged send the consumer group never delivered",
    "unseen": "acknowledged value no poll returned (informational)",
}
INFORMATIONAL: Final = frozenset({"unseen"})
EXAMPLES_MAX: Final = 5

TopicValue = tuple[str, str | int]
Position = tuple[int, int]  # (partition, offset)


@dataclass(frozen=True, slots=True)
class Anomaly:
    """How often one kind of anomaly occurred, with its first few examples."""

    kind: str
    count: int
    examples: tuple[dict[str, Json], ...]
    informational: bool

    @property
    def description(self) -> str:
        return ANOMALY_KINDS[self.kind]


@dataclass(frozen=True, slots=True)
class SendStats:
    acked: int
    failed: int
    unknown: int
    unknown_present: int  # unknown-outcome sends whose value some read returned


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one history."""

    valid: bool
    complete: bool  # an ok final_read exists, so lost/vanished/mismatch were judged
    anomalies: Mapping[str, Anomaly]  # every kind of ANOMALY_KINDS, counts may be 0
    sends: SendStats
    ops: Mapping[str, Mapping[str, int]]  # f -> outcome -> count
    duplicates_allowed: bool = False

    @property
    def counts(self) -> dict[str, int]:
        return {kind: anomaly.count for kind, anomaly in self.anomalies.items()}

    def found(self) -> list[str]:
        """The kinds that occurred, informational ones included."""
        return [kind for kind, anomaly in self.anomalies.items() if anomaly.count]

    def to_json(self) -> dict[str, Json]:
        return {
            "valid": self.valid,
            "complete": self.complete,
            "duplicates_allowed": self.duplicates_allowed,
            "counts": self.counts,
            "anomalies": {
                kind: {
                    "description": a.description,
                    "count": a.count,
                    "informational": a.informational,
                    "examples": list(a.examples),
                }
                for kind, a in self.anomalies.items()
            },
            "sends": {
                "acked": self.sends.acked,
                "failed": self.sends.failed,
                "unknown": self.sends.unknown,
                "unknown_present": self.sends.unknown_present,
            },
            "ops": {f: dict(outcomes) for f, outcomes in self.ops.items()},
        }

    def to_json_bytes(self) -> bytes:
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    def summary(self) -> str:
        """A few lines for a human: verdict, counts, one example per anomaly."""
        bad = [k for k in self.found() if self._invalidating(k)]
        if self.valid:
            verdict = "VALID"
        elif not self.complete and not bad:
            verdict = "UNKNOWN: no ok final_read, lost and vanished writes were not judged"
        else:
            verdict = "INVALID: " + ", ".join(f"{k} {self.anomalies[k].count}" for k in bad)
        lines = [verdict]
        s = self.sends
        lines.append(
            f"sends: {s.acked} acked, {s.failed} failed, {s.unknown} unknown"
            f" ({s.unknown_present} of them appeared)"
        )
        ops = "; ".join(
            f"{f} " + " ".join(f"{t}={n}" for t, n in sorted(outcomes.items()))
            for f, outcomes in sorted(self.ops.items())
        )
        lines.append(f"ops: {ops}")
        for kind in self.found():
            anomaly = self.anomalies[kind]
            note = "" if self._invalidating(kind) else " (does not invalidate)"
            example = orjson.dumps(anomaly.examples[0]).decode() if anomaly.examples else ""
            lines.append(f"{kind}: {anomaly.count}{note}; e.g. {example}")
        return "\n".join(lines)

    def _invalidating(self, kind: str) -> bool:
        if kind in INFORMATIONAL:
            return False
        return not (kind == "duplicate" and self.duplicates_allowed)


def check(
    history: History, *, duplicates_allowed: bool = False, examples_max: int = EXAMPLES_MAX
) -> CheckResult:
    """Judges a history. ``duplicates_allowed`` reports duplicates without invalidating
    (a non-idempotent producer retrying is at-least-once). Raises `HistoryError` if the
    history is malformed (e.g. one value sent twice)."""
    assert examples_max >= 0, examples_max
    return _Checker(history, examples_max).run(duplicates_allowed)


@dataclass
class _Findings:
    examples_max: int
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[dict[str, Json]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, example: dict[str, Json]) -> None:
        assert kind in ANOMALY_KINDS, kind
        self.counts[kind] += 1
        if len(self.examples[kind]) < self.examples_max:
            self.examples[kind].append(example)


def _source(op: Op) -> str:
    """Names the history line holding an operation's result, e.g. ``poll@17``."""
    event = op.completion if op.completion is not None else op.invoke
    return f"{op.f}@{event.index}"


def _int(value: Json, name: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise HistoryError(f"{where}: {name} must be an integer, got {value!r}")
    return value


def _dict(value: Json, where: str) -> dict[str, Json]:
    if not isinstance(value, dict):
        raise HistoryError(f"{where}: value must be an object, got {value!r}")
    return value


class _Checker:
    def __init__(self, history: History, examples_max: int) -> None:
        self.ops = history.ops()
        self.findings = _Findings(examples_max)
        self.sent: set[TopicValue] = set()
        self.acked: dict[TopicValue, tuple[Position, str]] = {}
        self.failed: dict[TopicValue, str] = {}
        self.unknown: dict[TopicValue, str] = {}
        # (topic, partition, offset) -> value -> first source that showed it there
        self.at_offset: dict[tuple[str, int, int], dict[str | int, str]] = defaultdict(dict)
        # (topic, value) -> position -> first read (poll or final read) that showed it
        self.read_at: dict[TopicValue, dict[Position, str]] = defaultdict(dict)
        self.final_at: dict[TopicValue, set[Position]] = defaultdict(set)
        self.polled: dict[TopicValue, tuple[Position, str]] = {}
        self.complete = False
        self.drained = False  # an ok group_drain: the group delivered everything

    def run(self, duplicates_allowed: bool) -> CheckResult:
        op_counts: dict[str, Counter[str]] = defaultdict(Counter)
        for op in self.ops:
            op_counts[op.f][op.type] += 1
            if op.f == "send":
                self._send(op)
            elif op.f in ("poll", "final_read") and op.type == "ok":
                self._read(op)
            elif op.f == "group_drain" and op.type == "ok":
                self.drained = True
        self._offsets()
        self._values()
        self._polls()
        self._groups()
        unknown_present = sum(1 for key in self.unknown if key in self.read_at)
        findings = self.findings
        anomalies = {
            kind: Anomaly(
                kind,
                findings.counts[kind],
                tuple(findings.examples[kind]),
                kind in INFORMATIONAL,
            )
            for kind in ANOMALY_KINDS
        }
        bad = [
            k
            for k, a in anomalies.items()
            if a.count and not a.informational and not (k == "duplicate" and duplicates_allowed)
        ]
        return CheckResult(
            valid=self.complete and not bad,
            complete=self.complete,
            anomalies=anomalies,
            sends=SendStats(len(self.acked), len(self.failed), len(self.unknown), unknown_present),
            ops={f: dict(c) for f, c in sorted(op_counts.items())},
            duplicates_allowed=duplicates_allowed,
        )

    def _send(self, op: Op) -> None:
        where = f"event {op.invoke.index}"
        asked = _dict(op.invoke.value, where)
        topic = asked.get("topic")
        if not isinstance(topic, str):
            raise HistoryError(f"{where}: send needs a topic")
        key = (topic, check_value(asked.get("value"), where))
        if key in self.sent:
            raise HistoryError(f"{where}: value {key[1]!r} sent twice to {topic!r}")
        self.sent.add(key)
        source = _source(op)
        if op.type == "fail":
            self.failed[key] = source
        elif op.type == "info":
            self.unknown[key] = source
        else:
            assert op.completion is not None
            where = f"event {op.completion.index}"
            told = _dict(op.completion.value, where)
            partition = _int(told.get("partition", asked.get("partition")), "partition", where)
            offset = _int(told.get("offset"), "offset", where)
            self.acked[key] = ((partition, offset), source)
            self.at_offset[(topic, partition, offset)].setdefault(key[1], source)

    def _read(self, op: Op) -> None:
        assert op.completion is not None
        source = _source(op)
        final = op.f == "final_read"
        self.complete |= final
        for topic, partition, offset, value in iter_records(op.value, source):
            key, position = (topic, value), (partition, offset)
            self.at_offset[(topic, partition, offset)].setdefault(value, source)
            self.read_at[key].setdefault(position, source)
            if final:
                self.final_at[key].add(position)
            else:
                self.polled.setdefault(key, (position, source))

    def _offsets(self) -> None:
        for (topic, partition, offset), values in sorted(self.at_offset.items(), key=_order):
            if len(values) > 1:
                self.findings.add(
                    "inconsistent_offset",
                    {
                        "topic": topic,
                        "partition": partition,
                        "offset": offset,
                        "values": [{"value": v, "source": s} for v, s in values.items()],
                    },
                )

    def _values(self) -> None:
        add = self.findings.add
        for key, positions in self.read_at.items():
            topic, value = key
            if len(positions) > 1:
                add(
                    "duplicate",
                    {
                        "topic": topic,
                        "value": value,
                        "positions": [
                            {"partition": p, "offset": o, "source": s}
                            for (p, o), s in sorted(positions.items())
                        ],
                    },
                )
            if key not in self.sent:
                (partition, offset), source = min(positions.items())
                add(
                    "phantom",
                    {
                        "topic": topic,
                        "value": value,
                        "partition": partition,
                        "offset": offset,
                        "source": source,
                    },
                )
            if key in self.failed:
                (partition, offset), source = min(positions.items())
                add(
                    "failed_send_present",
                    {
                        "topic": topic,
                        "value": value,
                        "partition": partition,
                        "offset": offset,
                        "send": self.failed[key],
                        "source": source,
                    },
                )
        for key, ((partition, offset), ack) in self.acked.items():
            topic, value = key
            where = {"topic": topic, "value": value, "partition": partition, "offset": offset}
            if key not in self.polled:
                add("unseen", {**where, "send": ack})
                if self.drained:
                    add("undelivered", {**where, "send": ack})
            if not self.complete:
                continue
            final = self.final_at.get(key)
            if not final:
                add("lost", {**where, "send": ack})
            elif (partition, offset) not in final:
                add(
                    "ack_offset_mismatch",
                    {
                        **where,
                        "send": ack,
                        "final": [{"partition": p, "offset": o} for p, o in sorted(final)],
                    },
                )
        if self.complete:
            for key, ((partition, offset), poll) in self.polled.items():
                if not self.final_at.get(key):
                    add(
                        "vanished",
                        {
                            "topic": key[0],
                            "value": key[1],
                            "partition": partition,
                            "offset": offset,
                            "poll": poll,
                        },
                    )

    def _polls(self) -> None:
        known: dict[tuple[str, int], list[int]] = defaultdict(list)
        for topic, partition, offset in sorted(self.at_offset):
            known[(topic, partition)].append(offset)
        # (consumer, topic, partition) -> the next offset the consumer should return
        position: dict[tuple[str, str, int], int] = {}
        completed = [op for op in self.ops if op.completion is not None]
        completed.sort(key=lambda op: op.completion.index if op.completion else 0)
        for op in completed:
            where = _source(op)
            if op.f == "seek" and op.type == "ok":
                v = _dict(op.value, where)
                seek_topic = v.get("topic")
                if not isinstance(seek_topic, str):
                    raise HistoryError(f"{where}: seek needs a topic")
                tp = (seek_topic, _int(v.get("partition"), "partition", where))
                position[(_consumer(op), *tp)] = _int(v.get("offset"), "offset", where)
            elif (op.f == "assign" and op.type == "ok") or (op.f == "poll" and op.type == "info"):
                consumer = _consumer(op)
                for stale in [k for k in position if k[0] == consumer]:
                    del position[stale]
            elif op.f == "poll" and op.type == "ok":
                consumer = _consumer(op)
                for topic, partition, offset, value in iter_records(op.value, where):
                    k = (consumer, topic, partition)
                    expected = position.get(k)
                    position[k] = offset + 1
                    if expected is None or offset == expected:
                        continue
                    example: dict[str, Json] = {
                        "consumer": consumer,
                        "topic": topic,
                        "partition": partition,
                        "offset": offset,
                        "value": value,
                        "expected": expected,
                        "poll": where,
                    }
                    if offset < expected:
                        self.findings.add("poll_backwards", example)
                        continue
                    offsets = known[(topic, partition)]
                    first = bisect.bisect_left(offsets, expected)
                    missed = bisect.bisect_left(offsets, offset) - first
                    if missed:
                        example["missed"] = missed
                        example["first_missed"] = offsets[first]
                        self.findings.add("poll_skip", example)

    def _groups(self) -> None:
        # (group, generation, topic, partition) -> member -> assign source
        owners: dict[tuple[str, int, str, int], dict[str, str]] = defaultdict(dict)
        # group -> completion indexes of ok assigns, and the newest generation up to each
        seen_at: dict[str, list[int]] = defaultdict(list)
        newest: dict[str, list[tuple[int, str]]] = defaultdict(list)
        assigns = [op for op in self.ops if op.f == "assign" and op.type == "ok"]
        for op in sorted(assigns, key=lambda op: op.completion.index if op.completion else 0):
            assert op.completion is not None
            where = _source(op)
            v = _dict(op.value, where)
            group, member = str(v.get("group", "")), str(v.get("member"))
            generation = _int(v.get("generation"), "generation", where)
            partitions = v.get("partitions")
            if not isinstance(partitions, list):
                raise HistoryError(f"{where}: assign needs a partitions list")
            for tp in partitions:
                tpd = _dict(tp, where)
                topic = tpd.get("topic")
                if not isinstance(topic, str):
                    raise HistoryError(f"{where}: assigned partition needs a topic")
                partition = _int(tpd.get("partition"), "partition", where)
                owners[(group, generation, topic, partition)].setdefault(member, where)
            before = newest[group][-1] if newest[group] else (generation, where)
            seen_at[group].append(op.completion.index)
            newest[group].append(max(before, (generation, where), key=lambda g: g[0]))
        for (group, generation, topic, partition), members in sorted(owners.items()):
            if len(members) > 1:
                self.findings.add(
                    "split_ownership",
                    {
                        "group": group,
                        "generation": generation,
                        "topic": topic,
                        "partition": partition,
                        "members": [{"member": m, "assign": s} for m, s in sorted(members.items())],
                    },
                )
        for op in self.ops:
            if op.f != "commit" or op.type != "ok":
                continue
            where = _source(op)
            v = _dict(op.value, where)
            group = str(v.get("group", ""))
            generation = _int(v.get("generation"), "generation", where)
            # assigns that completed before this commit was invoked
            n = bisect.bisect_left(seen_at[group], op.invoke.index)
            if n == 0:
                continue
            newer, assign = newest[group][n - 1]
            if newer > generation:
                self.findings.add(
                    "stale_commit",
                    {
                        "group": group,
                        "member": str(v.get("member")),
                        "generation": generation,
                        "newer_generation": newer,
                        "commit": where,
                        "assign": assign,
                        "offsets": v.get("offsets"),
                    },
                )


def _order(item: tuple[tuple[str, int, int], object]) -> tuple[str, int, int]:
    return item[0]


def _consumer(op: Op) -> str:
    """Which consumer an operation speaks for (see the module docstring)."""
    for value in (op.value, op.invoke.value):
        if isinstance(value, dict):
            for name in ("consumer", "member"):
                if value.get(name) is not None:
                    return str(value[name])
    return str(op.process)
