"""A stopping controller wakes its parked metadata fetches and apply-waits.

Before, a broker's long poll (max_wait_ms=5000) parked on the active controller when
the broker went away kept the connection busy, and aiohttp's shutdown waited for it:
the last controller of `raftka up` took 4 s to stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from raftka.common.errors import NotControllerError
from raftka.metadata.loader import MetadataLoader
from raftka.metadata.metadata_fetch import CommitSignal, MetadataFetchResult, fetch_metadata
from raftka.raft.quorum.engine import CommittedRecord

# Far longer than the test waits for the answer: an answer in time is the wake-up's.
PARKED_MS = 30_000
ANSWER_S = 5.0


class _EmptyEngine:
    """A quorum engine at its end: nothing committed past ``high_watermark``."""

    high_watermark = 7

    def read_committed(self, offset: int, records_max: int) -> Iterator[CommittedRecord]:
        return iter(())

    def latest_snapshot(self) -> None:
        return None


def _clock_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)


async def _fetch_at_the_end(signal: CommitSignal) -> MetadataFetchResult:
    """An observer's fetch at the engine's end: it parks for up to PARKED_MS."""
    return await fetch_metadata(
        _EmptyEngine(),  # type: ignore[arg-type]
        signal,
        offset=7,
        records_max=10,
        max_wait_ms=PARKED_MS,
        clock_ms=_clock_ms,
    )


def test_close_answers_a_parked_fetch_at_once() -> None:
    asyncio.run(_close_answers_a_parked_fetch())


async def _close_answers_a_parked_fetch() -> None:
    signal = CommitSignal()
    signal.bind(asyncio.get_running_loop())
    fetch = asyncio.ensure_future(_fetch_at_the_end(signal))
    await asyncio.sleep(0)  # the fetch parks
    assert not fetch.done(), "the fetch did not park"
    signal.close()
    result = await asyncio.wait_for(fetch, ANSWER_S)
    assert result.batches == () and result.next_offset == 7 and result.high_watermark == 7
    # And a fetch that comes after the close does not park at all.
    assert (await asyncio.wait_for(_fetch_at_the_end(signal), ANSWER_S)).batches == ()


def test_close_fails_a_wait_for_an_apply_with_not_controller() -> None:
    asyncio.run(_close_fails_a_wait_for_an_apply())


async def _close_fails_a_wait_for_an_apply() -> None:
    loader = MetadataLoader(snapshot_bytes_between=1 << 20)
    loader.signal.bind(asyncio.get_running_loop())
    wait = asyncio.ensure_future(loader.wait_applied(10**6, PARKED_MS, _clock_ms))
    await asyncio.sleep(0)
    assert not wait.done(), "the wait did not park"
    loader.signal.close()
    with pytest.raises(NotControllerError, match="shutting down"):
        await asyncio.wait_for(wait, ANSWER_S)
