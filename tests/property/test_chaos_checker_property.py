"""The queue checker against a simulated log: valid histories pass, one injected anomaly
is flagged as its kind."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.chaos.checker import check
from raftka.chaos.history import History, HistoryWriter, parse_lines

TOPIC = "t"

# (kind, partition, outcome or consumer, count) drawn by hypothesis
send_action = st.tuples(
    st.just("send"),
    st.integers(0, 2),
    st.sampled_from(["ok", "ok", "ok", "fail", "info-applied", "info-lost"]),
    st.just(0),
)
poll_action = st.tuples(st.just("poll"), st.integers(0, 2), st.integers(0, 1), st.integers(1, 4))
# two acked sends to partition 0, then consumer c2 polls both (see Sim.run)
PREFIX: list[tuple[str, int, Any, int]] = [
    ("send", 0, "ok", 0),
    ("send", 0, "ok", 0),
    ("poll", 0, 2, 2),
]
actions = st.lists(st.one_of(send_action, poll_action), min_size=1, max_size=40)


@dataclass
class Sim:
    """A simulated, correct log: what each operation returned, ready to record (and to
    corrupt before recording)."""

    specs: list[tuple[Any, str, Any, str, Any]] = field(default_factory=list)
    logs: dict[int, list[str]] = field(default_factory=lambda: {0: [], 1: [], 2: []})
    acked: list[str] = field(default_factory=list)

    @classmethod
    def run(cls, drawn: list[tuple[str, int, Any, int]]) -> Sim:
        sim = cls()
        positions: dict[tuple[int, int], int] = {}
        for i, (kind, partition, how, count) in enumerate(drawn):
            if kind == "send":
                value = f"v{i}"
                asked = {"topic": TOPIC, "partition": partition, "value": value}
                log = sim.logs[partition]
                if how in ("ok", "info-applied"):
                    log.append(value)
                if how == "ok":
                    sim.acked.append(value)
                    told = {"partition": partition, "offset": len(log) - 1}
                    sim.specs.append(("producer", "send", asked, "ok", told))
                else:
                    outcome = "fail" if how == "fail" else "info"
                    sim.specs.append(("producer", "send", asked, outcome, None))
            else:
                consumer = f"c{how}"
                start = positions.get((how, partition), 0)
                values = sim.logs[partition][start : start + count]
                positions[(how, partition)] = start + len(values)
                records = [_record(partition, start + k, v) for k, v in enumerate(values)]
                told = {"consumer": consumer, "records": records}
                sim.specs.append((consumer, "poll", {"consumer": consumer}, "ok", told))
        everything = [
            _record(p, offset, v) for p, log in sim.logs.items() for offset, v in enumerate(log)
        ]
        sim.specs.append(("reader", "final_read", {}, "ok", {"records": everything}))
        return sim

    def final_records(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self.specs[-1][4]["records"]
        return records

    def polls(self) -> list[list[dict[str, Any]]]:
        return [told["records"] for _, f, _, _, told in self.specs if f == "poll"]

    def history(self) -> History:
        buffer = io.BytesIO()
        writer = HistoryWriter(buffer)
        for process, f, asked, outcome, told in self.specs:
            invocation = writer.invoke(process, f, asked)
            if outcome == "ok":
                writer.ok(invocation, told)
            elif outcome == "fail":
                writer.fail(invocation, "NOT_LEADER_OR_FOLLOWER")
            else:
                writer.info(invocation, "timeout")
        return parse_lines(buffer.getvalue().splitlines(keepends=True))


def _record(partition: int, offset: int, value: str) -> dict[str, Any]:
    return {"topic": TOPIC, "partition": partition, "offset": offset, "value": value}


@settings(max_examples=150, deadline=None)
@given(actions)
def test_simulated_log_history_is_valid(drawn: list[tuple[str, int, Any, int]]) -> None:
    """Sends acked at the offsets a correct log gives them, unknown sends applied or not,
    failed sends never applied, consumers reading consecutive ranges and a full final
    read: the checker finds nothing that invalidates the history."""
    sim = Sim.run(drawn)
    result = check(sim.history())
    assert result.valid, result.summary()
    assert result.sends.acked == len(sim.acked)


@pytest.mark.parametrize("injection", ["lost", "duplicate", "changed", "reordered"])
@settings(max_examples=100, deadline=None)
@given(drawn=actions, rnd=st.randoms(use_true_random=False))
def test_injected_anomaly_is_flagged(
    injection: str, drawn: list[tuple[str, int, Any, int]], rnd: Any
) -> None:
    """Into a valid simulated history inject one anomaly: drop an acked value from the
    final read (lost), copy a record to a fresh offset (duplicate), change a value a poll
    returned (inconsistent_offset), or reverse a poll of two or more records
    (poll_backwards). The checker reports that kind and judges the history invalid.
    Every draw starts with two acked sends that consumer c2 polls together, so each
    injection has something to act on without filtering draws."""
    sim = Sim.run(PREFIX + drawn)
    final = sim.final_records()
    polled = [r for records in sim.polls() for r in records]
    long_polls = [records for records in sim.polls() if len(records) >= 2]
    if injection == "lost":
        victim = rnd.choice(sim.acked)
        final[:] = [r for r in final if r["value"] != victim]
        expected = "lost"
    elif injection == "duplicate":
        copy = dict(rnd.choice(final))
        copy["offset"] = len(sim.logs[copy["partition"]])  # past the log's end
        final.append(copy)
        expected = "duplicate"
    elif injection == "changed":
        rnd.choice(polled)["value"] = "bogus"
        expected = "inconsistent_offset"
    else:
        rnd.choice(long_polls).reverse()
        expected = "poll_backwards"
    result = check(sim.history())
    assert expected in result.found(), (expected, result.summary())
    assert not result.valid
