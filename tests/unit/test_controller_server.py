"""The controller's server logic over an in-memory, single-node quorum engine.

``MemoryEngine`` below commits every append at once (it is a one-voter quorum) and
hands the payload to the listener, as the real engines do, with one twist borrowed
from them: a new leader's first entry is a control record the listener never sees, so
offsets have a gap. The tests drive the aiohttp app through aiohttp's test client on
loopback and check each endpoint's happy path and its bad inputs (which must change
nothing), NOT_CONTROLLER on a follower, the single event queue's ordering, the
broker epoch = registration offset rule, the long poll woken by a commit, and the
snapshot served below the log start. Time is a fake clock the tests move.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from raftka.common.errors import OffsetOutOfRangeError
from raftka.metadata.controller_api import CreatableTopic
from raftka.metadata.controller_process import ControllerServer
from raftka.metadata.delta import image_from_records
from raftka.metadata.metadata_records import record_from_dict
from raftka.raft.quorum.engine import (
    CommitListener,
    CommittedRecord,
    NotLeaderError,
    QuorumInfo,
    VoterState,
)
from raftka.server_common.node_config import node_config_from_properties


class MemoryEngine:
    """A single-node QuorumEngine in memory (or a follower that knows a leader)."""

    def __init__(self, node_id: int = 1, *, leader_id: int | None = None) -> None:
        self._node_id = node_id
        self._leader_id = node_id if leader_id is None else leader_id
        self._epoch = 1
        self._end = 0
        self._hw = 0
        self.entries: list[CommittedRecord] = []
        self.log_start = 0
        self.snapshot: tuple[int, int, bytes] | None = None
        self.listener: CommitListener | None = None
        self.appends = 0

    node_id = property(lambda self: self._node_id)
    leader_id = property(lambda self: self._leader_id)
    epoch = property(lambda self: self._epoch)
    high_watermark = property(lambda self: self._hw)
    is_leader = property(lambda self: self._leader_id == self._node_id)

    async def start(self, listener: CommitListener) -> None:
        self.listener = listener
        if self.is_leader:
            self._end = self._hw = 1  # the leader's control record at offset 0
        listener.handle_leader_change(self._leader_id, self._epoch)

    async def stop(self) -> None:
        pass

    def commit(self, payloads: Sequence[bytes]) -> int:
        """Commit at once; the listener hears of it on the next loop turn, after
        ``append`` returned (a real engine gives no order between the two)."""
        new = [CommittedRecord(self._end + i, self._epoch, p) for i, p in enumerate(payloads)]
        self._end += len(payloads)
        self._hw = self._end
        self.entries.extend(new)
        assert self.listener is not None
        asyncio.get_running_loop().call_soon(self.listener.handle_commit, new)
        return new[-1].offset

    async def append(self, payloads: Sequence[bytes], *, timeout_ms: int) -> int:
        if not self.is_leader:
            raise NotLeaderError("not the leader", self._leader_id)
        self.appends += 1
        await asyncio.sleep(0)  # let other tasks run, as a real append would
        return self.commit(payloads)

    async def read_barrier(self, *, timeout_ms: int) -> int:
        if not self.is_leader:
            raise NotLeaderError("not the leader", self._leader_id)
        return self._hw

    def read_committed(self, from_offset: int, records_max: int) -> Sequence[CommittedRecord]:
        if from_offset < self.log_start:
            raise OffsetOutOfRangeError(f"{from_offset} < {self.log_start}")
        return [e for e in self.entries if e.offset >= from_offset][:records_max]

    def latest_snapshot(self) -> tuple[int, int, bytes] | None:
        return self.snapshot

    def save_snapshot(self, end_offset: int, data: bytes) -> None:
        assert end_offset <= self._hw
        self.snapshot = (end_offset, self._epoch, data)
        self.log_start = end_offset
        self.entries = [e for e in self.entries if e.offset >= end_offset]

    def describe(self) -> QuorumInfo:
        return QuorumInfo(
            node_id=self._node_id,
            leader_id=self._leader_id,
            epoch=self._epoch,
            high_watermark=self._hw,
            log_end_offset=self._end,
            log_start_offset=self.log_start,
            role="leader" if self.is_leader else "follower",
            voters=(VoterState(1, self._end, 0, 0), VoterState(2, -1, -1, -1)),
            observers=(),
        )

    def routes(self) -> Sequence[web.RouteDef]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


Scenario = Callable[[TestClient[web.Request, web.Application], ControllerServer], Awaitable[None]]


def run(
    tmp_path: Path,
    scenario: Scenario,
    *,
    engine: MemoryEngine | None = None,
    clock: Clock | None = None,
    **props: str,
) -> None:
    config = node_config_from_properties(
        {
            "node.id": "1",
            "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.1:19094",
            "metadata.log.dir": str(tmp_path),
            "broker.session.timeout.ms": "1000",
            **{k.replace("_", "."): v for k, v in props.items()},
        }
    )

    async def main() -> None:
        server = ControllerServer(
            config, engine or MemoryEngine(), clock_ms=clock or Clock(), rng=random.Random(7)
        )
        await server.start(listen=False)
        async with TestClient(TestServer(server.app)) as client:
            await scenario(client, server)
        await server.stop()

    asyncio.run(main())


async def call(
    client: TestClient[web.Request, web.Application],
    method: str,
    path: str,
    body: object = None,
    *,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    kwargs: dict[str, Any] = {}
    if raw is not None:
        kwargs["data"] = raw
    elif body is not None:
        kwargs["json"] = body
    response = await client.request(method, path, **kwargs)
    return response.status, await response.json()


async def register(client: Any, broker_id: int, *, unfence: bool = True) -> int:
    status, body = await call(
        client,
        "POST",
        "/v1/brokers/register",
        {
            "broker_id": broker_id,
            "incarnation_id": str(uuid.UUID(int=broker_id)),
            "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + broker_id}],
        },
    )
    assert status == 200, body
    epoch = int(body["broker_epoch"])
    if unfence:
        status, body = await call(
            client,
            "POST",
            "/v1/brokers/heartbeat",
            {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": epoch},
        )
        assert status == 200 and body["is_fenced"] is False, body
    return epoch


def test_register_epoch_is_the_record_offset(tmp_path: Path) -> None:
    """A broker's epoch is the offset its RegisterBrokerRecord got in the log, across the
    leader's control-record gap and after other commands; heartbeats unfence it."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        first = await register(client, 1)  # register + unfence: offsets 1, 2
        second = await register(client, 2)
        status, body = await call(client, "GET", "/v1/metadata?offset=0")
        assert status == 200
        offsets = {
            r["data"]["broker_id"]: b["offset"]
            for b in body["batches"]
            for r in b["records"]
            if r["type"] == "RegisterBrokerRecord"
        }
        assert offsets == {1: first, 2: second}
        assert first == 1  # offset 0 is the control record
        broker = server.loader.image.cluster.broker(2)
        assert broker is not None and broker.epoch == second and not broker.fenced

    run(tmp_path, scenario)


