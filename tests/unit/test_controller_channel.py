"""The broker's ControllerChannel against fake controllers on loopback (issue #19, 1).

Each fake controller answers every POST by a script: a 200 stamped with its quorum
epoch, NOT_CONTROLLER naming a leader and the epoch of that knowledge, or no answer at
all (a paused or cut-off node: the handler parks until the test ends). The tests check
that a silent controller costs one attempt bounded by ``attempt_timeout_ms`` and by the
caller's deadline, that a redirect older than the epoch the channel knows is never
followed, and that a redirect back to a controller that just failed in the same epoch
is skipped in favour of the other voters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from raftka.broker.lifecycle import ControllerChannel
from raftka.common.errors import RequestTimedOutError
from raftka.common.messages.controller import QUORUM_EPOCH_HEADER
from raftka.common.time import monotonic_ms


@dataclass
class FakeController:
    """``mode``: "active" (200), "redirect" (NOT_CONTROLLER to ``leader`` at
    ``epoch``) or "silent" (never answers)."""

    mode: str
    epoch: int
    leader: str | None = None
    hits: int = 0
    address: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, _request: web.Request) -> web.Response:
        self.hits += 1
        headers = {QUORUM_EPOCH_HEADER: str(self.epoch)}
        if self.mode == "silent":
            await self.release.wait()  # a paused process: no answer until the test ends
        if self.mode == "active":
            return web.json_response({"ok": True}, headers=headers)
        return web.json_response(
            {
                "error": "NOT_CONTROLLER",
                "error_code": 41,
                "message": "not the active controller",
                "leader_id": None,
                "leader_address": self.leader,
                "leader_epoch": self.epoch,
            },
            status=503,
            headers=headers,
        )


@asynccontextmanager
async def controllers(*fakes: FakeController) -> AsyncIterator[list[str]]:
    servers: list[TestServer] = []
    try:
        for fake in fakes:
            app = web.Application()
            app.router.add_post("/v1/brokers/heartbeat", fake.handle)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            servers.append(server)
            fake.address = f"127.0.0.1:{server.port}"
        yield [fake.address for fake in fakes]
    finally:
        for fake in fakes:
            fake.release.set()
        for server in servers:
            await server.close()


async def _post(channel: ControllerChannel, timeout_ms: int) -> dict[str, object]:
    return await channel.post("/v1/brokers/heartbeat", {"x": 1}, timeout_ms=timeout_ms)


def test_a_silent_controller_costs_one_bounded_attempt_and_stale_redirects_are_skipped() -> None:
    """A (the old leader, epoch 5) is silent; B still believes in A at epoch 5; C is the
    new active controller at epoch 6. The heartbeat reaches C well within a deadline
    shorter than the old 5 s attempt, and A is tried only once: B's redirect back to A
    in the epoch A just failed in is not followed."""

    async def scenario() -> None:
        a = FakeController("silent", 5)
        b = FakeController("redirect", 5)
        c = FakeController("active", 6)
        async with controllers(a, b, c) as addresses, aiohttp.ClientSession() as session:
            b.leader = a.address
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=300)
            channel.known_epoch = 5  # the broker knew A as the leader of epoch 5
            start = monotonic_ms()
            answer = await _post(channel, timeout_ms=3_000)
            took = monotonic_ms() - start
            assert answer == {"ok": True}
            assert took < 1_500, f"reached the new controller only after {took} ms"
            assert a.hits == 1, f"the silent controller was tried {a.hits} times"
            assert channel.active_address == c.address and channel.known_epoch == 6

    asyncio.run(scenario())


def test_a_redirect_older_than_the_known_epoch_is_never_followed() -> None:
    """Once the channel has seen epoch 6, a voter still saying "A leads epoch 5" does
    not send it to A, even though A has not failed it yet."""

    async def scenario() -> None:
        a = FakeController("active", 5)  # the deposed leader, still answering
        b = FakeController("redirect", 5)
        c = FakeController("active", 6)
        async with controllers(b, c, a) as addresses, aiohttp.ClientSession() as session:
            b.leader = a.address
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=300)
            channel.known_epoch = 6
            assert await _post(channel, timeout_ms=3_000) == {"ok": True}
            assert a.hits == 0 and b.hits == 1 and c.hits == 1
            assert channel.active_address == c.address

    asyncio.run(scenario())


def test_a_redirect_of_the_known_epoch_or_newer_is_followed() -> None:
    async def scenario() -> None:
        b = FakeController("redirect", 7)
        c = FakeController("active", 7)
        async with controllers(b, c) as addresses, aiohttp.ClientSession() as session:
            b.leader = c.address
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=300)
            channel.known_epoch = 6
            assert await _post(channel, timeout_ms=3_000) == {"ok": True}
            assert (b.hits, c.hits) == (1, 1)
            assert channel.active_address == c.address and channel.known_epoch == 7

    asyncio.run(scenario())


@pytest.mark.parametrize("attempt_timeout_ms", [5_000, 200])
def test_the_callers_deadline_bounds_every_attempt(attempt_timeout_ms: int) -> None:
    """Every controller silent: REQUEST_TIMED_OUT comes at the caller's deadline, not
    after an attempt's own (longer) timeout."""

    async def scenario() -> None:
        fakes = [FakeController("silent", 1) for _ in range(3)]
        async with controllers(*fakes) as addresses, aiohttp.ClientSession() as session:
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=attempt_timeout_ms)
            start = monotonic_ms()
            with pytest.raises(RequestTimedOutError, match="no controller answered in time"):
                await _post(channel, timeout_ms=700)
            took = monotonic_ms() - start
            assert 650 <= took < 1_500, took
            if attempt_timeout_ms < 700:
                assert sum(f.hits for f in fakes) >= 2, "a short attempt moves on"

    asyncio.run(scenario())


