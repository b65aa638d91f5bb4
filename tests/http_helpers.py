"""Raw HTTP for synchronous integration tests: one POST to a broker (hand-built
frames), a partition as the brokers' metadata describes it. Test modules cannot import
each other (``--import-mode=importlib``), so what they share lives here, on pytest's
``pythonpath``."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from raftka.local.brokers import LocalBrokers


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


def led_partition(brokers: LocalBrokers, topic: str, partition: int) -> dict[str, Any] | None:
    """``topic``-``partition`` as the first running broker that names a leader for it
    describes it in its metadata (its ``leader``, ``isr``, ...); None if none does."""
    for b in brokers.ids:
        if not brokers[b].running:
            continue
        md = brokers.metadata(b) or {"topics": []}
        for t in md["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    if p["partition"] == partition and p["leader"] >= 0:
                        return dict(p)
    return None
