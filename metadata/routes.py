"""The controller's HTTP API: typed messages in, controller commands, typed messages out.

Theory of operation
-------------------
Every route is a thin shell in the manner of h11: the body (or, for a GET, the query
parameters) is decoded into its message class from ``raftka.common.messages.controller``
in one pass, which checks every field's type and bounds and refuses the request with
Kafka's ``INVALID_REQUEST`` naming the field (``$.topics[0].num_partitions``) before
anything runs; the decoded message becomes the controller's own request type; a write
runs as one command on the event loop (:meth:`ControllerEventLoop.submit`, which
answers once its records are committed and replayed); the answer is encoded from its
message class.

Writes (registration, heartbeat, topics, partitions, configs, SCRAM credentials, ACLs,
AlterPartition, producer ids) need the active controller: elsewhere they answer 503
NOT_CONTROLLER with ``leader_id`` and ``leader_address``. Reads (``/v1/metadata``,
``/v1/configs``, ``/v1/scram-credentials``, ``GET /v1/acls``, ``/v1/quorum``,
``/health``) are served by
any controller from its own committed image. Every error follows
``raftka.server_common.http_errors``: Kafka's error name and code and a message, with an
HTTP status from :data:`STATUS`; never a traceback, and the process stays up.
``docs/controller-api.md`` has every endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
import msgspec.inspect
from aiohttp import web

from raftka.common.errors import InvalidRequestError, KafkaError, NotControllerError
from raftka.common.messages import controller as msg
from raftka.common.messages import decode, decode_value, encode
from raftka.common.messages.controller import QUORUM_EPOCH_HEADER
from raftka.metadata import controller_api as qc
from raftka.metadata.acl_control import create_acls, delete_acls, describe_acls
from raftka.metadata.controller import QuorumController
from raftka.metadata.controller_api import ControllerResult
from raftka.metadata.controller_events import ControllerEventLoop, NotControllerRedirectError
from raftka.metadata.election import Election
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_fetch import fetch_metadata
from raftka.metadata.metadata_records import Endpoint
from raftka.metadata.scram_control import (
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from raftka.metadata.topic_control import describe_configs
from raftka.raft.quorum.engine import QuorumInfo, VoterState
from raftka.server_common.http_errors import error_middleware, json_response
from raftka.server_common.metrics import metrics_route
from raftka.server_common.sasl import ScramCredential

if TYPE_CHECKING:
    from raftka.metadata.metrics import ControllerMetrics

__all__ = [
    "REQUEST_BYTES_MAX",
    "STATUS",
    "build_controller_app",
    "decode_query",
    "describe_acls_route",
    "describe_quorum",
    "describe_scram_credentials_route",
    "error_response",
]

M = TypeVar("M")
R = TypeVar("R")

#: Bound on a request body.
REQUEST_BYTES_MAX: Final = 1024 * 1024

#: HTTP status per error name; every other KafkaError is a client error (400).
STATUS: Final[Mapping[str, int]] = {
    "NOT_CONTROLLER": 503,
    "REQUEST_TIMED_OUT": 503,
    "KAFKA_TIMEOUT": 503,
    "LEADER_NOT_AVAILABLE": 503,
    "UNKNOWN_SERVER_ERROR": 500,
    "UNKNOWN_TOPIC_OR_PARTITION": 404,
}

_EVENTS_KEY: Final = web.AppKey("controller_events", ControllerEventLoop)


def build_controller_app(
    events: ControllerEventLoop, log: logging.Logger, metrics: ControllerMetrics | None = None
) -> web.Application:
    """The aiohttp app of one controller: the engine's peer routes and the API, and
    ``GET /metrics`` with every request timed when ``metrics`` is given."""
    middlewares = [error_middleware(error_response, log)]
    if metrics is not None:
        # Outermost: the error answers are timed too.
        middlewares.insert(0, metrics.requests.middleware())
    http = events.config.http
    if http.secure:
        # Innermost: a refusal is still timed, and a handler sees only authenticated
        # requests. A controller checks no ACLs, so every route but /health and
        # /metrics (its peer routes, the metadata log and admin alike) serves node
        # principals (super.users) only: a certificate for the Kafka listener must not
        # reach around the brokers' authorizer.

        def credential(user: str, mechanism: str) -> ScramCredential | None:
            # The image of the moment: a user added or removed counts at once.
            return events.loader.image.scram_credential(user, mechanism)

        middlewares.append(http.serving_nodes_only(True).middleware(credential))
    app = web.Application(middlewares=middlewares, client_max_size=REQUEST_BYTES_MAX)
    app[_EVENTS_KEY] = events

    async def stamp_epoch(_request: web.Request, response: web.StreamResponse) -> None:
        # Every answer names the quorum epoch it was given in: a broker learns the
        # active controller together with its epoch from any answer (see
        # raftka.broker.lifecycle) and ignores redirects older than that.
        response.headers[QUORUM_EPOCH_HEADER] = str(events.engine.epoch)

    app.on_response_prepare.append(stamp_epoch)
    app.add_routes(list(events.engine.routes()))
    if metrics is not None:
        app.add_routes([metrics_route(metrics.registry)])
    app.add_routes(
        [
            web.get("/health", _health),
            web.post("/v1/brokers/register", _register_broker),
            web.post("/v1/brokers/heartbeat", _heartbeat),
            web.post("/v1/topics", _create_topics),
            web.delete("/v1/topics", _delete_topics),
            web.post("/v1/partitions", _create_partitions),
            web.post("/v1/elect-leaders", _elect_leaders),
            web.post("/v1/reassignments", _alter_reassignments),
            web.get("/v1/reassignments", _list_reassignments),
            web.post("/v1/configs", _alter_configs),
            web.get("/v1/configs", _describe_configs),
            web.post("/v1/scram-credentials", _alter_scram_credentials),
            describe_scram_credentials_route(lambda r: _events(r).loader.image),
            web.post("/v1/acls", _create_acls),
            web.post("/v1/acls/delete", _delete_acls),
            describe_acls_route(lambda r: _events(r).loader.image),
            web.post("/v1/alter-partition", _alter_partition),
            web.post("/v1/producer-ids", _allocate_producer_ids),
            web.get("/v1/quorum", _describe_quorum),
            web.get("/v1/metadata", _fetch_metadata),
        ]
    )
    return app


# ---------------------------------------------------------------------------------------
# Decoding and encoding


def _events(request: web.Request) -> ControllerEventLoop:
    return request.app[_EVENTS_KEY]


async def _body(request: web.Request, message_type: type[M]) -> M:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise InvalidRequestError(f"request body larger than {REQUEST_BYTES_MAX} bytes") from None
    return decode(raw, message_type)


def decode_query(
    request: web.Request, message_type: type[M], lists: frozenset[str] = frozenset()
) -> M:
    """Query parameters as ``message_type``: a name in ``lists`` may repeat (a list),
    any other names one value (the first if repeated); the value of an integer field
    is an integer if it is all digits (else the type error names the field)."""
    int_fields = _int_fields(message_type)
    fields: dict[str, object] = {}
    for name in request.query:
        values = request.query.getall(name)
        if name in lists:
            fields[name] = values
        else:
            value = values[0]
            fields[name] = int(value) if name in int_fields and value.isdigit() else value
    try:
        return decode_value(fields, message_type)
    except InvalidRequestError as e:
        raise InvalidRequestError(f"query parameters: {e.message}") from None


_INT_FIELDS: dict[object, frozenset[str]] = {}


def _int_fields(message_type: object) -> frozenset[str]:
    """The integer fields of a message class (computed once per class)."""
    names = _INT_FIELDS.get(message_type)
    if names is None:
        info = msgspec.inspect.type_info(message_type)
        assert isinstance(info, msgspec.inspect.StructType), message_type
        names = frozenset(
            f.name for f in info.fields if isinstance(f.type, msgspec.inspect.IntType)
        )
        _INT_FIELDS[message_type] = names
    return names


def _answer(message: object, status: int = 200) -> web.Response:
    return web.Response(body=encode(message), status=status, content_type="application/json")


def error_response(error: KafkaError) -> web.Response:
    """The error contract, with NOT_CONTROLLER's ``leader_id``, ``leader_address`` and
    ``leader_epoch`` (the quorum epoch they belong to; -1 when unknown)."""
    body: dict[str, Any] = dict(error.to_wire())
    if isinstance(error, NotControllerRedirectError):
        body["leader_id"] = error.leader_id
        body["leader_address"] = error.leader_address
        body["leader_epoch"] = error.leader_epoch
    elif isinstance(error, NotControllerError):
        body.setdefault("leader_id", None)
        body.setdefault("leader_address", None)
        body.setdefault("leader_epoch", -1)
    return json_response(body, STATUS.get(error.name, 400))


# ---------------------------------------------------------------------------------------
# Brokers


async def _health(request: web.Request) -> web.Response:
    events = _events(request)
    if not events.started:
        return _answer(msg.HealthStartingResponse(node_id=events.config.node_id), 503)
    info = events.engine.describe()
    return _answer(
        msg.HealthResponse(
            node_id=events.config.node_id,
            role=info.role,
            leader_id=info.leader_id,
            epoch=info.epoch,
            active_controller=events.is_active,
            high_watermark=info.high_watermark,
            metadata_offset=events.loader.image.offset,
        )
    )


async def _register_broker(request: web.Request) -> web.Response:
    body = await _body(request, msg.RegisterBrokerRequest)
    req = qc.RegisterBrokerRequest(
        broker_id=body.broker_id,
        incarnation_id=body.incarnation_id,
        endpoints=tuple(Endpoint(e.name, e.host, e.port) for e in body.endpoints),
        rack=body.rack,
        clean_shutdown=body.clean_shutdown,
    )

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[qc.RegisterBrokerResponse]:
        return c.register_broker(image, req, now_ms=now, next_offset=nxt)

    response: qc.RegisterBrokerResponse = await _events(request).submit("register_broker", run)
    return _answer(msg.RegisterBrokerResponse(broker_epoch=response.broker_epoch))


async def _heartbeat(request: web.Request) -> web.Response:
    body = await _body(request, msg.BrokerHeartbeatRequest)
    req = qc.BrokerHeartbeatRequest(
        broker_id=body.broker_id,
        broker_epoch=body.broker_epoch,
        current_metadata_offset=body.current_metadata_offset,
        want_fence=body.want_fence,
        want_shutdown=body.want_shutdown,
    )

    def run(
        c: QuorumController, image: MetadataImage, now: int, nxt: int
    ) -> ControllerResult[qc.BrokerHeartbeatResponse]:
        return c.heartbeat(image, req, now_ms=now, next_offset=nxt)

    response: qc.BrokerHeartbeatResponse = await _events(request).submit("heartbeat", run)
    return _answer(
        msg.BrokerHeartbeatResponse(
            is_caught_up=response.is_caught_up,
            is_fenced=response.is_fenced,
            in_controlled_shutdown=response.in_controlled_shutdown,
            should_shutdown=response.should_shutdown,
        )
    )


# ---------------------------------------------------------------------------------------
# Topics and partitions


async def _write(
    request: web.Request,
    name: str,
    command: Callable[[QuorumController, MetadataImage], ControllerResult[R]],
) -> R:
    """Run ``command``, a write that needs neither the time nor the next offset, on the
    controller's event loop; its response once its records are committed."""

    def run(c: QuorumController, image: MetadataImage, now: int, nxt: int) -> ControllerResult[R]:
        return command(c, image)

    response: R = await _events(request).submit(name, run)
    return response


