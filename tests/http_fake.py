"""An aiohttp application served on loopback from its own loop thread, for the client
tests' in-process fake brokers (test modules cannot import each other, see
``broker_harness``): blocking and asyncio clients on other threads can share it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from aiohttp import web


@contextlib.contextmanager
def serve_on_thread(app: web.Application) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """Serve ``app`` on 127.0.0.1 (a free port) on a new loop thread; yields the
    ``host:port`` address and that loop, and stops both on exit."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"127.0.0.1:{port}"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        address = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        yield address, loop
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
