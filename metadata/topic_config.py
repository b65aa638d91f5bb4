"""Topic-level configs: Kafka's names, types, defaults and validation.

Theory of operation
-------------------
A topic config is stored as a string (``ConfigRecord.value``), as in Kafka. Each name
this table knows has a type (Kafka's ConfigDef types: INT, LONG, DOUBLE, BOOLEAN,
STRING, LIST), a default written the way DescribeConfigs shows it, and a check on the
parsed value (a lower bound, a range, or a set of allowed strings). ``validate_topic_config``
is the gate CreateTopics and IncrementalAlterConfigs pass every key through; anything
wrong raises :class:`InvalidConfigError` naming the key and the value.

The gate is the broker's own code too: every key the segment log reads is also passed
through :meth:`raftka.storage.log_config.LogConfig.from_properties` (per key, and over the
topic's whole set by :func:`validate_topic_configs` for rules that join keys, such as
min.compaction.lag.ms <= max.compaction.lag.ms), so a value the broker would refuse is
refused here, by name, instead of being accepted and then dropped on every broker.

Keys Kafka defines that raftka does not implement (:data:`NOT_SUPPORTED`) are accepted
only at the value that *is* raftka's behaviour (``preallocate=false``;
``segment.jitter.ms=0``);
any other value is INVALID_CONFIG "not supported by raftka" naming the key, never
accepted and ignored.

``broker_synonym`` is the cluster-wide broker config whose value a topic inherits when it
has no override (``retention.ms`` <- ``log.retention.ms``), which DescribeConfigs
reports as the source ``DYNAMIC_DEFAULT_BROKER_CONFIG``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from raftka.common.errors import InvalidConfigError
from raftka.storage.log_config import LogConfig

__all__ = [
    "LOG_CONFIG_KEYS",
    "NOT_SUPPORTED",
    "TOPIC_CONFIGS",
    "ConfigType",
    "TopicConfigDef",
    "check_config_value",
    "parse_bool",
    "validate_topic_config",
    "validate_topic_configs",
]

ConfigType: TypeAlias = Literal["INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST"]

_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1
_INT_MIN: Final = -(2**31)
_LONG_MIN: Final = -(2**63)


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: its Kafka name and type, its default as a string, what values
    it allows (``check`` returns a problem or None) and its broker-level synonym."""

    name: str
    type: ConfigType
    default: str
    check: Callable[[object], str | None] | None = None
    broker_synonym: str | None = None


def _at_least(low: float) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        assert isinstance(value, int | float)
        return None if value >= low else f"Value must be at least {low}"

    return check


def _between(low: float, high: float) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        assert isinstance(value, int | float)
        return None if low <= value <= high else f"Value must be in [{low}, {high}]"

    return check


