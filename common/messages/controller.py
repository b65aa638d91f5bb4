"""The controller's API (``/v1/...`` on every controller): one message class per body.

Theory of operation
-------------------
Each request and each answer of the controller API is one frozen :class:`Message`
below; the controller's routes (``raftka.metadata.routes``) decode requests with them
and encode answers from them, and the senders build the same classes: the broker's
lifecycle (registration, heartbeat), its producer-id manager, its metadata follower
(metadata-log fetch), the admin client and the ``raftka`` command line. The bounds
live on the fields (``Annotated[int, Meta(ge=..., le=...)]``, list lengths), so a bad
body is refused by :func:`raftka.common.messages.decode` with Kafka's
``INVALID_REQUEST`` naming the field (``$.topics[0].num_partitions``), and nothing is
applied.

Requests are **strict** (:class:`ControllerRequest`: an unknown field is an
``INVALID_REQUEST``), as the controller API has always been: the controllers and
brokers of one cluster run one version, and a misspelt field in an admin call should
fail loudly rather than be ignored. Answers follow the package's rule (unknown fields
ignored), so a client can read a newer controller's answer.

GET requests carry their fields as query parameters; :func:`query_params` writes a
request as such and the controller reads them back with ``decode_value`` (digits are
integers, ``key`` may repeat). The metadata log's payloads travel as raw JSON
(``msgspec.Raw``): the controller passes the stored bytes through, and the follower
hands them to the metadata loader undecoded.

Errors are not messages here: every failed call answers the error contract of
``raftka.server_common.http_errors`` (``{"error", "error_code", "message"}``, plus
``leader_id`` / ``leader_address`` / ``leader_epoch`` with NOT_CONTROLLER); per-item
errors inside an answer are :class:`ErrorData`. Every answer of a controller carries
the quorum epoch it was given in as the header :data:`QUORUM_EPOCH_HEADER`.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeVar

import msgspec
from msgspec import Meta

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.common.errors import InvalidRequestError, KafkaError
from raftka.common.messages import (
    INT32_MAX,
    INT64_MAX,
    Message,
    NonNegInt32,
    PartitionId,
    TopicName,
)

#: Response header of every controller answer: the quorum epoch (a decimal integer) of
#: the node that gave it, so a broker learns which epoch an answer belongs to.
QUORUM_EPOCH_HEADER: Final = "Raftka-Quorum-Epoch"

__all__ = [
    "METADATA_RECORDS_DEFAULT",
    "METADATA_RECORDS_MAX",
    "METADATA_WAIT_MS_MAX",
    "QUORUM_EPOCH_HEADER",
    "REQUEST_ITEMS_MAX",
    "AclBindingData",
    "AclCreationData",
    "AclCreationResultData",
    "AclFilterData",
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterConfigOp",
    "AlterConfigsResource",
    "AlterConfigsResourceResult",
    "AlterPartitionReassignmentsRequest",
    "AlterPartitionReassignmentsResponse",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterUserScramCredentialsRequest",
    "AlterUserScramCredentialsResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "ConfigEntryData",
    "ControllerRequest",
    "CreatablePartitions",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreateAclsRequest",
    "CreateAclsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteAclsFilterResultData",
    "DeleteAclsRequest",
    "DeleteAclsResponse",
    "DeleteTopicResult",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeAclsResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribeQuorumRequest",
    "DescribeQuorumResponse",
    "DescribeUserScramCredentialsRequest",
    "DescribeUserScramCredentialsResponse",
    "DescribedUserScramData",
    "ElectLeadersRequest",
    "ElectLeadersResponse",
    "ElectionPartitions",
    "EndpointData",
    "ErrorData",
    "FetchMetadataRequest",
    "FetchMetadataResponse",
    "HealthResponse",
    "HealthStartingResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "ListPartitionReassignmentsResponse",
    "MetadataBatch",
    "MetadataSnapshot",
    "OngoingReassignment",
    "PartitionErrorResult",
    "QuorumReplica",
    "ReassignablePartition",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "ScramCredentialDeletionData",
    "ScramCredentialInfoData",
    "ScramCredentialUpsertionData",
    "TopicErrorResult",
    "UserScramResultData",
    "acl_binding_data",
    "acl_binding_of",
    "acl_filter_data",
    "acl_filter_of",
    "error_data",
    "query_params",
]

#: Bound on the items of one request (topics, resources, ops, endpoints, replicas).
REQUEST_ITEMS_MAX: Final = 10_000
#: Bounds on one metadata-log fetch: payloads per answer and how long one may park.
METADATA_RECORDS_MAX: Final = 1000
METADATA_RECORDS_DEFAULT: Final = 500
METADATA_WAIT_MS_MAX: Final = 30_000

_ITEMS: Final = Meta(max_length=REQUEST_ITEMS_MAX)

BrokerId = NonNegInt32
#: A broker epoch is the offset of its registration record: any int64 on the wire (the
#: controller answers STALE_BROKER_EPOCH for a wrong one).
BrokerEpoch = Annotated[int, Meta(ge=-(2**63), le=INT64_MAX)]
ReplicaList = Annotated[list[BrokerId], _ITEMS]
Port = Annotated[int, Meta(ge=0, le=65535)]


class ControllerRequest(Message, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the controller's requests: an unknown field is INVALID_REQUEST."""


