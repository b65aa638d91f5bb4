"""Replaying metadata records over an image: MetadataDelta and its parts.

Theory of operation
-------------------
A :class:`MetadataDelta` starts from one :class:`MetadataImage` and gathers the changes
that records make, without touching the image. ``apply()`` builds the next image; only
the parts some record touched are rebuilt, every other sub-image, topic and partition
is the very object of the old image. The same code runs on controllers, on brokers and
in tests, so every node that replays the same records in log order holds equal images.

The delta keeps one small delta per sub-image, created on first use (``ClusterDelta``,
``TopicsDelta`` with one ``TopicDelta`` per touched topic, ``ConfigurationsDelta``,
``ProducerIdsDelta``, ``ScramDelta``, ``AclsDelta``); a sub-image with no delta is shared as it is.

A record that does not fit the state it is replayed on (a change to an unknown topic,
an epoch that does not match the broker's registration, a second topic of one name)
raises :class:`MetadataReplayError` and leaves the delta as it was before that record,
so the caller can report it and stop. On a broker such a record means the log and the
image disagree, which replay cannot repair.

``local_changes(broker_id)`` reads only what this delta changed and tells one broker
which partitions it now leads, follows, or must stop and delete.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, assert_never

from raftka.common.acl import AclBinding
from raftka.common.errors import IllegalStateError
from raftka.metadata.image import (
    AclsImage,
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    FrozenMap,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    ScramImage,
    TopicIdPartition,
    TopicImage,
    TopicsImage,
)
from raftka.metadata.metadata_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    UNFENCE,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    assignment_problem,
)
from raftka.server_common.sasl import ScramCredential

__all__ = [
    "AclsDelta",
    "ClusterDelta",
    "ConfigurationsDelta",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataReplayError",
    "ProducerIdsDelta",
    "ScramDelta",
    "TopicDelta",
    "TopicsDelta",
    "image_from_records",
]


class MetadataReplayError(IllegalStateError):
    """A well-formed record does not fit the image it is replayed on (it names an
    unknown topic, partition or broker, a stale broker epoch, a taken topic name, ...)."""


# ---------------------------------------------------------------------------------------
# Cluster


class ClusterDelta:
    """Broker registrations added, changed or removed since ``image``."""

    def __init__(self, image: ClusterImage) -> None:
        self.image: Final = image
        # None marks a removed registration.
        self.changed: dict[int, BrokerRegistration | None] = {}

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's registration as of the records replayed so far."""
        if broker_id in self.changed:
            return self.changed[broker_id]
        return self.image.brokers.get(broker_id)

    def _registered(self, broker_id: int, broker_epoch: int, what: str) -> BrokerRegistration:
        current = self.broker(broker_id)
        if current is None:
            raise MetadataReplayError(f"{what}: broker {broker_id} is not registered")
        if current.epoch != broker_epoch:
            raise MetadataReplayError(
                f"{what}: broker {broker_id} has epoch {current.epoch}, record says {broker_epoch}"
            )
        return current

    def replay_register(self, record: RegisterBrokerRecord) -> None:
        current = self.broker(record.broker_id)
        # Broker epochs only grow: a registration never replaces a newer one.
        if current is not None and record.broker_epoch <= current.epoch:
            raise MetadataReplayError(
                f"RegisterBrokerRecord: broker {record.broker_id} epoch {record.broker_epoch} "
                f"does not exceed its current epoch {current.epoch}"
            )
        self.changed[record.broker_id] = BrokerRegistration.from_record(record)

    def replay_unregister(self, record: UnregisterBrokerRecord) -> None:
        self._registered(record.broker_id, record.broker_epoch, "UnregisterBrokerRecord")
        self.changed[record.broker_id] = None

    def replay_change(self, record: BrokerRegistrationChangeRecord) -> None:
        current = self._registered(
            record.broker_id, record.broker_epoch, "BrokerRegistrationChangeRecord"
        )
        fenced = current.fenced
        if record.fenced == FENCE:
            fenced = True
        elif record.fenced == UNFENCE:
            fenced = False
        shutdown = current.in_controlled_shutdown
        if record.in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN:
            shutdown = True
        self.changed[record.broker_id] = BrokerRegistration(
            broker_id=current.broker_id,
            incarnation_id=current.incarnation_id,
            epoch=current.epoch,
            endpoints=current.endpoints,
            rack=current.rack,
            fenced=fenced,
            in_controlled_shutdown=shutdown,
        )

    def apply(self) -> ClusterImage:
        if not self.changed:
            return self.image
        put = {i: b for i, b in self.changed.items() if b is not None}
        removed = [i for i, b in self.changed.items() if b is None]
        return ClusterImage(self.image.brokers.with_changes(put, removed))


