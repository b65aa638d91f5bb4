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
A request's time is split into Kafka's stages (queue, local, remote, response queue and
send: :class:`RequestMetrics`) by a :class:`RequestTimer` the listener makes per request;
whatever parks the request adds to it through a context variable (:func:`add_remote`), so
the replica manager needs no reference to the metrics.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Final

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from raftka.server_common.node_http import NodeHttp

__all__ = [
    "LATENCY_BUCKETS_MS",
    "STAGE_BUCKETS_MS",
    "RequestMetrics",
    "RequestTimer",
    "StateCollector",
    "add_queue",
    "add_remote",
    "camel_case",
    "counter",
    "gauge",
    "https_api_metrics",
    "metrics_route",
    "new_registry",
    "start_timing",
    "stop_timing",
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


def https_api_metrics(http: NodeHttp) -> Iterator[Metric]:
    """The refusals of an HTTPS API (none for plain HTTP), labelled ``listener="HTTPS"``
    as Kafka labels its socket-server metrics. A failed authentication is a TLS
    handshake the server refused, as Kafka counts it, or a request refused 401 (the API
    is HTTP: a connection's certificate is mapped per request, see HttpsRefusals)."""
    if not http.secure:
        return
    prefix = "kafka_server_socketservermetrics_"
    for name, doc, value in (
        (
            prefix + "failed_authentication",
            "HTTPS API connections whose TLS handshake failed (no client certificate, "
            "another CA, not TLS) and requests refused (401) because no "
            "ssl.principal.mapping.rules rule maps the client certificate's subject.",
            http.refusals.failed_authentication,
        ),
        (
            "raftka_https_cluster_authorization_failed",
            "HTTPS API requests refused (403) because the principal is not a node "
            "(super.users) on a route for nodes only.",
            http.refusals.cluster_authorization_failed,
        ),
    ):
        family = CounterMetricFamily(name, doc, labels=["listener"])
        family.add_metric(["HTTPS"], value)
        yield family


def camel_case(name: str) -> str:
    """``list-offsets`` or ``list_offsets`` -> ``ListOffsets`` (Kafka's API names)."""
    return "".join(word.capitalize() for word in name.replace("_", "-").split("-"))


def new_registry() -> CollectorRegistry:
    """A fresh registry for one process (or one in-process test node)."""
    return CollectorRegistry(auto_describe=False)


class _Collected(Collector):
    """The families one scrape collected, for :func:`generate_latest` to format."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def metrics_route(
    registry: CollectorRegistry, before: Callable[[], Awaitable[None]] | None = None
) -> web.RouteDef:
    """``GET /metrics``: the registry in Prometheus' text format. ``before`` is awaited
    first (state the collectors need from elsewhere; it must bound its own time)."""

    async def handler(_request: web.Request) -> web.Response:
        if before is not None:
            await before()
        # Collected on the event loop (the collectors read state only the loop may
        # touch), formatted on a thread: the text is two thirds of a scrape's CPU
        # (profiled: bench/metrics_bench.py), and on the loop it stalled every request
        # in flight for the whole scrape, once a second per process; on a thread the
        # loop gets the GIL back at every switch interval.
        collected = CollectorRegistry(auto_describe=False)
        collected.register(_Collected(list(registry.collect())))
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, collected)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return web.get("/metrics", handler)


class RequestMetrics:
    """Kafka's ``kafka.network:type=RequestMetrics`` for both listeners: requests per API
    (``RequestsPerSec``) and the request-time split, per API, in ms. The ``request``
    label is Kafka's API name: ``api_names`` maps ``"METHOD /path"`` where the path does
    not say it, else the path's last part in CamelCase (``/v1/list-offsets`` ->
    ``ListOffsets``); a path no route matches counts as ``unknown``, so a scanner cannot
    make a label per URL.

    How Kafka's stages map onto raftka (one event loop, no handler thread pool):

    - ``RequestQueueTimeMs``: Kafka's wait in the request channel for a handler thread.
      Here the time waiting for an I/O worker (``num.io.threads`` / ``queued.max.requests``)
      inside the handler, plus, on the Kafka listener, the time from the frame's last
      byte read to its handler starting (the loop's scheduling, a produce waiting for the
      connection's previous produce). aiohttp does not timestamp a request when it parses
      its headers (the request object is made microseconds before the middleware runs),
      so on the HTTP API the loop's delay before the handler is not in it; the event-loop
      lag gauge shows that delay.
    - ``LocalTimeMs``: the handler's own work: the handler's time minus its queue and
      remote time (appending, reading, encoding the answer).
    - ``RemoteTimeMs``: time parked in a purgatory (``add_remote``): an acks=all produce
      waiting for the high watermark, a fetch's long poll waiting for ``min_bytes``, a
      request forwarded to the controller, a JoinGroup/SyncGroup waiting for the
      rebalance, an OffsetCommit waiting for its append.
    - ``ResponseQueueTimeMs``: on the Kafka listener, from the answer being ready to the
      connection's writer taking it (answers leave in request order, so a fast answer
      waits behind a slow one). aiohttp writes an answer in the handler's own task the
      moment it returns: no response queue, so the HTTP API observes nothing there.
    - ``ResponseSendTimeMs``: writing the answer to the socket (the Kafka listener's
      ``write`` + ``drain``; on HTTP the middleware's ``prepare`` + ``write_eof`` of an
      answer the handler returned unsent; a streamed answer is sent by its handler and
      counts as local time).
    - ``TotalTimeMs``: from arrival to the answer sent: the sum of the above.
    """

    def __init__(
        self, registry: CollectorRegistry, api_names: Mapping[str, str] | None = None
    ) -> None:
        self._names = dict(api_names or {})
        self._apis: dict[str, _ApiTimes] = {}
        registry.register(_RequestCollector(self._apis))

    def api_name(self, request: web.Request) -> str:
        info = request.match_info
        if info.http_exception is not None or info.route.resource is None:
            return "unknown"
        path = info.route.resource.canonical
        named = self._names.get(f"{request.method} {path}")
        if named is not None:
            return named
        return camel_case(path.rsplit("/", 1)[-1])

    def _of(self, api: str) -> _ApiTimes:
        times = self._apis.get(api)
        if times is None:
            times = self._apis[api] = _ApiTimes()
        return times

    def record(self, timer: RequestTimer, sent: float, *, response_queue: bool) -> None:
        """Count ``timer``'s request, its answer sent at ``sent`` (perf_counter s).
        ``response_queue``: the listener has a response queue (the Kafka listener)."""
        t = self._of(timer.api)
        t.requests += 1
        handled = timer.ready - timer.started
        t.total.observe((sent - timer.arrived) * 1000)
        t.queue.observe((timer.started - timer.arrived + timer.queued) * 1000)
        t.local.observe(max(0.0, handled - timer.queued - timer.remote) * 1000)
        t.remote.observe(timer.remote * 1000)
        t.send.observe((sent - timer.picked) * 1000)
        if response_queue:
            t.response_queue.observe((timer.picked - timer.ready) * 1000)

    def middleware(self) -> Middleware:
        """An aiohttp middleware timing every request (put it first: outermost). It
        sends an answer the handler returned unsent itself, to time the send; aiohttp's
        own prepare and write_eof afterwards find it sent and do nothing."""

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            timer = RequestTimer(time.perf_counter())
            token = start_timing(timer)
            try:
                response = await handler(request)
            except BaseException:
                timer.ready = timer.picked = time.perf_counter()
                timer.api = self.api_name(request)
                self.record(timer, timer.ready, response_queue=False)
                raise
            finally:
                stop_timing(token)
            timer.ready = timer.picked = time.perf_counter()
            timer.api = self.api_name(request)
            if not response.prepared:
                # A client gone mid-answer: aiohttp's own write_eof meets the same error
                # and handles it as it always does (no error logged).
                with contextlib.suppress(ConnectionError):
                    await response.prepare(request)
                    await response.write_eof()
            self.record(timer, time.perf_counter(), response_queue=False)
            return response

        return middleware


#: Coarser buckets for the stages of the split (queue, local, remote, response queue,
#: send): five histograms per API beside the total's would otherwise triple a scrape's
#: size and CPU; the total keeps the fine ones.
STAGE_BUCKETS_MS: Final = (1.0, 5.0, 25.0, 100.0, 500.0, 2500.0, 10000.0, 30000.0)


class _Buckets:
    """A histogram in milliseconds for the event loop only: a bisect and two adds per
    observation (prometheus_client's Histogram takes a lock and walks its buckets,
    several times slower, and the request-time split observes six per request). Its
    counts are per bucket; the collector makes them cumulative at scrape time."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: +Inf
        self.sum = 0.0

    def observe(self, ms: float) -> None:
        # A bucket counts values <= its bound: bisect_left finds the first bound >= ms.
        self.counts[bisect.bisect_left(self.bounds, ms)] += 1
        self.sum += ms

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for le, count in zip(_le(self.bounds), self.counts, strict=True):
            running += count
            out.append((le, running))
        return out


