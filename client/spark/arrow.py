"""Arrow on both sides of Spark: consumer records to RecordBatches (source) and input
RecordBatches to producer records (sink).

Pure apart from pyarrow itself. The source's Arrow schema must match the Spark schema
exactly (``int32`` for INT, ``timestamp[us, tz=UTC]`` for TIMESTAMP), or Spark refuses
the batch; :func:`spark_schema` and :func:`arrow_schema` are kept side by side for that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from raftka.client.structs import ConsumerRecord

__all__ = [
    "SINK_COLUMNS",
    "SinkRecord",
    "arrow_schema",
    "check_sink_schema",
    "records_to_batch",
    "sink_records",
    "spark_schema",
]

#: The columns the sink reads; any other column is ignored, as in Spark's Kafka sink.
SINK_COLUMNS: Final = ("key", "value", "topic", "partition", "headers")

_HEADER_SPARK = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_HEADER_ARROW = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def spark_schema(*, include_headers: bool) -> StructType:
    """Spark's Kafka source schema."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER_SPARK)))
    return StructType(fields)


def arrow_schema(*, include_headers: bool) -> Any:
    """The Arrow twin of :func:`spark_schema`."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(_HEADER_ARROW)))
    return pa.schema(fields)


def _column(values: Sequence[Any], type_: Any) -> Any:
    """An Arrow array of ``values``; one repeated scalar when they are all equal (topic,
    partition and timestamp type within one partition's range), which skips converting
    each Python object."""
    if values and values.count(values[0]) == len(values):
        return pa.repeat(pa.scalar(values[0], type=type_), len(values))
    return pa.array(values, type=type_)


def records_to_batch(records: Sequence[ConsumerRecord], *, include_headers: bool) -> Any:
    """One Arrow RecordBatch holding the records, in order.

    The records are transposed once (``zip``, at C speed over the named tuples) instead
    of one Python pass per column: this conversion runs per record on the source's read
    path, next to the consumer's own decoding (docs/benchmarks.md, Spark connector)."""
    if not records:
        return pa.RecordBatch.from_pylist([], schema=arrow_schema(include_headers=include_headers))
    topics, partitions, offsets, timestamps, types, keys, values, headers, *_ = zip(
        *records, strict=True
    )
    columns = [
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        _column(topics, pa.string()),
        _column(partitions, pa.int32()),
        pa.array(offsets, type=pa.int64()),
        # Kafka timestamps are epoch milliseconds; Spark's TIMESTAMP is microseconds.
        pa.array(timestamps, type=pa.int64())
        .cast(pa.timestamp("ms", tz="UTC"))
        .cast(pa.timestamp("us", tz="UTC")),
        _column(types, pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in headers],
                type=pa.list_(_HEADER_ARROW),
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers=include_headers))


def _accepts(field: StructField, *types: type[DataType]) -> bool:
    return isinstance(field.dataType, types)


def check_sink_schema(schema: StructType, *, topic_option: str | None) -> None:
    """Raise ValueError naming the column when the input cannot be written: ``value``
    (binary or string) is required; ``key`` binary or string; ``topic`` string (or the
    ``topic`` option); ``partition`` int; ``headers`` array<struct<key string, value
    binary>>."""
    by_name = {f.name.lower(): f for f in schema.fields}
    if "value" not in by_name:
        raise ValueError("the sink needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in by_name and not _accepts(by_name[name], BinaryType, StringType):
            raise ValueError(
                f"column {name!r} must be binary or string, not {by_name[name].dataType}"
            )
    if "topic" in by_name and not _accepts(by_name["topic"], StringType):
        raise ValueError(f"column 'topic' must be a string, not {by_name['topic'].dataType}")
    if topic_option is None and "topic" not in by_name:
        raise ValueError("no topic: give the 'topic' option or a 'topic' column")
    if "partition" in by_name and not _accepts(by_name["partition"], IntegerType, LongType):
        raise ValueError(f"column 'partition' must be an int, not {by_name['partition'].dataType}")
    if "headers" in by_name:
        dt = by_name["headers"].dataType
        element = dt.elementType if isinstance(dt, ArrayType) else None
        ok = isinstance(element, StructType)
        if isinstance(element, StructType):
            inner = {f.name: f.dataType for f in element.fields}
            ok = isinstance(inner.get("key"), StringType) and isinstance(
                inner.get("value"), BinaryType | StringType
            )
        if not ok:
            raise ValueError(
                f"column 'headers' must be array<struct<key string, value binary>>, not {dt}"
            )


@dataclass(frozen=True, slots=True)
class SinkRecord:
    topic: str
    value: bytes | None
    key: bytes | None
    partition: int | None
    headers: tuple[tuple[str, bytes | None], ...]


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def sink_records(batch: Any, *, topic_option: str | None) -> Iterator[SinkRecord]:
    """The records one input RecordBatch asks to write; the ``topic`` option overrides
    the column. A row with no topic raises ValueError."""
    names = {n.lower(): n for n in batch.schema.names}
    n = batch.num_rows

    def column(name: str) -> list[Any]:
        real = names.get(name)
        return [None] * n if real is None else batch.column(real).to_pylist()

    values, keys = column("value"), column("key")
    topics = [topic_option] * n if topic_option is not None else column("topic")
    partitions, headers = column("partition"), column("headers")
    for i in range(n):
        topic = topics[i]
        if not topic:
            raise ValueError(f"row {i} has no topic (null 'topic' column and no 'topic' option)")
        hs = tuple((h["key"], _as_bytes(h["value"])) for h in (headers[i] or ()))
        yield SinkRecord(topic, _as_bytes(values[i]), _as_bytes(keys[i]), partitions[i], hs)
