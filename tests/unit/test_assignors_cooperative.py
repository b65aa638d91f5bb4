"""The cooperative-sticky assignor: Kafka's sticky answer with the partitions that
change owner withheld for one round. Scenarios ported from Apache Kafka's
CooperativeStickyAssignorTest and AbstractStickyAssignorTest; each checks the exact
lists Kafka asserts, then drives follow-up rounds (owned = last assignment) the way
Kafka's verifyValidityAndBalance does until nothing is revoked, checking at every round
that no partition is added to one member while revoked from another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from raftka.client.consumer.assignors import CooperativeStickyAssignor, Subscription
from raftka.client.consumer.assignors.cooperative_sticky import cooperative_sticky_assign
from raftka.client.structs import TopicPartition

GEN = 1


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def sub(
    topics: Sequence[str], owned: Sequence[TopicPartition] = (), generation: int = GEN
) -> Subscription:
    return Subscription(tuple(topics), tuple(owned), generation)


def revoking(
    members: Mapping[str, Subscription], assignment: Mapping[str, Sequence[TopicPartition]]
) -> bool:
    """Kafka's verifyCooperativeValidity: nothing both added and revoked; True if some
    partition is revoked (a follow-up rebalance will happen)."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, tps in assignment.items():
        owned = set(members[member].owned_partitions)
        added |= set(tps) - owned
        revoked |= owned - set(tps)
    assert not added & revoked, f"assigned while being revoked: {added & revoked}"
    return bool(revoked)


