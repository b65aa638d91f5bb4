"""The metrics collectors and the /metrics endpoint, without processes.

The collectors read state at scrape time: they are given real partition states (built as
the other partition-state tests build them) and stand-ins for the rest of the process
(a coordinator, an engine, a metadata image), then scraped through a fresh registry with
prometheus_client's own exposition and parser. The endpoint and the request middleware
run on a built, unstarted BrokerServer through aiohttp's in-process test client.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from broker_harness import broker_config
from partition_state_helpers import leader
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from raftka.broker.coordinator.group import GroupState
from raftka.broker.leader_hws import LeaderHighWatermarks
from raftka.broker.metrics import BrokerCollector, BrokerTopicMetrics, count_records
from raftka.broker.replication.data_plane import FetchResult, ProduceResult
from raftka.broker.server import BrokerServer
from raftka.common.errors import NotLeaderOrFollowerError
from raftka.common.record.batch import Record, build_batch
from raftka.common.structs import TopicPartition
from raftka.metadata.controller_events import _Stats
from raftka.metadata.metadata_records import NO_LEADER
from raftka.metadata.metrics import ControllerMetrics
from raftka.raft.quorum.engine import QuorumInfo
from raftka.server_common.metrics import (
    RequestMetrics,
    RequestTimer,
    add_queue,
    add_remote,
    new_registry,
    start_timing,
    stop_timing,
)
from raftka.server_common.node_http import PLAIN_HTTP

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(registry: Any) -> Samples:
    return samples(generate_latest(registry).decode())


def at(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


# ------------------------------------------------------------------ record counting


def test_count_records_reads_every_batch_header() -> None:
    first = build_batch([Record(b"a"), Record(b"b"), Record(b"c")])
    second = build_batch([Record(b"d")], base_offset=3)
    assert count_records(first) == 3
    assert count_records(first + second) == 4
    # A cut-off batch (its header incomplete) is not counted; the whole ones before are.
    assert count_records(first + second[:40]) == 3
    assert count_records(b"") == 0


def test_topic_metrics_count_only_appended_entries() -> None:
    registry = new_registry()
    topics = BrokerTopicMetrics(registry)
    batch = build_batch([Record(b"x" * 10), Record(b"y" * 10)])
    entries = [("t", 0, batch), ("t", 1, batch), ("u", 0, batch)]
    results = [
        ProduceResult("t", 0, None, base_offset=7),
        ProduceResult("t", 1, NotLeaderOrFollowerError("not here")),
        ProduceResult("u", 0, None, base_offset=0),
    ]
    topics.record_produce(entries, results)
    topics.record_fetch([FetchResult("t", 0, None, records=batch)], follower=False)
    topics.record_fetch([FetchResult("t", 0, None, records=batch * 2)], follower=True)
    topics.record_fetch([FetchResult("u", 0, None)], follower=False)  # nothing read
    found = scrape(registry)
    prefix = "kafka_server_brokertopicmetrics_"
    assert at(found, prefix + "bytesin_total", topic="t") == len(batch)
    assert at(found, prefix + "messagesin_total", topic="t") == 2
    assert at(found, prefix + "messagesin_total", topic="u") == 2
    assert at(found, prefix + "bytesout_total", topic="t") == len(batch)
    assert at(found, prefix + "replicationbytesout_total", topic="t") == 2 * len(batch)
    assert (prefix + "bytesout_total", (("topic", "u"),)) not in found


# ------------------------------------------------------------------ the broker collector


def _broker(partitions: dict[tuple[str, int], Any], core: Any) -> Any:
    manager = SimpleNamespace(
        partitions=partitions,
        purgatory=[object(), object()],
        fetch_waiters=5,
        isr_shrinks=3,
        isr_expands=1,
        io=SimpleNamespace(queued=4, busy=2),
        quotas=SimpleNamespace(
            leader=SimpleNamespace(throttled_bytes=700), follower=SimpleNamespace(throttled_bytes=0)
        ),
        appends=SimpleNamespace(
            inline_appends=90, worker_appends=7, to_workers=2, worker_mode_log_dirs=1
        ),
    )
    loop_lag = SimpleNamespace(
        health=lambda: {"p50_ms": 0.5, "p99_ms": 12.0, "window_max_ms": 40.0}
    )
    # The leaders' HWs of partitions with no replica here (broker/leader_hws.py): one
    # answered, one did not.
    leader_hws = {("elsewhere", 0): 12}
    return SimpleNamespace(
        config=SimpleNamespace(http=PLAIN_HTTP),  # HTTPS refusals: tests/unit/test_node_http.py
        manager=manager,
        loop_lag=loop_lag,
        coordinator=SimpleNamespace(core=core),
        leader_hws=SimpleNamespace(get=lambda topic, index: leader_hws.get((topic, index))),
        kafka=SimpleNamespace(
            security_protocol="SASL_SSL",
            authentication_failures=6,
            authentication_successes=11,
            connections_refused=1,
            reauthentication_successes=3,
            expired_connections_killed=2,
            connection_count=4,
        ),
    )


class _Core:
    """The group coordinator's core as the collector reads it."""

    def __init__(self) -> None:
        self.groups = {
            # Generation 3, of which 2 rebalances completed since this broker loaded it.
            "g1": SimpleNamespace(state=GroupState.STABLE, generation_id=3, rebalances=2),
            "g2": SimpleNamespace(state=GroupState.EMPTY, generation_id=0, rebalances=0),
        }
        self.offsets = {
            "g1": {TopicPartition("t", 0): SimpleNamespace(offset=4)},
            # Partitions with no replica on this broker: lag from the leader's HW when
            # it answered, none when it did not.
            "g2": {
                TopicPartition("elsewhere", 0): SimpleNamespace(offset=9),
                TopicPartition("unanswered", 0): SimpleNamespace(offset=1),
            },
        }

    def group_ids(self) -> tuple[str, ...]:
        return tuple(self.groups)

    def group(self, group_id: str) -> Any:
        return self.groups.get(group_id)

    def committed(self, group_id: str) -> dict[TopicPartition, Any]:
        return self.offsets.get(group_id, {})


