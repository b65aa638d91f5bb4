"""Where a coordinator lives: the partition of its internal topic that owns a key.

Kafka places a consumer group in ``__consumer_offsets`` and a ``transactional.id`` in
``__transaction_state`` with one formula, ``Utils.abs(key.hashCode()) % numPartitions``
(``GroupCoordinatorService.partitionFor`` in apache/kafka's group-coordinator module,
the same as the old ``GroupMetadataManager.partitionFor``). Clients never compute it:
they ask FindCoordinator, so this rule is the brokers' alone.
"""

from __future__ import annotations

from raftka.common.hashing import java_abs, java_string_hash

__all__ = ["coordinator_partition"]


def coordinator_partition(key: str, num_partitions: int) -> int:
    """The partition of a coordinator topic whose leader coordinates ``key`` (a group id
    or a transactional id): ``Utils.abs(key.hashCode()) % num_partitions``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")
    return java_abs(java_string_hash(key)) % num_partitions
