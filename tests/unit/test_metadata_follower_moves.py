"""The broker's metadata follower leaves a controller the heartbeats no longer name as
active (issue #19): a controller cut off from the quorum parks or drops the long poll,
and a broker waiting there missed every change until the poll's own timeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from raftka.broker.metadata_follower import ATTEMPT_MARGIN_MS, MetadataFollower
from raftka.common.messages import encode
from raftka.common.messages.controller import FetchMetadataResponse

DEADLINE_S = 10.0

Handler = Callable[[web.Request], Awaitable[web.Response]]


def _nothing_new() -> web.Response:
    answer = FetchMetadataResponse(snapshot=None, batches=[], next_offset=0, high_watermark=0)
    return web.Response(body=encode(answer), content_type="application/json")


@contextlib.asynccontextmanager
async def _controllers(*handlers: Handler) -> AsyncIterator[list[str]]:
    """One loopback server per handler, serving GET /v1/metadata; their addresses."""
    servers = []
    try:
        for handler in handlers:
            app = web.Application()
            app.router.add_get("/v1/metadata", handler)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            servers.append(server)
        yield [f"{s.host}:{s.port}" for s in servers]
    finally:
        for server in servers:
            await server.close()


@contextlib.asynccontextmanager
async def _following(
    addresses: list[str], named: list[str | None], **options: int
) -> AsyncIterator[MetadataFollower]:
    """A follower running over ``addresses``; ``named[0]`` is the active controller the
    heartbeats found (None: unknown)."""

    async def listener(image: object, changes: object) -> None:
        return None

    async with aiohttp.ClientSession() as session:
        follower = MetadataFollower(
            broker_id=1,
            controllers=addresses,
            session=session,
            listener=listener,
            active_controller=lambda: named[0],
            **options,
        )
        task = asyncio.create_task(follower.run())
        try:
            yield follower
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _scenario() -> None:
    parked = asyncio.Event()
    released = asyncio.Event()

    async def cut_off(request: web.Request) -> web.Response:
        parked.set()
        try:
            await asyncio.sleep(3600)  # answers nothing, as a controller behind a partition
        finally:
            released.set()  # the follower gave up the request (it was cancelled)
        return web.Response(status=500)

    async def active(request: web.Request) -> web.Response:
        return _nothing_new()

    named: list[str | None] = [None]
    async with (
        _controllers(cut_off, active) as (stale, live),
        _following([stale, live], named) as follower,
    ):
        await asyncio.wait_for(parked.wait(), DEADLINE_S)
        assert not follower.caught_up.is_set()
        moved_at = time.monotonic()
        named[0] = live  # the heartbeats found the new active controller
        await asyncio.wait_for(follower.caught_up.wait(), DEADLINE_S)
        took_s = time.monotonic() - moved_at
        # Well inside the margin the parked request would otherwise have taken.
        assert took_s < ATTEMPT_MARGIN_MS / 1000 / 2, f"moved after {took_s:.2f} s"
        await asyncio.wait_for(released.wait(), DEADLINE_S)


def test_follower_leaves_a_controller_the_heartbeats_no_longer_name() -> None:
    asyncio.run(_scenario())


async def _choice_scenario() -> None:
    """Three controllers, each answering "nothing new" at once and counting its fetches;
    the first fails every fetch (HTTP 500)."""
    hits = [0, 0, 0]

    def handler(index: int) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            hits[index] += 1
            if index == 0:
                return web.Response(status=500, text="broken")
            return _nothing_new()

        return handle

    async def fetches_reach(index: int, count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while hits[index] < count:
            assert time.monotonic() < deadline, f"controller {index} got {hits[index]} fetches"
            await asyncio.sleep(0.01)  # polling a counter the server task bumps

    async with _controllers(*(handler(i) for i in range(3))) as addresses:
        named: list[str | None] = [addresses[2]]
        async with _following(addresses, named, wait_ms=20):
            # The active controller the heartbeats name, not the first in the list.
            await fetches_reach(2, 5)
            assert hits[:2] == [0, 0], hits
            # None named (a heartbeat just failed): the list in turn, past a controller
            # whose fetch failed.
            named[0] = None
            before = hits[1]
            await fetches_reach(1, before + 5)
            assert hits[0] == 1, f"the failing controller was asked {hits[0]} times"


def test_follower_fetches_from_the_named_active_controller_else_in_turn() -> None:
    asyncio.run(_choice_scenario())
