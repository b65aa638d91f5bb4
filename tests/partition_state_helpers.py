"""A partition replica state leading ``t-0``, for the tests that drive one by hand
(test_partition_state and the DeleteRecords checks of test_cli_tools). Test modules
cannot import each other (``--import-mode=importlib``), so what they share lives here,
on pytest's ``pythonpath``."""

from __future__ import annotations

from pathlib import Path

from raftka.broker.replication import PartitionState, ReplicationConfig
from raftka.storage.epoch_cache import LeaderEpochFileCache

#: replica.lag.time.max.ms of the states built here (Kafka's default).
LAG_MS = 30_000


def cache(*entries: tuple[int, int]) -> LeaderEpochFileCache:
    """A leader-epoch cache held in memory (never flushed) with these entries."""
    return LeaderEpochFileCache(Path("unused-leader-epoch-checkpoint"), list(entries))


def leader(
    *,
    leo: int = 0,
    hw: int = 0,
    epoch: int = 1,
    isr: tuple[int, ...] = (1, 2, 3),
    min_isr: int = 1,
    epochs: LeaderEpochFileCache | None = None,
    now_ms: int = 0,
) -> tuple[PartitionState, LeaderEpochFileCache]:
    """Broker 1 leading t-0 with replicas 1, 2, 3 at ``epoch``; the epoch cache gets
    the new epoch's start offset as the shell would write it."""
    epochs = epochs if epochs is not None else cache()
    state = PartitionState(
        topic="t",
        partition=0,
        local_broker_id=1,
        epochs=epochs,
        log_end_offset=leo,
        high_watermark=hw,
        config=ReplicationConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=LAG_MS),
    )
    change = state.make_leader(
        leader_epoch=epoch, partition_epoch=epoch, replicas=(1, 2, 3), isr=isr, now_ms=now_ms
    )
    assert change.applied and change.assign_epoch_start_offset == (epoch, leo)
    epochs.assign(epoch, leo, persist=False)
    return state, epochs
