"""The DataSource Spark instantiates for format ``raftka``: options in, readers and
writers out."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from raftka.client.spark.arrow import check_sink_schema, spark_schema
from raftka.client.spark.options import (
    SparkOptionError,
    parse_sink_options,
    parse_source_options,
)
from raftka.client.spark.sink import RaftkaBatchWriter, RaftkaStreamWriter
from raftka.client.spark.source import RaftkaBatchReader, RaftkaStreamReader

__all__ = ["RaftkaDataSource"]

#: The format name (``kafka`` is Spark's own).
FORMAT = "raftka"


class RaftkaDataSource(DataSource):
    """Spark's entry point: options in, readers and writers out. Options are parsed
    (and rejected, naming the option) when Spark asks for a reader or writer."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _lenient_headers(self) -> bool:
        value = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(value).strip().lower() == "true"

    def schema(self) -> StructType:
        return spark_schema(include_headers=self._lenient_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return RaftkaStreamReader(parse_source_options(self.options, streaming=True))

    def _sink(self, schema: StructType) -> Any:
        opts = parse_sink_options(self.options)
        try:
            check_sink_schema(schema, topic_option=opts.topic)
        except ValueError as e:
            raise SparkOptionError(f"raftka sink: {e}") from None
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RaftkaBatchWriter(self._sink(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        return RaftkaStreamWriter(self._sink(schema))
