"""The console's aiohttp application: the page, its script, and the ``/api/...`` JSON.

The cluster is read only through raftka's public clients, made once on the app's event
loop: :class:`AsyncAdmin` (topics, configs, describe_cluster, offsets),
:class:`AsyncGroupAdmin` (groups, committed offsets), a short-lived :class:`AsyncConsumer`
per message-browser request, and the controllers' ``GET /v1/quorum`` (what ``raftka
quorum status`` reads) for the active controller and the Raft epoch.

Every call is bounded twice: the client's own ``timeout_ms`` and an outer
``asyncio.wait_for`` a little longer, so that a killed broker or controller turns into a
one-line error in the page (``{"error": "KAFKA_TIMEOUT: ..."}``, HTTP 503) within
``api_timeout_ms`` instead of a hung request; the console keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import importlib.resources
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
from aiohttp import web

from raftka.client.admin import AsyncAdmin
from raftka.client.config import SecurityOptions
from raftka.client.consumer.consumer import AsyncConsumer
from raftka.client.group_admin import AsyncGroupAdmin
from raftka.client.structs import ConsumerRecord, TopicDescription, TopicPartition
from raftka.common.client_tls import connector_tls
from raftka.common.errors import InvalidRequestError, KafkaError, NetworkError
from raftka.common.messages import decode
from raftka.common.messages.controller import DescribeQuorumResponse
from raftka.console import shape

__all__ = ["QUORUM_TIMEOUT_S", "ConsoleSettings", "make_app"]

T = TypeVar("T")

#: A controller that does not answer /v1/quorum within this is skipped for the next one.
QUORUM_TIMEOUT_S: Final = 2.0
#: How long the message browser waits for records once positioned.
BROWSE_WAIT_MS_MAX: Final = 3_000
#: Slack of the outer bound over the clients' own timeout.
OUTER_SLACK_S: Final = 2.0

_STATIC: Final = ("index.html", "console.js", "console.css")
_CONTENT_TYPES: Final = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


class ConsoleSettings:
    """What ``raftka console`` was given."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        api_timeout_ms: int,
        reports_dir: Path | None = None,
        security: SecurityOptions | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.api_timeout_ms = api_timeout_ms
        self.reports_dir = reports_dir
        #: The clients' security settings (``--command-config``; empty: PLAINTEXT).
        self.security: SecurityOptions = security or {}