# ---------------------------------------------------------------------------------------
# Topics


class TopicDelta:
    """Partitions of one topic registered or changed since ``image`` (for a topic
    created in this delta, ``image`` is the new topic with no partitions)."""

    def __init__(self, image: TopicImage) -> None:
        self.image: Final = image
        self.changed: dict[int, PartitionRegistration] = {}

    @property
    def topic_id(self) -> str:
        return self.image.topic_id

    @property
    def name(self) -> str:
        return self.image.name

    def partition(self, index: int) -> PartitionRegistration | None:
        found = self.changed.get(index)
        return found if found is not None else self.image.partitions.get(index)

    def replay_partition(self, record: PartitionRecord) -> None:
        self.changed[record.partition_id] = PartitionRegistration.from_record(record)

    def replay_change(self, record: PartitionChangeRecord) -> None:
        current = self.partition(record.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord: topic {self.name} ({self.topic_id}) has no "
                f"partition {record.partition_id}"
            )
        merged = current.merge(record)
        problem = assignment_problem(
            merged.replicas,
            merged.isr,
            merged.removing_replicas,
            merged.adding_replicas,
            merged.leader,
        )
        if problem is not None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for {self.name}-{record.partition_id}: {problem}"
            )
        self.changed[record.partition_id] = merged

    def apply(self) -> TopicImage:
        if not self.changed:
            return self.image
        return TopicImage(
            name=self.image.name,
            topic_id=self.image.topic_id,
            partitions=self.image.partitions.with_changes(self.changed),
        )

    def _local_changes(self, broker_id: int, out: _LocalChangesBuilder) -> None:
        for index, new in self.changed.items():
            old = self.image.partitions.get(index)
            if old == new:
                continue  # restated unchanged: nothing for a broker to do
            tp = TopicIdPartition(self.topic_id, self.name, index)
            if broker_id not in new.replicas:
                if old is not None and broker_id in old.replicas:
                    out.deletes.add(tp)  # reassigned away from this broker
            elif new.leader == broker_id:
                out.leaders[tp] = new
            else:
                out.followers[tp] = new


class TopicsDelta:
    """Topics created, changed and deleted since ``image``."""

    def __init__(self, image: TopicsImage) -> None:
        self.image: Final = image
        # Every topic a record touched (created here or changed), by id.
        self.changed: dict[str, TopicDelta] = {}
        # Topics created in this delta and still alive, name -> id.
        self.created: dict[str, str] = {}
        # Ids of topics of ``image`` deleted in this delta.
        self.deleted: set[str] = set()

    def topic_id_by_name(self, name: str) -> str | None:
        """The id of the live topic called ``name``, as of the records replayed so far."""
        if name in self.created:
            return self.created[name]
        topic = self.image.by_name.get(name)
        if topic is None or topic.topic_id in self.deleted:
            return None
        return topic.topic_id

    def topic_name(self, topic_id: str) -> str | None:
        """The name of the live topic with this id, as of the records replayed so far."""
        if topic_id in self.changed:
            return self.changed[topic_id].name
        topic = self.image.by_id.get(topic_id)
        if topic is None or topic_id in self.deleted:
            return None
        return topic.name

    def _topic_delta(self, topic_id: str, what: str) -> TopicDelta:
        delta = self.changed.get(topic_id)
        if delta is not None:
            return delta
        topic = self.image.by_id.get(topic_id)
        if topic is None or topic_id in self.deleted:
            raise MetadataReplayError(f"{what}: unknown topic id {topic_id}")
        delta = TopicDelta(topic)
        self.changed[topic_id] = delta
        return delta

    def replay_topic(self, record: TopicRecord) -> None:
        # Topic ids are never reused, not even after a delete.
        if record.topic_id in self.image.by_id or record.topic_id in self.changed:
            raise MetadataReplayError(f"TopicRecord: topic id {record.topic_id} already exists")
        taken_by = self.topic_id_by_name(record.name)
        if taken_by is not None:
            raise MetadataReplayError(
                f"TopicRecord: topic {record.name!r} already exists with id {taken_by}"
            )
        topic = TopicImage(name=record.name, topic_id=record.topic_id, partitions=FrozenMap())
        self.changed[record.topic_id] = TopicDelta(topic)
        self.created[record.name] = record.topic_id

    def replay_partition(self, record: PartitionRecord) -> None:
        self._topic_delta(record.topic_id, "PartitionRecord").replay_partition(record)

    def replay_change(self, record: PartitionChangeRecord) -> None:
        delta = self.changed.get(record.topic_id)
        if delta is None:
            delta = self._topic_delta(record.topic_id, "PartitionChangeRecord")
            try:
                delta.replay_change(record)
            except MetadataReplayError:
                # Leave no trace of a record that failed (the topic was untouched before).
                del self.changed[record.topic_id]
                raise
        else:
            delta.replay_change(record)

    def replay_remove(self, record: RemoveTopicRecord) -> str:
        """Delete the topic; returns its name (its configs go too)."""
        name = self.topic_name(record.topic_id)
        if name is None:
            raise MetadataReplayError(f"RemoveTopicRecord: unknown topic id {record.topic_id}")
        self.changed.pop(record.topic_id, None)
        if record.topic_id in self.image.by_id:
            self.deleted.add(record.topic_id)
        else:
            del self.created[name]
        return name

    def apply(self) -> TopicsImage:
        if not self.changed and not self.deleted:
            return self.image
        topics = {topic_id: delta.apply() for topic_id, delta in self.changed.items()}
        # Names of deleted topics go first: a new topic may reuse one.
        gone_names = [self.image.by_id[i].name for i in self.deleted]
        return TopicsImage(
            by_id=self.image.by_id.with_changes(topics, self.deleted),
            by_name=self.image.by_name.with_changes(
                {t.name: t for t in topics.values()}, gone_names
            ),
        )

    def _local_changes(self, broker_id: int, out: _LocalChangesBuilder) -> None:
        for delta in self.changed.values():
            delta._local_changes(broker_id, out)
        for topic_id in self.deleted:
            topic = self.image.by_id[topic_id]
            for index, partition in topic.partitions.items():
                if broker_id in partition.replicas:
                    out.deletes.add(TopicIdPartition(topic_id, topic.name, index))


