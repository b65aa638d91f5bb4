"""The active controller's configuration, with Kafka's names and defaults.

Kafka spells these as dotted properties (``broker.session.timeout.ms``); the dataclass
uses the same words in snake_case with the unit last. ``from_properties`` accepts the
dotted names, so a config file written for Kafka reads the same here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ControllerConfig"]

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: ids handed to a broker per request.
PRODUCER_ID_BLOCK_SIZE: Final = 1000

# Dotted Kafka name -> field name, for the properties this config understands.
_PROPERTIES: Final[Mapping[str, str]] = {
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "num.partitions": "num_partitions",
    "default.replication.factor": "default_replication_factor",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    """What the controller's commands need to know besides the image.

    ``broker_session_timeout_ms``: a broker that has not heartbeated for this long is
    fenced. ``num_partitions`` / ``default_replication_factor``: used when CreateTopics
    leaves them at -1. ``unclean_leader_election_enable``: the cluster default that a
    topic's own ``unclean.leader.election.enable`` overrides.
    ``auto_leader_rebalance_enable`` / ``leader_imbalance_check_interval_seconds``: the
    periodic move of leadership back to each partition's preferred replica.
    """

    broker_session_timeout_ms: int = 9000
    num_partitions: int = 1
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300

    def __post_init__(self) -> None:
        assert self.broker_session_timeout_ms > 0, self
        assert self.num_partitions >= 1, self
        assert self.default_replication_factor >= 1, self
        assert self.leader_imbalance_check_interval_seconds > 0, self

    @property
    def leader_imbalance_check_interval_ms(self) -> int:
        return self.leader_imbalance_check_interval_seconds * 1000

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> ControllerConfig:
        """Build from Kafka's dotted names; keys this config does not know are left for
        other layers. A value of the wrong type raises ``ValueError``."""
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, int | bool] = {}
        for key, value in properties.items():
            name = _PROPERTIES.get(key)
            if name is None:
                continue
            if kinds[name] in ("bool", bool):
                if isinstance(value, bool):
                    values[name] = value
                elif isinstance(value, str) and value.strip().lower() in ("true", "false"):
                    values[name] = value.strip().lower() == "true"
                else:
                    raise ValueError(f"{key} must be true or false, got {value!r}")
            else:
                if isinstance(value, bool) or not isinstance(value, int | str):
                    raise ValueError(f"{key} must be an integer, got {value!r}")
                try:
                    values[name] = int(value)
                except ValueError:
                    raise ValueError(f"{key} must be an integer, got {value!r}") from None
        return cls(**values)  # type: ignore[arg-type]
