"""raftka.client.spark: the PySpark data source for raftka topics (format ``raftka``).

Installed with ``pip install raftka[spark]`` it registers itself in every Spark session
(through the top-level module ``pyspark_raftka``), so::

    spark.read.format("raftka").option("bootstrap.servers", ...).option("subscribe", "t")
    df.writeStream.format("raftka").option("topic", "out").option("checkpointLocation", ...)

work without ``spark.dataSource.register``. Options and guarantees: docs/spark.md.
The option, offset and planning modules are pure and import without Spark;
``RaftkaDataSource`` (and everything that runs inside Spark) needs pyspark and pyarrow,
the ``spark`` extra, and is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftka.client.spark.options import SparkOptionError

if TYPE_CHECKING:
    from raftka.client.spark.datasource import RaftkaDataSource

__all__ = ["FORMAT", "RaftkaDataSource", "SparkOptionError"]

#: The format name (``kafka`` is Spark's own).
FORMAT = "raftka"


def __getattr__(name: str) -> Any:
    # Lazy: the pure modules must import where pyspark is not installed.
    if name == "RaftkaDataSource":
        from raftka.client.spark.datasource import RaftkaDataSource  # noqa: PLC0415

        return RaftkaDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
