"""``async with`` for the async faces (``AsyncProducer``, ``AsyncConsumer``,
``AsyncAdmin``): the block's end awaits ``close()``; for the producer and the consumer,
which start their background work explicitly, its beginning awaits ``start()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClosingOnExit", "AsyncStartedOnEnter"]


class AsyncClosingOnExit:
    """``async with`` support: the block's end awaits ``close()``."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncStartedOnEnter(AsyncClosingOnExit):
    """``async with`` support that also awaits ``start()`` as the block begins."""

    async def start(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self