class _ApiTimes:
    """One API's request count and its time histograms."""

    __slots__ = ("local", "queue", "remote", "requests", "response_queue", "send", "total")

    def __init__(self) -> None:
        self.requests = 0
        self.total = _Buckets(LATENCY_BUCKETS_MS)
        self.queue = _Buckets(STAGE_BUCKETS_MS)
        self.local = _Buckets(STAGE_BUCKETS_MS)
        self.remote = _Buckets(STAGE_BUCKETS_MS)
        self.response_queue = _Buckets(STAGE_BUCKETS_MS)
        self.send = _Buckets(STAGE_BUCKETS_MS)


@functools.cache
def _le(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The ``le`` label of each bucket, as Prometheus writes it."""
    return (*(str(b) for b in bounds), "+Inf")


#: Kafka's stage -> (the _ApiTimes field, the metric's help).
_STAGES: Final = (
    (
        "totaltimems",
        "total",
        "Time from the request's arrival to its answer sent, ms (Kafka's TotalTimeMs: the "
        "sum of the queue, local, remote, response queue and send times).",
    ),
    (
        "requestqueuetimems",
        "queue",
        "Time waiting to be handled: for an I/O worker, and on the Kafka listener from the "
        "frame read to its handler's start, ms (Kafka's RequestQueueTimeMs).",
    ),
    ("localtimems", "local", "The handler's own work, ms (Kafka's LocalTimeMs)."),
    (
        "remotetimems",
        "remote",
        "Time parked in a purgatory: acks=all waiting for the high watermark, a fetch "
        "waiting for min_bytes, a request forwarded to the controller, a join or sync "
        "waiting for the rebalance, a commit for its append, ms (Kafka's RemoteTimeMs).",
    ),
    (
        "responsequeuetimems",
        "response_queue",
        "Kafka listener only: time from the answer ready to its connection's writer taking "
        "it (answers leave in request order), ms (Kafka's ResponseQueueTimeMs).",
    ),
    (
        "responsesendtimems",
        "send",
        "Time writing the answer to the socket, ms (Kafka's ResponseSendTimeMs).",
    ),
)


class _RequestCollector(StateCollector):
    """RequestMetrics' counts as prometheus_client metric families, at scrape time."""

    def __init__(self, apis: Mapping[str, _ApiTimes]) -> None:
        self._apis = apis

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests served, per API (Kafka's RequestsPerSec).",
            labels=["request"],
        )
        for api, times in self._apis.items():
            requests.add_metric([api], times.requests)
        yield requests
        for name, field, documentation in _STAGES:
            family = HistogramMetricFamily(
                "kafka_network_requestmetrics_" + name, documentation, labels=["request"]
            )
            for api, times in self._apis.items():
                buckets: _Buckets = getattr(times, field)
                # A stage is exported for an API once it has taken time there: most APIs
                # never park (remote) or wait for a worker (queue), and the HTTP API has
                # no response queue. Their all-zero histograms were over a third of a
                # scrape's lines, and a scrape's CPU is per line (issue #18's bound on
                # the endpoint's cost). Once shown, a stage's counts cover every request.
                if field == "total" or buckets.sum > 0:
                    family.add_metric([api], buckets.cumulative(), buckets.sum)
            yield family


class RequestTimer:
    """One request's timestamps (``time.perf_counter()`` seconds), filled in by the
    listener that serves it and by what parks it (:func:`add_remote`, :func:`add_queue`),
    then recorded once by :meth:`RequestMetrics.record`. Both listeners use it: the HTTP
    middleware and the Kafka listener (see :class:`RequestMetrics` for the stages)."""

    __slots__ = ("api", "arrived", "picked", "queued", "ready", "remote", "started", "task")

    def __init__(self, arrived: float) -> None:
        self.api = "unknown"
        self.arrived = arrived  # the earliest time the listener saw the request
        self.started = arrived  # its handler started
        self.ready = arrived  # its answer was ready
        self.picked = arrived  # the writer took the answer to send it
        self.queued = 0.0  # seconds waiting for an I/O worker, inside the handler
        self.remote = 0.0  # seconds parked in a purgatory, inside the handler
        self.task: asyncio.Task[object] | None = None  # the task serving it


# The timer of the request the running task serves, set by the listener in the
# handler's task. Tasks the handler spawns copy the context, so they see the timer too:
# a wait counts only in the task that serves the request (``timer.task``), as a
# background job spawned by a request (a producer-state snapshot) is not its wait.
_current: ContextVar[RequestTimer | None] = ContextVar("raftka_request_timer", default=None)


def start_timing(timer: RequestTimer) -> Token[RequestTimer | None]:
    """Make ``timer`` the running task's request timer; reset it with the token."""
    timer.task = asyncio.current_task()
    return _current.set(timer)


def stop_timing(token: Token[RequestTimer | None]) -> None:
    _current.reset(token)


def _serving() -> RequestTimer | None:
    timer = _current.get()
    if timer is None or timer.task is not asyncio.current_task():
        return None
    return timer


def add_remote(seconds: float) -> None:
    """The running request spent ``seconds`` parked in a purgatory (no-op outside the
    task serving a timed request: a background task, a test calling the manager)."""
    timer = _serving()
    if timer is not None:
        timer.remote += seconds


def add_queue(seconds: float) -> None:
    """The running request spent ``seconds`` waiting for an I/O worker."""
    timer = _serving()
    if timer is not None:
        timer.queued += seconds
