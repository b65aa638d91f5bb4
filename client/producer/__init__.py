"""raftka's producer. So far: the partitioners (:mod:`.partitioner`)."""

from raftka.client.producer.partitioner import (
    BuiltInPartitioner,
    PartitionChoice,
    RoundRobinPartitioner,
)

__all__ = ["BuiltInPartitioner", "PartitionChoice", "RoundRobinPartitioner"]
