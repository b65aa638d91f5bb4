"""Dynamic broker configs: the keys ``raftka configs --entity-type brokers --alter`` may
set, stored as ConfigRecords of a broker resource (its id, or "" for the cluster-wide
default), with Kafka's names, types, defaults and validation.

raftka's other broker configs are static (the properties file, see
:mod:`raftka.broker.broker_configs`); a key not in :data:`DYNAMIC_BROKER_CONFIGS` is
refused with INVALID_CONFIG by name rather than stored and ignored. Today the table holds
the replication throttles a reassignment sets (``kafka-reassign-partitions --throttle``),
which brokers apply as committed (:mod:`raftka.broker.replication.quota`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from raftka.common.errors import InvalidConfigError
from raftka.metadata.topic_config import TopicConfigDef, check_config_value

__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "FOLLOWER_THROTTLED_RATE",
    "LEADER_THROTTLED_RATE",
    "validate_broker_config",
]

LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
_LONG_MAX: Final = 2**63 - 1


def _non_negative(value: object) -> str | None:
    assert isinstance(value, int)
    return None if value >= 0 else "Value must be at least 0"


DYNAMIC_BROKER_CONFIGS: Final[Mapping[str, TopicConfigDef]] = {
    d.name: d
    for d in (
        # Bytes/s, per broker; Kafka's default Long.MAX_VALUE is "no throttle".
        TopicConfigDef(LEADER_THROTTLED_RATE, "LONG", str(_LONG_MAX), _non_negative),
        TopicConfigDef(FOLLOWER_THROTTLED_RATE, "LONG", str(_LONG_MAX), _non_negative),
    )
}


def validate_broker_config(name: str, value: str | None) -> None:
    """Raise InvalidConfigError unless ``name`` is a dynamic broker config raftka honours
    and ``value`` (None: delete the override) is legal for it."""
    definition = DYNAMIC_BROKER_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(
            f"Cannot update these configs dynamically: {name} (raftka's dynamic broker "
            f"configs: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))}; set others in the "
            "broker's properties file)"
        )
    if value is not None:
        check_config_value(definition, value)
