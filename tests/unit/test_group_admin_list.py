"""``list_groups`` lists from the live brokers that answer: one broker that hangs and
one whose port is closed cost only their own groups and are named in the result's
errors; the call returns within its timeout and raises only when no broker answered.

Three fake brokers on loopback: broker 1 answers Metadata (naming all three) and
ListGroups; broker 2 accepts the ListGroups request and never answers; broker 3's
address has nothing listening.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from raftka.client import AsyncGroupAdmin
from raftka.common.errors import KafkaError, NetworkError, RequestTimedOutError
from raftka.common.messages import coordinator as api
from raftka.common.messages import encode

TIMEOUT_MS = 1_500


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _cluster(*, first_answers: bool) -> None:
    addresses: dict[int, int] = {}
    release = asyncio.Event()

    async def metadata(_request: web.Request) -> web.Response:
        brokers = [
            {"id": i, "host": "127.0.0.1", "port": port, "rack": None}
            for i, port in sorted(addresses.items())
        ]
        return web.json_response(
            {"controller_id": None, "controllers": [], "brokers": brokers, "topics": []}
        )

    async def groups(_request: web.Request) -> web.Response:
        if not first_answers:
            raise web.HTTPServiceUnavailable(text="down")
        answer = api.ListGroupsResponse(
            groups=(api.ListedGroup(group_id="g1", protocol_type="consumer", state="Stable"),)
        )
        return web.Response(body=encode(answer), content_type="application/json")

    async def hangs(_request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"groups": []})

    first = web.Application()
    first.add_routes([web.get("/v1/metadata", metadata), web.post("/v1/list-groups", groups)])
    second = web.Application()
    second.add_routes([web.post("/v1/list-groups", hangs)])
    servers = [TestServer(first, host="127.0.0.1"), TestServer(second, host="127.0.0.1")]
    for server in servers:
        await server.start_server()
    addresses.update({1: servers[0].port, 2: servers[1].port, 3: _closed_port()})
    try:
        async with AsyncGroupAdmin(
            bootstrap_servers=f"127.0.0.1:{servers[0].port}", retry_backoff_ms=10
        ) as admin:
            started = time.monotonic()
            if not first_answers:
                with pytest.raises(KafkaError):
                    await admin.list_groups_result(timeout_ms=TIMEOUT_MS)
                return
            result = await admin.list_groups_result(timeout_ms=TIMEOUT_MS)
            elapsed = time.monotonic() - started
            assert elapsed < TIMEOUT_MS / 1000 + 1.0, f"took {elapsed:.1f} s"
            assert [g.group_id for g in result.groups] == ["g1"]
            assert sorted(result.errors) == [2, 3]
            assert isinstance(result.errors[2], RequestTimedOutError)
            assert isinstance(result.errors[3], NetworkError)
            assert str(addresses[3]) in str(result.errors[3])
            # The plain call: what answered, no error raised.
            listed = await admin.list_groups(timeout_ms=TIMEOUT_MS)
            assert [g.group_id for g in listed] == ["g1"]
    finally:
        release.set()
        for server in servers:
            await server.close()


def test_list_groups_returns_what_the_live_brokers_answered() -> None:
    asyncio.run(_cluster(first_answers=True))


def test_list_groups_raises_when_no_broker_answers() -> None:
    asyncio.run(_cluster(first_answers=False))
