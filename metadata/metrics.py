"""A controller's Prometheus metrics, with Kafka's names (see
``raftka.server_common.metrics`` for the naming rule and ``docs/operations.md``,
"Metrics", for the list).

Theory of operation
-------------------
:class:`ControllerCollector` reads, when scraped, what ``/health`` and ``/v1/quorum``
show: the quorum engine's view (Kafka's ``raft-metrics``: current leader, epoch, high
watermark, log end offset, this node's state), whether this node is the active
controller, and the committed metadata image (topics, partitions, offline partitions,
fenced brokers). Every controller reports the image-derived counts from its own
committed image (as KRaft's controller metadata metrics do), so they agree across the
quorum up to replication lag: aggregate them with ``max``, not ``sum``; only
``activecontrollercount`` sums to 1. Commit latency is timed as it happens
(:attr:`ControllerEventLoop.on_commit_ms`), on the active controller only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily

from raftka.metadata.metadata_records import NO_LEADER
from raftka.raft.quorum.state import QuorumRole
from raftka.server_common.metrics import (
    LATENCY_BUCKETS_MS,
    RequestMetrics,
    StateCollector,
    counter,
    gauge,
    https_api_metrics,
)

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from raftka.metadata.controller_events import ControllerEventLoop

__all__ = ["CONTROLLER_API_NAMES", "ControllerCollector", "ControllerMetrics"]

#: The controller's routes whose path does not say Kafka's API name.
CONTROLLER_API_NAMES = {
    "POST /v1/brokers/register": "BrokerRegistration",
    "POST /v1/brokers/heartbeat": "BrokerHeartbeat",
    "POST /v1/topics": "CreateTopics",
    "DELETE /v1/topics": "DeleteTopics",
    "POST /v1/partitions": "CreatePartitions",
    "POST /v1/configs": "IncrementalAlterConfigs",
    "GET /v1/configs": "DescribeConfigs",
    "POST /v1/producer-ids": "AllocateProducerIds",
    "GET /v1/quorum": "DescribeQuorum",
}

#: The Raft states of Kafka's ``current-state`` (the native engine's role names).
RAFT_STATES = tuple(role.value for role in QuorumRole)


class ControllerMetrics:
    """Everything a controller exports: its registry, request and commit timings."""

    def __init__(self, registry: CollectorRegistry, events: ControllerEventLoop) -> None:
        self.registry = registry
        self.requests = RequestMetrics(registry, CONTROLLER_API_NAMES)
        self.commit_latency_ms = Histogram(
            "kafka_server_raftmetrics_commit_latency_ms",
            "Time from appending a metadata write to the quorum until it commits, ms "
            "(Kafka's raft-metrics commit-latency-avg/max, as a histogram).",
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )
        events.on_commit_ms = self.commit_latency_ms.observe
        registry.register(ControllerCollector(events))


class ControllerCollector(StateCollector):
    """The controller's state at scrape time (see the module docstring)."""

    def __init__(self, events: ControllerEventLoop) -> None:
        self._events = events

    def collect(self) -> Iterator[Metric]:
        events = self._events
        kc = "kafka_controller_kafkacontroller_"
        yield gauge(
            kc + "activecontrollercount",
            "1 on the active controller, 0 elsewhere (sums to 1 over a healthy quorum).",
            1 if events.started and events.is_active else 0,
        )
        yield counter(
            "raftka_controller_activations",
            "Times this node became the active controller (won an election and "
            "activated; no Kafka counterpart by this name).",
            events.stats.activations,
        )
        yield counter(
            "raftka_raft_elections",
            "Quorum elections this node saw end with a leader (one per epoch; Kafka's "
            "raft-metrics time elections but do not count them by this name).",
            events.stats.elections,
        )
        image = events.loader.image
        partitions = offline = 0
        for topic in image.topics.by_name.values():
            for registration in topic.partitions.values():
                partitions += 1
                if registration.leader == NO_LEADER:
                    offline += 1
        brokers = image.cluster.brokers.values()
        yield gauge(kc + "globaltopiccount", "Topics.", len(image.topics.by_name))
        yield gauge(kc + "globalpartitioncount", "Partitions of every topic.", partitions)
        yield gauge(kc + "offlinepartitionscount", "Partitions without a leader.", offline)
        yield gauge(
            kc + "fencedbrokercount", "Registered brokers fenced.", sum(b.fenced for b in brokers)
        )
        yield gauge(
            kc + "activebrokercount",
            "Registered brokers not fenced.",
            sum(not b.fenced for b in brokers),
        )
        yield from https_api_metrics(events.config.http)
        if not events.started:
            return  # the engine's numbers mean nothing before it starts
        info = events.engine.describe()
        raft = "kafka_server_raftmetrics_"
        yield gauge(
            raft + "current_leader",
            "The quorum leader this node knows of, -1 if none.",
            -1 if info.leader_id is None else info.leader_id,
        )
        yield gauge(
            raft + "current_epoch",
            "The quorum epoch (it grows by one per election).",
            info.epoch,
        )
        yield gauge(
            raft + "high_watermark", "The metadata log's high watermark.", info.high_watermark
        )
        yield gauge(raft + "log_end_offset", "The metadata log's end offset.", info.log_end_offset)
        state = GaugeMetricFamily(
            raft + "current_state", "1 for this node's Raft state.", labels=["state"]
        )
        known = RAFT_STATES if info.role in RAFT_STATES else (*RAFT_STATES, info.role)
        for name in known:
            state.add_metric([name], 1 if name == info.role else 0)
        yield state