class _Clients:
    """The clients, made on the app's loop at start-up and closed at clean-up."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        common: dict[str, Any] = {
            "bootstrap_servers": settings.bootstrap_servers,
            "client_id": "raftka-console",
            "default_api_timeout_ms": settings.api_timeout_ms,
            "request_timeout_ms": min(settings.api_timeout_ms, 30_000),
            **settings.security,
        }
        self.admin = AsyncAdmin(**common)
        self.groups = AsyncGroupAdmin(**common)
        # The controllers' /v1/quorum, over HTTPS with the clients' certificate if set.
        tls = self.admin.config.tls_context()
        self._scheme = "http" if tls is None else "https"
        self.http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=QUORUM_TIMEOUT_S),
            connector=aiohttp.TCPConnector(**connector_tls(tls)),  # type: ignore[arg-type]
        )

    async def close(self) -> None:
        await self.admin.close()
        await self.groups.close()
        await self.http.close()

    async def bounded(self, call: Awaitable[T]) -> T:
        """``call`` under the outer bound (see the module's docstring)."""
        return await asyncio.wait_for(call, self.settings.api_timeout_ms / 1000 + OUTER_SLACK_S)

    async def quorum(self, controllers: tuple[str, ...]) -> DescribeQuorumResponse:
        """The quorum as the active controller describes it (the first controller that
        answers, else: its view names the leader, which is then asked)."""
        errors: list[str] = []
        for address in controllers:
            try:
                info = await self._quorum_at(address)
            except (OSError, TimeoutError, aiohttp.ClientError, KafkaError) as e:
                errors.append(f"{address}: {shape.error_json(e)['error']}")
                continue
            leader = info.leader_address
            if info.role != "leader" and leader and leader != address:
                try:
                    return await self._quorum_at(leader)
                except (OSError, TimeoutError, aiohttp.ClientError, KafkaError):
                    pass  # the follower's view is still the best there is
            return info
        raise NetworkError("; ".join(errors) or "no controller is known")

    async def _quorum_at(self, address: str) -> DescribeQuorumResponse:
        async with self.http.get(f"{self._scheme}://{address}/v1/quorum") as response:
            body = await response.read()
            if response.status != 200:
                raise InvalidRequestError(f"HTTP {response.status} from /v1/quorum")
        return decode(body, DescribeQuorumResponse)


_CLIENTS: Final = web.AppKey("clients", _Clients)
_SETTINGS: Final = web.AppKey("settings", ConsoleSettings)

Handler = Callable[[web.Request], Awaitable[dict[str, Any]]]


def _json_route(handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler's dict as JSON, or its error as ``{"error": line}``: 400 for a bad
    request, 503 for a cluster that did not answer, 500 otherwise (a line, never a
    traceback)."""

    async def route(request: web.Request) -> web.Response:
        try:
            return web.json_response(await handler(request))
        except InvalidRequestError as e:
            return web.json_response(shape.error_json(e), status=400)
        except (KafkaError, TimeoutError, OSError, aiohttp.ClientError) as e:
            return web.json_response(shape.error_json(e), status=503)
        except ValueError as e:
            return web.json_response(shape.error_json(InvalidRequestError(str(e))), status=400)

    return route


def _int_param(request: web.Request, name: str, *, minimum: int = 0) -> int | None:
    raw = request.query.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequestError(f"{name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise InvalidRequestError(f"{name} must be at least {minimum}, not {value}")
    return value


# ---------------------------------------------------------------------------------------
# Handlers


async def _cluster(request: web.Request) -> dict[str, Any]:
    clients = request.app[_CLIENTS]
    timeout = clients.settings.api_timeout_ms
    cluster = await clients.bounded(clients.admin.describe_cluster(timeout_ms=timeout))
    topics: list[TopicDescription] = await clients.bounded(
        clients.admin.describe_topics(None, timeout_ms=timeout)
    )
    quorum: DescribeQuorumResponse | None = None
    quorum_error: str | None = None
    try:
        quorum = await clients.quorum(cluster.controllers)
    except KafkaError as e:
        quorum_error = shape.error_json(e)["error"]
    return {
        "overview": shape.overview_json(cluster, quorum, topics, quorum_error),
        **shape.topics_json(topics),
    }


async def _topic_configs(request: web.Request) -> dict[str, Any]:
    clients = request.app[_CLIENTS]
    topic = request.match_info["topic"]
    found = await clients.bounded(
        clients.admin.describe_configs([topic], timeout_ms=clients.settings.api_timeout_ms)
    )
    return shape.topic_configs_json(topic, found.get(topic, {}))


async def _groups(request: web.Request) -> dict[str, Any]:
    clients = request.app[_CLIENTS]
    result = await clients.bounded(
        clients.groups.list_groups_result(timeout_ms=clients.settings.api_timeout_ms)
    )
    return shape.groups_json(result.groups, result.errors)


async def _group(request: web.Request) -> dict[str, Any]:
    clients = request.app[_CLIENTS]
    timeout = clients.settings.api_timeout_ms
    group_id = request.match_info["group"]
    description = await clients.bounded(clients.groups.describe_group(group_id, timeout_ms=timeout))
    committed = await clients.bounded(clients.groups.list_offsets(group_id, timeout_ms=timeout))
    partitions = set(committed) | {tp for m in description.members for tp in m.assignment}
    ends: dict[TopicPartition, int] = {}
    if partitions:
        # LATEST_TIMESTAMP (-1): the high watermark, what a consumer can read up to.
        ends = await clients.bounded(
            clients.groups.partition_offsets(sorted(partitions), -1, timeout_ms=timeout)
        )
    return shape.group_json(description, committed, ends)


async def _messages(request: web.Request) -> dict[str, Any]:
    clients = request.app[_CLIENTS]
    topic = request.query.get("topic", "")
    if not topic:
        raise InvalidRequestError("give a topic")
    partition = _int_param(request, "partition") or 0
    offset = _int_param(request, "offset")
    timestamp = _int_param(request, "timestamp")
    limit = _int_param(request, "limit", minimum=1) or 20
    if limit > shape.RECORDS_MAX:
        raise InvalidRequestError(f"limit must be at most {shape.RECORDS_MAX}, not {limit}")
    fmt = request.query.get("format", "text")
    if fmt not in shape.FORMATS:
        raise InvalidRequestError(f"format must be one of {', '.join(shape.FORMATS)}")
    if offset is not None and timestamp is not None:
        raise InvalidRequestError("give an offset or a timestamp, not both")
    start, records = await clients.bounded(
        _browse(clients.settings, TopicPartition(topic, partition), offset, timestamp, limit)
    )
    return shape.records_json(topic, partition, start, records, fmt)


async def _browse(
    settings: ConsoleSettings,
    tp: TopicPartition,
    offset: int | None,
    timestamp: int | None,
    limit: int,
) -> tuple[int | None, list[ConsumerRecord]]:
    """Up to ``limit`` records of one partition from ``offset`` (or the first at or
    after ``timestamp``, or the log start), stopping at the high watermark."""
    timeout = settings.api_timeout_ms
    consumer = AsyncConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        client_id="raftka-console-browser",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        default_api_timeout_ms=timeout,
        request_timeout_ms=min(timeout, 30_000),
        fetch_max_wait_ms=200,
        max_poll_records=limit,
        **settings.security,
    )
    try:
        consumer.assign([tp])
        (end,) = (await consumer.end_offsets([tp], timeout_ms=timeout)).values()
        if timestamp is not None:
            found = (await consumer.offsets_for_times({tp: timestamp}, timeout_ms=timeout))[tp]
            if found is None:
                return None, []  # nothing at or after that time
            offset = found.offset
        if offset is None:
            consumer.seek_to_beginning(tp)
            offset = await consumer.position(tp, timeout_ms=timeout)
        else:
            consumer.seek(tp, offset)
        records: list[ConsumerRecord] = []
        wait_ms = min(timeout, BROWSE_WAIT_MS_MAX)
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        # The next offset from the last record read, not offset + count: a compacted
        # log has gaps, and counting would wait out the deadline at its end.
        while len(records) < limit and (records[-1].offset + 1 if records else offset) < end:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            batch = await consumer.poll(int(remaining * 1000), max_records=limit - len(records))
            records.extend(batch.get(tp, []))
        return offset, records[:limit]
    finally:
        await consumer.close()


async def _reports(request: web.Request) -> dict[str, Any]:
    root = request.app[_SETTINGS].reports_dir
    pictures = [] if root is None else sorted(root.rglob("*.png"))
    return shape.reports_json(root, pictures)


async def _report_file(request: web.Request) -> web.StreamResponse:
    root = request.app[_SETTINGS].reports_dir
    if root is None:
        raise web.HTTPNotFound(text="no --reports folder given")
    path = (root / request.match_info["path"]).resolve()
    # Only PNGs inside the folder: a ../ in the URL must not reach other files.
    if not path.is_relative_to(root.resolve()) or path.suffix != ".png" or not path.is_file():
        raise web.HTTPNotFound(text="no such report picture")
    return web.FileResponse(path)


async def _static(request: web.Request) -> web.Response:
    name = request.match_info.get("name", "index.html")
    if name not in _STATIC:
        raise web.HTTPNotFound()
    data = importlib.resources.files("raftka.console").joinpath("static", name).read_bytes()
    return web.Response(body=data, content_type=_CONTENT_TYPES[Path(name).suffix], charset="utf-8")


def make_app(settings: ConsoleSettings) -> web.Application:
    """The console: ``/`` (the page), ``/static/...``, ``/api/...``, ``/reports/...``."""
    app = web.Application()
    app[_SETTINGS] = settings

    async def start_clients(app: web.Application) -> None:
        app[_CLIENTS] = _Clients(settings)

    async def close_clients(app: web.Application) -> None:
        await app[_CLIENTS].close()

    app.on_startup.append(start_clients)
    app.on_cleanup.append(close_clients)
    app.add_routes(
        [
            web.get("/", _static),
            web.get("/static/{name}", _static),
            web.get("/api/cluster", _json_route(_cluster)),
            web.get("/api/topics/{topic}/configs", _json_route(_topic_configs)),
            web.get("/api/groups", _json_route(_groups)),
            web.get("/api/groups/{group}", _json_route(_group)),
            web.get("/api/messages", _json_route(_messages)),
            web.get("/api/reports", _json_route(_reports)),
            web.get("/reports/{path:.+}", _report_file),
        ]
    )
    return app
