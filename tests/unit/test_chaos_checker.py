"""The history format and the queue checker on hand-made histories, one anomaly each."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from raftka.chaos.checker import ANOMALY_KINDS, CheckResult, check
from raftka.chaos.history import (
    History,
    HistoryError,
    HistoryWriter,
    parse_lines,
    read_history,
)

TP0 = {"topic": "t", "partition": 0}
TP1 = {"topic": "t", "partition": 1}


def rec(partition: int, offset: int, value: str) -> dict[str, Any]:
    return {"topic": "t", "partition": partition, "offset": offset, "value": value}


@dataclass(frozen=True)
class Spec:
    """One operation to record: invoked and completed at once."""

    process: int | str
    f: str
    value: Any
    outcome: str = "ok"
    result: Any = None
    error: str | None = None


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        self.now_ns += 1_000_000  # each event 1 ms after the previous one
        return self.now_ns


def recorder() -> tuple[HistoryWriter, io.BytesIO]:
    buffer = io.BytesIO()
    return HistoryWriter(buffer, monotonic_ns=FakeClock(), wall_time=lambda: 1.7e9), buffer


def history_of(buffer: io.BytesIO) -> History:
    return parse_lines(buffer.getvalue().splitlines(keepends=True))


def record(specs: dict[str, Spec] | list[Spec]) -> History:
    writer, buffer = recorder()
    for spec in specs.values() if isinstance(specs, dict) else specs:
        invocation = writer.invoke(spec.process, spec.f, spec.value)
        if spec.outcome == "ok":
            writer.ok(invocation, spec.result if spec.result is not None else spec.value)
        elif spec.outcome == "fail":
            writer.fail(invocation, spec.error or "error")
        elif spec.outcome == "info":
            writer.info(invocation, spec.error or "timeout")
        else:
            assert spec.outcome == "open", spec.outcome
    return history_of(buffer)


def assign(member: str, consumer: str, generation: int, *tps: dict[str, Any]) -> Spec:
    result = {
        "group": "g",
        "member": member,
        "consumer": consumer,
        "generation": generation,
        "partitions": list(tps),
    }
    return Spec(consumer, "assign", {"consumer": consumer, "group": "g"}, "ok", result)


def commit(member: str, consumer: str, generation: int, offset: int) -> Spec:
    value = {
        "group": "g",
        "member": member,
        "generation": generation,
        "offsets": [{**TP0, "offset": offset}],
    }
    return Spec(consumer, "commit", value)


def poll(*records: dict[str, Any], consumer: str = "c1") -> Spec:
    return Spec(
        consumer,
        "poll",
        {"consumer": consumer},
        "ok",
        {"consumer": consumer, "records": list(records)},
    )


def final(*records: dict[str, Any]) -> Spec:
    return Spec("reader", "final_read", {}, "ok", {"records": list(records)})


def clean() -> dict[str, Spec]:
    """Acked a, b (partition 0) and c (partition 1); d unknown but present, e unknown and
    absent, f failed and absent; one consumer reads everything in order; a group moves
    from generation 1 to 2 with commits from the current generation only."""
    return {
        "send_a": Spec(
            0, "send", {"topic": "t", "value": "a"}, "ok", {"partition": 0, "offset": 0}
        ),
        "send_b": Spec(
            0, "send", {"topic": "t", "value": "b"}, "ok", {"partition": 0, "offset": 1}
        ),
        "send_c": Spec(
            1, "send", {"topic": "t", "partition": 1, "value": "c"}, "ok", {"offset": 0}
        ),
        "send_d": Spec(1, "send", {"topic": "t", "partition": 1, "value": "d"}, "info"),
        "send_e": Spec(2, "send", {"topic": "t", "value": "e"}, "info"),
        "send_f": Spec(
            2, "send", {"topic": "t", "value": "f"}, "fail", error="NOT_ENOUGH_REPLICAS"
        ),
        "assign1": assign("m1", "c1", 1, TP0, TP1),
        "poll1": poll(rec(0, 0, "a"), rec(0, 1, "b")),
        "commit1": commit("m1", "c1", 1, 2),
        "poll2": poll(rec(1, 0, "c")),
        "poll3": poll(rec(1, 1, "d")),
        "assign2_m2": assign("m2", "c2", 2, TP1),
        "assign2_m1": assign("m1", "c1", 2, TP0),
        "commit2": commit("m1", "c1", 2, 2),
        "final": final(rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c"), rec(1, 1, "d")),
    }


def invalid(result: CheckResult) -> list[str]:
    return [k for k in result.found() if not result.anomalies[k].informational]


def only(result: CheckResult, kind: str) -> dict[str, Any]:
    """Asserts ``kind`` is the one invalidating anomaly, found once; returns its example."""
    assert not result.valid
    assert invalid(result) == [kind], result.summary()
    anomaly = result.anomalies[kind]
    assert anomaly.count == 1
    assert len(anomaly.examples) == 1
    return anomaly.examples[0]


# --- the clean history --------------------------------------------------------------


def test_clean_history_is_valid() -> None:
    """A history where acked values sit once at their acked offsets, one unknown send
    appears and one does not, a failed send is absent, polls are monotonic and the group
    commits only in its current generation: valid, every count zero."""
    result = check(record(clean()))
    assert result.valid, result.summary()
    assert result.complete
    assert set(result.counts) == set(ANOMALY_KINDS)
    assert all(count == 0 for count in result.counts.values())
    assert (result.sends.acked, result.sends.failed, result.sends.unknown) == (3, 1, 2)
    assert result.sends.unknown_present == 1
    assert result.ops["send"] == {"ok": 3, "info": 2, "fail": 1}
    assert result.summary().startswith("VALID")


def test_verdict_json_round_trips() -> None:
    """The JSON form serialises with orjson and carries the verdict, every count and the
    send statistics."""
    specs = clean()
    specs["final"] = final(rec(0, 0, "a"), rec(1, 0, "c"), rec(1, 1, "d"))
    result = check(record(specs))
    data = orjson.loads(result.to_json_bytes())
    assert data["valid"] is False
    assert data["counts"]["lost"] == 1
    assert data["anomalies"]["lost"]["examples"][0]["value"] == "b"
    assert data["sends"] == {"acked": 3, "failed": 1, "unknown": 2, "unknown_present": 1}


def test_unknown_send_absent_or_present_is_never_lost() -> None:
    """Every send of unknown outcome (info, or invoked and never completed) may be missing
    from the final read: not lost; the ones that appear are counted."""
    specs = clean()
    specs["send_g"] = Spec(7, "send", {"topic": "t", "value": "g"}, "open")
    result = check(record(specs))
    assert result.valid, result.summary()
    assert result.sends.unknown == 3
    assert result.sends.unknown_present == 1


def test_no_final_read_is_not_valid() -> None:
    """Without an ok final read lost and vanished values cannot be judged: the result is
    incomplete and not valid, and the summary says why rather than naming an anomaly."""
    specs = clean()
    specs["final"] = replace(specs["final"], outcome="info")
    result = check(record(specs))
    assert not result.complete
    assert not result.valid
    assert invalid(result) == []
    assert result.summary().startswith("UNKNOWN")


# --- one anomaly each --------------------------------------------------------------


def test_lost() -> None:
    """An acked value (b, never polled) missing from the final read is lost, reported with
    its acked position and the send's history line."""
    specs = clean()
    specs["poll1"] = poll(rec(0, 0, "a"))
    specs["final"] = final(rec(0, 0, "a"), rec(1, 0, "c"), rec(1, 1, "d"))
    result = check(record(specs))
    example = only(result, "lost")
    assert example["value"] == "b"
    assert (example["partition"], example["offset"]) == (0, 1)
    assert example["send"].startswith("send@")
    assert result.anomalies["unseen"].count == 1  # informational: b was never polled


