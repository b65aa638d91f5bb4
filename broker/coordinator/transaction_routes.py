"""The transaction coordinator's HTTP routes (docs/protocol.md, "Transactions").

A table like the group coordinator's (routes.py): each row is a path, the request's
message class (:mod:`raftka.common.messages.transactions`) and the
:class:`TransactionCoordinatorService` method that answers it; the generic handler
decodes the body (a malformed body or a broken bound is INVALID_REQUEST, HTTP 400,
naming the field), calls the method and encodes its answer. Answers are HTTP 200 with
Kafka's errors inside. InitProducerId with a ``transactional_id`` and FindCoordinator
with key_type 1 keep their routes (broker/server.py, routes.py) and reach the service
from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from aiohttp import web

from raftka.broker.coordinator.routes import route_handler
from raftka.broker.coordinator.service import RequestContext
from raftka.broker.coordinator.transaction_service import TransactionCoordinatorService
from raftka.common.messages import Message
from raftka.common.messages import transactions as api

__all__ = ["TRANSACTION_ROUTES", "transaction_routes"]

Req = TypeVar("Req", bound=Message)


@dataclass(frozen=True, slots=True)
class TxnRoute(Generic[Req]):
    path: str
    request_type: type[Req]
    method: Callable[[TransactionCoordinatorService, Req, RequestContext], Awaitable[Message]]


S = TransactionCoordinatorService

TRANSACTION_ROUTES: Final[tuple[TxnRoute[Any], ...]] = (
    TxnRoute("/v1/add-partitions-to-txn", api.AddPartitionsToTxnRequest, S.add_partitions_to_txn),
    TxnRoute("/v1/add-offsets-to-txn", api.AddOffsetsToTxnRequest, S.add_offsets_to_txn),
    TxnRoute("/v1/end-txn", api.EndTxnRequest, S.end_txn),
    TxnRoute("/v1/describe-transactions", api.DescribeTransactionsRequest, S.describe_transactions),
    TxnRoute("/v1/list-transactions", api.ListTransactionsRequest, S.list_transactions),
)


def transaction_routes(service: TransactionCoordinatorService) -> list[web.RouteDef]:
    """The rows of :data:`TRANSACTION_ROUTES` as aiohttp routes bound to ``service``."""
    return [
        web.post(route.path, route_handler(service, route.request_type, route.method))
        for route in TRANSACTION_ROUTES
    ]