def test_broker_collector_reads_replicas_purgatories_and_groups() -> None:
    full, _ = leader(leo=10, hw=10, isr=(1, 2, 3))
    under, _ = leader(leo=10, hw=6, isr=(1, 2))
    offline, _ = leader()
    offline.make_offline()
    partitions = {
        ("t", 0): SimpleNamespace(state=under),
        ("t", 1): SimpleNamespace(state=full),
        ("t", 2): SimpleNamespace(state=offline),
    }
    registry = new_registry()
    registry.register(BrokerCollector(_broker(partitions, _Core())))
    found = scrape(registry)
    rm = "kafka_server_replicamanager_"
    assert at(found, rm + "partitioncount") == 3
    assert at(found, rm + "leadercount") == 2
    assert at(found, rm + "underreplicatedpartitions") == 1
    assert at(found, rm + "offlinereplicacount") == 1
    assert at(found, rm + "isrshrinks_total") == 3
    assert at(found, rm + "isrexpands_total") == 1
    throttled = "kafka_server_replication_throttled_bytes_total"
    assert at(found, throttled, side="leader") == 700
    assert at(found, throttled, side="follower") == 0
    purgatory = "kafka_server_delayedoperationpurgatory_purgatorysize"
    assert at(found, purgatory, delayedOperation="Produce") == 2
    assert at(found, purgatory, delayedOperation="Fetch") == 5
    ssm = "kafka_server_socketservermetrics_"
    assert at(found, ssm + "failed_authentication_total", listener="SASL_SSL") == 6
    assert at(found, ssm + "successful_authentication_total", listener="SASL_SSL") == 11
    assert at(found, ssm + "connections_refused_total", listener="SASL_SSL") == 1
    assert at(found, ssm + "successful_reauthentication_total", listener="SASL_SSL") == 3
    assert at(found, ssm + "expired_connections_killed_total", listener="SASL_SSL") == 2
    assert at(found, ssm + "connection_count", listener="SASL_SSL") == 4
    assert at(found, "raftka_broker_eventloop_lag_ms", quantile="0.99") == 12.0
    assert at(found, "raftka_broker_ioworkers_queuesize") == 4
    assert at(found, "raftka_broker_appends_total", mode="inline") == 90
    assert at(found, "raftka_broker_appends_total", mode="workers") == 7
    assert at(found, "raftka_broker_append_mode_switches_total") == 2
    assert at(found, "raftka_broker_append_worker_mode_log_dirs") == 1
    gm = "kafka_coordinator_group_groupmetadatamanager_"
    assert at(found, gm + "numgroups") == 2
    assert at(found, gm + "numgroupsstable") == 1
    assert at(found, gm + "numgroupsempty") == 1
    assert at(found, gm + "numgroupspreparingrebalance") == 0
    assert at(found, gm + "numoffsets") == 3
    assert at(found, "kafka_coordinator_group_generation", group="g1") == 3
    assert at(found, gm + "rebalances_total", group="g1") == 2
    assert at(found, gm + "rebalances_total", group="g2") == 0
    # Lag: the HW of this broker's replica (6) minus the committed offset (4).
    assert at(found, "kafka_consumergroup_group_lag", group="g1", topic="t", partition="0") == 2
    assert (
        at(found, "kafka_consumergroup_group_offset", group="g2", topic="elsewhere", partition="0")
        == 9
    )
    lag = "kafka_consumergroup_group_lag"
    # The leader's HW (12) minus the committed offset (9).
    assert at(found, lag, group="g2", topic="elsewhere", partition="0") == 3
    assert not any(name == lag and ("topic", "unanswered") in labels for name, labels in found)


