"""wait_event: a timed wait on an event that never loses its caller's cancellation."""

from __future__ import annotations

import asyncio

from raftka.common.time import wait_event


def test_set_timeout_and_unbounded() -> None:
    """True once the event is set, False at the timeout, and None waits without limit."""

    async def scenario() -> None:
        event = asyncio.Event()
        assert await wait_event(event, 0.01) is False
        asyncio.get_running_loop().call_later(0.01, event.set)
        assert await wait_event(event, None) is True
        assert await wait_event(event, 0) is True  # already set: no waiting at all

    asyncio.run(scenario())


def test_cancellation_with_the_event_set_in_the_same_turn_propagates() -> None:
    """A background loop of timed waits is cancelled in the same event-loop turn as its
    event is set (what a busy driver loop sees all the time): it always ends with
    CancelledError. On Python 3.11, the same loop written with asyncio.wait_for swallows
    that cancellation every time and keeps running (CPython gh-86296)."""

    async def loop_forever(event: asyncio.Event) -> None:
        while True:
            event.clear()
            await wait_event(event, 0.05)

    async def scenario() -> None:
        for i in range(50):
            event = asyncio.Event()
            task = asyncio.create_task(loop_forever(event))
            await asyncio.sleep(0)
            event.set()
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=2)
            assert task in done, f"round {i}: the loop survived cancel()"
            assert task.cancelled()

    asyncio.run(scenario())
