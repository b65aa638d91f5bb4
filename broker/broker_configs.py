"""A broker's own configs, as DescribeConfigs of a broker resource answers them.

raftka's broker configs are static: read from the properties file at start, changed by
editing it and restarting, except the few dynamic ones the controller accepts for a
broker resource (:mod:`raftka.metadata.broker_dynamic_config`: the replication
throttles). So a broker describes the properties it was started with, each with source
STATIC_BROKER_CONFIG and read-only, as Kafka lists a static config, and the dynamic
keys set in committed metadata for it (DYNAMIC_BROKER_CONFIG) or for every broker
(DYNAMIC_DEFAULT_BROKER_CONFIG), its own value first. A value that is a secret (a key
naming a password, a secret or a JAAS config, as Kafka's PASSWORD-typed configs) is
sensitive: its value is not sent.

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


def broker_config_entries(
    properties: Mapping[str, str],
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[ConfigEntryData]:
    """``dynamic``: this broker's dynamic keys; ``dynamic_default``: the cluster's."""
    merged = {**(dynamic_default or {}), **(dynamic or {})}
    return [
        ConfigEntryData(
            name=key,
            value=merged[key],
            source=(
                "DYNAMIC_BROKER_CONFIG"
                if dynamic and key in dynamic
                else "DYNAMIC_DEFAULT_BROKER_CONFIG"
            ),
            is_default=False,
            type=None,
            read_only=False,
            is_sensitive=False,
        )
        for key in sorted(merged)
    ] + [
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
        if key not in merged  # a dynamic value overrides the static one, as in Kafka
    ]


def broker_configs_routes(
    describe: Callable[
        [web.Request], tuple[int, Mapping[str, str], Mapping[str, str], Mapping[str, str]]
    ],
) -> list[web.RouteDef]:
    """``describe`` gives the request's broker id, its properties, its dynamic configs
    and the cluster-wide dynamic broker defaults."""

    async def handle(request: web.Request) -> web.Response:
        broker_id, properties, dynamic, dynamic_default = describe(request)
        answer = DescribeConfigsResponse(
            resource_type="broker",
            resource_name=str(broker_id),
            entries=broker_config_entries(properties, dynamic, dynamic_default),
        )
        return web.Response(body=encode(answer), content_type="application/json")

    route: Callable[[web.Request], Awaitable[web.Response]] = handle
    return [web.get("/v1/broker-configs", route)]