# ------------------------------------------------------------------ the controller collector


def _events(*, active: bool, started: bool = True) -> Any:
    topics = {
        "a": SimpleNamespace(
            partitions={0: SimpleNamespace(leader=1), 1: SimpleNamespace(leader=NO_LEADER)}
        ),
        "b": SimpleNamespace(partitions={0: SimpleNamespace(leader=2)}),
    }
    brokers = {
        1: SimpleNamespace(fenced=False),
        2: SimpleNamespace(fenced=False),
        3: SimpleNamespace(fenced=True),
    }
    image = SimpleNamespace(
        topics=SimpleNamespace(by_name=topics), cluster=SimpleNamespace(brokers=brokers)
    )
    info = QuorumInfo(
        node_id=0,
        leader_id=0 if active else 1,
        epoch=7,
        high_watermark=120,
        log_end_offset=121,
        log_start_offset=0,
        role="leader" if active else "follower",
        voters=(),
        observers=(),
    )
    return SimpleNamespace(
        started=started,
        is_active=active,
        config=SimpleNamespace(http=PLAIN_HTTP),
        stats=SimpleNamespace(activations=2, elections=3),
        loader=SimpleNamespace(image=image),
        engine=SimpleNamespace(describe=lambda: info),
        on_commit_ms=None,
    )


def test_controller_collector_reads_quorum_and_image() -> None:
    events = _events(active=True)
    metrics = ControllerMetrics(new_registry(), events)
    events.on_commit_ms(3.0)  # what the event loop calls after each committed write
    found = scrape(metrics.registry)
    kc = "kafka_controller_kafkacontroller_"
    assert at(found, kc + "activecontrollercount") == 1
    assert at(found, kc + "globaltopiccount") == 2
    assert at(found, kc + "globalpartitioncount") == 3
    assert at(found, kc + "offlinepartitionscount") == 1
    assert at(found, kc + "fencedbrokercount") == 1
    assert at(found, kc + "activebrokercount") == 2
    assert at(found, "raftka_controller_activations_total") == 2
    assert at(found, "raftka_raft_elections_total") == 3
    raft = "kafka_server_raftmetrics_"
    assert at(found, raft + "current_leader") == 0
    assert at(found, raft + "current_epoch") == 7
    assert at(found, raft + "high_watermark") == 120
    assert at(found, raft + "current_state", state="leader") == 1
    assert at(found, raft + "current_state", state="follower") == 0
    assert at(found, raft + "commit_latency_ms_count") == 1
    assert at(found, raft + "commit_latency_ms_bucket", le="5.0") == 1


