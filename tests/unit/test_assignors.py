"""Range and round-robin assignors, the assignor registry, Java hash order and the JSON
wire form of subscriptions and assignments.

Range/round-robin expectations follow Kafka's RangeAssignorTest / RoundRobinAssignorTest
scenarios (member order by member id, static members by group.instance.id first);
Java HashMap order is checked against bucket indexes computed by hand from
String.hashCode; encodings round-trip and reject malformed input.
"""

from __future__ import annotations

import pytest

from raftka.client.consumer.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNMENT_STRATEGY,
    Assignment,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    assignor_for,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raftka.client.consumer.assignors.base import java_hash_order, member_order
from raftka.client.structs import TopicPartition
from raftka.common.hashing import java_string_hash


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def lists(result: dict[str, Assignment]) -> dict[str, list[TopicPartition]]:
    return {m: list(a.partitions) for m, a in result.items()}


def test_registry_names_and_default_strategy() -> None:
    """Kafka's protocol names, and Kafka 3.x's default [range, cooperative-sticky]."""
    assert sorted(ASSIGNORS) == ["cooperative-sticky", "range", "roundrobin", "sticky"]
    assert DEFAULT_ASSIGNMENT_STRATEGY == ("range", "cooperative-sticky")
    assert isinstance(assignor_for("range"), RangeAssignor)
    with pytest.raises(ValueError, match="unknown partition assignor"):
        assignor_for("nope")


def test_range_two_consumers_three_partitions() -> None:
    """The first member in member-id order gets the extra partition."""
    members = {"consumer2": Subscription(("t",)), "consumer1": Subscription(("t",))}
    got = lists(RangeAssignor().assign(members=members, partitions_per_topic={"t": 3}))
    assert got == {"consumer1": [tp("t", 0), tp("t", 1)], "consumer2": [tp("t", 2)]}


def test_range_per_topic_restarts_from_first_member() -> None:
    """Every topic starts again from the first member (Kafka's known range skew)."""
    members = {m: Subscription(("t1", "t2")) for m in ("consumer1", "consumer2")}
    got = lists(RangeAssignor().assign(members=members, partitions_per_topic={"t1": 3, "t2": 3}))
    assert got == {
        "consumer1": [tp("t1", 0), tp("t1", 1), tp("t2", 0), tp("t2", 1)],
        "consumer2": [tp("t1", 2), tp("t2", 2)],
    }


def test_range_only_subscribed_members_share_a_topic() -> None:
    members = {"consumer1": Subscription(("t1",)), "consumer2": Subscription(("t1", "t2"))}
    got = lists(
        RangeAssignor().assign(members=members, partitions_per_topic={"t1": 3, "t2": 2, "t3": 9})
    )
    assert got == {
        "consumer1": [tp("t1", 0), tp("t1", 1)],
        "consumer2": [tp("t1", 2), tp("t2", 0), tp("t2", 1)],
    }


def test_range_static_members_ordered_by_instance_id() -> None:
    """Kafka's testStaticMemberRangeAssignmentPersistent idea: static members sort by
    group.instance.id (so a restart with a new member id keeps its range), before any
    dynamic member."""
    members = {
        "consumer-b": Subscription(("t",), group_instance_id="instance1"),
        "consumer-a": Subscription(("t",), group_instance_id="instance2"),
        "consumer-0": Subscription(("t",)),
    }
    assert member_order(members) == ["consumer-b", "consumer-a", "consumer-0"]
    got = lists(RangeAssignor().assign(members=members, partitions_per_topic={"t": 5}))
    assert got == {
        "consumer-b": [tp("t", 0), tp("t", 1)],
        "consumer-a": [tp("t", 2), tp("t", 3)],
        "consumer-0": [tp("t", 4)],
    }


def test_roundrobin_deals_in_turn() -> None:
    members = {m: Subscription(("t1", "t2")) for m in ("consumer1", "consumer2")}
    got = lists(
        RoundRobinAssignor().assign(members=members, partitions_per_topic={"t1": 3, "t2": 3})
    )
    assert got == {
        "consumer1": [tp("t1", 0), tp("t1", 2), tp("t2", 1)],
        "consumer2": [tp("t1", 1), tp("t2", 0), tp("t2", 2)],
    }


