"""What the QuorumController's commands take and return, and the batch they build in.

Theory of operation
-------------------
A controller command (``raftka.metadata.controller``, ``raftka.metadata.topic_control``)
takes an image and one of the request types below and returns a
:class:`ControllerResult`: the metadata records to append, and the response to send
once they commit. These are the controller's own types, not wire messages: the HTTP
edge (``raftka.metadata.routes``) converts between them and the typed messages of
``raftka.common.messages.controller``. Per-item errors are :class:`KafkaError`
instances here and become ``ErrorData`` on the wire.

Inside a command, records are gathered in a :class:`CommandBatch` that replays each
one into a delta as it is added, so a later step sees an earlier one; a record that
does not replay is a bug in the command and crashes it rather than reaching the log.
``RECORDS_PER_COMMAND_MAX`` bounds one command's records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, TypeAlias, TypeVar

from raftka.common.errors import KafkaError
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage, TopicIdPartition
from raftka.metadata.metadata_records import Endpoint, MetadataRecord

__all__ = [
    "RECORDS_PER_COMMAND_MAX",
    "AllocateProducerIdsResponse",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AlterConfigsResource",
    "AlterConfigsResponse",
    "AlterConfigsResult",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "CommandBatch",
    "ConfigEntry",
    "ConfigSource",
    "ControllerDeadlines",
    "ControllerResult",
    "CreatablePartitions",
    "CreatableTopic",
    "CreatePartitionsResponse",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "CreateTopicsResponse",
    "DeleteTopicResult",
    "DeleteTopicsResponse",
    "DescribeConfigsResult",
    "ElectLeadersResponse",
    "ExpireSessionsResponse",
    "PartitionOutcome",
    "ReassignmentsResponse",
    "RebalanceResponse",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "is_active_broker",
    "usable_brokers",
]

R = TypeVar("R")

# Records one user command may produce. Kafka's MAX_RECORDS_PER_USER_OP is 10,000, and
# Kafka splits larger commands into non-atomic batches (KIP-868); raftka commits a
# command as one atomic payload instead, so its bound sits just above one
# 10,000-partition topic (10,001 records); the payload cap of the quorum engine
# (4 MiB, ~13,000 partitions of RF 3) is the other limit.
RECORDS_PER_COMMAND_MAX: Final = 12_000


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """What a command returns: records to append, and the response to send once they
    are committed."""

    records: tuple[MetadataRecord, ...]
    response: R


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    broker_id: int
    incarnation_id: str
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    clean_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shutdown: bool


@dataclass(frozen=True, slots=True)
class ExpireSessionsResponse:
    """The brokers fenced because their sessions expired, by id."""

    fenced_brokers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """One topic of a CreateTopics request. ``num_partitions`` / ``replication_factor``
    of -1 mean the controller's defaults; ``assignments`` (partition -> replicas) is
    the alternative to both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: KafkaError | None
    topic_id: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreateTopicResult, ...]

    def result(self, name: str) -> CreateTopicResult:
        return next(t for t in self.topics if t.name == name)


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """One topic of a DeleteTopics request, named as the request named it."""

    name: str | None
    topic_id: str | None
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: tuple[DeleteTopicResult, ...]


@dataclass(frozen=True, slots=True)
class CreatablePartitions:
    """Grow topic ``name`` to ``count`` partitions; ``assignments`` optionally gives the
    replicas of each new partition, in order."""

    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    topics: tuple[CreatePartitionsResult, ...]


AlterConfigOpType: TypeAlias = Literal["SET", "DELETE", "APPEND", "SUBTRACT"]


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs operation: SET a value, DELETE the override, or
    APPEND to / SUBTRACT from a LIST config."""

    name: str
    op: AlterConfigOpType
    value: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: Literal["topic", "broker"]
    resource_name: str
    ops: tuple[AlterConfigOp, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: str
    resource_name: str
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    resources: tuple[AlterConfigsResult, ...]


ConfigSource: TypeAlias = Literal[
    "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"
]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of DescribeConfigs: the effective value and where it comes from."""

    name: str
    value: str
    source: ConfigSource
    is_default: bool
    type: str
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    resource_type: str
    resource_name: str
    error: KafkaError | None
    entries: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A partition leader's proposed ISR (Kafka's AlterPartition, one partition)."""

    broker_id: int
    broker_epoch: int
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The partition's state once the change commits."""

    topic_id: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RebalanceResponse:
    """Partitions whose leadership moved back to the preferred replica; ``more`` is
    True when the per-run bound stopped early (run again at once)."""

    elected: tuple[TopicIdPartition, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One partition of a per-partition command (ElectLeaders,
    AlterPartitionReassignments): None when done, else why not."""

    topic: str
    partition: int
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    """Errors: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
    ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION."""

    results: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class ReassignmentsResponse:
    """Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
    NO_REASSIGNMENT_IN_PROGRESS (see metadata/reassignment.py)."""

    results: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    producer_id_start: int
    producer_id_len: int


@dataclass(frozen=True, slots=True)
class ControllerDeadlines:
    """When the shell should next run each timer command (ms, same clock as now_ms);
    None when there is nothing to schedule."""

    session_expiry_ms: int | None
    leader_rebalance_ms: int | None


# ---------------------------------------------------------------------------------------
# Shared by the command handlers


class CommandBatch:
    """The records of one command, each replayed into a delta as it is added so later
    steps of the same command see it. ``image`` is the state after them."""

    def __init__(self, image: MetadataImage) -> None:
        self._delta = MetadataDelta(image)
        self._image = image
        self._dirty = False
        self.records: list[MetadataRecord] = []

    def add(self, record: MetadataRecord) -> None:
        # A record that does not replay would be rejected by every node: a bug here.
        self._delta.replay(record)
        self.records.append(record)
        self._dirty = True

    @property
    def image(self) -> MetadataImage:
        if self._dirty:
            self._image = self._delta.apply()
            self._dirty = False
        return self._image

    def result(self, response: R) -> ControllerResult[R]:
        return ControllerResult(tuple(self.records), response)


def is_active_broker(image: MetadataImage, broker_id: int) -> bool:
    """May lead and may receive new replicas: registered, unfenced, not shutting down."""
    broker = image.cluster.broker(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


def usable_brokers(image: MetadataImage) -> list[int]:
    return [b.broker_id for b in image.cluster.live_brokers() if not b.in_controlled_shutdown]
