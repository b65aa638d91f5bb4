"""The persisted quorum state: Kafka's ``quorum-state`` file, as JSON.

Shape (Kafka's field names, version 0)::

    {"clusterId": "", "leaderId": 2, "leaderEpoch": 7, "votedId": -1,
     "appliedOffset": 0, "currentVoters": [{"voterId": 1}, ...], "data_version": 0}

``-1`` stands for "none". Written atomically on every ``PersistQuorumState`` (temp file,
fsync, rename, fsync of the directory), so a crash leaves the old or the new state.

Start-up rules (:func:`load_quorum_state`):

- missing file: the node never persisted a state, hence never voted (a vote leaves the
  node only after it is persisted): start fresh at epoch 0;
- unreadable file and an empty log: a fresh node (nothing to protect yet);
- unreadable file and a non-empty log: refuse to start
  (:class:`QuorumStateCorruptError`). The node may have voted in some epoch; guessing
  could let it vote twice in one epoch and elect two leaders.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import Final

import orjson

from raftka.raft.quorum.state import QuorumState
from raftka.storage.checkpoint import write_file_durably

QUORUM_STATE_FILE: Final = "quorum-state"
DATA_VERSION: Final = 0
_NONE: Final = -1

logger = logging.getLogger("raftka.raft.quorum")


class QuorumStateCorruptError(Exception):
    """The quorum-state file is unreadable while the log holds entries."""


def encode_quorum_state(state: QuorumState, voter_ids: Collection[int] = ()) -> bytes:
    return orjson.dumps(
        {
            "clusterId": "",
            "leaderId": _NONE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": _NONE if state.voted_id is None else state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in sorted(voter_ids)],
            "data_version": DATA_VERSION,
        }
    )


def decode_quorum_state(raw: bytes) -> QuorumState:
    """Parse the file's bytes; ValueError when they are not a valid version-0 state."""
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("data_version") != DATA_VERSION:
        raise ValueError(f"unknown data_version {d.get('data_version')!r}")
    values: list[int] = []
    for key in ("leaderEpoch", "leaderId", "votedId"):
        value = d.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < _NONE:
            raise ValueError(f"{key} must be an integer >= -1, got {value!r}")
        values.append(value)
    epoch, leader, voted = values
    if epoch < 0:
        raise ValueError(f"leaderEpoch must be >= 0, got {epoch}")
    return QuorumState(
        epoch,
        None if voted == _NONE else voted,
        None if leader == _NONE else leader,
    )


def write_quorum_state(
    directory: Path, state: QuorumState, voter_ids: Collection[int] = ()
) -> None:
    """Replace the quorum-state file atomically and durably."""
    write_file_durably(directory / QUORUM_STATE_FILE, encode_quorum_state(state, voter_ids))


def load_quorum_state(directory: Path, *, log_empty: bool) -> QuorumState:
    """The persisted state, following the start-up rules in the module docstring."""
    path = directory / QUORUM_STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return QuorumState()
    try:
        return decode_quorum_state(raw)
    except ValueError as e:
        if log_empty:
            logger.warning(
                "quorum-state file %s is unreadable (%s); the log is empty: "
                "starting as a fresh node",
                path,
                e,
            )
            return QuorumState()
        raise QuorumStateCorruptError(
            f"{path} is unreadable ({e}) but the metadata log in {directory} holds entries: "
            "refusing to start, since this node may have voted in an epoch it can no longer "
            "name. Restore the file, or wipe the directory to rejoin as an empty node."
        ) from None
