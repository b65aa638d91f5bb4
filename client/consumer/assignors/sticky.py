"""Kafka's StickyAssignor (protocol name ``sticky``): balance first, then stickiness.

Same algorithm and same answers as Kafka 3.x's AbstractStickyAssignor, written anew:

1. **Previous ownership.** Each member claims what it owned (``owned_partitions``) in
   generation ``generation_id``. Claims on topics nobody subscribes to any more are
   dropped. Two claims on one partition: the higher generation wins; in the same
   generation neither keeps it (it is treated as owned by no one, and the cooperative
   variant still withholds it for a round).
2. **All members subscribe to the same topics** (the common case): the *constrained*
   algorithm. With ``P`` partitions and ``C`` members every member gets
   ``floor(P/C)`` (min quota) and ``P % C`` of them one more (max quota). Members keep
   their owned partitions up to their quota (sorted by partition number, then topic),
   handing out max quotas first come first served in Java hash order of member ids;
   the partitions left over go round-robin to the members below quota (sorted by member
   id), then one each to members at min quota until the extra slots are used.
3. **Otherwise** the *general* algorithm: keep every owned partition whose topic the
   member still subscribes to; give each unowned partition (topics with the fewest
   potential consumers first) to the least-loaded member that can take it; then, while
   the assignment is not balanced, move partitions from members that have at least two
   more than some other eligible member, preferring to hand a partition back to its
   owner of the previous generation and never bouncing partitions of one topic back
   and forth between two members; keep the result only if it is strictly more balanced.

Where Kafka's output depends on Java ``HashMap``/``HashSet`` iteration order (which
member gets a max-quota slot first; which of several moved partitions is moved back),
this module reproduces that order (:func:`~.base.java_hash_order`), so a raftka leader
and a Java leader agree on the same input. Rack-aware assignment (KIP-881) is left out:
``rack`` is carried in the subscription but not used.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from raftka.client.consumer.assignors.base import (
    DEFAULT_GENERATION,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    java_capacity,
    java_hash_order,
    java_string_key,
    java_topic_partition_hash,
    restrict_to_subscribed,
)
from raftka.client.structs import TopicPartition

__all__ = ["StickyAssignor", "StickyResult", "sticky_assign"]


@dataclass(frozen=True, slots=True)
class StickyResult:
    """The sticky assignment and, from the constrained algorithm only, the partitions it
    gave to a member other than their previous owner (``None`` from the general one,
    where the cooperative assignor works them out from the owned partitions)."""

    assignment: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str] | None


@dataclass(slots=True)
class _Owned:
    all_equal: bool
    owned: dict[str, list[TopicPartition]]  # in Java hash order of member ids
    multiply_claimed: set[TopicPartition]
    max_generation: int


def sticky_assign(
    members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
) -> StickyResult:
    """Kafka's sticky assignment over subscribed, existing topics (see module doc).
    Topics nobody subscribes to are ignored, as Kafka's assignor never sees them."""
    partitions_per_topic = restrict_to_subscribed(members, partitions_per_topic)
    order = java_hash_order(members)
    owned = _collect_owned(order, members, partitions_per_topic)
    if owned.all_equal:
        return _constrained(owned, partitions_per_topic)
    assignment = _General(order, members, partitions_per_topic, owned).build()
    return StickyResult(assignment, None)


def _collect_owned(
    order: Sequence[str], members: Mapping[str, Subscription], counts: Mapping[str, int]
) -> _Owned:
    all_equal = True
    first_topics: set[str] = set()
    max_generation = DEFAULT_GENERATION
    owned: dict[str, list[TopicPartition]] = {}
    owner_of: dict[TopicPartition, str] = {}
    multiply_claimed: set[TopicPartition] = set()
    for member in order:
        sub = members[member]
        # Kafka compares against the first non-empty subscription it meets.
        if not first_topics:
            first_topics = set(sub.topics)
        elif all_equal and set(sub.topics) != first_topics:
            all_equal = False
        generation = sub.generation_id
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in sub.owned_partitions:
            # raftka also drops claims on partitions that no longer exist (a topic
            # re-created smaller); Kafka assumes partition counts never shrink.
            if tp.topic not in counts or tp.partition >= counts[tp.topic]:
                continue
            other = owner_of.get(tp)
            if other is None:
                mine.append(tp)
                owner_of[tp] = member
                continue
            other_generation = members[other].generation_id
            if generation == other_generation:
                # Two owners in one generation: trust neither.
                multiply_claimed.add(tp)
                _remove(owned[other], tp)
                owner_of[tp] = member
            elif generation > other_generation:
                mine.append(tp)
                _remove(owned[other], tp)
                owner_of[tp] = member
    return _Owned(all_equal, owned, multiply_claimed, max_generation)


