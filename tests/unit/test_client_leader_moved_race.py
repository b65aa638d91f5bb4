"""``await_unless_leader_moved`` when the request's answer and the watcher's cancel
meet in one event-loop turn (issue #19, 2; the latency fix of client/_transport.py).

The watcher cancels the caller's task once the metadata names another leader. If the
answer is already in by then, the cancel still reaches the request at its next step;
whatever the request does with it, the caller must see one of two clean outcomes, and
its task must not stay counted as cancelled (``asyncio.timeout`` and ``TaskGroup`` read
that count, so a leftover would turn a later, unrelated await into a cancellation):

- the request lets the cancel through: NetworkError "no longer the leader", which the
  producer and fetcher retry at the new leader (a produce under the same sequence);
- the request swallows the cancel and returns its answer: the answer is kept.

A cancel that comes from elsewhere stays a cancel.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from raftka.client import TopicPartition
from raftka.client._transport import MetadataCache, await_unless_leader_moved
from raftka.common.errors import NetworkError

TP = TopicPartition("t", 0)
ANSWER = "the answer"


@dataclass
class View:
    """The metadata view: leader of ``TP`` is broker 2 from the first look on; that
    first look also delivers the request's answer, in the same turn as the cancel."""

    answer: asyncio.Future[str]
    looks: int = 0
    on_look: list[asyncio.Task[Any]] = field(default_factory=list)  # tasks to cancel too

    def leader_address(self, tp: TopicPartition) -> tuple[int, str] | None:
        assert tp == TP
        self.looks += 1
        if not self.answer.done():
            self.answer.set_result(ANSWER)
        for task in self.on_look:
            task.cancel()
        return (2, "127.0.0.1:2")


@dataclass
class Metadata:
    view: View
    suspects: list[str] = field(default_factory=list)

    def mark_suspect(self, address: str) -> None:
        self.suspects.append(address)

    async def refresh(self) -> None:
        return None


async def _call(request: Any, metadata: Metadata) -> str:
    result: str = await await_unless_leader_moved(
        request,
        metadata=cast(MetadataCache, metadata),
        broker_id=1,
        address="127.0.0.1:1",
        partitions=(TP,),
        check_after_ms=0,
    )
    return result


def test_an_answer_in_the_turn_of_the_cancel_that_lets_it_through_becomes_network_error() -> None:
    async def main() -> None:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        metadata = Metadata(View(answer))

        async def request() -> str:
            return await answer  # lets a cancel through, as aiohttp does

        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(NetworkError, match="no longer the leader of t-0"):
            await _call(request(), metadata)
        assert metadata.view.looks == 1, "the watcher did not look at the metadata once"
        assert answer.done(), "the answer was not delivered in the watcher's turn"
        assert task.cancelling() == 0, "the watcher's cancel stayed counted on the caller"
        assert metadata.suspects == ["127.0.0.1:1"]
        # The caller's task goes on normally: a later await is not cancelled.
        async with asyncio.timeout(1):
            await asyncio.sleep(0)

    asyncio.run(main())


def test_an_answer_kept_by_a_request_that_swallows_the_cancel_is_returned() -> None:
    async def main() -> None:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        metadata = Metadata(View(answer))

        async def request() -> str:
            try:
                return await asyncio.shield(answer)
            except asyncio.CancelledError:
                return answer.result()  # the answer was in: keep it

        task = asyncio.current_task()
        assert task is not None
        assert await _call(request(), metadata) == ANSWER
        assert task.cancelling() == 0, "the swallowed cancel stayed counted on the caller"
        async with asyncio.timeout(1):
            await asyncio.sleep(0)

    asyncio.run(main())


def test_a_cancel_from_elsewhere_in_the_same_turn_stays_a_cancel() -> None:
    async def main() -> None:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        metadata = Metadata(View(answer))

        async def request() -> str:
            return await answer

        call = asyncio.ensure_future(_call(request(), metadata))
        # A cancel from outside in the watcher's own turn, beside the watcher's.
        metadata.view.on_look.append(call)
        with pytest.raises(asyncio.CancelledError):
            await call
        assert metadata.view.looks == 1, "the watcher did not look at the metadata"

    asyncio.run(main())
