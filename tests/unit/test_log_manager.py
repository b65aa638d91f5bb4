"""LogManager and the HW checkpoint file, on real files in a temp dir.

Checks: the checkpoint round-trips in Kafka's format and a malformed one reads as
empty; partitions live in ``<topic>-<partition>`` under the least-loaded log dir; a
log reopened after close keeps its records, and the HW checkpointed at close_all is
read back by a new manager; delete removes the directory.
"""

from __future__ import annotations

from pathlib import Path

from raftka.common.record import Record, build_batch
from raftka.storage import LogConfig
from raftka.storage.log_manager import (
    HW_CHECKPOINT_FILE,
    LogManager,
    read_hw_checkpoint,
    write_hw_checkpoint,
)


def test_checkpoint_round_trip_and_malformed(tmp_path: Path) -> None:
    """Offsets of topics with dashes and spaces-free names survive a write/read; a file
    with a wrong count or version reads as {} (HW 0 is safe)."""
    path = tmp_path / HW_CHECKPOINT_FILE
    offsets = {("a-b", 0): 5, ("a-b", 10): 0, ("c", 3): 123}
    write_hw_checkpoint(path, offsets)
    assert path.read_text().splitlines()[:2] == ["0", "3"]
    assert read_hw_checkpoint(path) == offsets
    path.write_text("0\n2\nc 3 1\n")
    assert read_hw_checkpoint(path) == {}
    path.write_text("1\n0\n")
    assert read_hw_checkpoint(path) == {}
    assert read_hw_checkpoint(tmp_path / "missing") == {}


def test_unclean_shutdown_is_noticed_at_start(tmp_path: Path) -> None:
    """A partition whose log was not closed (the process killed) makes the next manager
    report an unclean shutdown, which the broker tells the controller (it then drops
    the broker from every ELR); after close_all the next one reports a clean one."""
    dirs = (tmp_path / "d1",)
    assert not LogManager(dirs).unclean_shutdown  # nothing stored: nothing to lose
    logs = LogManager(dirs)
    logs.get_or_open(("t", 0), LogConfig()).append_as_leader(build_batch([Record(b"x")]), 0)
    assert LogManager(dirs).unclean_shutdown  # still open: as after kill -9
    logs.close_all()
    again = LogManager(dirs)
    assert not again.unclean_shutdown
    again.get_or_open(("t", 0), LogConfig())  # opening takes the marker away again
    assert LogManager(dirs).unclean_shutdown
    again.close_all()


def test_log_dirs_reopen_checkpoint_and_delete(tmp_path: Path) -> None:
    """Two log dirs get one partition each; records and the HW survive close_all and a
    new manager; delete removes the partition's directory."""
    dirs = (tmp_path / "d1", tmp_path / "d2")
    logs = LogManager(dirs)
    a = logs.get_or_open(("t", 0), LogConfig())
    b = logs.get_or_open(("t", 1), LogConfig())
    assert {a.path.parent, b.path.parent} == set(dirs)
    assert a.path.name == "t-0" and b.path.name == "t-1"
    a.append_as_leader(build_batch([Record(b"x"), Record(b"y")]), 0)
    a.update_high_watermark(2)
    logs.close_all()
    assert (a.path / ".kafka_cleanshutdown").exists()

    again = LogManager(dirs)
    assert again.stored() == [("t", 0), ("t", 1)]
    assert again.checkpointed_high_watermark(("t", 0)) == 2
    reopened = again.get_or_open(("t", 0), LogConfig())
    assert reopened.path == a.path and reopened.log_end_offset == 2
    # DescribeLogDirs' view: every dir, with the partitions it holds (open or not).
    assert again.stored_by_dir() == {a.path.parent: [("t", 0)], b.path.parent: [("t", 1)]}
    again.delete(("t", 0))
    assert not a.path.exists()
    assert again.stored() == [("t", 1)]
    assert again.stored_by_dir() == {a.path.parent: [], b.path.parent: [("t", 1)]}
    again.close_all()
    assert ("t", 0) not in LogManager(dirs).stored()