def _remove(items: list[TopicPartition], tp: TopicPartition) -> None:
    if tp in items:
        items.remove(tp)


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return (java_string_key(tp.topic), tp.partition)


def _constrained(owned: _Owned, counts: Mapping[str, int]) -> StickyResult:
    members = list(owned.owned)  # Java hash order
    total = sum(counts.values())
    min_quota, extra = divmod(total, len(members))
    max_quota = min_quota + (1 if extra else 0)
    expected_over = extra  # members that end with max_quota > min_quota
    over = 0
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    assigned: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    under_min: list[str] = []
    at_min: deque[str] = deque()
    transferring: dict[TopicPartition, str] = {}

    # 1. Keep owned partitions, up to the quota each may still reach.
    for member in members:
        mine = sorted(
            (tp for tp in owned.owned[member] if tp not in owned.multiply_claimed),
            key=lambda tp: (tp.partition, java_string_key(tp.topic)),
        )
        if len(mine) < min_quota:
            keep = mine
            under_min.append(member)
        elif len(mine) >= max_quota and over < expected_over:
            over += 1
            if over == expected_over:
                at_min.clear()  # no more max-quota slots for anyone at min
            keep = mine[:max_quota]
        else:
            keep = mine[:min_quota]
            if over < expected_over:
                at_min.append(member)
        assignment[member].extend(keep)
        assigned.update(keep)
        revoked.update(mine[len(keep) :])

    unassigned = [
        TopicPartition(t, p)
        for t in sorted(counts, key=java_string_key)
        for p in range(counts[t])
        if TopicPartition(t, p) not in assigned
    ]
    under_min.sort(key=java_string_key)
    at_min = deque(sorted(at_min, key=java_string_key))

    def give(tp: TopicPartition, member: str) -> int:
        assignment[member].append(tp)
        if tp in revoked or tp in owned.multiply_claimed:
            transferring[tp] = member
        return len(assignment[member])

    # 2. Round-robin the rest: members under min quota in turn, then members at min
    # quota one each while max-quota slots remain.
    cursor = 0
    for tp in unassigned:
        from_under = cursor < len(under_min)
        if from_under:
            member = under_min[cursor]
            cursor += 1
        elif not under_min:
            if not at_min:
                raise AssertionError("sticky: partitions left but every member is full")
            member = at_min.popleft()
        else:
            cursor = 0
            member = under_min[cursor]
            cursor += 1
            from_under = True
        count = give(tp, member)
        if count == min_quota:
            assert from_under
            cursor -= 1
            under_min.pop(cursor)
            at_min.append(member)
        elif count == max_quota:
            over += 1

    # 3. What Kafka verifies: whoever is still listed as under min quota is at it, and
    # exactly the expected number of members got the extra partition.
    if under_min:
        assert over == expected_over, "sticky: max-quota slots left unused"
        assert all(len(assignment[m]) == min_quota for m in under_min)
    return StickyResult(assignment, transferring)


class _JavaHashSet:
    """A set that yields its first element in java.util.HashSet iteration order."""

    __slots__ = ("_items", "_seq", "_size_max")

    def __init__(self) -> None:
        self._items: dict[TopicPartition, int] = {}
        self._seq = 0
        self._size_max = 0

    def add(self, tp: TopicPartition) -> None:
        if tp not in self._items:
            self._seq += 1
            self._items[tp] = self._seq
            self._size_max = max(self._size_max, len(self._items))

    def discard(self, tp: TopicPartition) -> None:
        self._items.pop(tp, None)

    def __bool__(self) -> bool:
        return bool(self._items)

    def first(self) -> TopicPartition:
        # The table never shrinks: its size follows the most elements ever held.
        return java_hash_order(
            sorted(self._items, key=self._items.__getitem__),
            java_topic_partition_hash,
            capacity=java_capacity(self._size_max),
        )[0]


