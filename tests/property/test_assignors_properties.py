"""Properties of the consumer partition assignors over random groups (hypothesis).

Groups have 1-7 members (random ids) and 1-4 topics of 1-8 partitions; subscriptions
are either identical or random non-empty subsets. Checked:
- completeness: every partition of a subscribed topic is assigned exactly once, to a
  member subscribed to its topic (cooperative-sticky: once follow-up rounds settle);
- balance: with identical subscriptions, sizes differ by at most one (roundrobin,
  sticky, cooperative-sticky after settling); with differing ones, Kafka's check that
  members two or more apart share no topic (sticky);
- stickiness: rerunning sticky with every member owning its balanced assignment moves
  nothing;
- cooperative safety: no round gives a partition to a new owner while its old owner is
  still listed as owning it (the old owner must revoke first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.client.consumer.assignors import ASSIGNORS, Subscription
from raftka.client.consumer.assignors.cooperative_sticky import (
    CooperativeStickyAssignor,
    cooperative_sticky_assign,
)
from raftka.client.consumer.assignors.sticky import StickyAssignor, sticky_assign
from raftka.client.structs import TopicPartition

member_ids = st.text(alphabet="abcxyz-0123456789", min_size=1, max_size=8)


@st.composite
def groups(
    draw: st.DrawFn, *, equal: bool | None = None
) -> tuple[dict[str, Subscription], dict[str, int]]:
    counts = draw(
        st.dictionaries(st.sampled_from(["t0", "t1", "t2", "t3"]), st.integers(1, 8), min_size=1)
    )
    topics = sorted(counts)
    members = draw(st.lists(member_ids, min_size=1, max_size=7, unique=True))
    same = draw(st.booleans()) if equal is None else equal
    subs: dict[str, Subscription] = {}
    for m in members:
        chosen = (
            topics if same else draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
        )
        subs[m] = Subscription(tuple(chosen))
    return subs, counts


def expected_partitions(
    members: Mapping[str, Subscription], counts: Mapping[str, int]
) -> list[TopicPartition]:
    subscribed = {t for s in members.values() for t in s.topics}
    return sorted(
        TopicPartition(t, p) for t, n in counts.items() if t in subscribed for p in range(n)
    )


def check_complete(
    members: Mapping[str, Subscription],
    counts: Mapping[str, int],
    assignment: Mapping[str, Sequence[TopicPartition]],
) -> None:
    assert set(assignment) == set(members)
    for member, tps in assignment.items():
        assert all(p.topic in members[member].topics for p in tps)
    assert sorted(p for tps in assignment.values() for p in tps) == expected_partitions(
        members, counts
    )


def spread(assignment: Mapping[str, Sequence[TopicPartition]]) -> int:
    sizes = [len(v) for v in assignment.values()]
    return max(sizes) - min(sizes)


def kafka_balanced(assignment: Mapping[str, Sequence[TopicPartition]]) -> bool:
    names = sorted(assignment)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if abs(len(assignment[a]) - len(assignment[b])) > 1 and (
                {p.topic for p in assignment[a]} & {p.topic for p in assignment[b]}
            ):
                return False
    return True


@settings(max_examples=80, deadline=None)
@given(groups())
def test_every_eager_assignor_is_complete(
    group: tuple[dict[str, Subscription], dict[str, int]],
) -> None:
    """range, roundrobin and sticky assign every subscribed partition exactly once."""
    members, counts = group
    for name in ("range", "roundrobin", "sticky"):
        result = ASSIGNORS[name]().assign(members=members, partitions_per_topic=counts)
        check_complete(members, counts, {m: list(a.partitions) for m, a in result.items()})


@settings(max_examples=80, deadline=None)
@given(groups(equal=True))
def test_equal_subscriptions_are_balanced(
    group: tuple[dict[str, Subscription], dict[str, int]],
) -> None:
    """roundrobin and sticky: sizes differ by at most one."""
    members, counts = group
    for name in ("roundrobin", "sticky"):
        result = ASSIGNORS[name]().assign(members=members, partitions_per_topic=counts)
        assert spread({m: a.partitions for m, a in result.items()}) <= 1


@settings(max_examples=80, deadline=None)
@given(groups(equal=False))
def test_sticky_general_case_is_kafka_balanced(
    group: tuple[dict[str, Subscription], dict[str, int]],
) -> None:
    """Differing subscriptions: no two members two or more apart share a topic."""
    members, counts = group
    assignment = sticky_assign(members, counts).assignment
    check_complete(members, counts, assignment)
    assert kafka_balanced(assignment)


@settings(max_examples=80, deadline=None)
@given(groups(), st.integers(0, 5))
def test_sticky_moves_nothing_when_already_balanced(
    group: tuple[dict[str, Subscription], dict[str, int]], generation: int
) -> None:
    """Feed sticky its own (balanced) answer as owned partitions: same answer."""
    members, counts = group
    first = sticky_assign(members, counts).assignment
    owning = {m: Subscription(s.topics, tuple(first[m]), generation) for m, s in members.items()}
    result = sticky_assign(owning, counts)
    assert {m: set(v) for m, v in result.assignment.items()} == {
        m: set(v) for m, v in first.items()
    }
    assert not result.transferring


@settings(max_examples=80, deadline=None)
@given(groups(), st.data())
def test_cooperative_never_assigns_while_revoking(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    """Start from an arbitrary ownership (a random owner for some partitions), then run
    cooperative rounds: no partition is added to a member in the round it is revoked
    from another; within a few rounds nothing is revoked and the assignment is complete
    (and balanced when subscriptions are equal)."""
    members, counts = group
    names = list(members)
    owned: dict[str, list[TopicPartition]] = {m: [] for m in names}
    for p in expected_partitions(members, counts):
        owner = data.draw(st.sampled_from([None, *names]))
        if owner is not None and p.topic in members[owner].topics:
            owned[owner].append(p)
    current = {m: Subscription(members[m].topics, tuple(owned[m]), 1) for m in names}
    for _ in range(5):
        assignment = cooperative_sticky_assign(current, counts)
        added: set[TopicPartition] = set()
        revoked: set[TopicPartition] = set()
        for m, tps in assignment.items():
            before = set(current[m].owned_partitions)
            added |= set(tps) - before
            revoked |= before - set(tps)
        assert not added & revoked
        current = {m: Subscription(members[m].topics, tuple(assignment[m]), 1) for m in names}
        if not revoked:
            break
    else:
        raise AssertionError("cooperative rounds did not settle in 5 rounds")
    check_complete(members, counts, assignment)
    if len({s.topics for s in members.values()}) == 1:
        assert spread(assignment) <= 1


@settings(max_examples=80, deadline=None)
@given(groups(equal=False), st.data())
def test_sticky_never_swaps_partitions_of_a_topic_between_two_members(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    """Kafka's testReassignmentWithRandomSubscriptionsAndChanges + isSticky: assign,
    change every subscription at random, reassign with the first answer owned; the
    moves of one topic never go both ways between a pair of members (no a->b with
    b->a), which is what the partition-movement bookkeeping prevents."""
    members, counts = group
    first = sticky_assign(members, counts).assignment
    topics = sorted(counts)
    changed = {
        m: Subscription(
            tuple(data.draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))),
            tuple(first[m]),
            1,
        )
        for m in members
    }
    second = sticky_assign(changed, counts).assignment
    check_complete(changed, counts, second)
    assert kafka_balanced(second)
    before = {p: m for m, tps in first.items() for p in tps}
    moves: set[tuple[str, str, str]] = set()
    for m, tps in second.items():
        for p in tps:
            if p in before and before[p] != m:
                moves.add((p.topic, before[p], m))
    for topic, a, b in moves:
        assert (topic, b, a) not in moves, f"{topic} swapped between {a} and {b}"


@st.composite
def groups_with_history(
    draw: st.DrawFn,
) -> tuple[dict[str, Subscription], dict[str, int]]:
    """Groups whose members claim partitions of any topic (subscribed or not, even of
    topics nobody subscribes to any more) from generations that differ."""
    subs, counts = draw(groups())
    every = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    with_history = {}
    for member, sub in subs.items():
        owned = draw(st.lists(st.sampled_from(every), unique=True, max_size=4))
        generation = draw(st.integers(-1, 5))
        with_history[member] = Subscription(sub.topics, tuple(owned), generation)
    return with_history, counts


@settings(max_examples=150, deadline=None)
@given(groups_with_history())
def test_sticky_assignors_never_hand_a_partition_to_an_unsubscribed_previous_owner(
    group: tuple[dict[str, Subscription], dict[str, int]],
) -> None:
    """Whatever members owned before, the sticky and cooperative-sticky assignments
    give each member only partitions of topics it subscribes to, each at most once."""
    members, counts = group
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        result = assignor.assign(members=members, partitions_per_topic=counts)
        seen: set[TopicPartition] = set()
        for member, assignment in result.items():
            for partition in assignment.partitions:
                assert partition.topic in members[member].topics
                assert partition not in seen
                seen.add(partition)