def test_unseen_is_informational() -> None:
    """An acked value in the final read that no poll returned is unseen: reported, yet
    the history stays valid."""
    specs = clean()
    specs["poll2"] = poll()  # c is never polled; the consumer then reads d at offset 1
    result = check(record(specs))
    assert result.valid, result.summary()
    assert result.anomalies["unseen"].count == 1
    assert result.anomalies["unseen"].examples[0]["value"] == "c"
    assert "unseen: 1 (does not invalidate)" in result.summary()


def test_duplicate() -> None:
    """A value at two offsets of its partition is a duplicate, reported with both
    positions; with duplicates_allowed it is counted but the history stays valid."""
    specs = clean()
    specs["final"] = final(
        rec(0, 0, "a"), rec(0, 1, "b"), rec(0, 2, "a"), rec(1, 0, "c"), rec(1, 1, "d")
    )
    history = record(specs)
    example = only(check(history), "duplicate")
    assert example["value"] == "a"
    assert [(p["partition"], p["offset"]) for p in example["positions"]] == [(0, 0), (0, 2)]
    allowed = check(history, duplicates_allowed=True)
    assert allowed.valid
    assert allowed.anomalies["duplicate"].count == 1


def test_inconsistent_offset() -> None:
    """Two final reads that disagree on what offset 1 of partition 1 holds (d or e, both
    unknown sends) are an inconsistent offset, reported with both values."""
    specs = clean()
    specs["final_2"] = Spec("reader2", "final_read", {}, "ok", {"records": [rec(1, 1, "e")]})
    example = only(check(record(specs)), "inconsistent_offset")
    assert (example["partition"], example["offset"]) == (1, 1)
    assert {v["value"] for v in example["values"]} == {"d", "e"}


