"""The quorum's timing configuration, with Kafka's names and defaults.

Kafka spells these as dotted properties (``controller.quorum.election.timeout.ms``); the
dataclass uses the same words in snake_case with the unit last. ``from_properties``
accepts the dotted names so a config file written for Kafka reads the same here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

_PREFIX = "controller.quorum."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumConfig:
    """Timeouts of the Raft core, in milliseconds.

    The election timeout is drawn uniformly from ``[election_timeout_ms,
    2 * election_timeout_ms)``; the fetch timeout bounds how long a follower waits for
    its leader (and a leader for a majority of fetches) before starting (or allowing)
    an election. ``fetch_max_wait_ms`` is how long a leader parks a fetch that has
    nothing new (the long poll); it must stay below ``request_timeout_ms``.
    """

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500
    fetch_max_records: int = 500
    # Bytes of entries in one fetch response (KRaft's 8 MiB); the first entry is always
    # sent whole so a large one cannot stall a follower.
    fetch_max_bytes: int = 8 << 20
    fetch_snapshot_max_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        assert self.election_timeout_ms > 0, self
        assert self.fetch_timeout_ms > 0, self
        assert self.election_backoff_max_ms > 0, self
        assert self.request_timeout_ms > 0, self
        assert self.append_linger_ms >= 0, self
        assert 0 <= self.fetch_max_wait_ms < self.request_timeout_ms, self
        assert self.fetch_max_records > 0, self
        assert self.fetch_max_bytes > 0, self
        assert self.fetch_snapshot_max_bytes > 0, self

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> QuorumConfig:
        """Build from Kafka's dotted names (``controller.quorum.election.timeout.ms``).

        Unknown ``controller.quorum.*`` keys raise ``ValueError`` (a typo should not be
        silently ignored); keys outside that prefix are left for other layers.
        """
        known = {f.name for f in fields(cls)}
        values: dict[str, int] = {}
        for key, value in properties.items():
            if not key.startswith(_PREFIX):
                continue
            name = key[len(_PREFIX) :].replace(".", "_")
            if name not in known:
                raise ValueError(f"unknown quorum property {key!r}")
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError(f"{key} must be an integer, got {value!r}")
            values[name] = int(value)
        return cls(**values)
