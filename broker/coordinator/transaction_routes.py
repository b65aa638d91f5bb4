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

from typing import Any, Final

from aiohttp import web

from raftka.broker.coordinator.routes import Route, bound_routes
from raftka.broker.coordinator.transaction_service import TransactionCoordinatorService
from raftka.common.messages import transactions as api

__all__ = ["TRANSACTION_ROUTES", "transaction_routes"]

S = TransactionCoordinatorService

TRANSACTION_ROUTES: Final[tuple[Route[TransactionCoordinatorService, Any], ...]] = (
    Route("/v1/add-partitions-to-txn", api.AddPartitionsToTxnRequest, S.add_partitions_to_txn),
    Route("/v1/add-offsets-to-txn", api.AddOffsetsToTxnRequest, S.add_offsets_to_txn),
    Route("/v1/end-txn", api.EndTxnRequest, S.end_txn),
    Route("/v1/describe-transactions", api.DescribeTransactionsRequest, S.describe_transactions),
    Route("/v1/list-transactions", api.ListTransactionsRequest, S.list_transactions),
)


def transaction_routes(service: TransactionCoordinatorService) -> list[web.RouteDef]:
    """The rows of :data:`TRANSACTION_ROUTES` as aiohttp routes bound to ``service``."""
    return bound_routes(service, TRANSACTION_ROUTES)
