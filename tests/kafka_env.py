"""A cluster whose brokers have Kafka listeners, for the modules that test Kafka's own
clients against it (test modules cannot import each other)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from raftka.local import LocalCluster
from raftka.local.brokers import LocalBrokers


@dataclass
class Env:
    brokers: LocalBrokers
    kafka: str  # the Kafka listeners, for Kafka's clients
    http: str  # the HTTP API, for raftka's client


@contextlib.contextmanager
def kafka_env(tmp: Path, properties: Mapping[str, str]) -> Iterator[Env]:
    """3 controllers and 3 brokers with Kafka listeners and ``properties``."""
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        with LocalBrokers(
            cluster, extra_properties=dict(properties), kafka_listener=True
        ) as brokers:
            brokers.start()
            yield Env(brokers, brokers.kafka_bootstrap_servers, brokers.bootstrap_servers)