def test_controller_collector_before_start_and_on_a_follower() -> None:
    follower = scrape(ControllerMetrics(new_registry(), _events(active=False)).registry)
    assert at(follower, "kafka_controller_kafkacontroller_activecontrollercount") == 0
    assert at(follower, "kafka_server_raftmetrics_current_leader") == 1
    starting = scrape(
        ControllerMetrics(new_registry(), _events(active=True, started=False)).registry
    )
    assert at(starting, "kafka_controller_kafkacontroller_activecontrollercount") == 0
    assert not any(name.startswith("kafka_server_raftmetrics_current") for name, _ in starting)


# ------------------------------------------------------------------ the endpoint


def test_broker_endpoint_times_requests_by_kafka_api_name(tmp_path: Path) -> None:
    async def main() -> None:
        first = BrokerServer(broker_config(tmp_path / "a"))
        second = BrokerServer(broker_config(tmp_path / "b"))
        try:
            async with TestClient(TestServer(first.app)) as client:
                body = b'{"partitions": [{"topic": "t", "partition": 0, "timestamp": -1}]}'
                answer = await client.post("/v1/list-offsets", data=body)
                assert answer.status == 200
                assert (await client.post("/v1/list-offsets", data=b"{")).status == 400
                assert (await client.get("/no/such/path")).status == 404
                response = await client.get("/metrics")
                assert response.status == 200
                assert response.content_type == "text/plain"
                found = samples(await response.text())
            requests = "kafka_network_requestmetrics_requests_total"
            # The bad body was answered (400) and counts as a ListOffsets request.
            assert at(found, requests, request="ListOffsets") == 2
            assert at(found, requests, request="unknown") == 1
            timed = "kafka_network_requestmetrics_totaltimems_count"
            assert at(found, timed, request="ListOffsets") == 2
            # The middleware sends the answer itself to time the send.
            split = "kafka_network_requestmetrics_"
            for stage in ("localtimems", "responsesendtimems"):
                assert at(found, f"{split}{stage}_count", request="ListOffsets") == 2
            # Nothing waited for a worker or parked: those stages are not exported.
            for stage in ("requestqueuetimems", "remotetimems", "responsequeuetimems"):
                key = (f"{split}{stage}_count", (("request", "ListOffsets"),))
                assert key not in found, stage
            total = at(found, f"{split}totaltimems_sum", request="ListOffsets")
            parts = sum(
                at(found, f"{split}{stage}_sum", request="ListOffsets")
                for stage in ("localtimems", "responsesendtimems")
            )
            assert abs(total - parts) < 0.01 * total + 1e-3, (total, parts)
            # Each server has its own registry: the second one saw nothing.
            assert (requests, (("request", "ListOffsets"),)) not in scrape(second.metrics.registry)
        finally:
            for server in (first, second):
                server.coordinator.close()
                await server.manager.close()

    asyncio.run(main())


def test_elections_count_once_per_epoch_with_a_leader() -> None:
    stats = _Stats()
    for epoch in (1, 1, 2, 2, 5, 4):  # repeats and a stale report count nothing
        stats.leader_known(epoch)
    assert (stats.elections, stats.last_elected_epoch) == (3, 5)


# ------------------------------------------------------------------ the request-time split


def test_request_time_split_sums_to_the_total() -> None:
    """A request's stages come from its timer: queue = arrival to handler start plus
    the I/O worker wait, local = the handler's time less its queue and remote waits,
    response queue = ready to picked, send = picked to sent; their sum is the total."""
    registry = new_registry()
    metrics = RequestMetrics(registry)
    timer = RequestTimer(10.0)
    timer.api = "Produce"
    timer.started = 10.002  # 2 ms between the frame read and the handler
    timer.queued = 0.001  # 1 ms waiting for an I/O worker
    timer.remote = 0.020  # 20 ms parked for acks=all
    timer.ready = 10.030  # the handler took 28 ms: 7 of them its own work
    timer.picked = 10.034  # 4 ms behind an earlier answer
    metrics.record(timer, 10.035, response_queue=True)  # 1 ms to write
    found = scrape(registry)
    stages = {
        "requestqueuetimems": 3.0,
        "localtimems": 7.0,
        "remotetimems": 20.0,
        "responsequeuetimems": 4.0,
        "responsesendtimems": 1.0,
    }
    name = "kafka_network_requestmetrics_"
    for stage, ms in stages.items():
        assert abs(at(found, f"{name}{stage}_sum", request="Produce") - ms) < 1e-6, stage
        assert at(found, f"{name}{stage}_count", request="Produce") == 1
    assert abs(at(found, f"{name}totaltimems_sum", request="Produce") - 35.0) < 1e-6
    # The HTTP API has no response queue: it records none.
    http = RequestTimer(1.0)
    http.api = "Fetch"
    http.started = http.ready = http.picked = 1.0
    metrics.record(http, 1.001, response_queue=False)
    found = scrape(registry)
    assert at(found, f"{name}responsesendtimems_count", request="Fetch") == 1
    assert (f"{name}responsequeuetimems_count", (("request", "Fetch"),)) not in found


