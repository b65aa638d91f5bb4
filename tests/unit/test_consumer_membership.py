"""The consumer's pure membership parts (client/consumer/membership.py): options,
the error -> reaction table, the rebalance protocol rule, assignment changes, member
state resets and pattern matching. No I/O: values in, decisions out."""

from __future__ import annotations

import re

import pytest

from raftka.client.config import ClientConfigError
from raftka.client.consumer import membership
from raftka.client.consumer.membership import Phase, Reaction
from raftka.client.structs import TopicPartition
from raftka.common.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NetworkError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

TP = [TopicPartition("t", p) for p in range(4)]


def test_defaults_are_kafkas() -> None:
    """GroupOptions' defaults are Kafka 3.x's, and the rebalance timeout is
    max_poll_interval_ms."""
    options = membership.GroupOptions()
    assert options.session_timeout_ms == 45_000
    assert options.heartbeat_interval_ms == 3_000
    assert options.max_poll_interval_ms == 300_000
    assert options.enable_auto_commit is True
    assert options.auto_commit_interval_ms == 5_000
    assert options.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert options.rebalance_timeout_ms == 300_000


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"session_timeout_ms": 0}, "session_timeout_ms"),
        ({"heartbeat_interval_ms": 45_000}, "heartbeat_interval_ms"),
        ({"partition_assignment_strategy": ("nope",)}, "partition_assignment_strategy"),
        ({"partition_assignment_strategy": ()}, "partition_assignment_strategy"),
        ({"group_instance_id": ""}, "group_instance_id"),
        ({"enable_auto_commit": "yes"}, "enable_auto_commit"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict[str, object], name: str) -> None:
    """Each invalid option fails at construction with ClientConfigError naming it."""
    with pytest.raises(ClientConfigError, match=name):
        membership.GroupOptions(**kwargs)  # type: ignore[arg-type]


def test_rebalance_protocol_is_cooperative_only_if_every_assignor_supports_it() -> None:
    """Kafka's rule: the common subset of the assignors' protocols decides."""
    assert membership.rebalance_protocol(("range", "cooperative-sticky")) == "EAGER"
    assert membership.rebalance_protocol(("cooperative-sticky",)) == "COOPERATIVE"
    assert membership.rebalance_protocol(("sticky",)) == "EAGER"


@pytest.mark.parametrize(
    ("error", "reaction"),
    [
        (None, Reaction.OK),
        (MemberIdRequiredError, Reaction.RETRY_WITH_MEMBER_ID),
        (NotCoordinatorError, Reaction.FIND_COORDINATOR),
        (CoordinatorNotAvailableError, Reaction.FIND_COORDINATOR),
        (CoordinatorLoadInProgressError, Reaction.FIND_COORDINATOR),
        (NetworkError, Reaction.FIND_COORDINATOR),
        (RebalanceInProgressError, Reaction.REJOIN),
        (IllegalGenerationError, Reaction.RESET_GENERATION),
        (UnknownMemberIdError, Reaction.RESET_MEMBER),
        (FencedInstanceIdError, Reaction.FATAL),
        (InconsistentGroupProtocolError, Reaction.FATAL),
    ],
)
def test_classify(error: type | None, reaction: Reaction) -> None:
    """Every group error maps to one reaction, for the class and an instance alike."""
    assert membership.classify(error) is reaction  # type: ignore[arg-type]
    if error is not None:
        assert membership.classify(error("x")) is reaction


def test_eager_change_adds_everything() -> None:
    """EAGER: the member owns nothing when the assignment arrives; all of it is added."""
    change = membership.assignment_change(owned=(), assigned=TP[:2], protocol="EAGER")
    assert change.added == frozenset(TP[:2])
    assert not change.revoked and not change.rejoin


def test_eager_change_refuses_owned_partitions() -> None:
    """An eager member must have revoked before joining (an invariant, asserted)."""
    with pytest.raises(AssertionError):
        membership.assignment_change(owned=TP[:1], assigned=TP[:2], protocol="EAGER")


def test_cooperative_change_revokes_only_what_moves_and_rejoins() -> None:
    """COOPERATIVE: keep the intersection, revoke what left (then rejoin), add the new."""
    change = membership.assignment_change(
        owned=TP[:3], assigned=[TP[1], TP[2], TP[3]], protocol="COOPERATIVE"
    )
    assert change.revoked == {TP[0]}
    assert change.added == {TP[3]}
    assert change.rejoin
    same = membership.assignment_change(owned=TP[:2], assigned=TP[:2], protocol="COOPERATIVE")
    assert not same.revoked and not same.added and not same.rejoin


def test_member_state_resets() -> None:
    """reset_generation drops generation and protocol (and the member id when asked)
    and asks for a rejoin; stable() clears the rejoin flag."""
    state = membership.MemberState()
    assert state.rejoin_needed and not state.in_generation
    state.joined(member_id="m-1", generation_id=4, protocol_name="range")
    state.stable()
    assert state.in_generation and not state.rejoin_needed
    state.reset_generation(forget_member_id=False)
    assert (state.member_id, state.generation_id, state.phase) == ("m-1", -1, Phase.UNJOINED)
    assert state.rejoin_needed
    state.reset_generation(forget_member_id=True)
    assert state.member_id == ""


def test_pattern_subscription_matches_whole_names() -> None:
    """A pattern matches whole topic names (Java's Pattern.matcher().matches())."""
    sub = membership.Subscription(pattern=re.compile(r"orders-\d+"))
    assert sub.matching(["orders-1", "orders-22", "orders-x", "xorders-1"]) == {
        "orders-1",
        "orders-22",
    }
    named = membership.Subscription(topics=frozenset({"a"}))
    assert named.matching(["b"]) == {"a"}
