"""The Kafka APIs this broker answers, and their thin handlers (docs/kafka-protocol.md).

(Over 1,000 lines: one short handler per API, each mapping kio's fields to a service's
message and back; splitting them would only scatter the one table they share.)

:data:`SUPPORTED` is the table ApiVersions advertises: exactly the APIs and versions a
handler here serves. Each handler takes the request as ``kio`` decoded it (any version
in its range: the fields of one API keep their names across versions, and a field a
version lacks reads as its default), calls the service the HTTP API calls for the same
thing (the ReplicaManager and its DeleteRecords, the group coordinator, the
producer-id manager, the metadata image's config describe, the controller channel for
what only the active controller decides) and builds the answer with :func:`_build`,
which keeps the fields the answer's version has. No semantics live here. Before a
service is called, each handler asks the request's :class:`Access` what the ACLs allow
(``raftka.broker.kafka.authorization``; with no authorizer configured, everything) and
answers what is refused with Kafka's AUTHORIZATION_FAILED errors itself.
"""

from __future__ import annotations

import base64
import datetime
import enum
import hashlib
import io
import logging
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from raftka.broker.broker_configs import broker_config_entries
from raftka.broker.coordinator.service import RequestContext
from raftka.broker.delete_records import delete_records
from raftka.broker.describe_producers import producer_state_fields
from raftka.broker.kafka.authentication import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    ConnectionAuth,
)
from raftka.broker.kafka.authorization import (
    ALLOW_ALL,
    Access,
    AuthorizerCache,
    has_idempotent_batch,
)
from raftka.broker.kafka.framing import API_VERSIONS_KEY, FrameError, encode_response, parse_header
from raftka.broker.log_dirs import describe_log_dirs
from raftka.broker.replication.manager import FetchPartition
from raftka.broker.txn_verification import has_transactional_batch
from raftka.common.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.common.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    RequestTimedOutError,
)
from raftka.common.messages import Message, decode_value
from raftka.common.messages import broker as broker_api
from raftka.common.messages import coordinator as group_api
from raftka.common.messages import transactions as txn_api
from raftka.common.messages.broker import ErrorObject
from raftka.common.messages.controller import AclFilterData, ConfigEntryData, acl_filter_of
from raftka.metadata.acl_control import describe_acls
from raftka.metadata.controller_api import ConfigEntry
from raftka.metadata.metadata_records import NO_LEADER
from raftka.metadata.scram_control import describe_user_scram_credentials
from raftka.metadata.topic_control import describe_configs
from raftka.server_common.metrics import RequestTimer, camel_case, start_timing, stop_timing
from raftka.server_common.ssl_principal import ANONYMOUS

if TYPE_CHECKING:
    from raftka.broker.server import BrokerServer
    from raftka.metadata.image import MetadataImage

__all__ = ["KAFKA_ENDPOINT", "PRODUCE_KEY", "SUPPORTED", "KafkaApis"]

log = logging.getLogger(__name__)

#: The name the Kafka listener's endpoint is registered under (the HTTP API's is first).
KAFKA_ENDPOINT: Final = "KAFKA"
PRODUCE_KEY: Final = 0
OFFSETS_TOPIC: Final = "__consumer_offsets"

#: api key -> (min version, max version) served. Ranges are what kafka-python 2.x/3.x
#: and librdkafka 2.x use, capped below the versions that need what raftka lacks
#: (topic ids in Produce/Fetch, batched FindCoordinator/OffsetFetch).
SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 3),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (0, 1),  # SaslHandshake (v0: the tokens follow unframed)
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 5),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch (kio has no v0-1)
    24: (0, 3),  # AddPartitionsToTxn (the client's form; v4 is the brokers')
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn (transaction version 1; v4+ are KIP-890's)
    28: (0, 3),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls (kio has no v0)
    30: (1, 3),  # CreateAcls (kio has no v0)
    31: (1, 3),  # DeleteAcls (kio has no v0)
    32: (1, 4),  # DescribeConfigs (kio has no v0)
    33: (0, 2),  # AlterConfigs
    35: (1, 4),  # DescribeLogDirs (kio has no v0)
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders (v0: preferred only)
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions (v2's id pattern, KIP-1152, is not served)
}

#: Kafka's ConfigResource.Type codes this broker knows (others: INVALID_REQUEST).
RESOURCE_TYPES: Final[dict[int, str]] = {2: "topic", 4: "broker"}
#: IncrementalAlterConfigs' AlterConfigOp.OpType codes.
CONFIG_OPS: Final[dict[int, str]] = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}
#: DescribeConfigs' ConfigSource codes.
CONFIG_SOURCES: Final[dict[str, int]] = {
    "DYNAMIC_TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
}
#: DescribeConfigs' ConfigType codes (v3+).
CONFIG_TYPES: Final[dict[str, int]] = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}
#: "Authorized operations not computed" (KIP-430's bit sets are not built, even with
#: the authorizer on).
_NO_OPERATIONS: Final = -2147483648

_NO_TIME: Final = datetime.timedelta(0)
_TXN_ID_REFUSED: Final = ErrorCode.transactional_id_authorization_failed


def _code(error: KafkaError | ErrorObject | None) -> ErrorCode:
    if error is None:
        return ErrorCode.none
    code = error.code if isinstance(error, KafkaError) else error.error_code
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def _message(error: KafkaError | ErrorObject | None) -> str | None:
    return None if error is None else error.message


def _build(cls: type[Any], **fields: Any) -> Any:
    """``cls`` built from the ``fields`` it has (a version lacks some)."""
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in fields.items() if k in names})


def _nested(response_cls: type[Any], name: str) -> type[Any]:
    """A nested entity class of the same schema module as ``response_cls``."""
    cls: type[Any] = getattr(sys.modules[response_cls.__module__], name)
    return cls


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def _uuid(text: str | None) -> uuid.UUID:
    try:
        return uuid.UUID(text) if text else uuid.UUID(int=0)
    except ValueError:
        return uuid.UUID(int=0)