class _Movements:
    """Kafka's PartitionMovements: which partitions moved from which member to which in
    this rebalance, per topic, so a later move in the opposite direction moves one of
    those back instead of a different partition (that keeps ownership sticky)."""

    def __init__(self) -> None:
        self._pair_of: dict[TopicPartition, tuple[str, str]] = {}
        self._by_topic: dict[str, dict[tuple[str, str], _JavaHashSet]] = {}

    def _forget(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self._pair_of.pop(tp)
        pairs = self._by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self._by_topic[tp.topic]
        return pair

    def _record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self._pair_of[tp] = pair
        self._by_topic.setdefault(tp.topic, {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self._pair_of:
            src, dst = self._forget(tp)
            assert dst == old
            if src != new:  # moving back home cancels the movement
                self._record(tp, (src, new))
        else:
            self._record(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        pairs = self._by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self._pair_of:
            assert self._pair_of[tp][1] == old
            old = self._pair_of[tp][0]
        reverse = pairs.get((new, old))
        return tp if reverse is None else reverse.first()


@dataclass(frozen=True, slots=True)
class _Prev:
    member: str
    generation: int


class _General:
    """Kafka's general sticky algorithm, for members with differing subscriptions."""

    def __init__(
        self,
        order: Sequence[str],
        members: Mapping[str, Subscription],
        counts: Mapping[str, int],
        owned: _Owned,
    ) -> None:
        self.members = members
        self.counts = counts
        self.order = list(order)
        self.max_generation = owned.max_generation
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in counts}
        self.consumer_topics: dict[str, list[str]] = {}
        for member in order:
            topics = [t for t in members[member].topics if t in counts]
            self.consumer_topics[member] = topics
            for t in topics:
                self.topic_consumers[t].append(member)
        self.total = sum(counts.values())
        self.current: dict[str, list[TopicPartition]] = {m: list(owned.owned[m]) for m in order}
        self.owner: dict[TopicPartition, str] = {
            tp: m for m, tps in self.current.items() for tp in tps
        }
        topics_sorted = sorted(
            counts, key=lambda t: (len(self.topic_consumers[t]), java_string_key(t))
        )
        self.sorted_partitions = [
            TopicPartition(t, p) for t in topics_sorted for p in range(counts[t])
        ]
        self.rank = {tp: i for i, tp in enumerate(self.sorted_partitions)}
        self.tree: set[str] = set()  # Kafka's sortedCurrentSubscriptions, sorted on demand
        self.revocation_required = False
        self.movements = _Movements()

    # -- Kafka's TreeSet ordered by (assignment size, member id) --
    def _key(self, member: str) -> tuple[int, bytes]:
        return (len(self.current[member]), java_string_key(member))

    def _sorted_tree(self) -> list[str]:
        return sorted(self.tree, key=self._key)

    def build(self) -> dict[str, list[TopicPartition]]:
        prev = self._previous_owners()
        assigned = self._keep_owned()
        unassigned = [tp for tp in self.sorted_partitions if tp not in assigned]
        self.tree.update(self.current)
        self._balance(prev, unassigned)
        return self.current

    def _previous_owners(self) -> dict[TopicPartition, _Prev]:
        # Claims from older generations remember who had a partition before its current
        # owner, so balancing can hand it back there first.
        prev: dict[TopicPartition, _Prev] = {}
        for member in self.order:
            sub = self.members[member]
            # Kafka: an older generation, or none (-1) while someone has one.
            if sub.generation_id >= self.max_generation:
                continue
            subscribed = set(sub.topics)
            for tp in sub.owned_partitions:
                # A member that no longer subscribes to the topic cannot take the
                # partition back: handing it there would break the assignment's
                # contract (seen with D-1 owned by an older generation subscribed to E).
                if tp.topic not in subscribed:
                    continue
                known = prev.get(tp)
                if known is None or sub.generation_id > known.generation:
                    prev[tp] = _Prev(member, sub.generation_id)
        return prev

    def _keep_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member, tps in self.current.items():
            subscribed = set(self.members[member].topics)
            kept: list[TopicPartition] = []
            for tp in tps:
                if tp.topic not in self.topic_consumers:
                    self.owner.pop(tp, None)
                elif tp.topic not in subscribed:
                    # Kafka leaves the stale owner entry; it is overwritten on assignment.
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.add(tp)
            self.current[member] = kept
        return assigned

    def _max_size(self, member: str) -> int:
        return sum(self.counts[t] for t in self.consumer_topics[member])

    def _is_balanced(self) -> bool:
        ordered = self._sorted_tree()
        if len(self.current[ordered[0]]) >= len(self.current[ordered[-1]]) - 1:
            return True
        owner = {tp: m for m, tps in self.current.items() for tp in tps}
        for member in ordered:
            size = len(self.current[member])
            if size == self._max_size(member):
                continue
            mine = set(self.current[member])
            for topic in self.consumer_topics[member]:
                for p in range(self.counts[topic]):
                    tp = TopicPartition(topic, p)
                    if tp not in mine and size + 1 < len(self.current[owner[tp]]):
                        return False
        return True

    def _balance_score(self, assignment: Mapping[str, list[TopicPartition]]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _assign_to_least_loaded(self, tp: TopicPartition) -> None:
        for member in self._sorted_tree():
            if tp.topic in self.consumer_topics[member]:
                self.current[member].append(tp)
                self.owner[tp] = member
                return

    def _can_move_consumer(self, member: str) -> bool:
        tps = self.current[member]
        if len(tps) < self._max_size(member):
            return True
        return any(len(self.topic_consumers[tp.topic]) >= 2 for tp in tps)

    def _balance(self, prev: dict[TopicPartition, _Prev], unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self._sorted_tree()[-1]]
        for tp in unassigned:
            if self.topic_consumers[tp.topic]:
                self._assign_to_least_loaded(tp)

        # Only partitions with two or more potential consumers, and only members that
        # could gain or lose something, take part in the balancing below.
        def movable(tp: TopicPartition) -> bool:
            return len(self.topic_consumers[tp.topic]) >= 2

        reassignable = [tp for tp in self.sorted_partitions if movable(tp)]
        unassigned = [tp for tp in unassigned if movable(tp)]
        fixed: dict[str, list[TopicPartition]] = {}
        for member in self.order:
            if not self._can_move_consumer(member):
                self.tree.discard(member)
                fixed[member] = self.current.pop(member)

        before = {m: list(tps) for m, tps in self.current.items()}
        owner_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, prev)
        performed = self._reassign(reassignable, prev)
        if (
            not initializing
            and performed
            and self._balance_score(self.current) >= self._balance_score(before)
        ):
            self.current = before
            self.owner = owner_before
        for member, tps in fixed.items():
            self.current[member] = tps
            self.tree.add(member)

    def _reassign(
        self, partitions: Sequence[TopicPartition], prev: dict[TopicPartition, _Prev]
    ) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member = self.owner[tp]
                size = len(self.current[member])
                back = prev.get(tp)
                if (
                    back is not None
                    and back.member in self.current
                    and (size > len(self.current[back.member]) + 1)
                ):
                    self._move(tp, back.member)
                    performed = modified = True
                    continue
                if any(size > len(self.current[o]) + 1 for o in self.topic_consumers[tp.topic]):
                    target = next(
                        m for m in self._sorted_tree() if tp.topic in self.consumer_topics[m]
                    )
                    self._move(tp, target)
                    performed = modified = True
        return performed

    def _move(self, tp: TopicPartition, new: str) -> None:
        actual = self.movements.partition_to_move(tp, self.owner[tp], new)
        old = self.owner[actual]
        self.movements.move(actual, old, new)
        self.current[old].remove(actual)
        self.current[new].append(actual)
        self.owner[actual] = new


class StickyAssignor(PartitionAssignor):
    name: ClassVar[str] = "sticky"
    rebalance_protocols: ClassVar[tuple[str, ...]] = (RebalanceProtocol.EAGER,)

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        return sticky_assign(members, partitions_per_topic).assignment
