"""Structured Streaming: page views per page per 1-minute window, from ``events`` to
``page-counts``, with a checkpoint (restart it and it resumes where it stopped).

    python examples/spark_windowed_counts/windowed_counts.py --bootstrap 127.0.0.1:9096 \
        --checkpoint /tmp/raftka-windowed-counts [--available-now]

Needs ``pip install raftka[spark]`` and Java 17+. The format "raftka" is registered by
the install: no ``spark.dataSource.register`` call.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812  (PySpark's own convention)
from pyspark.sql.types import LongType, StringType, StructField, StructType

EVENT = StructType(
    [
        StructField("user", StringType()),
        StructField("page", StringType()),
        StructField("ts_ms", LongType()),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9096,127.0.0.1:9097,127.0.0.1:9098")
    parser.add_argument("--source", default="events")
    parser.add_argument("--sink", default="page-counts")
    parser.add_argument("--checkpoint", default="/tmp/raftka-windowed-counts")
    parser.add_argument("--available-now", action="store_true", help="process what is there, stop")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("raftka-windowed-counts")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")

    events = (
        spark.readStream.format("raftka")
        .option("bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT).alias("e"))
        .select(
            F.col("e.page").alias("page"),
            (F.col("e.ts_ms") / 1000).cast("timestamp").alias("event_time"),
        )
    )
    counts = (
        events.withWatermark("event_time", "2 minutes")
        .groupBy(F.window("event_time", "1 minute"), "page")
        .count()
        .select(
            F.col("page").alias("key"),
            F.to_json(
                F.struct(
                    F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"),
                    "page",
                    "count",
                )
            ).alias("value"),
        )
    )
    writer = (
        counts.writeStream.format("raftka")
        # Append: each window's count is written once, final, after the watermark
        # passes its end (a Python data source sink supports append mode only).
        .outputMode("append")
        .option("bootstrap.servers", args.bootstrap)
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if args.available_now else writer
    query = writer.start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