def test_heartbeat_errors_change_nothing(tmp_path: Path) -> None:
    """Unknown broker, stale epoch, malformed JSON, wrong types and unknown fields each
    answer a named Kafka error with a 400 and append nothing."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        epoch = await register(client, 1)
        engine = server.engine
        assert isinstance(engine, MemoryEngine)
        before = engine.appends
        hb = {"broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": 5}
        cases: list[tuple[dict[str, Any] | None, bytes | None, str, str]] = [
            ({**hb, "broker_id": 9}, None, "BROKER_ID_NOT_REGISTERED", "Broker 9"),
            ({**hb, "broker_epoch": epoch + 100}, None, "STALE_BROKER_EPOCH", "Expected"),
            (None, b"{not json", "INVALID_REQUEST", "not valid JSON"),
            (None, b"[1, 2]", "INVALID_REQUEST", "Expected `object`"),
            ({**hb, "broker_id": "1"}, None, "INVALID_REQUEST", "broker_id"),
            ({**hb, "broker_id": True}, None, "INVALID_REQUEST", "broker_id"),
            ({**hb, "want_fence": 1}, None, "INVALID_REQUEST", "want_fence"),
            ({**hb, "extra": 1}, None, "INVALID_REQUEST", "unknown field `extra`"),
            ({"broker_id": 1}, None, "INVALID_REQUEST", "broker_epoch"),
        ]
        for body, raw, name, text in cases:
            status, answer = await call(client, "POST", "/v1/brokers/heartbeat", body, raw=raw)
            assert status == 400, (body, answer)
            assert answer["error"] == name and text in answer["message"], answer
            assert isinstance(answer["error_code"], int)
        status, answer = await call(
            client,
            "POST",
            "/v1/brokers/register",
            {"broker_id": 2, "incarnation_id": "x", "endpoints": [{"name": "P", "host": "h"}]},
        )
        assert status == 400 and "`port`" in answer["message"], answer
        assert "endpoints[0]" in answer["message"], answer
        assert engine.appends == before

    run(tmp_path, scenario)


def test_admin_endpoints_happy_paths(tmp_path: Path) -> None:
    """Create topics, describe and alter configs, add partitions, AlterPartition,
    allocate producer ids, describe the quorum, delete topics: each answers as
    documented and its effect is in the replayed image."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        epochs = {b: await register(client, b) for b in (1, 2)}
        status, body = await call(
            client,
            "POST",
            "/v1/topics",
            {
                "topics": [
                    {"name": "orders", "num_partitions": 2, "replication_factor": 2},
                    {"name": "logs", "assignments": [[2, 1]], "configs": {"retention.ms": "1000"}},
                    {"name": "bad name!"},
                ]
            },
        )
        assert status == 200, body
        results = {t["name"]: t for t in body["topics"]}
        assert results["orders"]["error"] is None and results["orders"]["num_partitions"] == 2
        assert results["logs"]["replication_factor"] == 2
        assert results["bad name!"]["error"]["error"] == "INVALID_TOPIC_EXCEPTION"
        image = server.loader.image
        assert set(image.topics.by_name) == {"orders", "logs"}

        status, body = await call(client, "GET", "/v1/configs?topic=logs&key=retention.ms")
        assert status == 200 and body["entries"][0]["value"] == "1000", body
        assert body["entries"][0]["source"] == "DYNAMIC_TOPIC_CONFIG"
        status, body = await call(
            client,
            "POST",
            "/v1/configs",
            {
                "resources": [
                    {
                        "resource_type": "topic",
                        "resource_name": "logs",
                        "ops": [{"name": "retention.ms", "op": "SET", "value": "2000"}],
                    }
                ]
            },
        )
        assert status == 200 and body["resources"][0]["error"] is None, body
        status, body = await call(client, "GET", "/v1/configs?topic=logs&key=retention.ms")
        assert body["entries"][0]["value"] == "2000"
        status, body = await call(client, "GET", "/v1/configs?topic=nope")
        assert status == 404 and body["error"] == "UNKNOWN_TOPIC_OR_PARTITION"

        status, body = await call(
            client, "POST", "/v1/partitions", {"topics": [{"name": "orders", "count": 3}]}
        )
        assert status == 200 and body["topics"][0]["error"] is None, body
        orders = server.loader.image.topics.topic_by_name("orders")
        assert orders is not None and len(orders.partitions) == 3

        logs = server.loader.image.topics.topic_by_name("logs")
        assert logs is not None
        p0 = logs.partitions[0]
        assert p0.leader == 2 and p0.isr == (2, 1)
        status, body = await call(
            client,
            "POST",
            "/v1/alter-partition",
            {
                "broker_id": 2,
                "broker_epoch": epochs[2],
                "topic_id": logs.topic_id,
                "partition": 0,
                "leader_epoch": p0.leader_epoch,
                "partition_epoch": p0.partition_epoch,
                "new_isr": [2],
            },
        )
        assert status == 200 and body["isr"] == [2], body
        assert body["partition_epoch"] == p0.partition_epoch + 1

        status, body = await call(
            client, "POST", "/v1/producer-ids", {"broker_id": 1, "broker_epoch": epochs[1]}
        )
        assert status == 200 and body == {"producer_id_start": 0, "producer_id_len": 1000}
        status, body = await call(
            client, "POST", "/v1/producer-ids", {"broker_id": 1, "broker_epoch": epochs[1]}
        )
        assert body["producer_id_start"] == 1000

        status, body = await call(client, "GET", "/v1/quorum")
        assert status == 200 and body["leader_id"] == 1 and body["role"] == "leader", body
        assert body["voters"][1] == {
            "node_id": 2,
            "address": "127.0.0.1:19094",
            "log_end_offset": None,
            "lag": None,
            "last_fetch_ms": None,
            "last_caught_up_ms": None,
        }
        assert body["high_watermark"] == server.engine.high_watermark

        status, body = await call(client, "DELETE", "/v1/topics", {"names": ["orders", "ghost"]})
        assert status == 200
        assert body["topics"][0]["error"] is None
        assert body["topics"][1]["error"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert set(server.loader.image.topics.by_name) == {"logs"}

        status, body = await call(client, "GET", "/health")
        assert status == 200 and body["active_controller"] is True

    run(tmp_path, scenario)


def test_follower_answers_not_controller(tmp_path: Path) -> None:
    """A follower refuses every write with 503 NOT_CONTROLLER naming the leader's id and
    address, but serves reads from its committed state."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        writes = [
            ("/v1/brokers/register", {"broker_id": 1, "incarnation_id": "a", "endpoints": []}),
            ("/v1/topics", {"topics": [{"name": "t"}]}),
            ("/v1/producer-ids", {"broker_id": 1, "broker_epoch": 1}),
        ]
        for path, body in writes:
            status, answer = await call(client, "POST", path, body)
            assert status == 503, answer
            assert answer["error"] == "NOT_CONTROLLER" and answer["error_code"] == 41
            assert answer["leader_id"] == 2 and answer["leader_address"] == "127.0.0.1:19094"
        status, answer = await call(client, "GET", "/v1/metadata?offset=0")
        assert status == 200 and answer["batches"] == []
        status, answer = await call(client, "GET", "/health")
        assert status == 200 and answer["active_controller"] is False

    run(tmp_path, scenario, engine=MemoryEngine(1, leader_id=2))


def test_queue_orders_concurrent_creates(tmp_path: Path) -> None:
    """Two concurrent creates of one topic go through the single queue: the second sees
    the first's committed records and gets TOPIC_ALREADY_EXISTS."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        await register(client, 1)
        body = {"topics": [{"name": "dup", "num_partitions": 1, "replication_factor": 1}]}
        answers = await asyncio.gather(
            call(client, "POST", "/v1/topics", body), call(client, "POST", "/v1/topics", body)
        )
        errors = sorted(
            str(a[1]["topics"][0]["error"] and a[1]["topics"][0]["error"]["error"]) for a in answers
        )
        assert errors == ["None", "TOPIC_ALREADY_EXISTS"], answers
        assert len(server.loader.image.topics.by_name) == 1

        # Queued back to back, before the consumer runs: the second command must still
        # see the first one's records (the queue waits for commit and replay).
        topic = [CreatableTopic("dup2", num_partitions=1, replication_factor=1)]

        def create(c: Any, image: Any, now: int, nxt: int) -> Any:
            return c.create_topics(image, topic, rng=random.Random(1))

        results = await asyncio.gather(
            server.submit("create", create), server.submit("create", create)
        )
        names = sorted(str(r.topics[0].error and r.topics[0].error.name) for r in results)
        assert names == ["None", "TOPIC_ALREADY_EXISTS"], results

    run(tmp_path, scenario)


def test_metadata_long_poll_woken_by_commit(tmp_path: Path) -> None:
    """A fetch at the end of the log parks; the next commit wakes it (long before its
    30 s wait) with the new payload; with max_wait_ms=0 it answers empty at once."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        await register(client, 1)
        end = server.engine.high_watermark
        status, body = await call(client, "GET", f"/v1/metadata?offset={end}&max_wait_ms=0")
        assert status == 200 and body["batches"] == [] and body["next_offset"] == end
        poll = asyncio.create_task(
            call(client, "GET", f"/v1/metadata?offset={end}&max_wait_ms=30000")
        )
        # The poll is parked: it cannot finish before something commits.
        done, _ = await asyncio.wait({poll}, timeout=0.05)
        assert not done
        await call(client, "POST", "/v1/topics", {"topics": [{"name": "woke"}]})
        status, body = await asyncio.wait_for(poll, 5)
        assert status == 200
        assert [b["offset"] for b in body["batches"]] == [end]
        assert body["batches"][0]["records"][0]["type"] == "TopicRecord"
        assert body["next_offset"] == end + 1

    run(tmp_path, scenario)


def test_snapshot_served_below_log_start(tmp_path: Path) -> None:
    """With a tiny snapshot threshold the controller snapshots its image through the
    engine, which drops the prefix; a fetch from offset 0 then gets the snapshot (its
    records rebuild the controller's image) and continues after it."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        await register(client, 1)
        await call(client, "POST", "/v1/topics", {"topics": [{"name": "snap"}]})
        engine = server.engine
        assert isinstance(engine, MemoryEngine)
        # Snapshots are encoded on a worker thread after the commit, then saved on the
        # loop: wait for that with a deadline.
        deadline = asyncio.get_running_loop().time() + 10
        while not (engine.snapshot is not None and engine.snapshot[0] == engine.high_watermark):
            assert asyncio.get_running_loop().time() < deadline, (
                f"no snapshot at the high watermark {engine.high_watermark} within 10 s "
                f"(have {engine.snapshot and engine.snapshot[0]})"
            )
            await asyncio.sleep(0.005)
        assert engine.log_start == engine.high_watermark
        status, body = await call(client, "GET", "/v1/metadata?offset=0")
        assert status == 200 and body["snapshot"] is not None, body
        snapshot = body["snapshot"]
        assert body["next_offset"] == snapshot["end_offset"] == engine.high_watermark
        records = [record_from_dict(r) for r in snapshot["records"]]
        rebuilt = image_from_records(records, snapshot["end_offset"] - 1, snapshot["epoch"])
        assert rebuilt == server.loader.image
        # A second loader started from the snapshot holds the same image.
        status, body = await call(client, "GET", f"/v1/metadata?offset={body['next_offset']}")
        assert body["snapshot"] is None and body["batches"] == []

    run(tmp_path, scenario, metadata_log_max_record_bytes_between_snapshots="1")


def test_session_expiry_fences_silent_broker(tmp_path: Path) -> None:
    """A broker that stops heartbeating is fenced by the session timer once
    broker.session.timeout.ms passes on the controller's clock, not before."""
    clock = Clock()

    async def scenario(client: Any, server: ControllerServer) -> None:
        await register(client, 1)
        clock.now_ms += 1000  # exactly the timeout: still alive
        await server.tick()
        broker = server.loader.image.cluster.broker(1)
        assert broker is not None and not broker.fenced
        clock.now_ms += 1
        await server.tick()
        broker = server.loader.image.cluster.broker(1)
        assert broker is not None and broker.fenced

    run(tmp_path, scenario, clock=clock)


def test_bad_query_and_path_errors(tmp_path: Path) -> None:
    """Bad query parameters and unknown paths answer JSON errors, never HTML or a
    traceback."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        for path, status_expected, text in [
            ("/v1/metadata?offset=abc", 400, "offset"),
            ("/v1/metadata?offset=0&records_max=0", 400, "records_max"),
            ("/v1/metadata?offset=0&bogus=1", 400, "bogus"),
            ("/v1/configs", 400, "topic"),
            ("/v1/nothing-here", 404, "/v1/nothing-here"),
        ]:
            status, body = await call(client, "GET", path)
            assert status == status_expected, (path, body)
            assert body["error"] == "INVALID_REQUEST" and text in body["message"], body

    run(tmp_path, scenario)


def test_acl_routes_create_describe_delete(tmp_path: Path) -> None:
    """POST /v1/acls answers per binding (a bad one fails alone with INVALID_REQUEST),
    GET /v1/acls filters by query parameters, POST /v1/acls/delete lists what each
    filter removed; the image follows; a strict body and a bad filter are refused."""

    def acl(principal: str, operation: str = "READ", **over: str) -> dict[str, str]:
        return {
            "resource_type": "TOPIC",
            "resource_name": "orders",
            "pattern_type": "LITERAL",
            "principal": principal,
            "host": "*",
            "operation": operation,
            "permission_type": "ALLOW",
            **over,
        }

    async def scenario(client: Any, server: ControllerServer) -> None:
        creations = [
            acl("User:alice"),
            acl("User:bob", "WRITE", pattern_type="PREFIXED", resource_name="ord"),
            acl("alice"),  # no principal type
            acl("User:carol", "ANY"),
            acl("User:alice"),  # repeated: a success that adds nothing
        ]
        status, body = await call(client, "POST", "/v1/acls", {"creations": creations})
        assert status == 200, body
        errors = [r["error"] and r["error"]["error"] for r in body["results"]]
        assert errors == [None, None, "INVALID_REQUEST", "INVALID_REQUEST", None]
        assert len(server.loader.image.acl_bindings()) == 2

        status, body = await call(client, "GET", "/v1/acls?principal=User:bob")
        assert status == 200 and body["acls"] == [creations[1]], body
        status, body = await call(
            client, "GET", "/v1/acls?resource_type=TOPIC&resource_name=orders&pattern_type=MATCH"
        )
        assert status == 200 and len(body["acls"]) == 2, body
        status, body = await call(client, "GET", "/v1/acls?operation=Read")
        assert status == 400 and body["error"] == "INVALID_REQUEST", body

        status, body = await call(
            client, "POST", "/v1/acls/delete", {"filters": [{"operation": "WRITE"}, {"host": "h"}]}
        )
        assert status == 200, body
        assert [f["matching_acls"] for f in body["filter_results"]] == [[creations[1]], []]
        assert [b.entry.principal for b in server.loader.image.acl_bindings()] == ["User:alice"]

        status, body = await call(
            client, "POST", "/v1/acls", {"creations": [{**acl("User:d"), "extra": 1}]}
        )
        assert status == 400 and "extra" in body["message"], body

    run(tmp_path, scenario)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"topics": "orders"}, "topics"),
        ({"topics": [{"name": 5}]}, "topics[0].name"),
        ({"topics": [{"name": "a", "num_partitions": "3"}]}, "topics[0].num_partitions"),
        ({"topics": [{"name": "a", "configs": {"retention.ms": 5}}]}, "topics[0].configs"),
        ({"topics": [{"name": "a", "assignments": [[1, "2"]]}]}, "assignments[0]"),
        ({"topics": [{"name": "a"}], "validate_only": "yes"}, "validate_only"),
    ],
)
def test_create_topics_type_errors(tmp_path: Path, body: dict[str, Any], field: str) -> None:
    """Each wrongly typed field of CreateTopics is refused naming the field; nothing is
    created."""

    async def scenario(client: Any, server: ControllerServer) -> None:
        status, answer = await call(client, "POST", "/v1/topics", body)
        assert status == 400 and answer["error"] == "INVALID_REQUEST", answer
        assert field in answer["message"], answer
        assert server.loader.image.topics.by_name == {}

    run(tmp_path, scenario)


def test_the_brokers_senders_speak_the_routes_messages(tmp_path: Path) -> None:
    """The broker's own senders against the controller's routes, over loopback: the
    lifecycle registers and heartbeats until unfenced, the producer-id manager gets a
    block, and the metadata follower replays the log to the controller's own image.
    Both ends use the classes of common/messages/controller.py, so a field renamed on
    one side only fails here."""
    import aiohttp

    from raftka.broker.lifecycle import BrokerLifecycle, ControllerChannel
    from raftka.broker.metadata_follower import MetadataFollower
    from raftka.broker.producer_ids import ProducerIdManager

    async def scenario(client: Any, server: ControllerServer) -> None:
        address = f"{client.server.host}:{client.server.port}"
        async with aiohttp.ClientSession() as session:
            channel = ControllerChannel([address], session)
            lifecycle = BrokerLifecycle(
                broker_id=3,
                channel=channel,
                endpoint=("PLAINTEXT", "127.0.0.1", 9103),
                rack="r1",
                metadata_offset=lambda: server.loader.image.offset,
                heartbeat_interval_ms=100,
                request_timeout_ms=5_000,
            )
            epoch = await lifecycle.register()
            answer = await lifecycle.heartbeat()
            assert not answer.is_fenced and not lifecycle.is_fenced, answer
            broker = server.loader.image.cluster.broker(3)
            assert broker is not None and broker.epoch == epoch and broker.rack == "r1"

            async def post(path: str, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
                return await channel.post(path, body, timeout_ms=timeout_ms)

            ids = ProducerIdManager(post=post, broker_id=3, broker_epoch=lambda: epoch)
            assert await ids.next_producer_id(timeout_ms=5_000) >= 0
            await ids.close()

            applied: list[int] = []

            async def listener(image: Any, changes: Any) -> None:
                applied.append(image.offset)

            follower = MetadataFollower(
                broker_id=3, controllers=[address], session=session, listener=listener
            )
            task = asyncio.create_task(follower.run())
            await asyncio.wait_for(follower.caught_up.wait(), 10)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert follower.image == server.loader.image and applied

    run(tmp_path, scenario)


class _HangingEngine(MemoryEngine):
    """Appends that never commit once ``hang`` is set, as when the quorum is gone."""

    hang = False

    async def append(self, payloads: Sequence[bytes], *, timeout_ms: int) -> int:
        if self.hang:
            self.appends += 1
            await asyncio.Event().wait()
        return await super().append(payloads, timeout_ms=timeout_ms)


def test_a_command_in_progress_when_the_controller_stops_is_answered(tmp_path: Path) -> None:
    """The queue's task is cancelled on stop; a command it was running (its records
    appended, the commit never coming) answers NOT_CONTROLLER instead of leaving its
    caller, and aiohttp's shutdown, waiting: three combined-mode nodes stopped together
    hung one of them for over a minute."""
    engine = _HangingEngine()

    async def scenario(client: Any, server: ControllerServer) -> None:
        engine.hang = True
        pending = asyncio.ensure_future(
            call(
                client,
                "POST",
                "/v1/brokers/register",
                {
                    "broker_id": 7,
                    "incarnation_id": str(uuid.UUID(int=7)),
                    "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9107}],
                },
            )
        )
        deadline = asyncio.get_running_loop().time() + 10
        while engine.appends == 0:
            assert asyncio.get_running_loop().time() < deadline, "the register never appended"
            await asyncio.sleep(0.01)
        await server.stop()
        status, body = await asyncio.wait_for(pending, 10)
        assert status != 200 and "NOT_CONTROLLER" in str(body), (status, body)

    run(tmp_path, scenario, engine=engine)
