"""A broker's Prometheus metrics, with Kafka's names (see ``raftka.server_common.metrics``
for the naming rule and ``docs/operations.md``, "Metrics", for the list).

Theory of operation
-------------------
:class:`BrokerCollector` reads the broker's state when scraped and nothing else: the
replica manager's partitions (partition, leader, under-replicated and offline counts),
the produce and fetch purgatories, the ISR changes the manager counted, the bytes the
replication throttles counted, the event-loop
lag monitor and the I/O workers, and the group coordinator's groups with their committed
offsets (consumer lag). :class:`BrokerTopicMetrics` counts what leaves no state behind:
bytes and messages appended per topic, bytes fetched. Both HTTP and Kafka-protocol
produce and fetch count there (``record_produce`` and ``record_fetch``).

Consumer lag is ``high watermark - committed offset`` per group and partition, for the
groups this broker coordinates and every partition they committed: with the high
watermark of this broker's own replica of the partition where it has one (leader or
follower: a follower's HW trails the leader's by at most a fetch), else the leader's,
asked at scrape time (``raftka.broker.leader_hws``: one ListOffsets per leader, bounded
by a timeout, cached for a second). A partition whose leader did not answer in time has
no lag series in that scrape (never a stale one).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from raftka.broker.coordinator.group import GroupState
from raftka.broker.replication.partition_state import ReplicaRole
from raftka.common.record.header import HEADER_SIZE, peek_batch_size
from raftka.server_common.metrics import (
    RequestMetrics,
    StateCollector,
    counter,
    gauge,
    https_api_metrics,
)

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from raftka.broker.replication.data_plane import FetchResult, ProduceResult
    from raftka.broker.server import BrokerServer

__all__ = [
    "BrokerCollector",
    "BrokerMetrics",
    "BrokerTopicMetrics",
    "count_records",
]

# The record count is the header's last field, an int32.
_RECORDS_COUNT: Final = struct.Struct(">i")
_RECORDS_COUNT_AT: Final = HEADER_SIZE - _RECORDS_COUNT.size


def count_records(batches: bytes) -> int:
    """Records in a run of RecordBatch v2 (Kafka's MessagesInPerSec counts records, not
    batches). Reads only the batch headers; a truncated tail counts nothing."""
    count, at = 0, 0
    while at + HEADER_SIZE <= len(batches):
        size = peek_batch_size(batches, at)
        if size is None or size < HEADER_SIZE:
            break
        count += _RECORDS_COUNT.unpack_from(batches, at + _RECORDS_COUNT_AT)[0]
        at += size
    return count


def _per_topic(registry: CollectorRegistry, name: str, documentation: str) -> Counter:
    return Counter(
        "kafka_server_brokertopicmetrics_" + name, documentation, ["topic"], registry=registry
    )


class BrokerTopicMetrics:
    """Kafka's ``kafka.server:type=BrokerTopicMetrics`` meters, per topic."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.bytes_in = _per_topic(
            registry,
            "bytesin",
            "Bytes of record batches appended by produce requests (Kafka's BytesInPerSec).",
        )
        self.messages_in = _per_topic(
            registry,
            "messagesin",
            "Records appended by produce requests (Kafka's MessagesInPerSec).",
        )
        self.bytes_out = _per_topic(
            registry,
            "bytesout",
            "Bytes of record batches sent to consumers (Kafka's BytesOutPerSec).",
        )
        self._in: dict[str, tuple[Counter, Counter]] = {}
        self._out: dict[tuple[bool, str], Counter] = {}
        self.replication_bytes_out = _per_topic(
            registry,
            "replicationbytesout",
            "Bytes of record batches sent to follower replicas "
            "(Kafka's ReplicationBytesOutPerSec).",
        )

    def record_produce(
        self, entries: Sequence[tuple[str, int, bytes]], results: Sequence[ProduceResult]
    ) -> None:
        """Count the entries answered with an offset. A refused partition counts
        nothing; so does an acks=all entry that timed out waiting for its followers
        (appended, but its answer has no offset to tell it from a refused one)."""
        for (topic, _, data), result in zip(entries, results, strict=True):
            if result.base_offset is None or result.base_offset < 0:
                continue
            counters = self._in.get(topic)
            if counters is None:
                # labels() takes a lock and checks the value on every call: once per topic.
                counters = (self.bytes_in.labels(topic), self.messages_in.labels(topic))
                self._in[topic] = counters
            counters[0].inc(len(data))
            counters[1].inc(count_records(data))

    def record_fetch(self, results: Iterable[FetchResult], *, follower: bool) -> None:
        family = self.replication_bytes_out if follower else self.bytes_out
        for r in results:
            if r.records:
                counter = self._out.get((follower, r.topic))
                if counter is None:
                    counter = self._out[(follower, r.topic)] = family.labels(r.topic)
                counter.inc(len(r.records))


