"""``raftka dump-log`` reads segment files from any Kafka-compatible writer and shows damage."""

from __future__ import annotations

import struct
import subprocess
import sys
from functools import partial
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatchBuilder

from raftka.common.record.batch import Record, build_batch
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
)
from raftka.storage.dump import dump_log_command
from raftka.storage.transaction_index import AbortedTxn

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT

# kafka-python's compression type ids are Kafka's: none, gzip, snappy, lz4, zstd.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _kafka_python_batch(base_offset: int, compression_id: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression_id,
        is_transactional=0,
        producer_id=1234,
        producer_epoch=3,
        base_sequence=base_offset,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i,
            timestamp=1_700_000_000_000 + i,
            key=f"key-{i}".encode(),
            # Long, repetitive values: kafka-python leaves a batch uncompressed when
            # compression would not make it smaller, and this test needs it compressed.
            value=f"value-{base_offset + i}-{'x' * 200}".encode(),
            headers=[("trace", b"t%d" % i)],
        )
    raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big")  # a broker stamps the base offset
    return bytes(raw)


def _run(*args: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(dump_log_command, list(args))
    assert result.exit_code == 0, result.output
    return [orjson.loads(line) for line in result.output.splitlines()]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_reads_segment_written_by_kafka_python(tmp_path: Path, codec: str) -> None:
    """A segment made of batches that kafka-python (an independent Kafka client) encoded,
    one file per compression codec: every batch's header fields and every record's key,
    value and headers come out as written."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(
        _kafka_python_batch(0, CODECS[codec], 5) + _kafka_python_batch(5, CODECS[codec], 3)
    )
    rows = _run("--json", "--print-data", str(segment))
    assert [(r["base_offset"], r["last_offset"], r["count"]) for r in rows] == [
        (0, 4, 5),
        (5, 7, 3),
    ]
    assert all(r["crc_valid"] and r["compression"] == codec for r in rows)
    assert rows[1]["producer_id"] == 1234 and rows[1]["producer_epoch"] == 3
    assert rows[1]["base_sequence"] == 5
    records = [rec for r in rows for rec in r["records"]]  # type: ignore[attr-defined]
    assert [rec["offset"] for rec in records] == list(range(8))
    assert records[6] == {
        "offset": 6,
        "timestamp": 1_700_000_000_001,
        "key": "key-1",
        "value": "value-6-" + "x" * 200,
        "headers": [["trace", "t1"]],
    }


def test_reports_crc_failure_and_torn_tail(tmp_path: Path) -> None:
    """A batch with one flipped byte is listed with crc_valid false and is not decoded; a
    torn last batch is reported as trailing bytes at its position; nothing is skipped
    silently and the command still succeeds."""
    good = build_batch([Record(value=b"a"), Record(value=b"b")], base_offset=0)
    bad = bytearray(build_batch([Record(value=b"c")], base_offset=2))
    bad[-1] ^= 0xFF
    torn = build_batch([Record(value=b"d")], base_offset=3)[:40]
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(good + bytes(bad) + torn)
    rows = _run("--json", "--print-data", str(segment))
    assert [r.get("crc_valid") for r in rows[:2]] == [True, False]
    assert "records" not in rows[1] and "CRC" in str(rows[1]["error"])
    assert rows[2]["trailing_bytes"] == {
        "position": len(good) + len(bad),
        "size": 40,
        "reason": "truncated batch",
    }


def test_text_output_and_missing_file(tmp_path: Path) -> None:
    """The human format names Kafka's fields like kafka-dump-log; a missing file is one
    clear error line and exit status 1, not a traceback."""
    segment = tmp_path / "00000000000000000042.log"
    segment.write_bytes(build_batch([Record(value=b"hello", key=b"k")], base_offset=42))
    result = CliRunner().invoke(dump_log_command, ["--print-data", str(segment)])
    assert result.exit_code == 0, result.output
    assert "Log starting offset: 42" in result.output
    assert "baseOffset: 42 lastOffset: 42 count: 1" in result.output
    assert "| offset: 42 CreateTime: 0 keySize: 1 valueSize: 5" in result.output
    assert "key: k payload: hello" in result.output
    missing = CliRunner().invoke(dump_log_command, [str(tmp_path / "nope.log")])
    assert missing.exit_code == 1
    assert "cannot read" in missing.output and "Traceback" not in missing.output


def test_console_script_runs(tmp_path: Path) -> None:
    """The installed ``raftka`` entry point dispatches to dump-log (a real process)."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(build_batch([Record(value=b"x")]))
    exe = Path(sys.executable).parent / "raftka"
    out = subprocess.run(
        [str(exe), "dump-log", str(segment)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "baseOffset: 0 lastOffset: 0 count: 1" in out.stdout


def _transactional_segment(tmp_path: Path) -> Path:
    """Offsets 0-1 a transaction of producer 7, 2 its COMMIT (coordinator epoch 4), 3 a
    transaction of producer 8, 4 its ABORT; the .txnindex beside it holds the abort and
    20 bytes of a torn next entry."""
    segment = tmp_path / "00000000000000000000.log"
    marker = partial(build_end_transaction_batch, timestamp_ms=5)
    segment.write_bytes(
        build_batch(
            [Record(value=b"a"), Record(value=b"b")],
            producer_id=7,
            producer_epoch=1,
            base_sequence=0,
            is_transactional=True,
        )
        + marker(EndTransactionMarker(COMMIT, 4), producer_id=7, producer_epoch=1, base_offset=2)
        + build_batch(
            [Record(value=b"c")],
            base_offset=3,
            producer_id=8,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
        + marker(EndTransactionMarker(ABORT, 4), producer_id=8, producer_epoch=0, base_offset=4)
    )
    entry = AbortedTxn(producer_id=8, first_offset=3, last_offset=4, last_stable_offset=5)
    index = tmp_path / "00000000000000000000.txnindex"
    index.write_bytes(entry.encode() + entry.encode()[:20])
    return segment


def test_shows_markers_and_the_txnindex(tmp_path: Path) -> None:
    """Markers show as kafka-dump-log prints them, even without --print-data; the
    segment's .txnindex follows it; the torn tail is reported and left in the file."""
    segment = _transactional_segment(tmp_path)
    result = CliRunner().invoke(dump_log_command, [str(segment)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "| offset: 2 endTxnMarker: COMMIT coordinatorEpoch: 4" in lines
    assert "| offset: 4 endTxnMarker: ABORT coordinatorEpoch: 4" in lines
    assert "isTransactional: true isControl: true" in result.output
    assert f"Dumping {tmp_path / '00000000000000000000.txnindex'}" in lines
    assert "version: 0 producerId: 8 firstOffset: 3 lastOffset: 4 lastStableOffset: 5" in lines
    assert "Found 20 bytes at the end that are not a whole entry (torn)" in lines
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 34 + 20
    rows = _run("--json", str(segment))
    assert [r.get("control") for r in rows if r.get("is_control")] == [
        {"type": "COMMIT", "coordinator_epoch": 4},
        {"type": "ABORT", "coordinator_epoch": 4},
    ]
    assert [r["aborted_txn"] for r in rows if "aborted_txn" in r] == [
        {
            "version": 0,
            "producer_id": 8,
            "first_offset": 3,
            "last_offset": 4,
            "last_stable_offset": 5,
        }
    ]
    assert "records" not in rows[1]  # decoded for the marker, not printed unasked


def test_a_txnindex_given_alone_and_a_corrupt_one(tmp_path: Path) -> None:
    segment = _transactional_segment(tmp_path)
    index = segment.with_suffix(".txnindex")
    rows = _run("--json", str(index))
    assert len(rows) == 2 and "aborted_txn" not in rows[1]
    assert rows[0]["aborted_txn"] == {
        "version": 0,
        "producer_id": 8,
        "first_offset": 3,
        "last_offset": 4,
        "last_stable_offset": 5,
    }
    assert rows[1]["trailing_bytes"] == {"position": 34, "size": 20, "reason": "torn entry"}
    index.write_bytes(struct.pack(">hqqqq", 5, 8, 3, 4, 5))
    bad = CliRunner().invoke(dump_log_command, [str(index)])
    assert bad.exit_code == 1
    assert "cannot read" in bad.output and "version 5" in bad.output


def test_producer_snapshot_shows_open_transactions_and_the_lso(tmp_path: Path) -> None:
    # The CLI's dump-log: the broker layer adds snapshots to storage's command.
    from raftka.broker.dump_log import dump_log_command as broker_dump_log
    from raftka.broker.producer_state import ProducerStateEntry
    from raftka.broker.producer_state_snapshot import (
        encode_snapshot,
        snapshot_file_name,
    )

    entries = [
        ProducerStateEntry(1, 0, (), 0, is_transactional=True, current_txn_first_offset=12),
        ProducerStateEntry(2, 3, (), 0, is_transactional=True, current_txn_first_offset=7),
        ProducerStateEntry(3, 0, (), 0),
    ]
    path = tmp_path / snapshot_file_name(20)
    path.write_bytes(encode_snapshot(entries, offset=20))
    text = CliRunner().invoke(broker_dump_log, [str(path)])
    assert text.exit_code == 0, text.output
    assert "currentTxnFirstOffset: 7" in text.output
    assert "producerId: 3 producerEpoch: 0" in text.output
    assert "open transactions: 2 last stable offset at the snapshot: 7" in text.output
    as_json = CliRunner().invoke(broker_dump_log, [str(path), "--json"])
    summary = orjson.loads(as_json.output.splitlines()[-1])["producer_snapshot"]
    assert summary == {"offset": 20, "open_transactions": 2, "lso": 7}

    path.write_bytes(encode_snapshot(entries[2:], offset=20))
    none_open = CliRunner().invoke(broker_dump_log, [str(path)])
    assert "open transactions: 0 last stable offset at the snapshot: 20" in none_open.output

    torn = tmp_path / snapshot_file_name(30)
    torn.write_bytes(b"\x00\x01")
    bad = CliRunner().invoke(broker_dump_log, [str(torn)])
    assert bad.exit_code == 1 and "CORRUPT_MESSAGE" in bad.output, bad.output
