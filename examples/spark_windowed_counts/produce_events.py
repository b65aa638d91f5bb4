"""Produce click events into the ``events`` topic: JSON {"user", "page", "ts_ms"}.

python examples/spark_windowed_counts/produce_events.py --bootstrap 127.0.0.1:9096
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time

import orjson

from raftka.client import Admin, NewTopic, Producer
from raftka.common.errors import TopicAlreadyExistsError

PAGES = ("home", "search", "cart", "checkout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9096,127.0.0.1:9097,127.0.0.1:9098")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with Admin(bootstrap_servers=args.bootstrap, default_api_timeout_ms=30_000) as admin:
        for name, partitions in ((args.topic, 3), ("page-counts", 1)):
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(name, partitions, 3)])
    now_ms = int(time.time() * 1000)
    with Producer(bootstrap_servers=args.bootstrap, linger_ms=20) as producer:
        for i in range(args.count):
            user = f"user-{rng.randrange(100)}"
            event = {
                "user": user,
                "page": rng.choice(PAGES),
                # Spread over the last ten minutes, so several windows fill.
                "ts_ms": now_ms - rng.randrange(600_000),
            }
            producer.send(args.topic, orjson.dumps(event), key=user.encode())
            if i % 1000 == 999:
                producer.flush(timeout_ms=30_000)
        producer.flush(timeout_ms=30_000)
    print(f"produced {args.count} events into {args.topic}")


if __name__ == "__main__":
    main()