class ErrorData(Message, frozen=True, kw_only=True):
    """A per-item error inside an answer: Kafka's error name and code, a message."""

    error: str
    error_code: int
    message: str = ""


def error_data(error: KafkaError | None) -> ErrorData | None:
    return (
        None
        if error is None
        else ErrorData(error=error.name, error_code=error.code, message=error.message)
    )


def query_params(request: Message) -> dict[str, str | list[str]]:
    """A GET request's fields as query parameters (None fields and empty lists left
    out; a list repeats its name)."""
    out: dict[str, str | list[str]] = {}
    for name, value in msgspec.structs.asdict(request).items():
        if value is None or value == []:
            continue
        if isinstance(value, list):
            out[name] = [str(v) for v in value]
        else:
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


# ---------------------------------------------------------------------------------------
# Brokers: registration and heartbeat (broker/lifecycle.py)


class EndpointData(ControllerRequest, frozen=True, kw_only=True):
    name: str
    host: str
    port: Port


class RegisterBrokerRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/brokers/register``: Kafka's BrokerRegistration."""

    broker_id: BrokerId
    incarnation_id: str
    endpoints: Annotated[list[EndpointData], _ITEMS]
    rack: str | None = None
    #: False when the broker's previous run ended without a clean shutdown (raftka's
    #: stand-in for Kafka's PreviousBrokerEpoch check, KIP-966); absent means False.
    clean_shutdown: bool = False


class RegisterBrokerResponse(Message, frozen=True, kw_only=True):
    broker_epoch: int


class BrokerHeartbeatRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/brokers/heartbeat``: Kafka's BrokerHeartbeat."""

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    current_metadata_offset: Annotated[int, Meta(ge=-1, le=INT64_MAX)]
    want_fence: bool = False
    want_shutdown: bool = False


class BrokerHeartbeatResponse(Message, frozen=True, kw_only=True):
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shutdown: bool


# ---------------------------------------------------------------------------------------
# Topics and partitions (client/admin.py)


class CreatableTopic(ControllerRequest, frozen=True, kw_only=True):
    """One topic of CreateTopics: counts of -1 take the controller's defaults;
    ``assignments`` (a list indexed by partition, or ``{"0": [1, 2], ...}``) replaces
    them. The name's legal characters are checked per topic by the controller
    (INVALID_TOPIC_EXCEPTION for that topic only)."""

    name: str
    num_partitions: Annotated[int, Meta(ge=-1, le=INT32_MAX)] = -1
    replication_factor: Annotated[int, Meta(ge=-1, le=2**15 - 1)] = -1
    assignments: (
        Annotated[list[ReplicaList], _ITEMS]
        | Annotated[dict[PartitionId, ReplicaList], _ITEMS]
        | None
    ) = None
    configs: Annotated[dict[str, str], _ITEMS] | None = None


class CreateTopicsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/topics``."""

    topics: Annotated[list[CreatableTopic], _ITEMS]
    validate_only: bool = False


class CreatableTopicResult(Message, frozen=True, kw_only=True):
    name: str
    topic_id: str | None
    num_partitions: int
    replication_factor: int
    error: ErrorData | None


class CreateTopicsResponse(Message, frozen=True, kw_only=True):
    topics: list[CreatableTopicResult]


class DeleteTopicsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``DELETE /v1/topics``: by name, by id, or both."""

    names: Annotated[list[str], _ITEMS] | None = None
    topic_ids: Annotated[list[str], _ITEMS] | None = None


class DeleteTopicResult(Message, frozen=True, kw_only=True):
    name: str | None
    topic_id: str | None
    error: ErrorData | None


class DeleteTopicsResponse(Message, frozen=True, kw_only=True):
    topics: list[DeleteTopicResult]


