"""The Kafka listener's framing and limits, in process (no broker behind it).

ApiVersions needs nothing of the broker, so a :class:`KafkaListener` over a stand-in
server answers it; every other API is exercised against real brokers in
tests/integration/test_kafka_protocol.py. Checked here: header/response framing
round-trips through kio; pipelined requests are answered in order; an unsupported
ApiVersions version gets UNSUPPORTED_VERSION with our ranges; ``socket.request.max.bytes``,
``connections.max.idle.ms`` and ``max.connections`` close what they should and only that;
the ``listeners`` keys are parsed and other security protocols refused by name.
"""

from __future__ import annotations

import asyncio
import io
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsV3
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from raftka.broker.config import KafkaListenerConfig, kafka_listener_config
from raftka.broker.kafka import KafkaListener
from raftka.broker.kafka.apis import SUPPORTED
from raftka.broker.kafka.framing import FrameError, encode_response, frame_size, parse_header
from raftka.broker.metrics import BrokerMetrics
from raftka.server_common.metrics import new_registry
from raftka.server_common.process_config import ConfigError

DEADLINE_S = 5.0


def api_versions_frame(correlation_id: int, version: int = 3) -> bytes:
    """An ApiVersions request as librdkafka sends it (v3: header v2, flexible body)."""
    header = struct.pack(">hhi", 18, version, correlation_id) + struct.pack(">h", 4) + b"test"
    if version >= 3:
        header += b"\x00"  # header tagged fields
        body = b"\x05raft" + b"\x021" + b"\x00"  # compact strings name, version; tags
    else:
        body = b""
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))
    return await asyncio.wait_for(reader.readexactly(size), DEADLINE_S)


async def closed(reader: asyncio.StreamReader) -> bool:
    """True once the peer has closed the connection (EOF within the deadline)."""
    try:
        return await asyncio.wait_for(reader.read(1), DEADLINE_S) == b""
    except ConnectionError:
        return True


def listener(**limits: int) -> KafkaListener:
    config = KafkaListenerConfig(
        host="127.0.0.1", port=0, advertised_host="127.0.0.1", advertised_port=9092, **limits
    )
    # ApiVersions touches nothing of the broker but its request metrics: a stand-in
    # with those is enough.
    server = SimpleNamespace(metrics=BrokerMetrics(new_registry()))
    return KafkaListener(cast(Any, server), config)


def test_frame_size_bounds() -> None:
    assert frame_size(struct.pack(">i", 100), 1000) == 100
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        frame_size(struct.pack(">i", 1001), 1000)
    with pytest.raises(FrameError, match="smaller than a request header"):
        frame_size(struct.pack(">i", -1), 1000)


def test_header_v2_and_response_round_trip() -> None:
    frame = api_versions_frame(7)[4:]
    header = parse_header(frame, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 7)
    assert header.client_id == "test"
    assert frame[header.body_offset :] == b"\x05raft\x021\x00"
    with pytest.raises(FrameError):
        parse_header(frame[:9], flexible=True)
    out = encode_response(7, b"body", flexible_header=True)
    assert out == struct.pack(">i", 9) + struct.pack(">i", 7) + b"\x00" + b"body"


def test_pipelined_requests_are_answered_in_order() -> None:
    asyncio.run(_test_pipelined_requests_are_answered_in_order())


async def _test_pipelined_requests_are_answered_in_order() -> None:
    kafka = listener()
    await kafka.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", kafka.port)
        writer.write(b"".join(api_versions_frame(i) for i in range(20)))
        # Half-closed right away: what was sent before is still answered.
        writer.write_eof()
        await writer.drain()
        for i in range(20):
            frame = await read_frame(reader)
            assert struct.unpack_from(">i", frame)[0] == i
            # Response header v0 for ApiVersions, whatever its version.
            answer, _ = entity_reader(ApiVersionsV3)(frame, 4)
            assert answer.error_code == ErrorCode.none
            served = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
            assert served == SUPPORTED
        assert await closed(reader), "the broker closes once every answer is written"
        writer.close()
        # Each answered request was timed under Kafka's API name.
        registry = kafka._apis._server.metrics.registry
        labels = {"request": "ApiVersions"}
        stages = ("requestqueuetimems", "localtimems", "responsequeuetimems", "responsesendtimems")
        names = ("requests_total", "totaltimems_count", *(f"{s}_count" for s in stages))
        for name in names:
            answered = registry.get_sample_value(f"kafka_network_requestmetrics_{name}", labels)
            assert answered == 20, name
        # ApiVersions never parks: its remote stage took no time and is not exported.
        remote = "kafka_network_requestmetrics_remotetimems_count"
        assert registry.get_sample_value(remote, labels) is None

        def ms(name: str) -> float:
            found = registry.get_sample_value(f"kafka_network_requestmetrics_{name}", labels)
            assert found is not None, name
            return float(found)

        # The Kafka listener has every stage, response queue included: they add up.
        parts = sum(ms(f"{s}_sum") for s in stages)
        assert abs(ms("totaltimems_sum") - parts) < 1e-6 + 1e-9 * parts
    finally:
        await kafka.close()