def test_after_the_active_controller_goes_silent_no_heartbeat_returns_to_it() -> None:
    """A redirect finds B active (the rotation index still names A). B goes silent and
    A and C have not noticed yet (they still name B at epoch 5). Each heartbeat's
    deadline allows one attempt at a silent controller, so a heartbeat that went back
    to B would be lost whole: none does, and once C leads epoch 6 the next heartbeat
    reaches it. (Before: the next index after the failure was B's own, and two lost
    heartbeats in a row outlasted the session the new controller gave the brokers.)"""

    async def scenario() -> None:
        a = FakeController("redirect", 5)
        b = FakeController("active", 5)
        c = FakeController("redirect", 5)
        async with controllers(a, b, c) as addresses, aiohttp.ClientSession() as session:
            a.leader = c.leader = b.address
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=300)
            assert await _post(channel, timeout_ms=300) == {"ok": True}
            assert channel.active_address == b.address and (a.hits, b.hits) == (1, 1)
            b.mode = "silent"
            with pytest.raises(RequestTimedOutError):
                await _post(channel, timeout_ms=300)
            assert b.hits == 2 and channel.active_address is None
            for _ in range(3):
                with pytest.raises(RequestTimedOutError):
                    await _post(channel, timeout_ms=300)
            assert b.hits == 2, f"heartbeats went back to the silent controller {b.hits - 2} times"
            assert a.hits > 1 and c.hits > 0
            c.mode, c.epoch = "active", 6
            a.leader, a.epoch = c.address, 6
            assert await _post(channel, timeout_ms=300) == {"ok": True}
            assert channel.active_address == c.address and channel.known_epoch == 6

    asyncio.run(scenario())


def test_every_controller_silent_still_tries_them_all_in_turn() -> None:
    """When every voter has failed in the known epoch (the broker is cut off), the
    rotation goes on over all of them rather than stopping on one."""

    async def scenario() -> None:
        fakes = [FakeController("silent", 1) for _ in range(3)]
        async with controllers(*fakes) as addresses, aiohttp.ClientSession() as session:
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=100)
            for _ in range(6):
                with pytest.raises(RequestTimedOutError):
                    await _post(channel, timeout_ms=100)
            assert [f.hits for f in fakes] == [2, 2, 2]

    asyncio.run(scenario())


def test_a_deposed_leader_that_answers_is_not_kept_as_the_active_controller() -> None:
    """A paused leader that was just resumed still answers as the leader of epoch 5 for
    a moment; the channel knows epoch 6. Its answer stands (a write it answered was
    committed) but the next request goes on to the real active controller instead of
    sticking to the deposed one."""

    async def scenario() -> None:
        a = FakeController("active", 5)
        c = FakeController("active", 6)
        async with controllers(a, c) as addresses, aiohttp.ClientSession() as session:
            channel = ControllerChannel(addresses, session, attempt_timeout_ms=300)
            channel.known_epoch = 6
            assert await _post(channel, timeout_ms=1_000) == {"ok": True}
            assert a.hits == 1 and channel.active_address is None
            assert await _post(channel, timeout_ms=1_000) == {"ok": True}
            assert c.hits == 1 and channel.active_address == c.address
            assert await _post(channel, timeout_ms=1_000) == {"ok": True}
            assert (a.hits, c.hits) == (1, 2)

    asyncio.run(scenario())


def test_after_a_partition_heals_the_active_controller_is_reached_again() -> None:
    """The broker is cut off: every voter fails in epoch 1, the active one (A)
    included. The partition heals with no election: B and C answer NOT_CONTROLLER
    naming A at epoch 1 again. A's failure is remembered only for the failure memory;
    after it, the redirect to A is followed and the heartbeat reaches it. (Before: A
    stayed "failed in epoch 1" for good, its redirects were never followed and
    the rotation skipped it, so the broker's heartbeats went to B and C forever and the
    controller fenced it; seen in a fail-over campaign after leader-host isolations.)"""

    async def scenario() -> None:
        a, b, c = (FakeController("silent", 1) for _ in range(3))
        async with controllers(a, b, c) as addresses, aiohttp.ClientSession() as session:
            channel = ControllerChannel(
                addresses, session, attempt_timeout_ms=100, failure_memory_ms=500
            )
            channel.known_epoch = 1
            # Four lost heartbeats: the rotation then starts at B, a follower.
            for _ in range(4):
                with pytest.raises(RequestTimedOutError):
                    await _post(channel, timeout_ms=100)
            assert (a.hits, b.hits, c.hits) == (2, 1, 1)
            a.mode = "active"
            b.mode = c.mode = "redirect"
            b.leader = c.leader = a.address
            a.release.set()  # the partition heals
            start = monotonic_ms()
            assert await _post(channel, timeout_ms=3_000) == {"ok": True}
            took = monotonic_ms() - start
            assert channel.active_address == a.address
            assert took < 2_000, f"reached the active controller only after {took} ms"

    asyncio.run(scenario())
