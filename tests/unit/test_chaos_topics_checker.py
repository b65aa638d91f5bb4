"""The metadata checker on hand-made histories.

Each test writes a short history (create/delete outcomes and a final listing) with a
fake clock and checks which anomaly the checker reports: a created topic that vanished,
a deleted topic that came back, a topic nobody created; and that concurrent or unknown
operations excuse the final state instead of convicting it.
"""

from __future__ import annotations

import io
import itertools

from raftka.chaos.history import HistoryWriter, parse_lines
from raftka.chaos.topics_checker import check_topics


class _H:
    def __init__(self) -> None:
        ticks = itertools.count()
        self.buf = io.BytesIO()
        self.w = HistoryWriter(
            self.buf, monotonic_ns=lambda: next(ticks) * 1000, wall_time=lambda: 0.0
        )

    def op(self, process: int, f: str, topic: str, outcome: str) -> None:
        inv = self.w.invoke(process, f, {"topic": topic})
        self.complete(inv, outcome)

    def complete(self, inv: object, outcome: str) -> None:
        if outcome == "ok":
            self.w.ok(inv)  # type: ignore[arg-type]
        elif outcome == "fail":
            self.w.fail(inv, "TopicAlreadyExistsError")  # type: ignore[arg-type]
        else:
            self.w.info(inv, "timeout")  # type: ignore[arg-type]

    def final(self, topics: list[str]) -> None:
        inv = self.w.invoke("final", "list_topics", {"final": True})
        self.w.ok(inv, {"final": True, "topics": topics})

    def check(self) -> dict[str, tuple[str, ...]]:
        result = check_topics(parse_lines(self.buf.getvalue().splitlines(keepends=True)))
        assert result.complete
        return {k: v for k, v in result.anomalies.items() if v}


def test_consistent_history_is_valid() -> None:
    """create ok, delete ok, create ok -> present: nothing to report."""
    h = _H()
    h.op(0, "create_topic", "a", "ok")
    h.op(0, "delete_topic", "a", "ok")
    h.op(1, "create_topic", "a", "ok")
    h.op(1, "create_topic", "b", "ok")
    h.op(1, "delete_topic", "b", "ok")
    h.final(["a"])
    assert h.check() == {}


def test_lost_resurrected_and_phantom_topics() -> None:
    """A created topic missing at the end, a deleted one present, an uncreated one
    present: each is reported under its kind."""
    h = _H()
    h.op(0, "create_topic", "lost", "ok")
    h.op(0, "create_topic", "back", "ok")
    h.op(0, "delete_topic", "back", "ok")
    h.final(["back", "ghost"])
    assert h.check() == {
        "lost_topic": ("lost",),
        "resurrected_topic": ("back",),
        "phantom_topic": ("ghost",),
    }


def test_unknown_or_concurrent_deletes_excuse_a_missing_topic() -> None:
    """A delete whose outcome is unknown may act at any later time, and one concurrent
    with the create may act after it: neither convicts a missing topic."""
    h = _H()
    h.op(0, "delete_topic", "x", "info")  # unknown, invoked before the create
    h.op(1, "create_topic", "x", "ok")
    concurrent = h.w.invoke(0, "delete_topic", {"topic": "y"})
    h.op(1, "create_topic", "y", "ok")
    h.complete(concurrent, "ok")
    h.final([])
    assert h.check() == {}


def test_failed_create_is_no_evidence() -> None:
    """TOPIC_ALREADY_EXISTS after a retry may hide an earlier successful attempt: a
    failed create neither requires nor forbids the topic."""
    h = _H()
    h.op(0, "create_topic", "z", "fail")
    h.final(["z"])
    assert h.check() == {}


def test_no_final_listing_is_incomplete() -> None:
    """Without the final listing the verdict is incomplete and not valid."""
    h = _H()
    h.op(0, "create_topic", "a", "ok")
    result = check_topics(parse_lines(h.buf.getvalue().splitlines(keepends=True)))
    assert not result.complete and not result.valid