def test_vanished() -> None:
    """A value a poll returned (d, an unknown send, so not lost) that the final read
    lacks has vanished: the poll saw data that later disappeared."""
    specs = clean()
    specs["final"] = final(rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c"))
    example = only(check(record(specs)), "vanished")
    assert example["value"] == "d"
    assert (example["partition"], example["offset"]) == (1, 1)
    assert example["poll"].startswith("poll@")


def test_poll_backwards() -> None:
    """A consumer returning offset 1 of partition 0 again after having returned it, with
    no seek or rebalance between, went backwards."""
    specs = clean()
    specs["poll2"] = poll(rec(0, 1, "b"), rec(1, 0, "c"))
    example = only(check(record(specs)), "poll_backwards")
    assert (example["consumer"], example["partition"], example["offset"]) == ("c1", 0, 1)
    assert example["expected"] == 2


def test_seek_or_rebalance_allows_going_back() -> None:
    """The same re-read is fine after an ok seek to that offset, and after a rebalance
    (an assign naming the consumer), which restarts from the committed offset."""
    for between in (
        Spec("c1", "seek", {"consumer": "c1", "topic": "t", "partition": 0, "offset": 1}),
        assign("m1", "c1", 1, TP0, TP1),
    ):
        specs = clean()
        specs = {
            **dict(list(specs.items())[:8]),
            "between": between,
            **dict(list(specs.items())[8:]),
        }
        specs["poll2"] = poll(rec(0, 1, "b"), rec(1, 0, "c"))
        result = check(record(specs))
        assert result.valid, (between.f, result.summary())


def test_poll_skip() -> None:
    """A consumer going from offset 0 to offset 2 of partition 0 when offset 1 holds b
    skipped it: reported apart from backwards, with what was missed."""
    specs = clean()
    specs["send_g"] = Spec(
        0, "send", {"topic": "t", "value": "g"}, "ok", {"partition": 0, "offset": 2}
    )
    specs["poll1"] = poll(rec(0, 0, "a"), rec(0, 2, "g"))
    specs["final"] = final(
        rec(0, 0, "a"), rec(0, 1, "b"), rec(0, 2, "g"), rec(1, 0, "c"), rec(1, 1, "d")
    )
    example = only(check(record(specs)), "poll_skip")
    assert (example["offset"], example["expected"]) == (2, 1)
    assert (example["missed"], example["first_missed"]) == (1, 1)


def test_gap_nobody_saw_a_record_in_is_not_a_skip() -> None:
    """Offsets no observation ever filled (a transaction marker, a compacted record) may
    be jumped over: 1 -> 3 with offset 2 unknown everywhere is not a skip."""
    specs = clean()
    specs["send_g"] = Spec(
        0, "send", {"topic": "t", "value": "g"}, "ok", {"partition": 0, "offset": 3}
    )
    specs["poll1"] = poll(rec(0, 0, "a"), rec(0, 1, "b"), rec(0, 3, "g"))
    specs["final"] = final(
        rec(0, 0, "a"), rec(0, 1, "b"), rec(0, 3, "g"), rec(1, 0, "c"), rec(1, 1, "d")
    )
    result = check(record(specs))
    assert result.valid, result.summary()


def test_ack_offset_mismatch() -> None:
    """A send acked at offset 5 of partition 1 whose value the final read holds only at
    offset 0 is an ack offset mismatch, reported with both positions."""
    specs = clean()
    specs["send_c"] = replace(specs["send_c"], result={"partition": 1, "offset": 5})
    example = only(check(record(specs)), "ack_offset_mismatch")
    assert example["value"] == "c"
    assert (example["partition"], example["offset"]) == (1, 5)
    assert example["final"] == [{"partition": 1, "offset": 0}]


def test_phantom() -> None:
    """A value read that no send carried is a phantom (corruption or an unrecorded
    writer)."""
    specs = clean()
    specs["poll3"] = poll(rec(1, 1, "d"), rec(1, 2, "zz"))
    specs["final"] = final(
        rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c"), rec(1, 1, "d"), rec(1, 2, "zz")
    )
    example = only(check(record(specs)), "phantom")
    assert (example["value"], example["offset"]) == ("zz", 2)


def test_failed_send_present() -> None:
    """A send recorded as failed whose value the log holds contradicts "fail means it did
    not happen"."""
    specs = clean()
    specs["final"] = final(
        rec(0, 0, "a"), rec(0, 1, "b"), rec(1, 0, "c"), rec(1, 1, "d"), rec(1, 2, "f")
    )
    example = only(check(record(specs)), "failed_send_present")
    assert example["value"] == "f"
    assert example["send"].startswith("send@")


def test_split_ownership() -> None:
    """Partition 0 assigned to m1 and m2 in generation 2 has two owners in one
    generation; reported with both members."""
    specs = clean()
    specs["assign2_m2"] = assign("m2", "c2", 2, TP0, TP1)
    example = only(check(record(specs)), "split_ownership")
    assert (example["generation"], example["partition"]) == (2, 0)
    assert [m["member"] for m in example["members"]] == ["m1", "m2"]


def test_stale_commit() -> None:
    """An ok commit of generation 1 invoked after an assign of generation 2 completed was
    accepted from a stale generation."""
    specs = clean()
    specs["commit2"] = commit("m1", "c1", 1, 2)
    example = only(check(record(specs)), "stale_commit")
    assert (example["generation"], example["newer_generation"]) == (1, 2)
    assert example["assign"].startswith("assign@")


def test_commit_concurrent_with_rebalance_is_not_stale() -> None:
    """A generation-1 commit invoked before the generation-2 assign completed may be
    accepted (it may have reached the coordinator first): not stale."""
    writer, buffer = recorder()
    first = writer.invoke("c1", "assign", {})
    writer.ok(first, {"group": "g", "member": "m1", "generation": 1, "partitions": [TP0]})
    value = {"group": "g", "member": "m1", "generation": 1, "offsets": []}
    committing = writer.invoke("c1", "commit", value)
    rebalance = writer.invoke("c2", "assign", {})
    writer.ok(rebalance, {"group": "g", "member": "m2", "generation": 2, "partitions": [TP0]})
    writer.ok(committing, value)
    reading = writer.invoke("r", "final_read", {})
    writer.ok(reading, {"records": []})
    result = check(history_of(buffer))
    assert result.valid, result.summary()


# --- the history format ------------------------------------------------------------


def test_writer_reader_round_trip(tmp_path: Path) -> None:
    """Events written to a file read back with every field, a unit-suffixed monotonic
    clock from the writer's start, and ops pair invoke with completion."""
    path = tmp_path / "history.jsonl"
    clock = FakeClock()
    with HistoryWriter(open(path, "xb"), monotonic_ns=clock, wall_time=lambda: 5.0) as writer:
        invocation = writer.invoke(0, "send", {"topic": "t", "value": "a"})
        writer.info(invocation, "timeout")
        window = writer.fault_start("partition", ["n1", "n2"])
        writer.fault_end(window, "partition", ["n1", "n2"])
    history = read_history(path)
    assert [e.index for e in history.events] == [0, 1, 2, 3]
    assert [e.time_ns for e in history.events] == [1_000_000, 2_000_000, 3_000_000, 4_000_000]
    first = history.events[0]
    assert (first.process, first.type, first.f, first.wall_time) == (0, "invoke", "send", 5.0)
    (op,) = history.ops()
    assert (op.type, op.error, op.latency_ns(0)) == ("info", "timeout", 1_000_000)
    (fault,) = history.fault_windows()
    assert (fault.kind, fault.targets) == ("partition", ("n1", "n2"))
    assert (fault.start_ns, fault.end_ns) == (3_000_000, 4_000_000)
    raw = orjson.loads(path.read_bytes().splitlines()[1])
    assert set(raw) == {"index", "time_ns", "wall_time", "process", "type", "f", "value", "error"}


def test_writer_refuses_to_overwrite(tmp_path: Path) -> None:
    """HistoryWriter.open never truncates an existing history."""
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"")
    with pytest.raises(FileExistsError):
        HistoryWriter.open(path)


