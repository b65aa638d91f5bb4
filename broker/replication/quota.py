"""Replication throttles: Kafka's ReplicationQuotaManager, for a reassignment's copy.

Theory of operation
-------------------
Kafka limits the bytes a reassignment copies with two dynamic broker configs,
``leader.replication.throttled.rate`` (what a leader serves to followers) and
``follower.replication.throttled.rate`` (what a follower fetches), in bytes/s per broker,
and two topic configs naming the throttled replicas, ``leader.replication.throttled.replicas``
and ``follower.replication.throttled.replicas``: lists of ``partition:brokerId``, or ``*``
for every replica of the topic. A broker applies its leader quota to the partitions whose
list names ``partition:<its id>`` on the leader side, and its follower quota likewise.

:class:`ReplicationQuota` is one side's quota, pure (time comes in as ``now_ms``): a
token bucket holding at most one second of the rate, refilled continuously. Every byte
replicated for a throttled partition is recorded, and may drive the bucket below zero
(a fetch is not split); while the bucket is empty the quota is exceeded, and Kafka's
rule applies: a throttled replica that is not in the ISR gets nothing (the follower
leaves it out of its next fetch, the leader answers it with no records) until the debt
is repaid, so over any long window the copy runs at the rate. In-sync replicas are never
held back (Kafka's ``shouldLeaderThrottle``/``shouldFollowerThrottle``), and partitions
no list names are never counted.

:class:`ReplicationQuotas` holds both sides for one broker, rebuilt from committed
metadata by :meth:`ReplicationQuotas.configure`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from raftka.metadata.broker_dynamic_config import FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE

__all__ = [
    "FOLLOWER_RATE",
    "FOLLOWER_REPLICAS",
    "LEADER_RATE",
    "LEADER_REPLICAS",
    "UNLIMITED_RATE",
    "ReplicationQuota",
    "ReplicationQuotas",
    "throttled_partitions",
]

LEADER_RATE: Final = LEADER_THROTTLED_RATE
FOLLOWER_RATE: Final = FOLLOWER_THROTTLED_RATE
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
#: Kafka's default rate, Long.MAX_VALUE bytes/s: no throttle.
UNLIMITED_RATE: Final = 2**63 - 1
#: The bucket holds at most this much of the rate (Kafka's quota window is 1 s samples).
WINDOW_MS: Final = 1_000


class ReplicationQuota:
    """One side's byte-rate quota (see the module doc). Not thread safe: the loop's."""

    def __init__(self, rate_bytes_per_s: int = UNLIMITED_RATE, *, now_ms: int = 0) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._tokens = float(self._capacity())
        self._at_ms = now_ms
        #: Bytes recorded for throttled replicas since start (a metric).
        self.throttled_bytes = 0

    def _capacity(self) -> float:
        return self.rate_bytes_per_s * WINDOW_MS / 1000

    def _refill(self, now_ms: int) -> None:
        elapsed_ms = max(0, now_ms - self._at_ms)
        self._at_ms = max(self._at_ms, now_ms)
        self._tokens = min(
            self._capacity(), self._tokens + self.rate_bytes_per_s * elapsed_ms / 1000
        )

    @property
    def unlimited(self) -> bool:
        return self.rate_bytes_per_s >= UNLIMITED_RATE

    def set_rate(self, rate_bytes_per_s: int, now_ms: int) -> None:
        """A new rate; the debt or credit so far is kept, capped at the new window."""
        assert rate_bytes_per_s >= 0, rate_bytes_per_s
        if rate_bytes_per_s == self.rate_bytes_per_s:
            return
        self._refill(now_ms)
        was_unlimited = self.unlimited
        self.rate_bytes_per_s = rate_bytes_per_s
        self._tokens = self._capacity() if was_unlimited else min(self._tokens, self._capacity())

    def record(self, size_bytes: int, now_ms: int) -> None:
        assert size_bytes >= 0, size_bytes
        self.throttled_bytes += size_bytes
        if self.unlimited:
            return
        self._refill(now_ms)
        self._tokens -= size_bytes

    def exceeded(self, now_ms: int) -> bool:
        if self.unlimited:
            return False
        self._refill(now_ms)
        return self._tokens <= 0

    def delay_ms(self, now_ms: int) -> int:
        """How long until the quota is no longer exceeded (0 if it is not)."""
        if not self.exceeded(now_ms):
            return 0
        if self.rate_bytes_per_s == 0:
            return WINDOW_MS  # a zero rate never refills: look again in a window
        return max(1, math.ceil((1 - self._tokens) * 1000 / self.rate_bytes_per_s))


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | None:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on
    ``broker_id``; None means every partition (``*``). The controller validated it."""
    if not value:
        return frozenset()
    items = [i.strip() for i in value.split(",") if i.strip()]
    if items == ["*"]:
        return None
    out: set[int] = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if broker.strip() == str(broker_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotas:
    """Both of one broker's replication quotas and the partitions they apply to."""

    def __init__(self, broker_id: int, *, now_ms: int = 0) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota(now_ms=now_ms)
        self.follower = ReplicationQuota(now_ms=now_ms)
        # topic -> throttled partitions on this broker (None: all of them).
        self._leader_throttled: dict[str, frozenset[int] | None] = {}
        self._follower_throttled: dict[str, frozenset[int] | None] = {}

    def configure(
        self,
        broker_config: Mapping[str, str],
        topic_configs: Mapping[str, Mapping[str, str]],
        now_ms: int,
    ) -> None:
        """Committed configs: this broker's dynamic broker configs (its own over the
        cluster default) and every topic's overrides."""
        self.leader.set_rate(_rate(broker_config.get(LEADER_RATE)), now_ms)
        self.follower.set_rate(_rate(broker_config.get(FOLLOWER_RATE)), now_ms)
        self._leader_throttled = _throttled(topic_configs, LEADER_REPLICAS, self.broker_id)
        self._follower_throttled = _throttled(topic_configs, FOLLOWER_REPLICAS, self.broker_id)

    def leader_throttled(self, topic: str, partition: int) -> bool:
        return _listed(self._leader_throttled, topic, partition)

    def follower_throttled(self, topic: str, partition: int) -> bool:
        return _listed(self._follower_throttled, topic, partition)

    def health(self, now_ms: int) -> dict[str, object]:
        """``/health``'s view: each side's rate, whether it is exceeded, bytes counted."""
        return {
            side: {
                "rate_bytes_per_s": None if q.unlimited else q.rate_bytes_per_s,
                "exceeded": q.exceeded(now_ms),
                "throttled_bytes": q.throttled_bytes,
                # Topics with a replica of this broker throttled on this side.
                "throttled_topics": len(listed),
            }
            for side, q, listed in (
                ("leader", self.leader, self._leader_throttled),
                ("follower", self.follower, self._follower_throttled),
            )
        }


def _rate(value: str | None) -> int:
    # The controller accepts only a LONG >= 0; anything else is the default.
    try:
        rate = UNLIMITED_RATE if value is None else int(value)
    except ValueError:
        return UNLIMITED_RATE
    return rate if rate >= 0 else UNLIMITED_RATE


def _throttled(
    topic_configs: Mapping[str, Mapping[str, str]], key: str, broker_id: int
) -> dict[str, frozenset[int] | None]:
    out: dict[str, frozenset[int] | None] = {}
    for topic, config in topic_configs.items():
        parts = throttled_partitions(config.get(key), broker_id)
        if parts is None or parts:
            out[topic] = parts
    return out


def _listed(throttled: Mapping[str, frozenset[int] | None], topic: str, partition: int) -> bool:
    if topic not in throttled:
        return False
    parts = throttled[topic]
    return parts is None or partition in parts
