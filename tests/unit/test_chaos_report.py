"""The report folder: history copy, verdict.json and a timeline PNG."""

from __future__ import annotations

from pathlib import Path

import orjson

from raftka.chaos.history import HistoryWriter, read_history
from raftka.chaos.report import plot_timeline, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_BYTES_MIN = 5_000


def small_history(path: Path, *, heal: bool = True) -> None:
    """Two seconds of sends and polls from three clients, a partition from 0.5 s to 1.2 s
    during which some sends time out or fail, then a final read."""
    clock = [0]
    with HistoryWriter(open(path, "xb"), monotonic_ns=lambda: clock[0]) as writer:
        offsets = [0, 0]
        window = None
        for i in range(60):
            clock[0] += 30_000_000
            if i == 17:
                window = writer.fault_start("partition", ["n1"])
            if i == 40 and heal:
                assert window is not None
                writer.fault_end(window, "partition", ["n1"])
            faulty = 17 <= i < 40
            process = i % 3
            value = {"topic": "t", "partition": i % 2, "value": f"v{i}"}
            invocation = writer.invoke(process, "send", value)
            clock[0] += (400 if faulty else 2) * 1_000_000
            if faulty and i % 4 == 0:
                writer.info(invocation, "timeout")
            elif faulty and i % 4 == 1:
                writer.fail(invocation, "NOT_LEADER_OR_FOLLOWER")
            else:
                writer.ok(invocation, {"partition": i % 2, "offset": offsets[i % 2]})
                offsets[i % 2] += 1
        clock[0] += 100_000_000
        reading = writer.invoke("reader", "final_read", {})
        clock[0] += 5_000_000
        writer.ok(reading, {"records": []})


def test_report_writes_png_verdict_and_history(tmp_path: Path) -> None:
    """write_report on a small history with a fault window leaves a PNG (magic bytes, more
    than a few KB), a verdict.json equal to the returned result, and a copy of the
    history in the folder; the acked sends missing from the empty final read show as
    lost."""
    source = tmp_path / "run.jsonl"
    small_history(source)
    out = tmp_path / "report"
    result = write_report(source, out, title="unit test")
    png = (out / "timeline.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > PNG_BYTES_MIN
    verdict = orjson.loads((out / "verdict.json").read_bytes())
    assert verdict == orjson.loads(result.to_json_bytes())
    assert verdict["valid"] is False
    assert verdict["counts"]["lost"] == result.sends.acked > 0
    assert (out / "history.jsonl").read_bytes() == source.read_bytes()
    assert read_history(out / "history.jsonl").fault_windows()[0].kind == "partition"


def test_report_in_place_and_unhealed_fault(tmp_path: Path) -> None:
    """A history already at <folder>/history.jsonl is reported in place (not copied onto
    itself), and a fault never healed is shaded to the end of the history."""
    out = tmp_path / "report"
    out.mkdir()
    small_history(out / "history.jsonl", heal=False)
    write_report(out / "history.jsonl", out)
    assert (out / "timeline.png").read_bytes().startswith(PNG_MAGIC)
    assert (out / "verdict.json").stat().st_size > 0


def test_plot_of_an_empty_history(tmp_path: Path) -> None:
    """An empty history (a test that crashed before its first operation) still plots."""
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"")
    plot_timeline(read_history(path), tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").read_bytes().startswith(PNG_MAGIC)