def test_unsupported_api_versions_version_gets_the_ranges() -> None:
    asyncio.run(_test_unsupported_api_versions_version_gets_the_ranges())


async def _test_unsupported_api_versions_version_gets_the_ranges() -> None:
    kafka = listener()
    await kafka.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", kafka.port)
        writer.write(api_versions_frame(5, version=99))
        frame = await read_frame(reader)
        assert struct.unpack_from(">i", frame)[0] == 5
        answer, _ = entity_reader(ApiVersionsV0)(frame, 4)
        assert answer.error_code == ErrorCode.unsupported_version
        assert {a.api_key for a in answer.api_keys} == set(SUPPORTED)
        # The connection stays usable: the client downgrades and asks again.
        writer.write(api_versions_frame(6, version=3))
        assert struct.unpack_from(">i", await read_frame(reader))[0] == 6
        writer.close()
    finally:
        await kafka.close()


def test_limits_close_only_the_offending_connection() -> None:
    asyncio.run(_test_limits_close_only_the_offending_connection())


async def _test_limits_close_only_the_offending_connection() -> None:
    kafka = listener(socket_request_max_bytes=1000, max_connections=2)
    await kafka.start()
    try:
        good_r, good_w = await asyncio.open_connection("127.0.0.1", kafka.port)
        bad_r, bad_w = await asyncio.open_connection("127.0.0.1", kafka.port)
        bad_w.write(struct.pack(">i", 1001))  # above socket.request.max.bytes
        assert await closed(bad_r), "an oversized request must close its connection"
        # An unknown API key closes its connection too (Kafka's behaviour).
        unknown_r, unknown_w = await asyncio.open_connection("127.0.0.1", kafka.port)
        frame = struct.pack(">hhih", 999, 0, 1, -1)
        unknown_w.write(struct.pack(">i", len(frame)) + frame)
        assert await closed(unknown_r)
        good_w.write(api_versions_frame(1))
        assert struct.unpack_from(">i", await read_frame(good_r))[0] == 1
        # max.connections=2: with two open, a third is closed at once.
        second_r, second_w = await asyncio.open_connection("127.0.0.1", kafka.port)
        second_w.write(api_versions_frame(2))
        await read_frame(second_r)
        third_r, third_w = await asyncio.open_connection("127.0.0.1", kafka.port)
        assert await closed(third_r), "a connection beyond max.connections must be closed"
        assert kafka.connections_refused >= 1
        for w in (good_w, bad_w, unknown_w, second_w, third_w):
            w.close()
    finally:
        await kafka.close()


def test_idle_connections_close_after_connections_max_idle_ms() -> None:
    asyncio.run(_test_idle_connections_close_after_connections_max_idle_ms())


async def _test_idle_connections_close_after_connections_max_idle_ms() -> None:
    kafka = listener(connections_max_idle_ms=200)
    await kafka.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", kafka.port)
        writer.write(api_versions_frame(1))
        await read_frame(reader)
        started = time.monotonic()
        assert await closed(reader), "an idle connection must be closed"
        assert time.monotonic() - started >= 0.15
        writer.close()
    finally:
        await kafka.close()


