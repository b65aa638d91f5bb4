"""What the core asks its driver to do, as frozen dataclasses, in order.

The driver carries out each batch of actions in list order. The ordering rules:

- ``PersistQuorumState`` must be durable (written and fsynced) before any later
  ``Send`` in the same batch leaves the node: a vote, a candidacy and a leadership
  count only once persisted.
- ``Flush`` asks for the log to be fsynced up to ``end_offset``; when that is done the
  driver calls ``QuorumCore.on_flushed(offset)`` with the offset it actually made
  durable (fsync covers the log as it is at that moment). The driver may do it later
  and may coalesce several flushes into one.
- ``Send`` is fire-and-forget: the network may lose it; the core retries on its own
  timers. Messages from the network go back in through ``QuorumCore.handle``.
- ``SnapshotInstalled``: the core already replaced the log through
  ``RaftLog.install_snapshot`` (which must be durable on return); the state machine
  reloads from that snapshot.
- The rest are notifications for the layers above.

Appends, truncations and snapshot installs are not actions: the core calls the
synchronous ``RaftLog``. Drive a core from one thread or task only, call ``tick``
often (every few ms; timers fire no earlier than the tick after they are due), and
feed ``on_flushed`` for every ``Flush``, or followers stop fetching.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.raft.quorum.messages import Message, SnapshotId


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    epoch: int
    voted_id: int | None
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class Flush:
    end_offset: int


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: Message


@dataclass(frozen=True, slots=True)
class HighWatermarkChanged:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """This node learnt the leader of ``epoch`` (``None``: no leader known yet)."""

    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class BecameLeader:
    """This node leads ``epoch``; its first entry of the epoch is at ``epoch_start_offset``."""

    epoch: int
    epoch_start_offset: int


@dataclass(frozen=True, slots=True)
class ResignedLeadership:
    """This node no longer leads ``epoch``; its pending proposals may or may not commit."""

    epoch: int


@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    """The log was replaced by a snapshot fetched from the leader: the state machine
    must reload from it (its entries below ``snapshot_id.end_offset`` are gone)."""

    snapshot_id: SnapshotId


Action = (
    PersistQuorumState
    | Flush
    | Send
    | HighWatermarkChanged
    | LeaderChanged
    | BecameLeader
    | ResignedLeadership
    | SnapshotInstalled
)
