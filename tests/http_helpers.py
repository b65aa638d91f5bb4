"""One raw HTTP POST to a broker from a synchronous test (integration tests that send
hand-built frames). Test modules cannot import each other (``--import-mode=importlib``),
so what they share lives here, on pytest's ``pythonpath``."""

from __future__ import annotations

import asyncio

import aiohttp


def post_raw(address: str, path: str, body: bytes, ctype: str = "application/json") -> bytes:
    """POST ``body`` to ``http://address/path``; the answer's bytes (30 s bound)."""

    async def go() -> bytes:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                f"http://{address}{path}",
                data=body,
                headers={"Content-Type": ctype},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as r,
        ):
            return await r.read()

    return asyncio.run(go())
