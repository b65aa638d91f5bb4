"""The group coordinator's HTTP routes (docs/protocol.md, "Group coordinator").

The API is a table, :data:`ROUTES`: each row is a path, the request's message class
(:mod:`raftka.common.messages.coordinator`) and the :class:`GroupCoordinatorService`
method that answers it. One generic handler serves every row: decode the body into the
row's class (a malformed body or a broken bound is INVALID_REQUEST, HTTP 400, naming
the field, from the error middleware), call the method, encode its answer message.
Answers are HTTP 200 with Kafka's errors inside the body at the level Kafka puts them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from aiohttp import web

from raftka.broker.coordinator.service import GroupCoordinatorService, RequestContext
from raftka.broker.http_acls import check_coordinator_request, request_access
from raftka.common.messages import Message, decode, encode
from raftka.common.messages import coordinator as api
from raftka.common.messages import transactions as txn_api
from raftka.server_common.node_http import require_node

__all__ = ["ROUTES", "Route", "bound_routes", "coordinator_routes", "route_handler"]

Req = TypeVar("Req", bound=Message)
Svc = TypeVar("Svc")


@dataclass(frozen=True, slots=True)
class Route(Generic[Svc, Req]):
    """One API call: ``POST path`` with a ``request_type`` body, answered by
    ``method`` (an unbound method of the service, :class:`GroupCoordinatorService`
    here, the transaction coordinator's in transaction_routes.py)."""

    path: str
    request_type: type[Req]
    method: Callable[[Svc, Req, RequestContext], Awaitable[Message]]


S = GroupCoordinatorService

ROUTES: Final[tuple[Route[GroupCoordinatorService, Any], ...]] = (
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


def route_handler(
    service: Svc,
    request_type: type[Req],
    method: Callable[[Svc, Req, RequestContext], Awaitable[Message]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler of one row: decode a ``request_type`` body, answer it with
    ``method`` of ``service`` (the transaction coordinator's routes use it too)."""

    async def handle(request: web.Request) -> web.Response:
        message = decode(await request.read(), request_type)
        if getattr(message, "verify_only", False):
            # AddPartitionsToTxn's verification is a partition leader's call (Kafka
            # checks CLUSTER_ACTION): nodes only over HTTPS.
            require_node(request, "AddPartitionsToTxn with verify_only")
        # Kafka's ACL checks (broker/http_acls.py): a refusal raises its error.
        shown = check_coordinator_request(request_access(request), message)
        context = RequestContext(client_host=f"/{request.remote or 'unknown'}")
        answer = await method(service, message, context)
        if shown is not None:
            answer = shown(answer)
        return web.Response(body=encode(answer), content_type="application/json")

    return handle


def bound_routes(service: Svc, rows: Iterable[Route[Svc, Any]]) -> list[web.RouteDef]:
    """``rows`` as aiohttp routes bound to ``service``."""
    return [
        web.post(route.path, route_handler(service, route.request_type, route.method))
        for route in rows
    ]


def coordinator_routes(service: GroupCoordinatorService) -> list[web.RouteDef]:
    """The rows of :data:`ROUTES` as aiohttp routes bound to ``service``."""
    return bound_routes(service, ROUTES)
