"""InitProducerId on a broker: producer ids handed out from blocks the controller allocates.

Theory of operation
-------------------
Producer ids must be unique across the cluster, across controller failover and across
full restarts, without a controller round trip per producer. As in Kafka (KIP-730) the
active controller hands a broker a block of ``PRODUCER_ID_BLOCK_SIZE`` ids by committing
a ProducerIds record to the metadata log (``POST /v1/producer-ids``); the broker then
serves InitProducerId from the block. The record is what makes the ids unique: the next
block starts where the committed record says, whichever controller is active, and a
block is only used after its record is committed (the controller answers after commit).

A broker that restarts asks for a new block and forgets the rest of its old one: ids are
cheap (2^63) and a gap is harmless, reuse is not.

The next block is fetched in the background once ``PREFETCH_FRACTION`` of the current
one is used, so a steady stream of new producers does not wait on the controller. A
request that finds no id left waits for the fetch (bounded by its timeout).

Epochs: a non-transactional idempotent producer always starts at epoch 0; it bumps its
epoch itself when it has to reset its sequences (Kafka's client does the same since
KIP-360), so the broker keeps no per-producer state here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from raftka.common.errors import KafkaError, RequestTimedOutError
from raftka.common.messages import decode_value
from raftka.common.messages.controller import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)

__all__ = ["PREFETCH_FRACTION", "ProducerIdBlock", "ProducerIdManager"]

log = logging.getLogger(__name__)

#: Fetch the next block when this share of the current one is used (Kafka: 90%).
PREFETCH_FRACTION: Final = 0.9
#: The controller's answer must name a positive block of at most this many ids.
BLOCK_LEN_MAX: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


# (path, body, timeout_ms) -> the active controller's JSON answer. The body is an
# AllocateProducerIdsRequest in its plain (dict) form.
PostToController = Callable[[str, dict[str, Any], int], Awaitable[dict[str, Any]]]


class ProducerIdManager:
    """Hands out producer ids from controller-allocated blocks (see the module docstring)."""

    def __init__(
        self,
        *,
        post: PostToController,
        broker_id: int,
        broker_epoch: Callable[[], int],
        request_timeout_ms: int = 10_000,
    ) -> None:
        self._post = post
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._request_timeout_ms = request_timeout_ms
        self._current: ProducerIdBlock | None = None
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        self._fetch: asyncio.Task[ProducerIdBlock] | None = None

    async def next_producer_id(self, *, timeout_ms: int) -> int:
        """A producer id no other InitProducerId in the cluster ever returned."""
        async with asyncio.timeout(timeout_ms / 1000):
            while True:
                producer_id = self.producer_id_now()
                if producer_id is not None:
                    return producer_id
                await self._wait_fetch()

    def producer_id_now(self) -> int | None:
        """An id from the block at hand, or None (a block fetch is then under way): the
        transaction coordinator's pure core allocates synchronously."""
        block = self._current
        if block is None or self._next_id >= block.end:
            if self._prefetched is None:
                self._start_fetch()
                return None
            self._use(self._prefetched)
            self._prefetched = None
            block = self._current
            assert block is not None
        producer_id = self._next_id
        self._next_id += 1
        if self._next_id >= block.start + PREFETCH_FRACTION * block.length:
            self._start_fetch()
        return producer_id

    async def wait_for_block(self, *, timeout_ms: int) -> None:
        """Return once an id is at hand (TimeoutError after ``timeout_ms``)."""
        async with asyncio.timeout(timeout_ms / 1000):
            while not self._at_hand():
                self._start_fetch()
                await self._wait_fetch()

    def _at_hand(self) -> bool:
        block = self._current
        return self._prefetched is not None or (block is not None and self._next_id < block.end)

    async def _wait_fetch(self) -> None:
        assert self._fetch is not None
        try:
            await asyncio.shield(self._fetch)
        except KafkaError:
            # The fetch failed (no controller yet, fenced...): the caller tries again
            # until its timeout.
            self._fetch = None
            await asyncio.sleep(0.05)  # a backoff, not synchronisation

    def _use(self, block: ProducerIdBlock) -> None:
        self._current = block
        self._next_id = block.start

    def _start_fetch(self) -> None:
        if self._fetch is not None and not self._fetch.done():
            return
        if self._prefetched is not None:
            return
        self._fetch = asyncio.create_task(self._fetch_block())
        self._fetch.add_done_callback(self._fetched)

    def _fetched(self, task: asyncio.Task[ProducerIdBlock]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.warning("producer id block request failed: %s", error)
            return
        block = task.result()
        if self._current is None or self._next_id >= self._current.end:
            self._use(block)
        else:
            self._prefetched = block

    async def _fetch_block(self) -> ProducerIdBlock:
        request = AllocateProducerIdsRequest(
            broker_id=self._broker_id, broker_epoch=self._broker_epoch()
        )
        try:
            raw = await self._post(
                "/v1/producer-ids", msgspec.to_builtins(request), self._request_timeout_ms
            )
        except KafkaError:
            raise
        except Exception as e:  # a transport failure: retriable, like a timeout
            raise RequestTimedOutError(f"producer id block: {type(e).__name__}: {e}") from e
        answer = decode_value(raw, AllocateProducerIdsResponse)
        start, length = answer.producer_id_start, answer.producer_id_len
        if start < 0 or not 0 < length <= BLOCK_LEN_MAX:
            raise KafkaError(f"the controller answered a bad producer id block {answer!r}")
        log.info(
            "producer id block",
            extra={"fields": {"start": start, "length": length, "broker_id": self._broker_id}},
        )
        return ProducerIdBlock(start, length)

    async def close(self) -> None:
        if self._fetch is not None and not self._fetch.done():
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch
