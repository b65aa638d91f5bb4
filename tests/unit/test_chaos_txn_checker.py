"""The transaction checker on synthetic histories: a simulated read_committed log gives
valid histories (hypothesis), and each injected anomaly is flagged as its kind."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.chaos.history import History, HistoryError, HistoryWriter, parse_lines
from raftka.chaos.txn_checker import TXN_ANOMALY_KINDS, check_txn

PARTITIONS = 3


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        self.now_ns += 1_000_000
        return self.now_ns


def rec(partition: int, offset: int, value: int, topic: str = "txn") -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset, "value": value}


@dataclass
class Sim:
    """A read_committed log: every transaction's values are appended (as Kafka does,
    aborted ones too); a read_committed read skips those of transactions that did not
    commit. ``outcomes`` per transaction: commit, abort, unknown-commit, unknown-abort
    (unknown to the client, what the broker did)."""

    rng: random.Random
    writer: HistoryWriter = field(init=False)
    buffer: io.BytesIO = field(default_factory=io.BytesIO)
    log: list[list[tuple[int, bool]]] = field(
        default_factory=lambda: [[] for _ in range(PARTITIONS)]
    )
    next_value: int = 0
    positions: dict[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writer = HistoryWriter(self.buffer, monotonic_ns=FakeClock(), wall_time=lambda: 1.7e9)

    def txn(self, size: int, outcome: str) -> list[int]:
        values = list(range(self.next_value, self.next_value + size))
        self.next_value += size
        intent = "abort" if outcome in ("abort",) else "commit"
        inv = self.writer.invoke(
            "p0",
            "txn",
            {
                "txn": values[0],
                "intent": intent,
                "values": [{"partition": v % PARTITIONS, "value": v} for v in values],
            },
        )
        visible = outcome in ("commit", "unknown-commit")
        for v in values:
            self.log[v % PARTITIONS].append((v, visible))
        if outcome.startswith("unknown"):
            self.writer.info(inv, "timeout")
        else:
            self.writer.ok(inv, {"outcome": outcome})
        return values

    def committed(self, partition: int, start: int, end: int) -> list[dict[str, Any]]:
        return [
            rec(partition, o, v)
            for o, (v, visible) in enumerate(self.log[partition][start:end], start)
            if visible
        ]

    def poll(self, consumer: str, partition: int, count: int) -> None:
        start = self.positions.get((consumer, partition), 0)
        end = min(len(self.log[partition]), start + count)
        self.positions[(consumer, partition)] = end
        inv = self.writer.invoke(consumer, "poll", {"consumer": consumer})
        self.writer.ok(
            inv, {"consumer": consumer, "records": self.committed(partition, start, end)}
        )

    def final(self, extra: list[dict[str, Any]] | None = None, drop: int | None = None) -> None:
        records = [r for p in range(PARTITIONS) for r in self.committed(p, 0, len(self.log[p]))]
        records = [r for r in records if r["value"] != drop] + (extra or [])
        inv = self.writer.invoke("final-reader", "final_read", {"topics": ["txn"]})
        self.writer.ok(inv, {"records": records})

    def pipeline(self, inputs: list[int], outputs: list[int]) -> None:
        inv = self.writer.invoke("pipeline-reader", "pipeline_read", {})
        self.writer.ok(
            inv,
            {
                "input": [rec(0, i, v, "in") for i, v in enumerate(inputs)],
                "output": [rec(0, i, v, "out") for i, v in enumerate(outputs)],
            },
        )

    def history(self) -> History:
        return parse_lines(self.buffer.getvalue().splitlines(keepends=True))


OUTCOMES = ("commit", "abort", "unknown-commit", "unknown-abort")


@st.composite
def sims(draw: st.DrawFn) -> Sim:
    sim = Sim(random.Random(draw(st.integers(0, 2**32))))
    steps = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("txn"), st.integers(1, 5), st.sampled_from(OUTCOMES)),
                st.tuples(st.just("poll"), st.integers(0, PARTITIONS - 1), st.integers(1, 6)),
            ),
            max_size=30,
        )
    )
    for kind, a, b in steps:
        if kind == "txn":
            assert isinstance(b, str)
            sim.txn(a, b)
        else:
            assert isinstance(b, int)
            sim.poll("c0", a, b)
    return sim


def clean_sim() -> Sim:
    sim = Sim(random.Random(0))
    sim.txn(3, "commit")
    sim.txn(2, "abort")
    sim.txn(4, "unknown-commit")
    sim.txn(1, "unknown-abort")
    for p in range(PARTITIONS):
        sim.poll("c0", p, 10)
    return sim


@settings(max_examples=60, deadline=None)
@given(sims())
def test_simulated_histories_are_valid(sim: Sim) -> None:
    sim.final()
    sim.pipeline([1, 2, 3], [3, 1, 2])
    result = check_txn(sim.history())
    assert result.valid, result.summary()
    assert result.found() == []


def test_clean_history_counts_outcomes() -> None:
    sim = clean_sim()
    sim.final()
    sim.pipeline([10, 11], [10, 11])
    result = check_txn(sim.history())
    assert result.valid, result.summary()
    s = result.stats
    assert (s.committed, s.aborted, s.unknown) == (1, 1, 2)
    assert (s.unknown_committed, s.unknown_aborted) == (1, 1)
    assert (s.pipeline_inputs, s.pipeline_outputs) == (2, 2)
    assert set(result.to_json()["anomalies"]) == set(TXN_ANOMALY_KINDS)  # type: ignore[arg-type]


def test_failed_init_transactions_are_counted_and_decide_nothing() -> None:
    """The workload records each init_transactions attempt: the failed ones are
    counted with the last error (why a run that committed nothing did nothing), and
    they are no anomaly."""
    sim = Sim(random.Random(1))
    for error in ("COORDINATOR_NOT_AVAILABLE: no leader", "TimeoutError"):
        sim.writer.info(sim.writer.invoke("p0", "init", None), error)
    sim.writer.ok(sim.writer.invoke("p0", "init", None))
    sim.txn(2, "commit")
    sim.final()
    sim.pipeline([], [])
    result = check_txn(sim.history())
    assert result.valid, result.summary()
    assert (result.stats.init_failures, result.stats.last_init_error) == (2, "TimeoutError")
    assert result.to_json()["init_failures"] == 2


def test_no_final_read_is_incomplete_not_valid() -> None:
    sim = clean_sim()
    sim.pipeline([], [])
    result = check_txn(sim.history())
    assert not result.complete and not result.valid


def flagged(sim: Sim) -> list[str]:
    return check_txn(sim.history()).found()


def test_aborted_read_in_a_poll() -> None:
    sim = Sim(random.Random(0))
    aborted = sim.txn(2, "abort")
    # a reader that wrongly returns the aborted transaction's first value
    inv = sim.writer.invoke("c0", "poll", {"consumer": "c0"})
    sim.writer.ok(inv, {"consumer": "c0", "records": [rec(aborted[0] % 3, 0, aborted[0])]})
    sim.final()
    sim.pipeline([], [])
    assert flagged(sim) == ["aborted_read"]


def test_aborted_read_of_an_unknown_outcome_with_abort_intent() -> None:
    # the intent was abort: whatever the client heard, it must never commit
    sim = Sim(random.Random(0))
    inv = sim.writer.invoke("p0", "txn", {"intent": "abort", "values": [{"value": 7}]})
    sim.writer.info(inv, "timeout")
    sim.final(extra=[rec(1, 0, 7)])
    sim.pipeline([], [])
    assert flagged(sim) == ["aborted_read"]


def test_torn_transaction() -> None:
    sim = Sim(random.Random(0))
    values = sim.txn(3, "unknown-commit")
    sim.final(drop=values[1])
    sim.pipeline([], [])
    assert flagged(sim) == ["torn"]


def test_lost_committed_write_is_also_torn() -> None:
    sim = Sim(random.Random(0))
    values = sim.txn(3, "commit")
    sim.final(drop=values[2])
    sim.pipeline([], [])
    result = check_txn(sim.history())
    assert result.counts["lost"] == 1 and result.counts["torn"] == 1
    assert result.examples["lost"][0]["value"] == values[2]


def test_whole_committed_transaction_lost_is_lost_not_torn() -> None:
    sim = Sim(random.Random(0))
    values = sim.txn(1, "commit")
    sim.final(drop=values[0])
    sim.pipeline([], [])
    assert flagged(sim) == ["lost"]


def test_duplicate_value_at_two_offsets() -> None:
    sim = Sim(random.Random(0))
    values = sim.txn(1, "commit")
    sim.final(extra=[rec(values[0] % 3, 5, values[0])])
    sim.pipeline([], [])
    assert flagged(sim) == ["duplicate"]


def test_out_of_order_read() -> None:
    sim = Sim(random.Random(0))
    a = sim.txn(1, "commit")[0]
    b = sim.next_value
    sim.next_value += 1
    inv = sim.writer.invoke("p0", "txn", {"intent": "commit", "values": [{"value": b}]})
    sim.writer.ok(inv, {"outcome": "commit"})
    inv = sim.writer.invoke("c0", "poll", {"consumer": "c0"})
    sim.writer.ok(inv, {"consumer": "c0", "records": [rec(0, 5, a), rec(0, 3, b)]})
    sim.pipeline([], [])
    # the final read is what the log holds; the poll's offsets went back
    inv = sim.writer.invoke("final-reader", "final_read", {})
    sim.writer.ok(inv, {"records": [rec(0, 3, b), rec(0, 5, a)]})
    assert flagged(sim) == ["out_of_order"]


def test_out_of_order_forgotten_after_unknown_poll() -> None:
    sim = Sim(random.Random(0))
    a = sim.txn(1, "commit")[0]
    inv = sim.writer.invoke("c0", "poll", {"consumer": "c0"})
    sim.writer.ok(inv, {"consumer": "c0", "records": [rec(0, 0, a)]})
    sim.writer.info(sim.writer.invoke("c0", "poll", {"consumer": "c0"}), "timeout")
    inv = sim.writer.invoke("c0", "seek", {"consumer": "c0", "partition": 0})
    sim.writer.ok(inv, {"consumer": "c0", "topic": "txn", "partition": 0, "offset": 0})
    inv = sim.writer.invoke("c0", "poll", {"consumer": "c0"})
    sim.writer.ok(inv, {"consumer": "c0", "records": [rec(0, 0, a)]})
    sim.writer.ok(sim.writer.invoke("f", "final_read", {}), {"records": [rec(0, 0, a)]})
    sim.pipeline([], [])
    assert flagged(sim) == []


def test_phantom() -> None:
    sim = Sim(random.Random(0))
    sim.txn(1, "commit")
    sim.final(extra=[rec(2, 9, 999)])
    sim.pipeline([], [])
    assert flagged(sim) == ["phantom"]


@pytest.mark.parametrize(
    ("inputs", "outputs", "kind"),
    [
        ([1, 2, 3], [1, 3], "pipeline_lost"),
        ([1, 2, 3], [1, 2, 2, 3], "pipeline_duplicate"),
        ([1, 2], [1, 2, 4], "pipeline_phantom"),
    ],
)
def test_pipeline_exactly_once(inputs: list[int], outputs: list[int], kind: str) -> None:
    sim = Sim(random.Random(0))
    sim.final()
    sim.pipeline(inputs, outputs)
    assert flagged(sim) == [kind]


@settings(max_examples=40, deadline=None)
@given(sims(), st.sampled_from(["torn", "aborted_read", "duplicate", "pipeline_duplicate"]))
def test_injected_anomaly_is_found(sim: Sim, kind: str) -> None:
    if kind == "torn":
        values = sim.txn(2, "commit")
        sim.final(drop=values[0])
    elif kind == "aborted_read":
        values = sim.txn(1, "abort")
        sim.final(extra=[rec(values[0] % 3, 10_000, values[0])])
    elif kind == "duplicate":
        values = sim.txn(1, "commit")
        sim.final(extra=[rec(values[0] % 3, 10_000, values[0])])
    else:
        sim.final()
    sim.pipeline([1, 2], [1, 2, 2] if kind == "pipeline_duplicate" else [1, 2])
    result = check_txn(sim.history())
    assert not result.valid
    assert kind in result.found(), result.summary()


def test_value_in_two_transactions_is_a_bad_history() -> None:
    sim = Sim(random.Random(0))
    for _ in range(2):
        inv = sim.writer.invoke("p0", "txn", {"intent": "commit", "values": [{"value": 1}]})
        sim.writer.ok(inv, {"outcome": "commit"})
    with pytest.raises(HistoryError, match="two transactions"):
        check_txn(sim.history())
