"""The immutable image of the cluster's metadata, as of one offset of the metadata log.

Theory of operation
-------------------
A :class:`MetadataImage` is a tree of frozen values: the cluster (broker
registrations), the topics (each with its partition registrations), the configs, the
producer-id counter, the users' SCRAM credentials and the ACL bindings, plus the offset
and epoch of the last record it contains. Nothing in it ever changes; a
:class:`~raftka.metadata.delta.MetadataDelta` builds the next image and reuses every
sub-image and every topic and partition it did not touch, so a reader
can hold an image for as long as it likes without locks, and "did this change?" is
often an ``is`` test.

Maps inside images are :class:`FrozenMap`: a read-only mapping over a dict that no one
else holds. Building one copies the source once; the delta, which builds a fresh dict
anyway, hands its dict over without a second copy (``FrozenMap._adopt``).

``to_records()`` writes an image back as the records that rebuild it from ``EMPTY``,
which is what a snapshot holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final, NamedTuple, TypeVar

from raftka.common.acl import AclBinding
from raftka.metadata.metadata_records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    AccessControlEntryRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from raftka.server_common.sasl import ScramCredential

__all__ = [
    "AclsImage",
    "BrokerRegistration",
    "ClusterImage",
    "ConfigResource",
    "ConfigurationsImage",
    "FrozenMap",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "ScramImage",
    "ScramUser",
    "TopicIdPartition",
    "TopicImage",
    "TopicsImage",
]

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """A read-only mapping that owns its dict. Equal when the contents are equal."""

    __slots__ = ("_data",)
    _data: dict[K, V]

    def __init__(self, source: Mapping[K, V] | None = None) -> None:
        self._data = dict(source) if source is not None else {}

    @classmethod
    def _adopt(cls, data: dict[K, V]) -> FrozenMap[K, V]:
        """Wrap ``data`` without copying; the caller must never touch ``data`` again."""
        out: FrozenMap[K, V] = cls.__new__(cls)
        out._data = data
        return out

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        return self._data.get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self is other or self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def with_changes(self, put: Mapping[K, V], remove: Iterable[K] = ()) -> FrozenMap[K, V]:
        """A new map: this one without ``remove``, then with ``put`` (one copy)."""
        data = dict(self._data)
        for key in remove:
            data.pop(key, None)
        data.update(put)
        return FrozenMap._adopt(data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


class TopicIdPartition(NamedTuple):
    """One partition, named both by its topic's id and its topic's name (the id tells a
    deleted topic from a new one of the same name)."""

    topic_id: str
    topic: str
    partition: int


# ---------------------------------------------------------------------------------------
# Cluster


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``epoch`` is the broker epoch of its current registration."""

    broker_id: int
    incarnation_id: str
    epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            epoch=record.broker_epoch,
            endpoints=record.endpoints,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            endpoints=self.endpoints,
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
        )

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of the named listener, if the broker registered one."""
        for endpoint in self.endpoints:
            if endpoint.name == listener:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """The registered brokers, by id."""

    EMPTY: ClassVar[ClusterImage]
    brokers: FrozenMap[int, BrokerRegistration]

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def live_brokers(self) -> list[BrokerRegistration]:
        """The unfenced brokers, by id."""
        return [self.brokers[i] for i in sorted(self.brokers) if not self.brokers[i].fenced]

    def to_records(self) -> list[MetadataRecord]:
        return [self.brokers[i].to_record() for i in sorted(self.brokers)]


ClusterImage.EMPTY = ClusterImage(FrozenMap())


# ---------------------------------------------------------------------------------------
# Topics


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """What the cluster knows about one partition: its replicas, the in-sync ones, the
    leader and the two epochs. ``leader_epoch`` grows whenever a record names a leader;
    ``partition_epoch`` grows with every change (brokers fence stale AlterPartition
    requests with it)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            eligible_leader_replicas=record.eligible_leader_replicas or (),
            last_known_elr=record.last_known_elr or (),
        )

    def to_record(self, topic_id: str, partition_id: int) -> PartitionRecord:
        # PartitionRecord checks the assignment invariants again, which the delta relies
        # on after merging a change.
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            eligible_leader_replicas=self.eligible_leader_replicas,
            last_known_elr=self.last_known_elr,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``change``: fields the record leaves as None (or
        NO_LEADER_CHANGE) keep their value; ``leader_epoch`` grows when the record names
        a leader, ``partition_epoch`` always. The caller checks the result's invariants
        (``assignment_problem``)."""
        if change.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            removing_replicas=_or(change.removing_replicas, self.removing_replicas),
            adding_replicas=_or(change.adding_replicas, self.adding_replicas),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            eligible_leader_replicas=_or(
                change.eligible_leader_replicas, self.eligible_leader_replicas
            ),
            last_known_elr=_or(change.last_known_elr, self.last_known_elr),
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    def has_replica(self, broker_id: int) -> bool:
        return broker_id in self.replicas

    def preferred_leader(self) -> int:
        return self.replicas[0]


def _or(new: tuple[int, ...] | None, old: tuple[int, ...]) -> tuple[int, ...]:
    return old if new is None else new


@dataclass(frozen=True, slots=True)
class TopicImage:
    """One topic: its name, its id and its partitions by index."""

    name: str
    topic_id: str
    partitions: FrozenMap[int, PartitionRegistration]

    def partition(self, index: int) -> PartitionRegistration | None:
        return self.partitions.get(index)

    def to_records(self) -> list[MetadataRecord]:
        out: list[MetadataRecord] = [TopicRecord(name=self.name, topic_id=self.topic_id)]
        out.extend(self.partitions[i].to_record(self.topic_id, i) for i in sorted(self.partitions))
        return out


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Every topic, by id and by name (two views of the same TopicImage objects)."""

    EMPTY: ClassVar[TopicsImage]
    by_id: FrozenMap[str, TopicImage]
    by_name: FrozenMap[str, TopicImage]

    def __post_init__(self) -> None:
        assert len(self.by_id) == len(self.by_name), "topic views disagree"

    def topic(self, topic_id: str) -> TopicImage | None:
        return self.by_id.get(topic_id)

    def topic_by_name(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def partition(self, topic_id: str, index: int) -> PartitionRegistration | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(index)

    def partition_by_name(self, name: str, index: int) -> PartitionRegistration | None:
        topic = self.by_name.get(name)
        return None if topic is None else topic.partitions.get(index)

    def partitions_led_by(self, broker_id: int) -> list[TopicIdPartition]:
        """Every partition whose leader is ``broker_id``, by topic name then index."""
        return [tp for tp, reg in self._partitions() if reg.leader == broker_id]

    def partitions_with_replica(self, broker_id: int) -> list[TopicIdPartition]:
        """Every partition that has ``broker_id`` among its replicas."""
        return [tp for tp, reg in self._partitions() if broker_id in reg.replicas]

    def _partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionRegistration]]:
        for name in sorted(self.by_name):
            topic = self.by_name[name]
            for index in sorted(topic.partitions):
                yield TopicIdPartition(topic.topic_id, name, index), topic.partitions[index]

    def to_records(self) -> list[MetadataRecord]:
        out: list[MetadataRecord] = []
        for name in sorted(self.by_name):
            out.extend(self.by_name[name].to_records())
        return out


