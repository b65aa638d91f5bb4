"""The source's record -> Arrow conversion (client/spark/arrow.py records_to_batch):
every column equals the record's field, whatever mix of topics, partitions, timestamps,
timestamp types, nulls and headers a batch holds (the constant-column shortcut must only
fire when a column really is constant)."""

from __future__ import annotations

import datetime as dt

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from raftka.client.spark.arrow import arrow_schema, records_to_batch  # noqa: E402
from raftka.client.structs import ConsumerRecord, TimestampType  # noqa: E402


def _record(i: int, *, mixed: bool) -> ConsumerRecord:
    return ConsumerRecord(
        topic=f"t{i % 2}" if mixed else "t",
        partition=i % 3 if mixed else 1,
        offset=10 + 2 * i,  # gaps, as compaction or read_committed leaves
        timestamp=-1 if mixed and i % 5 == 0 else 1_700_000_000_000 + i,
        timestamp_type=TimestampType(i % 2) if mixed else TimestampType.CREATE_TIME,
        key=b"k%d" % i if i % 2 else None,
        value=None if i % 3 == 0 else b"v%d" % i,
        headers=(("h", b"1"), ("n", None)) if i % 2 else (),
    )


def _expected_rows(records: list[ConsumerRecord]) -> list[dict[str, object]]:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "key": r.key,
            "value": r.value,
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": epoch + dt.timedelta(milliseconds=r.timestamp),
            "timestampType": int(r.timestamp_type),
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in records
    ]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("count", [0, 1, 40])
@pytest.mark.parametrize("include_headers", [False, True])
def test_records_to_batch_matches_each_record(
    mixed: bool, count: int, include_headers: bool
) -> None:
    records = [_record(i, mixed=mixed) for i in range(count)]
    batch = records_to_batch(records, include_headers=include_headers)
    assert batch.schema == arrow_schema(include_headers=include_headers)
    expected = _expected_rows(records)
    if not include_headers:
        for row in expected:
            del row["headers"]
    assert batch.to_pylist() == expected
