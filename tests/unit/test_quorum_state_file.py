"""Unit tests of the quorum-state file: round trip, Kafka's JSON shape, start-up rules.

Real files in tmp_path. Checks that every state round-trips, that the file uses
Kafka's field names with -1 for "none", that a missing file starts a fresh node, that
an unreadable file is a fresh node only when the log is empty and otherwise refuses
to start with a clear error, and that a failed write leaves the old file intact.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from raftka.raft.quorum import QuorumState
from raftka.raft.quorum.quorum_state_file import (
    QUORUM_STATE_FILE,
    QuorumStateCorruptError,
    decode_quorum_state,
    load_quorum_state,
    write_quorum_state,
)


@pytest.mark.parametrize(
    "state",
    [QuorumState(), QuorumState(3, 2, None), QuorumState(4, 1, 1), QuorumState(9, None, 3)],
)
def test_round_trip(tmp_path: Path, state: QuorumState) -> None:
    """What is written is what is read, whichever fields are None."""
    write_quorum_state(tmp_path, state, [1, 2, 3])
    assert load_quorum_state(tmp_path, log_empty=False) == state
    assert not (tmp_path / (QUORUM_STATE_FILE + ".tmp")).exists()


def test_kafka_shape(tmp_path: Path) -> None:
    """Kafka's field names; -1 stands for none; data_version 0; the voters listed."""
    write_quorum_state(tmp_path, QuorumState(7, None, 2), [3, 1, 2])
    d = orjson.loads((tmp_path / QUORUM_STATE_FILE).read_bytes())
    assert d["leaderEpoch"] == 7 and d["leaderId"] == 2 and d["votedId"] == -1
    assert d["data_version"] == 0
    assert d["currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]


def test_missing_file_is_a_fresh_node(tmp_path: Path) -> None:
    """Never persisted means never voted: epoch 0, whatever the log holds."""
    assert load_quorum_state(tmp_path, log_empty=True) == QuorumState()
    assert load_quorum_state(tmp_path, log_empty=False) == QuorumState()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{torn",
        b"[]",
        b'{"leaderEpoch": 3, "leaderId": 1, "votedId": -1}',  # no data_version
        b'{"leaderEpoch": "3", "leaderId": 1, "votedId": -1, "data_version": 0}',
        b'{"leaderEpoch": -1, "leaderId": 1, "votedId": -1, "data_version": 0}',
        b'{"leaderEpoch": 3, "leaderId": 1, "votedId": -1, "data_version": 7}',
    ],
)
def test_corrupt_file_rules(tmp_path: Path, raw: bytes) -> None:
    """Unreadable + empty log: fresh node; unreadable + entries: refuse, say why."""
    (tmp_path / QUORUM_STATE_FILE).write_bytes(raw)
    assert load_quorum_state(tmp_path, log_empty=True) == QuorumState()
    with pytest.raises(QuorumStateCorruptError, match="refusing to start"):
        load_quorum_state(tmp_path, log_empty=False)


def test_decode_rejects_bool_ids() -> None:
    """JSON true is not a node id (Python would treat it as 1)."""
    with pytest.raises(ValueError):
        decode_quorum_state(
            b'{"leaderEpoch": 1, "leaderId": true, "votedId": -1, "data_version": 0}'
        )


def test_failed_write_keeps_the_old_state(tmp_path: Path) -> None:
    """The write goes through a temp file: when that cannot be written (here a directory
    squats its name), the call raises and the previous state is still what is read."""
    write_quorum_state(tmp_path, QuorumState(2, 1, None))
    (tmp_path / (QUORUM_STATE_FILE + ".tmp")).mkdir()
    with pytest.raises(OSError):
        write_quorum_state(tmp_path, QuorumState(5, 5, 5))
    assert load_quorum_state(tmp_path, log_empty=False) == QuorumState(2, 1, None)
