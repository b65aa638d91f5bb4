"""Regression: a follower truncating to its own log end drops a leader-epoch entry that
starts there (the fault suite's jepsen-2013 scenario found a follower wedged by it)."""

from __future__ import annotations

from pathlib import Path

from raftka.common.record import Record, build_batch
from raftka.storage import Log, LogConfig


def test_truncation_to_the_log_end_drops_a_newer_epoch_entry(tmp_path: Path) -> None:
    """Seen in the jepsen-2013 scenario: broker 102 led epoch 1 of a partition for a
    moment without appending (becoming leader assigns epoch 1 at its log end, 3 here),
    then followed broker 101, whose log has epochs 0, 2, 4 only. Asked about epoch 1,
    the leader answers "diverging: epoch 0 ends at 3"; the follower truncates to 3, its
    own log end. Its latest epoch must then be 0; if epoch 1 stays, every next fetch
    repeats the exchange (5,300 truncations in 40 s in the scenario, the follower busy
    looping and never rejoining the ISR)."""
    log = Log.open(tmp_path / "queue-1", LogConfig(), clock_ms=lambda: 0)
    try:
        batch = build_batch([Record(b"a"), Record(b"b"), Record(b"c")])
        log.append_as_leader(batch, leader_epoch=0)
        assert log.log_end_offset == 3
        log.leader_epoch_cache.assign(1, log.log_end_offset)  # became leader of epoch 1
        log.truncate_to(3)  # the leader's diverging answer: epoch 0 ends at 3
        assert log.leader_epoch_cache.latest_epoch == 0
    finally:
        log.close()