def test_unhealed_window_runs_to_the_end() -> None:
    """A fault started and never ended (the test crashed) is a window without an end."""
    writer, buffer = recorder()
    writer.fault_start("kill", ["n3"])
    (window,) = history_of(buffer).fault_windows()
    assert (window.kind, window.end_ns) == ("kill", None)


def test_crash_mid_line_keeps_every_complete_event() -> None:
    """A last line cut short by a crash is dropped; the events before it stay. A broken
    line anywhere else is an error naming the line."""
    writer, buffer = recorder()
    invocation = writer.invoke(0, "send", {"topic": "t", "value": "a"})
    writer.ok(invocation, {"partition": 0, "offset": 0})
    good = buffer.getvalue()
    history = parse_lines((good + b'{"index": 2, "time').splitlines(keepends=True))
    assert len(history.events) == 2
    with pytest.raises(HistoryError, match="history:1: event lacks field"):
        parse_lines((b"{}\n" + good).splitlines(keepends=True))
    with pytest.raises(HistoryError, match="history:1: line is not valid JSON"):
        parse_lines((b"{oops\n" + good).splitlines(keepends=True))


def test_one_operation_per_process() -> None:
    """A process invoking while its previous operation is open breaks the format: the
    writer refuses it, and so does pairing a file that contains it."""
    writer, _ = recorder()
    writer.invoke(0, "poll", {})
    with pytest.raises(HistoryError, match="already has an open operation"):
        writer.invoke(0, "poll", {})
    lines = [
        orjson.dumps(
            {
                "index": i,
                "time_ns": i,
                "wall_time": 0,
                "process": 0,
                "type": "invoke",
                "f": "poll",
                "value": {},
            }
        )
        + b"\n"
        for i in range(2)
    ]
    with pytest.raises(HistoryError, match="still open"):
        parse_lines(lines).ops()


