"""raftka's producer: the accumulator, the sender, the partitioners; the public classes
are exported from :mod:`raftka.client`."""

from raftka.client.producer.partitioner import (
    BuiltInPartitioner,
    PartitionChoice,
    RoundRobinPartitioner,
)

__all__ = ["BuiltInPartitioner", "PartitionChoice", "RoundRobinPartitioner"]