def _by_topic(items: Iterable[tuple[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Per-partition answers grouped by topic, topics in first-seen order."""
    grouped: dict[str, list[Any]] = {}
    for topic, item in items:
        grouped.setdefault(topic, []).append(item)
    return list(grouped.items())


def _topics_response(
    response_cls: type[Any],
    topic_cls: type[Any],
    items: Iterable[tuple[str, Any]],
    *,
    name_field: str = "name",
    topics_field: str = "topics",
    partitions_field: str = "partitions",
    **fields: Any,
) -> Any:
    """A response whose ``topics_field`` holds the per-partition answers ``items``
    grouped by topic (the topic's name is its ``name_field``, its answers its
    ``partitions_field``), with the top-level ``fields``."""
    grouped = tuple(
        _build(topic_cls, **{name_field: t, partitions_field: tuple(ps)})
        for t, ps in _by_topic(items)
    )
    return _build(response_cls, throttle_time=_NO_TIME, **{topics_field: grouped}, **fields)


def _copy(cls: type[Any], message: msgspec.Struct, **fields: Any) -> Any:
    """``cls`` built from the fields of ``message`` it has by the same name (the group
    coordinator's messages keep Kafka's field names) and ``fields``, which win."""
    return _build(cls, **{**msgspec.structs.asdict(message), **fields})


def _topic_tree(
    topic_cls: type[Any], topics: Iterable[Any], partition: Callable[[str, Any], Any]
) -> tuple[Any, ...]:
    """One ``topic_cls`` per item of ``topics`` (each with a ``name`` and its
    ``partitions``), in order, its partitions built by ``partition(name, p)``."""
    return tuple(
        _build(topic_cls, name=t.name, partitions=tuple(partition(t.name, p) for p in t.partitions))
        for t in topics
    )


def _partition_results(
    partition_cls: type[Any],
    results: Iterable[Any],
    fields: Callable[[Any], dict[str, Any]],
    *,
    index_field: str = "partition_index",
) -> Iterable[tuple[str, Any]]:
    """The replica manager's per-partition ``results`` as (topic, ``partition_cls``
    with the partition's index (named ``index_field``), its error and ``fields(r)``)."""
    return (
        (
            r.topic,
            _build(
                partition_cls, **{index_field: r.partition}, error_code=_code(r.error), **fields(r)
            ),
        )
        for r in results
    )


def _refused_partitions(
    partition_cls: type[Any],
    entries: Iterable[tuple[str, int]],
    code: ErrorCode,
    *,
    index_field: str = "partition_index",
    **fields: Any,
) -> list[tuple[str, Any]]:
    """(topic, ``partition_cls``) answers of partitions refused before any service saw
    them (an authorization failure), with the empty values ``fields``."""
    return [
        (t, _build(partition_cls, **{index_field: i}, error_code=code, **fields))
        for t, i in entries
    ]


def _cluster_refused(cls: type[Any], **empty: Any) -> Any:
    """A whole answer refused CLUSTER_AUTHORIZATION_FAILED, its lists empty (``empty``:
    the answer's other fields)."""
    return _build(
        cls,
        throttle_time=_NO_TIME,
        error_code=ErrorCode.cluster_authorization_failed,
        error_message=None,
        **empty,
    )


def _resource_result(
    result_cls: type[Any], resource: Any, code: ErrorCode, message: str | None, **fields: Any
) -> Any:
    """One config resource's answer in (Incremental)AlterConfigs and DescribeConfigs."""
    return _build(
        result_cls,
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        **fields,
    )


def _kafka_brokers(
    image: MetadataImage, broker_cls: type[Any], *, id_field: str
) -> tuple[Any, ...]:
    """The live brokers of ``image`` as Metadata and DescribeCluster list them (the
    broker's id named ``id_field``): only those with a Kafka listener, since a broker
    without one is unreachable to a Kafka client."""
    brokers = []
    for b in image.cluster.live_brokers():
        endpoint = b.endpoint(KAFKA_ENDPOINT)
        if endpoint is not None:
            brokers.append(
                _build(
                    broker_cls,
                    **{id_field: b.broker_id},
                    host=endpoint.host,
                    port=endpoint.port,
                    rack=b.rack,
                )
            )
    return tuple(brokers)


def _cluster_id(controller_ids: Sequence[int], controllers: Sequence[str]) -> str:
    """A cluster id for Metadata and DescribeCluster: raftka has none of its own yet,
    and librdkafka crashes on DescribeCluster without one. Derived from the controller
    quorum (``controller.quorum.voters``, which every node of a cluster shares), in the
    shape of Kafka's (22 characters of URL-safe base64 of 16 bytes)."""
    voters = ",".join(f"{i}@{c}" for i, c in zip(controller_ids, controllers, strict=False))
    digest = hashlib.sha256(voters.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


Handler = Callable[[Any, int, "Call"], Awaitable[Any]]


class Call:
    """What a handler knows of its request besides the body."""

    __slots__ = ("auth", "client_host", "client_id", "tls_principal")

    def __init__(
        self,
        client_id: str | None,
        client_host: str,
        auth: ConnectionAuth | None = None,
        tls_principal: str | None = None,
    ) -> None:
        self.client_id = client_id
        self.client_host = client_host
        #: The connection's SASL state on a SASL listener, else None.
        self.auth = auth
        #: The principal of the client's certificate on an SSL listener that asked
        #: for one (ssl.principal.mapping.rules), else None.
        self.tls_principal = tls_principal

    @property
    def principal(self) -> str:
        """Who sent the request: the SASL user, else the certificate's principal, else
        Kafka's ``User:ANONYMOUS``."""
        if self.auth is not None and self.auth.principal is not None:
            return self.auth.principal
        return self.tls_principal or ANONYMOUS


class KafkaApis:
    """Decode, dispatch, encode; one per listener."""

    def __init__(self, server: BrokerServer) -> None:
        self._server = server
        self._handlers: dict[int, Handler] = {
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            3: self.metadata,
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            15: self.describe_groups,
            16: self.list_groups,
            17: self.sasl_handshake,
            18: self.api_versions,
            19: self.create_topics,
            20: self.delete_topics,
            21: self.delete_records,
            22: self.init_producer_id,
            23: self.offset_for_leader_epoch,
            24: self.add_partitions_to_txn,
            25: self.add_offsets_to_txn,
            26: self.end_txn,
            28: self.txn_offset_commit,
            29: self.describe_acls,
            30: self.create_acls,
            31: self.delete_acls,
            32: self.describe_configs,
            33: self.alter_configs,
            35: self.describe_log_dirs,
            36: self.sasl_authenticate,
            37: self.create_partitions,
            42: self.delete_groups,
            43: self.elect_leaders,
            44: self.incremental_alter_configs,
            45: self.alter_partition_reassignments,
            46: self.list_partition_reassignments,
            47: self.offset_delete,
            50: self.describe_user_scram_credentials,
            51: self.alter_user_scram_credentials,
            60: self.describe_cluster,
            61: self.describe_producers,
            65: self.describe_transactions,
            66: self.list_transactions,
        }
        assert set(self._handlers) == set(SUPPORTED)
        # Built at the first request: the server's config is read then, not here.
        self._authorizers: AuthorizerCache | None = None
        # RequestMetrics' request label: the handler's name in CamelCase is the API's.
        self._names = {key: camel_case(h.__name__) for key, h in self._handlers.items()}

    def _access(self, call: Call) -> Access:
        """What ``call``'s principal may do under the current image's ACLs."""
        if self._authorizers is None:
            self._authorizers = AuthorizerCache(self._server.config.authorizer)
        if not self._authorizers.enabled:
            return ALLOW_ALL  # off: neither the image nor the call is looked at
        return self._authorizers.access(self._image, call.principal, call.client_host)

    def _image(self) -> MetadataImage:
        return self._server.manager.image

    def _cluster_id(self) -> str:
        config = self._server.config
        return _cluster_id(config.controller_ids, config.controllers)

    def prepare(
        self,
        frame: bytes,
        key: int,
        version: int,
        host: str,
        timer: RequestTimer,
        *,
        auth: ConnectionAuth | None = None,
        tls_principal: str | None = None,
    ) -> Coroutine[Any, Any, bytes | None]:
        """The answer to one request frame, to be awaited (None: no answer, acks=0);
        FrameError (close the connection) for an unknown API or a version not served,
        except ApiVersions, which answers UNSUPPORTED_VERSION with our ranges. The
        answer notes its handler's start and end in ``timer`` (the listener records it
        once the answer is sent)."""
        served = SUPPORTED.get(key)
        if served is None:
            raise FrameError(f"unknown or unsupported api key {key}")
        timer.api = self._names[key]
        low, high = served
        if not low <= version <= high:
            if key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(frame)
            raise FrameError(f"api key {key} version {version} is not supported ({low}-{high})")
        request_cls = load_request_schema(key, version)
        header = parse_header(frame, flexible=request_cls.__flexible__)
        try:
            request, _ = entity_reader(request_cls)(frame, header.body_offset)
        except Exception as e:  # kio's decoding errors have no common base
            raise FrameError(f"api key {key} v{version}: bad body: {type(e).__name__}") from None
        call = Call(header.client_id, host, auth, tls_principal)
        return self._answer(key, version, header.correlation_id, request, call, timer=timer)

    async def _answer(
        self,
        key: int,
        version: int,
        correlation_id: int,
        request: Any,
        call: Call,
        *,
        timer: RequestTimer | None = None,
    ) -> bytes | None:
        if timer is None:
            timer = RequestTimer(time.perf_counter())  # a test's direct call: not recorded
        timer.started = time.perf_counter()
        token = start_timing(timer)
        try:
            return await self._answer_untimed(key, version, correlation_id, request, call)
        finally:
            timer.ready = time.perf_counter()
            stop_timing(token)

    async def _answer_untimed(
        self, key: int, version: int, correlation_id: int, request: Any, call: Call
    ) -> bytes | None:
        response = await self._handlers[key](request, version, call)
        if response is None:
            return None
        response_cls = type(response)
        out = io.BytesIO()
        entity_writer(response_cls)(out, response)
        # ApiVersions answers with response header v0 whatever its version (KIP-511).
        flexible = bool(response_cls.__flexible__) and key != API_VERSIONS_KEY
        return encode_response(correlation_id, out.getvalue(), flexible_header=flexible)

    async def _unsupported_api_versions(self, frame: bytes) -> bytes:
        # The client's version is newer than ours: answer in v0, which every client
        # reads, with UNSUPPORTED_VERSION and our ranges, so that it downgrades.
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        response_cls = load_response_schema(API_VERSIONS_KEY, 0)
        response = _build(
            response_cls,
            error_code=ErrorCode.unsupported_version,
            api_keys=self._api_keys(response_cls),
        )
        out = io.BytesIO()
        entity_writer(response_cls)(out, response)
        return encode_response(correlation_id, out.getvalue(), flexible_header=False)

    # ------------------------------------------------------------------ ApiVersions

    @staticmethod
    def _api_keys(response_cls: type[Any]) -> tuple[Any, ...]:
        version_cls = _nested(response_cls, "ApiVersion")
        return tuple(
            version_cls(api_key=k, min_version=low, max_version=high)
            for k, (low, high) in sorted(SUPPORTED.items())
        )

    async def api_versions(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(API_VERSIONS_KEY, version)
        return _build(
            cls, error_code=ErrorCode.none, api_keys=self._api_keys(cls), throttle_time=_NO_TIME
        )

    # ------------------------------------------------------------------ SASL

    async def sasl_handshake(self, request: Any, version: int, call: Call) -> Any:
        """SaslHandshake; on a listener without SASL, ILLEGAL_SASL_STATE (Kafka's)."""
        cls = load_response_schema(SASL_HANDSHAKE_KEY, version)
        if call.auth is None:
            return _build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        try:
            call.auth.handshake(request.mechanism, version=version)
        except KafkaError as e:
            return _build(cls, error_code=_code(e), mechanisms=call.auth.mechanisms)
        return _build(cls, error_code=ErrorCode.none, mechanisms=call.auth.mechanisms)

    async def sasl_authenticate(self, request: Any, version: int, call: Call) -> Any:
        """SaslAuthenticate: one token of the exchange; a failure's message says why
        (never whether the user exists), and the listener then closes the connection."""
        cls = load_response_schema(SASL_AUTHENTICATE_KEY, version)
        extra = {"session_lifetime": _NO_TIME} if version >= 1 else {}
        if call.auth is None:
            return _build(
                cls,
                error_code=ErrorCode.illegal_sasl_state,
                error_message="this listener does not use SASL",
                auth_bytes=b"",
                **extra,
            )
        try:
            answer = call.auth.authenticate(request.auth_bytes, version=version)
        except KafkaError as e:
            return _build(
                cls, error_code=_code(e), error_message=_message(e), auth_bytes=b"", **extra
            )
        except Exception as e:  # a library error on a malformed token: still a failure
            return _build(
                cls,
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=f"malformed SASL token ({type(e).__name__})",
                auth_bytes=b"",
                **extra,
            )
        if version >= 1:
            # KIP-368: the session lifetime, on the exchange's last answer (else 0).
            lifetime_ms = call.auth.session_lifetime_ms if call.auth.authenticated else 0
            extra = {"session_lifetime": datetime.timedelta(milliseconds=lifetime_ms)}
        return _build(
            cls, error_code=ErrorCode.none, error_message=None, auth_bytes=answer, **extra
        )

    # ------------------------------------------------------------------ Metadata

    def _kafka_address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self._server.manager.image.cluster.broker(broker_id)
        endpoint = None if broker is None else broker.endpoint(KAFKA_ENDPOINT)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    async def metadata(self, request: Any, version: int, call: Call) -> Any:
        server = self._server
        cls = load_response_schema(3, version)
        broker_cls = _nested(cls, "MetadataResponseBroker")
        topic_cls = _nested(cls, "MetadataResponseTopic")
        partition_cls = _nested(cls, "MetadataResponsePartition")
        wanted: list[str] | None = None
        if request.topics is not None and (version > 0 or request.topics):
            wanted = [t.name for t in request.topics if t.name is not None]
        image = server.manager.image
        access = self._access(call)
        # A topic the principal may not DESCRIBE: left out of a listing of every topic,
        # TOPIC_AUTHORIZATION_FAILED when named (and never auto-created).
        hidden = set(wanted or ()) - access.topics(AclOperation.DESCRIBE, wanted or ())
        missing = [n for n in (wanted or []) if n not in image.topics.by_name and n not in hidden]
        auto_create = server.config.auto_create_topics_enable and getattr(
            request, "allow_auto_topic_creation", True
        )
        if auto_create:
            hidden.update(n for n in missing if not access.may_create_topic(n))
            missing = [n for n in missing if n not in hidden]
        created = await self._auto_create(missing) if missing and auto_create else set()
        brokers = _kafka_brokers(image, broker_cls, id_field="node_id")
        topics = []
        names = (
            access.describable(ResourceType.TOPIC, sorted(image.topics.by_name), str)
            if wanted is None
            else wanted
        )
        for name in names:
            topic = image.topics.by_name.get(name)
            if topic is None or name in hidden:
                if name in hidden:
                    error = ErrorCode.topic_authorization_failed
                elif name in created:
                    error = ErrorCode.leader_not_available
                else:
                    error = ErrorCode.unknown_topic_or_partition
                topics.append(
                    _build(
                        topic_cls,
                        error_code=error,
                        name=name,
                        topic_id=uuid.UUID(int=0),
                        is_internal=False,
                        partitions=(),
                    )
                )
                continue
            partitions = tuple(
                _build(
                    partition_cls,
                    error_code=ErrorCode.none
                    if reg.leader != NO_LEADER
                    else ErrorCode.leader_not_available,
                    partition_index=index,
                    leader_id=reg.leader,
                    leader_epoch=reg.leader_epoch,
                    replica_nodes=tuple(reg.replicas),
                    isr_nodes=tuple(reg.isr),
                    offline_replicas=(),
                )
                for index, reg in sorted(topic.partitions.items())
            )
            topics.append(
                _build(
                    topic_cls,
                    error_code=ErrorCode.none,
                    name=name,
                    topic_id=_uuid(topic.topic_id),
                    is_internal=name == OFFSETS_TOPIC,
                    partitions=partitions,
                    topic_authorized_operations=(
                        access.authorized_operations(ResourceType.TOPIC, name)
                        if getattr(request, "include_topic_authorized_operations", False)
                        else _NO_OPERATIONS
                    ),
                )
            )
        # Admin requests may go to any broker: this one forwards them to the active
        # controller (Kafka's KRaft brokers name a live broker as the controller too).
        return _build(
            cls,
            throttle_time=_NO_TIME,
            brokers=brokers,
            cluster_id=self._cluster_id(),
            controller_id=server.config.node_id,
            topics=tuple(topics),
            # v8-10 only (KIP-700 moved it to DescribeCluster).
            cluster_authorized_operations=(
                access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if getattr(request, "include_cluster_authorized_operations", False)
                else _NO_OPERATIONS
            ),
        )

    async def _auto_create(self, names: Sequence[str]) -> set[str]:
        """auto.create.topics.enable: ask the controller for ``names`` with its default
        partitions and replication; the names it accepted (or already had)."""
        channel = self._server.channel
        if channel is None:
            return set()
        body = {"topics": [{"name": n} for n in names]}
        try:
            answer = await channel.post(
                "/v1/topics", body, timeout_ms=self._server.config.request_timeout_ms
            )
        except KafkaError as e:
            log.warning("topic auto-creation failed", extra={"fields": {"error": str(e)}})
            return set()
        accepted = set()
        for item in answer.get("topics", []):
            error = item.get("error")
            if not error or error.get("error") == "TOPIC_ALREADY_EXISTS":
                accepted.add(item.get("name"))
        return accepted

    # ------------------------------------------------------------------ Produce

    async def produce(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(0, version)
        entries = [
            (t.name, int(p.index), bytes(p.records or b""))
            for t in request.topic_data
            for p in t.partition_data
        ]
        transactional_id = request.transactional_id
        access = self._access(call)
        whole_error = None
        if transactional_id is None and any(has_transactional_batch(d) for _, _, d in entries):
            # Kafka: transactional batches need an authorized transactional_id (its
            # authorizer finds none to authorize), answered for every partition.
            whole_error = ErrorCode.transactional_id_authorization_failed
        elif transactional_id is not None and not access.may_transactional_id(
            AclOperation.WRITE, transactional_id
        ):
            whole_error = ErrorCode.transactional_id_authorization_failed
        elif (
            transactional_id is None
            and access.authorizer is not None  # off: the batches are not even looked at
            and any(has_idempotent_batch(d) for _, _, d in entries)
            and not access.may_write_idempotently()
        ):
            whole_error = ErrorCode.cluster_authorization_failed
        if whole_error is not None:
            return self._produce_response(cls, [(t, i, whole_error, None) for t, i, _ in entries])
        writable = access.topics(AclOperation.WRITE, (t for t, _, _ in entries))
        denied = [
            (t, i, ErrorCode.topic_authorization_failed, None)
            for t, i, _ in entries
            if t not in writable
        ]
        entries = [e for e in entries if e[0] in writable]
        # The HTTP API's produce: a transactional id's batches are verified with its
        # transaction coordinator first (KIP-890 part 1, broker/txn_verification.py).
        produced = (
            await self._server.produce(
                entries,
                acks=int(request.acks),
                timeout_ms=_ms(request.timeout),
                transactional_id=transactional_id,
            )
            if entries or not denied  # all refused: no service call
            else []
        )
        self._server.metrics.topics.record_produce(entries, produced)
        if request.acks == 0:
            return None
        return self._produce_response(
            cls,
            [(r.topic, r.partition, _fenced(_code(r.error), 0, version), r) for r in produced]
            + denied,
        )

    @staticmethod
    def _produce_response(
        response_cls: type[Any], results: list[tuple[str, int, ErrorCode, Any]]
    ) -> Any:
        partition_cls = _nested(response_cls, "PartitionProduceResponse")
        topic_cls = _nested(response_cls, "TopicProduceResponse")

        def partition(index: int, code: ErrorCode, r: Any) -> Any:
            append_ms = -1 if r is None else r.log_append_time_ms
            return _build(
                partition_cls,
                index=index,
                error_code=code,
                base_offset=-1 if r is None else r.base_offset,
                log_append_time=None
                if append_ms is None or append_ms < 0
                else datetime.datetime.fromtimestamp(append_ms / 1000, datetime.UTC),
                log_start_offset=-1 if r is None else r.log_start_offset,
                record_errors=(),
                error_message=None if r is None else _message(r.error),
            )

        topics = _by_topic((t, partition(i, c, r)) for t, i, c, r in results)
        return _build(
            response_cls,
            responses=tuple(
                _build(topic_cls, name=t, partition_responses=tuple(ps)) for t, ps in topics
            ),
            throttle_time=_NO_TIME,
        )

    # ------------------------------------------------------------------ Fetch

    async def fetch(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(1, version)
        session_id = getattr(request, "session_id", 0)
        session_epoch = getattr(request, "session_epoch", -1)
        if session_id != 0 or session_epoch > 0:
            # No fetch sessions (KIP-227): we never hand out a session id, so an
            # incremental fetch names one we do not know.
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=ErrorCode.fetch_session_id_not_found,
                session_id=0,
                responses=(),
            )
        partitions = [
            FetchPartition(
                topic=t.topic,
                partition=int(p.partition),
                fetch_offset=int(p.fetch_offset),
                partition_max_bytes=int(p.partition_max_bytes),
                current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
                log_start_offset=getattr(p, "log_start_offset", -1),
            )
            for t in request.topics
            for p in t.partitions
        ]
        readable = self._access(call).topics(AclOperation.READ, (p.topic for p in partitions))
        denied = [(p.topic, p.partition) for p in partitions if p.topic not in readable]
        partitions = [p for p in partitions if p.topic in readable]
        # Nothing readable: answered at once (a long poll on no partitions would only
        # delay the authorization error).
        results = (
            await self._server.manager.fetch(
                # Every Kafka-protocol fetch is a consumer's: followers fetch over HTTP.
                replica_id=-1,
                broker_epoch=-1,
                max_wait_ms=_ms(request.max_wait),
                min_bytes=int(request.min_bytes),
                max_bytes=int(getattr(request, "max_bytes", 0x7FFFFFFF)),
                partitions=partitions,
                isolation_level=int(getattr(request, "isolation_level", 0)),
            )
            if partitions or not denied
            else []
        )
        self._server.metrics.topics.record_fetch(results, follower=False)
        partition_cls = _nested(cls, "PartitionData")
        topic_cls = _nested(cls, "FetchableTopicResponse")
        aborted_cls = _nested(partition_cls, "AbortedTransaction")
        items = _partition_results(
            partition_cls,
            results,
            lambda r: {
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset,
                "log_start_offset": r.log_start_offset,
                # read_committed: a list (Kafka's AbortedTransaction); else null.
                "aborted_transactions": None
                if r.aborted_transactions is None
                else tuple(
                    _build(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in r.aborted_transactions
                ),
                "preferred_read_replica": -1,
                "records": r.records,
            },
        )
        refused = _refused_partitions(
            partition_cls,
            denied,
            ErrorCode.topic_authorization_failed,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=None,
        )
        items = [*items, *refused]
        return _build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(
                _build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in _by_topic(items)
            ),
        )

    # ------------------------------------------------------------------ ListOffsets

    async def list_offsets(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(2, version)
        wanted = [
            (t.name, int(p.partition_index), int(p.timestamp))
            for t in request.topics
            for p in t.partitions
        ]
        describable = self._access(call).topics(AclOperation.DESCRIBE, (w[0] for w in wanted))
        results = self._server.manager.list_offsets(
            [w for w in wanted if w[0] in describable],
            isolation_level=int(getattr(request, "isolation_level", 0)),
        )
        partition_cls = _nested(cls, "ListOffsetsPartitionResponse")
        topic_cls = _nested(cls, "ListOffsetsTopicResponse")
        items = _partition_results(
            partition_cls,
            results,
            lambda r: {
                "timestamp": r.timestamp,
                "offset": r.offset,
                "leader_epoch": r.leader_epoch,
            },
        )
        refused = _refused_partitions(
            partition_cls,
            [(t, i) for t, i, _ in wanted if t not in describable],
            ErrorCode.topic_authorization_failed,
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
        return _topics_response(cls, topic_cls, [*items, *refused])

    # ------------------------------------------------------------------ OffsetForLeaderEpoch

    async def offset_for_leader_epoch(self, request: Any, version: int, call: Call) -> Any:
        # Every Kafka-protocol request is a consumer's (followers use raftka's HTTP
        # API and learn divergence from their fetches), so only the leader answers.
        cls = load_response_schema(23, version)
        partition_cls = _nested(cls, "EpochEndOffset")
        topic_cls = _nested(cls, "OffsetForLeaderTopicResult")
        wanted = [
            (t.topic, int(p.partition), int(p.current_leader_epoch), int(p.leader_epoch))
            for t in request.topics
            for p in t.partitions
        ]
        describable = self._access(call).topics(AclOperation.DESCRIBE, (w[0] for w in wanted))
        results = self._server.manager.offsets_for_leader_epoch(
            [w for w in wanted if w[0] in describable]
        )
        items = _partition_results(
            partition_cls,
            results,
            lambda r: {"leader_epoch": r.leader_epoch, "end_offset": r.end_offset},
            index_field="partition",
        )
        refused = _refused_partitions(
            partition_cls,
            [(w[0], w[1]) for w in wanted if w[0] not in describable],
            ErrorCode.topic_authorization_failed,
            index_field="partition",
            leader_epoch=-1,
            end_offset=-1,
        )
        return _topics_response(cls, topic_cls, [*items, *refused], name_field="topic")

    # ------------------------------------------------------------------ InitProducerId

    async def init_producer_id(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(22, version)

        def answer(code: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> Any:
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=code,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )

        access = self._access(call)
        if request.transactional_id is not None and not access.may_transactional_id(
            AclOperation.WRITE, request.transactional_id
        ):
            return answer(ErrorCode.transactional_id_authorization_failed)
        if request.transactional_id is None and not access.may_write_idempotently():
            return answer(ErrorCode.cluster_authorization_failed)
        if request.transactional_id is not None:
            # The transactional id's coordinator answers (as POST /v1/init-producer-id).
            fields = {
                "transactional_id": request.transactional_id,
                "timeout_ms": self._server.config.request_timeout_ms,
                "transaction_timeout_ms": _ms(request.transaction_timeout),
                "producer_id": int(getattr(request, "producer_id", -1)),
                "producer_epoch": int(getattr(request, "producer_epoch", -1)),
            }
            try:
                message = decode_value(fields, broker_api.InitProducerIdRequest)
                r = await self._server.transactions.init_producer_id(message)
            except KafkaError as e:
                return answer(_fenced(_code(e), 22, version))
            code = _fenced(_code(r.error), 22, version)
            if code is not ErrorCode.none:
                return answer(code)
            return answer(code, r.producer_id, r.producer_epoch)
        ids = self._server.producer_ids
        if ids is None:
            return answer(ErrorCode.broker_not_available)
        timeout_ms = self._server.config.request_timeout_ms
        try:
            producer_id = await ids.next_producer_id(timeout_ms=timeout_ms)
        except TimeoutError:
            return answer(_code(RequestTimedOutError("no producer id block from the controller")))
        return answer(ErrorCode.none, producer_id, 0)

    # ------------------------------------------------------------------ transactions
    # The transaction coordinator service's methods (as transaction_routes.py routes
    # them) and the group coordinator's TxnOffsetCommit. Clients older than KIP-588's
    # versions get PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (:func:`_fenced`).

    async def _txn_call(
        self,
        call: Call,
        method: str,
        fields: dict[str, Any],
        message_type: Any,
        *,
        key: int,
        version: int,
    ) -> tuple[Any, ErrorCode]:
        """The transaction coordinator's answer to ``fields`` and its request-level
        error (NONE if it has none), or None and the error it raised."""
        try:
            r = await self._group_call(
                method, fields, message_type, call, service=self._server.transactions
            )
        except KafkaError as e:
            return None, _fenced(_code(e), key, version)
        return r, _fenced(_code(getattr(r, "error", None)), key, version)

    async def add_partitions_to_txn(self, request: Any, version: int, call: Call) -> Any:
        # v0-3: the client's form (v4's batched form is the brokers' own, KIP-890).
        cls = load_response_schema(24, version)
        partition_cls = _nested(cls, "AddPartitionsToTxnPartitionResult")
        topic_cls = _nested(cls, "AddPartitionsToTxnTopicResult")
        topics = request.v3_and_below_topics
        fields = {
            "transactional_id": request.v3_and_below_transactional_id,
            "producer_id": int(request.v3_and_below_producer_id),
            "producer_epoch": int(request.v3_and_below_producer_epoch),
            "topics": [
                {"name": t.name, "partitions": [int(p) for p in t.partitions]} for t in topics
            ],
        }
        access = self._access(call)
        writable = access.topics(AclOperation.WRITE, (t.name for t in topics))
        r: Any = None
        if not access.may_transactional_id(
            AclOperation.WRITE, request.v3_and_below_transactional_id
        ):
            failed = ErrorCode.transactional_id_authorization_failed
        elif len(writable) < len({t.name for t in topics}):
            # Kafka's: nothing is added when a topic is refused; the others were not tried.
            failed = ErrorCode.operation_not_attempted
        else:
            r, failed = await self._txn_call(
                call,
                "add_partitions_to_txn",
                fields,
                txn_api.AddPartitionsToTxnRequest,
                key=24,
                version=version,
            )
        if failed is ErrorCode.none:
            failed = ErrorCode.unknown_server_error  # a partition it did not answer for
        answers = {} if r is None else _txn_errors(r.results, 24, version)
        if failed is ErrorCode.operation_not_attempted:
            answers = {
                (t.name, int(p)): ErrorCode.topic_authorization_failed
                for t in topics
                if t.name not in writable
                for p in t.partitions
            }
        results = tuple(
            _build(
                topic_cls,
                name=t.name,
                results_by_partition=tuple(
                    _build(
                        partition_cls,
                        partition_index=p,
                        partition_error_code=answers.get((t.name, int(p)), failed),
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        )
        return _build(cls, throttle_time=_NO_TIME, results_by_topic_v3_and_below=results)

    async def add_offsets_to_txn(self, request: Any, version: int, call: Call) -> Any:
        fields = {
            "transactional_id": request.transactional_id,
            "producer_id": int(request.producer_id),
            "producer_epoch": int(request.producer_epoch),
            "group_id": request.group_id,
        }
        access = self._access(call)
        if not access.may_transactional_id(AclOperation.WRITE, request.transactional_id):
            code = ErrorCode.transactional_id_authorization_failed
        elif not access.may_group(AclOperation.READ, request.group_id):
            code = ErrorCode.group_authorization_failed
        else:
            _, code = await self._txn_call(
                call,
                "add_offsets_to_txn",
                fields,
                txn_api.AddOffsetsToTxnRequest,
                key=25,
                version=version,
            )
        return _build(load_response_schema(25, version), throttle_time=_NO_TIME, error_code=code)

    async def end_txn(self, request: Any, version: int, call: Call) -> Any:
        # v0-4 clients are transaction version 1: their answer has no producer id and
        # epoch (v5's, KIP-890 part 2), so the coordinator must not bump the epoch.
        fields = {
            "transactional_id": request.transactional_id,
            "producer_id": int(request.producer_id),
            "producer_epoch": int(request.producer_epoch),
            "committed": bool(request.committed),
            "transaction_version": 2 if version >= 5 else 1,
        }
        if not self._access(call).may_transactional_id(
            AclOperation.WRITE, request.transactional_id
        ):
            code = ErrorCode.transactional_id_authorization_failed
        else:
            _, code = await self._txn_call(
                call, "end_txn", fields, txn_api.EndTxnRequest, key=26, version=version
            )
        return _build(load_response_schema(26, version), throttle_time=_NO_TIME, error_code=code)

    async def txn_offset_commit(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(28, version)
        partition_cls = _nested(cls, "TxnOffsetCommitResponsePartition")
        topic_cls = _nested(cls, "TxnOffsetCommitResponseTopic")
        access = self._access(call)
        readable = access.topics(AclOperation.READ, (t.name for t in request.topics))
        fields = {
            "transactional_id": request.transactional_id,
            "group_id": request.group_id,
            "producer_id": int(request.producer_id),
            "producer_epoch": int(request.producer_epoch),
            # v3+ (KIP-447): the consumer's group metadata, so a zombie is fenced.
            "generation_id": int(getattr(request, "generation_id", -1)),
            "member_id": getattr(request, "member_id", ""),
            "group_instance_id": getattr(request, "group_instance_id", None),
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": int(p.partition_index),
                            "committed_offset": int(p.committed_offset),
                            "committed_leader_epoch": int(getattr(p, "committed_leader_epoch", -1)),
                            "committed_metadata": p.committed_metadata,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
                if t.name in readable
            ],
        }
        r: Any = None
        if not access.may_transactional_id(AclOperation.WRITE, request.transactional_id):
            failed = ErrorCode.transactional_id_authorization_failed
        elif not access.may_group(AclOperation.READ, request.group_id):
            failed = ErrorCode.group_authorization_failed
        elif request.topics and not readable:
            failed = ErrorCode.topic_authorization_failed
        else:
            r, failed = await self._group_results(
                call, "txn_offset_commit", fields, txn_api.TxnOffsetCommitRequest
            )
        failed = _fenced(failed, 28, version)
        answers = {} if r is None else _txn_errors(r.topics, 28, version)
        if r is not None:
            # The topics refused before the coordinator saw them.
            answers.update(_topic_errors(request.topics, readable))
        return _commit_answer(
            cls, partition_cls, topic_cls, request.topics, answers=answers, failed=failed
        )

    async def describe_transactions(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(65, version)
        state_cls = _nested(cls, "TransactionState")
        topic_cls = _nested(cls, "TopicData")
        access = self._access(call)
        allowed = [
            tid
            for tid in request.transactional_ids
            if access.may_transactional_id(AclOperation.DESCRIBE, tid)
        ]
        refused = {
            tid: _describe_state(
                state_cls, topic_cls, tid, ErrorCode.transactional_id_authorization_failed
            )
            for tid in request.transactional_ids
            if tid not in allowed
        }

        def in_request_order(states: dict[str, Any]) -> tuple[Any, ...]:
            # Kafka answers each id in the order asked, refused or not.
            answers = {**states, **refused}
            return tuple(answers[t] for t in request.transactional_ids if t in answers)

        if refused and not allowed:
            return _build(cls, throttle_time=_NO_TIME, transaction_states=in_request_order({}))
        fields = {"transactional_ids": allowed}
        r, code = await self._txn_call(
            call,
            "describe_transactions",
            fields,
            txn_api.DescribeTransactionsRequest,
            key=65,
            version=version,
        )
        if r is None:
            # The request did not check out: every id gets its error.
            states = {tid: _describe_state(state_cls, topic_cls, tid, code) for tid in allowed}
        else:
            states = {
                s.transactional_id: _describe_state(
                    state_cls, topic_cls, s.transactional_id, _code(s.error), s
                )
                for s in r.transaction_states
            }
        return _build(cls, throttle_time=_NO_TIME, transaction_states=in_request_order(states))

    async def list_transactions(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(66, version)
        state_cls = _nested(cls, "TransactionState")
        fields = {
            "state_filters": list(request.state_filters),
            "producer_id_filters": [int(p) for p in request.producer_id_filters],
            # v1 (KIP-994); v0 lists every duration.
            "duration_filter_ms": int(getattr(request, "duration_filter", -1)),
        }
        r, code = await self._txn_call(
            call,
            "list_transactions",
            fields,
            txn_api.ListTransactionsRequest,
            key=66,
            version=version,
        )
        return _build(
            cls,
            throttle_time=_NO_TIME,
            error_code=code,
            unknown_state_filters=() if r is None else r.unknown_state_filters,
            transaction_states=()
            if r is None
            else tuple(
                _build(
                    state_cls,
                    transactional_id=s.transactional_id,
                    producer_id=s.producer_id,
                    transaction_state=s.transaction_state,
                )
                for s in self._access(call).describable(
                    ResourceType.TRANSACTIONAL_ID,
                    r.transaction_states,
                    lambda s: str(s.transactional_id),
                )
            ),
        )

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(19, version)
        result_cls = _nested(cls, "CreatableTopicResult")
        access = self._access(call)
        creatable = {t.name for t in request.topics if access.may_create_topic(t.name)}
        topics = []
        for t in request.topics:
            if t.name not in creatable:
                continue
            topic: dict[str, Any] = {
                "name": t.name,
                "num_partitions": int(t.num_partitions),
                "replication_factor": int(t.replication_factor),
            }
            if t.assignments:
                topic["assignments"] = {
                    str(a.partition_index): list(a.broker_ids) for a in t.assignments
                }
            if t.configs:
                topic["configs"] = {c.name: c.value for c in t.configs if c.value is not None}
            topics.append(topic)
        body = {"topics": topics, "validate_only": bool(getattr(request, "validate_only", False))}
        answer, failure = (
            await self._forward("/v1/topics", body, _ms(request.timeout))
            if topics or len(creatable) == len(request.topics)
            else ({}, None)
        )
        answers = {item["name"]: item for item in answer.get("topics", [])}
        results = []
        for t in request.topics:
            item = answers.get(t.name)
            error_code, message = _controller_result(item, failure)
            if t.name not in creatable:
                item, error_code, message = None, ErrorCode.topic_authorization_failed, None
            results.append(
                _build(
                    result_cls,
                    name=t.name,
                    topic_id=_uuid(None if item is None else item.get("topic_id")),
                    error_code=error_code,
                    error_message=message,
                    num_partitions=-1 if item is None else item.get("num_partitions", -1),
                    replication_factor=-1 if item is None else item.get("replication_factor", -1),
                    configs=(),
                )
            )
        return _build(cls, throttle_time=_NO_TIME, topics=tuple(results))

    async def delete_topics(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(20, version)
        result_cls = _nested(cls, "DeletableTopicResult")
        names = list(request.topic_names)
        deletable = self._access(call).topics(AclOperation.DELETE, names)
        allowed = [n for n in names if n in deletable]
        answer, failure = (
            await self._forward(
                "/v1/topics", {"names": allowed}, _ms(request.timeout), method="DELETE"
            )
            if allowed or len(allowed) == len(names)
            else ({}, None)
        )
        answers = {item.get("name"): item for item in answer.get("topics", [])}
        results = []
        for name in names:
            code, message = _controller_result(answers.get(name), failure)
            if name not in deletable:
                code, message = ErrorCode.topic_authorization_failed, None
            results.append(_build(result_cls, name=name, error_code=code, error_message=message))
        return _build(cls, throttle_time=_NO_TIME, responses=tuple(results))

    async def _forward(
        self, path: str, body: dict[str, Any], timeout_ms: int, *, method: str = "POST"
    ) -> tuple[dict[str, Any], KafkaError | None]:
        """The active controller's answer to an admin request (Kafka's forwarding),
        through the broker's controller channel; or ``{}`` and the request's failure."""
        channel = self._server.channel
        if channel is None:
            return {}, RequestTimedOutError("the broker is starting")
        try:
            return await channel.post(path, body, timeout_ms=timeout_ms, method=method), None
        except KafkaError as e:
            return {}, e

    async def create_partitions(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(37, version)
        result_cls = _nested(cls, "CreatePartitionsTopicResult")
        alterable = self._access(call).topics(AclOperation.ALTER, (t.name for t in request.topics))
        topics = []
        for t in request.topics:
            if t.name not in alterable:
                continue
            topic: dict[str, Any] = {"name": t.name, "count": int(t.count)}
            if t.assignments is not None:
                topic["assignments"] = [list(a.broker_ids) for a in t.assignments]
            topics.append(topic)
        body = {"topics": topics, "validate_only": bool(request.validate_only)}
        answer, failure = (
            await self._forward("/v1/partitions", body, _ms(request.timeout))
            if topics or len(topics) == len(request.topics)
            else ({}, None)
        )
        answers = {item["name"]: item for item in answer.get("topics", [])}
        results = []
        for t in request.topics:
            code, message = _controller_result(answers.get(t.name), failure)
            if t.name not in alterable:
                code, message = ErrorCode.topic_authorization_failed, None
            results.append(_build(result_cls, name=t.name, error_code=code, error_message=message))
        return _build(cls, throttle_time=_NO_TIME, results=tuple(results))

    async def elect_leaders(self, request: Any, version: int, call: Call) -> Any:
        # Forwarded to the active controller's POST /v1/elect-leaders, as Kafka's
        # brokers forward ElectLeaders; Kafka's ElectionType 0 is preferred, 1 unclean.
        cls = load_response_schema(43, version)
        result_cls = _nested(cls, "ReplicaElectionResult")
        partition_cls = _nested(cls, "PartitionResult")
        election_type = int(getattr(request, "election_type", 0))
        refused = None
        if not self._access(call).may_cluster(AclOperation.ALTER):
            refused = ErrorCode.cluster_authorization_failed
        elif election_type not in (0, 1):
            refused = ErrorCode.invalid_request
        if refused is not None:
            return _build(
                cls, throttle_time=_NO_TIME, error_code=refused, replica_election_results=()
            )
        body: dict[str, Any] = {
            "election_type": "preferred" if election_type == 0 else "unclean",
            "topic_partitions": (
                None
                if request.topic_partitions is None
                else [
                    {"topic": t.topic, "partitions": [int(p) for p in t.partitions]}
                    for t in request.topic_partitions
                ]
            ),
        }
        answer, failure = await self._forward("/v1/elect-leaders", body, _ms(request.timeout))
        if failure is not None:
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=_code(failure),
                replica_election_results=(),
            )
        items = []
        for r in answer.get("results", []):
            code, message = _controller_result(r, None)
            items.append(
                (
                    r["topic"],
                    _build(
                        partition_cls,
                        partition_id=int(r["partition"]),
                        error_code=code,
                        error_message=message,
                    ),
                )
            )
        return _topics_response(
            cls,
            result_cls,
            items,
            name_field="topic",
            topics_field="replica_election_results",
            partitions_field="partition_result",
            error_code=ErrorCode.none,
        )

    async def alter_partition_reassignments(self, request: Any, version: int, call: Call) -> Any:
        # Forwarded to the active controller's POST /v1/reassignments (KIP-455). v1's
        # allow_replication_factor_change=false (KIP-860) refuses a target whose size
        # differs from the partition's replicas before the move, here, from this
        # broker's image.
        cls = load_response_schema(45, version)
        topic_cls = _nested(cls, "ReassignableTopicResponse")
        partition_cls = _nested(cls, "ReassignablePartitionResponse")
        allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
        if not self._access(call).may_cluster(AclOperation.ALTER):
            return _cluster_refused(cls, responses=())
        image = self._server.manager.image
        refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
        forward = []
        for t in request.topics:
            for p in t.partitions:
                replicas = None if p.replicas is None else [int(r) for r in p.replicas]
                topic = image.topics.topic_by_name(t.name)
                now = None if topic is None else topic.partition(int(p.partition_index))
                if not allow_rf_change and replicas is not None and now is not None:
                    before = len(now.replicas) - len(now.adding_replicas)
                    if len(replicas) != before:
                        refused[(t.name, int(p.partition_index))] = (
                            ErrorCode.invalid_replication_factor,
                            f"{t.name}-{int(p.partition_index)}: {len(replicas)} replicas, "
                            f"not {before}, and the replication factor may not change",
                        )
                        continue
                forward.append(
                    {"topic": t.name, "partition": int(p.partition_index), "replicas": replicas}
                )
        answers: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        failure: KafkaError | None = None
        if forward:
            answer, failure = await self._forward(
                "/v1/reassignments", {"partitions": forward}, _ms(request.timeout)
            )
            for r in answer.get("results", []):
                answers[(r["topic"], int(r["partition"]))] = _controller_result(r, None)
        items = []
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                code, message = (
                    refused.get(key) or answers.get(key) or _controller_result(None, failure)
                )
                items.append(
                    (
                        t.name,
                        _build(
                            partition_cls,
                            partition_index=key[1],
                            error_code=code,
                            error_message=message,
                        ),
                    )
                )
        return _topics_response(
            cls,
            topic_cls,
            items,
            topics_field="responses",
            error_code=ErrorCode.none,
            error_message=None,
        )

    async def list_partition_reassignments(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(46, version)
        topic_cls = _nested(cls, "OngoingTopicReassignment")
        partition_cls = _nested(cls, "OngoingPartitionReassignment")
        answer: dict[str, Any] = {}
        failure: KafkaError | None = None
        if self._access(call).may_cluster(AclOperation.DESCRIBE):
            answer, failure = await self._forward(
                "/v1/reassignments", {}, _ms(request.timeout), method="GET"
            )
        else:
            failure = ClusterAuthorizationFailedError("DESCRIBE on the cluster is needed")
        if failure is not None:
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=_code(failure),
                error_message=failure.message,
                topics=(),
            )
        wanted: set[tuple[str, int]] | None = None
        if request.topics is not None:
            wanted = {(t.name, int(i)) for t in request.topics for i in t.partition_indexes}
        items = [
            (
                r["topic"],
                _build(
                    partition_cls,
                    partition_index=int(r["partition"]),
                    replicas=tuple(int(b) for b in r["replicas"]),
                    adding_replicas=tuple(int(b) for b in r["adding_replicas"]),
                    removing_replicas=tuple(int(b) for b in r["removing_replicas"]),
                ),
            )
            for r in answer.get("reassignments", [])
            if wanted is None or (r["topic"], int(r["partition"])) in wanted
        ]
        return _topics_response(
            cls, topic_cls, items, error_code=ErrorCode.none, error_message=None
        )

    # ------------------------------------------------------------------ configs

    async def describe_configs(self, request: Any, version: int, call: Call) -> Any:
        # A topic: answered from this broker's metadata image, by the function the
        # controller's GET /v1/configs answers with (Kafka's brokers answer
        # DescribeConfigs too). A broker: this broker's configs, as GET
        # /v1/broker-configs gives them; Kafka's AdminClient sends a broker resource to
        # that broker, and the empty name means the cluster-wide dynamic defaults.
        cls = load_response_schema(32, version)
        result_cls = _nested(cls, "DescribeConfigsResult")
        entry_cls = _nested(cls, "DescribeConfigsResourceResult")
        image = self._server.manager.image
        access = self._access(call)
        results = []
        for resource in request.resources:
            kind = RESOURCE_TYPES.get(int(resource.resource_type))
            keys = resource.configuration_keys
            # The controller's rows (topics) and the broker's (brokers) share their fields.
            found: Sequence[ConfigEntry | ConfigEntryData] = ()
            code, message = ErrorCode.none, None
            denied = _config_access(access, AclOperation.DESCRIBE_CONFIGS, kind, resource)
            if denied is not None:
                code = denied
            elif kind == "topic":
                described = describe_configs(image, resource.resource_name, keys or None)
                code, message = _code(described.error), _message(described.error)
                found = described.entries
            elif kind == "broker":
                broker_id, properties, dynamic, defaults = self._server.broker_configs()
                if resource.resource_name == "":
                    found = broker_config_entries({}, None, defaults)
                elif resource.resource_name == str(broker_id):
                    found = broker_config_entries(properties, dynamic, defaults)
                else:
                    code = ErrorCode.invalid_request
                    message = (
                        f"unexpected broker id: expected {broker_id} or the empty string,"
                        f" got {resource.resource_name!r}"
                    )
                if keys:
                    found = [e for e in found if e.name in set(keys)]
            else:
                code = ErrorCode.invalid_request
                message = (
                    f"describing resource type {int(resource.resource_type)} is not supported"
                    " (topics and brokers only)"
                )
            entries = tuple(
                _build(
                    entry_cls,
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=CONFIG_SOURCES.get(e.source, 0),
                    is_sensitive=e.is_sensitive,
                    synonyms=(),
                    config_type=CONFIG_TYPES.get(e.type or "", 0),
                    documentation=None,
                )
                for e in found
            )
            results.append(_resource_result(result_cls, resource, code, message, configs=entries))
        return _build(cls, throttle_time=_NO_TIME, results=tuple(results))

    async def incremental_alter_configs(self, request: Any, version: int, call: Call) -> Any:
        def ops(resource: Any) -> list[dict[str, Any]] | str:
            out = []
            for c in resource.configs:
                op = CONFIG_OPS.get(int(c.config_operation))
                if op is None:
                    return f"unknown config operation {int(c.config_operation)} for {c.name}"
                out.append({"name": c.name, "op": op, "value": c.value})
            return out

        return await self._alter_configs(44, request, version, ops, self._access(call))

    async def alter_configs(self, request: Any, version: int, call: Call) -> Any:
        # AlterConfigs replaces a resource's whole set of overrides: SET what is given,
        # DELETE every override it leaves out (as Kafka's legacy AlterConfigs does).
        image = self._server.manager.image

        def ops(resource: Any) -> list[dict[str, Any]]:
            given = {c.name: c.value for c in resource.configs}
            out = [
                {"name": name, "op": "SET" if value is not None else "DELETE", "value": value}
                for name, value in given.items()
            ]
            kind = RESOURCE_TYPES.get(int(resource.resource_type))
            name = resource.resource_name
            current: Mapping[str, str] = {}
            if kind == "topic":
                current = image.configs.topic_config(name)
            elif kind == "broker" and (name == "" or name.isdigit()):
                # A broker's dynamic configs ("": the cluster-wide defaults); another
                # name is the controller's to refuse.
                current = image.configs.broker_config(None if name == "" else int(name))
            out += [{"name": k, "op": "DELETE"} for k in sorted(current) if k not in given]
            return out

        return await self._alter_configs(33, request, version, ops, self._access(call))

    async def _alter_configs(
        self,
        key: int,
        request: Any,
        version: int,
        ops_of: Callable[[Any], list[dict[str, Any]] | str],
        access: Access,
    ) -> Any:
        """(Incremental)AlterConfigs: the resources as the controller's
        ``POST /v1/configs`` operations (``ops_of``: one resource's, or why it is
        refused), forwarded; one answer per resource."""
        cls = load_response_schema(key, version)
        result_cls = _nested(cls, "AlterConfigsResourceResponse")
        refused: dict[int, tuple[ErrorCode, str | None]] = {}
        resources = []
        for i, resource in enumerate(request.resources):
            kind = RESOURCE_TYPES.get(int(resource.resource_type))
            ops = ops_of(resource)
            denied = _config_access(access, AclOperation.ALTER_CONFIGS, kind, resource)
            if kind is None:
                refused[i] = (
                    ErrorCode.invalid_request,
                    f"altering resource type {int(resource.resource_type)} is not supported",
                )
            elif denied is not None:
                refused[i] = (denied, None)
            elif isinstance(ops, str):
                refused[i] = (ErrorCode.invalid_request, ops)
            else:
                resources.append(
                    {"resource_type": kind, "resource_name": resource.resource_name, "ops": ops}
                )
        answer: dict[str, Any] = {}
        failure: KafkaError | None = None
        if resources:
            body = {"resources": resources, "validate_only": bool(request.validate_only)}
            timeout_ms = self._server.config.request_timeout_ms
            answer, failure = await self._forward("/v1/configs", body, timeout_ms)
        answers = {
            (item.get("resource_type"), item.get("resource_name")): item
            for item in answer.get("resources", [])
        }
        results = []
        for i, resource in enumerate(request.resources):
            if i in refused:
                code, message = refused[i]
            else:
                kind = RESOURCE_TYPES[int(resource.resource_type)]
                code, message = _controller_result(
                    answers.get((kind, resource.resource_name)), failure
                )
            results.append(_resource_result(result_cls, resource, code, message))
        return _build(cls, throttle_time=_NO_TIME, responses=tuple(results))

    # ------------------------------------------------------------------ SCRAM credentials

    async def describe_user_scram_credentials(self, request: Any, version: int, call: Call) -> Any:
        # Answered from this broker's image, as Kafka's brokers answer it from their
        # metadata cache; users null or empty: every user with a credential.
        cls = load_response_schema(50, version)
        result_cls = _nested(cls, "DescribeUserScramCredentialsResult")
        info_cls = _nested(cls, "CredentialInfo")
        if not self._access(call).may_cluster(AclOperation.DESCRIBE):
            return _cluster_refused(cls, results=())
        users = None if request.users is None else [u.name for u in request.users]
        described = describe_user_scram_credentials(self._server.manager.image, users)
        results = tuple(
            _build(
                result_cls,
                user=r.user,
                error_code=_code(r.error),
                error_message=_message(r.error),
                credential_infos=tuple(
                    _build(
                        info_cls,
                        mechanism=SCRAM_MECHANISM_CODES[c.mechanism],
                        iterations=c.iterations,
                    )
                    for c in r.credentials
                ),
            )
            for r in described
        )
        return _build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            error_message=None,
            results=results,
        )

    async def alter_user_scram_credentials(self, request: Any, version: int, call: Call) -> Any:
        # Forwarded to the active controller's POST /v1/scram-credentials, which decides
        # every entry (an unknown mechanism code travels as a name it refuses with
        # UNSUPPORTED_SASL_MECHANISM).
        cls = load_response_schema(51, version)
        result_cls = _nested(cls, "AlterUserScramCredentialsResult")
        body = {
            "deletions": [
                {"name": d.name, "mechanism": _scram_mechanism(int(d.mechanism))}
                for d in request.deletions
            ],
            "upsertions": [
                {
                    "name": u.name,
                    "mechanism": _scram_mechanism(int(u.mechanism)),
                    "iterations": int(u.iterations),
                    "salt": base64.b64encode(u.salt).decode("ascii"),
                    "salted_password": base64.b64encode(u.salted_password).decode("ascii"),
                }
                for u in request.upsertions
            ],
        }
        timeout_ms = self._server.config.request_timeout_ms
        answer: dict[str, Any] = {}
        failure: KafkaError | None = ClusterAuthorizationFailedError(
            "ALTER on the cluster is needed"
        )
        if self._access(call).may_cluster(AclOperation.ALTER):
            answer, failure = await self._forward("/v1/scram-credentials", body, timeout_ms)
        answers = {item.get("user"): item for item in answer.get("results", [])}
        users = dict.fromkeys(
            [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        )
        results = []
        for user in users:
            code, message = _controller_result(answers.get(user), failure)
            results.append(_build(result_cls, user=user, error_code=code, error_message=message))
        return _build(cls, throttle_time=_NO_TIME, results=tuple(results))

    # ------------------------------------------------------------------ ACLs

    async def describe_acls(self, request: Any, version: int, call: Call) -> Any:
        # Answered from this broker's image, as Kafka's brokers answer it from their
        # authorizer's copy of the metadata; a bad filter is the request's error.
        cls = load_response_schema(29, version)
        resource_cls = _nested(cls, "DescribeAclsResource")
        acl_cls = _nested(cls, "AclDescription")
        wire_filter = _acl_filter_wire(request)
        try:
            if not self._access(call).may_cluster(AclOperation.DESCRIBE):
                raise ClusterAuthorizationFailedError("DESCRIBE on the cluster is needed")
            acl_filter = acl_filter_of(decode_value(wire_filter, AclFilterData))
        except KafkaError as e:
            return _build(
                cls, throttle_time=_NO_TIME, error_code=_code(e), error_message=e.message,
                resources=(),
            )  # fmt: skip
        by_pattern: dict[ResourcePattern, list[Any]] = {}
        for b in describe_acls(self._server.manager.image, acl_filter):
            by_pattern.setdefault(b.pattern, []).append(
                _build(
                    acl_cls,
                    principal=b.entry.principal,
                    host=b.entry.host,
                    operation=int(b.entry.operation),
                    permission_type=int(b.entry.permission_type),
                )
            )
        resources = tuple(
            _build(
                resource_cls,
                resource_type=int(p.resource_type),
                resource_name=p.name,
                pattern_type=int(p.pattern_type),
                acls=tuple(acls),
            )
            for p, acls in by_pattern.items()
        )
        return _build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            error_message=None,
            resources=resources,
        )

    async def create_acls(self, request: Any, version: int, call: Call) -> Any:
        # Forwarded to the active controller's POST /v1/acls, which answers each
        # creation in order (a code it does not know travels as a name it refuses with
        # INVALID_REQUEST).
        cls = load_response_schema(30, version)
        result_cls = _nested(cls, "AclCreationResult")
        body = {
            "creations": [
                _acl_wire(
                    c.resource_type,
                    c.resource_name,
                    c.resource_pattern_type,
                    c.principal,
                    c.host,
                    c.operation,
                    c.permission_type,
                )
                for c in request.creations
            ]
        }
        timeout_ms = self._server.config.request_timeout_ms
        answer: dict[str, Any] = {}
        failure: KafkaError | None = ClusterAuthorizationFailedError(
            "ALTER on the cluster is needed"
        )
        if self._access(call).may_cluster(AclOperation.ALTER):
            answer, failure = await self._forward("/v1/acls", body, timeout_ms)
        answers = answer.get("results", [])
        results = []
        for i in range(len(request.creations)):
            code, message = _controller_result(answers[i] if i < len(answers) else None, failure)
            results.append(_build(result_cls, error_code=code, error_message=message))
        return _build(cls, throttle_time=_NO_TIME, results=tuple(results))

    async def delete_acls(self, request: Any, version: int, call: Call) -> Any:
        # Forwarded to the active controller's POST /v1/acls/delete: per filter, every
        # binding it matched (and removed), or the filter's error.
        cls = load_response_schema(31, version)
        result_cls = _nested(cls, "DeleteAclsFilterResult")
        matching_cls = _nested(cls, "DeleteAclsMatchingAcl")
        body = {"filters": [_acl_filter_wire(f) for f in request.filters]}
        timeout_ms = self._server.config.request_timeout_ms
        answer: dict[str, Any] = {}
        failure: KafkaError | None = ClusterAuthorizationFailedError(
            "ALTER on the cluster is needed"
        )
        if self._access(call).may_cluster(AclOperation.ALTER):
            answer, failure = await self._forward("/v1/acls/delete", body, timeout_ms)
        answers = answer.get("filter_results", [])
        results = []
        for i in range(len(request.filters)):
            item = answers[i] if i < len(answers) else None
            code, message = _controller_result(item, failure)
            matching = tuple(
                _build(
                    matching_cls,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=int(ResourceType[a["resource_type"]]),
                    resource_name=a["resource_name"],
                    pattern_type=int(PatternType[a["pattern_type"]]),
                    principal=a["principal"],
                    host=a["host"],
                    operation=int(AclOperation[a["operation"]]),
                    permission_type=int(AclPermissionType[a["permission_type"]]),
                )
                for a in (item or {}).get("matching_acls", [])
            )
            results.append(
                _build(result_cls, error_code=code, error_message=message, matching_acls=matching)
            )
        return _build(cls, throttle_time=_NO_TIME, filter_results=tuple(results))

    # ------------------------------------------------------------------ DeleteRecords

    async def delete_records(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(21, version)
        partition_cls = _nested(cls, "DeleteRecordsPartitionResult")
        topic_cls = _nested(cls, "DeleteRecordsTopicResult")
        entries = [
            (t.name, int(p.partition_index), int(p.offset))
            for t in request.topics
            for p in t.partitions
        ]
        deletable = self._access(call).topics(AclOperation.DELETE, (e[0] for e in entries))
        allowed = [e for e in entries if e[0] in deletable]
        results = (
            await delete_records(self._server.manager, allowed, timeout_ms=_ms(request.timeout))
            if allowed or len(allowed) == len(entries)
            else []
        )
        items = _partition_results(
            partition_cls, results, lambda r: {"low_watermark": r.low_watermark}
        )
        refused = _refused_partitions(
            partition_cls,
            [(t, i) for t, i, _ in entries if t not in deletable],
            ErrorCode.topic_authorization_failed,
            low_watermark=-1,
        )
        return _topics_response(cls, topic_cls, [*items, *refused])

    # ------------------------------------------------------------------ DescribeProducers

    async def describe_producers(self, request: Any, version: int, call: Call) -> Any:
        # The leader's producer state, as the replica manager keeps it for de-duplication.
        cls = load_response_schema(61, version)
        partition_cls = _nested(cls, "PartitionResponse")
        topic_cls = _nested(cls, "TopicResponse")
        state_cls = _nested(cls, "ProducerState")
        entries = [(t.name, int(i)) for t in request.topics for i in t.partition_indexes]

        def fields(r: Any) -> dict[str, Any]:
            return {
                "error_message": _message(r.error),
                "active_producers": tuple(
                    _build(state_cls, **producer_state_fields(e)) for e in r.producers
                ),
            }

        readable = self._access(call).topics(AclOperation.READ, (t for t, _ in entries))
        results = self._server.manager.describe_producers([e for e in entries if e[0] in readable])
        items = _partition_results(partition_cls, results, fields)
        refused = _refused_partitions(
            partition_cls,
            [e for e in entries if e[0] not in readable],
            ErrorCode.topic_authorization_failed,
            error_message=None,
            active_producers=(),
        )
        return _topics_response(cls, topic_cls, [*items, *refused])

    # ------------------------------------------------------------------ DescribeLogDirs

    async def describe_log_dirs(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(35, version)
        if not self._access(call).may_cluster(AclOperation.DESCRIBE):
            return _cluster_refused(cls, results=())
        result_cls = _nested(cls, "DescribeLogDirsResult")
        topic_cls = _nested(cls, "DescribeLogDirsTopic")
        partition_cls = _nested(cls, "DescribeLogDirsPartition")
        wanted: set[tuple[str, int]] | None = None
        if request.topics is not None:
            wanted = {(t.topic, int(i)) for t in request.topics for i in t.partitions}
        results = [
            _build(
                result_cls,
                error_code=ErrorCode.none if d.error is None else d.error.error_code,
                log_dir=d.log_dir,
                topics=tuple(
                    _build(topic_cls, name=t, partitions=tuple(ps))
                    for t, ps in _by_topic(
                        [
                            (
                                p.topic,
                                _build(
                                    partition_cls,
                                    partition_index=p.partition,
                                    partition_size=p.size,
                                    offset_lag=p.offset_lag,
                                    is_future_key=p.is_future,
                                ),
                            )
                            for p in d.partitions
                        ]
                    )
                ),
                total_bytes=d.total_bytes,
                usable_bytes=d.usable_bytes,
            )
            for d in describe_log_dirs(self._server.manager.logs, wanted)
        ]
        return _build(
            cls, throttle_time=_NO_TIME, error_code=ErrorCode.none, results=tuple(results)
        )

    # ------------------------------------------------------------------ DescribeCluster

    async def describe_cluster(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(60, version)
        broker_cls = _nested(cls, "DescribeClusterBroker")
        access = self._access(call)
        if not access.may_cluster(AclOperation.DESCRIBE):
            return _cluster_refused(
                cls,
                endpoint_type=getattr(request, "endpoint_type", 1),
                cluster_id=self._cluster_id(),
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=_NO_OPERATIONS,
            )
        if getattr(request, "endpoint_type", 1) != 1:
            # Endpoint type 2 asks for controllers (KIP-919): clients do not reach
            # raftka's controllers over Kafka's protocol.
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message="only brokers (endpoint type 1) are described",
                endpoint_type=request.endpoint_type,
                cluster_id=self._cluster_id(),
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=_NO_OPERATIONS,
            )
        brokers = _kafka_brokers(self._server.manager.image, broker_cls, id_field="broker_id")
        return _build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=1,
            cluster_id=self._cluster_id(),
            # As Metadata: this broker forwards admin requests to the active controller.
            controller_id=self._server.config.node_id,
            brokers=brokers,
            cluster_authorized_operations=(
                access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if request.include_cluster_authorized_operations
                else _NO_OPERATIONS
            ),
        )

    # ------------------------------------------------------------------ groups

    def _group_refused(
        self, call: Call, operation: AclOperation, group_id: str
    ) -> ErrorCode | None:
        """GROUP_AUTHORIZATION_FAILED unless ``call``'s principal may do ``operation``
        on the group."""
        if self._access(call).may_group(operation, group_id):
            return None
        return ErrorCode.group_authorization_failed

    def _context(self, call: Call) -> RequestContext:
        return RequestContext(client_host=f"/{call.client_host}")

    async def _group_call(
        self,
        method: str,
        fields: dict[str, Any],
        message_type: type[Message],
        call: Call,
        *,
        service: object = None,
    ) -> Any:
        """The group coordinator service's (or ``service``'s) answer to ``fields`` as a
        ``message_type``, checked as the HTTP API checks it (decode_value: group id,
        sizes); KafkaError when the request does not check out or the service refuses
        it."""
        message = decode_value(fields, message_type)
        target = self._server.coordinator if service is None else service
        return await getattr(target, method)(message, self._context(call))

    async def _group_answer(
        self,
        cls: type[Any],
        call: Call,
        method: str,
        fields: dict[str, Any],
        message_type: type[Message],
        *,
        answer: Callable[[Any], dict[str, Any]],
        refused: ErrorCode | None = None,
        **failed: Any,
    ) -> Any:
        """A group API whose answer has one error code: ``cls`` built from ``answer``'s
        fields of the service's answer, or, when the call raised, from its error and the
        empty values ``failed``; ``refused`` (an authorization failure): that error and
        ``failed``, without calling the service."""
        if refused is not None:
            return _build(cls, throttle_time=_NO_TIME, error_code=refused, **failed)
        try:
            r = await self._group_call(method, fields, message_type, call)
        except KafkaError as e:
            return _build(cls, throttle_time=_NO_TIME, error_code=_code(e), **failed)
        return _build(cls, throttle_time=_NO_TIME, **{"error_code": _code(r.error), **answer(r)})

    async def _group_results(
        self, call: Call, method: str, fields: dict[str, Any], message_type: type[Message]
    ) -> tuple[Any, ErrorCode]:
        """A group API whose answer has one error per item: the service's answer and
        the error of an item it did not answer for (the call's error, if it raised)."""
        try:
            r = await self._group_call(method, fields, message_type, call)
        except KafkaError as e:
            return None, _code(e)
        return r, ErrorCode.unknown_server_error

    async def find_coordinator(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(10, version)

        def answer(
            code: ErrorCode, message: str | None, node_id: int = -1, host: str = "", port: int = -1
        ) -> Any:
            return _build(
                cls,
                throttle_time=_NO_TIME,
                error_code=code,
                error_message=message,
                node_id=node_id,
                host=host,
                port=port,
            )

        fields = {"key": request.key, "key_type": int(getattr(request, "key_type", 0))}
        access = self._access(call)
        if fields["key_type"] == 0 and not access.may_group(AclOperation.DESCRIBE, request.key):
            return answer(ErrorCode.group_authorization_failed, None)
        if fields["key_type"] == 1 and not access.may_transactional_id(
            AclOperation.DESCRIBE, request.key
        ):
            return answer(ErrorCode.transactional_id_authorization_failed, None)
        try:
            found = await self._group_call(
                "find_coordinator", fields, group_api.FindCoordinatorRequest, call
            )
        except KafkaError as e:
            return answer(_code(e), e.message)
        if found.error is not None:
            return answer(_code(found.error), _message(found.error))
        address = self._kafka_address(found.node_id)
        if address is None:
            return answer(
                ErrorCode.coordinator_not_available, "the coordinator has no Kafka listener"
            )
        return answer(ErrorCode.none, None, found.node_id, *address)

    @staticmethod
    def _member_fields(request: Any) -> dict[str, Any]:
        """The fields that name a member of a generation (SyncGroup, Heartbeat)."""
        return {
            "group_id": request.group_id,
            "generation_id": int(request.generation_id),
            "member_id": request.member_id,
            "group_instance_id": getattr(request, "group_instance_id", None),
        }

    async def join_group(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(11, version)
        member_cls = _nested(cls, "JoinGroupResponseMember")
        rebalance = getattr(request, "rebalance_timeout", None)
        fields: dict[str, Any] = {
            "group_id": request.group_id,
            "member_id": request.member_id,
            "group_instance_id": getattr(request, "group_instance_id", None),
            "session_timeout_ms": _ms(request.session_timeout),
            "rebalance_timeout_ms": None if rebalance is None else _ms(rebalance),
            "protocol_type": request.protocol_type,
            "protocols": [
                {"name": p.name, "metadata": bytes(p.metadata)} for p in request.protocols
            ],
            "client_id": call.client_id or "",
        }

        def answer(r: Any) -> dict[str, Any]:
            return {
                "generation_id": r.generation_id,
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name
                if r.protocol_name is not None or version >= 7
                else "",
                "leader": r.leader,
                "member_id": r.member_id,
                "members": tuple(_copy(member_cls, m) for m in r.members),
            }

        return await self._group_answer(
            cls,
            call,
            "join_group",
            fields,
            group_api.JoinGroupRequest,
            answer=answer,
            refused=self._group_refused(call, AclOperation.READ, request.group_id),
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if version < 7 else None,
            leader="",
            member_id="",
            members=(),
        )

    async def sync_group(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(14, version)
        fields = {
            **self._member_fields(request),
            "protocol_type": getattr(request, "protocol_type", None),
            "protocol_name": getattr(request, "protocol_name", None),
            "assignments": [
                {"member_id": a.member_id, "assignment": bytes(a.assignment)}
                for a in request.assignments
            ],
        }

        def answer(r: Any) -> dict[str, Any]:
            return {
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name,
                "assignment": r.assignment,
            }

        return await self._group_answer(
            cls,
            call,
            "sync_group",
            fields,
            group_api.SyncGroupRequest,
            answer=answer,
            refused=self._group_refused(call, AclOperation.READ, request.group_id),
            assignment=b"",
        )

    async def heartbeat(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(12, version)
        fields = self._member_fields(request)
        return await self._group_answer(
            cls,
            call,
            "heartbeat",
            fields,
            group_api.HeartbeatRequest,
            answer=lambda r: {},
            refused=self._group_refused(call, AclOperation.READ, request.group_id),
        )

    async def leave_group(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(13, version)
        if version < 3:
            members = [{"member_id": request.member_id}]
        else:
            members = [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                for m in request.members
            ]
        fields = {"group_id": request.group_id, "members": members}

        def answer(r: Any) -> dict[str, Any]:
            if version < 3:
                # One member: its error is the request's.
                top = r.error if r.error is not None or not r.members else r.members[0].error
                return {"error_code": _code(top), "members": ()}
            member_cls = _nested(cls, "MemberResponse")
            return {
                "members": tuple(_copy(member_cls, m, error_code=_code(m.error)) for m in r.members)
            }

        return await self._group_answer(
            cls,
            call,
            "leave_group",
            fields,
            group_api.LeaveGroupRequest,
            answer=answer,
            refused=self._group_refused(call, AclOperation.READ, request.group_id),
            members=(),
        )

    async def offset_commit(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(8, version)
        partition_cls = _nested(cls, "OffsetCommitResponsePartition")
        topic_cls = _nested(cls, "OffsetCommitResponseTopic")
        retention = getattr(request, "retention_time", None)
        retention_ms = None if retention is None else _ms(retention)
        readable = self._access(call).topics(AclOperation.READ, (t.name for t in request.topics))
        fields = {
            "group_id": request.group_id,
            "generation_id": int(getattr(request, "generation_id_or_member_epoch", -1)),
            "member_id": request.member_id,
            "group_instance_id": getattr(request, "group_instance_id", None),
            "retention_time_ms": None if retention_ms is None or retention_ms < 0 else retention_ms,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition": int(p.partition_index),
                            "offset": int(p.committed_offset),
                            "leader_epoch": _epoch(getattr(p, "committed_leader_epoch", -1)),
                            "metadata": p.committed_metadata or "",
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
                if t.name in readable
            ],
        }
        r: Any = None
        refused = self._group_refused(call, AclOperation.READ, request.group_id)
        if refused is not None:
            failed = refused
        elif request.topics and not readable:
            failed = ErrorCode.topic_authorization_failed
        else:
            r, failed = await self._group_results(
                call, "offset_commit", fields, group_api.OffsetCommitRequest
            )
        answers = (
            {}
            if r is None
            else {(t.name, p.partition): _code(p.error) for t in r.topics for p in t.partitions}
        )
        if r is not None:
            answers.update(_topic_errors(request.topics, readable))
        return _commit_answer(
            cls, partition_cls, topic_cls, request.topics, answers=answers, failed=failed
        )

    async def offset_fetch(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(9, version)
        partition_cls = _nested(cls, "OffsetFetchResponsePartition")
        topic_cls = _nested(cls, "OffsetFetchResponseTopic")
        topics = None
        if request.topics is not None:
            topics = [
                {"name": t.name, "partitions": [{"partition": int(i)} for i in t.partition_indexes]}
                for t in request.topics
            ]
        # v7+ (KIP-447): require_stable reports partitions with pending transactional
        # offsets as UNSTABLE_OFFSET_COMMIT; older versions do not carry it.
        stable = bool(getattr(request, "require_stable", False))
        fields = {"group_id": request.group_id, "topics": topics, "require_stable": stable}

        def partition(topic: str, p: Any) -> Any:
            return _build(
                partition_cls,
                partition_index=p.partition,
                committed_offset=p.offset,
                committed_leader_epoch=-1 if p.leader_epoch is None else p.leader_epoch,
                metadata=p.metadata,
                error_code=_code(p.error),
            )

        access = self._access(call)

        def refused(topic: str, p: Any) -> Any:
            return _build(
                partition_cls,
                partition_index=p.partition,
                committed_offset=-1,
                committed_leader_epoch=-1,
                metadata="",
                error_code=ErrorCode.topic_authorization_failed,
            )

        def answer(r: Any) -> dict[str, Any]:
            # Topics it may not DESCRIBE: left out of "every topic"; named, refused.
            allowed = access.describable(ResourceType.TOPIC, r.topics, lambda t: str(t.name))
            shown = _topic_tree(topic_cls, allowed, partition)
            if request.topics is not None:
                hidden = [t for t in r.topics if t not in allowed]
                shown += _topic_tree(topic_cls, hidden, refused)
            return {"topics": shown}

        return await self._group_answer(
            cls,
            call,
            "offset_fetch",
            fields,
            group_api.OffsetFetchRequest,
            answer=answer,
            # DESCRIBE on the group, Kafka's since KIP-163 (READ implies it).
            refused=self._group_refused(call, AclOperation.DESCRIBE, request.group_id),
            topics=(),
        )

    async def list_groups(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(16, version)
        group_cls = _nested(cls, "ListedGroup")
        states = getattr(request, "states_filter", ())
        fields = {"states_filter": list(states) if states else None}
        return await self._group_answer(
            cls,
            call,
            "list_groups",
            fields,
            group_api.ListGroupsRequest,
            answer=lambda r: {
                "groups": tuple(
                    _copy(group_cls, g, group_state=g.state) for g in self._listed_groups(call, r)
                )
            },
            groups=(),
        )

    def _listed_groups(self, call: Call, r: Any) -> list[Any]:
        """ListGroups' groups ``call``'s principal may see: all with DESCRIBE on the
        cluster, else those it may DESCRIBE."""
        access = self._access(call)
        if access.may_cluster(AclOperation.DESCRIBE):
            return list(r.groups)
        return access.describable(ResourceType.GROUP, r.groups, lambda g: str(g.group_id))

    async def describe_groups(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(15, version)
        group_cls = _nested(cls, "DescribedGroup")
        member_cls = _nested(cls, "DescribedGroupMember")
        access = self._access(call)
        allowed = [g for g in request.groups if access.may_group(AclOperation.DESCRIBE, g)]
        fields = {"groups": allowed}
        described: Sequence[Any] = ()
        try:
            if allowed or len(allowed) == len(request.groups):
                r = await self._group_call(
                    "describe_groups", fields, group_api.DescribeGroupsRequest, call
                )
                described = r.groups
        except KafkaError as e:
            described = tuple(
                group_api.DescribedGroup(
                    group_id=g, error=ErrorObject(error=e.name, error_code=e.code)
                )
                for g in allowed
            )
        denied = GroupAuthorizationFailedError("DESCRIBE on the group is needed")
        # Kafka's order: the refused groups first, then the coordinator's answers.
        described = [
            *(
                group_api.DescribedGroup(
                    group_id=g, error=ErrorObject(error=denied.name, error_code=denied.code)
                )
                for g in request.groups
                if g not in allowed
            ),
            *described,
        ]
        return _build(
            cls,
            throttle_time=_NO_TIME,
            groups=tuple(
                _copy(
                    group_cls,
                    g,
                    error_code=_code(g.error),
                    group_state=g.state,
                    protocol_data=g.protocol,
                    members=tuple(_copy(member_cls, m) for m in g.members),
                    authorized_operations=(
                        access.authorized_operations(ResourceType.GROUP, g.group_id)
                        if g.error is None
                        and getattr(request, "include_authorized_operations", False)
                        else _NO_OPERATIONS
                    ),
                )
                for g in described
            ),
        )

    async def delete_groups(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(42, version)
        result_cls = _nested(cls, "DeletableGroupResult")
        names = list(request.groups_names)
        access = self._access(call)
        allowed = [g for g in names if access.may_group(AclOperation.DELETE, g)]
        r, failed = None, ErrorCode.group_authorization_failed
        if allowed or len(allowed) == len(names):
            r, failed = await self._group_results(
                call, "delete_groups", {"groups": allowed}, group_api.DeleteGroupsRequest
            )
        answers = {} if r is None else {g.group_id: _code(g.error) for g in r.results}
        answers.update({g: ErrorCode.group_authorization_failed for g in names if g not in allowed})
        return _build(
            cls,
            throttle_time=_NO_TIME,
            results=tuple(
                _build(result_cls, group_id=g, error_code=answers.get(g, failed)) for g in names
            ),
        )

    async def offset_delete(self, request: Any, version: int, call: Call) -> Any:
        cls = load_response_schema(47, version)
        partition_cls = _nested(cls, "OffsetDeleteResponsePartition")
        topic_cls = _nested(cls, "OffsetDeleteResponseTopic")
        readable = self._access(call).topics(AclOperation.READ, (t.name for t in request.topics))
        fields = {
            "group_id": request.group_id,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition": int(p.partition_index)} for p in t.partitions],
                }
                for t in request.topics
                if t.name in readable
            ],
        }

        def partition(topic: str, p: Any) -> Any:
            return _build(partition_cls, partition_index=p.partition, error_code=_code(p.error))

        def refused(topic: str, p: Any) -> Any:
            return _build(
                partition_cls,
                partition_index=p.partition_index,
                error_code=ErrorCode.topic_authorization_failed,
            )

        hidden = [t for t in request.topics if t.name not in readable]
        return await self._group_answer(
            cls,
            call,
            "offset_delete",
            fields,
            group_api.OffsetDeleteRequest,
            answer=lambda r: {
                "error_code": _code(r.error),
                "topics": _topic_tree(topic_cls, r.topics, partition)
                + _topic_tree(topic_cls, hidden, refused),
            },
            refused=self._group_refused(call, AclOperation.DELETE, request.group_id),
            topics=(),
        )


#: Kafka's ScramMechanism type codes (0 is UNKNOWN).
SCRAM_MECHANISM_CODES: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_SCRAM_MECHANISM_NAMES: Final = {code: name for name, code in SCRAM_MECHANISM_CODES.items()}


def _scram_mechanism(code: int) -> str:
    return _SCRAM_MECHANISM_NAMES.get(code, f"UNKNOWN({code})")


def _acl_name(enum_type: type[enum.IntEnum], code: int) -> str:
    """An ACL enum's name for a Kafka code; a code it lacks becomes a name the
    controller refuses with INVALID_REQUEST."""
    try:
        return enum_type(int(code)).name
    except ValueError:
        return f"UNKNOWN({int(code)})"


def _acl_wire(  # noqa: PLR0917  (the seven fields of Kafka's ACL schemas)
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission_type: int,
) -> dict[str, Any]:
    """A Kafka ACL binding or filter (codes) as the controller API's fields (names)."""
    return {
        "resource_type": _acl_name(ResourceType, resource_type),
        "resource_name": resource_name,
        "pattern_type": _acl_name(PatternType, pattern_type),
        "principal": principal,
        "host": host,
        "operation": _acl_name(AclOperation, operation),
        "permission_type": _acl_name(AclPermissionType, permission_type),
    }


def _acl_filter_wire(f: Any) -> dict[str, Any]:
    """DescribeAcls' request or one DeleteAcls filter (the same fields) as a filter."""
    return _acl_wire(
        f.resource_type_filter,
        f.resource_name_filter,
        f.pattern_type_filter,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


def _config_access(
    access: Access, operation: AclOperation, kind: str | None, resource: Any
) -> ErrorCode | None:
    """The authorization error of a config resource (a topic's: on the topic; a
    broker's: on the cluster), or None when allowed or of a type not served."""
    if kind == "topic" and not access.may_topic(operation, resource.resource_name):
        return ErrorCode.topic_authorization_failed
    if kind == "broker" and not access.may_cluster(operation):
        return ErrorCode.cluster_authorization_failed
    return None


def _controller_result(
    item: dict[str, Any] | None, failure: KafkaError | None
) -> tuple[ErrorCode, str | None]:
    """One topic's outcome in the controller's answer (its error object, if any), or
    the request's failure when there is no answer for it."""
    if item is not None and item.get("error"):
        refused = item["error"]
        code, message = refused.get("error_code", -1), refused.get("message")
    elif failure is not None or item is None:
        code = -1 if failure is None else failure.code
        message = "the controller did not answer for it" if failure is None else failure.message
    else:
        return ErrorCode.none, None
    try:
        return ErrorCode(code), message
    except ValueError:
        return ErrorCode.unknown_server_error, message


def _epoch(value: int) -> int | None:
    return None if value < 0 else int(value)


#: api key -> the first version whose clients know PRODUCER_FENCED (KIP-588); older
#: ones get INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis answers them. Produce never
#: answers it: Kafka's AddPartitionsToTxnManager turns the coordinator's
#: PRODUCER_FENCED from KIP-890 verification into INVALID_PRODUCER_EPOCH ("the same
#: meaning to the client"), so every Produce version is "older".
_FENCED_SINCE: Final[dict[int, int]] = {0: sys.maxsize, 22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _fenced(code: ErrorCode, key: int, version: int) -> ErrorCode:
    if code is ErrorCode.producer_fenced and version < _FENCED_SINCE[key]:
        return ErrorCode.invalid_producer_epoch
    return code


def _txn_errors(topics: Iterable[Any], key: int, version: int) -> dict[tuple[str, int], ErrorCode]:
    """A transaction answer's per-partition errors (TxnTopicResult) by partition."""
    return {
        (t.name, p.partition_index): _fenced(_code(p.error), key, version)
        for t in topics
        for p in t.partitions
    }


def _topic_errors(
    topics: Iterable[Any], allowed: set[str], *, index_field: str = "partition_index"
) -> dict[tuple[str, int], ErrorCode]:
    """TOPIC_AUTHORIZATION_FAILED for every requested partition (``topics``' items, each
    with a ``name`` and ``partitions``) of a topic not in ``allowed``."""
    return {
        (t.name, int(getattr(p, index_field))): ErrorCode.topic_authorization_failed
        for t in topics
        if t.name not in allowed
        for p in t.partitions
    }


def _describe_state(
    state_cls: type[Any], topic_cls: type[Any], tid: str, code: ErrorCode, s: Any = None
) -> Any:
    """DescribeTransactions' TransactionState of ``tid``: ``s`` (the service's
    DescribedTransactionState), or only ``code`` for an id it could not describe."""
    if s is None:
        s = txn_api.DescribedTransactionState(transactional_id=tid)
    return _build(
        state_cls,
        error_code=code,
        transactional_id=tid,
        transaction_state=s.transaction_state,
        transaction_timeout=datetime.timedelta(milliseconds=s.transaction_timeout_ms),
        # -1 (no transaction running) is the epoch's millisecond before.
        transaction_start_time=datetime.datetime.fromtimestamp(
            s.transaction_start_time_ms / 1000, datetime.UTC
        ),
        producer_id=s.producer_id,
        producer_epoch=s.producer_epoch,
        topics=tuple(_build(topic_cls, topic=t.name, partitions=t.partitions) for t in s.topics),
    )


def _commit_answer(
    cls: type[Any],
    partition_cls: type[Any],
    topic_cls: type[Any],
    topics: Iterable[Any],
    *,
    answers: Mapping[tuple[str, int], ErrorCode],
    failed: ErrorCode,
) -> Any:
    """An (Txn)OffsetCommit answer: each requested partition with its error from
    ``answers``, or ``failed`` for one the service did not answer for."""

    def partition(topic: str, p: Any) -> Any:
        return _build(
            partition_cls,
            partition_index=p.partition_index,
            error_code=answers.get((topic, int(p.partition_index)), failed),
        )

    return _build(cls, throttle_time=_NO_TIME, topics=_topic_tree(topic_cls, topics, partition))
