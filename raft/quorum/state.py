"""Roles of a quorum member and the quorum state it must persist.

Theory of operation (a voter; an observer is only ever Unattached or Follower):

    Unattached --election timeout--> Prospective --majority pre-votes--> Candidate
    Voted      --election timeout--> Prospective
    Follower   --fetch timeout-----> Prospective (keeps fetching its old leader)
    Prospective --timeout/rejected--> Prospective (after a randomised backoff)
    Candidate  --majority votes----> Leader
    Candidate  --timeout/rejected--> Prospective (after a randomised backoff)
    Leader     --no fetch from a majority within fetch timeout, or resign()--> Resigned
    Resigned   --election timeout--> Prospective
    any        --higher epoch seen--> Unattached (or Follower when the leader is known)
    any        --BeginQuorumEpoch / fetch answered by the epoch's leader--> Follower

Epochs only grow. A pre-vote never moves anyone to the epoch it asks about (a node may
learn from it the epoch its sender is already in); a vote is granted at most once per
epoch and only counts once ``PersistQuorumState`` has been carried out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class QuorumRole(enum.Enum):
    UNATTACHED = "unattached"
    VOTED = "voted"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What must survive a restart (Kafka's quorum-state file): the epoch, whom this
    node voted for in it, and the leader it knows for it."""

    epoch: int = 0
    voted_id: int | None = None
    leader_id: int | None = None

    def __post_init__(self) -> None:
        assert self.epoch >= 0, self
