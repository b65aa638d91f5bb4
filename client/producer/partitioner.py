"""The producer's partition choice, as Kafka's Java producer (3.x) makes it.

Theory of operation (KafkaProducer.partition + BuiltInPartitioner, KIP-794):

1. A record that names a partition goes there.
2. A record with a key, unless ``partitioner.ignore.keys``, goes to
   ``toPositive(murmur2(key)) % numPartitions``, counting *all* partitions of the topic,
   available or not, so a key's partition never moves while the partition count holds.
3. Any other record goes to the topic's *sticky* partition. The producer keeps producing
   to it until ``batch.size`` bytes have gone there and the accumulator reports that the
   partition's batches are full (``enable_switch``), or until twice ``batch.size`` went
   there regardless, then chooses a new sticky partition: uniformly at random among the
   partitions that have a leader, or among all partitions if none has; or, when adaptive
   partitioning has load statistics, at random weighted towards partitions with shorter
   queues.

What raftka simplifies, and why:

- Kafka chooses the next partition eagerly, at the moment of the switch. Here
  :meth:`BuiltInPartitioner.on_append` only ends the current stickiness and the next
  unkeyed record chooses; the distribution is the same, and ``on_append`` then needs
  neither the cluster view nor the random source.
- Kafka guards the sticky state against concurrent appenders with compare-and-set; this
  class is not thread-safe: the accumulator calls it from its one event loop.
- Adaptive partitioning (``partitioner.adaptive.partitioning.enable``) works from queue
  sizes the accumulator hands to :meth:`BuiltInPartitioner.update_load_stats`, exactly as
  Kafka's ``updatePartitionLoadStats`` builds its cumulative frequency table. Which
  partitions to leave out of that list (those whose leader has not drained for
  ``partitioner.availability.timeout.ms``) is the accumulator's decision, as in Kafka.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from raftka.common.hashing import murmur2_partition, to_positive

__all__ = [
    "BATCH_SIZE_DEFAULT",
    "BuiltInPartitioner",
    "PartitionChoice",
    "RoundRobinPartitioner",
]

#: Kafka's ``batch.size`` default, bytes.
BATCH_SIZE_DEFAULT: Final = 16384
#: How many distinct topics the partitioner keeps sticky state for; a producer writing
#: to more topics than this forgets the oldest stickiness (it re-chooses, nothing breaks).
TOPICS_TRACKED_MAX: Final = 100_000
_INT31: Final = 2**31


class PartitionChoice(NamedTuple):
    """Where a record goes, and whether it went there through stickiness (only then does
    its size count towards switching: :meth:`BuiltInPartitioner.on_append`)."""

    partition: int
    sticky: bool


@dataclass(slots=True)
class _Sticky:
    partition: int
    #: What ``partition()`` answers while this partition sticks: built once, not per
    #: record (a named tuple's constructor is a Python-level call).
    choice: PartitionChoice
    produced_bytes: int = 0


@dataclass(frozen=True, slots=True)
class _LoadStats:
    # cumulative[i] is the running sum of inverted queue sizes up to partition_ids[i].
    cumulative: tuple[int, ...]
    partition_ids: tuple[int, ...]


def _invalid_partition(partition: int, num_partitions: int) -> ValueError:
    """A record's own partition outside its topic: Kafka's KafkaProducer.waitOnMetadata
    message (the checks stay inline: they run for every record)."""
    return ValueError(
        f"Invalid partition given with record: {partition} is not in the "
        f"range [0...{num_partitions})."
    )


def _random_int31(rng: random.Random) -> int:
    # Java's toPositive(ThreadLocalRandom.nextInt()): uniform over [0, 2**31).
    return to_positive(rng.getrandbits(32))


class BuiltInPartitioner:
    """The default partitioner of Kafka's producer (no ``partitioner.class``)."""

    def __init__(
        self,
        *,
        batch_size: int = BATCH_SIZE_DEFAULT,
        partitioner_ignore_keys: bool = False,
        partitioner_adaptive_partitioning_enable: bool = True,
    ) -> None:
        if batch_size < 1:
            # Kafka: "stickyBatchSize must be >= 1" (batch.size 0 still sticks 1 byte).
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        self._batch_size = batch_size
        self._ignore_keys = partitioner_ignore_keys
        self._adaptive = partitioner_adaptive_partitioning_enable
        self._sticky: dict[str, _Sticky] = {}
        self._load_stats: dict[str, _LoadStats] = {}

    def partition(
        self,
        *,
        topic: str,
        key_bytes: bytes | None,
        num_partitions: int,
        available_partitions: Sequence[int],
        rng: random.Random,
        partition: int | None = None,
    ) -> PartitionChoice:
        """Choose the partition for one record.

        ``num_partitions`` counts every partition of ``topic``; ``available_partitions``
        are those with a leader now (Kafka's ``availablePartitionsForTopic``).
        """
        if num_partitions < 1:
            raise ValueError(f"topic {topic!r} has no partitions")
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise _invalid_partition(partition, num_partitions)
            return PartitionChoice(partition, sticky=False)
        if key_bytes is not None and not self._ignore_keys:
            return PartitionChoice(murmur2_partition(key_bytes, num_partitions), sticky=False)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition >= num_partitions:
            # A shrunk topic cannot happen in Kafka, but a stale state must not point
            # outside it.
            chosen = self._next_partition(topic, num_partitions, available_partitions, rng)
            if len(self._sticky) >= TOPICS_TRACKED_MAX and topic not in self._sticky:
                del self._sticky[next(iter(self._sticky))]
            sticky = self._sticky[topic] = _Sticky(chosen, PartitionChoice(chosen, sticky=True))
        return sticky.choice

    def on_append(self, *, topic: str, appended_bytes: int, enable_switch: bool) -> None:
        """The accumulator appended ``appended_bytes`` of a sticky record to the topic's
        sticky partition. ``enable_switch`` is Kafka's "all batches of that partition are
        full": switching in the middle of a batch would send a fraction of a batch.
        Past twice ``batch.size`` the partition switches regardless."""
        assert appended_bytes >= 0
        sticky = self._sticky.get(topic)
        if sticky is None:
            return
        sticky.produced_bytes += appended_bytes
        if (enable_switch and sticky.produced_bytes >= self._batch_size) or (
            sticky.produced_bytes >= 2 * self._batch_size
        ):
            del self._sticky[topic]

    def sticky_partition(self, topic: str) -> int | None:
        """The topic's current sticky partition, if one is chosen."""
        sticky = self._sticky.get(topic)
        return None if sticky is None else sticky.partition

    def update_load_stats(
        self, *, topic: str, queue_sizes: Mapping[int, int], num_partitions: int
    ) -> None:
        """Adaptive partitioning: ``queue_sizes`` maps each partition the accumulator
        deems available (it has a leader that is draining) to the number of batches
        queued for it. Kafka's rule: with fewer than two partitions in the topic, no
        partition left, or every partition present with equal queues, no statistics
        (uniform choice); otherwise a partition's weight is ``max + 1 - its queue``."""
        if not self._adaptive or not queue_sizes or num_partitions < 2:
            self._load_stats.pop(topic, None)
            return
        ids = sorted(queue_sizes)
        sizes = [queue_sizes[p] for p in ids]
        assert all(s >= 0 for s in sizes)
        if len(set(sizes)) == 1 and len(ids) == num_partitions:
            self._load_stats.pop(topic, None)
            return
        ceiling = max(sizes) + 1
        cumulative: list[int] = []
        running = 0
        for size in sizes:
            running += ceiling - size
            cumulative.append(running)
        self._load_stats[topic] = _LoadStats(tuple(cumulative), tuple(ids))

    def _next_partition(
        self,
        topic: str,
        num_partitions: int,
        available_partitions: Sequence[int],
        rng: random.Random,
    ) -> int:
        draw = _random_int31(rng)
        stats = self._load_stats.get(topic)
        if stats is not None:
            # The first entry strictly greater than the weighted draw; partitions with
            # shorter queues own wider slices of [0, total).
            weighted = draw % stats.cumulative[-1]
            index = bisect.bisect_right(stats.cumulative, weighted)
            return stats.partition_ids[index]
        if available_partitions:
            return available_partitions[draw % len(available_partitions)]
        return draw % num_partitions


class RoundRobinPartitioner:
    """Kafka's ``RoundRobinPartitioner``: every record, keyed or not, goes to the next
    available partition of its topic in turn (all partitions when none is available).
    The per-topic counter wraps as a Java int does, through ``toPositive``."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(
        self,
        *,
        topic: str,
        num_partitions: int,
        available_partitions: Sequence[int],
        partition: int | None = None,
    ) -> int:
        if num_partitions < 1:
            raise ValueError(f"topic {topic!r} has no partitions")
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise _invalid_partition(partition, num_partitions)
            return partition
        value = self._counters.get(topic, 0)
        self._counters[topic] = (value + 1) % (2 * _INT31)
        turn = to_positive(value)
        if available_partitions:
            return available_partitions[turn % len(available_partitions)]
        return turn % num_partitions
