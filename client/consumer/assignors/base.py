"""What every consumer partition assignor shares: its inputs, its output, its wire form.

An assignor runs on the group leader (Kafka's classic, client-side assignment): it gets
every member's :class:`Subscription` and the partition count of each subscribed topic,
and returns each member's :class:`Assignment`. Assignors are pure: no I/O, no clock, no
randomness; the same input always gives the same output.

Wire form (raftka's group protocol is JSON). A subscription travels as
``{"topics": [...], "owned_partitions": [{"topic": t, "partitions": [0, 2]}],
"generation_id": 5, "rack": "r1", "user_data": <any JSON value or null>}`` and an
assignment as ``{"partitions": [{"topic": t, "partitions": [...]}],
"user_data": ...}``: the fields of Kafka's ConsumerProtocolSubscription v3 and
ConsumerProtocolAssignment, with partitions grouped by topic as Kafka groups them.
``generation_id`` is -1 when the member has none (Kafka's DEFAULT_GENERATION) and
``owned_partitions`` is the member's last assignment. Kafka's StickyAssignor keeps
those two in its opaque ``userData`` bytes; raftka's subscription always carries them
as fields (as Kafka's v2+ subscription does for the cooperative assignor), so neither
sticky assignor needs ``user_data``, which stays free for custom assignors.
``group_instance_id`` is not part of the subscription on the wire: the coordinator knows
it from JoinGroup and the leader sets it when it builds the subscriptions.

Java's iteration order. Kafka's sticky assignors walk Java ``HashMap``/``HashSet``
collections, so which member keeps a partition can depend on the hash order of member
ids. :func:`java_hash_order` reproduces that order, so raftka's leader computes the
assignment a Java leader would compute from the same input.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeVar

from raftka.client.structs import TopicPartition
from raftka.common.hashing import java_string_hash

__all__ = [
    "DEFAULT_GENERATION",
    "Assignment",
    "InvalidAssignmentError",
    "PartitionAssignor",
    "RebalanceProtocol",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "java_hash_order",
    "java_string_key",
    "member_order",
    "restrict_to_subscribed",
]

#: Kafka's AbstractStickyAssignor.DEFAULT_GENERATION: the member has no generation.
DEFAULT_GENERATION: Final = -1
#: Upper bound on the members and partitions an assignor accepts, so a corrupt
#: subscription cannot make the leader spin: far beyond any real group.
MEMBERS_MAX: Final = 100_000
PARTITIONS_MAX: Final = 1_000_000

JsonValue = Any


class InvalidAssignmentError(ValueError):
    """An assignor produced an assignment that breaks the contract (a partition twice,
    to an unsubscribed member, or one that does not exist)."""


class RebalanceProtocol:
    """Kafka's ConsumerPartitionAssignor.RebalanceProtocol names."""

    EAGER: Final = "EAGER"
    COOPERATIVE: Final = "COOPERATIVE"


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's join: the topics it subscribes to, what it owned in the previous
    generation and that generation, its static ``group.instance.id`` and its rack."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = DEFAULT_GENERATION
    group_instance_id: str | None = None
    rack: str | None = None
    user_data: JsonValue = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(
            self, "owned_partitions", tuple(TopicPartition(*tp) for tp in self.owned_partitions)
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """One member's share: its partitions, in the order the assignor chose them."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: JsonValue = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(self.partitions))


class PartitionAssignor(abc.ABC):
    """A named assignment strategy (Kafka's ConsumerPartitionAssignor)."""

    #: The protocol name members advertise in JoinGroup (``partition.assignment.strategy``).
    name: ClassVar[str]
    #: Rebalance protocols the strategy supports, preferred first.
    rebalance_protocols: ClassVar[tuple[str, ...]] = (RebalanceProtocol.EAGER,)

    def assign(
        self, *, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> dict[str, Assignment]:
        """Assign every partition of every subscribed topic that exists (appears in
        ``partitions_per_topic``); topics missing there are skipped, as Kafka skips
        topics without metadata. Every member appears in the result."""
        if len(members) > MEMBERS_MAX:
            raise ValueError(f"{len(members)} members exceed MEMBERS_MAX={MEMBERS_MAX}")
        counts = restrict_to_subscribed(members, partitions_per_topic)
        if not members:
            return {}
        if sum(counts.values()) > PARTITIONS_MAX:
            raise ValueError(f"more than PARTITIONS_MAX={PARTITIONS_MAX} partitions")
        raw = self._assign(members, counts)
        result = {m: Assignment(tuple(raw.get(m, ()))) for m in members}
        _check_valid(result, members, counts)
        return result

    @abc.abstractmethod
    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]: ...


def restrict_to_subscribed(
    members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
) -> dict[str, int]:
    """Kafka's AbstractPartitionAssignor: only topics some member subscribes to and that
    have metadata count; a topic's count must be positive."""
    subscribed = {t for s in members.values() for t in s.topics}
    counts = {t: n for t, n in partitions_per_topic.items() if t in subscribed}
    for topic, n in counts.items():
        if n < 1:
            raise ValueError(f"topic {topic!r} has {n} partitions")
    return counts


def _check_valid(
    result: Mapping[str, Assignment],
    members: Mapping[str, Subscription],
    counts: Mapping[str, int],
) -> None:
    # An assignor's contract: no partition twice, each to a member subscribed to its topic,
    # and only partitions that exist. (Cooperative rounds may leave some out on purpose.)
    # Checked with raise, not assert: under ``python -O`` an invalid assignment must
    # still never leave the leader.
    seen: set[TopicPartition] = set()
    for member, assignment in result.items():
        topics = set(members[member].topics)
        for tp in assignment.partitions:
            if tp in seen:
                raise InvalidAssignmentError(f"{tp} assigned twice")
            if tp.topic not in topics:
                raise InvalidAssignmentError(f"{tp} assigned to {member}, not subscribed")
            if not 0 <= tp.partition < counts[tp.topic]:
                raise InvalidAssignmentError(f"{tp} does not exist")
            seen.add(tp)


def java_string_key(text: str) -> bytes:
    """A sort key that orders strings as Java's ``String.compareTo`` does (by UTF-16 code
    unit), which differs from Python's code-point order only above U+FFFF."""
    return text.encode("utf-16-be", "surrogatepass")


def member_order(members: Mapping[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order (range and round-robin): static members (with a
    ``group.instance.id``) first, by instance id; then dynamic members by member id."""

    def key(member_id: str) -> tuple[int, bytes, bytes]:
        instance = members[member_id].group_instance_id
        if instance is not None:
            return (0, java_string_key(instance), java_string_key(member_id))
        return (1, b"", java_string_key(member_id))

    return sorted(members, key=key)


# java.util.HashMap: 16 buckets to start, doubling whenever the size exceeds 3/4 of them.
_JAVA_INITIAL_CAPACITY: Final = 16
_JAVA_LOAD_FACTOR_NUM, _JAVA_LOAD_FACTOR_DEN = 3, 4


def java_capacity(size_max: int) -> int:
    """Bucket count of a default-constructed HashMap that has held ``size_max`` entries."""
    capacity = _JAVA_INITIAL_CAPACITY
    while size_max * _JAVA_LOAD_FACTOR_DEN > capacity * _JAVA_LOAD_FACTOR_NUM:
        capacity *= 2
    return capacity


def _spread(h: int) -> int:
    # HashMap.hash: the high half folded into the low half, on the unsigned 32 bits.
    h &= 0xFFFFFFFF
    return h ^ (h >> 16)


def java_topic_partition_hash(tp: TopicPartition) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode: 31 * (31 + partition) + topic."""
    return (31 * (31 + tp.partition) + java_string_hash(tp.topic)) & 0xFFFFFFFF


K = TypeVar("K", bound=Hashable)


def java_hash_order(
    keys: Iterable[K],
    hash_of: Callable[[K], int] | None = None,
    *,
    capacity: int | None = None,
) -> list[K]:
    """The order a default Java HashMap/HashSet iterates ``keys`` inserted in the given
    order: by bucket (``spread(hashCode) & (capacity - 1)``), then by insertion within a
    bucket. Exact while no bucket holds 8 or more keys (Java then may treeify or resize
    early), which for member ids and partitions of one topic does not happen in practice.
    ``hash_of`` defaults to ``String.hashCode`` for strings."""
    items = list(keys)
    size = capacity or java_capacity(len(items))
    assert size & (size - 1) == 0, "capacity is a power of two"
    hasher: Callable[[Any], int] = hash_of or java_string_hash
    indexed = [(_spread(hasher(k)) & (size - 1), i, k) for i, k in enumerate(items)]
    indexed.sort(key=lambda e: (e[0], e[1]))
    return [k for _, _, k in indexed]


def _encode_partitions(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _decode_partitions(value: Any) -> tuple[TopicPartition, ...]:
    if not isinstance(value, list):
        raise ValueError("partitions must be a list of {topic, partitions}")
    out: list[TopicPartition] = []
    for entry in value:
        topic, numbers = entry["topic"], entry["partitions"]
        if not isinstance(topic, str) or not isinstance(numbers, list):
            raise ValueError(f"bad topic entry {entry!r}")
        for p in numbers:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise ValueError(f"bad partition {p!r} of {topic!r}")
            out.append(TopicPartition(topic, p))
    return tuple(out)


def encode_subscription(subscription: Subscription) -> dict[str, Any]:
    """The subscription as a JSON-able dict (see the module docstring)."""
    return {
        "topics": list(subscription.topics),
        "owned_partitions": _encode_partitions(subscription.owned_partitions),
        "generation_id": subscription.generation_id,
        "rack": subscription.rack,
        "user_data": subscription.user_data,
    }


def decode_subscription(
    value: Mapping[str, Any], *, group_instance_id: str | None = None
) -> Subscription:
    """Inverse of :func:`encode_subscription`; missing optional fields take defaults.
    Raises ValueError on a malformed value."""
    topics = value.get("topics")
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise ValueError("topics must be a list of strings")
    generation = value.get("generation_id", DEFAULT_GENERATION)
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise ValueError("generation_id must be an int")
    rack = value.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ValueError("rack must be a string or null")
    try:
        owned = _decode_partitions(value.get("owned_partitions", []))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad owned_partitions: {exc}") from exc
    return Subscription(
        topics=tuple(topics),
        owned_partitions=owned,
        generation_id=generation,
        group_instance_id=group_instance_id,
        rack=rack,
        user_data=value.get("user_data"),
    )


def encode_assignment(assignment: Assignment) -> dict[str, Any]:
    """The assignment as a JSON-able dict (see the module docstring)."""
    return {
        "partitions": _encode_partitions(assignment.partitions),
        "user_data": assignment.user_data,
    }


def decode_assignment(value: Mapping[str, Any]) -> Assignment:
    """Inverse of :func:`encode_assignment`. Raises ValueError on a malformed value."""
    try:
        partitions = _decode_partitions(value.get("partitions", []))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad partitions: {exc}") from exc
    return Assignment(partitions, value.get("user_data"))
