"""raftka.raft.log: the segment log that stores every replicated log.

Topic partitions and the Raft metadata log keep their RecordBatch v2 bytes here. See
:mod:`raftka.raft.log.log` for the API and its rules.
"""

from raftka.raft.log.config import LogConfig
from raftka.raft.log.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)
from raftka.raft.log.log import (
    Log,
    LogAppendInfo,
    OffsetAndTimestamp,
    UnexpectedAppendOffsetError,
)

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "LeaderEpochFileCache",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "OffsetAndTimestamp",
    "UnexpectedAppendOffsetError",
]