def _assignments(
    value: list[list[int]] | dict[int, list[int]] | None,
) -> dict[int, tuple[int, ...]] | None:
    """A list indexed by partition, or ``{partition: replicas}``, as the latter."""
    if value is None:
        return None
    items = enumerate(value) if isinstance(value, list) else value.items()
    return {partition: tuple(replicas) for partition, replicas in items}


async def _create_topics(request: web.Request) -> web.Response:
    body = await _body(request, msg.CreateTopicsRequest)
    topics = [
        qc.CreatableTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=_assignments(t.assignments),
            configs=dict(t.configs or {}),
        )
        for t in body.topics
    ]
    events = _events(request)

    response = await _write(
        request,
        "create_topics",
        lambda c, image: c.create_topics(
            image, topics, rng=events.rng, validate_only=body.validate_only
        ),
    )
    return _answer(
        msg.CreateTopicsResponse(
            topics=[
                msg.CreatableTopicResult(
                    name=t.name,
                    topic_id=t.topic_id,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    error=msg.error_data(t.error),
                )
                for t in response.topics
            ]
        )
    )


async def _delete_topics(request: web.Request) -> web.Response:
    body = await _body(request, msg.DeleteTopicsRequest)
    names, ids = body.names or [], body.topic_ids or []

    response = await _write(
        request,
        "delete_topics",
        lambda c, image: c.delete_topics(image, names=names, topic_ids=ids),
    )
    return _answer(
        msg.DeleteTopicsResponse(
            topics=[
                msg.DeleteTopicResult(
                    name=t.name, topic_id=t.topic_id, error=msg.error_data(t.error)
                )
                for t in response.topics
            ]
        )
    )


