"""Clocks and timed waits, one copy for every layer.

``monotonic_ms`` is the clock every pure core is fed with (``now_ms``): milliseconds of
``time.monotonic_ns``, never wall time, so a clock step cannot expire a session.

Waiting on an asyncio.Event with a timeout, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for(event.wait(), t)`` can swallow a cancellation that
arrives just as its timeout fires (CPython gh-86296): the caller sees a timeout, not
CancelledError. A background loop written as ``while True: ... wait_for(...)`` then
survives ``task.cancel()``, and whoever awaits the cancelled task waits forever (a
quorum node's ``stop()`` hung that way under load). ``asyncio.timeout`` counts
cancellations and re-raises them, so every timed wait on an event goes through here.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["monotonic_ms", "wait_event", "wall_clock_ms"]


def monotonic_ms() -> int:
    """Milliseconds of the monotonic clock."""
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: for comparing with record timestamps (retention,
    the timestamp window, tombstone age, offset expiry), never for timeouts."""
    return time.time_ns() // 1_000_000


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes (None: no limit); True if set.

    A cancellation of the caller always propagates as CancelledError."""
    if timeout_s is None:
        await event.wait()
        return True
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
