"""The transaction checker: what read_committed and exactly-once must never do.

Theory of operation
-------------------
The ``txn`` workload (:mod:`raftka.chaos.txn_workload`) records, per transactional
producer, one ``txn`` op per transaction: the invocation carries the transaction's
values (each unique in the run, with its partition) and its intent (``commit`` or
``abort``); the completion is ok with the outcome (``commit``: commit_transaction
returned; ``abort``: abort_transaction returned after an intended abort, so it
certainly did not commit), or ``info`` when the outcome is unknown (a commit that
raised or timed out: the coordinator may have committed it). read_committed readers
record ``poll`` ops (as the queue workload does), and after the faults heal a
read_committed ``final_read`` of the transactional topic and a ``pipeline_read`` of
the pipeline's input and output topics complete the history.

=====================  ==============================================================
kind                   definition
=====================  ==============================================================
aborted_read           a read_committed read (poll or final read) returned a value of
                       a transaction that certainly did not commit (ok ``abort``), or
                       whose intent was abort (it must never commit)
torn                   a transaction whose values the final read holds only in part
                       (committed or unknown: all or nothing either way)
lost                   a value of a committed transaction missing from the final read
duplicate              a value read at two positions (partition, offset)
out_of_order           a read_committed consumer returned offset O on a partition
                       after having returned O or later (no seek in between)
phantom                a value read that no transaction carried
pipeline_lost          an input record of the pipeline missing from its output
pipeline_duplicate     an input record of the pipeline in its output more than once
pipeline_phantom       an output record whose value no input record carried
=====================  ==============================================================

The judgements that need the final read (torn, lost) and the pipeline's (which need
``pipeline_read``) are skipped without an ok one: the result is then incomplete, and
an incomplete result is not valid. Transactions with an unknown outcome are counted,
with how many turned out committed (all values present) and aborted (none).

The checker is pure: a :class:`raftka.chaos.history.History` in, a
:class:`TxnResult` out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import orjson

from raftka.chaos.history import History, HistoryError, Json, Op, iter_records

__all__ = ["TXN_ANOMALY_KINDS", "TxnResult", "check_txn"]

TXN_ANOMALY_KINDS: Final[Mapping[str, str]] = {
    "aborted_read": "read_committed read returned a value of an aborted transaction",
    "torn": "committed transaction only partly visible in the final read",
    "lost": "value of a committed transaction missing from the final read",
    "duplicate": "value read at two positions",
    "out_of_order": "read_committed consumer went back in offset order",
    "phantom": "value read that no transaction carried",
    "pipeline_lost": "pipeline input record missing from its output",
    "pipeline_duplicate": "pipeline input record in its output more than once",
    "pipeline_phantom": "pipeline output record no input carried",
}
EXAMPLES_MAX: Final = 5


@dataclass(frozen=True, slots=True)
class TxnStats:
    committed: int
    aborted: int
    unknown: int
    unknown_committed: int  # unknown outcome, every value in the final read
    unknown_aborted: int  # unknown outcome, no value in the final read
    pipeline_inputs: int
    pipeline_outputs: int
    # init_transactions attempts of the workload's producers that did not succeed, and
    # the last one's error: why a run with no transaction did nothing.
    init_failures: int = 0
    last_init_error: str | None = None


@dataclass(frozen=True, slots=True)
class TxnResult:
    valid: bool
    complete: bool  # an ok final_read and an ok pipeline_read exist
    counts: Mapping[str, int]  # every kind of TXN_ANOMALY_KINDS
    examples: Mapping[str, tuple[dict[str, Json], ...]]
    stats: TxnStats

    def found(self) -> list[str]:
        return [k for k, n in self.counts.items() if n]

    def to_json(self) -> dict[str, Json]:
        return {
            "valid": self.valid,
            "complete": self.complete,
            "anomalies": {
                k: {
                    "count": n,
                    "description": TXN_ANOMALY_KINDS[k],
                    "examples": list(self.examples.get(k, ())),
                }
                for k, n in self.counts.items()
            },
            "transactions": {
                "committed": self.stats.committed,
                "aborted": self.stats.aborted,
                "unknown": self.stats.unknown,
                "unknown_committed": self.stats.unknown_committed,
                "unknown_aborted": self.stats.unknown_aborted,
            },
            "init_failures": self.stats.init_failures,
            "last_init_error": self.stats.last_init_error,
            "pipeline": {
                "inputs": self.stats.pipeline_inputs,
                "outputs": self.stats.pipeline_outputs,
            },
        }

    def to_json_bytes(self) -> bytes:
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    def summary(self) -> str:
        s = self.stats
        head = (
            f"txn: {'valid' if self.valid else 'INVALID'}"
            f"{'' if self.complete else ' (incomplete: no final read)'}; transactions "
            f"{s.committed} committed, {s.aborted} aborted, {s.unknown} unknown "
            f"({s.unknown_committed} turned out committed, {s.unknown_aborted} aborted); "
            f"pipeline {s.pipeline_inputs} inputs -> {s.pipeline_outputs} outputs"
        )
        found = ", ".join(f"{self.counts[k]} {k}" for k in self.found())
        return head + (f"; anomalies: {found}" if found else "; no anomaly")


@dataclass
class _Txn:
    values: tuple[int, ...]
    intent: str
    outcome: str | None  # "commit", "abort" or None (unknown)


@dataclass
class _Findings:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[dict[str, Json]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, example: dict[str, Json]) -> None:
        assert kind in TXN_ANOMALY_KINDS, kind
        self.counts[kind] += 1
        if len(self.examples[kind]) < EXAMPLES_MAX:
            self.examples[kind].append(example)


def _txn(op: Op) -> _Txn:
    where = f"event {op.invoke.index}"
    inv = op.invoke.value
    if not isinstance(inv, dict) or not isinstance(inv.get("values"), list):
        raise HistoryError(f"{where}: a txn invocation needs a values list")
    values: list[int] = []
    for v in inv["values"]:
        value = v.get("value") if isinstance(v, dict) else v
        if not isinstance(value, int) or isinstance(value, bool):
            raise HistoryError(f"{where}: txn value {v!r} is not an integer")
        values.append(value)
    intent = inv.get("intent")
    if intent not in ("commit", "abort"):
        raise HistoryError(f"{where}: intent must be commit or abort, not {intent!r}")
    outcome: str | None = None
    if op.type == "ok":
        done = op.value
        outcome_raw = done.get("outcome") if isinstance(done, dict) else None
        if outcome_raw not in ("commit", "abort"):
            raise HistoryError(f"{where}: an ok txn needs outcome commit or abort")
        outcome = str(outcome_raw)
    elif op.type == "fail":
        outcome = "abort"  # fail means it did not happen
    return _Txn(tuple(values), str(intent), outcome)


def check_txn(history: History, *, topic: str = "txn") -> TxnResult:
    """Judge a txn-workload history (see the module doc); ``topic`` is the
    transactional topic (the pipeline's topics come from ``pipeline_read``)."""
    ops = history.ops()
    found = _Findings()
    txns: list[_Txn] = []
    owner: dict[int, int] = {}  # value -> index in txns
    init_failures = 0
    last_init_error: str | None = None
    for op in ops:
        if op.f == "init" and op.type != "ok":
            init_failures += 1
            last_init_error = op.error or last_init_error
        if op.f == "txn":
            t = _txn(op)
            for v in t.values:
                if v in owner:
                    raise HistoryError(f"event {op.invoke.index}: value {v} in two transactions")
                owner[v] = len(txns)
            txns.append(t)

    positions: dict[int, set[tuple[int, int]]] = defaultdict(set)
    last: dict[tuple[str, int], int] = {}  # (consumer, partition) -> last offset returned
    final: list[tuple[int, int, int]] | None = None
    pipeline: dict[str, Json] | None = None
    for op in ops:
        where = f"event {op.invoke.index}"
        if op.f == "seek" and op.type == "ok":
            v = op.value
            if isinstance(v, dict):
                last.pop((str(v.get("consumer")), int(str(v.get("partition")))), None)
        elif op.f == "poll":
            consumer = _consumer(op)
            if op.type != "ok":
                # the poll may have advanced the position unrecorded
                for key in [k for k in last if k[0] == consumer]:
                    del last[key]
                continue
            for t_name, partition, offset, value in iter_records(op.value, where):
                if t_name != topic:
                    continue
                key = (consumer, partition)
                if key in last and offset <= last[key]:
                    found.add(
                        "out_of_order",
                        {
                            "consumer": consumer,
                            "partition": partition,
                            "offset": offset,
                            "after": last[key],
                            "event": op.invoke.index,
                        },
                    )
                last[key] = offset
                _observe(
                    found, txns, owner, positions, value=value, partition=partition, offset=offset
                )
        elif op.f == "final_read" and op.type == "ok":
            final = [
                (p, o, _int_value(v, where))
                for t_name, p, o, v in iter_records(op.value, where)
                if t_name == topic
            ]
        elif op.f == "pipeline_read" and op.type == "ok":
            if not isinstance(op.value, dict):
                raise HistoryError(f"{where}: pipeline_read value must be an object")
            pipeline = op.value

    unknown_committed = unknown_aborted = 0
    if final is not None:
        seen_final: Counter[int] = Counter()
        for p, o, v in final:
            _observe(found, txns, owner, positions, value=v, partition=p, offset=o)
            seen_final[v] += 1
        for i, t in enumerate(txns):
            present = [v for v in t.values if seen_final[v]]
            if t.outcome == "commit":
                for v in t.values:
                    if not seen_final[v]:
                        found.add("lost", {"txn": i, "value": v})
            if present and len(present) < len(t.values) and not _never_commits(t):
                found.add("torn", {"txn": i, "values": list(t.values), "present": present})
            if t.outcome is None and not _never_commits(t):
                if len(present) == len(t.values):
                    unknown_committed += 1
                elif not present:
                    unknown_aborted += 1
    for v, where_at in positions.items():
        if len(where_at) > 1:
            found.add("duplicate", {"value": v, "at": [list(x) for x in sorted(where_at)]})

    inputs = outputs = 0
    if pipeline is not None:
        inputs, outputs = _pipeline(found, pipeline)

    counts = {k: found.counts.get(k, 0) for k in TXN_ANOMALY_KINDS}
    complete = final is not None and pipeline is not None
    return TxnResult(
        valid=complete and not any(counts.values()),
        complete=complete,
        counts=counts,
        examples={k: tuple(v) for k, v in found.examples.items()},
        stats=TxnStats(
            committed=sum(t.outcome == "commit" for t in txns),
            aborted=sum(t.outcome == "abort" for t in txns),
            unknown=sum(t.outcome is None for t in txns),
            unknown_committed=unknown_committed,
            unknown_aborted=unknown_aborted,
            pipeline_inputs=inputs,
            pipeline_outputs=outputs,
            init_failures=init_failures,
            last_init_error=last_init_error,
        ),
    )


def _never_commits(t: _Txn) -> bool:
    return t.outcome == "abort" or t.intent == "abort"


def _observe(
    found: _Findings,
    txns: list[_Txn],
    owner: Mapping[int, int],
    positions: dict[int, set[tuple[int, int]]],
    *,
    value: int | str,
    partition: int,
    offset: int,
) -> None:
    if not isinstance(value, int) or value not in owner:
        found.add("phantom", {"value": value, "partition": partition, "offset": offset})
        return
    positions[value].add((partition, offset))
    t = txns[owner[value]]
    if _never_commits(t):
        found.add(
            "aborted_read",
            {
                "txn": owner[value],
                "value": value,
                "partition": partition,
                "offset": offset,
                "outcome": t.outcome,
                "intent": t.intent,
            },
        )


def _pipeline(found: _Findings, value: Mapping[str, Json]) -> tuple[int, int]:
    """Exactly once: every input value appears once in the output."""
    where = "pipeline_read"
    inputs = [
        _int_value(v, where) for _, _, _, v in iter_records({"records": value.get("input")}, where)
    ]
    outputs = [
        _int_value(v, where) for _, _, _, v in iter_records({"records": value.get("output")}, where)
    ]
    out_counts = Counter(outputs)
    in_set = set(inputs)
    for v in sorted(in_set):
        n = out_counts.get(v, 0)
        if n == 0:
            found.add("pipeline_lost", {"value": v})
        elif n > 1:
            found.add("pipeline_duplicate", {"value": v, "times": n})
    for v in sorted(set(outputs) - in_set):
        found.add("pipeline_phantom", {"value": v})
    return len(inputs), len(outputs)


def _int_value(value: int | str, where: str) -> int:
    if not isinstance(value, int):
        raise HistoryError(f"{where}: value {value!r} is not an integer")
    return value


def _consumer(op: Op) -> str:
    for v in (op.value, op.invoke.value):
        if isinstance(v, dict) and isinstance(v.get("consumer"), str):
            return str(v["consumer"])
    return str(op.process)