def test_waits_reach_the_running_request_only() -> None:
    """add_remote/add_queue add to the timer of the task that serves the request; a
    task it spawns (a background job: it copies the context) and code outside any
    request add nothing."""
    add_remote(5.0)  # no request: nothing to add to, no error

    async def main() -> RequestTimer:
        timer = RequestTimer(0.0)
        token = start_timing(timer)
        try:

            async def background() -> None:
                add_remote(0.25)
                add_queue(0.25)

            await asyncio.create_task(background())
            add_remote(0.5)
            add_queue(0.75)
        finally:
            stop_timing(token)
        add_remote(9.0)  # after the request: not counted
        return timer

    timer = asyncio.run(main())
    assert (timer.remote, timer.queued) == (0.5, 0.75)


# ------------------------------------------------------------------ leaders' high watermarks


def test_leader_high_watermarks_bounded_by_timeout_and_cached() -> None:
    """Two leaders: one answers ListOffsets, one never does. A refresh returns within
    its timeout with the first one's HWs only; a second refresh inside max_age asks
    nobody; a partition with no leader is not asked."""

    async def main() -> None:
        asked: list[object] = []
        hang = asyncio.Event()

        async def answers(request: web.Request) -> web.Response:
            body = await request.json()
            asked.append(body)
            responses = [
                {"topic": p["topic"], "partition": p["partition"], "offset": 40 + p["partition"]}
                for p in body["partitions"]
            ]
            return web.json_response({"responses": responses})

        async def hangs(_request: web.Request) -> web.Response:
            await hang.wait()
            return web.json_response({"responses": []})

        servers = []
        for handler in (answers, hangs):
            app = web.Application()
            app.add_routes([web.post("/v1/list-offsets", handler)])
            servers.append(TestServer(app))
        for server in servers:
            await server.start_server()
        leaders = {("t", 0): 1, ("t", 1): 1, ("u", 0): 2, ("v", 0): NO_LEADER}
        topics = SimpleNamespace(
            partition_by_name=lambda t, p: SimpleNamespace(leader=leaders[(t, p)])
        )
        addresses = {i + 1: f"{s.host}:{s.port}" for i, s in enumerate(servers)}
        now = [100.0]
        async with aiohttp.ClientSession() as session:
            hws = LeaderHighWatermarks(
                image=lambda: SimpleNamespace(topics=topics),
                address_of=addresses.get,
                session=lambda: session,
                wanted=lambda: leaders,
                timeout_s=0.3,
                max_age_s=1.0,
                clock=lambda: now[0],
            )
            started = time.monotonic()
            await hws.refresh()
            assert time.monotonic() - started < 2.0, "the refresh waited for the silent leader"
            assert (hws.get("t", 0), hws.get("t", 1)) == (40, 41)
            assert hws.get("u", 0) is None and hws.get("v", 0) is None
            assert len(asked) == 1 and hws.refreshes == 1
            await hws.refresh()  # inside max_age: the answers are reused
            assert len(asked) == 1 and hws.refreshes == 1
            now[0] += 1.0
            await hws.refresh()
            assert len(asked) == 2 and hws.refreshes == 2
        hang.set()
        for server in servers:
            await server.close()

    asyncio.run(main())
