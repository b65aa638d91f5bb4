"""Prometheus metrics every server process shares: its registry, ``GET /metrics`` and
the per-API request metrics of its HTTP API.

Theory of operation
-------------------
Each controller and broker owns one :class:`~prometheus_client.CollectorRegistry` (never
the library's global one: tests run several nodes in one process and each must show only
its own numbers). Its state (partitions, ISR, the quorum) is read by custom collectors at
scrape time (``raftka.broker.metrics``, ``raftka.metadata.metrics``): a broker nobody
scrapes pays nothing for them. Only events that leave no state behind (a request served,
bytes appended) are counted as they happen, with prometheus_client's own counters and
histograms. The exposition text is always prometheus_client's (:func:`generate_latest`),
served at ``GET /metrics`` on the process's HTTP API port (the port ``raftka up``'s
``cluster.json`` lists), so one scrape target per process.

Names follow Kafka's JMX metrics the way Prometheus' JMX exporter renders them:
``kafka_<domain>_<type>_<name>`` all lower case, labels for Kafka's tags (``request``,
``topic``). A Kafka meter (``...PerSec``) becomes a counter named without ``PerSec``
(prometheus_client adds ``_total``): rates are PromQL's ``rate()``. Kafka's time
histograms keep their names and unit, milliseconds (``kafka_network_requestmetrics_totaltimems``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

__all__ = [
    "LATENCY_BUCKETS_MS",
    "RequestMetrics",
    "StateCollector",
    "camel_case",
    "counter",
    "gauge",
    "metrics_route",
    "new_registry",
]

#: Histogram buckets in milliseconds, from a local append to a request timeout.
LATENCY_BUCKETS_MS: Final = (
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0,
)  # fmt: skip

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StateCollector(Collector):
    """A collector read at scrape time. ``describe`` is empty so registering it does not
    run ``collect`` (the process may not be started yet)."""

    def describe(self) -> Iterable[object]:
        return ()


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    """One unlabelled gauge, for a collector to yield."""
    return GaugeMetricFamily(name, documentation, value=value)


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """One unlabelled counter read from state (``_total`` is added), for a collector."""
    return CounterMetricFamily(name, documentation, value=value)


def camel_case(name: str) -> str:
    """``list-offsets`` or ``list_offsets`` -> ``ListOffsets`` (Kafka's API names)."""
    return "".join(word.capitalize() for word in name.replace("_", "-").split("-"))


def new_registry() -> CollectorRegistry:
    """A fresh registry for one process (or one in-process test node)."""
    return CollectorRegistry(auto_describe=False)


def metrics_route(registry: CollectorRegistry) -> web.RouteDef:
    """``GET /metrics``: the registry in Prometheus' text format."""

    async def handler(_request: web.Request) -> web.Response:
        # On the event loop: the collectors read state only the loop may touch.
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return web.get("/metrics", handler)


class RequestMetrics:
    """Kafka's ``kafka.network:type=RequestMetrics`` for an HTTP API: requests per API
    (``RequestsPerSec``) and the time from the handler's start to its response being
    ready (``TotalTimeMs``). The ``request`` label is Kafka's API name: ``api_names``
    maps ``"METHOD /path"`` where the path does not say it, else the path's last part in
    CamelCase (``/v1/list-offsets`` -> ``ListOffsets``); a path no route matches counts
    as ``unknown``, so a scanner cannot make a label per URL."""

    def __init__(
        self, registry: CollectorRegistry, api_names: Mapping[str, str] | None = None
    ) -> None:
        self._names = dict(api_names or {})
        self._children: dict[str, tuple[Counter, Histogram]] = {}
        self.requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests served, per API (Kafka's RequestsPerSec).",
            ["request"],
            registry=registry,
        )
        self.total_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from the request's arrival at its handler to its answer, ms "
            "(Kafka's TotalTimeMs; remote waits for acks=all and fetch long polls included).",
            ["request"],
            buckets=LATENCY_BUCKETS_MS,
            registry=registry,
        )

    def api_name(self, request: web.Request) -> str:
        info = request.match_info
        if info.http_exception is not None or info.route.resource is None:
            return "unknown"
        path = info.route.resource.canonical
        named = self._names.get(f"{request.method} {path}")
        if named is not None:
            return named
        return camel_case(path.rsplit("/", 1)[-1])

    def observe(self, api: str, elapsed_ms: float) -> None:
        children = self._children.get(api)
        if children is None:
            # labels() takes a lock and checks the values on every call: once per API.
            children = (self.requests.labels(api), self.total_time_ms.labels(api))
            self._children[api] = children
        children[0].inc()
        children[1].observe(elapsed_ms)

    def middleware(self) -> Middleware:
        """An aiohttp middleware timing every request (put it first: outermost)."""

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            started = time.perf_counter()
            try:
                return await handler(request)
            finally:
                self.observe(self.api_name(request), (time.perf_counter() - started) * 1000)

        return middleware
