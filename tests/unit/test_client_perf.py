"""The pure statistics of ``raftka perf produce`` / ``consume`` (client/cli/perf.py).

Fed fixed clocks and latencies, they must give Kafka's figures: nearest-rank
percentiles, the 5 s window line (and a fresh window after it), the summary line's
rates and percentiles, latency sampling past LATENCY_SAMPLES_MAX, the throttle's wait,
the consumer row's MB, records and rates, and where the default bootstrap comes from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftka.client.cli.perf import (
    DEFAULT_BOOTSTRAP_SERVERS,
    LATENCY_SAMPLES_MAX,
    MB,
    REPORT_INTERVAL_MS,
    ConsumeStats,
    ProduceStats,
    default_bootstrap_servers,
    percentile,
    throttle_delay_s,
)


def test_percentile_is_nearest_rank() -> None:
    """1..100: p50 is 50, p99 is 99, p99.9 is 100; p0 is the minimum; empty is 0."""
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 0.999) == 100
    assert percentile(values, 0.0) == 1
    assert percentile([], 0.5) == 0


def test_window_line_after_the_interval_then_a_fresh_window() -> None:
    """No line before 5 s; at 5 s one line with the window's rate and latencies; the
    next window starts empty."""
    stats = ProduceStats(num_records=10, start_ms=0.0)
    for latency_us in (1_000, 3_000):
        stats.record(latency_us=latency_us, size_bytes=MB // 2)
    assert stats.window_line(REPORT_INTERVAL_MS - 1) is None
    line = stats.window_line(REPORT_INTERVAL_MS)
    assert line == (
        "2 records sent, 0.4 records/sec (0.20 MB/sec), 2.0 ms avg latency, 3.0 ms max latency."
    )
    assert stats.window_line(2 * REPORT_INTERVAL_MS) == (
        "0 records sent, 0.0 records/sec (0.00 MB/sec), 0.0 ms avg latency, 0.0 ms max latency."
    )


def test_summary_rates_and_percentiles() -> None:
    """1000 records of 1 KB acknowledged over 2 s with latencies 1..1000 ms."""
    stats = ProduceStats(num_records=1000, start_ms=100.0)
    for i in range(1, 1001):
        stats.record(latency_us=i * 1000, size_bytes=1024)
    stats.record_error()
    s = stats.summary(2100.0)
    assert s.records == 1000 and s.errors == 1
    assert s.records_per_s == pytest.approx(500.0)
    assert s.mb_per_s == pytest.approx(1000 * 1024 / MB / 2)
    assert s.latency_avg_ms == pytest.approx(500.5)
    assert s.latency_max_ms == 1000.0
    assert s.percentiles_ms == (500.0, 950.0, 990.0, 999.0)
    assert s.line().startswith("1000 records sent, 500.0 records/sec (0.49 MB/sec), 500.50 ms")
    assert s.line().endswith("500.00 ms 50th, 950.00 ms 95th, 990.00 ms 99th, 999.00 ms 99.9th.")


def test_latencies_are_sampled_past_the_bound() -> None:
    """Three times the bound: every third latency is kept, the count is exact."""
    n = 3 * LATENCY_SAMPLES_MAX
    stats = ProduceStats(num_records=n, start_ms=0.0)
    assert stats.stride == 3
    for i in range(n):
        stats.record(latency_us=i, size_bytes=1)
    assert len(stats.samples) == LATENCY_SAMPLES_MAX
    assert stats.samples[1] == 3
    assert stats.summary(1000.0).records == n


def test_throttle_waits_only_when_ahead() -> None:
    """100 records at 1000/s are due at 100 ms: at 40 ms wait 60 ms; at 150 ms none;
    no cap with a throughput of -1."""
    assert throttle_delay_s(sent=100, elapsed_ms=40, throughput=1000) == pytest.approx(0.06)
    assert throttle_delay_s(sent=100, elapsed_ms=150, throughput=1000) == 0.0
    assert throttle_delay_s(sent=100, elapsed_ms=0, throughput=-1) == 0.0


def test_consume_row() -> None:
    """2 MB in 4000 records, 1 s assigning then 2 s fetching: Kafka's ten columns."""
    stats = ConsumeStats(start_ms=0.0, first_poll_ms=1000.0)
    stats.add(records=4000, size_bytes=2 * MB)
    cells = [
        c.strip() for c in stats.line(end_ms=3000.0, start_wall_ms=0, end_wall_ms=0).split(",")
    ]
    assert cells[2:] == [
        "2.0000",
        "0.6667",
        "4000",
        "1333.3333",
        "1000",
        "2000",
        "1.0000",
        "2000.0000",
    ]


def test_default_bootstrap_order(tmp_path: Path) -> None:
    """The environment wins; else ./raftka-data/cluster.json's bootstrap_servers; else
    127.0.0.1:9092 (also for an unreadable or malformed cluster file)."""
    assert default_bootstrap_servers(env={}, cwd=tmp_path) == DEFAULT_BOOTSTRAP_SERVERS
    cluster = tmp_path / "raftka-data" / "cluster.json"
    cluster.parent.mkdir()
    cluster.write_text("{not json")
    assert default_bootstrap_servers(env={}, cwd=tmp_path) == DEFAULT_BOOTSTRAP_SERVERS
    cluster.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:19092,127.0.0.1:19093"}))
    assert default_bootstrap_servers(env={}, cwd=tmp_path) == "127.0.0.1:19092,127.0.0.1:19093"
    env = {"RAFTKA_BOOTSTRAP_SERVERS": "h:1"}
    assert default_bootstrap_servers(env=env, cwd=tmp_path) == "h:1"