TopicsImage.EMPTY = TopicsImage(FrozenMap(), FrozenMap())


# ---------------------------------------------------------------------------------------
# Configs


class ConfigResource(NamedTuple):
    """A config's owner: a topic by name, or a broker by id ("" for the default)."""

    type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Config overrides by resource; a resource with no keys is absent."""

    EMPTY: ClassVar[ConfigurationsImage]
    resources: FrozenMap[ConfigResource, FrozenMap[str, str]]

    def config(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.resources.get(resource) or _NO_CONFIG

    def topic_config(self, topic: str) -> Mapping[str, str]:
        return self.config(ConfigResource("topic", topic))

    def broker_config(self, broker_id: int | None) -> Mapping[str, str]:
        """A broker's overrides; ``None`` for the cluster-wide broker default."""
        return self.config(ConfigResource("broker", "" if broker_id is None else str(broker_id)))

    def to_records(self) -> list[MetadataRecord]:
        out: list[MetadataRecord] = []
        for resource in sorted(self.resources):
            keys = self.resources[resource]
            out.extend(
                ConfigRecord(resource.type, resource.name, key, keys[key]) for key in sorted(keys)
            )
        return out


_NO_CONFIG: Final[FrozenMap[str, str]] = FrozenMap()
ConfigurationsImage.EMPTY = ConfigurationsImage(FrozenMap())