def _one_of(*allowed: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        items = value if isinstance(value, list) else [value]
        bad = [v for v in items if v not in allowed]
        if not items:
            return f"Value must list at least one of {list(allowed)}"
        return None if not bad else f"String must be one of: {', '.join(allowed)}"

    return check


def _throttled_replicas(value: object) -> str | None:
    # Kafka's ThrottledReplicaListValidator: "*" alone, or partition:brokerId items.
    assert isinstance(value, list)
    if value == ["*"]:
        return None
    for item in value:
        partition, colon, broker = str(item).partition(":")
        if not (colon and partition.strip().isdigit() and broker.strip().isdigit()):
            return (
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
    return None


def _defs(*items: TopicConfigDef) -> Mapping[str, TopicConfigDef]:
    return {d.name: d for d in items}


_D = TopicConfigDef
TOPIC_CONFIGS: Final[Mapping[str, TopicConfigDef]] = _defs(
    _D("cleanup.policy", "LIST", "delete", _one_of("compact", "delete"), "log.cleanup.policy"),
    _D(
        "compression.type",
        "STRING",
        "producer",
        _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        "compression.type",
    ),
    _D("delete.retention.ms", "LONG", "86400000", _at_least(0), "log.cleaner.delete.retention.ms"),
    _D("file.delete.delay.ms", "LONG", "60000", _at_least(0), "log.segment.delete.delay.ms"),
    _D("follower.replication.throttled.replicas", "LIST", "", _throttled_replicas),
    _D("flush.messages", "LONG", str(_LONG_MAX), _at_least(1), "log.flush.interval.messages"),
    _D("flush.ms", "LONG", str(_LONG_MAX), _at_least(0), "log.flush.interval.ms"),
    _D("index.interval.bytes", "INT", "4096", _at_least(0), "log.index.interval.bytes"),
    _D("leader.replication.throttled.replicas", "LIST", "", _throttled_replicas),
    _D(
        "max.compaction.lag.ms",
        "LONG",
        str(_LONG_MAX),
        _at_least(1),
        "log.cleaner.max.compaction.lag.ms",
    ),
    _D("max.message.bytes", "INT", "1048588", _at_least(0), "message.max.bytes"),
    _D(
        "message.timestamp.type",
        "STRING",
        "CreateTime",
        _one_of("CreateTime", "LogAppendTime"),
        "log.message.timestamp.type",
    ),
    _D(
        "message.timestamp.before.max.ms",
        "LONG",
        str(_LONG_MAX),
        _at_least(0),
        "log.message.timestamp.before.max.ms",
    ),
    _D(
        "message.timestamp.after.max.ms",
        "LONG",
        "3600000",  # Kafka 4.0's default (KIP-1030), as LogConfig has it
        _at_least(0),
        "log.message.timestamp.after.max.ms",
    ),
    _D(
        "min.cleanable.dirty.ratio",
        "DOUBLE",
        "0.5",
        _between(0, 1),
        "log.cleaner.min.cleanable.ratio",
    ),
    _D("min.compaction.lag.ms", "LONG", "0", _at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _D("min.insync.replicas", "INT", "1", _at_least(1), "min.insync.replicas"),
    _D("preallocate", "BOOLEAN", "false", None, "log.preallocate"),
    _D("retention.bytes", "LONG", "-1", None, "log.retention.bytes"),
    _D("retention.ms", "LONG", "604800000", _at_least(-1), "log.retention.ms"),
    # 14 is the smallest legal record batch (Kafka's LegacyRecord.RECORD_OVERHEAD_V0).
    _D("segment.bytes", "INT", "1073741824", _at_least(14), "log.segment.bytes"),
    _D("segment.index.bytes", "INT", "10485760", _at_least(4), "log.index.size.max.bytes"),
    _D("segment.jitter.ms", "LONG", "0", _at_least(0), "log.roll.jitter.ms"),
    _D("segment.ms", "LONG", "604800000", _at_least(1), "log.roll.ms"),
    _D(
        "unclean.leader.election.enable", "BOOLEAN", "false", None, "unclean.leader.election.enable"
    ),
)
del _D

#: The topic keys the segment log reads (LogConfig's fields under Kafka's names).
LOG_CONFIG_KEYS: Final = frozenset(f.replace("_", ".") for f in LogConfig.__dataclass_fields__)

#: Kafka topic keys raftka does not implement -> the one value that is raftka's
#: behaviour (accepted; anything else is refused). docs/operations.md lists them.
NOT_SUPPORTED: Final[Mapping[str, object]] = {
    # Segment files grow as written; none is preallocated.
    "preallocate": False,
    # Rolls happen exactly at segment.ms (storage/log_config.py).
    "segment.jitter.ms": 0,
}


def parse_bool(value: str) -> bool | None:
    """Kafka's BOOLEAN parse: "true"/"false" in any case, else None."""
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def _parse(definition: TopicConfigDef, value: str) -> object:
    """The typed value, or raise ValueError with the reason."""
    text = value.strip()
    match definition.type:
        case "INT" | "LONG":
            low, high = (_INT_MIN, _INT_MAX) if definition.type == "INT" else (_LONG_MIN, _LONG_MAX)
            try:
                number = int(text)
            except ValueError:
                raise ValueError(f"Not a number of type {definition.type}") from None
            if not low <= number <= high:
                raise ValueError(f"Not a number of type {definition.type}")
            return number
        case "DOUBLE":
            try:
                return float(text)
            except ValueError:
                raise ValueError("Not a number of type DOUBLE") from None
        case "BOOLEAN":
            parsed = parse_bool(text)
            if parsed is None:
                raise ValueError("Expected value to be either true or false")
            return parsed
        case "LIST":
            return [item.strip() for item in text.split(",") if item.strip()]
        case "STRING":
            return text


def check_config_value(definition: TopicConfigDef, value: str) -> object:
    """The parsed value, or raise InvalidConfigError naming the key and the value."""
    name = definition.name
    try:
        parsed = _parse(definition, value)
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: {e}") from None
    problem = definition.check(parsed) if definition.check is not None else None
    if problem is not None:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: {problem}")
    return parsed


def validate_topic_config(name: str, value: str | None) -> None:
    """Raise InvalidConfigError unless ``name`` is a topic config and ``value`` (None
    meaning "delete the override") is legal for it."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if value is None:
        return
    parsed = check_config_value(definition, value)
    if name in NOT_SUPPORTED and parsed != NOT_SUPPORTED[name]:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: not supported by raftka "
            f"(only {name}={_shown(NOT_SUPPORTED[name])}, what raftka does)"
        )
    if name in LOG_CONFIG_KEYS:
        # The broker's own rule for the key (bounds Kafka's table does not have, such as
        # segment.index.bytes >= 12), so the broker never drops what was accepted here.
        try:
            LogConfig.from_properties({name: value})
        except InvalidConfigError as e:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: {e.message}"
            ) from None


def validate_topic_configs(configs: Mapping[str, str]) -> None:
    """Raise InvalidConfigError unless a topic's whole set of overrides (after a create
    or an alter) passes the log's rules that join several keys."""
    log_keys = {k: v for k, v in configs.items() if k in LOG_CONFIG_KEYS}
    try:
        LogConfig.from_properties(log_keys)
    except InvalidConfigError as e:
        raise InvalidConfigError(f"Invalid topic configs: {e.message}") from None


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