class BrokerMetrics:
    """Everything a broker exports: its registry and the parts that count events."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.topics = BrokerTopicMetrics(registry)
        self.requests = RequestMetrics(registry)

    def watch(self, server: BrokerServer) -> None:
        """Register the scrape-time collector of ``server``'s state."""
        self.registry.register(BrokerCollector(server))


class BrokerCollector(StateCollector):
    """The broker's state at scrape time (see the module docstring)."""

    def __init__(self, server: BrokerServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        yield from self._replica_manager()
        yield from self._purgatories()
        yield from self._kafka_listener()
        yield from https_api_metrics(self._server.config.http)
        yield from self._loop_and_workers()
        yield from self._groups()

    def _replica_manager(self) -> Iterator[Metric]:
        manager = self._server.manager
        leaders = under = offline = 0
        for p in manager.partitions.values():
            state = p.state
            if state.role is ReplicaRole.OFFLINE:
                offline += 1
            if state.is_leader:
                leaders += 1
                # Kafka's test: the leader's (maximal) ISR is smaller than the replicas.
                if len(state.maximal_isr) < len(state.replicas):
                    under += 1
        prefix = "kafka_server_replicamanager_"
        yield gauge(prefix + "partitioncount", "Replicas on this broker.", len(manager.partitions))
        yield gauge(prefix + "leadercount", "Partitions this broker leads.", leaders)
        yield gauge(
            prefix + "underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set.",
            under,
        )
        yield gauge(
            prefix + "offlinereplicacount",
            "Replicas on this broker in the offline state (0 today: raftka takes no log "
            "directory offline and drops a replica it stops).",
            offline,
        )
        for kind, count in (("shrinks", manager.isr_shrinks), ("expands", manager.isr_expands)):
            yield counter(
                prefix + "isr" + kind,
                f"ISR {kind} the controller accepted for partitions this broker leads "
                f"(Kafka's Isr{kind.capitalize()}PerSec).",
                count,
            )
        throttled = CounterMetricFamily(
            "kafka_server_replication_throttled_bytes",
            "Bytes replicated for throttled replicas (leader.replication.throttled.replicas "
            "and follower.replication.throttled.replicas), by side: what the quotas count.",
            labels=["side"],
        )
        throttled.add_metric(["leader"], manager.quotas.leader.throttled_bytes)
        throttled.add_metric(["follower"], manager.quotas.follower.throttled_bytes)
        yield throttled

    def _purgatories(self) -> Iterator[Metric]:
        manager = self._server.manager
        size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests parked: produces waiting for acks=all, fetches in their long poll.",
            labels=["delayedOperation"],
        )
        size.add_metric(["Produce"], len(manager.purgatory))
        size.add_metric(["Fetch"], manager.fetch_waiters)
        yield size

    def _kafka_listener(self) -> Iterator[Metric]:
        """Kafka's ``socket-server-metrics`` of the Kafka listener, when there is one,
        labelled with its name as Kafka labels them (``listener``)."""
        kafka = self._server.kafka
        if kafka is None:
            return
        name = [kafka.security_protocol]
        prefix = "kafka_server_socketservermetrics_"
        for metric, doc, value in (
            (
                "failed_authentication",
                "Connections that failed authentication: SASL, a TLS handshake the "
                "listener refused, or a client certificate no principal rule maps.",
                kafka.authentication_failures,
            ),
            (
                "successful_authentication",
                "Connections that completed SASL authentication.",
                kafka.authentication_successes,
            ),
            (
                "connections_refused",
                "Connections closed at once because max.connections were open.",
                kafka.connections_refused,
            ),
            (
                "successful_reauthentication",
                "SASL re-authentications (KIP-368) completed on open connections.",
                kafka.reauthentication_successes,
            ),
            (
                "expired_connections_killed",
                "Connections closed for a request after their SASL session expired "
                "(KIP-368, connections.max.reauth.ms).",
                kafka.expired_connections_killed,
            ),
        ):
            family = CounterMetricFamily(prefix + metric, doc, labels=["listener"])
            family.add_metric(name, value)
            yield family
        count = GaugeMetricFamily(
            prefix + "connection_count", "Open connections.", labels=["listener"]
        )
        count.add_metric(name, kafka.connection_count)
        yield count

    def _loop_and_workers(self) -> Iterator[Metric]:
        lag = self._server.loop_lag.health()
        family = GaugeMetricFamily(
            "raftka_broker_eventloop_lag_ms",
            "How late the event loop ran a timer, over the monitor's recent window, ms "
            "(no Kafka counterpart: Kafka has threads, not one loop).",
            labels=["quantile"],
        )
        family.add_metric(["0.5"], lag["p50_ms"])
        family.add_metric(["0.99"], lag["p99_ms"])
        family.add_metric(["1"], lag["window_max_ms"])
        yield family
        io = self._server.manager.io
        yield gauge(
            "raftka_broker_ioworkers_queuesize",
            "Disk jobs admitted and waiting for an I/O worker thread "
            "(like Kafka's RequestQueueSize, for num.io.threads).",
            io.queued,
        )
        yield gauge("raftka_broker_ioworkers_busy", "Disk jobs an I/O worker runs now.", io.busy)
        appends = self._server.manager.appends
        ran = CounterMetricFamily(
            "raftka_broker_appends",
            "Appends and truncations by where they ran: inline on the event loop, or on "
            "the I/O workers (a log dir whose writes turned slow).",
            labels=["mode"],
        )
        ran.add_metric(["inline"], appends.inline_appends)
        ran.add_metric(["workers"], appends.worker_appends)
        yield ran
        yield counter(
            "raftka_broker_append_mode_switches",
            "Log dirs moved from inline appends to the I/O workers after a slow write.",
            appends.to_workers,
        )
        yield gauge(
            "raftka_broker_append_worker_mode_log_dirs",
            "Log dirs whose appends run on the I/O workers now.",
            appends.worker_mode_log_dirs,
        )

    def _groups(self) -> Iterator[Metric]:
        core = self._server.coordinator.core
        partitions = self._server.manager.partitions
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        by_state = dict.fromkeys(GroupState, 0)
        generation = GaugeMetricFamily(
            "kafka_coordinator_group_generation",
            "The group's generation id: the rebalances it completed (groups this broker "
            "coordinates).",
            labels=["group"],
        )
        rebalances = CounterMetricFamily(
            prefix + "rebalances",
            "Rebalances the group completed (generation bumps) on this coordinator since "
            "it loaded the group (Kafka's group coordinator rebalance rate: rate() of it).",
            labels=["group"],
        )
        offset = GaugeMetricFamily(
            "kafka_consumergroup_group_offset",
            "The group's committed offset (kafka-lag-exporter's name).",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_group_lag",
            "High watermark minus the committed offset (kafka-lag-exporter's name): this "
            "broker's replica's HW, else the leader's (absent if it did not answer).",
            labels=["group", "topic", "partition"],
        )
        offsets = 0
        for group_id in core.group_ids():
            group = core.group(group_id)
            if group is not None:
                by_state[group.state] += 1
                generation.add_metric([group_id], group.generation_id)
                rebalances.add_metric([group_id], group.rebalances)
            for tp, committed in core.committed(group_id).items():
                offsets += 1
                labels = [group_id, tp.topic, str(tp.partition)]
                offset.add_metric(labels, committed.offset)
                p = partitions.get((tp.topic, tp.partition))
                hw = (
                    p.state.high_watermark
                    if p is not None
                    else self._server.leader_hws.get(tp.topic, tp.partition)
                )
                if hw is not None:
                    lag.add_metric(labels, max(0, hw - committed.offset))
        yield gauge(prefix + "numgroups", "Groups this broker coordinates.", sum(by_state.values()))
        for state, count in by_state.items():
            yield gauge(
                prefix + "numgroups" + state.value.lower(),
                f"Groups in state {state.value} (Kafka's NumGroups{state.value}).",
                count,
            )
        yield gauge(prefix + "numoffsets", "Committed offsets held.", offsets)
        yield generation
        yield rebalances
        yield offset
        yield lag
