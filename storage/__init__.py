"""raftka.storage: the segment log that stores every replicated log.

Topic partitions and the Raft metadata log keep their RecordBatch v2 bytes here. See
:mod:`raftka.storage.log` for the API and its rules.
"""

from raftka.storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)
from raftka.storage.log import (
    Log,
    LogAppendInfo,
    OffsetAndTimestamp,
    UnexpectedAppendOffsetError,
)
from raftka.storage.log_config import LogConfig

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