# ---------------------------------------------------------------------------------------
# Configs


class ConfigurationsDelta:
    """Config keys set or deleted since ``image``, by resource."""

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image: Final = image
        # None marks a deleted key.
        self.changed: dict[ConfigResource, dict[str, str | None]] = {}

    def replay_config(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        self.changed.setdefault(resource, {})[record.name] = record.value

    def delete_topic(self, name: str) -> None:
        """Drop every config of a deleted topic (as Kafka does on RemoveTopicRecord)."""
        resource = ConfigResource("topic", name)
        self.changed[resource] = dict.fromkeys(self.image.config(resource))

    def apply(self) -> ConfigurationsImage:
        if not self.changed:
            return self.image
        put: dict[ConfigResource, FrozenMap[str, str]] = {}
        removed: list[ConfigResource] = []
        for resource, changes in self.changed.items():
            old = self.image.config(resource)
            keys = dict(old)
            for key, value in changes.items():
                if value is None:
                    keys.pop(key, None)
                else:
                    keys[key] = value
            if not keys:
                removed.append(resource)
            elif keys != old:
                put[resource] = FrozenMap._adopt(keys)
        if not put and not removed:
            return self.image
        return ConfigurationsImage(self.image.resources.with_changes(put, removed))


# ---------------------------------------------------------------------------------------
# Producer ids


class ProducerIdsDelta:
    """The producer-id counter, which only grows."""

    def __init__(self, image: ProducerIdsImage) -> None:
        self.image: Final = image
        self.next_producer_id = image.next_producer_id

    def replay(self, record: ProducerIdsRecord) -> None:
        if record.next_producer_id <= self.next_producer_id:
            raise MetadataReplayError(
                f"ProducerIdsRecord: next producer id {record.next_producer_id} does not "
                f"exceed the current {self.next_producer_id}"
            )
        self.next_producer_id = record.next_producer_id

    def apply(self) -> ProducerIdsImage:
        if self.next_producer_id == self.image.next_producer_id:
            return self.image
        return ProducerIdsImage(self.next_producer_id)


# ---------------------------------------------------------------------------------------
# SCRAM credentials


class ScramDelta:
    """SCRAM credentials set or removed since ``image``, by (user, mechanism)."""

    def __init__(self, image: ScramImage) -> None:
        self.image: Final = image
        # None marks a removed credential.
        self.changed: dict[tuple[str, str], ScramCredential | None] = {}

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        key = (user, mechanism)
        if key in self.changed:
            return self.changed[key]
        return self.image.credential(user, mechanism)

    def replay_set(self, record: UserScramCredentialRecord) -> None:
        # The record checked everything ScramCredential checks, so this cannot raise.
        self.changed[record.name, record.mechanism] = ScramCredential(
            record.mechanism, record.salt, record.stored_key, record.server_key, record.iterations
        )

    def replay_remove(self, record: RemoveUserScramCredentialRecord) -> None:
        # As Kafka's ScramControlManager: removing what is not there is a log that
        # disagrees with the image.
        if self.credential(record.name, record.mechanism) is None:
            raise MetadataReplayError(
                f"RemoveUserScramCredentialRecord: user {record.name!r} has no "
                f"{record.mechanism} credential"
            )
        self.changed[record.name, record.mechanism] = None

    def apply(self) -> ScramImage:
        if not self.changed:
            return self.image
        put = {k: c for k, c in self.changed.items() if c is not None}
        removed = [k for k, c in self.changed.items() if c is None]
        return ScramImage(self.image.credentials.with_changes(put, removed))


# ---------------------------------------------------------------------------------------
# ACLs


class AclsDelta:
    """ACL bindings created or removed since ``image``, by id."""

    def __init__(self, image: AclsImage) -> None:
        self.image: Final = image
        # None marks a removed binding.
        self.changed: dict[str, AclBinding | None] = {}
        # The bindings as of the records replayed so far; copied on first use.
        self._bindings: set[AclBinding] | None = None

    def _current(self) -> set[AclBinding]:
        if self._bindings is None:
            self._bindings = set(self.image.bindings)
        return self._bindings

    def binding(self, acl_id: str) -> AclBinding | None:
        if acl_id in self.changed:
            return self.changed[acl_id]
        return self.image.by_id.get(acl_id)

    def replay_create(self, record: AccessControlEntryRecord) -> None:
        # As Kafka's AclControlManager: an id or a binding that already exists means
        # the log disagrees with the image.
        if self.binding(record.id) is not None:
            raise MetadataReplayError(f"AccessControlEntryRecord: ACL id {record.id} exists")
        binding = record.binding()
        current = self._current()
        if binding in current:
            raise MetadataReplayError(
                f"AccessControlEntryRecord: ACL {record.id} repeats an existing binding"
            )
        current.add(binding)
        self.changed[record.id] = binding

    def replay_remove(self, record: RemoveAccessControlEntryRecord) -> None:
        binding = self.binding(record.id)
        if binding is None:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord: no ACL with id {record.id}")
        self._current().discard(binding)
        self.changed[record.id] = None

    def apply(self) -> AclsImage:
        if not self.changed:
            return self.image
        put = {k: b for k, b in self.changed.items() if b is not None}
        removed = [k for k, b in self.changed.items() if b is None]
        return AclsImage(self.image.by_id.with_changes(put, removed))


# ---------------------------------------------------------------------------------------
# Local changes


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta: become (or stay, with new state) leader
    of ``leaders``, follower of ``followers``, and stop and delete ``deletes`` (its
    replica was reassigned away or the topic was deleted). Partitions the delta did not
    change appear in none of them."""

    leaders: FrozenMap[TopicIdPartition, PartitionRegistration]
    followers: FrozenMap[TopicIdPartition, PartitionRegistration]
    deletes: frozenset[TopicIdPartition]

    def is_empty(self) -> bool:
        return not (self.leaders or self.followers or self.deletes)


class _LocalChangesBuilder:
    __slots__ = ("deletes", "followers", "leaders")

    def __init__(self) -> None:
        self.leaders: dict[TopicIdPartition, PartitionRegistration] = {}
        self.followers: dict[TopicIdPartition, PartitionRegistration] = {}
        self.deletes: set[TopicIdPartition] = set()


# ---------------------------------------------------------------------------------------
# The whole delta


class MetadataDelta:
    """Changes gathered over ``image`` by replaying records; ``apply()`` is the next image.

    Not thread-safe: one replaying thread. The image it starts from is never changed.
    """

    def __init__(self, image: MetadataImage) -> None:
        self.image: Final = image
        self.offset = image.offset
        self.epoch = image.epoch
        self.cluster: ClusterDelta | None = None
        self.topics: TopicsDelta | None = None
        self.configs: ConfigurationsDelta | None = None
        self.producer_ids: ProducerIdsDelta | None = None
        self.scram: ScramDelta | None = None
        self.acls: AclsDelta | None = None

    def _cluster(self) -> ClusterDelta:
        if self.cluster is None:
            self.cluster = ClusterDelta(self.image.cluster)
        return self.cluster

    def _topics(self) -> TopicsDelta:
        if self.topics is None:
            self.topics = TopicsDelta(self.image.topics)
        return self.topics

    def _configs(self) -> ConfigurationsDelta:
        if self.configs is None:
            self.configs = ConfigurationsDelta(self.image.configs)
        return self.configs

    def _producer_ids(self) -> ProducerIdsDelta:
        if self.producer_ids is None:
            self.producer_ids = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids

    def _scram(self) -> ScramDelta:
        if self.scram is None:
            self.scram = ScramDelta(self.image.scram)
        return self.scram

    def _acls(self) -> AclsDelta:
        if self.acls is None:
            self.acls = AclsDelta(self.image.acls)
        return self.acls

    def topic_id_by_name(self, name: str) -> str | None:
        """The id of the live topic called ``name``, counting records replayed so far."""
        if self.topics is not None:
            return self.topics.topic_id_by_name(name)
        topic = self.image.topics.by_name.get(name)
        return None if topic is None else topic.topic_id

    def replay(
        self, record: MetadataRecord, offset: int | None = None, epoch: int | None = None
    ) -> None:
        """Replay one record, found at ``offset`` of the log in leader ``epoch`` when
        known (offsets must grow, epochs must not shrink). On MetadataReplayError the
        delta is as it was before the call."""
        if offset is not None and offset <= self.offset:
            raise MetadataReplayError(
                f"{record.type} at offset {offset}: the delta is already at offset {self.offset}"
            )
        if epoch is not None and epoch < self.epoch:
            raise MetadataReplayError(
                f"{record.type} in epoch {epoch}: the delta is already at epoch {self.epoch}"
            )
        match record:
            case RegisterBrokerRecord():
                self._cluster().replay_register(record)
            case UnregisterBrokerRecord():
                self._cluster().replay_unregister(record)
            case BrokerRegistrationChangeRecord():
                self._cluster().replay_change(record)
            case TopicRecord():
                self._topics().replay_topic(record)
            case PartitionRecord():
                self._topics().replay_partition(record)
            case PartitionChangeRecord():
                self._topics().replay_change(record)
            case RemoveTopicRecord():
                name = self._topics().replay_remove(record)
                self._configs().delete_topic(name)
            case ConfigRecord():
                if record.resource_type == "topic" and (
                    self.topic_id_by_name(record.resource_name) is None
                ):
                    raise MetadataReplayError(
                        f"ConfigRecord: unknown topic {record.resource_name!r}"
                    )
                self._configs().replay_config(record)
            case ProducerIdsRecord():
                self._producer_ids().replay(record)
            case UserScramCredentialRecord():
                self._scram().replay_set(record)
            case RemoveUserScramCredentialRecord():
                self._scram().replay_remove(record)
            case AccessControlEntryRecord():
                self._acls().replay_create(record)
            case RemoveAccessControlEntryRecord():
                self._acls().replay_remove(record)
            case NoOpRecord():
                pass
            case _:
                assert_never(record)
        if offset is not None:
            self.offset = offset
        if epoch is not None:
            self.epoch = epoch

    def replay_all(self, records: Iterable[MetadataRecord]) -> None:
        """Replay records in order, without offsets."""
        for record in records:
            self.replay(record)

    def apply(self) -> MetadataImage:
        """The image after every record replayed so far; untouched parts are shared."""
        cluster = self.image.cluster if self.cluster is None else self.cluster.apply()
        topics = self.image.topics if self.topics is None else self.topics.apply()
        configs = self.image.configs if self.configs is None else self.configs.apply()
        producer_ids = (
            self.image.producer_ids if self.producer_ids is None else self.producer_ids.apply()
        )
        scram = self.image.scram if self.scram is None else self.scram.apply()
        acls = self.image.acls if self.acls is None else self.acls.apply()
        image = self.image
        if (
            cluster is image.cluster
            and topics is image.topics
            and configs is image.configs
            and producer_ids is image.producer_ids
            and scram is image.scram
            and acls is image.acls
            and self.offset == image.offset
            and self.epoch == image.epoch
        ):
            return image
        return MetadataImage(
            offset=self.offset,
            epoch=self.epoch,
            cluster=cluster,
            topics=topics,
            configs=configs,
            producer_ids=producer_ids,
            scram=scram,
            acls=acls,
        )

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What ``broker_id`` now leads, follows or must delete, from this delta only."""
        out = _LocalChangesBuilder()
        if self.topics is not None:
            self.topics._local_changes(broker_id, out)
        return LocalReplicaChanges(
            leaders=FrozenMap._adopt(out.leaders),
            followers=FrozenMap._adopt(out.followers),
            deletes=frozenset(out.deletes),
        )


def image_from_records(records: Iterable[MetadataRecord], offset: int, epoch: int) -> MetadataImage:
    """The image a snapshot's records describe, as of ``offset`` in ``epoch`` (the
    snapshot's id): the records replayed over EMPTY."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay_all(records)
    delta.offset, delta.epoch = offset, epoch
    return delta.apply()
