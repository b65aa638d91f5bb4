"""What the admin clients share: lazy connection set-up, close, async context manager,
and the per-call deadline from ``default_api_timeout_ms``."""

from __future__ import annotations

from raftka.client._closing import AsyncClosingOnExit
from raftka.client._transport import MetadataCache, Transport, monotonic_ms, open_connection
from raftka.client.config import AdminConfig
from raftka.common.errors import IllegalStateError

__all__ = ["AdminClientBase"]


class AdminClientBase(AsyncClosingOnExit):
    """Base of ``AsyncAdmin`` and ``AsyncGroupAdmin``: no I/O until the first call."""

    #: Named in the error a call on a closed client raises.
    _kind = "admin client"

    def __init__(self, config: AdminConfig) -> None:
        self.config = config
        self._transport: Transport | None = None
        self._metadata: MetadataCache | None = None
        self._closed = False

    def _started(self) -> tuple[Transport, MetadataCache]:
        if self._closed:
            raise IllegalStateError(f"this {self._kind} has been closed")
        if self._transport is None or self._metadata is None:
            self._transport, self._metadata = open_connection(self.config)
        return self._transport, self._metadata

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            await self._transport.close()

    def _deadline(self, timeout_ms: int | None) -> int:
        return monotonic_ms() + (
            self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        )
