"""The consumer's group membership, the pure parts: options, member state, decisions.

Theory of operation
-------------------
A subscribed consumer is a member of its group (Kafka's classic protocol). Its
:class:`MemberState` holds what the coordinator gave it: member id, generation, the
chosen protocol, and whether it must (re)join. The I/O shell
(:mod:`.coordinator_client`) drives the state through these steps:

1. **Join.** JoinGroup with every configured assignor as a protocol; a first join
   answers MEMBER_ID_REQUIRED with an id to come back with (KIP-394).
2. **Sync.** The leader runs the chosen assignor over every member's subscription and
   sends the assignments; every member receives its own.
3. **Stable.** A background task heartbeats every ``heartbeat_interval_ms``; a
   heartbeat answered REBALANCE_IN_PROGRESS makes the next ``poll`` rejoin.

:func:`classify` maps every group error to one :class:`Reaction`, the single table the
shell consults for JoinGroup, SyncGroup, Heartbeat and OffsetCommit answers.

The rebalance protocol is EAGER unless every configured assignor supports COOPERATIVE
(Kafka's rule): with EAGER a member revokes everything before it rejoins; with
COOPERATIVE it keeps what it still owns, revokes only what the new assignment takes
away, and rejoins once more if it revoked anything (:func:`assignment_change`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from raftka.client.config import ClientConfigError
from raftka.client.consumer.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNMENT_STRATEGY,
    DEFAULT_GENERATION,
    RebalanceProtocol,
)
from raftka.client.structs import TopicPartition
from raftka.common.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaError,
    MemberIdRequiredError,
    NetworkError,
    NotCoordinatorError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)

__all__ = [
    "GroupOptions",
    "MemberState",
    "Reaction",
    "Subscription",
    "assignment_change",
    "classify",
    "rebalance_protocol",
]

#: The consumer's protocol type in JoinGroup (Kafka's ConsumerProtocol.PROTOCOL_TYPE).
PROTOCOL_TYPE: Final = "consumer"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOptions:
    """Kafka's consumer group options (snake_case names, Kafka 3.x defaults)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    partition_assignment_strategy: tuple[str, ...] = DEFAULT_ASSIGNMENT_STRATEGY
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "max_poll_interval_ms",
            "auto_commit_interval_ms",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ClientConfigError(f"{name}={value!r}: expected an integer >= 1")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ClientConfigError(
                f"heartbeat_interval_ms={self.heartbeat_interval_ms!r}: must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if type(self.enable_auto_commit) is not bool:
            raise ClientConfigError(
                f"enable_auto_commit={self.enable_auto_commit!r}: expected a bool"
            )
        strategy = tuple(self.partition_assignment_strategy)
        object.__setattr__(self, "partition_assignment_strategy", strategy)
        unknown = [s for s in strategy if s not in ASSIGNORS]
        if not strategy or unknown:
            raise ClientConfigError(
                f"partition_assignment_strategy={strategy!r}: expected names among "
                f"{sorted(ASSIGNORS)}"
            )
        if self.group_instance_id is not None and (
            not isinstance(self.group_instance_id, str) or not self.group_instance_id
        ):
            raise ClientConfigError(
                f"group_instance_id={self.group_instance_id!r}: expected a non-empty string"
            )

    @property
    def rebalance_timeout_ms(self) -> int:
        """How long the coordinator waits for members to rejoin: the poll interval, as
        in Kafka (a member rejoins from ``poll``)."""
        return self.max_poll_interval_ms


def rebalance_protocol(strategy: Sequence[str]) -> str:
    """COOPERATIVE when every assignor supports it, else EAGER (Kafka's rule)."""
    common = set.intersection(*(set(ASSIGNORS[s].rebalance_protocols) for s in strategy))
    return (
        RebalanceProtocol.COOPERATIVE
        if RebalanceProtocol.COOPERATIVE in common
        else (RebalanceProtocol.EAGER)
    )


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the application subscribed to: topic names or a pattern."""

    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None

    def matching(self, available: Iterable[str]) -> frozenset[str]:
        """The topics of ``available`` this subscription covers (names subscribed by
        name count even before they exist: the leader skips missing ones)."""
        if self.pattern is None:
            return self.topics
        return frozenset(t for t in available if self.pattern.fullmatch(t))


class Phase(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


@dataclass(slots=True)
class MemberState:
    """This member's view of its group. Mutable; owned by the shell's event loop."""

    member_id: str = ""
    generation_id: int = DEFAULT_GENERATION
    protocol_name: str | None = None
    phase: Phase = Phase.UNJOINED
    rejoin_needed: bool = True

    def reset_generation(self, *, forget_member_id: bool) -> None:
        """Out of the generation (ILLEGAL_GENERATION, expiry, leaving): rejoin fresh."""
        self.generation_id = DEFAULT_GENERATION
        self.protocol_name = None
        self.phase = Phase.UNJOINED
        self.rejoin_needed = True
        if forget_member_id:
            self.member_id = ""

    def joined(self, *, member_id: str, generation_id: int, protocol_name: str | None) -> None:
        self.member_id = member_id
        self.generation_id = generation_id
        self.protocol_name = protocol_name

    def stable(self) -> None:
        self.phase = Phase.STABLE
        self.rejoin_needed = False

    @property
    def in_generation(self) -> bool:
        return self.generation_id != DEFAULT_GENERATION and self.phase is Phase.STABLE


class Reaction(enum.Enum):
    """What the member does about an answer."""

    OK = "ok"
    #: Retry the same request with the member id the coordinator just gave.
    RETRY_WITH_MEMBER_ID = "retry_with_member_id"
    #: The coordinator moved or is not ready: find it again, back off, retry.
    FIND_COORDINATOR = "find_coordinator"
    #: The group is rebalancing: rejoin keeping member id and generation.
    REJOIN = "rejoin"
    #: Our generation is gone: rejoin with the member id but no generation.
    RESET_GENERATION = "reset_generation"
    #: The coordinator does not know us: rejoin with neither.
    RESET_MEMBER = "reset_member"
    #: Give up: raise the error to the application.
    FATAL = "fatal"


_COORDINATOR_ERRORS: Final = (
    NotCoordinatorError,
    CoordinatorNotAvailableError,
    CoordinatorLoadInProgressError,
    NetworkError,
    RequestTimedOutError,
)


# The error -> reaction table, first match wins (the errors are not subclasses of each
# other, so the order only matters for readability). FencedInstanceIdError is listed
# although FATAL is also the default: a fenced static member must never rejoin.
_REACTIONS: Final[tuple[tuple[type[KafkaError] | tuple[type[KafkaError], ...], Reaction], ...]] = (
    (MemberIdRequiredError, Reaction.RETRY_WITH_MEMBER_ID),
    (_COORDINATOR_ERRORS, Reaction.FIND_COORDINATOR),
    (RebalanceInProgressError, Reaction.REJOIN),
    (IllegalGenerationError, Reaction.RESET_GENERATION),
    (UnknownMemberIdError, Reaction.RESET_MEMBER),
    (FencedInstanceIdError, Reaction.FATAL),
)


def classify(error: KafkaError | type[KafkaError] | None) -> Reaction:
    """The reaction to a group answer's error (None: success; an error not in the
    table: FATAL)."""
    if error is None:
        return Reaction.OK
    kind = error if isinstance(error, type) else type(error)
    for errors, reaction in _REACTIONS:
        if issubclass(kind, errors):
            return reaction
    return Reaction.FATAL


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    """How a new assignment changes what this member owns."""

    assignment: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    #: COOPERATIVE only: partitions were revoked, so another rebalance follows to hand
    #: them to their new owners.
    rejoin: bool


def assignment_change(
    *, owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition], protocol: str
) -> AssignmentChange:
    """EAGER: everything was revoked before the join, so all is added. COOPERATIVE:
    revoke what is no longer ours, add what is new, rejoin if something was revoked."""
    before = frozenset(owned)
    after = frozenset(assigned)
    if protocol == RebalanceProtocol.EAGER:
        assert not before, "an eager member revokes everything before it joins"
        return AssignmentChange(after, frozenset(), after, rejoin=False)
    revoked = before - after
    return AssignmentChange(after, revoked, after - before, rejoin=bool(revoked))