def test_roundrobin_skips_unsubscribed_members() -> None:
    """Kafka's testMultipleConsumersMixedTopics: consumer2 also takes t2; the circle
    resumes after whoever took the last partition."""
    members = {
        "consumer1": Subscription(("t1",)),
        "consumer2": Subscription(("t1", "t2")),
        "consumer3": Subscription(("t1",)),
    }
    got = lists(
        RoundRobinAssignor().assign(members=members, partitions_per_topic={"t1": 3, "t2": 2})
    )
    assert got == {
        "consumer1": [tp("t1", 0)],
        "consumer2": [tp("t1", 1), tp("t2", 0), tp("t2", 1)],
        "consumer3": [tp("t1", 2)],
    }


def test_missing_topic_and_no_members() -> None:
    """A subscribed topic without metadata is skipped; no members, no assignment."""
    members = {"c": Subscription(("absent", "t"))}
    for cls in ASSIGNORS.values():
        got = lists(cls().assign(members=members, partitions_per_topic={"t": 1}))
        assert got == {"c": [tp("t", 0)]}
        assert cls().assign(members={}, partitions_per_topic={"t": 1}) == {}
    with pytest.raises(ValueError):
        RangeAssignor().assign(members=members, partitions_per_topic={"t": 0})


def test_java_hash_order_follows_buckets() -> None:
    """Bucket = (h ^ h >>> 16) & 15 for 16 buckets; ties keep insertion order."""
    keys = ["consumer1", "consumer2", "consumer3", "c", "zz"]

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & 15

    expected = sorted(keys, key=lambda k: (bucket(k), keys.index(k)))
    assert java_hash_order(keys) == expected
    # These three land in buckets 12, 11, 10: Java iterates consumer3 first.
    assert [bucket(k) for k in keys[:3]] == [12, 11, 10]
    assert java_hash_order(keys[:3]) == ["consumer3", "consumer2", "consumer1"]
    # Past 12 entries the table has 32 buckets.
    many = [f"m{i}" for i in range(13)]
    h = [java_string_hash(k) & 0xFFFFFFFF for k in many]
    assert java_hash_order(many) == [
        k
        for _, _, k in sorted(
            ((x ^ (x >> 16)) & 31, i, k) for i, (x, k) in enumerate(zip(h, many, strict=True))
        )
    ]


def test_subscription_round_trip() -> None:
    sub = Subscription(
        topics=("a", "b"),
        owned_partitions=(tp("a", 0), tp("a", 2), tp("b", 1)),
        generation_id=7,
        rack="r1",
        user_data={"k": [1, 2]},
    )
    wire = encode_subscription(sub)
    assert wire == {
        "topics": ["a", "b"],
        "owned_partitions": [
            {"topic": "a", "partitions": [0, 2]},
            {"topic": "b", "partitions": [1]},
        ],
        "generation_id": 7,
        "rack": "r1",
        "user_data": {"k": [1, 2]},
    }
    assert decode_subscription(wire) == sub
    assert decode_subscription({"topics": ["x"]}) == Subscription(("x",))
    assert decode_subscription(wire, group_instance_id="i").group_instance_id == "i"


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"topics": "a"},
        {"topics": ["a"], "generation_id": "1"},
        {"topics": ["a"], "generation_id": True},
        {"topics": ["a"], "rack": 3},
        {"topics": ["a"], "owned_partitions": [{"topic": "a"}]},
        {"topics": ["a"], "owned_partitions": [{"topic": "a", "partitions": [-1]}]},
        {"topics": ["a"], "owned_partitions": {"a": [0]}},
    ],
)
def test_subscription_rejects_malformed(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        decode_subscription(bad)


def test_assignment_round_trip() -> None:
    a = Assignment((tp("a", 1), tp("b", 0)), user_data=None)
    assert decode_assignment(encode_assignment(a)) == a
    with pytest.raises(ValueError):
        decode_assignment({"partitions": [{"topic": 1, "partitions": []}]})