def test_listeners_config() -> None:
    assert kafka_listener_config({"listeners": "PLAINTEXT://h:9092"}) is None
    got = kafka_listener_config(
        {
            "listeners": "HTTP://0.0.0.0:8081,PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners": "HTTP://a:8081,PLAINTEXT://a:19092",
            "socket.request.max.bytes": "5000",
        }
    )
    assert got is not None
    assert (got.host, got.port, got.advertised_host, got.advertised_port) == (
        "0.0.0.0",
        9092,
        "a",
        19092,
    )
    assert got.socket_request_max_bytes == 5000
    # SASL is served, but only with a mechanism named (Kafka's default GSSAPI is not),
    # and SASL_SSL, like SSL, not without a certificate.
    with pytest.raises(ConfigError, match="the SASL_PLAINTEXT listener needs sasl"):
        kafka_listener_config({"listeners": "HTTP://h:1,SASL_PLAINTEXT://h:2"})
    with pytest.raises(ConfigError, match=r"needs ssl\.certfile"):
        kafka_listener_config({"listeners": "HTTP://h:1,SASL_SSL://h:2"})
    # SSL is served, but not without a certificate.
    with pytest.raises(ConfigError, match=r"needs ssl\.certfile"):
        kafka_listener_config({"listeners": "HTTP://h:1,SSL://h:2"})
    with pytest.raises(ConfigError, match="appears twice"):
        kafka_listener_config({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"})
    with pytest.raises(ConfigError, match="wildcard"):
        kafka_listener_config({"listeners": "HTTP://h:1,PLAINTEXT://0.0.0.0:2"})


def test_kio_writes_what_it_reads() -> None:
    # The response header v1 this listener writes is what kio reads back.
    from kio.schema.response_header.v1.header import ResponseHeader

    frame = encode_response(42, b"", flexible_header=True)
    header, size = entity_reader(ResponseHeader)(frame, 4)  # kio returns the bytes read
    assert header.correlation_id == 42 and 4 + size == len(frame)
    assert io.BytesIO(frame).read(4) == struct.pack(">i", 5)


# ------------------------------------------------------------------ config requests


class FakeChannel:
    """The controller channel: records what is forwarded; answers every resource as
    accepted, or raises ``failure``."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.failure = failure

    async def post(
        self, path: str, body: dict[str, Any], *, timeout_ms: int, method: str = "POST"
    ) -> dict[str, Any]:
        self.posts.append((path, body))
        if self.failure is not None:
            raise self.failure
        return {
            "resources": [
                {"resource_type": r["resource_type"], "resource_name": r["resource_name"]}
                for r in body["resources"]
            ]
        }


def config_apis(channel: FakeChannel, overrides: dict[str, str]) -> Any:
    from types import SimpleNamespace

    from raftka.broker.kafka.apis import KafkaApis

    configs = SimpleNamespace(
        topic_config=lambda name: overrides if name == "t" else {},
        broker_config=lambda broker_id: overrides if broker_id == 1 else {},
    )
    server = SimpleNamespace(
        channel=channel,
        manager=SimpleNamespace(image=SimpleNamespace(configs=configs)),
        config=SimpleNamespace(
            authorizer=None,
            request_timeout_ms=1000,
            node_id=1,
            controller_ids=(1,),
            controllers=("h:9093",),
        ),
    )
    return KafkaApis(cast(Any, server))


def test_alter_configs_replaces_the_overrides_and_refuses_unknown_types() -> None:
    """Legacy AlterConfigs: SET what is given, DELETE the resource's other overrides
    (a topic's, a broker's dynamic configs), as one forwarded request; a resource type
    raftka does not know is refused by itself, the others still forwarded; answers in
    request order."""
    from kio.schema.alter_configs.v0 import request as rq

    channel = FakeChannel()
    apis = config_apis(channel, {"retention.ms": "5", "segment.ms": "2"})
    request = rq.AlterConfigsRequest(
        resources=(
            rq.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=(rq.AlterableConfig(name="segment.ms", value="1"),),
            ),
            rq.AlterConfigsResource(resource_type=99, resource_name="x", configs=()),
            rq.AlterConfigsResource(
                resource_type=4,
                resource_name="1",
                configs=(rq.AlterableConfig(name="a", value="b"),),
            ),
        ),
        validate_only=False,
    )
    response = asyncio.run(apis.alter_configs(request, 0, None))
    assert channel.posts == [
        (
            "/v1/configs",
            {
                "resources": [
                    {
                        "resource_type": "topic",
                        "resource_name": "t",
                        "ops": [
                            {"name": "segment.ms", "op": "SET", "value": "1"},
                            {"name": "retention.ms", "op": "DELETE"},
                        ],
                    },
                    {
                        "resource_type": "broker",
                        "resource_name": "1",
                        "ops": [
                            {"name": "a", "op": "SET", "value": "b"},
                            {"name": "retention.ms", "op": "DELETE"},
                            {"name": "segment.ms", "op": "DELETE"},
                        ],
                    },
                ],
                "validate_only": False,
            },
        )
    ]
    assert [(r.resource_name, r.error_code) for r in response.responses] == [
        ("t", ErrorCode.none),
        ("x", ErrorCode.invalid_request),
        ("1", ErrorCode.none),
    ]


def test_incremental_alter_configs_bad_operation_and_controller_failure() -> None:
    """An unknown operation is refused without asking the controller; a controller
    that cannot be reached fails every forwarded resource with its error."""
    from kio.schema.incremental_alter_configs.v1 import request as rq

    from raftka.common.errors import RequestTimedOutError

    def resource(op: int) -> Any:
        return rq.AlterConfigsResource(
            resource_type=2,
            resource_name="t",
            configs=(rq.AlterableConfig(name="retention.ms", config_operation=op, value="9"),),
        )

    quiet = FakeChannel()
    bad = rq.IncrementalAlterConfigsRequest(resources=(resource(7),), validate_only=True)
    response = asyncio.run(config_apis(quiet, {}).incremental_alter_configs(bad, 1, None))
    assert quiet.posts == []
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request]

    down = FakeChannel(RequestTimedOutError("no controller"))
    good = rq.IncrementalAlterConfigsRequest(resources=(resource(1),), validate_only=True)
    response = asyncio.run(config_apis(down, {}).incremental_alter_configs(good, 1, None))
    ops = down.posts[0][1]["resources"][0]["ops"]
    assert ops == [{"name": "retention.ms", "op": "DELETE", "value": "9"}]
    assert down.posts[0][1]["validate_only"] is True
    assert [(r.error_code, r.error_message) for r in response.responses] == [
        (ErrorCode.request_timed_out, "no controller")
    ]


def test_describe_configs_of_a_broker_is_the_brokers_own() -> None:
    """A broker resource (type 4) named by this broker's id: its properties (static,
    read-only; a secret sensitive without its value) and its dynamic configs, its own
    before the cluster default; ``configuration_keys`` picks; the empty name is the
    cluster-wide defaults; another broker's id and an unknown type are INVALID_REQUEST."""
    from kio.schema.describe_configs.v4 import request as rq

    apis = config_apis(FakeChannel(), {})
    apis._server.broker_configs = lambda: (
        1,
        {"node.id": "1", "sasl.jaas.config": "secret"},
        {"follower.replication.throttled.rate": "5"},
        {"leader.replication.throttled.rate": "6", "follower.replication.throttled.rate": "7"},
    )

    def describe(kind: int, name: str, keys: tuple[str, ...] | None = None) -> Any:
        resource = rq.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=keys
        )
        request = rq.DescribeConfigsRequest(resources=(resource,))
        (result,) = asyncio.run(apis.describe_configs(request, 4, None)).results
        return result

    own = describe(4, "1")
    assert own.error_code == ErrorCode.none
    rows = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in own.configs}
    assert rows == {
        "follower.replication.throttled.rate": ("5", 2, False, False),  # DYNAMIC_BROKER
        "leader.replication.throttled.rate": ("6", 3, False, False),  # DYNAMIC_DEFAULT
        "node.id": ("1", 4, True, False),  # STATIC_BROKER_CONFIG
        "sasl.jaas.config": (None, 4, True, True),
    }
    picked = describe(4, "1", ("node.id",))
    assert [c.name for c in picked.configs] == ["node.id"]
    defaults = describe(4, "")
    assert {c.name: (c.value, c.config_source) for c in defaults.configs} == {
        "follower.replication.throttled.rate": ("7", 3),
        "leader.replication.throttled.rate": ("6", 3),
    }
    other = describe(4, "2")
    assert other.error_code == ErrorCode.invalid_request and not other.configs
    assert other.error_message is not None and "expected 1" in other.error_message
    unknown = describe(99, "x")
    assert unknown.error_code == ErrorCode.invalid_request
    assert unknown.error_message is not None and "topics and brokers only" in unknown.error_message


