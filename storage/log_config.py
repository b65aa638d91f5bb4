"""LogConfig: the topic-level settings the segment log obeys, under Kafka's names.

``LogConfig`` is a frozen dataclass with Kafka's defaults; ``from_properties`` takes
Kafka's dotted names (``segment.bytes``) with string or int values, as a topic's
configuration arrives from the controller, and raises :class:`InvalidConfigError` naming
the key for a bad value or an unknown key.

Deviations from Kafka, on purpose:

- ``cleanup.policy`` is ``delete``, ``compact`` or both (``compact,delete``, in either
  order, stored sorted). The log cleaner (:mod:`raftka.storage.cleaner`) compacts; with
  ``compact`` alone, retention.ms and retention.bytes delete nothing (Kafka's rule).
- ``segment.jitter.ms`` is not supported (rolls happen exactly at ``segment.ms``).
- ``file.delete.delay.ms`` is accepted and kept, but a deleted segment's files are
  unlinked at once: readers use already-open descriptors, which POSIX keeps valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final

from raftka.common.errors import InvalidConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

COMPACT: Final = "compact"
DELETE: Final = "delete"
CLEANUP_POLICIES: Final = frozenset({COMPACT, DELETE})

CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"

# Topic-level keys Kafka defines that belong to other layers (replication, producer
# state, the fetch path). from_properties ignores them rather than rejecting them, so
# the broker can hand over a topic's whole configuration.
OTHER_TOPIC_KEYS: Final = frozenset(
    {
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.downconversion.enable",
        "message.timestamp.difference.max.ms",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "preallocate",
        "local.retention.ms",
        "local.retention.bytes",
        "remote.storage.enable",
    }
)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The segment log's settings. Field names are Kafka's keys in snake_case."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 60 * 60 * 1000  # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * 24 * 60 * 60 * 1000  # retention.ms; -1 = infinite
    retention_bytes: int = -1  # retention.bytes; -1 = infinite
    flush_messages: int = LONG_MAX  # flush.messages; default: leave it to the OS
    flush_ms: int = LONG_MAX  # flush.ms; default: leave it to the OS
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (1048588)
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    # KIP-937's window for CreateTime timestamps (storage/log_validator.py); after.max
    # has Kafka 4.0's default (KIP-1030: an hour ahead), before.max accepts any age.
    message_timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 3_600_000  # message.timestamp.after.max.ms
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    cleanup_policy: str = "delete"  # cleanup.policy: delete, compact or compact,delete
    delete_retention_ms: int = 24 * 60 * 60 * 1000  # delete.retention.ms (tombstones)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms

    def __post_init__(self) -> None:
        for f in fields(self):
            key = f.name.replace("_", ".")
            value = getattr(self, f.name)
            if f.name in _INT_RULES:
                low, high = _INT_RULES[f.name]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidConfigError(f"{key} must be an integer, got {value!r}")
                if not low <= value <= high:
                    raise InvalidConfigError(f"{key} must be in [{low}, {high}], got {value}")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"message.timestamp.type must be {CREATE_TIME} or {LOG_APPEND_TIME}, "
                f"got {self.message_timestamp_type!r}"
            )
        policies = [p.strip() for p in str(self.cleanup_policy).split(",")]
        if not policies or not set(policies) <= CLEANUP_POLICIES or "" in policies:
            raise InvalidConfigError(
                f"cleanup.policy must be {COMPACT!r}, {DELETE!r} or '{COMPACT},{DELETE}', "
                f"got {self.cleanup_policy!r}"
            )
        # One spelling per policy set, so equal configs compare equal and round-trip.
        object.__setattr__(self, "cleanup_policy", ",".join(sorted(set(policies))))
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise InvalidConfigError(
                f"min.cleanable.dirty.ratio must be a number in [0, 1], got {ratio!r}"
            )
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            # Kafka's LogConfig.validate rejects the same combination.
            raise InvalidConfigError(
                f"min.compaction.lag.ms {self.min_compaction_lag_ms} must not be greater "
                f"than max.compaction.lag.ms {self.max_compaction_lag_ms}"
            )

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def max_segment_ms(self) -> int:
        """The roll interval: segment.ms, or max.compaction.lag.ms if smaller on a
        compacted log, so the active segment (never cleaned) rolls in time for the
        cleaner to honour the maximum lag (Kafka's LogConfig.maxSegmentMs)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def compact(self) -> bool:
        """cleanup.policy includes ``compact``: the log cleaner may compact this log."""
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """cleanup.policy includes ``delete``: retention.ms and retention.bytes apply."""
        return DELETE in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(cls, props: Mapping[str, str | int]) -> LogConfig:
        """Build from Kafka's dotted names; missing keys keep Kafka's defaults."""
        kwargs: dict[str, str | int | float] = {}
        known = {f.name.replace("_", "."): f.name for f in fields(cls)}
        for key, raw in props.items():
            if key in OTHER_TOPIC_KEYS:
                continue
            name = known.get(key)
            if name is None:
                raise InvalidConfigError(f"unknown log config {key!r}")
            if name in _INT_RULES:
                kwargs[name] = _parse_int(key, raw)
            elif name == "min_cleanable_dirty_ratio":
                kwargs[name] = _parse_float(key, raw)
            else:
                kwargs[name] = str(raw).strip()
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """The settings under Kafka's dotted names, as strings (for describe-configs)."""
        return {f.name.replace("_", "."): str(getattr(self, f.name)) for f in fields(self)}


# (min, max) for each integer setting, as Kafka's ConfigDef validators have them.
_INT_RULES: Final[dict[str, tuple[int, int]]] = {
    "segment_bytes": (14, INT_MAX),
    "segment_ms": (1, LONG_MAX),
    "segment_index_bytes": (12, INT_MAX),  # room for at least one time-index entry
    "index_interval_bytes": (0, INT_MAX),
    "retention_ms": (-1, LONG_MAX),
    "retention_bytes": (-1, LONG_MAX),
    "flush_messages": (1, LONG_MAX),
    "flush_ms": (0, LONG_MAX),
    "max_message_bytes": (0, INT_MAX),
    "message_timestamp_before_max_ms": (0, LONG_MAX),
    "message_timestamp_after_max_ms": (0, LONG_MAX),
    "file_delete_delay_ms": (0, LONG_MAX),
    "delete_retention_ms": (0, LONG_MAX),
    "min_compaction_lag_ms": (0, LONG_MAX),
    "max_compaction_lag_ms": (1, LONG_MAX),
}


def _parse_int(key: str, raw: str | int) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key} must be an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"{key} must be an integer, got {raw!r}") from None


def _parse_float(key: str, raw: str | int) -> float:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key} must be a number, got {raw!r}")
    try:
        return float(str(raw).strip()) if not isinstance(raw, int) else float(raw)
    except ValueError:
        raise InvalidConfigError(f"{key} must be a number, got {raw!r}") from None
