"""The clients leave a leader that stops answering (issue #19, 2), against two fake
brokers on loopback.

Broker 1 leads ``t-0`` at epoch 0 until the test "isolates" it: from then on it parks
every request (produce, fetch, metadata) without answering, as a cut-off or paused node
does, and broker 2 answers metadata naming itself leader at epoch 1. With the default
``request_timeout_ms`` (30 s) a client that waited for the zombie's answer would stall
for half a minute; here the producer's batch must land at broker 2 within a few
seconds under the same producer id, epoch and sequence, and the consumer must read
from broker 2 as soon as the metadata names it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from raftka.client import AsyncConsumer, AsyncProducer, TopicPartition
from raftka.common.messages import broker as api
from raftka.common.record import Record, build_batch
from raftka.common.record.header import iter_batches
from raftka.common.time import monotonic_ms
from raftka.common.wire import decode_frame


@dataclass
class Cluster:
    """Two fake brokers sharing one view of who leads ``t-0``."""

    leader: int = 1
    leader_epoch: int = 0
    addresses: dict[int, str] = field(default_factory=dict)
    isolated: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    #: (broker, producer id, producer epoch, base sequence) of every produced batch.
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)

    def isolate_leader(self) -> None:
        self.isolated.set()
        self.leader, self.leader_epoch = 2, 1

    async def _silent_if_isolated(self, broker_id: int) -> None:
        if broker_id == 1 and self.isolated.is_set():
            await self.release.wait()  # a cut-off node: no answer until the test ends

    def app(self, broker_id: int) -> web.Application:
        async def metadata(_request: web.Request) -> web.Response:
            await self._silent_if_isolated(broker_id)
            brokers = []
            for b, address in self.addresses.items():
                host, port = address.split(":")
                brokers.append({"id": b, "host": host, "port": int(port), "rack": None})
            partition = {
                "partition": 0,
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "replicas": [1, 2],
                "isr": [1, 2],
            }
            body = {
                "controller_id": None,
                "controllers": [],
                "brokers": brokers,
                "topics": [
                    {"name": "t", "topic_id": "x", "error": None, "partitions": [partition]}
                ],
            }
            return web.json_response(body)

        async def init_producer_id(_request: web.Request) -> web.Response:
            await self._silent_if_isolated(broker_id)
            return web.json_response({"error": None, "producer_id": 7, "producer_epoch": 0})

        async def produce(request: web.Request) -> web.Response:
            raw = await request.read()
            header, payloads = decode_frame(raw, "partitions")
            for payload in payloads:
                for _, h in iter_batches(bytes(payload)):
                    self.batches.append(
                        (broker_id, h.producer_id, h.producer_epoch, h.base_sequence)
                    )
            await self._silent_if_isolated(broker_id)
            if broker_id == 1:
                # Before the isolation the old leader never answers either: the test
                # isolates it while this request waits.
                await self.isolated.wait()
                await self.release.wait()
            responses = [
                {
                    "topic": e["topic"],
                    "partition": e["partition"],
                    "current_leader": None,
                    "error": None,
                    "base_offset": 0,
                    "log_append_time_ms": -1,
                }
                for e in header["partitions"]
            ]
            return web.Response(body=orjson.dumps({"responses": responses}))

        async def list_offsets(request: web.Request) -> web.Response:
            await self._silent_if_isolated(broker_id)
            body = orjson.loads(await request.read())
            answers = [
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "error": None,
                    "offset": 0,
                    "timestamp": -1,
                    "leader_epoch": self.leader_epoch,
                }
                for p in body["partitions"]
            ]
            return web.json_response({"partitions": answers})

        async def fetch(request: web.Request) -> web.Response:
            await request.read()
            await self._silent_if_isolated(broker_id)
            if broker_id == 1:
                await self.isolated.wait()  # parks until isolated, then silent
                await self.release.wait()
            batch = build_batch([Record(b"from-2", timestamp_ms=1)], partition_leader_epoch=1)
            header = api.FetchResponse(
                responses=(
                    api.FetchPartitionResponse(
                        topic="t",
                        partition=0,
                        high_watermark=1,
                        last_stable_offset=1,
                        log_start_offset=0,
                        records_bytes=len(batch),
                    ),
                )
            )
            return web.Response(
                body=api.encode_frame(header, [batch]),
                content_type="application/vnd.raftka.frame",
            )

        app = web.Application()
        app.router.add_get("/v1/metadata", metadata)
        app.router.add_post("/v1/init-producer-id", init_producer_id)
        app.router.add_post("/v1/produce", produce)
        app.router.add_post("/v1/list-offsets", list_offsets)
        app.router.add_post("/v1/fetch", fetch)
        return app


@asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    servers = []
    try:
        for broker_id in (1, 2):
            server = TestServer(c.app(broker_id), host="127.0.0.1")
            await server.start_server()
            servers.append(server)
            c.addresses[broker_id] = f"127.0.0.1:{server.port}"
        yield c
    finally:
        c.release.set()
        for server in servers:
            await server.close()


async def _until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = monotonic_ms() + timeout_s * 1000
    while not condition():
        assert monotonic_ms() < deadline, what
        await asyncio.sleep(0.01)  # polling a condition with a deadline


def test_the_producer_leaves_a_silent_leader_and_retries_under_the_same_sequence() -> None:
    async def scenario() -> None:
        async with cluster() as c:
            producer = AsyncProducer(
                bootstrap_servers=",".join(c.addresses.values()), linger_ms=0, acks="all"
            )
            try:
                future = await producer.send("t", b"v", partition=0)
                await _until(lambda: c.batches, 5, "the batch never reached broker 1")
                c.isolate_leader()
                isolated_at = monotonic_ms()
                metadata = await asyncio.wait_for(future, 10)
                took = monotonic_ms() - isolated_at
            finally:
                await asyncio.wait_for(producer.close(timeout_ms=1_000), 10)
            assert metadata.offset == 0
            assert took < 4_000, f"acknowledged {took} ms after the isolation"
            (first, *rest) = c.batches
            assert first[0] == 1 and rest and all(b[0] == 2 for b in rest), c.batches
            assert {b[1:] for b in c.batches} == {(7, 0, 0)}, "the retry kept its sequence"

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_consumer_leaves_a_silent_leader() -> None:
    async def scenario() -> None:
        async with cluster() as c:
            consumer = AsyncConsumer(
                bootstrap_servers=",".join(c.addresses.values()),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
            )
            try:
                consumer.assign([TopicPartition("t", 0)])
                consumer.seek(TopicPartition("t", 0), 0)
                assert await consumer.getmany(timeout_ms=300) == {}
                c.isolate_leader()
                isolated_at = monotonic_ms()
                got: dict[Any, Any] = {}
                while not got and monotonic_ms() - isolated_at < 10_000:
                    got = await consumer.getmany(timeout_ms=200)
                took = monotonic_ms() - isolated_at
            finally:
                await asyncio.wait_for(consumer.close(), 10)
            assert [r.value for r in got.get(TopicPartition("t", 0), [])] == [b"from-2"]
            assert took < 4_000, f"read from the new leader {took} ms after the isolation"

    asyncio.run(asyncio.wait_for(scenario(), 30))