def _admin_request(key: int, version: int) -> Any:
    """A small request of ``key`` in ``version``, built with kio's own classes."""
    import datetime
    import sys

    from kio.index import load_request_schema

    cls = load_request_schema(key, version)
    m = sys.modules[cls.__module__]
    if key == 60:
        extra = {"endpoint_type": 1} if version >= 1 else {}
        return cls(include_cluster_authorized_operations=False, **extra)
    if key == 42:
        return cls(groups_names=("g",))
    if key == 37:
        topic = m.CreatePartitionsTopic(name="t", count=3, assignments=None)
        return cls(topics=(topic,), timeout=datetime.timedelta(seconds=1), validate_only=False)
    if key == 23:
        partition = m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=3)
        replica = {"replica_id": -1} if version >= 3 else {}
        return cls(topics=(m.OffsetForLeaderTopic(topic="t", partitions=(partition,)),), **replica)
    if key == 35:
        return cls(topics=None)
    if key == 32:
        return cls(
            resources=(
                m.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                ),
            )
        )
    config = (
        m.AlterableConfig(name="retention.ms", value="5")
        if key == 33
        else m.AlterableConfig(name="retention.ms", config_operation=0, value="5")
    )
    resource = m.AlterConfigsResource(resource_type=2, resource_name="t", configs=(config,))
    return cls(resources=(resource,), validate_only=False)