def test_value_sent_twice_is_a_history_error() -> None:
    """Values name records, so a workload sending one value twice to a topic is a harness
    bug: the checker refuses rather than guess."""
    specs = [
        Spec(0, "send", {"topic": "t", "value": "a"}, "ok", {"partition": 0, "offset": 0}),
        Spec(0, "send", {"topic": "t", "value": "a"}, "info"),
    ]
    with pytest.raises(HistoryError, match="sent twice"):
        check(record(specs))


def test_writer_is_thread_safe() -> None:
    """Eight threads recording 200 operations each produce a file whose indexes are 0..N-1
    in order, whose clock never goes back, and whose every operation pairs up."""
    buffer = io.BytesIO()
    writer = HistoryWriter(buffer)
    threads_n, ops_n = 8, 200

    def client(process: int) -> None:
        for i in range(ops_n):
            invocation = writer.invoke(process, "send", {"topic": "t", "value": f"{process}-{i}"})
            writer.ok(invocation, {"partition": 0, "offset": 0})

    threads = [threading.Thread(target=client, args=(p,)) for p in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a recording thread did not finish within 30 s"
    history = history_of(buffer)
    assert [e.index for e in history.events] == list(range(2 * threads_n * ops_n))
    ops = history.ops()
    assert len(ops) == threads_n * ops_n
    assert all(op.type == "ok" for op in ops)
