"""A broker's own configs, as DescribeConfigs of a broker resource answers them.

raftka's broker configs are static: read from the properties file at start, changed by
editing it and restarting (there are no dynamic broker configs; the controller refuses
to alter a broker resource). So a broker describes exactly the properties it was
started with, each with source STATIC_BROKER_CONFIG and read-only, as Kafka lists a
static config. A value that is a secret (a key naming a password, a secret or a JAAS
config, as Kafka's PASSWORD-typed configs) is sensitive: its value is not sent.

``GET /v1/broker-configs`` (``raftka configs --describe --entity-type brokers --all``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from raftka.common.messages import encode
from raftka.common.messages.controller import ConfigEntryData, DescribeConfigsResponse

__all__ = ["broker_config_entries", "broker_configs_routes", "is_sensitive"]

_SECRET_WORDS = ("password", "secret", "jaas.config")


def is_sensitive(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def broker_config_entries(properties: Mapping[str, str]) -> list[ConfigEntryData]:
    return [
        ConfigEntryData(
            name=key,
            value=None if is_sensitive(key) else properties[key],
            source="STATIC_BROKER_CONFIG",
            is_default=False,
            type="PASSWORD" if is_sensitive(key) else None,
            read_only=True,
            is_sensitive=is_sensitive(key),
        )
        for key in sorted(properties)
    ]


def broker_configs_routes(
    describe: Callable[[web.Request], tuple[int, Mapping[str, str]]],
) -> list[web.RouteDef]:
    """``describe`` gives the request's broker id and its properties."""

    async def handle(request: web.Request) -> web.Response:
        broker_id, properties = describe(request)
        answer = DescribeConfigsResponse(
            resource_type="broker",
            resource_name=str(broker_id),
            entries=broker_config_entries(properties),
        )
        return web.Response(body=encode(answer), content_type="application/json")

    route: Callable[[web.Request], Awaitable[web.Response]] = handle
    return [web.get("/v1/broker-configs", route)]
