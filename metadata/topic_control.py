"""Topic, partition and config commands of the QuorumController (Kafka's
ReplicationControlManager for topics and partitions, and ConfigurationControlManager).

Theory of operation
-------------------
:class:`TopicControl` holds only the controller's static config (default partition
count and replication factor); every command is pure like the rest of the controller:
it reads the image and returns a :class:`ControllerResult` (records and a response),
never changing the image. CreateTopics, DeleteTopics, CreatePartitions and
IncrementalAlterConfigs answer per item, as Kafka does, so one bad topic does not fail
the others; ``validate_only`` runs every check and returns no records. Topic names
follow Kafka's rules (:func:`topic_name_problem`), and a name that collides with an
existing one once '.' and '_' are identified is refused. :func:`describe_configs` is a
read: any controller answers it from its own image.

:class:`~raftka.metadata.controller.QuorumController` extends this class (and elects
leaders after an IncrementalAlterConfigs that allows unclean elections); broker sessions,
fencing, elections, AlterPartition and producer ids stay there.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from raftka.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftka.metadata.broker_dynamic_config import (
    DYNAMIC_BROKER_CONFIGS,
    validate_broker_config,
)
from raftka.metadata.controller_api import (
    RECORDS_PER_COMMAND_MAX,
    AlterConfigsResource,
    AlterConfigsResponse,
    AlterConfigsResult,
    CommandBatch,
    ConfigEntry,
    ConfigSource,
    ControllerResult,
    CreatablePartitions,
    CreatableTopic,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsResponse,
    DescribeConfigsResult,
    is_active_broker,
    usable_brokers,
)
from raftka.metadata.image import ConfigResource, MetadataImage, TopicImage
from raftka.metadata.metadata_records import (
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from raftka.metadata.placement import assign_replicas
from raftka.metadata.topic_config import (
    TOPIC_CONFIGS,
    TopicConfigDef,
    validate_topic_config,
    validate_topic_configs,
)
from raftka.server_common.controller_config import ControllerConfig

__all__ = [
    "TOPIC_NAME_LENGTH_MAX",
    "TopicControl",
    "describe_configs",
    "random_uuid4",
    "topic_name_problem",
]

TOPIC_NAME_LENGTH_MAX: Final = 249
_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


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


def random_uuid4(rng: random.Random) -> str:
    """A version-4 UUID string from the command's seeded ``rng`` (topic and ACL ids)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


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


class TopicControl:
    """The topic, partition and config commands (see the module doc)."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config: Final = config

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
        batch = CommandBatch(image)
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
        validate_topic_configs(topic.configs)
        usable = usable_brokers(image)
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
        topic_id = random_uuid4(rng)
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
        isr = tuple(r for r in replicas if is_active_broker(image, r))
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
        batch = CommandBatch(image)
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
        batch = CommandBatch(image)
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
            usable = usable_brokers(image)
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
        batch = CommandBatch(image)
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
        if batch.records:
            self._configs_changed(
                batch, {r.resource_name for r in resources if r.resource_type == "topic"}
            )
        return batch.result(response)

    def _configs_changed(self, batch: CommandBatch, topics: set[str]) -> None:
        """Runs once IncrementalAlterConfigs has added its records to ``batch`` (not for
        validate_only, nor when nothing changed); what it adds joins the same command.
        QuorumController elects leaders here; topic commands alone add nothing."""

    @staticmethod
    def _config_records(
        image: MetadataImage, resource: AlterConfigsResource
    ) -> list[MetadataRecord]:
        keys = [op.name for op in resource.ops]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise InvalidRequestError(f"Duplicate config keys in one request: {duplicates}")
        if resource.resource_type == "broker":
            return _broker_config_records(image, resource)
        if resource.resource_type != "topic":
            raise InvalidRequestError(
                f"Altering {resource.resource_type} configs is not supported by this controller"
            )
        name = resource.resource_name
        if image.topics.topic_by_name(name) is None:
            raise UnknownTopicOrPartitionError(f"Topic {name} does not exist")
        current = image.configs.config(ConfigResource("topic", name))
        records, after = _config_op_records(
            ConfigResource("topic", name), current, resource, TOPIC_CONFIGS, validate_topic_config
        )
        validate_topic_configs(after)
        return records


def _broker_config_records(
    image: MetadataImage, resource: AlterConfigsResource
) -> list[MetadataRecord]:
    """IncrementalAlterConfigs of a broker (its id, or "" for the cluster default): only
    the dynamic broker configs raftka honours (metadata/broker_dynamic_config.py)."""
    name = resource.resource_name
    if name and not (name.isdigit() and str(int(name)) == name):
        raise InvalidRequestError(f"Invalid broker id {name!r}: a broker id or '' (the default)")
    owner = ConfigResource("broker", name)
    current = image.configs.config(owner)
    records, _ = _config_op_records(
        owner, current, resource, DYNAMIC_BROKER_CONFIGS, validate_broker_config
    )
    return records


def _config_op_records(
    owner: ConfigResource,
    current: Mapping[str, str],
    resource: AlterConfigsResource,
    definitions: Mapping[str, TopicConfigDef],
    validate: Callable[[str, str | None], None],
) -> tuple[list[MetadataRecord], dict[str, str]]:
    """The ConfigRecords of ``resource``'s ops on ``owner`` (keys whose value changes)
    and its overrides once every op applies; ``validate`` refuses an unknown key or a
    bad value (INVALID_CONFIG), APPEND/SUBTRACT edit LIST configs only."""
    after = dict(current)
    records: list[MetadataRecord] = []
    for op in resource.ops:
        validate(op.name, None)  # an unknown key is refused by name first
        definition = definitions[op.name]
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
        validate(op.name, new)
        if current.get(op.name) != new:
            records.append(ConfigRecord(owner.type, owner.name, op.name, new))
        if new is None:
            after.pop(op.name, None)
        else:
            after[op.name] = new
    return records, after
