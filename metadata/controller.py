"""The pure core of the QuorumController: the commands the active controller runs.

Theory of operation
-------------------
Every command reads a :class:`MetadataImage` (the active controller's latest image,
including the records of earlier commands that are not committed yet) and returns a
:class:`ControllerResult`: the records to append to the metadata log and the response
to send once they commit. A command never changes the image; state changes only when
the records are replayed (by :class:`MetadataDelta`, identically on every node). A
command that fails raises a Kafka error and returns no records; commands over many
items (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs) answer
per item instead, as Kafka does, so one bad topic does not fail the others.

Inside a command, records are gathered in a :class:`_Batch` that replays each one into a
delta as it is added, so a later step sees an earlier one (the second topic of a request
sees the first; fencing the second stale broker sees the first fenced). A record that
does not replay is a bug here, and crashes the command rather than reaching the log.

:class:`QuorumController` holds the only state that is not in the log, as Kafka's
BrokerHeartbeatManager does: when each broker was last heard from, the metadata offset
it reported, and the offset at which its controlled shutdown was written. It lives on
the active controller only; a new active controller starts with a fresh session for
every registered broker. Time comes in as ``now_ms``, the offset the next record will
get as ``next_offset``, randomness as a seeded ``random.Random``: no clock, no I/O.

Broker states, as Kafka's heartbeat state machine (FENCED, UNFENCED,
CONTROLLED_SHUTDOWN, SHUTDOWN_NOW):

* FENCED -> UNFENCED once a heartbeat reports a metadata offset at or past the broker's
  registration (its broker epoch), unless it asks to stay fenced or to shut down.
* UNFENCED -> CONTROLLED_SHUTDOWN on a heartbeat with ``want_shutdown`` while it leads
  something: its leaderships move to other in-sync replicas and it leaves every ISR it
  can leave (a partition with no other acceptable leader keeps it as leader).
* CONTROLLED_SHUTDOWN -> SHUTDOWN_NOW once every active broker has caught up with the
  controlled-shutdown records; an UNFENCED broker that leads nothing goes there at once.
  SHUTDOWN_NOW fences the broker and answers ``should_shutdown``.
* any -> fenced when its session expires (``expire_sessions``) or it asks to be fenced.

Fencing a broker removes it from every ISR except where it is the last member (the ISR
keeps it and the partition has no leader until it returns, so nothing acknowledged is
lost) and elects new leaders for the partitions it led (see ``election.py``).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, TypeAlias, TypeVar

from raftka.common.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    KafkaError,
    NotControllerError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.election import Election, PartitionChangeBuilder
from raftka.metadata.image import (
    BrokerRegistration,
    ConfigResource,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
    TopicImage,
)
from raftka.metadata.metadata_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    NO_LEADER,
    UNFENCE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    Endpoint,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftka.metadata.placement import assign_replicas
from raftka.metadata.topic_config import TOPIC_CONFIGS, parse_bool, validate_topic_config
from raftka.server_common.controller_config import PRODUCER_ID_BLOCK_SIZE, ControllerConfig

__all__ = [
    "REBALANCE_ELECTIONS_MAX",
    "RECORDS_PER_COMMAND_MAX",
    "TOPIC_NAME_LENGTH_MAX",
    "AllocateProducerIdsResponse",
    "AlterConfigOp",
    "AlterConfigsResource",
    "AlterConfigsResponse",
    "AlterConfigsResult",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "ConfigEntry",
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
    "ExpireSessionsResponse",
    "QuorumController",
    "RebalanceResponse",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "describe_configs",
    "topic_name_problem",
]

R = TypeVar("R")

# Records one user command may produce. Kafka's MAX_RECORDS_PER_USER_OP is 10,000, and
# Kafka splits larger commands into non-atomic batches (KIP-868); raftka commits a
# command as one atomic payload instead, so its bound sits just above one
# 10,000-partition topic (10,001 records); the payload cap of the quorum engine
# (4 MiB, ~13,000 partitions of RF 3) is the other limit.
RECORDS_PER_COMMAND_MAX: Final = 12_000
# Preferred-leader elections per rebalance run (Kafka's maxElectionsPerImbalance).
REBALANCE_ELECTIONS_MAX: Final = 1000
TOPIC_NAME_LENGTH_MAX: Final = 249
_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


# ---------------------------------------------------------------------------------------
# Results, requests and responses


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
# Helpers


class _Batch:
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


def _is_active(image: MetadataImage, broker_id: int) -> bool:
    """May lead and may receive new replicas: registered, unfenced, not shutting down."""
    broker = image.cluster.broker(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


def _usable_brokers(image: MetadataImage) -> list[int]:
    return [b.broker_id for b in image.cluster.live_brokers() if not b.in_controlled_shutdown]


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """Every partition, by topic name then index (a stable order for records)."""
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        for index in sorted(topic.partitions):
            yield topic, index, topic.partitions[index]


def _unclean_enabled(image: MetadataImage, config: ControllerConfig, topic: str) -> bool:
    """The topic's unclean.leader.election.enable, else the cluster-wide broker default
    in the image, else the controller's static default."""
    key = "unclean.leader.election.enable"
    for value in (
        image.configs.topic_config(topic).get(key),
        image.configs.broker_config(None).get(key),
    ):
        if value is not None:
            parsed = parse_bool(value)
            if parsed is not None:
                return parsed
    return config.unclean_leader_election_enable


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's rules), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return (
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} "
            f"characters, topic name: {name}"
        )
    if _LEGAL_TOPIC_NAME.fullmatch(name) is None:
        return (
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def _collides_with(image: MetadataImage, name: str) -> str | None:
    """An existing topic whose name equals ``name`` once '.' and '_' are identified
    (their metric names would collide), other than ``name`` itself."""
    if "." not in name and "_" not in name:
        return None
    key = name.replace(".", "_")
    for existing in image.topics.by_name:
        if existing != name and existing.replace(".", "_") == key:
            return existing
    return None


def _random_uuid4(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _check_broker_epoch(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    """Kafka's checkBrokerEpoch: STALE_BROKER_EPOCH unless registered with that epoch."""
    broker = image.cluster.broker(broker_id)
    if broker is None:
        raise StaleBrokerEpochError(f"No broker registration found for broker {broker_id}")
    if broker.epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"Expected broker epoch {broker.epoch} for broker {broker_id}, got {broker_epoch}"
        )
    return broker


def describe_configs(
    image: MetadataImage, topic: str, keys: Sequence[str] | None = None
) -> DescribeConfigsResult:
    """DescribeConfigs for one topic: every topic config (or only ``keys``) with its
    effective value and source: the topic's override, the cluster-wide broker default
    of its synonym, or Kafka's default."""
    if image.topics.topic_by_name(topic) is None:
        return DescribeConfigsResult(
            "topic", topic, UnknownTopicOrPartitionError(f"Topic {topic} does not exist")
        )
    names = sorted(TOPIC_CONFIGS) if keys is None else list(keys)
    overrides = image.configs.topic_config(topic)
    cluster = image.configs.broker_config(None)
    entries: list[ConfigEntry] = []
    for name in names:
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            return DescribeConfigsResult(
                "topic", topic, InvalidConfigError(f"Unknown topic config name: {name}")
            )
        source: ConfigSource
        if name in overrides:
            value, source = overrides[name], "DYNAMIC_TOPIC_CONFIG"
        elif definition.broker_synonym is not None and definition.broker_synonym in cluster:
            value, source = cluster[definition.broker_synonym], "DYNAMIC_DEFAULT_BROKER_CONFIG"
        else:
            value, source = definition.default, "DEFAULT_CONFIG"
        entries.append(
            ConfigEntry(name, value, source, source == "DEFAULT_CONFIG", definition.type)
        )
    return DescribeConfigsResult("topic", topic, None, tuple(entries))


# ---------------------------------------------------------------------------------------
# The controller


@dataclass(slots=True)
class _Session:
    """Soft state of one broker (Kafka's BrokerHeartbeatState)."""

    last_contact_ms: int
    metadata_offset: int = -1  # -1 until the broker reports one to this controller
    controlled_shutdown_offset: int | None = None


class QuorumController:
    """The active controller's commands; holds only broker sessions (soft state).

    Not thread-safe: the shell runs every command on one event queue, in order, each
    against the image that includes the records of the commands before it.
    """

    def __init__(self, config: ControllerConfig, image: MetadataImage, now_ms: int) -> None:
        self.config: Final = config
        # A new active controller gives every registered broker a fresh session.
        self._sessions: dict[int, _Session] = {
            broker_id: _Session(now_ms) for broker_id in image.cluster.brokers
        }
        self._last_rebalance_ms = now_ms

    # -- sessions ---------------------------------------------------------------------

    def _session(self, broker_id: int, now_ms: int) -> _Session:
        session = self._sessions.get(broker_id)
        if session is None:
            # Registered through a record this controller did not write: fresh session.
            session = self._sessions[broker_id] = _Session(now_ms)
        return session

    def _has_valid_session(self, broker: BrokerRegistration, now_ms: int) -> bool:
        if broker.fenced:
            return False
        session = self._session(broker.broker_id, now_ms)
        return now_ms <= session.last_contact_ms + self.config.broker_session_timeout_ms

    def last_contact_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.last_contact_ms

    # -- broker lifecycle -------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, request: RegisterBrokerRequest, *, now_ms: int, next_offset: int
    ) -> ControllerResult[RegisterBrokerResponse]:
        """BrokerRegistration. The broker epoch is ``next_offset``, the offset of the
        RegisterBrokerRecord (the first record). The broker starts fenced.

        A registration replaces an older one of the same id unless that one still has a
        live session under a different incarnation id (DUPLICATE_BROKER_REGISTRATION: two
        processes claim one id). The same incarnation registering again (a retry, or a
        restart that kept its id) gets a new epoch; if its old registration was
        unfenced, it also leaves the ISRs and leaderships it held, as on fencing.
        """
        assert next_offset > image.offset, (next_offset, image.offset)
        existing = image.cluster.broker(request.broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self._has_valid_session(existing, now_ms)
        ):
            raise DuplicateBrokerRegistrationError(
                f"Another broker is registered with id {request.broker_id} "
                f"(incarnation {existing.incarnation_id}) and its session is still alive"
            )
        try:
            record = RegisterBrokerRecord(
                broker_id=request.broker_id,
                incarnation_id=request.incarnation_id,
                broker_epoch=next_offset,
                endpoints=request.endpoints,
                rack=request.rack,
                fenced=True,
            )
        except InvalidRequestError as e:
            raise InvalidRequestError(f"Invalid broker registration: {e.message}") from None
        batch = _Batch(image)
        batch.add(record)
        if existing is not None and not existing.fenced:
            self._leave_partitions(batch, request.broker_id)
        self._sessions[request.broker_id] = _Session(now_ms)
        return batch.result(RegisterBrokerResponse(next_offset))

    def heartbeat(
        self,
        image: MetadataImage,
        request: BrokerHeartbeatRequest,
        *,
        now_ms: int,
        next_offset: int,
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """BrokerHeartbeat: records the contact, and moves the broker through the state
        machine described in the module doc."""
        assert next_offset > image.offset, (next_offset, image.offset)
        broker_id = request.broker_id
        broker = image.cluster.broker(broker_id)
        if broker is None:
            raise BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
        if broker.epoch != request.broker_epoch:
            raise StaleBrokerEpochError(
                f"Expected broker epoch {broker.epoch} for broker {broker_id}, "
                f"got {request.broker_epoch}"
            )
        session = self._session(broker_id, now_ms)
        session.last_contact_ms = now_ms
        session.metadata_offset = max(session.metadata_offset, request.current_metadata_offset)
        caught_up = request.current_metadata_offset >= broker.epoch
        batch = _Batch(image)
        should_shutdown = False
        if broker.fenced:
            if request.want_shutdown:
                should_shutdown = True
            elif not request.want_fence and caught_up:
                self._unfence(batch, broker)
        elif request.want_fence:
            self._fence(batch, broker)
            should_shutdown = request.want_shutdown
        elif broker.in_controlled_shutdown:
            if session.controlled_shutdown_offset is None:
                # Failover lost the offset; the image holds the records, so its offset
                # is a safe stand-in.
                session.controlled_shutdown_offset = image.offset
            if self._lowest_active_offset(image) >= session.controlled_shutdown_offset:
                self._fence(batch, broker)
                should_shutdown = True
        elif request.want_shutdown:
            if image.topics.partitions_led_by(broker_id):
                batch.add(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id,
                        broker_epoch=broker.epoch,
                        in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN,
                    )
                )
                self._leave_partitions(batch, broker_id, controlled=True)
                # Granted once every active broker has replayed these records. A command's
                # records travel as one payload, so all of them commit at next_offset
                # (counting one offset per record would wait for offsets that may never
                # come while the cluster is idle).
                session.controlled_shutdown_offset = next_offset
            else:
                self._fence(batch, broker)
                should_shutdown = True
        after = batch.image.cluster.broker(broker_id)
        assert after is not None
        return batch.result(
            BrokerHeartbeatResponse(
                is_caught_up=caught_up,
                is_fenced=after.fenced,
                in_controlled_shutdown=after.in_controlled_shutdown,
                should_shutdown=should_shutdown,
            )
        )

    def _lowest_active_offset(self, image: MetadataImage) -> float:
        offsets = [
            self._sessions[b.broker_id].metadata_offset if b.broker_id in self._sessions else -1
            for b in image.cluster.live_brokers()
            if not b.in_controlled_shutdown
        ]
        return min(offsets) if offsets else float("inf")

    def expire_sessions(
        self, image: MetadataImage, now_ms: int
    ) -> ControllerResult[ExpireSessionsResponse]:
        """Fence every unfenced broker not heard from for broker.session.timeout.ms."""
        batch = _Batch(image)
        fenced: list[int] = []
        for broker in image.cluster.live_brokers():
            if not self._has_valid_session(broker, now_ms):
                current = batch.image.cluster.broker(broker.broker_id)
                assert current is not None
                self._fence(batch, current)
                fenced.append(broker.broker_id)
        return batch.result(ExpireSessionsResponse(tuple(fenced)))

    def _fence(self, batch: _Batch, broker: BrokerRegistration) -> None:
        """Kafka's handleBrokerFenced: leave ISRs and leaderships, then the FENCE record."""
        self._leave_partitions(batch, broker.broker_id)
        batch.add(
            BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.epoch, fenced=FENCE
            )
        )

    def _unfence(self, batch: _Batch, broker: BrokerRegistration) -> None:
        """UNFENCE, then elect leaders for leaderless partitions (the broker may be the
        ISR member they were waiting for, or an unclean candidate)."""
        batch.add(
            BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.epoch, fenced=UNFENCE
            )
        )
        image = batch.image
        for topic, index, partition in _partitions(image):
            if partition.leader != NO_LEADER:
                continue
            builder = PartitionChangeBuilder(
                partition,
                topic.topic_id,
                index,
                lambda b: _is_active(image, b),
                unclean_election=_unclean_enabled(image, self.config, topic.name),
            )
            record = builder.build()
            if record is not None:
                batch.add(record)

    def _leave_partitions(self, batch: _Batch, broker_id: int, *, controlled: bool = False) -> None:
        """Remove ``broker_id`` from every ISR it is in (never emptying one) and move its
        leaderships to acceptable ISR members (or, where the topic allows it, to any
        acceptable replica: unclean election).

        ``controlled`` (entering controlled shutdown): the broker still serves, so a
        partition it leads that no other in-sync replica can take over is left as it is
        until the broker is fenced, and no unclean election happens: a planned shutdown
        must not lose acknowledged records."""
        image = batch.image

        def acceptable(b: int) -> bool:
            return b != broker_id and _is_active(image, b)

        for topic, index, partition in _partitions(image):
            if broker_id not in partition.isr:
                continue
            builder = PartitionChangeBuilder(
                partition,
                topic.topic_id,
                index,
                acceptable,
                unclean_election=not controlled
                and _unclean_enabled(image, self.config, topic.name),
            ).set_target_isr([b for b in partition.isr if b != broker_id])
            record = builder.build()
            if record is None:
                continue
            if controlled and partition.leader == broker_id and record.leader == NO_LEADER:
                continue
            batch.add(record)

    # -- topics -----------------------------------------------------------------------

    def create_topics(
        self,
        image: MetadataImage,
        topics: Sequence[CreatableTopic],
        *,
        rng: random.Random,
        validate_only: bool = False,
    ) -> ControllerResult[CreateTopicsResponse]:
        """CreateTopics: per-topic results; ``validate_only`` checks and returns no
        records. Topic ids and placement start come from ``rng``."""
        batch = _Batch(image)
        counts: dict[str, int] = {}
        for topic in topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
        results: list[CreateTopicResult] = []
        for topic in topics:
            if counts[topic.name] > 1:
                error: KafkaError = InvalidRequestError(
                    f"Found multiple entries for topic {topic.name} in the request"
                )
                results.append(CreateTopicResult(topic.name, error))
                continue
            try:
                records = self._topic_records(batch.image, topic, rng, len(batch.records))
            except KafkaError as e:
                results.append(CreateTopicResult(topic.name, e))
                continue
            for record in records:
                batch.add(record)
            first = records[1]
            assert isinstance(first, PartitionRecord)
            results.append(
                CreateTopicResult(
                    topic.name,
                    None,
                    topic_id=first.topic_id,
                    num_partitions=sum(isinstance(r, PartitionRecord) for r in records),
                    replication_factor=len(first.replicas),
                )
            )
        response = CreateTopicsResponse(tuple(results))
        if validate_only:
            return ControllerResult((), response)
        return batch.result(response)

    def _topic_records(
        self, image: MetadataImage, topic: CreatableTopic, rng: random.Random, used: int
    ) -> list[MetadataRecord]:
        """The records that create one topic, or raise the error for that topic."""
        name = topic.name
        problem = topic_name_problem(name)
        if problem is not None:
            raise InvalidTopicError(problem)
        if image.topics.topic_by_name(name) is not None:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        colliding = _collides_with(image, name)
        if colliding is not None:
            raise InvalidTopicError(
                f"Topic '{name}' collides with existing topic '{colliding}': topic names "
                "differing only in '.' and '_' collide"
            )
        if topic.assignments is not None and (
            topic.num_partitions != -1 or topic.replication_factor != -1
        ):
            raise InvalidRequestError(
                "Both partition assignments and partitions/replication factor were set; "
                "only one may be"
            )
        for key in sorted(topic.configs):
            validate_topic_config(key, topic.configs[key])
        usable = _usable_brokers(image)
        if topic.assignments is not None:
            assignment = self._check_assignments(image, topic.assignments, first_partition=0)
        else:
            num_partitions = (
                self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            )
            replication_factor = (
                self.config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            if num_partitions <= 0:
                raise InvalidPartitionsError(
                    f"Number of partitions must be at least 1 (or -1 for the default), "
                    f"got {num_partitions}"
                )
            if replication_factor <= 0:
                raise InvalidReplicationFactorError(
                    f"Replication factor must be at least 1 (or -1 for the default), "
                    f"got {replication_factor}"
                )
            if replication_factor > len(usable):
                raise InvalidReplicationFactorError(
                    f"Unable to replicate the partition {replication_factor} time(s): only "
                    f"{len(usable)} broker(s) are usable (registered, unfenced, not "
                    "shutting down)"
                )
            start = rng.randrange(len(usable))
            shift = rng.randrange(len(usable))
            assignment = assign_replicas(
                usable, num_partitions, replication_factor, start_index=start, shift=shift
            )
        records_needed = 1 + len(assignment) + len(topic.configs)
        if used + records_needed > RECORDS_PER_COMMAND_MAX:
            raise InvalidRequestError(
                f"Creating topic {name} needs {records_needed} records, more than the "
                f"{RECORDS_PER_COMMAND_MAX - used} left in this request"
            )
        topic_id = _random_uuid4(rng)
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        for index, replicas in enumerate(assignment):
            records.append(self._new_partition(image, topic_id, index, replicas))
        for key in sorted(topic.configs):
            records.append(ConfigRecord("topic", name, key, topic.configs[key]))
        return records

    @staticmethod
    def _new_partition(
        image: MetadataImage, topic_id: str, index: int, replicas: tuple[int, ...]
    ) -> PartitionRecord:
        isr = tuple(r for r in replicas if _is_active(image, r))
        if not isr:
            raise InvalidReplicaAssignmentError(
                f"All brokers in the assignment {list(replicas)} of partition {index} are "
                "fenced or shutting down"
            )
        return PartitionRecord(
            partition_id=index, topic_id=topic_id, replicas=replicas, isr=isr, leader=isr[0]
        )

    @staticmethod
    def _check_assignments(
        image: MetadataImage,
        assignments: Mapping[int, Sequence[int]] | Sequence[Sequence[int]],
        *,
        first_partition: int,
        replication_factor: int | None = None,
    ) -> list[tuple[int, ...]]:
        """Explicit assignments, checked: partitions numbered from ``first_partition``
        without gaps, non-empty replica lists of one length, no duplicates, registered
        brokers. INVALID_REPLICA_ASSIGNMENT otherwise."""
        if isinstance(assignments, Mapping):
            indexes = sorted(assignments)
            expected = list(range(first_partition, first_partition + len(indexes)))
            if indexes != expected:
                raise InvalidReplicaAssignmentError(
                    f"Partitions must be numbered consecutively from {first_partition}, got "
                    f"{indexes}"
                )
            lists = [tuple(assignments[i]) for i in indexes]
        else:
            lists = [tuple(replicas) for replicas in assignments]
        if not lists:
            raise InvalidReplicaAssignmentError("The assignment lists no partitions")
        for offset, replicas in enumerate(lists):
            index = first_partition + offset
            if not replicas:
                raise InvalidReplicaAssignmentError(f"Partition {index} has no replicas")
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"Partition {index} lists a broker twice: {list(replicas)}"
                )
            width = replication_factor if replication_factor is not None else len(lists[0])
            if len(replicas) != width:
                raise InvalidReplicaAssignmentError(
                    f"Inconsistent replication factor: partition {index} has "
                    f"{len(replicas)} replicas, expected {width}"
                )
            for broker_id in replicas:
                if image.cluster.broker(broker_id) is None:
                    raise InvalidReplicaAssignmentError(
                        f"Partition {index} names broker {broker_id}, which is not registered"
                    )
        return lists

    def delete_topics(
        self,
        image: MetadataImage,
        *,
        names: Sequence[str] = (),
        topic_ids: Sequence[str] = (),
    ) -> ControllerResult[DeleteTopicsResponse]:
        """DeleteTopics by name and/or id: one RemoveTopicRecord per topic deleted
        (its partitions and configs go with it on replay)."""
        batch = _Batch(image)
        results: list[DeleteTopicResult] = []
        requested: list[tuple[str | None, str | None, TopicImage | None]] = [
            (name, None, image.topics.topic_by_name(name)) for name in names
        ] + [(None, topic_id, image.topics.topic(topic_id)) for topic_id in topic_ids]
        seen: set[str] = set()
        for name, topic_id, topic in requested:
            if topic is None:
                what = f"topic {name}" if name is not None else f"topic id {topic_id}"
                error = UnknownTopicOrPartitionError(f"No such {what}")
                results.append(DeleteTopicResult(name, topic_id, error))
                continue
            if topic.topic_id in seen:
                # Named twice (by name and id, say): deleted once, reported once each.
                results.append(DeleteTopicResult(topic.name, topic.topic_id, None))
                continue
            seen.add(topic.topic_id)
            batch.add(RemoveTopicRecord(topic_id=topic.topic_id))
            results.append(DeleteTopicResult(topic.name, topic.topic_id, None))
        return batch.result(DeleteTopicsResponse(tuple(results)))

    def create_partitions(
        self,
        image: MetadataImage,
        topics: Sequence[CreatablePartitions],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[CreatePartitionsResponse]:
        """CreatePartitions: grow topics (never shrink). New partitions continue the
        round-robin placement of partition 0, or follow explicit assignments."""
        batch = _Batch(image)
        results: list[CreatePartitionsResult] = []
        names = [t.name for t in topics]
        for request in topics:
            try:
                if names.count(request.name) > 1:
                    raise InvalidRequestError(
                        f"Found multiple entries for topic {request.name} in the request"
                    )
                records = self._partition_records(batch.image, request, len(batch.records))
            except KafkaError as e:
                results.append(CreatePartitionsResult(request.name, e))
                continue
            for record in records:
                batch.add(record)
            results.append(CreatePartitionsResult(request.name, None))
        response = CreatePartitionsResponse(tuple(results))
        if validate_only:
            return ControllerResult((), response)
        return batch.result(response)

    def _partition_records(
        self, image: MetadataImage, request: CreatablePartitions, used: int
    ) -> list[MetadataRecord]:
        topic = image.topics.topic_by_name(request.name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic {request.name} does not exist")
        current = len(topic.partitions)
        if request.count < current:
            raise InvalidPartitionsError(
                f"Topic {request.name} has {current} partitions, more than the requested "
                f"{request.count}; partitions can only be added"
            )
        if request.count == current:
            raise InvalidPartitionsError(f"Topic {request.name} already has {current} partitions")
        adding = request.count - current
        if used + adding > RECORDS_PER_COMMAND_MAX:
            raise InvalidRequestError(
                f"Adding {adding} partitions needs more than the "
                f"{RECORDS_PER_COMMAND_MAX - used} records left in this request"
            )
        first = topic.partitions[0]
        replication_factor = len(first.replicas)
        if request.assignments is not None:
            if len(request.assignments) != adding:
                raise InvalidReplicaAssignmentError(
                    f"The assignment lists {len(request.assignments)} partitions, but "
                    f"{adding} are being added"
                )
            assignment = self._check_assignments(
                image,
                request.assignments,
                first_partition=current,
                replication_factor=replication_factor,
            )
        else:
            usable = _usable_brokers(image)
            if replication_factor > len(usable):
                raise InvalidReplicationFactorError(
                    f"Unable to replicate the new partitions {replication_factor} time(s): "
                    f"only {len(usable)} broker(s) are usable"
                )
            # Continue the pattern of partition 0: start where its preferred leader is.
            ordered = sorted(usable)
            start = next((i for i, b in enumerate(ordered) if b >= first.replicas[0]), 0) % len(
                ordered
            )
            assignment = assign_replicas(
                ordered,
                adding,
                replication_factor,
                start_index=start,
                shift=start,
                first_partition=current,
            )
        return [
            self._new_partition(image, topic.topic_id, current + i, replicas)
            for i, replicas in enumerate(assignment)
        ]

    # -- configs ----------------------------------------------------------------------

    def incremental_alter_configs(
        self,
        image: MetadataImage,
        resources: Sequence[AlterConfigsResource],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[AlterConfigsResponse]:
        """IncrementalAlterConfigs for topics: ConfigRecords for the keys whose value
        changes. A resource with any bad operation changes nothing."""
        batch = _Batch(image)
        results: list[AlterConfigsResult] = []
        for resource in resources:
            try:
                records = self._config_records(batch.image, resource)
            except KafkaError as e:
                results.append(
                    AlterConfigsResult(resource.resource_type, resource.resource_name, e)
                )
                continue
            for record in records:
                batch.add(record)
            results.append(AlterConfigsResult(resource.resource_type, resource.resource_name, None))
        response = AlterConfigsResponse(tuple(results))
        if validate_only:
            return ControllerResult((), response)
        return batch.result(response)

    @staticmethod
    def _config_records(
        image: MetadataImage, resource: AlterConfigsResource
    ) -> list[MetadataRecord]:
        if resource.resource_type != "topic":
            raise InvalidRequestError(
                f"Altering {resource.resource_type} configs is not supported by this controller"
            )
        name = resource.resource_name
        if image.topics.topic_by_name(name) is None:
            raise UnknownTopicOrPartitionError(f"Topic {name} does not exist")
        keys = [op.name for op in resource.ops]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise InvalidRequestError(f"Duplicate config keys in one request: {duplicates}")
        current = image.configs.config(ConfigResource("topic", name))
        records: list[MetadataRecord] = []
        for op in resource.ops:
            definition = TOPIC_CONFIGS.get(op.name)
            if definition is None:
                raise InvalidConfigError(f"Unknown topic config name: {op.name}")
            new: str | None
            if op.op == "DELETE":
                new = None
            elif op.value is None:
                raise InvalidRequestError(f"{op.op} of {op.name} needs a value")
            elif op.op == "SET":
                new = op.value
            else:
                if definition.type != "LIST":
                    raise InvalidConfigError(
                        f"{op.op} applies to LIST configs only; {op.name} is {definition.type}"
                    )
                base = current.get(op.name, definition.default)
                items = [i.strip() for i in base.split(",") if i.strip()]
                change = [i.strip() for i in op.value.split(",") if i.strip()]
                if op.op == "APPEND":
                    items += [i for i in change if i not in items]
                else:
                    items = [i for i in items if i not in change]
                new = ",".join(items)
            validate_topic_config(op.name, new)
            if current.get(op.name) != new:
                records.append(ConfigRecord("topic", name, op.name, new))
        return records

    # -- partitions -------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, request: AlterPartitionRequest
    ) -> ControllerResult[AlterPartitionResponse]:
        """AlterPartition for one partition, validated in Kafka's order (the broker
        epoch first, then ReplicationControlManager's checks). An ISR equal to the
        current one is accepted with no record."""
        _check_broker_epoch(image, request.broker_id, request.broker_epoch)
        topic = image.topics.topic(request.topic_id)
        partition = None if topic is None else topic.partition(request.partition)
        if topic is None or partition is None:
            raise UnknownTopicOrPartitionError(
                f"No partition {request.partition} of topic id {request.topic_id}"
            )
        where = f"{topic.name}-{request.partition}"
        # Epochs ahead of ours: this controller is behind, so likely no longer active.
        if request.leader_epoch > partition.leader_epoch:
            raise NotControllerError(
                f"{where}: leader epoch {request.leader_epoch} is ahead of the "
                f"controller's {partition.leader_epoch}"
            )
        if request.partition_epoch > partition.partition_epoch:
            raise NotControllerError(
                f"{where}: partition epoch {request.partition_epoch} is ahead of the "
                f"controller's {partition.partition_epoch}"
            )
        if request.leader_epoch < partition.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {request.leader_epoch} is older than the current "
                f"{partition.leader_epoch}"
            )
        if request.broker_id != partition.leader:
            raise InvalidRequestError(
                f"{where}: broker {request.broker_id} is not the leader "
                f"(the leader is {partition.leader})"
            )
        if request.partition_epoch < partition.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {request.partition_epoch} is older than the "
                f"current {partition.partition_epoch}"
            )
        new_isr = tuple(request.new_isr)
        # As Kafka, a replica outside the assignment makes the ISR malformed
        # (INVALID_REQUEST); INELIGIBLE_REPLICA is for replicas that may not be in sync.
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(partition.replicas):
            raise InvalidRequestError(
                f"{where}: ISR {list(new_isr)} is not a set of replicas {list(partition.replicas)}"
            )
        if partition.leader not in new_isr:
            raise InvalidRequestError(
                f"{where}: ISR {list(new_isr)} does not include the leader {partition.leader}"
            )
        ineligible = []
        for broker_id in new_isr:
            broker = image.cluster.broker(broker_id)
            if broker is None:
                ineligible.append(f"{broker_id} (not registered)")
            elif broker.in_controlled_shutdown:
                ineligible.append(f"{broker_id} (shutting down)")
            elif broker.fenced:
                ineligible.append(f"{broker_id} (fenced)")
        if ineligible:
            raise IneligibleReplicaError(
                f"{where}: ineligible replicas in the new ISR: {', '.join(ineligible)}"
            )
        batch = _Batch(image)
        if new_isr != partition.isr:
            batch.add(
                PartitionChangeRecord(
                    partition_id=request.partition, topic_id=request.topic_id, isr=new_isr
                )
            )
        after = batch.image.topics.partition(request.topic_id, request.partition)
        assert after is not None
        return batch.result(
            AlterPartitionResponse(
                topic_id=request.topic_id,
                partition=request.partition,
                leader=after.leader,
                leader_epoch=after.leader_epoch,
                partition_epoch=after.partition_epoch,
                isr=after.isr,
            )
        )

    def _imbalanced(
        self, image: MetadataImage
    ) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Partitions not led by their preferred replica although it could lead."""
        for topic, index, partition in _partitions(image):
            preferred = partition.preferred_leader()
            if (
                partition.leader != preferred
                and preferred in partition.isr
                and _is_active(image, preferred)
            ):
                yield topic, index, partition

    def rebalance_leaders(
        self, image: MetadataImage, now_ms: int
    ) -> ControllerResult[RebalanceResponse]:
        """Preferred-leader election: move leadership back to each partition's first
        replica where it is in the ISR and active, at most REBALANCE_ELECTIONS_MAX."""
        self._last_rebalance_ms = now_ms
        batch = _Batch(image)
        elected: list[TopicIdPartition] = []
        more = False
        for topic, index, partition in self._imbalanced(image):
            if len(elected) >= REBALANCE_ELECTIONS_MAX:
                more = True
                break
            record = (
                PartitionChangeBuilder(
                    partition, topic.topic_id, index, lambda b: _is_active(image, b)
                )
                .set_election(Election.PREFERRED)
                .build()
            )
            assert record is not None and record.leader == partition.preferred_leader()
            batch.add(record)
            elected.append(TopicIdPartition(topic.topic_id, topic.name, index))
        return batch.result(RebalanceResponse(tuple(elected), more))

    # -- producer ids -----------------------------------------------------------------

    def allocate_producer_ids(
        self, image: MetadataImage, broker_id: int, broker_epoch: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        """AllocateProducerIds: the next block of PRODUCER_ID_BLOCK_SIZE ids."""
        _check_broker_epoch(image, broker_id, broker_epoch)
        start = image.producer_ids.next_producer_id
        if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
            raise UnknownServerError("Exhausted all producer ids")
        record = ProducerIdsRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
        )
        batch = _Batch(image)
        batch.add(record)
        return batch.result(AllocateProducerIdsResponse(start, PRODUCER_ID_BLOCK_SIZE))

    # -- timers -----------------------------------------------------------------------

    def deadlines(self, image: MetadataImage, now_ms: int) -> ControllerDeadlines:
        """When to run ``expire_sessions`` (just after the earliest unfenced broker's
        session ends) and ``rebalance_leaders`` (an interval after the last run, when
        auto.leader.rebalance.enable and some partition is imbalanced)."""
        expiry: int | None = None
        for broker in image.cluster.live_brokers():
            session = self._session(broker.broker_id, now_ms)
            due = session.last_contact_ms + self.config.broker_session_timeout_ms + 1
            expiry = due if expiry is None else min(expiry, due)
        rebalance: int | None = None
        if self.config.auto_leader_rebalance_enable and next(self._imbalanced(image), None):
            rebalance = self._last_rebalance_ms + self.config.leader_imbalance_check_interval_ms
        return ControllerDeadlines(expiry, rebalance)
