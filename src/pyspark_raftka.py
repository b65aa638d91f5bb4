"""Registers raftka's PySpark data source (format ``raftka``) in every Spark session.

PySpark imports each top-level module whose name starts with ``pyspark_`` and registers
its ``DefaultSource``; this module exists only for that. The connector itself is
:mod:`raftka.client.spark`.
"""

from raftka.client.spark.datasource import RaftkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