def test_admin_answers_encode_in_every_version_served(tmp_path: Path) -> None:
    """Each admin API added to the table answers a request of every version it
    advertises with a frame kio reads back (fields a version lacks dropped, every
    field it has filled), against stand-ins for the broker's services."""
    from types import SimpleNamespace

    from kio.index import load_response_schema

    from raftka.broker.kafka.apis import Call, KafkaApis
    from raftka.broker.replication.data_plane import EpochEndOffsetResult
    from raftka.common.messages import coordinator as group_api
    from raftka.common.record import Record, build_batch
    from raftka.storage import LogConfig
    from raftka.storage.log_manager import LogManager

    class Coordinator:
        async def delete_groups(self, m: Any, context: Any) -> Any:
            return group_api.DeleteGroupsResponse(
                results=tuple(group_api.DeleteGroupsResult(group_id=g) for g in m.groups)
            )

    class Channel(FakeChannel):
        async def post(
            self, path: str, body: dict[str, Any], *, timeout_ms: int, method: str = "POST"
        ) -> dict[str, Any]:
            if "topics" in body:
                return {"topics": [{"name": t["name"]} for t in body["topics"]]}
            return await super().post(path, body, timeout_ms=timeout_ms, method=method)

    logs = LogManager([tmp_path / "a", tmp_path / "b"])
    logs.get_or_open(("t", 0), LogConfig()).append_as_leader(build_batch([Record(b"x")]), 0)
    broker = SimpleNamespace(
        broker_id=1, rack=None, endpoint=lambda name: SimpleNamespace(host="h", port=9092)
    )
    image = SimpleNamespace(
        topics=SimpleNamespace(topic_by_name=lambda name: object()),
        configs=SimpleNamespace(
            topic_config=lambda name: {"retention.ms": "5"}, broker_config=lambda b: {}
        ),
        cluster=SimpleNamespace(live_brokers=lambda: [broker]),
    )
    server = SimpleNamespace(
        channel=Channel(),
        coordinator=Coordinator(),
        manager=SimpleNamespace(
            logs=logs,
            image=image,
            offsets_for_leader_epoch=lambda entries: [EpochEndOffsetResult("t", 0, None, 3, 10)],
        ),
        config=SimpleNamespace(
            authorizer=None,
            request_timeout_ms=1000,
            node_id=1,
            controller_ids=(1,),
            controllers=("h:9093",),
        ),
        metrics=BrokerMetrics(new_registry()),
    )
    apis = KafkaApis(cast(Any, server))
    for key in (23, 32, 33, 35, 37, 42, 44, 60):
        low, high = SUPPORTED[key]
        for version in range(low, high + 1):
            request = _admin_request(key, version)
            frame = asyncio.run(apis._answer(key, version, 7, request, Call("c", "127.0.0.1")))
            assert frame is not None
            response_cls = load_response_schema(key, version)
            flexible = response_cls.__flexible__
            start = 9 if flexible else 8  # size, correlation id (and header tags)
            answer, used = entity_reader(response_cls)(frame, start)
            assert start + used == len(frame), (key, version)
            if key == 32:  # the topic override and a default, with their sources
                (result,) = answer.results
                sources = {c.name: c.config_source for c in result.configs}
                assert (sources["retention.ms"], sources["cleanup.policy"]) == (1, 5)
            elif key == 60:  # librdkafka crashes on an empty cluster id
                assert len(answer.cluster_id) == 22, answer.cluster_id
            elif key == 35:
                sizes = [
                    p.partition_size for r in answer.results for t in r.topics for p in t.partitions
                ]
                assert len(answer.results) == 2 and len(sizes) == 1 and sizes[0] > 0
    logs.close_all()
