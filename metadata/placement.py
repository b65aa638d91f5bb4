"""Replica placement for new partitions: Kafka's rack-unaware round robin.

Theory of operation
-------------------
Brokers are taken in id order. Partition ``p``'s first replica (its preferred leader)
is broker ``(p + start_index) mod n``, so leaderships spread evenly; its other replicas
follow at a distance of ``1 + (shift + j) mod (n - 1)`` from the first, and ``shift``
grows by one each time ``p`` wraps around the broker list, so followers of one broker's
partitions are spread over the others too. ``start_index`` and ``shift`` come from the
caller (a seeded random source for a new topic), which keeps this module pure.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["assign_replicas"]


def assign_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    shift: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first_partition .. first_partition+num_partitions-1``.

    ``broker_ids`` are the usable brokers (any order; they are sorted); the caller has
    checked ``1 <= replication_factor <= len(broker_ids)``.
    """
    brokers = sorted(broker_ids)
    count = len(brokers)
    assert 1 <= replication_factor <= count, (replication_factor, brokers)
    assert num_partitions >= 0 and first_partition >= 0
    assert start_index >= 0 and shift >= 0
    out: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + num_partitions):
        # The shift of followers grows each time the partitions wrap around the brokers
        # (counted from partition 0, so added partitions continue the same pattern).
        partition_shift = shift + partition // count
        first = (partition + start_index) % count
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            distance = 1 + (partition_shift + j) % (count - 1)
            replicas.append(brokers[(first + distance) % count])
        out.append(tuple(replicas))
    return out