class CreatablePartitions(ControllerRequest, frozen=True, kw_only=True):
    """One topic of CreatePartitions: its new total ``count``, and optionally the
    replicas of each new partition."""

    name: str
    count: Annotated[int, Meta(ge=1, le=INT32_MAX)]
    assignments: Annotated[list[ReplicaList], _ITEMS] | None = None


class CreatePartitionsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/partitions``."""

    topics: Annotated[list[CreatablePartitions], _ITEMS]
    validate_only: bool = False


class TopicErrorResult(Message, frozen=True, kw_only=True):
    name: str
    error: ErrorData | None


class CreatePartitionsResponse(Message, frozen=True, kw_only=True):
    topics: list[TopicErrorResult]


# ---------------------------------------------------------------------------------------
# Leader elections (client/admin.py, kafka-leader-election)


class ElectionPartitions(Message, frozen=True, kw_only=True):
    topic: TopicName
    partitions: Annotated[list[NonNegInt32], _ITEMS]


class ElectLeadersRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/elect-leaders`` (KIP-460): ``topic_partitions`` None means every
    partition."""

    election_type: Literal["preferred", "unclean"]
    topic_partitions: Annotated[list[ElectionPartitions], _ITEMS] | None = None


class PartitionErrorResult(Message, frozen=True, kw_only=True):
    """One partition's outcome in an answer: None when done, else why not."""

    topic: str
    partition: int
    error: ErrorData | None


class ElectLeadersResponse(Message, frozen=True, kw_only=True):
    results: list[PartitionErrorResult]


# ---------------------------------------------------------------------------------------
# Partition reassignments (client/admin.py, kafka-reassign-partitions; KIP-455)


class ReassignablePartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: NonNegInt32
    # The target replicas; None cancels the partition's reassignment in progress.
    replicas: Annotated[list[BrokerId], _ITEMS] | None


class AlterPartitionReassignmentsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/reassignments``."""

    partitions: Annotated[list[ReassignablePartition], _ITEMS]


class AlterPartitionReassignmentsResponse(Message, frozen=True, kw_only=True):
    results: list[PartitionErrorResult]


class OngoingReassignment(Message, frozen=True, kw_only=True):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ListPartitionReassignmentsResponse(Message, frozen=True, kw_only=True):
    """``GET /v1/reassignments``: every partition being reassigned."""

    reassignments: list[OngoingReassignment]


# ---------------------------------------------------------------------------------------
# Configs (client/admin.py)


class AlterConfigOp(ControllerRequest, frozen=True, kw_only=True):
    name: str
    op: Literal["SET", "DELETE", "APPEND", "SUBTRACT"]
    value: str | None = None


class AlterConfigsResource(ControllerRequest, frozen=True, kw_only=True):
    resource_type: Literal["topic", "broker"]
    resource_name: str
    ops: Annotated[list[AlterConfigOp], _ITEMS]


class IncrementalAlterConfigsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/configs``: Kafka's IncrementalAlterConfigs."""

    resources: Annotated[list[AlterConfigsResource], _ITEMS]
    validate_only: bool = False


class AlterConfigsResourceResult(Message, frozen=True, kw_only=True):
    resource_type: str
    resource_name: str
    error: ErrorData | None


class IncrementalAlterConfigsResponse(Message, frozen=True, kw_only=True):
    resources: list[AlterConfigsResourceResult]


class DescribeConfigsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``GET /v1/configs?topic=T&key=K&key=...``: every config of the topic, or only
    the ``key`` ones."""

    topic: Annotated[str, Meta(min_length=1)]
    key: Annotated[list[str], _ITEMS] = msgspec.field(default_factory=list)


class ConfigEntryData(Message, frozen=True, kw_only=True):
    name: str
    value: str | None
    source: str
    is_default: bool
    type: str | None
    read_only: bool = False
    is_sensitive: bool = False


class DescribeConfigsResponse(Message, frozen=True, kw_only=True):
    resource_type: str
    resource_name: str
    entries: list[ConfigEntryData]


# ---------------------------------------------------------------------------------------
# SCRAM credentials (client/admin.py, raftka users)

# Bounds well above any real value, so a body cannot make the controller hash a huge
# input: a salt (Kafka's are 16-64 bytes) and a salted password (one hash, <= 64 bytes).
_SCRAM_BYTES: Final = Meta(max_length=1024)


class ScramCredentialDeletionData(ControllerRequest, frozen=True, kw_only=True):
    name: str
    mechanism: str


class ScramCredentialUpsertionData(ControllerRequest, frozen=True, kw_only=True):
    """Kafka's upsertion: the salted password, never the password (bytes as base64)."""

    name: str
    mechanism: str
    iterations: int
    salt: Annotated[bytes, _SCRAM_BYTES]
    salted_password: Annotated[bytes, _SCRAM_BYTES]


class AlterUserScramCredentialsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/scram-credentials``: Kafka's AlterUserScramCredentials."""

    deletions: Annotated[list[ScramCredentialDeletionData], _ITEMS] = msgspec.field(
        default_factory=list
    )
    upsertions: Annotated[list[ScramCredentialUpsertionData], _ITEMS] = msgspec.field(
        default_factory=list
    )


class UserScramResultData(Message, frozen=True, kw_only=True):
    user: str
    error: ErrorData | None


class AlterUserScramCredentialsResponse(Message, frozen=True, kw_only=True):
    results: list[UserScramResultData]


class DescribeUserScramCredentialsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``GET /v1/scram-credentials?user=U&user=...``: the named users, or every user
    with a credential when none is named."""

    user: Annotated[list[str], _ITEMS] = msgspec.field(default_factory=list)


class ScramCredentialInfoData(Message, frozen=True, kw_only=True):
    mechanism: str
    iterations: int


class DescribedUserScramData(Message, frozen=True, kw_only=True):
    user: str
    error: ErrorData | None
    credentials: list[ScramCredentialInfoData]


class DescribeUserScramCredentialsResponse(Message, frozen=True, kw_only=True):
    results: list[DescribedUserScramData]


# ---------------------------------------------------------------------------------------
# ACLs (client/admin.py, raftka acls)
#
# Resource types, pattern types, operations and permission types travel as Kafka's enum
# names (``TOPIC``, ``PREFIXED``, ``READ``, ``ALLOW``; see raftka.common.acl). The
# controller refuses a name it does not know with INVALID_REQUEST, for that one binding or
# filter, as Kafka refuses a code it does not know.


class AclBindingData(Message, frozen=True, kw_only=True):
    """One ACL binding, as answers carry it."""

    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


class AclCreationData(AclBindingData, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One binding of a CreateAcls request (strict, as every request)."""


class CreateAclsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/acls``: Kafka's CreateAcls."""

    creations: Annotated[list[AclCreationData], _ITEMS]


class AclCreationResultData(Message, frozen=True, kw_only=True):
    error: ErrorData | None


class CreateAclsResponse(Message, frozen=True, kw_only=True):
    """One result per creation, in request order."""

    results: list[AclCreationResultData]


class AclFilterData(ControllerRequest, frozen=True, kw_only=True):
    """An ACL binding filter (Kafka's AclBindingFilter): ``ANY`` and absent names,
    principals and hosts match everything; ``pattern_type=MATCH`` selects whatever
    applies to the named resource. ``GET /v1/acls`` takes these as query parameters."""

    resource_type: str = "ANY"
    resource_name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "ANY"
    permission_type: str = "ANY"


class DescribeAclsResponse(Message, frozen=True, kw_only=True):
    acls: list[AclBindingData]


class DeleteAclsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/acls/delete``: Kafka's DeleteAcls."""

    filters: Annotated[list[AclFilterData], _ITEMS]


class DeleteAclsFilterResultData(Message, frozen=True, kw_only=True):
    """What one filter removed (every committed binding it matched), or its error."""

    error: ErrorData | None
    matching_acls: list[AclBindingData]


class DeleteAclsResponse(Message, frozen=True, kw_only=True):
    """One result per filter, in request order."""

    filter_results: list[DeleteAclsFilterResultData]


E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _acl_enum(enum_type: type[E], name: str) -> E:
    """The member called ``name``; INVALID_REQUEST naming the choices for any other
    name (as a Kafka code the broker does not know reads as UNKNOWN and is refused)."""
    try:
        return enum_type[name]
    except KeyError:
        choices = ", ".join(m.name for m in enum_type)
        raise InvalidRequestError(
            f"unknown {enum_type.__name__} {name!r}; one of {choices}"
        ) from None


def acl_binding_data(binding: AclBinding) -> AclCreationData:
    """``binding`` as a message (a creation; answers carry the same fields)."""
    p, e = binding.pattern, binding.entry
    return AclCreationData(
        resource_type=p.resource_type.name,
        resource_name=p.name,
        pattern_type=p.pattern_type.name,
        principal=e.principal,
        host=e.host,
        operation=e.operation.name,
        permission_type=e.permission_type.name,
    )


def acl_binding_of(data: AclBindingData) -> AclBinding:
    """The binding ``data`` names; INVALID_REQUEST when it is not one a binding may be."""
    return AclBinding(
        ResourcePattern(
            _acl_enum(ResourceType, data.resource_type),
            data.resource_name,
            _acl_enum(PatternType, data.pattern_type),
        ),
        AccessControlEntry(
            data.principal,
            data.host,
            _acl_enum(AclOperation, data.operation),
            _acl_enum(AclPermissionType, data.permission_type),
        ),
    )