def settle(
    members: dict[str, Subscription],
    counts: Mapping[str, int],
    assignment: dict[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """Follow-up rebalances until nothing is revoked (at most 4, as in Kafka); the
    final assignment is complete and fully balanced when subscriptions are equal."""
    rounds = 0
    while revoking(members, assignment):
        members = {m: sub(s.topics, assignment[m]) for m, s in members.items()}
        assignment = cooperative_sticky_assign(members, counts)
        rounds += 1
        assert rounds <= 4
    assigned = [p for tps in assignment.values() for p in tps]
    subscribed = {t for s in members.values() for t in s.topics}
    assert sorted(assigned) == sorted(
        tp(t, p) for t, n in counts.items() if t in subscribed for p in range(n)
    )
    return assignment


def test_protocol_name_and_rebalance_protocols() -> None:
    """Kafka's name; COOPERATIVE preferred, EAGER supported."""
    assert CooperativeStickyAssignor.name == "cooperative-sticky"
    assert CooperativeStickyAssignor.rebalance_protocols == ("COOPERATIVE", "EAGER")


@pytest.mark.parametrize(
    ("partitions", "first"),
    [(3, [tp("topic", 1)]), (4, [tp("topic", 1), tp("topic", 3)])],
)
def test_double_claim_withheld_until_both_revoke(
    partitions: int, first: list[TopicPartition]
) -> None:
    """topic-0 claimed by two members of one generation is given to nobody this round,
    whether or not the partitions divide evenly among the members."""
    members = {
        "consumer1": sub(["topic"], [tp("topic", 0), tp("topic", 1)]),
        "consumer2": sub(["topic"], [tp("topic", 0), tp("topic", 2)]),
        "consumer3": sub(["topic"], []),
    }
    assignment = cooperative_sticky_assign(members, {"topic": partitions})
    assert assignment == {"consumer1": first, "consumer2": [tp("topic", 2)], "consumer3": []}
    settle(members, {"topic": partitions}, assignment)


def test_new_member_waits_for_revocation() -> None:
    """A joining member gets nothing that someone else still owns; one round later it
    gets the revoked partition (Kafka's add-consumer scenario)."""
    counts = {"topic": 3}
    members = {
        "consumer1": sub(["topic"], [tp("topic", 0), tp("topic", 1), tp("topic", 2)]),
        "consumer2": sub(["topic"], []),
    }
    first = cooperative_sticky_assign(members, counts)
    assert first == {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": []}
    second_members = {m: sub(["topic"], first[m]) for m in members}
    second = cooperative_sticky_assign(second_members, counts)
    assert second == {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": [tp("topic", 2)]}


def test_departed_owner_partitions_move_at_once() -> None:
    """Partitions of a member that left are not withheld: nobody has to revoke them."""
    members = {"consumer2": sub(["topic"], [tp("topic", 2)])}
    assignment = cooperative_sticky_assign(members, {"topic": 3})
    assert sorted(assignment["consumer2"]) == [tp("topic", 0), tp("topic", 1), tp("topic", 2)]


def test_old_version_subscriptions() -> None:
    members = {
        "consumer1": sub(["topic1"], [tp("topic1", 0)]),
        "consumer2": sub(["topic1"], [tp("topic1", 1)]),
        "consumer3": sub(["topic1"], []),
    }
    assignment = cooperative_sticky_assign(members, {"topic1": 3})
    assert assignment == {
        "consumer1": [tp("topic1", 0)],
        "consumer2": [tp("topic1", 1)],
        "consumer3": [tp("topic1", 2)],
    }


def owned_from(text: str) -> list[TopicPartition]:
    return [
        tp(item.rpartition("-")[0], int(item.rpartition("-")[2]))
        for item in text.split(", ")
        if item
    ]


def as_strings(assignment: Mapping[str, Sequence[TopicPartition]]) -> list[str]:
    return [", ".join(sorted(str(p) for p in assignment[m])) for m in sorted(assignment)]


def test_general_case_intermediate_and_final_match_kafka() -> None:
    """Kafka's testRackAwareAssignmentWithNonEqualSubscription, cooperative branch with
    all racks matching: from a skewed ownership (consumer2 owns t2 partitions it no
    longer subscribes to) Kafka's first round keeps only the non-moving partitions, and
    the second round, from that intermediate ownership, gives the final assignment."""
    counts = {"t1": 6, "t2": 7, "t3": 2}
    topics = [["t1", "t2", "t3"], ["t1", "t2", "t3"], ["t1", "t3"]]
    skewed = [
        "t1-0, t1-1, t1-2, t1-3, t1-4",
        "t1-5, t2-0, t2-1, t2-2, t2-3",
        "t2-4, t2-5, t2-6, t3-0, t3-1",
    ]
    intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
    final = [
        "t1-2, t1-3, t1-4, t2-4, t2-5",
        "t2-0, t2-1, t2-2, t2-3, t2-6",
        "t1-0, t1-1, t1-5, t3-0, t3-1",
    ]
    members = {f"consumer{i}": sub(topics[i], owned_from(skewed[i]), -1) for i in range(3)}
    assert as_strings(cooperative_sticky_assign(members, counts)) == intermediate
    members = {f"consumer{i}": sub(topics[i], owned_from(intermediate[i]), -1) for i in range(3)}
    assert as_strings(cooperative_sticky_assign(members, counts)) == final


def test_add_remove_two_consumers_settles() -> None:
    """Two members, then four: first round withholds the moving partitions, later
    rounds hand them out, and the end state is balanced."""
    both = ["topic1", "topic2"]
    counts = {"topic1": 3, "topic2": 4}
    members = {"consumer1": sub(both, [], -1), "consumer2": sub(both, [], -1)}
    first = settle(members, counts, cooperative_sticky_assign(members, counts))
    members = {
        "consumer1": sub(both, first["consumer1"]),
        "consumer2": sub(both, first["consumer2"]),
        "consumer3": sub(both, []),
        "consumer4": sub(both, []),
    }
    withheld = cooperative_sticky_assign(members, counts)
    assert withheld["consumer3"] == [] and withheld["consumer4"] == []
    final = settle(members, counts, withheld)
    assert sorted(len(v) for v in final.values()) == [1, 2, 2, 2]


def test_public_assignor_matches_function() -> None:
    members = {"a": sub(["t"], [tp("t", 0), tp("t", 1)]), "b": sub(["t"], [])}
    result = CooperativeStickyAssignor().assign(members=members, partitions_per_topic={"t": 2})
    assert {m: list(a.partitions) for m, a in result.items()} == cooperative_sticky_assign(
        members, {"t": 2}
    )
