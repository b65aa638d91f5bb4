"""Print the windowed counts the streaming job writes to ``page-counts``.

    python examples/spark_windowed_counts/print_counts.py --bootstrap 127.0.0.1:9096

Reads from the beginning and stops after ``--idle-ms`` without a new record. With
outputMode("update") a window is printed again each time its count grows; the last
line per (window, page) is its current count.
"""

from __future__ import annotations

import argparse
import time

import orjson

from raftka.client import Consumer, TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9096,127.0.0.1:9097,127.0.0.1:9098")
    parser.add_argument("--topic", default="page-counts")
    parser.add_argument("--idle-ms", type=int, default=5_000)
    args = parser.parse_args()
    latest: dict[tuple[str, str], int] = {}
    with Consumer(bootstrap_servers=args.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(
            [TopicPartition(args.topic, p) for p in consumer.partitions_for_topic(args.topic)]
        )
        last_record = time.monotonic()
        while (time.monotonic() - last_record) * 1000 < args.idle_ms:
            for records in consumer.poll(500).values():
                last_record = time.monotonic()
                for r in records:
                    row = orjson.loads(r.value or b"{}")
                    latest[(row["window_start"], row["page"])] = row["count"]
    for (window, page), count in sorted(latest.items()):
        print(f"{window}  {page:<10} {count}")


if __name__ == "__main__":
    main()
