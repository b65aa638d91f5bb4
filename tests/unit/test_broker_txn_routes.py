"""The broker's transaction routes in process (a BrokerServer built, not started, its
metadata applied by hand; aiohttp's test client): a transactional produce with
``transaction.partition.verification.enable`` on and no transaction coordinator in the
metadata is refused NOT_ENOUGH_REPLICAS (retriable) and appends nothing; off, it is
appended; transactional batches without a transactional_id are INVALID_REQUEST;
``/v1/write-txn-markers`` ends the transaction and calls ``on_txn_marker`` for
``__consumer_offsets`` partitions only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from broker_harness import broker_config, metadata_answer, register_brokers

from raftka.broker.metadata_follower import MetadataApplier
from raftka.broker.server import BrokerServer
from raftka.common.messages import broker as api
from raftka.common.record import Record, build_batch
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.metadata.metadata_records import PartitionRecord, TopicRecord

Client = TestClient[web.Request, web.Application]
OFFSETS = "__consumer_offsets"


def _run(
    tmp_path: Path, scenario: Callable[[BrokerServer, Client], Awaitable[None]], **config: Any
) -> None:
    async def main() -> None:
        server = BrokerServer(broker_config(tmp_path, **config))
        applier = MetadataApplier(broker_id=1)
        records = [*register_brokers()]
        for name in ("t", OFFSETS):
            topic_id = str(uuid.uuid4())
            records += [
                TopicRecord(name=name, topic_id=topic_id),
                PartitionRecord(
                    partition_id=0, topic_id=topic_id, replicas=(1,), isr=(1,), leader=1
                ),
            ]
        for image, changes in applier.apply_answer(metadata_answer([records], 1, high_watermark=2)):
            server.manager.apply_metadata(image, changes)
        try:
            async with TestClient(TestServer(server.app)) as client:
                await scenario(server, client)
        finally:
            server.coordinator.close()
            await server.manager.close()

    asyncio.run(main())


def _txn(value: bytes, seq: int = 0) -> bytes:
    return build_batch(
        [Record(value=value)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


async def _produce(
    client: Client, topic: str, batch: bytes, transactional_id: str | None = "tx"
) -> dict[str, Any]:
    request = api.ProduceRequest(
        acks=1,
        transactional_id=transactional_id,
        partitions=(api.ProducePartition(topic=topic, partition=0, records_bytes=len(batch)),),
    )
    response = await client.post(
        "/v1/produce",
        data=api.encode_frame(request, [batch]),
        headers={"Content-Type": FRAME_CONTENT_TYPE},
    )
    assert response.status == 200
    return dict(orjson.loads(await response.read())["responses"][0])


async def _marker(client: Client, topic: str, committed: bool) -> Any:
    body = {
        "markers": [
            {
                "producer_id": 7,
                "producer_epoch": 0,
                "transaction_result": committed,
                "coordinator_epoch": 0,
                "transaction_version": 1,
                "topics": [{"name": topic, "partitions": [0]}],
            }
        ]
    }
    response = await client.post("/v1/write-txn-markers", data=orjson.dumps(body))
    assert response.status == 200
    return orjson.loads(await response.read())["markers"][0]["topics"][0]["partitions"][0]


def test_verification_on_without_a_coordinator_is_not_enough_replicas(tmp_path: Path) -> None:
    async def scenario(server: BrokerServer, client: Client) -> None:
        answer = await _produce(client, "t", _txn(b"a"))
        assert answer["error"]["error"] == "NOT_ENOUGH_REPLICAS", answer
        assert "COORDINATOR_NOT_AVAILABLE" in answer["error"]["message"]
        assert server.manager.partitions[("t", 0)].log.log_end_offset == 0
        plain = await _produce(client, "t", build_batch([Record(value=b"p")]))
        assert plain["error"] is None, "a transactional_id with plain batches: nothing to verify"

    _run(tmp_path, scenario)


def test_verification_off_appends_and_markers_end_the_transaction(tmp_path: Path) -> None:
    hooked: list[tuple[str, int, int, bool]] = []

    async def scenario(server: BrokerServer, client: Client) -> None:
        server.on_txn_marker = lambda *args: hooked.append(args)
        refused = await _produce(client, "t", _txn(b"a"), transactional_id=None)
        assert refused["error"]["error"] == "INVALID_REQUEST"
        assert (await _produce(client, "t", _txn(b"a")))["error"] is None
        assert (await _produce(client, OFFSETS, _txn(b"o", seq=1)))["error"] is None
        replica = server.manager.partitions[("t", 0)].replica
        assert replica.last_stable_offset == 0 and replica.state.high_watermark == 1
        assert (await _marker(client, "t", committed=True))["error"] is None
        assert replica.last_stable_offset == 2
        assert (await _marker(client, OFFSETS, committed=False))["error"] is None
        missing = await _marker(client, "absent", committed=True)
        assert missing["error"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert hooked == [(OFFSETS, 0, 7, False)]

    _run(tmp_path, scenario, transaction_partition_verification_enable=False)
