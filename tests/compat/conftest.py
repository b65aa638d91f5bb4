"""A real local cluster per compatibility module: 3 controllers and 3 brokers as
separate processes (``raftka.local``), built as the ``raftka_cluster`` fixture builds
it, with a short initial rebalance delay so that consumer groups form in well under a
second. ``topic(...)`` creates a uniquely named topic and returns once every broker
knows its leaders."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from raftka.testing import RaftkaCluster

BROKER_PROPERTIES = {
    "replica.lag.time.max.ms": "1500",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    data_dir = tmp_path_factory.mktemp("compat")
    with RaftkaCluster.start(data_dir, broker_properties=BROKER_PROPERTIES) as env:
        yield env


@pytest.fixture
def bootstrap(cluster: RaftkaCluster) -> str:
    return cluster.bootstrap_servers


@pytest.fixture
def topic(cluster: RaftkaCluster) -> Callable[..., str]:
    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        return cluster.create_topic(partitions=partitions, configs=configs)

    return make