# ---------------------------------------------------------------------------------------
# Producer ids


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The first producer id not yet handed out to any broker."""

    EMPTY: ClassVar[ProducerIdsImage]
    next_producer_id: int

    def to_records(self) -> list[MetadataRecord]:
        if self.next_producer_id == 0:
            return []
        # As Kafka: a snapshot does not say which broker took the last block.
        return [
            ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id)
        ]


ProducerIdsImage.EMPTY = ProducerIdsImage(0)


# ---------------------------------------------------------------------------------------
# SCRAM credentials


class ScramUser(NamedTuple):
    """What DescribeUserScramCredentials shows of one credential: never the keys."""

    user: str
    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by (user name, mechanism) (Kafka's ScramImage)."""

    EMPTY: ClassVar[ScramImage]
    credentials: FrozenMap[tuple[str, str], ScramCredential]

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential a SASL/SCRAM exchange checks (a ``CredentialLookup``)."""
        return self.credentials.get((user, mechanism))

    def users(self) -> list[ScramUser]:
        """Every credential's user, mechanism and iterations, by user then mechanism."""
        return [
            ScramUser(user, mechanism, self.credentials[user, mechanism].iterations)
            for user, mechanism in sorted(self.credentials)
        ]

    def to_records(self) -> list[MetadataRecord]:
        out: list[MetadataRecord] = []
        for user, mechanism in sorted(self.credentials):
            c = self.credentials[user, mechanism]
            out.append(
                UserScramCredentialRecord(
                    name=user,
                    mechanism=mechanism,
                    salt=c.salt,
                    stored_key=c.stored_key,
                    server_key=c.server_key,
                    iterations=c.iterations,
                )
            )
        return out


ScramImage.EMPTY = ScramImage(FrozenMap())


# ---------------------------------------------------------------------------------------
# ACLs


@dataclass(frozen=True, slots=True)
class AclsImage:
    """ACL bindings by the id their AccessControlEntryRecord gave them (Kafka's
    AclsImage). A binding is held under one id only: the controller never writes a
    binding that exists, and replay refuses one (see ``delta.AclsDelta``)."""

    EMPTY: ClassVar[AclsImage]
    by_id: FrozenMap[str, AclBinding]
    # Every binding, built once per image: the authorizer reads it on every request.
    bindings: frozenset[AclBinding] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bindings", frozenset(self.by_id.values()))

    def to_records(self) -> list[MetadataRecord]:
        return [
            AccessControlEntryRecord.of(acl_id, self.by_id[acl_id]) for acl_id in sorted(self.by_id)
        ]


AclsImage.EMPTY = AclsImage(FrozenMap())


# ---------------------------------------------------------------------------------------
# The whole image


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster's metadata as of the record at ``offset`` (of leader ``epoch``);
    -1/-1 for the empty image."""

    EMPTY: ClassVar[MetadataImage]
    offset: int
    epoch: int
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    producer_ids: ProducerIdsImage
    scram: ScramImage = ScramImage.EMPTY
    acls: AclsImage = AclsImage.EMPTY

    def is_empty(self) -> bool:
        return (
            self.cluster == ClusterImage.EMPTY
            and self.topics == TopicsImage.EMPTY
            and self.configs == ConfigurationsImage.EMPTY
            and self.producer_ids == ProducerIdsImage.EMPTY
            and self.scram == ScramImage.EMPTY
            and self.acls == AclsImage.EMPTY
        )

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s SCRAM credential for ``mechanism``: the lookup a
        :class:`~raftka.server_common.sasl.SaslServerSession` takes."""
        return self.scram.credential(user, mechanism)

    def acl_bindings(self) -> frozenset[AclBinding]:
        """Every committed ACL binding (what the authorizer decides against)."""
        return self.acls.bindings

    def to_records(self) -> list[MetadataRecord]:
        """The records that, replayed over EMPTY, rebuild this image (a snapshot's
        content). Order matters: topics before their configs."""
        return [
            *self.cluster.to_records(),
            *self.topics.to_records(),
            *self.configs.to_records(),
            *self.producer_ids.to_records(),
            *self.scram.to_records(),
            *self.acls.to_records(),
        ]


MetadataImage.EMPTY = MetadataImage(
    offset=-1,
    epoch=-1,
    cluster=ClusterImage.EMPTY,
    topics=TopicsImage.EMPTY,
    configs=ConfigurationsImage.EMPTY,
    producer_ids=ProducerIdsImage.EMPTY,
)