async def _create_partitions(request: web.Request) -> web.Response:
    body = await _body(request, msg.CreatePartitionsRequest)
    topics = [
        qc.CreatablePartitions(
            name=t.name,
            count=t.count,
            assignments=None if t.assignments is None else [tuple(r) for r in t.assignments],
        )
        for t in body.topics
    ]

    response = await _write(
        request,
        "create_partitions",
        lambda c, image: c.create_partitions(image, topics, validate_only=body.validate_only),
    )
    return _answer(
        msg.CreatePartitionsResponse(
            topics=[
                msg.TopicErrorResult(name=t.name, error=msg.error_data(t.error))
                for t in response.topics
            ]
        )
    )


async def _elect_leaders(request: web.Request) -> web.Response:
    body = await _body(request, msg.ElectLeadersRequest)
    election = Election.PREFERRED if body.election_type == "preferred" else Election.UNCLEAN
    partitions = (
        None
        if body.topic_partitions is None
        else [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
    )
    response = await _write(
        request, "elect_leaders", lambda c, image: c.elect_leaders(image, election, partitions)
    )
    return _answer(msg.ElectLeadersResponse(results=_outcomes(response.results)))


async def _alter_reassignments(request: web.Request) -> web.Response:
    body = await _body(request, msg.AlterPartitionReassignmentsRequest)
    items = [
        (p.topic, p.partition, None if p.replicas is None else tuple(p.replicas))
        for p in body.partitions
    ]
    response = await _write(
        request,
        "alter_partition_reassignments",
        lambda c, image: c.alter_partition_reassignments(image, items),
    )
    return _answer(msg.AlterPartitionReassignmentsResponse(results=_outcomes(response.results)))


def _outcomes(results: Sequence[qc.PartitionOutcome]) -> list[msg.PartitionErrorResult]:
    return [
        msg.PartitionErrorResult(
            topic=r.topic, partition=r.partition, error=msg.error_data(r.error)
        )
        for r in results
    ]


async def _list_reassignments(request: web.Request) -> web.Response:
    image = _events(request).loader.image
    ongoing = [
        msg.OngoingReassignment(
            topic=name,
            partition=index,
            replicas=list(p.replicas),
            adding_replicas=list(p.adding_replicas),
            removing_replicas=list(p.removing_replicas),
        )
        for name in sorted(image.topics.by_name)
        for index, p in sorted(image.topics.by_name[name].partitions.items())
        if p.is_reassigning()
    ]
    return _answer(msg.ListPartitionReassignmentsResponse(reassignments=ongoing))


# ---------------------------------------------------------------------------------------
# Configs


async def _alter_configs(request: web.Request) -> web.Response:
    body = await _body(request, msg.IncrementalAlterConfigsRequest)
    resources = [
        qc.AlterConfigsResource(
            resource_type=r.resource_type,
            resource_name=r.resource_name,
            ops=tuple(qc.AlterConfigOp(name=o.name, op=o.op, value=o.value) for o in r.ops),
        )
        for r in body.resources
    ]

    response = await _write(
        request,
        "alter_configs",
        lambda c, image: c.incremental_alter_configs(
            image, resources, validate_only=body.validate_only
        ),
    )
    return _answer(
        msg.IncrementalAlterConfigsResponse(
            resources=[
                msg.AlterConfigsResourceResult(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    error=msg.error_data(r.error),
                )
                for r in response.resources
            ]
        )
    )


async def _describe_configs(request: web.Request) -> web.Response:
    req = decode_query(request, msg.DescribeConfigsRequest, lists=frozenset({"key"}))
    result = describe_configs(_events(request).loader.image, req.topic, req.key or None)
    if result.error is not None:
        raise result.error
    return _answer(
        msg.DescribeConfigsResponse(
            resource_type=result.resource_type,
            resource_name=result.resource_name,
            entries=[
                msg.ConfigEntryData(
                    name=e.name,
                    value=e.value,
                    source=e.source,
                    is_default=e.is_default,
                    type=e.type,
                    read_only=e.read_only,
                    is_sensitive=e.is_sensitive,
                )
                for e in result.entries
            ],
        )
    )


# ---------------------------------------------------------------------------------------
# SCRAM credentials


async def _alter_scram_credentials(request: web.Request) -> web.Response:
    body = await _body(request, msg.AlterUserScramCredentialsRequest)
    deletions = [ScramCredentialDeletion(d.name, d.mechanism) for d in body.deletions]
    upsertions = [
        ScramCredentialUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
        for u in body.upsertions
    ]
    response = await _write(
        request,
        "alter_user_scram_credentials",
        lambda _c, image: alter_user_scram_credentials(image, deletions, upsertions),
    )
    return _answer(
        msg.AlterUserScramCredentialsResponse(
            results=[
                msg.UserScramResultData(user=r.user, error=msg.error_data(r.error))
                for r in response.results
            ]
        )
    )


def describe_scram_credentials_route(
    image_of: Callable[[web.Request], MetadataImage],
) -> web.RouteDef:
    """``GET /v1/scram-credentials``: DescribeUserScramCredentials over the image
    ``image_of`` gives: the controller's committed one here, a broker's own on the
    broker (as Kafka's brokers answer it from their metadata cache)."""

    async def handle(request: web.Request) -> web.Response:
        req = decode_query(
            request, msg.DescribeUserScramCredentialsRequest, lists=frozenset({"user"})
        )
        results = describe_user_scram_credentials(image_of(request), req.user)
        return _answer(
            msg.DescribeUserScramCredentialsResponse(
                results=[
                    msg.DescribedUserScramData(
                        user=r.user,
                        error=msg.error_data(r.error),
                        credentials=[
                            msg.ScramCredentialInfoData(
                                mechanism=c.mechanism, iterations=c.iterations
                            )
                            for c in r.credentials
                        ],
                    )
                    for r in results
                ]
            )
        )

    return web.get("/v1/scram-credentials", handle)


# ---------------------------------------------------------------------------------------
# ACLs


def _or_error(decode_one: Callable[[M], R], data: M) -> R | KafkaError:
    """``decode_one(data)``, or the error it raised: a malformed item fails alone."""
    try:
        return decode_one(data)
    except KafkaError as e:
        return e


async def _create_acls(request: web.Request) -> web.Response:
    body = await _body(request, msg.CreateAclsRequest)
    creations = [_or_error(msg.acl_binding_of, c) for c in body.creations]
    rng = _events(request).rng
    results = await _write(
        request, "create_acls", lambda _c, image: create_acls(image, creations, rng)
    )
    return _answer(
        msg.CreateAclsResponse(
            results=[msg.AclCreationResultData(error=msg.error_data(r.error)) for r in results]
        )
    )


async def _delete_acls(request: web.Request) -> web.Response:
    body = await _body(request, msg.DeleteAclsRequest)
    filters = [_or_error(msg.acl_filter_of, f) for f in body.filters]
    results = await _write(request, "delete_acls", lambda _c, image: delete_acls(image, filters))
    return _answer(
        msg.DeleteAclsResponse(
            filter_results=[
                msg.DeleteAclsFilterResultData(
                    error=msg.error_data(r.error),
                    matching_acls=[msg.acl_binding_data(b) for b in r.matching],
                )
                for r in results
            ]
        )
    )


def describe_acls_route(image_of: Callable[[web.Request], MetadataImage]) -> web.RouteDef:
    """``GET /v1/acls?resource_type=TOPIC&...``: DescribeAcls over the image
    ``image_of`` gives (the controller's committed one, or a broker's own, as for
    ``/v1/scram-credentials``). The query parameters are an ACL filter; a bad one is
    INVALID_REQUEST for the whole request."""

    async def handle(request: web.Request) -> web.Response:
        acl_filter = msg.acl_filter_of(decode_query(request, msg.AclFilterData))
        found = describe_acls(image_of(request), acl_filter)
        return _answer(msg.DescribeAclsResponse(acls=[msg.acl_binding_data(b) for b in found]))

    return web.get("/v1/acls", handle)


# ---------------------------------------------------------------------------------------
# AlterPartition and producer ids


async def _alter_partition(request: web.Request) -> web.Response:
    body = await _body(request, msg.AlterPartitionRequest)
    req = qc.AlterPartitionRequest(
        broker_id=body.broker_id,
        broker_epoch=body.broker_epoch,
        topic_id=body.topic_id,
        partition=body.partition,
        leader_epoch=body.leader_epoch,
        partition_epoch=body.partition_epoch,
        new_isr=tuple(body.new_isr),
    )

    response = await _write(
        request, "alter_partition", lambda c, image: c.alter_partition(image, req)
    )
    return _answer(
        msg.AlterPartitionResponse(
            topic_id=response.topic_id,
            partition=response.partition,
            leader=response.leader,
            leader_epoch=response.leader_epoch,
            partition_epoch=response.partition_epoch,
            isr=list(response.isr),
        )
    )


async def _allocate_producer_ids(request: web.Request) -> web.Response:
    body = await _body(request, msg.AllocateProducerIdsRequest)

    response = await _write(
        request,
        "producer_ids",
        lambda c, image: c.allocate_producer_ids(image, body.broker_id, body.broker_epoch),
    )
    return _answer(
        msg.AllocateProducerIdsResponse(
            producer_id_start=response.producer_id_start,
            producer_id_len=response.producer_id_len,
        )
    )


# ---------------------------------------------------------------------------------------
# Reads: the quorum and the metadata log


def describe_quorum(events: ControllerEventLoop) -> msg.DescribeQuorumResponse:
    """This node's view of the quorum, with every replica's address and lag."""
    info: QuorumInfo = events.engine.describe()
    address_of = events.config.address_of

    def replica(state: VoterState) -> msg.QuorumReplica:
        known = state.log_end_offset >= 0
        return msg.QuorumReplica(
            node_id=state.node_id,
            address=address_of(state.node_id),
            log_end_offset=state.log_end_offset if known else None,
            lag=max(info.log_end_offset - state.log_end_offset, 0) if known else None,
            last_fetch_ms=state.last_fetch_ms if state.last_fetch_ms >= 0 else None,
            last_caught_up_ms=state.last_caught_up_ms if state.last_caught_up_ms >= 0 else None,
        )

    voters = [replica(v) for v in info.voters]
    lags = [v.lag for v in voters if v.lag is not None]
    return msg.DescribeQuorumResponse(
        node_id=info.node_id,
        role=info.role,
        leader_id=info.leader_id,
        leader_address=None if info.leader_id is None else address_of(info.leader_id),
        epoch=info.epoch,
        high_watermark=info.high_watermark,
        log_end_offset=info.log_end_offset,
        log_start_offset=info.log_start_offset,
        max_follower_lag=max(lags) if lags else None,
        voters=voters,
        observers=[replica(o) for o in info.observers],
        metadata_offset=events.loader.image.offset,
    )


async def _describe_quorum(request: web.Request) -> web.Response:
    decode_query(request, msg.DescribeQuorumRequest)
    return _answer(describe_quorum(_events(request)))


async def _fetch_metadata(request: web.Request) -> web.Response:
    req = decode_query(request, msg.FetchMetadataRequest)
    events = _events(request)
    if not events.started:
        raise events.not_controller()
    result = await fetch_metadata(
        events.engine,
        events.loader.signal,
        offset=req.offset,
        records_max=req.records_max,
        max_wait_ms=req.max_wait_ms,
        clock_ms=events.clock_ms,
    )
    return _answer(result.to_message())
