"""Which broker the client asks for metadata: the one that answered last, while it
answers (Kafka's clients prefer a node they are connected to); a broker that hangs is
met once, not on every turn of a rotation. A topic the ACLs hide is refused at once,
not waited for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftka.client._transport import MetadataCache
from raftka.common.errors import RequestTimedOutError, TopicAuthorizationFailedError
from raftka.common.messages import broker as api
from raftka.common.time import monotonic_ms

BROKERS = {101: "127.0.0.1:9101", 102: "127.0.0.1:9102", 103: "127.0.0.1:9103"}


class _Transport:
    """Answers metadata naming every broker, except at ``hanging`` (a request timeout,
    as a paused broker gives); records whom it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.hanging: set[str] = set()
        self.topics: tuple[api.MetadataTopic, ...] = ()

    async def request_message(self, address: str, *_args: Any, **_kwargs: Any) -> Any:
        self.asked.append(address)
        if address in self.hanging:
            raise RequestTimedOutError(f"{address} did not answer")
        return api.MetadataResponse(
            brokers=tuple(
                api.MetadataBroker(id=i, host=a.split(":")[0], port=int(a.split(":")[1]))
                for i, a in BROKERS.items()
            ),
            topics=self.topics,
        )


def _cache(transport: _Transport, bootstrap: str) -> MetadataCache:
    return MetadataCache(
        transport,  # type: ignore[arg-type]
        bootstrap_servers=[bootstrap],
        metadata_max_age_ms=300_000,
        retry_backoff_ms=100,
        request_timeout_ms=30_000,
    )


def test_a_hanging_broker_is_met_once_then_the_answering_one_is_kept() -> None:
    async def run() -> None:
        transport = _Transport()
        transport.hanging.add(BROKERS[103])
        cache = _cache(transport, BROKERS[101])
        for _ in range(9):
            await cache.refresh()
        # The first refresh learns all three; from then on the broker that answered is
        # asked first every time: the hanging one is never asked.
        assert BROKERS[103] not in transport.asked
        assert transport.asked == [BROKERS[101]] * 9

    asyncio.run(run())


def test_when_the_answering_broker_hangs_another_takes_over() -> None:
    async def run() -> None:
        transport = _Transport()
        cache = _cache(transport, BROKERS[101])
        await cache.refresh()
        transport.hanging.add(BROKERS[101])
        transport.asked.clear()
        await cache.refresh()
        assert transport.asked[0] == BROKERS[101] and len(transport.asked) == 2
        took_over = transport.asked[1]
        transport.asked.clear()
        for _ in range(4):
            await cache.refresh()
        assert transport.asked == [took_over] * 4  # the suspect is not asked again

    asyncio.run(run())


@pytest.mark.parametrize("answering", [None, "127.0.0.1:9999"])
def test_without_an_answering_broker_the_rotation_covers_every_broker(
    answering: str | None,
) -> None:
    async def run() -> None:
        cache = _cache(_Transport(), BROKERS[101])
        await cache.refresh()  # learns all three
        cache._answering = answering  # none, or one no longer known
        firsts = {cache.broker_addresses()[0] for _ in range(3)}
        assert firsts == set(BROKERS.values())

    asyncio.run(run())


def test_a_topic_the_acls_hide_is_refused_at_once_not_waited_for() -> None:
    """TOPIC_AUTHORIZATION_FAILED in the metadata answer: a producer's wait for the
    topic raises it on the first answer instead of retrying until max_block_ms."""

    async def run() -> None:
        transport = _Transport()
        refused = api.ErrorObject(
            error="TOPIC_AUTHORIZATION_FAILED", error_code=29, message="DESCRIBE is needed"
        )
        transport.topics = (api.MetadataTopic(name="secret", error=refused),)
        cache = _cache(transport, BROKERS[101])
        with pytest.raises(TopicAuthorizationFailedError, match="DESCRIBE is needed"):
            await cache.wait_for_topic("secret", monotonic_ms() + 60_000)
        assert len(transport.asked) == 1

    asyncio.run(run())
