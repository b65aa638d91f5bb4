"""The broker's HTTP edges with typed messages: bad input is INVALID_REQUEST naming the
field, and the broker keeps serving.

How: a :class:`BrokerServer` that is built but not started (no controller, an empty
metadata image) serves its aiohttp app through aiohttp's in-process test client. Each
route gets malformed bodies (400 INVALID_REQUEST, the field's path in the message),
then a well-formed request that must still be answered (200, with the per-partition
or per-group error an empty broker gives), so a bad request never takes it down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from broker_harness import broker_config

from raftka.broker.coordinator.routes import ROUTES
from raftka.broker.coordinator.transaction_routes import TRANSACTION_ROUTES
from raftka.broker.server import BrokerServer
from raftka.common.messages import broker as api
from raftka.common.messages import coordinator as group_api
from raftka.common.messages import decode
from raftka.common.wire import FRAME_CONTENT_TYPE

Client = TestClient[web.Request, web.Application]


def _run(tmp_path: Path, scenario: Callable[[Client], Awaitable[None]]) -> None:
    config = broker_config(tmp_path)

    async def main() -> None:
        server = BrokerServer(config)
        try:
            async with TestClient(TestServer(server.app)) as client:
                await scenario(client)
        finally:
            server.coordinator.close()
            await server.manager.close()

    asyncio.run(main())


async def _post(
    client: Client, path: str, body: bytes, content_type: str = "application/json"
) -> tuple[int, bytes, str]:
    response = await client.post(path, data=body, headers={"Content-Type": content_type})
    return response.status, await response.read(), response.content_type


async def _expect_invalid(client: Client, path: str, body: bytes, field: str) -> None:
    status, raw, _ = await _post(client, path, body)
    answer = orjson.loads(raw)
    assert status == 400, (path, body, answer)
    assert answer["error"] == "INVALID_REQUEST" and answer["error_code"] == 42, answer
    assert field in answer["message"], (field, answer)


def test_fetch_list_offsets_produce_and_init_producer_id(tmp_path: Path) -> None:
    """Fetch, ListOffsets, Produce and InitProducerId refuse bad fields by name, then
    answer a good request (UNKNOWN_TOPIC_OR_PARTITION: the broker has no topics)."""

    async def scenario(client: Client) -> None:
        fetch = {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0}]}
        await _expect_invalid(client, "/v1/fetch", b"{", "not valid JSON")
        await _expect_invalid(
            client, "/v1/fetch", orjson.dumps({**fetch, "max_wait_ms": "5"}), "$.max_wait_ms"
        )
        bad_partition = {"partitions": [{"topic": "t", "partition": -3, "fetch_offset": 0}]}
        await _expect_invalid(
            client, "/v1/fetch", orjson.dumps(bad_partition), "$.partitions[0].partition"
        )
        status, raw, content_type = await _post(client, "/v1/fetch", orjson.dumps(fetch))
        assert status == 200 and content_type == FRAME_CONTENT_TYPE
        answer, payloads = api.decode_frame(raw, api.FetchResponse)
        (entry,) = answer.responses
        assert entry.error is not None and entry.error.error == "UNKNOWN_TOPIC_OR_PARTITION"
        assert [bytes(p) for p in payloads] == [b""]

        await _expect_invalid(
            client,
            "/v1/list-offsets",
            orjson.dumps({"partitions": [{"topic": "t", "partition": 0}]}),
            "timestamp",
        )
        status, raw, _ = await _post(
            client,
            "/v1/list-offsets",
            orjson.dumps({"partitions": [{"topic": "t", "partition": 0, "timestamp": -1}]}),
        )
        listed = api.ListOffsetsResponse
        (offsets,) = decode(raw, listed).responses
        assert status == 200 and offsets.error is not None

        produce = api.ProduceRequest(
            acks=1, partitions=(api.ProducePartition(topic="t", partition=0, records_bytes=0),)
        )
        status, raw, _ = await _post(
            client, "/v1/produce", b"\x00\x00\x00\x02[]", FRAME_CONTENT_TYPE
        )
        assert status == 400 and orjson.loads(raw)["error"] == "INVALID_REQUEST"
        status, raw, _ = await _post(
            client, "/v1/produce", api.encode_frame(produce, [b""]), FRAME_CONTENT_TYPE
        )
        assert status == 200, raw
        assert orjson.loads(raw)["responses"][0]["error"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"

        # A transactional id goes to its transaction coordinator: this broker leads no
        # __transaction_state partition, so NOT_COORDINATOR inside an HTTP 200.
        status, raw, _ = await _post(
            client, "/v1/init-producer-id", orjson.dumps({"transactional_id": "tx"})
        )
        assert status == 200 and orjson.loads(raw)["error"]["error"] == "NOT_COORDINATOR", raw
        await _expect_invalid(
            client,
            "/v1/init-producer-id",
            orjson.dumps({"transactional_id": "tx", "transaction_timeout_ms": "x"}),
            "$.transaction_timeout_ms",
        )
        await _expect_invalid(
            client, "/v1/init-producer-id", orjson.dumps({"timeout_ms": -1}), "$.timeout_ms"
        )

    _run(tmp_path, scenario)


def test_metadata_answers_with_the_typed_response(tmp_path: Path) -> None:
    """GET /v1/metadata keeps its fields; an unknown requested topic is listed with
    UNKNOWN_TOPIC_OR_PARTITION; a too-long topic name is INVALID_REQUEST."""

    async def scenario(client: Client) -> None:
        response = await client.get("/v1/metadata", params={"topics": "a"})
        answer = orjson.loads(await response.read())
        assert set(answer) == {
            "controller_id",
            "controllers",
            "brokers",
            "topics",
            "metadata_offset",
        }
        assert answer["topics"][0]["error"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
        response = await client.get("/v1/metadata", params={"topics": "x" * 250})
        assert response.status == 400

    _run(tmp_path, scenario)


def test_every_coordinator_route_refuses_bad_bodies_and_keeps_serving(tmp_path: Path) -> None:
    """Each row of the coordinator's route table answers a non-object body and a body
    with a wrong-typed field with INVALID_REQUEST naming it; afterwards a heartbeat
    and an offset fetch are still answered (NOT_COORDINATOR: no partition is owned)."""

    async def scenario(client: Client) -> None:
        for route in ROUTES:
            await _expect_invalid(client, route.path, b"[1]", "Expected `object`")
        wrong: dict[str, tuple[dict[str, Any], str]] = {
            "/v1/find-coordinator": ({"key": 1}, "$.key"),
            "/v1/join-group": ({"group_id": "g", "protocols": {}}, "$.protocols"),
            "/v1/sync-group": ({"group_id": "g", "generation_id": 1.5}, "$.generation_id"),
            "/v1/heartbeat": ({"group_id": None}, "$.group_id"),
            "/v1/leave-group": ({"group_id": "g", "members": [3]}, "$.members[0]"),
            "/v1/offset-commit": ({"group_id": "g", "topics": [{"name": 1}]}, "$.topics[0].name"),
            "/v1/offset-fetch": ({"group_id": "g", "topics": 1}, "$.topics"),
            "/v1/list-groups": ({"states_filter": [1]}, "$.states_filter[0]"),
            "/v1/describe-groups": ({"groups": "g"}, "$.groups"),
            "/v1/delete-groups": ({}, "groups"),
            "/v1/offset-delete": ({"group_id": "g", "topics": [{"name": 3}]}, "$.topics[0].name"),
            "/v1/txn-offset-commit": (
                {"transactional_id": "t", "group_id": "g", "producer_id": "1"},
                "$.producer_id",
            ),
        }
        assert set(wrong) == {route.path for route in ROUTES}
        for path, (body, field) in wrong.items():
            await _expect_invalid(client, path, orjson.dumps(body), field)
        await _expect_invalid(
            client, "/v1/find-coordinator", b'{"key": "g", "key_type": 2}', "key_type"
        )
        # key_type 1 (transaction): no __transaction_state yet (no controller here to
        # create it): COORDINATOR_NOT_AVAILABLE, which clients retry.
        status, raw, _ = await _post(
            client, "/v1/find-coordinator", b'{"key": "tx", "key_type": 1}'
        )
        assert status == 200, raw
        assert orjson.loads(raw)["error"]["error"] == "COORDINATOR_NOT_AVAILABLE", raw
        producer = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0}
        txn_wrong: dict[str, tuple[dict[str, Any], str]] = {
            "/v1/add-partitions-to-txn": ({**producer, "topics": [{"name": "t"}]}, "partitions"),
            "/v1/add-offsets-to-txn": ({**producer, "group_id": 5}, "$.group_id"),
            "/v1/end-txn": (producer, "committed"),
            "/v1/describe-transactions": ({"transactional_ids": [""]}, "transactional_ids"),
            "/v1/list-transactions": ({"duration_filter_ms": "1"}, "$.duration_filter_ms"),
        }
        assert set(txn_wrong) == {route.path for route in TRANSACTION_ROUTES}
        for path, (body, field) in txn_wrong.items():
            await _expect_invalid(client, path, orjson.dumps(body), field)
        status, raw, _ = await _post(
            client,
            "/v1/heartbeat",
            orjson.dumps({"group_id": "g", "generation_id": 1, "member_id": "m"}),
        )
        heartbeat = decode(raw, group_api.HeartbeatResponse)
        assert status == 200 and heartbeat.error is not None
        assert heartbeat.error.error == "NOT_COORDINATOR"
        status, raw, _ = await _post(client, "/v1/offset-fetch", b'{"group_id": "g"}')
        assert status == 200 and orjson.loads(raw)["error"]["error"] == "NOT_COORDINATOR"

    _run(tmp_path, scenario)
