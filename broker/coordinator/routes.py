"""The group coordinator's HTTP routes (docs/protocol.md, "Group coordinator").

The API is a table, :data:`ROUTES`: each row is a path, the request's message class
(:mod:`raftka.common.messages.coordinator`) and the :class:`GroupCoordinatorService`
method that answers it. One generic handler serves every row: decode the body into the
row's class (a malformed body or a broken bound is INVALID_REQUEST, HTTP 400, naming
the field, from the error middleware), call the method, encode its answer message.
Answers are HTTP 200 with Kafka's errors inside the body at the level Kafka puts them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from aiohttp import web

from raftka.broker.coordinator.service import GroupCoordinatorService, RequestContext
from raftka.common.messages import Message, decode, encode
from raftka.common.messages import coordinator as api
from raftka.common.messages import transactions as txn_api

__all__ = ["ROUTES", "Route", "coordinator_routes"]

Req = TypeVar("Req", bound=Message)


@dataclass(frozen=True, slots=True)
class Route(Generic[Req]):
    """One API call: ``POST path`` with a ``request_type`` body, answered by
    ``method`` (an unbound :class:`GroupCoordinatorService` method)."""

    path: str
    request_type: type[Req]
    method: Callable[[GroupCoordinatorService, Req, RequestContext], Awaitable[Message]]


S = GroupCoordinatorService

ROUTES: Final[tuple[Route[Any], ...]] = (
    Route("/v1/find-coordinator", api.FindCoordinatorRequest, S.find_coordinator),
    Route("/v1/join-group", api.JoinGroupRequest, S.join_group),
    Route("/v1/sync-group", api.SyncGroupRequest, S.sync_group),
    Route("/v1/heartbeat", api.HeartbeatRequest, S.heartbeat),
    Route("/v1/leave-group", api.LeaveGroupRequest, S.leave_group),
    Route("/v1/offset-commit", api.OffsetCommitRequest, S.offset_commit),
    Route("/v1/offset-fetch", api.OffsetFetchRequest, S.offset_fetch),
    Route("/v1/list-groups", api.ListGroupsRequest, S.list_groups),
    Route("/v1/describe-groups", api.DescribeGroupsRequest, S.describe_groups),
    Route("/v1/delete-groups", api.DeleteGroupsRequest, S.delete_groups),
    Route("/v1/offset-delete", api.OffsetDeleteRequest, S.offset_delete),
    Route("/v1/txn-offset-commit", txn_api.TxnOffsetCommitRequest, S.txn_offset_commit),
)


def _handler(
    service: GroupCoordinatorService, route: Route[Req]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        message = decode(await request.read(), route.request_type)
        context = RequestContext(client_host=f"/{request.remote or 'unknown'}")
        answer = await route.method(service, message, context)
        return web.Response(body=encode(answer), content_type="application/json")

    return handle


def coordinator_routes(service: GroupCoordinatorService) -> list[web.RouteDef]:
    """The rows of :data:`ROUTES` as aiohttp routes bound to ``service``."""
    return [web.post(route.path, _handler(service, route)) for route in ROUTES]
