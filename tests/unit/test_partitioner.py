"""The producer's partitioners against Kafka's rules (KafkaProducer.partition,
BuiltInPartitioner of KIP-794, RoundRobinPartitioner).

Randomness is a scripted random.Random whose draws the test chooses, so each switch
lands on a partition the test can predict with Kafka's formula
(``toPositive(nextInt()) % len(available)``); byte counts are driven through
``on_append`` as the accumulator would.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from raftka.client.producer.partitioner import (
    BuiltInPartitioner,
    PartitionChoice,
    RoundRobinPartitioner,
)
from raftka.common.hashing import murmur2_partition


class ScriptedRandom(random.Random):
    """getrandbits returns the scripted values in turn (the partitioner's only draw)."""

    def __init__(self, draws: list[int]) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def getrandbits(self, k: int, /) -> int:
        assert k == 32
        return self.draws.pop(0)


def choose(
    p: BuiltInPartitioner,
    rng: random.Random,
    *,
    key: bytes | None = None,
    n: int = 6,
    available: tuple[int, ...] | None = None,
    partition: int | None = None,
    topic: str = "t",
) -> PartitionChoice:
    return p.partition(
        topic=topic,
        key_bytes=key,
        num_partitions=n,
        available_partitions=tuple(range(n)) if available is None else available,
        rng=rng,
        partition=partition,
    )


def test_explicit_partition_wins_over_key() -> None:
    """A record's own partition is used as is, and never counts as sticky."""
    p = BuiltInPartitioner()
    assert choose(p, ScriptedRandom([]), key=b"k", partition=4) == PartitionChoice(4, False)
    with pytest.raises(ValueError, match="not in the range"):
        choose(p, ScriptedRandom([]), partition=6)


def test_keyed_record_hashes_over_all_partitions() -> None:
    """toPositive(murmur2(key)) % numPartitions, even when its partition has no leader."""
    p = BuiltInPartitioner()
    for key in (b"21", b"foobar", b"abc", b""):
        expected = murmur2_partition(key, 6)
        got = choose(p, ScriptedRandom([]), key=key, available=(99,))
        assert got == PartitionChoice(expected, False)
    # "21" -> toPositive(-973932308) = 1173551340; % 6 = 0
    assert choose(p, ScriptedRandom([]), key=b"21").partition == 1173551340 % 6


def test_ignore_keys_makes_keyed_records_sticky() -> None:
    """partitioner.ignore.keys=true: the key no longer chooses the partition."""
    p = BuiltInPartitioner(partitioner_ignore_keys=True)
    got = choose(p, ScriptedRandom([5]), key=b"21")
    assert got == PartitionChoice(5, True)


def test_sticky_until_batch_size_then_switch() -> None:
    """Stays on one partition below batch.size; at batch.size with switching enabled
    it ends; the next record draws again (draw % len(available))."""
    p = BuiltInPartitioner(batch_size=100)
    rng = ScriptedRandom([2, 0xFFFFFFFF])  # toPositive(-1) = 2**31-1; % 6 = 1
    assert choose(p, rng) == PartitionChoice(2, True)
    p.on_append(topic="t", appended_bytes=60, enable_switch=True)
    assert choose(p, rng).partition == 2
    p.on_append(topic="t", appended_bytes=39, enable_switch=True)
    assert p.sticky_partition("t") == 2
    p.on_append(topic="t", appended_bytes=1, enable_switch=True)  # 100 bytes
    assert p.sticky_partition("t") is None
    assert choose(p, rng).partition == (2**31 - 1) % 6
    assert rng.draws == []


def test_no_switch_mid_batch_until_twice_batch_size() -> None:
    """enable_switch=False (batch not full) defers the switch up to 2 * batch.size."""
    p = BuiltInPartitioner(batch_size=100)
    rng = ScriptedRandom([3])
    choose(p, rng)
    p.on_append(topic="t", appended_bytes=150, enable_switch=False)
    assert p.sticky_partition("t") == 3
    p.on_append(topic="t", appended_bytes=49, enable_switch=False)
    assert p.sticky_partition("t") == 3
    p.on_append(topic="t", appended_bytes=1, enable_switch=False)  # 200 = 2 * batch.size
    assert p.sticky_partition("t") is None


def test_sticky_chooses_among_available_partitions() -> None:
    """Only partitions with a leader are drawn; with none, all partitions are."""
    p = BuiltInPartitioner(batch_size=1)
    assert choose(p, ScriptedRandom([4]), available=(1, 3, 5)).partition == 3  # 4 % 3 = 1
    p.on_append(topic="t", appended_bytes=1, enable_switch=True)
    assert choose(p, ScriptedRandom([10]), available=()).partition == 10 % 6


def test_topics_are_sticky_independently() -> None:
    """Each topic has its own sticky partition and byte count."""
    p = BuiltInPartitioner(batch_size=10)
    rng = ScriptedRandom([1, 4])
    assert choose(p, rng, topic="a").partition == 1
    assert choose(p, rng, topic="b").partition == 4
    p.on_append(topic="a", appended_bytes=10, enable_switch=True)
    assert p.sticky_partition("a") is None
    assert p.sticky_partition("b") == 4


def test_adaptive_weights_follow_kafkas_cumulative_table() -> None:
    """Kafka's example: queue sizes 0,3,1 invert to 4,1,3 and sum to 4,5,8; draws
    0-3 pick the first partition, 4 the second, 5-7 the third (mod 8)."""
    p = BuiltInPartitioner(batch_size=1)
    p.update_load_stats(topic="t", queue_sizes={10: 0, 11: 3, 12: 1}, num_partitions=13)
    picks = []
    for draw in range(9):
        picks.append(choose(p, ScriptedRandom([draw]), n=13).partition)
        p.on_append(topic="t", appended_bytes=1, enable_switch=True)
    assert picks == [10, 10, 10, 10, 11, 12, 12, 12, 10]


def test_adaptive_is_uniform_when_queues_are_equal() -> None:
    """Equal queues over all partitions mean no statistics: the uniform draw."""
    p = BuiltInPartitioner()
    p.update_load_stats(topic="t", queue_sizes={0: 2, 1: 2, 2: 2}, num_partitions=3)
    assert choose(p, ScriptedRandom([7]), n=3, available=(0, 1, 2)).partition == 7 % 3
    # Equal queues but a partition left out: statistics over the rest (weights 1, 1).
    q = BuiltInPartitioner()
    q.update_load_stats(topic="t", queue_sizes={0: 2, 2: 2}, num_partitions=3)
    assert choose(q, ScriptedRandom([1]), n=3, available=(0, 1, 2)).partition == 2


def test_adaptive_disabled_ignores_load_stats() -> None:
    """partitioner.adaptive.partitioning.enable=false: always the uniform draw."""
    p = BuiltInPartitioner(partitioner_adaptive_partitioning_enable=False)
    p.update_load_stats(topic="t", queue_sizes={0: 0, 1: 9}, num_partitions=2)
    assert choose(p, ScriptedRandom([1]), n=2, available=(0, 1)).partition == 1


def test_adaptive_prefers_short_queues_statistically() -> None:
    """With a real seeded RNG a partition with an empty queue is chosen far more often
    than one with a long queue (weights 10 vs 1)."""
    p = BuiltInPartitioner(batch_size=1)
    p.update_load_stats(topic="t", queue_sizes={0: 0, 1: 9}, num_partitions=2)
    rng = random.Random(7)
    counts: Counter[int] = Counter()
    for _ in range(2000):
        counts[choose(p, rng, n=2, available=(0, 1)).partition] += 1
        p.on_append(topic="t", appended_bytes=1, enable_switch=True)
    assert counts[0] > 5 * counts[1] > 0


def test_round_robin_cycles_over_available_partitions() -> None:
    """Kafka's RoundRobinPartitioner: counter per topic, modulo the available list."""
    rr = RoundRobinPartitioner()
    got = [
        rr.partition(topic="t", num_partitions=4, available_partitions=(0, 2, 3)) for _ in range(5)
    ]
    assert got == [0, 2, 3, 0, 2]
    assert rr.partition(topic="u", num_partitions=4, available_partitions=()) == 0
    assert rr.partition(topic="u", num_partitions=4, available_partitions=()) == 1
    assert rr.partition(topic="t", num_partitions=4, available_partitions=(), partition=1) == 1
