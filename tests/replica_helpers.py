"""Partition cores (``Replica``) driven by hand: build one over a log, make it lead or
follow, run one follower fetch round trip. Shared by test_partition and
test_partition_txn (test modules cannot import each other, ``--import-mode=importlib``)."""

from __future__ import annotations

from typing import Any

from raftka.broker.replication import MemoryPartitionLog, PartitionLog, Replica, ReplicationConfig
from raftka.common.errors import OffsetOutOfRangeError

REPLICAS = (1, 2, 3)


def core(broker: int, log: PartitionLog | None = None, *, min_isr: int = 1) -> Replica:
    return Replica(
        topic="t",
        partition=0,
        local_broker_id=broker,
        log=log if log is not None else MemoryPartitionLog(),
        config=ReplicationConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=1_000),
    )


def lead(r: Replica, *, epoch: int = 1, isr: tuple[int, ...] = REPLICAS, now_ms: int = 0) -> None:
    outcome = r.on_metadata_change(
        leader_id=r.state.local_broker_id,
        leader_epoch=epoch,
        partition_epoch=epoch,
        replicas=REPLICAS,
        isr=isr,
        now_ms=now_ms,
    )
    assert outcome.applied, outcome.reason


def follow(r: Replica, leader: int, *, epoch: int = 1, isr: tuple[int, ...] = REPLICAS) -> None:
    outcome = r.on_metadata_change(
        leader_id=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
        replicas=REPLICAS,
        isr=isr,
        now_ms=0,
    )
    assert outcome.applied, outcome.reason
    assert outcome.ready.fetch_from_leader == leader


def replicate(
    follower: Replica, leader: Replica, *, now_ms: int = 0, max_bytes: int = 1 << 20
) -> tuple[Any, Any]:
    """One fetch round trip from ``follower`` to ``leader``."""
    position = follower.fetch_position()
    read = leader.on_follower_fetch(
        replica_id=follower.state.local_broker_id,
        fetch_offset=position.fetch_offset,
        last_fetched_epoch=position.last_fetched_epoch,
        broker_epoch=1,
        registered_epoch=1,
        now_ms=now_ms,
        max_bytes=max_bytes,
        current_leader_epoch=position.leader_epoch,
        follower_log_start_offset=position.log_start_offset,
    )
    if isinstance(read.error, OffsetOutOfRangeError):
        follower.on_fetch_out_of_range(leader_log_start_offset=read.log_start_offset)
        return read, None
    assert read.error is None, read.error
    answer = follower.on_fetch_answer(
        records=read.records,
        leader_high_watermark=read.high_watermark,
        leader_log_start_offset=read.log_start_offset,
        diverging_epoch=read.diverging_epoch,
    )
    return read, answer
