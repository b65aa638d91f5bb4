"""The replication throttle's pure core (broker/replication/quota.py) and the plan
``raftka partitions reassign --throttle`` derives (client/cli/reassign.py), with time
passed in: the token bucket lets one second of the rate through, then holds throttled
replicas back until the debt of an oversized fetch is repaid, so the long-run rate is
the configured one; the throttled-replica lists parse Kafka's forms per broker."""

from __future__ import annotations

import pytest

from raftka.broker.replication.quota import (
    UNLIMITED_RATE,
    ReplicationQuota,
    ReplicationQuotas,
    throttled_partitions,
)
from raftka.client.cli.reassign import throttled_replicas
from raftka.common.structs import TopicPartition


def test_unlimited_quota_is_never_exceeded_but_counts_bytes() -> None:
    q = ReplicationQuota()
    q.record(10**12, now_ms=0)
    assert not q.exceeded(0) and q.delay_ms(0) == 0
    assert q.throttled_bytes == 10**12


def test_bucket_holds_one_second_then_refills_at_the_rate() -> None:
    q = ReplicationQuota(1000, now_ms=0)
    q.record(999, now_ms=0)
    assert not q.exceeded(0)
    q.record(1, now_ms=0)
    assert q.exceeded(0)
    assert q.delay_ms(0) == 1  # 1 byte of room after 1 ms
    assert not q.exceeded(1)
    # Idle time refills only up to one window: a long pause gives no larger burst.
    q.record(0, now_ms=60_000)
    q.record(1000, now_ms=60_000)
    assert q.exceeded(60_000)


def test_an_oversized_fetch_is_a_debt_repaid_at_the_rate() -> None:
    """A 5,000-byte answer at 1,000 B/s from a full bucket (one second's worth) holds
    throttled replicas back for the 4 s the rest took."""
    q = ReplicationQuota(1000, now_ms=0)
    q.record(5000, now_ms=0)
    assert q.delay_ms(3_000) == 1001
    assert q.exceeded(3_999)
    assert not q.exceeded(4_001)


@pytest.mark.parametrize("rate", [1, 1000, 200_000])
def test_long_run_rate_is_the_configured_one(rate: int) -> None:
    """Fetching whenever not exceeded, with answers of up to 3x the rate, moves at most
    rate * (seconds + 1) bytes: one window of burst plus the rate."""
    q = ReplicationQuota(rate, now_ms=0)
    moved = 0
    for now in range(0, 20_000, 7):
        if not q.exceeded(now):
            q.record(3 * rate, now)
            moved += 3 * rate
    assert moved <= rate * (20 + 1) + 3 * rate
    assert moved >= rate * 20 * 0.8  # and the throttle still lets the copy progress


def test_rate_changes_keep_the_debt_and_unlimited_clears_it() -> None:
    q = ReplicationQuota(1000, now_ms=0)
    q.record(3000, now_ms=0)
    q.set_rate(2000, now_ms=0)
    assert q.exceeded(0) and q.delay_ms(0) == 1001
    q.set_rate(UNLIMITED_RATE, now_ms=0)
    assert not q.exceeded(0)
    q.set_rate(1000, now_ms=0)  # from unlimited: a fresh full window
    q.record(999, now_ms=0)
    assert not q.exceeded(0)


def test_zero_rate_holds_back_until_changed() -> None:
    q = ReplicationQuota(0, now_ms=0)
    assert q.exceeded(0) and q.exceeded(10**9)
    assert q.delay_ms(0) == 1000


@pytest.mark.parametrize(
    ("value", "broker", "expected"),
    [
        (None, 1, frozenset()),
        ("", 1, frozenset()),
        ("*", 1, None),
        (" * ", 7, None),
        ("0:1,1:2,2:1", 1, frozenset({0, 2})),
        ("0:1, 1:2", 2, frozenset({1})),
        ("0:10", 1, frozenset()),
    ],
)
def test_throttled_partitions(value: str | None, broker: int, expected: object) -> None:
    assert throttled_partitions(value, broker) == expected


def test_quotas_follow_configs_and_name_only_listed_replicas() -> None:
    quotas = ReplicationQuotas(2)
    quotas.configure(
        {"leader.replication.throttled.rate": "100", "follower.replication.throttled.rate": "50"},
        {
            "a": {"leader.replication.throttled.replicas": "0:1,0:2"},
            "b": {"follower.replication.throttled.replicas": "*"},
            "c": {"retention.ms": "1"},
        },
        now_ms=0,
    )
    assert quotas.leader.rate_bytes_per_s == 100 and quotas.follower.rate_bytes_per_s == 50
    assert quotas.leader_throttled("a", 0) and not quotas.leader_throttled("a", 1)
    assert not quotas.follower_throttled("a", 0)
    assert quotas.follower_throttled("b", 9) and not quotas.leader_throttled("b", 9)
    assert not quotas.leader_throttled("c", 0)
    health = quotas.health(0)
    assert health["leader"] == {
        "rate_bytes_per_s": 100,
        "exceeded": False,
        "throttled_bytes": 0,
        "throttled_topics": 1,
    }
    # The configs removed (reassignment verified): back to unthrottled.
    quotas.configure({}, {}, now_ms=1)
    assert quotas.leader.unlimited and not quotas.leader_throttled("a", 0)
    assert quotas.health(1)["follower"]["rate_bytes_per_s"] is None  # type: ignore[index]


def test_reassign_throttles_current_replicas_as_leaders_and_adding_ones_as_followers() -> None:
    """kafka-reassign-partitions' lists: a moving partition's current replicas on the
    leader side, its adding replicas on the follower side; a reordering copies nothing."""
    t0, t1, u0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
    current = {t0: (101, 102), t1: (102, 103), u0: (101, 102)}
    target = {t0: (102, 104), t1: (103, 101, 104), u0: (102, 101)}
    assert throttled_replicas(current, target) == {
        "t": {
            "leader.replication.throttled.replicas": "0:101,0:102,1:102,1:103",
            "follower.replication.throttled.replicas": "0:104,1:101,1:104",
        }
    }
