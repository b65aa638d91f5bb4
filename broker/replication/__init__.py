"""Partition replication on a broker: the partition core (:class:`Replica`: replica
state, producer state and a :class:`PartitionLog`), the replica state of each partition
(leader or follower, HW, ISR, epochs) and the purgatory of acks=all produces, as pure
cores that the broker's shell drives with ``now_ms`` and fetch/metadata events."""

from raftka.broker.replication.partition import (
    ConsumerRead,
    FetchAnswer,
    FetchPosition,
    FollowerRead,
    MetadataOutcome,
    ProduceOutcome,
    Ready,
    Replica,
)
from raftka.broker.replication.partition_log import (
    MemoryPartitionLog,
    PartitionLog,
    SegmentPartitionLog,
)
from raftka.broker.replication.partition_state import (
    MIN_INSYNC_REPLICAS_DEFAULT,
    REPLICA_LAG_TIME_MAX_MS_DEFAULT,
    AlterPartitionOutcome,
    AppendResult,
    EpochEndOffsets,
    FetchBounds,
    FollowerFetchOutcome,
    FollowerFetchResult,
    FollowerProgress,
    IsrChangeKind,
    IsrProposal,
    PartitionState,
    ReplicaRole,
    ReplicationConfig,
    ReplicationStatus,
    StateChange,
)
from raftka.broker.replication.purgatory import (
    WAITERS_MAX,
    Completion,
    ProducePurgatory,
    PurgatoryFullError,
)
from raftka.common.structs import EpochEndOffset

__all__ = [
    "MIN_INSYNC_REPLICAS_DEFAULT",
    "REPLICA_LAG_TIME_MAX_MS_DEFAULT",
    "WAITERS_MAX",
    "AlterPartitionOutcome",
    "AppendResult",
    "Completion",
    "ConsumerRead",
    "EpochEndOffset",
    "EpochEndOffsets",
    "FetchAnswer",
    "FetchBounds",
    "FetchPosition",
    "FollowerFetchOutcome",
    "FollowerFetchResult",
    "FollowerProgress",
    "FollowerRead",
    "IsrChangeKind",
    "IsrProposal",
    "MemoryPartitionLog",
    "MetadataOutcome",
    "PartitionLog",
    "PartitionState",
    "ProduceOutcome",
    "ProducePurgatory",
    "PurgatoryFullError",
    "Ready",
    "Replica",
    "ReplicaRole",
    "ReplicationConfig",
    "ReplicationStatus",
    "SegmentPartitionLog",
    "StateChange",
]
