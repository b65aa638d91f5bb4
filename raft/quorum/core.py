"""KRaft's Raft (KIP-595, pre-vote as in KIP-996) as a pure state machine.

``QuorumCore`` reads no clock, opens no socket or file and draws no randomness of its
own: time arrives as ``now_ms`` on every input, randomness from the ``random.Random``
it is given, and everything it wants done leaves as a list of actions (see
``actions``) that the driver carries out in order. The only side effect it has is on
the synchronous ``RaftLog`` it is given (append, truncate, install a snapshot): see
``log`` for why.

Replication is pull-based: followers and observers send ``FetchRequest`` to the leader,
which learns each voter's log end offset from the fetch offset. Followers fetch the
next range only once what they have is flushed, so a fetch offset always names durable
entries; the leader counts its own log only up to what the driver reported flushed.
The high watermark (exclusive) moves when a majority of voters holds an entry of the
leader's current epoch, and never backwards. A follower takes the leader's high
watermark (capped at its own log end) only from an answer that proved its log a prefix
of the leader's: never from a diverging-epoch answer.

A replica whose fetch offset lies below the leader's log start (the prefix was
snapshotted, KIP-630) is answered with the snapshot id, fetches the snapshot in chunks
with ``FetchSnapshotRequest``, installs it through the log and reports
``SnapshotInstalled``; the core treats snapshot contents as opaque bytes.

Inputs: ``tick``, ``handle``, ``propose``, ``on_flushed``, ``resign``. Each returns the
actions it produced. Not thread safe: drive one core from one thread or task.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from raftka.common.structs import EpochEndOffset
from raftka.raft.quorum import actions as act
from raftka.raft.quorum import messages as msg
from raftka.raft.quorum.messages import (
    FENCED_LEADER_EPOCH,
    NOT_LEADER_OR_FOLLOWER,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
)
from raftka.raft.quorum.raft_log import RaftLog
from raftka.raft.quorum.state import QuorumRole, QuorumState
from raftka.server_common.quorum_config import QuorumConfig

# The backoff after a lost election doubles from this up to election_backoff_max_ms.
_BACKOFF_BASE_MS = 50
_BACKOFF_DOUBLINGS_MAX = 10
# Bound on the observers a leader tracks (and so on the fetches it parks).
_OBSERVERS_MAX = 1024


@dataclass(frozen=True, slots=True)
class Proposed:
    """``propose`` accepted: the records sit at ``[first_offset, end_offset)`` in
    ``epoch``; they are committed once the high watermark reaches ``end_offset``
    while this node still leads ``epoch`` (a later leader may drop them)."""

    epoch: int
    first_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    """``propose`` refused: this node does not lead. ``leader_id`` is who does, if known
    (Kafka's NOT_LEADER_OR_FOLLOWER / NOT_CONTROLLER)."""

    epoch: int
    leader_id: int | None


@dataclass(slots=True)
class _ReplicaProgress:
    """What a leader knows of one fetching replica."""

    end_offset: int = 0
    last_fetch_ms: int = 0
    last_sent_high_watermark: int = -1
    begin_epoch_sent_ms: int | None = None


class QuorumCore:
    """One quorum member (voter, or observer when ``node_id`` is not a voter)."""

    # Deliberately broken rules, only for tests that prove the simulation's checker
    # catches real bugs. Never set outside tests.
    _unsafe_skip_vote_log_check: bool = False
    _unsafe_commit_previous_epoch: bool = False
    _unsafe_send_vote_before_persist: bool = False

    def __init__(
        self,
        *,
        node_id: int,
        voter_ids: Collection[int],
        log: RaftLog,
        state: QuorumState,
        config: QuorumConfig,
        rng: random.Random,
        now_ms: int,
    ) -> None:
        assert voter_ids, "a quorum needs at least one voter"
        self._id = node_id
        self._voters = frozenset(voter_ids)
        self._voter_order = tuple(sorted(self._voters))
        self._is_voter = node_id in self._voters
        self._majority = len(self._voters) // 2 + 1
        self._log = log
        self._config = config
        self._rng = rng
        self._out: list[act.Action] = []

        self._epoch = state.epoch
        self._voted_id = state.voted_id
        self._leader_id = state.leader_id
        # Everything the log holds at start-up survived a restart: it is durable.
        self._flushed = log.end_offset
        self._hw = 0  # re-learnt from the leader after a restart

        self._election_deadline_ms = now_ms
        self._backoff_attempts = 0
        self._granted: set[int] = set()
        self._rejected: set[int] = set()

        self._leader_contact_ms = now_ms
        self._leader_resigned = False
        self._fetch_sent_ms: int | None = None
        self._snapshot_fetch: tuple[msg.SnapshotId, bytearray] | None = None
        self._bootstrap_index = 0

        self._epoch_start_offset = 0
        self._replicas: dict[int, _ReplicaProgress] = {}  # the other voters
        self._observers: dict[int, _ReplicaProgress] = {}
        self._parked: dict[int, tuple[msg.FetchRequest, int]] = {}
        self._linger_deadline_ms: int | None = None
        self._end_epoch_pending: set[int] = set()
        self._end_epoch_sent_ms = now_ms
        self._successors: tuple[int, ...] = ()

        if self._leader_id == self._id:
            # We led this epoch before the restart; we cannot know what we promised,
            # so we resign and let the quorum elect (possibly us again, later).
            self._role = QuorumRole.RESIGNED
            self._reset_election_timer(now_ms)
        elif self._leader_id is not None:
            self._role = QuorumRole.FOLLOWER
        elif self._voted_id is not None:
            self._role = QuorumRole.VOTED
            self._reset_election_timer(now_ms)
        else:
            self._role = QuorumRole.UNATTACHED
            self._reset_election_timer(now_ms)
        self._check()

    # ------------------------------------------------------------------ queries

    @property
    def node_id(self) -> int:
        return self._id

    @property
    def role(self) -> QuorumRole:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def voted_id(self) -> int | None:
        return self._voted_id

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def quorum_state(self) -> QuorumState:
        return QuorumState(self._epoch, self._voted_id, self._leader_id)

    def read_index(self) -> int | None:
        """For a linearisable read on the leader: the offset the state machine must
        have applied before it answers, or ``None`` when this node cannot serve one
        yet (not the leader, or its high watermark does not yet cover an entry of its
        own epoch, so it does not know what earlier leaders committed)."""
        if self._role is not QuorumRole.LEADER or self._hw <= self._epoch_start_offset:
            return None
        return self._hw

    # ------------------------------------------------------------------ inputs

    def tick(self, now_ms: int) -> list[act.Action]:
        """Advance time: fire election, fetch, linger and retry timers that are due."""
        role = self._role
        if role is QuorumRole.LEADER:
            self._tick_leader(now_ms)
        elif role is QuorumRole.FOLLOWER:
            contact_lost = now_ms >= self._leader_contact_ms + self._config.fetch_timeout_ms
            resigned_due = self._leader_resigned and now_ms >= self._election_deadline_ms
            if contact_lost or resigned_due:
                if self._is_voter:
                    self._become_prospective(now_ms)
                else:
                    self._observer_lose_leader(now_ms)
            else:
                self._maybe_refetch(now_ms)
        elif role in (QuorumRole.UNATTACHED, QuorumRole.VOTED):
            if not self._is_voter:
                self._maybe_refetch(now_ms)
            elif now_ms >= self._election_deadline_ms:
                self._become_prospective(now_ms)
        elif role is QuorumRole.PROSPECTIVE:
            if now_ms >= self._election_deadline_ms:
                self._become_prospective(now_ms)
            elif self._leader_id is not None:
                self._maybe_refetch(now_ms)
        elif role is QuorumRole.CANDIDATE:
            if now_ms >= self._election_deadline_ms:
                self._become_prospective(now_ms)
        else:
            assert role is QuorumRole.RESIGNED
            if now_ms >= self._election_deadline_ms:
                self._become_prospective(now_ms)
            elif now_ms >= self._end_epoch_sent_ms + self._config.request_timeout_ms:
                self._send_end_quorum_epoch(now_ms)
        return self._drain()

    def handle(self, message: msg.Message, now_ms: int) -> list[act.Action]:
        """Process one message from the network."""
        if message.sender_id == self._id:
            return self._drain()  # never talk to ourselves; a misrouted frame
        self._observe_epoch(message, now_ms)
        if isinstance(message, msg.VoteRequest):
            self._on_vote_request(message, now_ms)
        elif isinstance(message, msg.VoteResponse):
            self._on_vote_response(message, now_ms)
        elif isinstance(message, msg.FetchRequest):
            self._on_fetch_request(message, now_ms)
        elif isinstance(message, msg.FetchResponse):
            self._on_fetch_response(message, now_ms)
        elif isinstance(message, msg.FetchSnapshotRequest):
            self._on_fetch_snapshot_request(message, now_ms)
        elif isinstance(message, msg.FetchSnapshotResponse):
            self._on_fetch_snapshot_response(message, now_ms)
        elif isinstance(message, msg.BeginQuorumEpochRequest):
            self._on_begin_quorum_epoch(message, now_ms)
        elif isinstance(message, msg.EndQuorumEpochRequest):
            self._on_end_quorum_epoch(message, now_ms)
        elif isinstance(message, msg.BeginQuorumEpochResponse):
            if self._role is QuorumRole.LEADER and message.epoch == self._epoch:
                progress = self._replicas.get(message.sender_id)
                if progress is not None:
                    progress.begin_epoch_sent_ms = None
        elif isinstance(message, msg.EndQuorumEpochResponse):
            if message.epoch == self._epoch:
                self._end_epoch_pending.discard(message.sender_id)
        else:
            raise TypeError(f"not a quorum message: {message!r}")
        return self._drain()

    def propose(
        self, payloads: Sequence[bytes], now_ms: int
    ) -> tuple[Proposed | NotLeader, list[act.Action]]:
        """Append records as the leader. Refused (``NotLeader``) on any other node."""
        if self._role is not QuorumRole.LEADER:
            return NotLeader(self._epoch, self._leader_id), self._drain()
        first = self._log.end_offset
        entries = [msg.Entry(first + i, self._epoch, p) for i, p in enumerate(payloads)]
        self._log.append(entries)
        if self._config.append_linger_ms == 0:
            self._out.append(act.Flush(self._log.end_offset))
        elif self._linger_deadline_ms is None:
            self._linger_deadline_ms = now_ms + self._config.append_linger_ms
        self._answer_parked(now_ms, only_expired=False)
        return Proposed(self._epoch, first, self._log.end_offset), self._drain()

    def on_flushed(self, offset: int, now_ms: int) -> list[act.Action]:
        """The driver made the log durable below ``offset`` (as the log is now)."""
        offset = min(offset, self._log.end_offset)
        if offset > self._flushed:
            self._flushed = offset
            if self._role is QuorumRole.LEADER:
                self._advance_high_watermark(now_ms)
            elif (
                self._fetch_sent_ms is None
                and self._flushed == self._log.end_offset  # a fetch offset is durable
                and self._fetching_role()
            ):
                self._send_fetch(now_ms)
        return self._drain()

    def resign(self, now_ms: int) -> list[act.Action]:
        """Step down gracefully (controlled shutdown): the best follower runs first."""
        if self._role is QuorumRole.LEADER:
            self._resign(now_ms)
        return self._drain()

    # ------------------------------------------------------------------ epochs

    def _observe_epoch(self, message: msg.Message, now_ms: int) -> None:
        """Move to a higher epoch a message reveals; learn the leader of ours."""
        if isinstance(message, msg.VoteRequest) and message.pre_vote:
            # A pre-vote never moves anyone to the epoch it asks about; but its sender
            # really is in the epoch before that one, and a node stuck in a higher
            # epoch than the leader's (a lost candidacy) could otherwise never rejoin.
            sender_epoch = message.epoch - 1
            if sender_epoch > self._epoch:
                self._become_unattached(sender_epoch, now_ms)
            return
        if isinstance(message, msg.FetchRequest | msg.FetchSnapshotRequest):
            return  # nor does a fetch: it is answered UNKNOWN_LEADER_EPOCH below
        leader: int | None = None
        if isinstance(message, msg.BeginQuorumEpochRequest):
            leader = message.sender_id
        elif isinstance(
            message,
            msg.VoteResponse
            | msg.BeginQuorumEpochResponse
            | msg.EndQuorumEpochResponse
            | msg.FetchResponse
            | msg.FetchSnapshotResponse,
        ):
            leader = message.leader_id
        if leader == self._id:
            leader = None
        if message.epoch > self._epoch:
            if leader is not None:
                self._become_follower(message.epoch, leader, now_ms)
            else:
                self._become_unattached(message.epoch, now_ms)
        elif (
            message.epoch == self._epoch
            and leader is not None
            and self._leader_id is None
            and self._role not in (QuorumRole.LEADER, QuorumRole.RESIGNED)
        ):
            self._become_follower(self._epoch, leader, now_ms)

    def _leave_leadership(self) -> None:
        if self._role is QuorumRole.LEADER:
            self._out.append(act.ResignedLeadership(self._epoch))
        self._parked.clear()
        self._replicas.clear()
        self._observers.clear()
        if self._linger_deadline_ms is not None:
            # Flush what we appended while lingering: as a follower we fetch again
            # only once our log is durable.
            self._linger_deadline_ms = None
            self._out.append(act.Flush(self._log.end_offset))
        self._end_epoch_pending.clear()

    def _persist(self) -> None:
        self._out.append(act.PersistQuorumState(self._epoch, self._voted_id, self._leader_id))

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        assert epoch > self._epoch, (epoch, self._epoch)
        self._leave_leadership()
        self._role = QuorumRole.UNATTACHED
        self._epoch = epoch
        self._voted_id = None
        self._leader_id = None
        self._leader_resigned = False
        self._fetch_sent_ms = None
        self._snapshot_fetch = None
        self._persist()
        self._out.append(act.LeaderChanged(epoch, None))
        self._reset_election_timer(now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        assert epoch >= self._epoch, (epoch, self._epoch)
        assert leader_id != self._id
        if epoch == self._epoch:
            # One leader per epoch: we may learn it, never replace it.
            assert self._leader_id in (None, leader_id), (self._leader_id, leader_id)
            assert self._role not in (QuorumRole.LEADER, QuorumRole.RESIGNED), self._role
        else:
            self._voted_id = None
        self._leave_leadership()
        self._role = QuorumRole.FOLLOWER
        self._epoch = epoch
        self._leader_id = leader_id
        self._leader_resigned = False
        self._leader_contact_ms = now_ms
        self._fetch_sent_ms = None
        self._persist()
        self._out.append(act.LeaderChanged(epoch, leader_id))
        if self._flushed == self._log.end_offset:
            self._send_fetch(now_ms)

    def _observer_lose_leader(self, now_ms: int) -> None:
        """An observer that stopped hearing its leader looks for one among the voters."""
        self._role = QuorumRole.UNATTACHED
        self._leader_id = None
        self._fetch_sent_ms = None
        self._maybe_refetch(now_ms)

    # ------------------------------------------------------------------ elections

    def _reset_election_timer(self, now_ms: int) -> None:
        timeout = self._config.election_timeout_ms
        self._election_deadline_ms = now_ms + self._rng.randrange(timeout, 2 * timeout)

    def _backoff(self, now_ms: int) -> None:
        """After a lost round wait a random, growing while, then run again."""
        self._backoff_attempts = min(self._backoff_attempts + 1, _BACKOFF_DOUBLINGS_MAX)
        cap = min(self._config.election_backoff_max_ms, _BACKOFF_BASE_MS << self._backoff_attempts)
        self._election_deadline_ms = now_ms + self._rng.randint(1, cap)

    def _log_is_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        if self._unsafe_skip_vote_log_check:
            return True
        return (last_epoch, end_offset) >= (self._log.last_epoch, self._log.end_offset)

    def _has_live_leader(self, now_ms: int) -> bool:
        if self._role is QuorumRole.LEADER:
            return True
        return (
            self._leader_id is not None
            and self._role in (QuorumRole.FOLLOWER, QuorumRole.PROSPECTIVE)
            and not self._leader_resigned
            and now_ms < self._leader_contact_ms + self._config.fetch_timeout_ms
        )

    def _become_prospective(self, now_ms: int) -> None:
        assert self._is_voter
        self._leave_leadership()
        self._role = QuorumRole.PROSPECTIVE
        self._granted = {self._id}
        self._rejected = set()
        self._reset_election_timer(now_ms)
        if len(self._granted) >= self._majority:
            self._become_candidate(now_ms)
            return
        request = msg.VoteRequest(
            self._id, self._epoch + 1, self._log.last_epoch, self._log.end_offset, pre_vote=True
        )
        for voter in self._voter_order:
            if voter != self._id:
                self._out.append(act.Send(voter, request))
        if self._leader_id is not None and self._fetch_sent_ms is None:
            self._send_fetch(now_ms)  # keep asking the old leader: it may be fine

    def _become_candidate(self, now_ms: int) -> None:
        self._role = QuorumRole.CANDIDATE
        self._epoch += 1
        self._voted_id = self._id
        self._leader_id = None
        self._leader_resigned = False
        self._fetch_sent_ms = None
        self._snapshot_fetch = None
        self._granted = {self._id}
        self._rejected = set()
        self._persist()
        self._out.append(act.LeaderChanged(self._epoch, None))
        self._reset_election_timer(now_ms)
        if len(self._granted) >= self._majority:
            self._become_leader(now_ms)
            return
        request = msg.VoteRequest(
            self._id, self._epoch, self._log.last_epoch, self._log.end_offset, pre_vote=False
        )
        for voter in self._voter_order:
            if voter != self._id:
                self._out.append(act.Send(voter, request))

    def _become_leader(self, now_ms: int) -> None:
        assert self._role is QuorumRole.CANDIDATE and self._voted_id == self._id
        self._role = QuorumRole.LEADER
        self._leader_id = self._id
        self._backoff_attempts = 0
        self._persist()
        self._epoch_start_offset = self._log.end_offset
        change = json.dumps({"leader_id": self._id, "voters": list(self._voter_order)})
        self._log.append([msg.Entry(self._epoch_start_offset, self._epoch, change.encode(), True)])
        self._out.append(act.Flush(self._log.end_offset))
        self._replicas = {
            v: _ReplicaProgress(last_fetch_ms=now_ms) for v in self._voter_order if v != self._id
        }
        self._out.append(act.LeaderChanged(self._epoch, self._id))
        self._out.append(act.BecameLeader(self._epoch, self._epoch_start_offset))
        for voter, progress in self._replicas.items():
            progress.begin_epoch_sent_ms = now_ms
            self._out.append(act.Send(voter, msg.BeginQuorumEpochRequest(self._id, self._epoch)))

    def _resign(self, now_ms: int) -> None:
        ranked = sorted(self._replicas.items(), key=lambda item: (-item[1].end_offset, item[0]))
        self._successors = tuple(voter for voter, _ in ranked)
        self._leave_leadership()
        self._role = QuorumRole.RESIGNED
        self._end_epoch_pending = set(self._successors)
        self._reset_election_timer(now_ms)
        self._send_end_quorum_epoch(now_ms)

    def _send_end_quorum_epoch(self, now_ms: int) -> None:
        self._end_epoch_sent_ms = now_ms
        request = msg.EndQuorumEpochRequest(self._id, self._epoch, self._successors)
        for voter in sorted(self._end_epoch_pending):
            self._out.append(act.Send(voter, request))

    def _on_vote_request(self, request: msg.VoteRequest, now_ms: int) -> None:
        sender = request.sender_id
        log_ok = self._log_is_up_to_date(request.last_epoch, request.last_epoch_end_offset)
        eligible = self._is_voter and sender in self._voters
        if request.pre_vote:
            granted = (
                eligible
                and request.epoch > self._epoch
                and log_ok
                and not self._has_live_leader(now_ms)
            )
        else:
            granted = (
                eligible
                and request.epoch == self._epoch
                and self._role in (QuorumRole.UNATTACHED, QuorumRole.VOTED, QuorumRole.PROSPECTIVE)
                and self._leader_id is None
                and self._voted_id in (None, sender)
                and log_ok
            )
            if granted and self._voted_id is None:
                self._voted_id = sender
                self._role = QuorumRole.VOTED
                if not self._unsafe_send_vote_before_persist:
                    self._persist()  # carried out before the Send below: durable first
                self._reset_election_timer(now_ms)
        error = FENCED_LEADER_EPOCH if request.epoch < self._epoch else None
        response = msg.VoteResponse(
            self._id,
            self._epoch,
            self._leader_id,
            vote_granted=granted,
            pre_vote=request.pre_vote,
            candidate_epoch=request.epoch,
            error=error,
        )
        self._out.append(act.Send(sender, response))
        if self._unsafe_send_vote_before_persist and granted and not request.pre_vote:
            self._persist()

    def _on_vote_response(self, response: msg.VoteResponse, now_ms: int) -> None:
        if response.sender_id not in self._voters:
            return
        if self._role is QuorumRole.PROSPECTIVE:
            if not response.pre_vote or response.candidate_epoch != self._epoch + 1:
                return
        elif self._role is QuorumRole.CANDIDATE:
            if response.pre_vote or response.candidate_epoch != self._epoch:
                return
        else:
            return
        if response.vote_granted:
            self._granted.add(response.sender_id)
            self._rejected.discard(response.sender_id)
        else:
            self._rejected.add(response.sender_id)
            self._granted.discard(response.sender_id)
        if len(self._granted) >= self._majority:
            if self._role is QuorumRole.PROSPECTIVE:
                self._become_candidate(now_ms)
            else:
                self._become_leader(now_ms)
        elif len(self._rejected) > len(self._voters) - self._majority:
            self._backoff(now_ms)  # lost: wait, then a fresh pre-vote round

    # ------------------------------------------------------------------ leader

    def _tick_leader(self, now_ms: int) -> None:
        if self._linger_deadline_ms is not None and now_ms >= self._linger_deadline_ms:
            self._linger_deadline_ms = None
            self._out.append(act.Flush(self._log.end_offset))
        self._answer_parked(now_ms, only_expired=True)
        horizon = now_ms - self._config.fetch_timeout_ms
        heard = 1 + sum(1 for p in self._replicas.values() if p.last_fetch_ms > horizon)
        if heard < self._majority:
            self._resign(now_ms)  # we may be the minority side of a partition
            return
        for voter, progress in self._replicas.items():
            sent = progress.begin_epoch_sent_ms
            if sent is not None and now_ms >= sent + self._config.request_timeout_ms:
                progress.begin_epoch_sent_ms = now_ms
                self._out.append(
                    act.Send(voter, msg.BeginQuorumEpochRequest(self._id, self._epoch))
                )

    def _advance_high_watermark(self, now_ms: int) -> None:
        offsets = sorted(
            [self._flushed, *(p.end_offset for p in self._replicas.values())], reverse=True
        )
        candidate = offsets[self._majority - 1]
        own_epoch = candidate > self._epoch_start_offset or self._unsafe_commit_previous_epoch
        if candidate > self._hw and own_epoch:
            self._hw = candidate
            self._out.append(act.HighWatermarkChanged(candidate))
            self._answer_parked(now_ms, only_expired=False)

    def _diverging(self, request: msg.FetchRequest) -> EpochEndOffset | None:
        if request.fetch_offset == 0 and request.last_fetched_epoch == 0:
            return None
        found = self._log.end_offset_for_epoch(request.last_fetched_epoch)
        if found.epoch != request.last_fetched_epoch or found.end_offset < request.fetch_offset:
            return found
        return None

    def _on_fetch_request(self, request: msg.FetchRequest, now_ms: int) -> None:
        sender = request.sender_id
        if self._role is not QuorumRole.LEADER or request.epoch != self._epoch:
            if request.epoch < self._epoch:
                error = FENCED_LEADER_EPOCH
            elif request.epoch > self._epoch:
                error = UNKNOWN_LEADER_EPOCH  # the fetcher is ahead of us
            else:
                error = NOT_LEADER_OR_FOLLOWER
            self._out.append(act.Send(sender, self._fetch_response(request, error=error)))
            return
        progress = self._progress_of(sender)
        if progress is None:
            return  # too many observers to track: drop; they retry
        progress.last_fetch_ms = now_ms
        progress.begin_epoch_sent_ms = None
        diverging = self._diverging(request)
        below_start = request.fetch_offset < self._log.start_offset or (
            diverging is not None and diverging.end_offset < self._log.start_offset
        )
        if below_start:
            # What the replica needs is only in our snapshot: it fetches that first.
            snapshot_id = self._log.latest_snapshot_id
            assert snapshot_id is not None, "log start above 0 without a snapshot"
            self._out.append(
                act.Send(sender, self._fetch_response(request, snapshot_id=snapshot_id))
            )
            return
        if diverging is not None:
            self._out.append(act.Send(sender, self._fetch_response(request, diverging=diverging)))
            return
        assert request.fetch_offset <= self._log.end_offset, request
        progress.end_offset = request.fetch_offset
        if sender in self._voters:
            self._advance_high_watermark(now_ms)
        nothing_new = (
            request.fetch_offset == self._log.end_offset
            and progress.last_sent_high_watermark == self._hw
        )
        if nothing_new and self._config.fetch_max_wait_ms > 0:
            self._parked[sender] = (request, now_ms + self._config.fetch_max_wait_ms)
            return
        self._respond_to_fetch(request)

    def _progress_of(self, replica_id: int) -> _ReplicaProgress | None:
        """A voter's progress, or an observer's (tracked only to long-poll it)."""
        progress = self._replicas.get(replica_id) or self._observers.get(replica_id)
        if progress is None and replica_id not in self._voters:
            if len(self._observers) >= _OBSERVERS_MAX:
                return None
            progress = self._observers[replica_id] = _ReplicaProgress()
        return progress

    def _respond_to_fetch(self, request: msg.FetchRequest) -> None:
        self._parked.pop(request.sender_id, None)
        entries = self._within_fetch_bytes(
            self._log.read(request.fetch_offset, self._config.fetch_max_records)
        )
        progress = self._progress_of(request.sender_id)
        if progress is not None:
            progress.last_sent_high_watermark = self._hw
        self._out.append(
            act.Send(request.sender_id, self._fetch_response(request, entries=entries))
        )

    def _within_fetch_bytes(self, entries: Sequence[msg.Entry]) -> tuple[msg.Entry, ...]:
        """The longest prefix within fetch_max_bytes of payload, at least one entry."""
        budget = self._config.fetch_max_bytes
        for i, entry in enumerate(entries):
            budget -= len(entry.payload)
            if budget < 0 and i > 0:
                return tuple(entries[:i])
        return tuple(entries)

    def _answer_parked(self, now_ms: int, *, only_expired: bool) -> None:
        for request, deadline_ms in list(self._parked.values()):
            if not only_expired or now_ms >= deadline_ms:
                self._respond_to_fetch(request)

    def _fetch_response(
        self,
        request: msg.FetchRequest,
        *,
        entries: tuple[msg.Entry, ...] = (),
        diverging: EpochEndOffset | None = None,
        error: str | None = None,
        snapshot_id: msg.SnapshotId | None = None,
    ) -> msg.FetchResponse:
        return msg.FetchResponse(
            self._id,
            self._epoch,
            self._leader_id,
            request.fetch_offset,
            request.last_fetched_epoch,
            self._hw,
            entries,
            diverging,
            error,
            snapshot_id,
        )

    # ------------------------------------------------------------------ followers

    def _fetching_role(self) -> bool:
        if self._leader_id is None:
            return not self._is_voter  # an observer looks for the leader
        return self._role in (QuorumRole.FOLLOWER, QuorumRole.PROSPECTIVE)

    def _send_fetch(self, now_ms: int) -> None:
        """Fetch from the leader (or, for an observer that knows none, from a voter).

        A fetch offset tells the leader "I hold this durably", so a plain fetch waits
        until the log is flushed to its end (``on_flushed`` sends it then).
        """
        self._drop_queued_fetches()
        request: msg.Message
        if self._snapshot_fetch is not None and self._leader_id is not None:
            snapshot_id, buffer = self._snapshot_fetch
            request = msg.FetchSnapshotRequest(self._id, self._epoch, snapshot_id, len(buffer))
        elif self._flushed != self._log.end_offset:
            self._fetch_sent_ms = None
            return
        else:
            self._snapshot_fetch = None
            request = msg.FetchRequest(
                self._id, self._epoch, self._log.end_offset, self._log.last_epoch
            )
        target = self._leader_id
        if target is None:
            target = self._voter_order[self._bootstrap_index % len(self._voter_order)]
            self._bootstrap_index += 1
        self._fetch_sent_ms = now_ms
        self._out.append(act.Send(target, request))

    def _drop_queued_fetches(self) -> None:
        """Forget fetches queued earlier in this batch: they describe a log position
        (or a leader) this same input has since changed."""
        self._out = [
            a
            for a in self._out
            if not (
                isinstance(a, act.Send)
                and isinstance(a.message, msg.FetchRequest | msg.FetchSnapshotRequest)
            )
        ]

    def _maybe_refetch(self, now_ms: int) -> None:
        """Resend a fetch that got no answer within the request timeout."""
        if self._flushed != self._log.end_offset:
            return  # we fetch again once what we hold is durable
        sent = self._fetch_sent_ms
        if sent is None or now_ms >= sent + self._config.request_timeout_ms:
            self._send_fetch(now_ms)

    def _on_fetch_response(self, response: msg.FetchResponse, now_ms: int) -> None:
        if (
            response.epoch != self._epoch
            or response.sender_id != self._leader_id
            or self._role not in (QuorumRole.FOLLOWER, QuorumRole.PROSPECTIVE)
            or response.error is not None
        ):
            return
        if (
            response.fetch_offset != self._log.end_offset
            or response.last_fetched_epoch != self._log.last_epoch
        ):
            return  # an answer to a position we have since left: a late duplicate
        if self._role is QuorumRole.PROSPECTIVE:
            self._role = QuorumRole.FOLLOWER  # the leader is alive after all
        self._leader_contact_ms = now_ms
        self._fetch_sent_ms = None
        if response.snapshot_id is not None:
            # The leader no longer holds what we need as entries: fetch its snapshot.
            self._snapshot_fetch = (response.snapshot_id, bytearray())
            self._send_fetch(now_ms)
            return
        if response.diverging_epoch is not None:
            ours = self._log.end_offset_for_epoch(response.diverging_epoch.epoch)
            target = min(response.diverging_epoch.end_offset, ours.end_offset)
            assert target >= self._hw, ("truncating committed entries", target, self._hw)
            self._log.truncate_to(target)
            self._drop_queued_fetches()
            self._flushed = min(self._flushed, target)
            # No high watermark from this answer: what is left of our log may still
            # diverge further down (the next fetch finds out).
            high_watermark = self._hw
        else:
            # The leader matched our log up to fetch_offset, so our log is a prefix of
            # its log (with the new entries too): its high watermark applies to us.
            if response.entries:
                first = response.entries[0].offset
                assert first == self._log.end_offset, (first, self._log.end_offset)
                self._log.append(response.entries)
                self._out.append(act.Flush(self._log.end_offset))
            high_watermark = min(response.high_watermark, self._log.end_offset)
        if high_watermark > self._hw:
            self._hw = high_watermark
            self._out.append(act.HighWatermarkChanged(high_watermark))
        if self._flushed == self._log.end_offset:
            self._send_fetch(now_ms)

    def _on_fetch_snapshot_request(self, request: msg.FetchSnapshotRequest, now_ms: int) -> None:
        error: str | None = None
        chunk: tuple[bytes, int] | None = None
        if request.epoch < self._epoch:
            error = FENCED_LEADER_EPOCH
        elif request.epoch > self._epoch:
            error = UNKNOWN_LEADER_EPOCH
        elif self._role is not QuorumRole.LEADER:
            error = NOT_LEADER_OR_FOLLOWER
        else:
            progress = self._progress_of(request.sender_id)
            if progress is not None:
                progress.last_fetch_ms = now_ms  # alive: counts for the fetch timeout
            chunk = self._log.read_snapshot(
                request.snapshot_id, request.position, self._config.fetch_snapshot_max_bytes
            )
            if chunk is None:
                error = SNAPSHOT_NOT_FOUND
        data, size = chunk if chunk is not None else (b"", 0)
        response = msg.FetchSnapshotResponse(
            self._id,
            self._epoch,
            self._leader_id,
            request.snapshot_id,
            request.position,
            size,
            data,
            error,
        )
        self._out.append(act.Send(request.sender_id, response))

    def _on_fetch_snapshot_response(self, response: msg.FetchSnapshotResponse, now_ms: int) -> None:
        fetch = self._snapshot_fetch
        if (
            fetch is None
            or response.epoch != self._epoch
            or response.sender_id != self._leader_id
            or self._role not in (QuorumRole.FOLLOWER, QuorumRole.PROSPECTIVE)
            or response.snapshot_id != fetch[0]
            or response.position != len(fetch[1])
        ):
            return  # not the chunk we wait for: late, duplicated or from an old epoch
        if self._role is QuorumRole.PROSPECTIVE:
            self._role = QuorumRole.FOLLOWER
        self._leader_contact_ms = now_ms
        self._fetch_sent_ms = None
        if response.error is not None:
            self._snapshot_fetch = None  # it was replaced: a plain fetch finds the new one
            self._send_fetch(now_ms)
            return
        snapshot_id, buffer = fetch
        buffer += response.data
        assert len(buffer) <= response.size, (len(buffer), response.size)
        if len(buffer) == response.size:
            assert self._hw <= snapshot_id.end_offset, (self._hw, snapshot_id)
            self._snapshot_fetch = None
            self._log.install_snapshot(snapshot_id, bytes(buffer))
            self._flushed = self._log.end_offset
            self._out.append(act.SnapshotInstalled(snapshot_id))
            if snapshot_id.end_offset > self._hw:  # a snapshot holds only committed entries
                self._hw = snapshot_id.end_offset
                self._out.append(act.HighWatermarkChanged(self._hw))
        self._send_fetch(now_ms)

    def _on_begin_quorum_epoch(self, request: msg.BeginQuorumEpochRequest, now_ms: int) -> None:
        if request.epoch == self._epoch and self._leader_id == request.sender_id:
            self._leader_contact_ms = now_ms
            if self._role is QuorumRole.PROSPECTIVE:
                self._role = QuorumRole.FOLLOWER
        error = FENCED_LEADER_EPOCH if request.epoch < self._epoch else None
        response = msg.BeginQuorumEpochResponse(self._id, self._epoch, self._leader_id, error)
        self._out.append(act.Send(request.sender_id, response))

    def _on_end_quorum_epoch(self, request: msg.EndQuorumEpochRequest, now_ms: int) -> None:
        if (
            request.epoch == self._epoch
            and self._leader_id in (None, request.sender_id)
            and self._role
            in (
                QuorumRole.FOLLOWER,
                QuorumRole.PROSPECTIVE,
                QuorumRole.UNATTACHED,
                QuorumRole.VOTED,
            )
        ):
            self._leader_resigned = True
            # The leader ranked us: the first successor runs at once, later ones
            # wait longer, so the most up-to-date voter usually wins first time.
            if self._id in request.preferred_successors:
                position = request.preferred_successors.index(self._id)
                delay_ms = (
                    0
                    if position == 0
                    else self._rng.randint(
                        1,
                        min(self._config.election_backoff_max_ms, _BACKOFF_BASE_MS << position),
                    )
                )
                self._election_deadline_ms = now_ms + delay_ms
            else:
                self._reset_election_timer(now_ms)
        error = FENCED_LEADER_EPOCH if request.epoch < self._epoch else None
        response = msg.EndQuorumEpochResponse(self._id, self._epoch, self._leader_id, error)
        self._out.append(act.Send(request.sender_id, response))

    # ------------------------------------------------------------------ plumbing

    def _check(self) -> None:
        assert self._hw <= self._log.end_offset, (self._hw, self._log.end_offset)
        assert self._flushed <= self._log.end_offset, (self._flushed, self._log.end_offset)
        if self._role is QuorumRole.LEADER:
            assert self._leader_id == self._id and self._voted_id == self._id
        if self._role is QuorumRole.CANDIDATE:
            assert self._voted_id == self._id and self._leader_id is None

    def _drain(self) -> list[act.Action]:
        self._check()
        out, self._out = self._out, []
        return out