def acl_filter_data(acl_filter: AclBindingFilter) -> AclFilterData:
    return AclFilterData(
        resource_type=acl_filter.resource_type.name,
        resource_name=acl_filter.name,
        pattern_type=acl_filter.pattern_type.name,
        principal=acl_filter.principal,
        host=acl_filter.host,
        operation=acl_filter.operation.name,
        permission_type=acl_filter.permission_type.name,
    )


def acl_filter_of(data: AclFilterData) -> AclBindingFilter:
    """The filter ``data`` names; INVALID_REQUEST for an UNKNOWN (or unknown) field."""
    return AclBindingFilter(
        resource_type=_acl_enum(ResourceType, data.resource_type),
        name=data.resource_name,
        pattern_type=_acl_enum(PatternType, data.pattern_type),
        principal=data.principal,
        host=data.host,
        operation=_acl_enum(AclOperation, data.operation),
        permission_type=_acl_enum(AclPermissionType, data.permission_type),
    )


# ---------------------------------------------------------------------------------------
# Partition leaders' ISR changes and producer-id blocks (brokers)


class AlterPartitionRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/alter-partition``: a partition leader's new ISR (Kafka's
    AlterPartition)."""

    broker_id: BrokerId
    broker_epoch: BrokerEpoch
    topic_id: str
    partition: PartitionId
    leader_epoch: NonNegInt32
    partition_epoch: NonNegInt32
    new_isr: ReplicaList


class AlterPartitionResponse(Message, frozen=True, kw_only=True):
    topic_id: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


class AllocateProducerIdsRequest(ControllerRequest, frozen=True, kw_only=True):
    """``POST /v1/producer-ids``: Kafka's AllocateProducerIds (KIP-730)."""

    broker_id: BrokerId
    broker_epoch: BrokerEpoch


class AllocateProducerIdsResponse(Message, frozen=True, kw_only=True):
    producer_id_start: int
    producer_id_len: int


# ---------------------------------------------------------------------------------------
# Reads any controller serves: the quorum, the metadata log, health


class DescribeQuorumRequest(ControllerRequest, frozen=True, kw_only=True):
    """``GET /v1/quorum`` (no parameters)."""


class QuorumReplica(Message, frozen=True, kw_only=True):
    node_id: int
    address: str | None
    log_end_offset: int | None
    lag: int | None
    last_fetch_ms: int | None
    last_caught_up_ms: int | None


class DescribeQuorumResponse(Message, frozen=True, kw_only=True):
    node_id: int
    role: str
    leader_id: int | None
    leader_address: str | None
    epoch: int
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    max_follower_lag: int | None
    voters: list[QuorumReplica]
    observers: list[QuorumReplica]
    metadata_offset: int


class FetchMetadataRequest(ControllerRequest, frozen=True, kw_only=True):
    """``GET /v1/metadata?offset=N&max_wait_ms=M&records_max=R``: committed payloads
    from ``offset``, parking up to ``max_wait_ms`` when there are none."""

    offset: Annotated[int, Meta(ge=0, le=INT64_MAX)] = 0
    max_wait_ms: Annotated[int, Meta(ge=0, le=METADATA_WAIT_MS_MAX)] = 0
    records_max: Annotated[int, Meta(ge=1, le=METADATA_RECORDS_MAX)] = METADATA_RECORDS_DEFAULT


class MetadataBatch(Message, frozen=True, kw_only=True):
    """One committed payload: one command's records, as the JSON array stored."""

    offset: int
    epoch: int
    records: msgspec.Raw


class MetadataSnapshot(Message, frozen=True, kw_only=True):
    """A snapshot covering offsets ``< end_offset``: the records of the whole image."""

    end_offset: int
    epoch: int
    records: msgspec.Raw


class FetchMetadataResponse(Message, frozen=True, kw_only=True):
    snapshot: MetadataSnapshot | None
    batches: list[MetadataBatch]
    next_offset: int
    high_watermark: int


class HealthStartingResponse(Message, frozen=True, kw_only=True):
    """``GET /health`` before the engine started (HTTP 503)."""

    status: Literal["starting"] = "starting"
    node_id: int


class HealthResponse(Message, frozen=True, kw_only=True):
    """``GET /health`` once serving."""

    status: Literal["ok"] = "ok"
    node_id: int
    role: str
    leader_id: int | None
    epoch: int
    active_controller: bool
    high_watermark: int
    metadata_offset: int
