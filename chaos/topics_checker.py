"""The metadata checker: is the final set of topics explained by the history?

Theory of operation
-------------------
The metadata workload creates and deletes topics from a small pool of names, then, after
the faults heal, records the topics every broker agrees on (a ``list_topics`` op whose
invocation value has ``"final": true``). Outcomes are read conservatively, because the
admin client retries: an attempt that timed out may have taken effect and its retry
then answers TOPIC_ALREADY_EXISTS or UNKNOWN_TOPIC_OR_PARTITION. So only ``ok`` is
evidence; ``fail`` and ``info`` say nothing about the topic.

An operation *may have acted after* event E when it completed after E or its outcome is
unknown (``info`` or never completed: a timed-out request may still be applied later).
For each topic name (the order is the file order, which is real-time order):

=================  ==================================================================
kind               definition
=================  ==================================================================
lost_topic         an ok create C and no delete of the name that may have acted after
                   C was invoked, yet the final listing lacks it
resurrected_topic  an ok delete D and no create of the name that may have acted after
                   D was invoked, yet the final listing holds it
phantom_topic      the final listing holds a name no create was ever invoked for
=================  ==================================================================

Without a final listing the verdict is incomplete, hence not valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from raftka.chaos.history import History, Json, Op

TOPIC_ANOMALIES: Final[Mapping[str, str]] = {
    "lost_topic": "created (ok), never deleted after, missing at the end",
    "resurrected_topic": "deleted (ok), never created after, present at the end",
    "phantom_topic": "present at the end, never created",
}


@dataclass(frozen=True, slots=True)
class TopicsResult:
    valid: bool
    complete: bool
    anomalies: Mapping[str, tuple[str, ...]]  # kind -> topic names
    final_topics: tuple[str, ...]
    ops: Mapping[str, Mapping[str, int]]  # f -> outcome -> count

    def to_json(self) -> dict[str, Json]:
        return {
            "valid": self.valid,
            "complete": self.complete,
            "anomalies": {k: list(v) for k, v in self.anomalies.items()},
            "final_topics": list(self.final_topics),
            "ops": {f: dict(c) for f, c in self.ops.items()},
        }

    def summary(self) -> str:
        found = {k: v for k, v in self.anomalies.items() if v}
        verdict = "valid" if self.valid else "INVALID"
        if not self.complete:
            verdict += " (incomplete: no final listing)"
        return f"topics: {verdict}; anomalies {found or 'none'}; final {list(self.final_topics)}"


def _topic(op: Op) -> str | None:
    value = op.invoke.value
    topic = value.get("topic") if isinstance(value, dict) else None
    return topic if isinstance(topic, str) else None


def check_topics(history: History) -> TopicsResult:
    """Judge a metadata workload's history (see the module doc)."""
    ops = history.ops()
    counts: dict[str, dict[str, int]] = {}
    final: set[str] | None = None
    by_topic: dict[str, list[Op]] = {}
    for op in ops:
        if op.f not in ("create_topic", "delete_topic", "list_topics"):
            continue
        outcome = counts.setdefault(op.f, {})
        outcome[op.type] = outcome.get(op.type, 0) + 1
        if op.f == "list_topics":
            is_final = isinstance(op.invoke.value, dict) and op.invoke.value.get("final")
            if is_final and op.type == "ok" and isinstance(op.value, dict):
                final = set(_names(op.value.get("topics", [])))
            continue
        topic = _topic(op)
        if topic is not None:
            by_topic.setdefault(topic, []).append(op)
    anomalies: dict[str, list[str]] = {k: [] for k in TOPIC_ANOMALIES}
    if final is not None:
        for topic, topic_ops in sorted(by_topic.items()):
            if _must_exist(topic_ops) and topic not in final:
                anomalies["lost_topic"].append(topic)
            if _must_be_gone(topic_ops) and topic in final:
                anomalies["resurrected_topic"].append(topic)
        created = {t for t, o in by_topic.items() if any(op.f == "create_topic" for op in o)}
        anomalies["phantom_topic"] = sorted(final - created)
    found = any(anomalies.values())
    return TopicsResult(
        valid=final is not None and not found,
        complete=final is not None,
        anomalies={k: tuple(v) for k, v in anomalies.items()},
        final_topics=tuple(sorted(final or ())),
        ops=counts,
    )


def _names(raw: Iterable[Json]) -> list[str]:
    return [t for t in raw if isinstance(t, str)]


def _may_act_after(op: Op, index: int) -> bool:
    """Whether ``op`` may have taken effect after event ``index``: it completed after
    it, or its outcome is unknown (a timed-out request may still be applied later)."""
    if op.type == "info" or op.completion is None:
        return True
    return op.completion.index > index


def _must_exist(ops: list[Op]) -> bool:
    """Some ok create after whose invocation no delete may have acted."""
    return _last_word(ops, "create_topic", "delete_topic")


def _must_be_gone(ops: list[Op]) -> bool:
    """Some ok delete after whose invocation no create may have acted."""
    return _last_word(ops, "delete_topic", "create_topic")


def _last_word(ops: list[Op], f: str, undo: str) -> bool:
    """Some ok ``f`` after whose invocation no ``undo`` may have acted."""
    return any(
        op.f == f
        and op.type == "ok"
        and not any(o.f == undo and _may_act_after(o, op.invoke.index) for o in ops)
        for op in ops
    )
