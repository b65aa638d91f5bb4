"""Unit tests of the controller's pure command core (metadata/controller.py and its
helpers). Every command's records are replayed through MetadataDelta by ``Harness.run``,
which also checks the cluster invariants, so each test checks the records, the response,
and the image the records lead to."""

from __future__ import annotations

import random
import uuid
from typing import TypeVar

import pytest

from raftka.common import errors
from raftka.metadata import metadata_records as mr
from raftka.metadata.controller import QuorumController
from raftka.metadata.controller_api import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    ControllerResult,
    CreatablePartitions,
    CreatableTopic,
    CreateTopicsResponse,
    RegisterBrokerRequest,
)
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.election import Election, PartitionChangeBuilder
from raftka.metadata.image import MetadataImage, PartitionRegistration
from raftka.metadata.placement import assign_replicas
from raftka.metadata.topic_config import validate_topic_config
from raftka.metadata.topic_control import describe_configs
from raftka.server_common.controller_config import ControllerConfig

R = TypeVar("R")
TIMEOUT_MS = ControllerConfig().broker_session_timeout_ms


def _incarnation(broker_id: int, generation: int = 0) -> str:
    return str(uuid.UUID(int=broker_id * 1000 + generation + 1, version=4))


def check_invariants(image: MetadataImage) -> None:
    """What every image the controller leads to must satisfy."""
    for topic in image.topics.by_id.values():
        for index, p in topic.partitions.items():
            where = f"{topic.name}-{index}: {p}"
            assert p.isr, where
            assert set(p.isr) <= set(p.replicas), where
            # The ELR (KIP-966) holds replicas outside the ISR, within the assignment.
            assert not set(p.eligible_leader_replicas) & set(p.isr), where
            assert set(p.eligible_leader_replicas) <= set(p.replicas), where
            if p.leader != mr.NO_LEADER:
                assert p.leader in p.isr, where
                broker = image.cluster.broker(p.leader)
                assert broker is not None and not broker.fenced, where


class Harness:
    """An image, a controller and a fake clock; ``run`` replays a command's records at
    the next offsets (as the log would) and checks the invariants."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.image = MetadataImage.EMPTY
        self.now_ms = 0
        self.config = config or ControllerConfig()
        self.ctl = QuorumController(self.config, self.image, self.now_ms)
        self.rng = random.Random(7)
        self.epochs: dict[int, int] = {}

    @property
    def next_offset(self) -> int:
        return self.image.offset + 1

    def run(self, result: ControllerResult[R]) -> R:
        # As the controller process does: a command's records are one payload, one
        # log entry, so they all take the same offset.
        delta = MetadataDelta(self.image)
        delta.replay_all(result.records)
        if result.records:
            delta.offset, delta.epoch = self.next_offset, 1
        before = self.image
        self.image = delta.apply()
        check_invariants(self.image)
        # Epochs never go back.
        for topic in before.topics.by_id.values():
            for index, old in topic.partitions.items():
                new = self.image.topics.partition(topic.topic_id, index)
                if new is not None:
                    assert new.leader_epoch >= old.leader_epoch
                    assert new.partition_epoch >= old.partition_epoch
        return result.response

    def register(self, broker_id: int, generation: int = 0, *, clean: bool = False) -> int:
        request = RegisterBrokerRequest(
            broker_id,
            _incarnation(broker_id, generation),
            (mr.Endpoint("PLAINTEXT", "h", 9092),),
            clean_shutdown=clean,
        )
        result = self.ctl.register_broker(
            self.image, request, now_ms=self.now_ms, next_offset=self.next_offset
        )
        epoch = self.run(result).broker_epoch
        self.epochs[broker_id] = epoch
        return epoch

    def heartbeat(
        self,
        broker_id: int,
        *,
        offset: int | None = None,
        want_fence: bool = False,
        want_shutdown: bool = False,
    ) -> tuple[ControllerResult[BrokerHeartbeatResponse], BrokerHeartbeatResponse]:
        request = BrokerHeartbeatRequest(
            broker_id,
            self.epochs[broker_id],
            self.image.offset if offset is None else offset,
            want_fence,
            want_shutdown,
        )
        result = self.ctl.heartbeat(
            self.image, request, now_ms=self.now_ms, next_offset=self.next_offset
        )
        return result, self.run(result)

    def add_brokers(self, *broker_ids: int) -> None:
        for b in broker_ids:
            self.register(b)
        for b in broker_ids:
            _, response = self.heartbeat(b)
            assert not response.is_fenced

    def create(
        self,
        name: str,
        partitions: int = 1,
        rf: int = 1,
        assignments: dict[int, list[int]] | None = None,
        configs: dict[str, str] | None = None,
    ) -> str:
        topic = CreatableTopic(
            name,
            -1 if assignments else partitions,
            -1 if assignments else rf,
            assignments,
            configs or {},
        )
        result = self.ctl.create_topics(self.image, [topic], rng=self.rng)
        response = self.run(result)
        assert response.topics[0].error is None, response
        topic_id = response.topics[0].topic_id
        assert topic_id is not None
        return topic_id

    def create_topics(
        self, *topics: tuple[str, int, int]
    ) -> tuple[ControllerResult[CreateTopicsResponse], list[errors.KafkaError | None]]:
        """One CreateTopics request of (name, partitions, replication factor), not run:
        its result and each topic's error, in request order."""
        creatable = [CreatableTopic(name, count, rf) for name, count, rf in topics]
        result = self.ctl.create_topics(self.image, creatable, rng=self.rng)
        return result, [t.error for t in result.response.topics]

    def fence_the_last_isr_member(self, configs: dict[str, str] | None = None) -> str:
        """Topic ``t`` (``configs``) on brokers 1 and 2, its ISR shrunk to {1}, then broker
        1's session expired (2 kept alive): its last ISR member is fenced. The topic id."""
        self.add_brokers(1, 2)
        t = self.create("t", assignments={0: [1, 2]}, configs=configs)
        self.run(self.ctl.alter_partition(self.image, _alter(self, t, 1, (1,))))
        self.now_ms = TIMEOUT_MS + 1
        self.keep_alive(2)
        self.run(self.ctl.expire_sessions(self.image, self.now_ms))
        return t

    def partition(self, topic_id: str, index: int = 0) -> PartitionRegistration:
        p = self.image.topics.partition(topic_id, index)
        assert p is not None
        return p

    def fenced(self, broker_id: int) -> bool:
        broker = self.image.cluster.broker(broker_id)
        assert broker is not None
        return broker.fenced

    def keep_alive(self, *broker_ids: int) -> None:
        for b in broker_ids:
            self.heartbeat(b)


def assert_error(error: errors.KafkaError | None, cls: type[errors.KafkaError]) -> None:
    assert error is not None and type(error) is cls, error


# ---------------------------------------------------------------------------------------
# Registration


def test_register_gives_the_record_offset_as_epoch_and_starts_fenced() -> None:
    """The broker epoch is the offset of its RegisterBrokerRecord; the broker is fenced."""
    h = Harness()
    result = h.ctl.register_broker(
        h.image,
        RegisterBrokerRequest(1, _incarnation(1), (mr.Endpoint("PLAINTEXT", "h", 1),), "r1"),
        now_ms=0,
        next_offset=h.next_offset,
    )
    assert result.records == (
        mr.RegisterBrokerRecord(
            1, _incarnation(1), 0, (mr.Endpoint("PLAINTEXT", "h", 1),), "r1", True
        ),
    )
    assert result.response.broker_epoch == 0
    h.run(result)
    assert h.fenced(1) and h.image.cluster.brokers[1].rack == "r1"


def test_register_with_other_incarnation_while_session_alive_is_duplicate() -> None:
    """A second process claiming a live broker's id gets DUPLICATE_BROKER_REGISTRATION and
    no records; once the session has expired the new incarnation may register."""
    h = Harness()
    h.add_brokers(1)
    request = RegisterBrokerRequest(1, _incarnation(1, 1), (mr.Endpoint("PLAINTEXT", "h", 1),))
    with pytest.raises(errors.DuplicateBrokerRegistrationError):
        h.ctl.register_broker(h.image, request, now_ms=h.now_ms, next_offset=h.next_offset)
    h.now_ms += TIMEOUT_MS + 1
    old_epoch = h.epochs[1]
    new_epoch = h.register(1, generation=1)
    assert new_epoch > old_epoch and h.fenced(1)
    assert h.image.cluster.brokers[1].incarnation_id == _incarnation(1, 1)


def test_register_other_incarnation_of_fenced_broker_is_allowed() -> None:
    """A fenced broker has no valid session, so a new incarnation replaces it at once."""
    h = Harness()
    h.register(1)
    assert h.register(1, generation=1) > 0


def test_reregister_same_incarnation_gets_new_epoch_and_leaves_partitions() -> None:
    """The same incarnation registering again (a restart) gets a new, larger epoch and is
    fenced; what it led moves to another in-sync replica and it leaves the ISRs."""
    h = Harness()
    h.add_brokers(1, 2)
    t = h.create("t", assignments={0: [1, 2]})
    old = h.epochs[1]
    epoch = h.register(1)
    assert epoch > old and h.fenced(1)
    p = h.partition(t)
    assert p.leader == 2 and p.isr == (2,)


def test_register_rejects_a_malformed_incarnation_id() -> None:
    """The incarnation id must be a UUID: INVALID_REQUEST, no records."""
    h = Harness()
    with pytest.raises(errors.InvalidRequestError):
        h.ctl.register_broker(
            h.image,
            RegisterBrokerRequest(1, "not-a-uuid", ()),
            now_ms=0,
            next_offset=0,
        )


# ---------------------------------------------------------------------------------------
# Heartbeats


def test_heartbeat_from_unknown_broker_or_stale_epoch_is_refused() -> None:
    """BROKER_ID_NOT_REGISTERED for an unknown id, STALE_BROKER_EPOCH for an old epoch."""
    h = Harness()
    h.register(1)
    with pytest.raises(errors.BrokerIdNotRegisteredError):
        h.ctl.heartbeat(h.image, BrokerHeartbeatRequest(9, 0, 0), now_ms=0, next_offset=1)
    with pytest.raises(errors.StaleBrokerEpochError):
        h.ctl.heartbeat(h.image, BrokerHeartbeatRequest(1, 99, 0), now_ms=0, next_offset=1)


def test_heartbeat_unfences_only_once_caught_up_with_its_registration() -> None:
    """A fenced broker whose metadata offset is below its registration offset stays
    fenced; at or past it, one UNFENCE record and an unfenced response."""
    h = Harness()
    h.register(1)
    h.register(2)
    epoch = h.epochs[2]
    result, response = h.heartbeat(2, offset=epoch - 1)
    assert result.records == () and response == BrokerHeartbeatResponse(False, True, False, False)
    result, response = h.heartbeat(2, offset=epoch)
    assert result.records == (mr.BrokerRegistrationChangeRecord(2, epoch, fenced=mr.UNFENCE),)
    assert response == BrokerHeartbeatResponse(True, False, False, False)
    assert not h.fenced(2)


def test_heartbeat_want_fence_keeps_or_makes_a_broker_fenced() -> None:
    """want_fence keeps a fenced broker fenced; an unfenced broker asking is fenced."""
    h = Harness()
    h.register(1)
    result, response = h.heartbeat(1, want_fence=True)
    assert result.records == () and response.is_fenced
    h.heartbeat(1)
    assert not h.fenced(1)
    result, response = h.heartbeat(1, want_fence=True)
    assert result.records == (mr.BrokerRegistrationChangeRecord(1, h.epochs[1], fenced=mr.FENCE),)
    assert response.is_fenced and not response.should_shutdown


def test_fenced_broker_wanting_shutdown_may_shut_down_at_once() -> None:
    """A fenced broker leads nothing: should_shutdown with no records."""
    h = Harness()
    h.register(1)
    result, response = h.heartbeat(1, want_shutdown=True)
    assert result.records == () and response.should_shutdown


# ---------------------------------------------------------------------------------------
# Session expiry and fencing


def test_expire_sessions_fences_silent_brokers_and_moves_leadership() -> None:
    """After broker.session.timeout.ms without a heartbeat a broker is fenced: it leaves
    the ISR and its leadership moves to the next in-sync replica in replica order; brokers
    that kept heartbeating are untouched."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3]})
    h.now_ms = TIMEOUT_MS
    h.keep_alive(2, 3)
    assert h.ctl.expire_sessions(h.image, h.now_ms).records == ()  # exactly at the limit
    h.now_ms = TIMEOUT_MS + 1
    result = h.ctl.expire_sessions(h.image, h.now_ms)
    assert result.response.fenced_brokers == (1,)
    assert result.records == (
        mr.PartitionChangeRecord(0, t, isr=(2, 3), leader=2),
        mr.BrokerRegistrationChangeRecord(1, h.epochs[1], fenced=mr.FENCE),
    )
    h.run(result)
    p = h.partition(t)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 1, 1)


def test_fencing_the_last_isr_member_keeps_it_and_leaves_no_leader() -> None:
    """Kafka's rule: the last ISR member stays in the ISR and the partition has no leader
    (an out-of-sync replica is not elected); when the broker comes back it leads again."""
    h = Harness()
    t = h.fence_the_last_isr_member()
    p = h.partition(t)
    assert (p.leader, p.isr) == (mr.NO_LEADER, (1,))
    # Broker 1 restarts: registers again and catches up; unfencing re-elects it.
    h.register(1, generation=1)
    result, _ = h.heartbeat(1)
    assert result.records[-1] == mr.PartitionChangeRecord(0, t, leader=1)
    assert h.partition(t).leader == 1


MIN_ISR_2 = {"min.insync.replicas": "2"}


def _shrunk_to_leader(h: Harness, configs: dict[str, str] | None) -> str:
    """Topic ``t`` on brokers 1-3 (``configs``), its ISR shrunk by its leader 1 to {1}
    (both followers slow, as under load). The topic id."""
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3]}, configs=configs)
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1,))))
    return t


def test_isr_shrinking_below_min_isr_keeps_the_leavers_as_eligible_leaders() -> None:
    """KIP-966: an ISR shrink that leaves fewer than min.insync.replicas members puts
    the replicas that left into the ELR (the leader's HW cannot pass them any more);
    with the ISR back at the minimum the ELR is emptied. At min.insync.replicas=1 (the
    default) there is never an ELR."""
    h = Harness()
    t = _shrunk_to_leader(h, MIN_ISR_2)
    p = h.partition(t)
    assert (p.leader, p.isr, p.eligible_leader_replicas) == (1, (1,), (2, 3))
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 3))))
    assert h.partition(t).eligible_leader_replicas == ()

    h = Harness()
    t = _shrunk_to_leader(h, None)
    assert h.partition(t).eligible_leader_replicas == ()


def test_lowering_min_insync_replicas_to_the_isr_size_clears_the_elr() -> None:
    """With min.insync.replicas down to what the ISR has, the leader moves its HW again
    past what the ELR holds, so the ELR goes in the same command (KIP-966); a value
    the ISR still misses keeps it."""
    h = Harness()
    t = _shrunk_to_leader(h, {"min.insync.replicas": "3"})
    assert h.partition(t).eligible_leader_replicas == (2, 3)

    def set_min(value: str) -> None:
        op = [AlterConfigOp("min.insync.replicas", "SET", value)]
        h.run(h.ctl.incremental_alter_configs(h.image, [AlterConfigsResource("topic", "t", op)]))

    set_min("2")
    assert h.partition(t).eligible_leader_replicas == (2, 3)
    set_min("1")
    assert h.partition(t).eligible_leader_replicas == ()


def test_fencing_the_last_isr_member_elects_an_eligible_leader_replica() -> None:
    """The availability failure KIP-966 removes: the ISR shrank to its leader, then the
    leader dies. Without the ELR the partition has no leader until that one broker
    returns; with it, a live ELR member leads at once (the ISR restarts from it) and the
    fenced leader, which also had every record below the HW, joins the ELR."""
    h = Harness()
    t = _shrunk_to_leader(h, MIN_ISR_2)
    h.now_ms = TIMEOUT_MS + 1
    h.keep_alive(2, 3)
    h.run(h.ctl.expire_sessions(h.image, h.now_ms))
    p = h.partition(t)
    assert (p.leader, p.isr, p.eligible_leader_replicas) == (2, (2,), (1, 3))
    # The ISR grows back to the minimum: the ELR is no longer needed.
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 2, (2, 3))))
    assert h.partition(t).eligible_leader_replicas == ()


def test_a_fenced_eligible_leader_replica_waits_and_leads_when_it_returns() -> None:
    """Every replica fenced in one expiry: leadership passes down the ELR as each is
    fenced, ending with no leader, the last one fenced kept as the ISR and the others in
    the ELR. The first ELR member to come back leads (it has every record below the
    HW), as an ISR member would, unless it comes back from an unclean shutdown."""
    h = Harness()
    t = _shrunk_to_leader(h, MIN_ISR_2)
    h.now_ms = TIMEOUT_MS + 1
    h.run(h.ctl.expire_sessions(h.image, h.now_ms))
    p = h.partition(t)
    assert (p.leader, p.isr, p.eligible_leader_replicas) == (mr.NO_LEADER, (3,), (1, 2))
    # Broker 2 comes back from an unclean shutdown (unflushed records may be gone): it
    # leaves the ELR and does not lead.
    h.register(2, generation=1, clean=False)
    h.heartbeat(2)
    p = h.partition(t)
    assert (p.leader, p.isr, p.eligible_leader_replicas) == (mr.NO_LEADER, (3,), (1,))
    h.register(1, generation=1, clean=True)
    h.heartbeat(1)
    p = h.partition(t)
    assert (p.leader, p.isr, p.eligible_leader_replicas) == (1, (1,), (3,))


def test_eligible_leader_replicas_hold_under_random_faults() -> None:
    """A seeded walk of fences, returns and ISR changes by the leader on a min ISR 2
    topic: after every step the ELR is disjoint from the ISR (check_invariants), empty
    whenever the ISR has two members or more, and a partition with a live ISR or ELR
    member is never left without a leader."""
    rng = random.Random(20261128)
    elr_elections = 0  # the walk must reach the case it is about
    for _ in range(20):
        h = Harness()
        h.add_brokers(1, 2, 3)
        t = h.create("t", assignments={0: [1, 2, 3]}, configs=MIN_ISR_2)
        alive = {1, 2, 3}
        for _step in range(30):
            p = h.partition(t)
            action = rng.choice(["fence", "return", "isr"])
            if action == "fence" and len(alive) > 1:
                victim = rng.choice(sorted(alive))
                alive.discard(victim)
                h.now_ms += TIMEOUT_MS + 1
                h.keep_alive(*sorted(alive))
                h.run(h.ctl.expire_sessions(h.image, h.now_ms))
            elif action == "return" and len(alive) < 3:
                back = rng.choice(sorted({1, 2, 3} - alive))
                alive.add(back)
                h.keep_alive(*sorted(alive - {back}))
                h.register(back, generation=h.next_offset, clean=rng.random() < 0.7)
                h.heartbeat(back)
            elif action == "isr" and p.leader != mr.NO_LEADER:
                others = [b for b in (1, 2, 3) if b != p.leader and b in alive]
                isr = (p.leader, *rng.sample(others, rng.randint(0, len(others))))
                h.run(h.ctl.alter_partition(h.image, _alter(h, t, p.leader, isr)))
            before, p = p, h.partition(t)
            if p.leader != before.leader and p.leader in before.eligible_leader_replicas:
                elr_elections += 1
            if len(p.isr) >= 2:
                assert p.eligible_leader_replicas == (), p
            if (set(p.isr) | set(p.eligible_leader_replicas)) & alive:
                assert p.leader in alive, (p, alive)
    assert elr_elections > 0


@pytest.mark.parametrize("where", ["topic", "controller"])
def test_unclean_election_when_enabled_picks_a_live_replica_and_resets_isr(where: str) -> None:
    """With unclean.leader.election.enable (the topic's config, or the controller's
    default) fencing the last ISR member elects a live out-of-sync replica and the ISR
    becomes just that replica."""
    config = ControllerConfig(unclean_leader_election_enable=where == "controller")
    h = Harness(config)
    configs = {"unclean.leader.election.enable": "true"} if where == "topic" else {}
    t = h.fence_the_last_isr_member(configs=configs)
    p = h.partition(t)
    assert (p.leader, p.isr) == (2, (2,))


def test_topic_config_false_overrides_controller_unclean_default() -> None:
    """A topic's unclean.leader.election.enable=false wins over the controller's true."""
    h = Harness(ControllerConfig(unclean_leader_election_enable=True))
    t = h.fence_the_last_isr_member(configs={"unclean.leader.election.enable": "false"})
    assert h.partition(t).leader == mr.NO_LEADER


def test_turning_unclean_election_on_elects_a_leaderless_partition_at_once() -> None:
    """A leaderless partition (its last ISR member fenced) gets a live out-of-sync
    replica as leader in the very command that sets unclean.leader.election.enable to
    true (Kafka re-evaluates on the config change); setting it false elects nothing."""
    h = Harness()
    t = h.fence_the_last_isr_member()
    assert h.partition(t).leader == mr.NO_LEADER
    off = [AlterConfigOp("unclean.leader.election.enable", "SET", "false")]
    h.run(h.ctl.incremental_alter_configs(h.image, [AlterConfigsResource("topic", "t", off)]))
    assert h.partition(t).leader == mr.NO_LEADER
    on = [AlterConfigOp("unclean.leader.election.enable", "SET", "true")]
    result = h.ctl.incremental_alter_configs(h.image, [AlterConfigsResource("topic", "t", on)])
    assert any(isinstance(r, mr.PartitionChangeRecord) for r in result.records)
    h.run(result)
    p = h.partition(t)
    assert (p.leader, p.isr) == (2, (2,))


# ---------------------------------------------------------------------------------------
# Controlled shutdown


def test_controlled_shutdown_moves_leadership_then_grants_shutdown() -> None:
    """want_shutdown from a leader: the broker is marked in controlled shutdown, its
    leaderships move and it leaves the ISRs; it may shut down (and is fenced) only once
    every active broker has caught up with those records."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3], 1: [2, 1, 3]})
    result, response = h.heartbeat(1, want_shutdown=True)
    assert result.records == (
        mr.BrokerRegistrationChangeRecord(
            1, h.epochs[1], in_controlled_shutdown=mr.IN_CONTROLLED_SHUTDOWN
        ),
        mr.PartitionChangeRecord(0, t, isr=(2, 3), leader=2),
        mr.PartitionChangeRecord(1, t, isr=(2, 3)),
    )
    assert response == BrokerHeartbeatResponse(True, False, True, False)
    assert (h.partition(t, 0).leader, h.partition(t, 1).isr) == (2, (2, 3))
    # Broker 2 reports an offset before the shutdown records: not yet.
    h.heartbeat(2, offset=h.image.offset - 1)
    h.heartbeat(3)
    _, response = h.heartbeat(1, want_shutdown=True)
    assert not response.should_shutdown
    h.heartbeat(2)
    result, response = h.heartbeat(1, want_shutdown=True)
    assert response.should_shutdown and response.is_fenced
    assert result.records == (mr.BrokerRegistrationChangeRecord(1, h.epochs[1], fenced=mr.FENCE),)


def test_controlled_shutdown_keeps_a_leader_no_one_can_replace() -> None:
    """A partition whose only in-sync replica is the stopping broker keeps it as leader
    (no unclean election even when enabled); fencing at the end leaves it leaderless."""
    h = Harness(ControllerConfig(unclean_leader_election_enable=True))
    h.add_brokers(1, 2)
    t = h.create("t", assignments={0: [1, 2]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1,))))
    result, response = h.heartbeat(1, want_shutdown=True)
    assert result.records == (
        mr.BrokerRegistrationChangeRecord(
            1, h.epochs[1], in_controlled_shutdown=mr.IN_CONTROLLED_SHUTDOWN
        ),
    )
    assert h.partition(t).leader == 1 and not response.should_shutdown
    h.heartbeat(2)
    _, response = h.heartbeat(1, want_shutdown=True)
    assert response.should_shutdown
    # Fencing is not a planned move: unclean election (enabled here) now applies.
    assert (h.partition(t).leader, h.partition(t).isr) == (2, (2,))


def test_broker_leading_nothing_may_shut_down_at_once() -> None:
    """An unfenced broker that leads nothing is fenced and told to shut down at once."""
    h = Harness()
    h.add_brokers(1, 2)
    t = h.create("t", assignments={0: [2, 1]})
    result, response = h.heartbeat(1, want_shutdown=True)
    assert response.should_shutdown and response.is_fenced
    assert result.records == (
        mr.PartitionChangeRecord(0, t, isr=(2,)),
        mr.BrokerRegistrationChangeRecord(1, h.epochs[1], fenced=mr.FENCE),
    )


# ---------------------------------------------------------------------------------------
# CreateTopics


def test_create_topic_places_replicas_round_robin() -> None:
    """Replica lists are distinct brokers, ISR = replicas, leader = first replica, and
    leaderships spread evenly; the same seed gives the same topic id and placement."""
    images = []
    for _ in range(2):
        h = Harness()
        h.add_brokers(1, 2, 3)
        t = h.create("t", partitions=6, rf=2)
        images.append((t, h.image.topics.by_id[t]))
        parts = [h.partition(t, i) for i in range(6)]
        for p in parts:
            assert len(set(p.replicas)) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
            assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert sorted(p.leader for p in parts) == [1, 1, 2, 2, 3, 3]
    assert images[0] == images[1]


def test_assign_replicas_matches_the_round_robin_pattern() -> None:
    """A fixed start and shift give the rack-unaware pattern: first replicas step through
    the brokers, followers at distance 1 + shift, and the shift grows on each wrap."""
    out = assign_replicas([10, 20, 30], 6, 2, start_index=1, shift=0)
    assert out == [(20, 30), (30, 10), (10, 20), (20, 10), (30, 20), (10, 30)]
    # Added partitions continue the same pattern.
    assert assign_replicas([10, 20, 30], 3, 2, start_index=1, shift=0, first_partition=3) == out[3:]


def test_create_topic_uses_defaults_and_writes_configs() -> None:
    """-1 partitions / replication factor take num.partitions / default.replication.factor;
    configs become ConfigRecords after the partitions."""
    h = Harness(ControllerConfig(num_partitions=3, default_replication_factor=2))
    h.add_brokers(1, 2)
    result = h.ctl.create_topics(
        h.image, [CreatableTopic("t", configs={"retention.ms": "1000"})], rng=h.rng
    )
    response = h.run(result)
    topic = response.result("t")
    assert (topic.error, topic.num_partitions, topic.replication_factor) == (None, 3, 2)
    assert isinstance(result.records[0], mr.TopicRecord)
    assert [type(r) for r in result.records[1:4]] == [mr.PartitionRecord] * 3
    assert result.records[4] == mr.ConfigRecord("topic", "t", "retention.ms", "1000")
    assert h.image.configs.topic_config("t") == {"retention.ms": "1000"}


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "caf\u00e9", "a/b", "a\nb"])
def test_create_topic_rejects_illegal_names(name: str) -> None:
    """Kafka's topic name rules: INVALID_TOPIC_EXCEPTION and no records."""
    h = Harness()
    h.add_brokers(1)
    result = h.ctl.create_topics(h.image, [CreatableTopic(name, 1, 1)], rng=h.rng)
    assert result.records == ()
    assert_error(result.response.topics[0].error, errors.InvalidTopicError)


def test_create_topic_accepts_the_longest_legal_name() -> None:
    """249 characters of [a-zA-Z0-9._-] is legal."""
    h = Harness()
    h.add_brokers(1)
    h.create("aZ9._-" + "x" * 243)


def test_create_topic_rejects_existing_and_colliding_names() -> None:
    """An existing name: TOPIC_ALREADY_EXISTS; a name equal to an existing one once '.'
    and '_' are identified: INVALID_TOPIC_EXCEPTION, also within one request."""
    h = Harness()
    h.add_brokers(1)
    h.create("a.b")
    result, per_topic = h.create_topics(("a.b", 1, 1), ("a_b", 1, 1), ("c_d", 1, 1), ("c.d", 1, 1))
    assert_error(per_topic[0], errors.TopicAlreadyExistsError)
    assert_error(per_topic[1], errors.InvalidTopicError)
    assert per_topic[2] is None
    assert_error(per_topic[3], errors.InvalidTopicError)
    h.run(result)
    assert sorted(h.image.topics.by_name) == ["a.b", "c_d"]


@pytest.mark.parametrize(
    ("partitions", "rf", "error"),
    [
        (0, 1, errors.InvalidPartitionsError),
        (-2, 1, errors.InvalidPartitionsError),
        (1, 0, errors.InvalidReplicationFactorError),
        (1, 3, errors.InvalidReplicationFactorError),
    ],
)
def test_create_topic_checks_partitions_and_replication_factor(
    partitions: int, rf: int, error: type[errors.KafkaError]
) -> None:
    """num_partitions >= 1, 1 <= replication factor <= usable brokers."""
    h = Harness()
    h.add_brokers(1, 2)
    result = h.ctl.create_topics(h.image, [CreatableTopic("t", partitions, rf)], rng=h.rng)
    assert result.records == ()
    assert_error(result.response.topics[0].error, error)


def test_replication_factor_counts_only_usable_brokers() -> None:
    """Fenced brokers do not count toward the replication factor."""
    h = Harness()
    h.add_brokers(1)
    h.register(2)
    result = h.ctl.create_topics(h.image, [CreatableTopic("t", 1, 2)], rng=h.rng)
    assert_error(result.response.topics[0].error, errors.InvalidReplicationFactorError)


@pytest.mark.parametrize(
    ("assignments", "error"),
    [
        ({0: [1, 2], 2: [2, 1]}, errors.InvalidReplicaAssignmentError),  # gap
        ({1: [1, 2]}, errors.InvalidReplicaAssignmentError),  # not from 0
        ({0: [1, 1]}, errors.InvalidReplicaAssignmentError),  # duplicate
        ({0: []}, errors.InvalidReplicaAssignmentError),  # empty
        ({0: [1, 9]}, errors.InvalidReplicaAssignmentError),  # not registered
        ({0: [1, 2], 1: [1]}, errors.InvalidReplicaAssignmentError),  # inconsistent
        ({0: [3]}, errors.InvalidReplicaAssignmentError),  # only a fenced broker
    ],
)
def test_create_topic_validates_explicit_assignments(
    assignments: dict[int, list[int]], error: type[errors.KafkaError]
) -> None:
    """Explicit assignments are checked: INVALID_REPLICA_ASSIGNMENT, no records."""
    h = Harness()
    h.add_brokers(1, 2)
    h.register(3)  # fenced
    result = h.ctl.create_topics(h.image, [CreatableTopic("t", assignments=assignments)], rng=h.rng)
    assert result.records == ()
    assert_error(result.response.topics[0].error, error)


def test_explicit_assignment_with_a_fenced_replica_leaves_it_out_of_the_isr() -> None:
    """Registered but fenced replicas are assigned but not in sync; the leader is the
    first in-sync replica."""
    h = Harness()
    h.add_brokers(1, 2)
    h.register(3)
    t = h.create("t", assignments={0: [3, 2, 1]})
    p = h.partition(t)
    assert (p.replicas, p.isr, p.leader) == ((3, 2, 1), (2, 1), 2)


def test_assignments_with_partition_count_is_invalid_request() -> None:
    """Assignments exclude num_partitions / replication_factor: INVALID_REQUEST."""
    h = Harness()
    h.add_brokers(1)
    result = h.ctl.create_topics(h.image, [CreatableTopic("t", 1, -1, {0: [1]})], rng=h.rng)
    assert_error(result.response.topics[0].error, errors.InvalidRequestError)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("no.such.config", "1"),
        ("retention.ms", "abc"),
        ("retention.ms", "-2"),
        ("segment.bytes", "13"),
        ("segment.bytes", str(2**31)),
        ("min.insync.replicas", "0"),
        ("cleanup.policy", "delete,shred"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "WallTime"),
        ("unclean.leader.election.enable", "yes"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.type", "brotli"),
    ],
)
def test_create_topic_rejects_bad_configs(key: str, value: str) -> None:
    """Unknown names, wrong types and out-of-range values: INVALID_CONFIG."""
    h = Harness()
    h.add_brokers(1)
    result = h.ctl.create_topics(
        h.image, [CreatableTopic("t", 1, 1, configs={key: value})], rng=h.rng
    )
    assert result.records == ()
    assert_error(result.response.topics[0].error, errors.InvalidConfigError)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-1"),
        ("retention.bytes", "-1"),
        ("cleanup.policy", "compact,delete"),
        ("message.timestamp.type", "LogAppendTime"),
        ("unclean.leader.election.enable", "TRUE"),
        ("segment.bytes", "14"),
        ("max.message.bytes", "0"),
        ("min.cleanable.dirty.ratio", "0.1"),
        ("preallocate", "false"),
    ],
)
def test_good_topic_configs_pass(key: str, value: str) -> None:
    """Legal values of each type pass validation."""
    validate_topic_config(key, value)


def test_one_bad_topic_does_not_fail_the_others_and_duplicates_fail() -> None:
    """Per-topic results: a bad topic gets its error, good ones are created; a name
    listed twice is INVALID_REQUEST for both entries."""
    h = Harness()
    h.add_brokers(1)
    result, per_topic = h.create_topics(("bad", 1, 5), ("good", 2, 1), ("dup", 1, 1), ("dup", 1, 1))
    assert_error(per_topic[0], errors.InvalidReplicationFactorError)
    assert per_topic[1] is None
    assert_error(per_topic[2], errors.InvalidRequestError)
    assert_error(per_topic[3], errors.InvalidRequestError)
    h.run(result)
    assert list(h.image.topics.by_name) == ["good"]


def test_validate_only_returns_the_response_without_records() -> None:
    """validate_only: the same per-topic answers, no records."""
    h = Harness()
    h.add_brokers(1)
    result = h.ctl.create_topics(
        h.image, [CreatableTopic("t", 2, 1)], rng=h.rng, validate_only=True
    )
    assert result.records == () and result.response.topics[0].error is None
    assert result.response.topics[0].num_partitions == 2


# ---------------------------------------------------------------------------------------
# DeleteTopics, CreatePartitions


def test_delete_topics_by_name_and_id() -> None:
    """RemoveTopicRecord per topic (once even if named twice); unknown names and ids get
    UNKNOWN_TOPIC_OR_PARTITION; the topic's configs go with it."""
    h = Harness()
    h.add_brokers(1)
    a = h.create("a", configs={"retention.ms": "5"})
    b = h.create("b")
    result = h.ctl.delete_topics(h.image, names=["a", "nope"], topic_ids=[b, a, str(uuid.uuid4())])
    assert result.records == (mr.RemoveTopicRecord(a), mr.RemoveTopicRecord(b))
    per_topic = [t.error for t in result.response.topics]
    assert per_topic[0] is None and per_topic[2] is None and per_topic[3] is None
    assert_error(per_topic[1], errors.UnknownTopicOrPartitionError)
    assert_error(per_topic[4], errors.UnknownTopicOrPartitionError)
    h.run(result)
    assert not h.image.topics.by_name and not h.image.configs.topic_config("a")


def test_create_partitions_grows_a_topic_continuing_placement() -> None:
    """New partitions get PartitionRecords with the topic's replication factor; the
    preferred leaders keep spreading over the brokers."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", partitions=1, rf=2)
    result = h.ctl.create_partitions(h.image, [CreatablePartitions("t", 3)])
    assert result.response.topics[0].error is None
    assert [r.partition_id for r in result.records if isinstance(r, mr.PartitionRecord)] == [1, 2]
    h.run(result)
    leaders = sorted(h.partition(t, i).leader for i in range(3))
    assert leaders == [1, 2, 3]
    assert all(len(h.partition(t, i).replicas) == 2 for i in range(3))


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (CreatablePartitions("t", 1), errors.InvalidPartitionsError),
        (CreatablePartitions("t", 2), errors.InvalidPartitionsError),
        (CreatablePartitions("zz", 3), errors.UnknownTopicOrPartitionError),
        (CreatablePartitions("t", 4, [[1, 2]]), errors.InvalidReplicaAssignmentError),
        (CreatablePartitions("t", 3, [[1]]), errors.InvalidReplicaAssignmentError),
        (CreatablePartitions("t", 3, [[1, 9]]), errors.InvalidReplicaAssignmentError),
    ],
)
def test_create_partitions_errors(
    request_: CreatablePartitions, error: type[errors.KafkaError]
) -> None:
    """Shrinking or keeping the count: INVALID_PARTITIONS; unknown topic; assignments of
    the wrong count, width or brokers: INVALID_REPLICA_ASSIGNMENT."""
    h = Harness()
    h.add_brokers(1, 2)
    h.create("t", partitions=2, rf=2)
    result = h.ctl.create_partitions(h.image, [request_])
    assert result.records == ()
    assert_error(result.response.topics[0].error, error)


def test_create_partitions_with_assignment_and_validate_only() -> None:
    """An explicit assignment is used as given; validate_only writes nothing."""
    h = Harness()
    h.add_brokers(1, 2)
    t = h.create("t", partitions=1, rf=2)
    request = [CreatablePartitions("t", 2, [[2, 1]])]
    assert h.ctl.create_partitions(h.image, request, validate_only=True).records == ()
    h.run(h.ctl.create_partitions(h.image, request))
    assert h.partition(t, 1).replicas == (2, 1)


# ---------------------------------------------------------------------------------------
# Configs


def test_incremental_alter_configs_set_delete_append_subtract() -> None:
    """SET and DELETE write ConfigRecords only for real changes; APPEND / SUBTRACT edit a
    LIST config starting from its default."""
    h = Harness()
    h.add_brokers(1)
    h.create("t", configs={"retention.ms": "10"})
    ops = (
        AlterConfigOp("retention.ms", "SET", "10"),  # unchanged: no record
        AlterConfigOp("segment.ms", "DELETE"),  # not set: no record
        AlterConfigOp("cleanup.policy", "APPEND", "compact"),
        AlterConfigOp("max.message.bytes", "SET", "2000"),
    )
    result = h.ctl.incremental_alter_configs(h.image, [AlterConfigsResource("topic", "t", ops)])
    assert result.records == (
        mr.ConfigRecord("topic", "t", "cleanup.policy", "delete,compact"),
        mr.ConfigRecord("topic", "t", "max.message.bytes", "2000"),
    )
    h.run(result)
    ops = (
        AlterConfigOp("retention.ms", "DELETE"),
        AlterConfigOp("cleanup.policy", "SUBTRACT", "delete"),
    )
    h.run(h.ctl.incremental_alter_configs(h.image, [AlterConfigsResource("topic", "t", ops)]))
    assert h.image.configs.topic_config("t") == {
        "cleanup.policy": "compact",
        "max.message.bytes": "2000",
    }


@pytest.mark.parametrize(
    ("resource", "error"),
    [
        (
            AlterConfigsResource("topic", "zz", (AlterConfigOp("retention.ms", "SET", "1"),)),
            errors.UnknownTopicOrPartitionError,
        ),
        (
            AlterConfigsResource("topic", "t", (AlterConfigOp("bogus", "SET", "1"),)),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource("topic", "t", (AlterConfigOp("retention.ms", "SET", "x"),)),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource("topic", "t", (AlterConfigOp("retention.ms", "APPEND", "1"),)),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource("topic", "t", (AlterConfigOp("retention.ms", "SET"),)),
            errors.InvalidRequestError,
        ),
        (
            AlterConfigsResource(
                "topic",
                "t",
                (
                    AlterConfigOp("retention.ms", "SET", "1"),
                    AlterConfigOp("retention.ms", "DELETE"),
                ),
            ),
            errors.InvalidRequestError,
        ),
        (
            AlterConfigsResource("broker", "1", (AlterConfigOp("x", "SET", "1"),)),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource("broker", "1", (AlterConfigOp("log.retention.ms", "SET", "1"),)),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource(
                "broker", "1", (AlterConfigOp("leader.replication.throttled.rate", "SET", "-1"),)
            ),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource(
                "broker", "1", (AlterConfigOp("follower.replication.throttled.rate", "SET", "x"),)
            ),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource(
                "broker", "b1", (AlterConfigOp("leader.replication.throttled.rate", "SET", "1"),)
            ),
            errors.InvalidRequestError,
        ),
        (
            AlterConfigsResource(
                "topic",
                "t",
                (AlterConfigOp("leader.replication.throttled.replicas", "SET", "0:1,x"),),
            ),
            errors.InvalidConfigError,
        ),
        (
            AlterConfigsResource(
                "topic",
                "t",
                (AlterConfigOp("follower.replication.throttled.replicas", "SET", "*,0:1"),),
            ),
            errors.InvalidConfigError,
        ),
    ],
)
def test_incremental_alter_configs_errors(
    resource: AlterConfigsResource, error: type[errors.KafkaError]
) -> None:
    """Each bad resource gets its error and writes nothing; a good one in the same
    request still applies."""
    h = Harness()
    h.add_brokers(1)
    h.create("t")
    good = AlterConfigsResource("topic", "t", (AlterConfigOp("segment.ms", "SET", "5"),))
    result = h.ctl.incremental_alter_configs(h.image, [resource, good])
    assert_error(result.response.resources[0].error, error)
    assert result.response.resources[1].error is None
    assert result.records == (mr.ConfigRecord("topic", "t", "segment.ms", "5"),)
    assert h.ctl.incremental_alter_configs(h.image, [good], validate_only=True).records == ()


def test_dynamic_broker_throttle_configs_and_throttled_replica_lists() -> None:
    """The replication throttles (kafka-reassign-partitions --throttle): a broker's
    rates and the cluster default are ConfigRecords of broker resources, the replica
    lists topic ConfigRecords; Kafka's forms ("*", partition:broker) pass; a DELETE
    removes the override."""
    h = Harness()
    h.add_brokers(1, 2)
    h.create("t", partitions=2, rf=2)
    rate = "leader.replication.throttled.rate"
    result = h.ctl.incremental_alter_configs(
        h.image,
        [
            AlterConfigsResource("broker", "1", (AlterConfigOp(rate, "SET", "200000"),)),
            AlterConfigsResource(
                "broker", "", (AlterConfigOp("follower.replication.throttled.rate", "SET", "0"),)
            ),
            AlterConfigsResource(
                "topic",
                "t",
                (
                    AlterConfigOp("leader.replication.throttled.replicas", "SET", "0:1, 1:2"),
                    AlterConfigOp("follower.replication.throttled.replicas", "SET", "*"),
                ),
            ),
        ],
    )
    assert [r.error for r in result.response.resources] == [None, None, None]
    h.run(result)
    assert h.image.configs.broker_config(1) == {rate: "200000"}
    assert h.image.configs.broker_config(None) == {"follower.replication.throttled.rate": "0"}
    assert h.image.configs.topic_config("t") == {
        "leader.replication.throttled.replicas": "0:1, 1:2",
        "follower.replication.throttled.replicas": "*",
    }
    h.run(
        h.ctl.incremental_alter_configs(
            h.image, [AlterConfigsResource("broker", "1", (AlterConfigOp(rate, "DELETE"),))]
        )
    )
    assert h.image.configs.broker_config(1) == {}


def test_describe_configs_shows_value_and_source() -> None:
    """A topic override is DYNAMIC_TOPIC_CONFIG, a cluster-wide broker default of the
    synonym is DYNAMIC_DEFAULT_BROKER_CONFIG, otherwise Kafka's default."""
    h = Harness()
    h.add_brokers(1)
    h.create("t", configs={"retention.ms": "7"})
    h.run(ControllerResult((mr.ConfigRecord("broker", "", "log.segment.bytes", "2048"),), None))
    result = describe_configs(h.image, "t")
    entries = {e.name: e for e in result.entries}
    assert result.error is None and len(entries) > 20
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "7",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert entries["segment.bytes"].value == "2048"
    assert entries["segment.bytes"].source == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    assert [e.name for e in describe_configs(h.image, "t", ["min.insync.replicas"]).entries] == [
        "min.insync.replicas"
    ]
    assert_error(describe_configs(h.image, "zz").error, errors.UnknownTopicOrPartitionError)
    assert_error(describe_configs(h.image, "t", ["nope"]).error, errors.InvalidConfigError)


# ---------------------------------------------------------------------------------------
# AlterPartition


def _alter(
    h: Harness,
    topic_id: str,
    broker_id: int,
    isr: tuple[int, ...],
    *,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    broker_epoch: int | None = None,
    partition: int = 0,
) -> AlterPartitionRequest:
    p = h.partition(topic_id, partition)
    return AlterPartitionRequest(
        broker_id,
        h.epochs[broker_id] if broker_epoch is None else broker_epoch,
        topic_id,
        partition,
        p.leader_epoch if leader_epoch is None else leader_epoch,
        p.partition_epoch if partition_epoch is None else partition_epoch,
        isr,
    )


def test_alter_partition_shrinks_and_expands_the_isr() -> None:
    """One PartitionChangeRecord with the new ISR; the partition epoch grows, the leader
    epoch does not; the response carries the new state. The same ISR writes nothing."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3]})
    result = h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 3)))
    assert result.records == (mr.PartitionChangeRecord(0, t, isr=(1, 3)),)
    response = h.run(result)
    assert (response.isr, response.leader, response.leader_epoch, response.partition_epoch) == (
        (1, 3),
        1,
        0,
        1,
    )
    assert h.partition(t).isr == (1, 3)
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3))))
    assert h.partition(t).isr == (1, 2, 3) and h.partition(t).partition_epoch == 2
    same = h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3)))
    assert same.records == () and same.response.partition_epoch == 2


def test_alter_partition_errors_in_kafkas_order() -> None:
    """Each check, in Kafka's order, with a request that passes the earlier checks."""
    h = Harness()
    h.add_brokers(1, 2, 3, 4)
    t = h.create("t", assignments={0: [1, 2, 3]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2))))  # partition epoch 1
    cases: list[tuple[AlterPartitionRequest, type[errors.KafkaError]]] = [
        (_alter(h, t, 1, (1,), broker_epoch=999), errors.StaleBrokerEpochError),
        (AlterPartitionRequest(9, 0, t, 0, 0, 0, (1,)), errors.StaleBrokerEpochError),
        (
            AlterPartitionRequest(1, h.epochs[1], str(uuid.uuid4()), 0, 0, 1, (1,)),
            errors.UnknownTopicOrPartitionError,
        ),
        (
            AlterPartitionRequest(1, h.epochs[1], t, 5, 0, 1, (1,)),
            errors.UnknownTopicOrPartitionError,
        ),
        (_alter(h, t, 1, (1,), leader_epoch=1), errors.NotControllerError),
        (_alter(h, t, 1, (1,), partition_epoch=2), errors.NotControllerError),
        (_alter(h, t, 2, (1, 2), partition_epoch=0), errors.InvalidRequestError),
        (_alter(h, t, 1, (1,), partition_epoch=0), errors.InvalidUpdateVersionError),
        (_alter(h, t, 1, (2, 3)), errors.InvalidRequestError),
        (_alter(h, t, 1, (1, 4)), errors.InvalidRequestError),
        (_alter(h, t, 1, (1, 1)), errors.InvalidRequestError),
    ]
    for request, error in cases:
        with pytest.raises(error):
            h.ctl.alter_partition(h.image, request)
    assert errors.InvalidUpdateVersionError.code == 95
    assert errors.InvalidUpdateVersionError.name == "INVALID_UPDATE_VERSION"


def test_alter_partition_fenced_leader_epoch() -> None:
    """A deposed leader's old leader epoch: FENCED_LEADER_EPOCH (before the leader check)."""
    h = Harness()
    h.add_brokers(1, 2)
    t = h.create("t", assignments={0: [1, 2]})
    old = _alter(h, t, 1, (1,))
    h.now_ms = TIMEOUT_MS + 1
    h.keep_alive(2)
    h.run(h.ctl.expire_sessions(h.image, h.now_ms))
    h.now_ms += 1
    h.heartbeat(1)  # back, unfenced; broker 2 leads in epoch 1
    with pytest.raises(errors.FencedLeaderEpochError):
        h.ctl.alter_partition(h.image, old)


def test_alter_partition_refuses_fenced_and_shutting_down_replicas() -> None:
    """A fenced replica or one in controlled shutdown in the new ISR: INELIGIBLE_REPLICA."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1,))))
    h.heartbeat(2, want_fence=True)
    with pytest.raises(errors.IneligibleReplicaError):
        h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2)))
    u = h.create("u", assignments={0: [3, 1]})
    h.heartbeat(3, want_shutdown=True)
    assert h.image.cluster.brokers[3].in_controlled_shutdown
    with pytest.raises(errors.IneligibleReplicaError):
        h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 3)))
    assert h.partition(u).leader == 1


# ---------------------------------------------------------------------------------------
# Elections, rebalance, timers


def test_rebalance_moves_leadership_back_to_the_preferred_replica() -> None:
    """After the preferred leader returns to the ISR, rebalance_leaders makes it leader
    again (one PartitionChangeRecord naming it); nothing when already balanced."""
    h = Harness()
    h.add_brokers(1, 2)
    t = h.create("t", assignments={0: [1, 2]})
    h.heartbeat(1, want_fence=True)
    assert h.partition(t).leader == 2
    h.heartbeat(1)
    assert h.ctl.rebalance_leaders(h.image, h.now_ms).records == ()  # 1 not in ISR yet
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 2, (2, 1))))
    result = h.ctl.rebalance_leaders(h.image, h.now_ms)
    assert result.records == (mr.PartitionChangeRecord(0, t, leader=1),)
    assert [tp.partition for tp in result.response.elected] == [0] and not result.response.more
    h.run(result)
    p = h.partition(t)
    assert (p.leader, p.isr, p.leader_epoch) == (1, (2, 1), 2)


def _elect(
    h: Harness, election: Election, partitions: list[tuple[str, int]] | None
) -> dict[tuple[str, int], str | None]:
    """ElectLeaders run: each partition's error name (None: elected)."""
    response = h.run(h.ctl.elect_leaders(h.image, election, partitions))
    return {
        (r.topic, r.partition): None if r.error is None else r.error.name for r in response.results
    }


def test_elect_leaders_preferred_moves_leadership_where_it_can() -> None:
    """kafka-leader-election --election-type preferred: the partition whose preferred
    replica is back in the ISR is elected; one already led by it needs no election;
    one whose preferred replica is out of the ISR cannot be; an unknown partition is
    UNKNOWN_TOPIC_OR_PARTITION. Asked for every partition, only the attempted ones
    are answered."""
    h = Harness(ControllerConfig(auto_leader_rebalance_enable=False))
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2], 1: [2, 3], 2: [3, 1]})
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    assert h.partition(t, 0).leader == 2 and h.partition(t, 2).leader == 3
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 2, (2, 1), partition=0)))
    # t-2 is led by its preferred replica 3; t-0's preferred 1 is back in the ISR.
    got = _elect(h, Election.PREFERRED, [("t", 0), ("t", 1), ("t", 2), ("t", 9), ("u", 0)])
    assert got == {
        ("t", 0): None,
        ("t", 1): "ELECTION_NOT_NEEDED",
        ("t", 2): "ELECTION_NOT_NEEDED",
        ("t", 9): "UNKNOWN_TOPIC_OR_PARTITION",
        ("u", 0): "UNKNOWN_TOPIC_OR_PARTITION",
    }
    assert h.partition(t, 0).leader == 1
    # t-2's ISR lost 1 when 1 was fenced; fencing 3, its last member, leaves it leaderless.
    h.heartbeat(3, want_fence=True)
    assert (h.partition(t, 2).leader, h.partition(t, 2).isr) == (mr.NO_LEADER, (3,))
    assert _elect(h, Election.PREFERRED, [("t", 2)]) == {("t", 2): "PREFERRED_LEADER_NOT_AVAILABLE"}
    assert _elect(h, Election.PREFERRED, None) == {("t", 2): "PREFERRED_LEADER_NOT_AVAILABLE"}


def test_elect_leaders_unclean_elects_a_leaderless_partition_outside_the_isr() -> None:
    """--election-type unclean: a partition whose last ISR member is fenced gets a
    leader from the other live replicas (the ISR restarts from it), whatever the
    topic's unclean.leader.election.enable; a partition with a leader needs none;
    with no live replica at all, ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    h = Harness()
    t = h.fence_the_last_isr_member()
    p = h.partition(t)
    assert p.leader == mr.NO_LEADER and p.isr == (1,)
    assert _elect(h, Election.PREFERRED, [("t", 0)]) == {("t", 0): "PREFERRED_LEADER_NOT_AVAILABLE"}
    assert _elect(h, Election.UNCLEAN, [("t", 0)]) == {("t", 0): None}
    p = h.partition(t)
    assert (p.leader, p.isr) == (2, (2,))
    assert _elect(h, Election.UNCLEAN, [("t", 0)]) == {("t", 0): "ELECTION_NOT_NEEDED"}
    assert _elect(h, Election.UNCLEAN, None) == {}


def test_elect_leaders_unclean_without_a_live_replica() -> None:
    h = Harness()
    h.add_brokers(1)
    t = h.create("t", assignments={0: [1]})
    h.heartbeat(1, want_fence=True)
    assert h.partition(t).leader == mr.NO_LEADER
    assert _elect(h, Election.UNCLEAN, [("t", 0)]) == {("t", 0): "ELIGIBLE_LEADERS_NOT_AVAILABLE"}
    assert h.partition(t).leader == mr.NO_LEADER


def test_deadlines_follow_sessions_and_imbalance() -> None:
    """Session expiry is due just after the earliest unfenced session ends; rebalance is
    due an interval after the last run, only while something is imbalanced and the
    feature is on."""
    h = Harness()
    h.add_brokers(1, 2)
    h.now_ms = 100
    h.keep_alive(2)
    d = h.ctl.deadlines(h.image, h.now_ms)
    assert d.session_expiry_ms == TIMEOUT_MS + 1 and d.leader_rebalance_ms is None
    t = h.create("t", assignments={0: [1, 2]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2))))
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 2, (2, 1))))
    d = h.ctl.deadlines(h.image, h.now_ms)
    assert d.leader_rebalance_ms == 300_000
    off = Harness(ControllerConfig(auto_leader_rebalance_enable=False))
    assert off.ctl.deadlines(off.image, 0).session_expiry_ms is None


def test_partition_change_builder_rules() -> None:
    """ANY keeps an acceptable leader; PREFERRED picks the first replica when it is in
    the ISR; an empty target ISR keeps the current one; unclean resets the ISR."""
    p = PartitionRegistration((1, 2, 3), (2, 3), (), (), 2, 4, 9)
    tid = str(uuid.uuid4())
    assert PartitionChangeBuilder(p, tid, 0, lambda b: True).build() is None
    assert PartitionChangeBuilder(p, tid, 0, lambda b: b != 2).build() == mr.PartitionChangeRecord(
        0, tid, leader=3
    )
    q = PartitionRegistration((1, 2, 3), (1, 2), (), (), 2, 4, 9)
    preferred = PartitionChangeBuilder(q, tid, 0, lambda b: True).set_election(Election.PREFERRED)
    assert preferred.build() == mr.PartitionChangeRecord(0, tid, leader=1)
    kept = PartitionChangeBuilder(q, tid, 0, lambda b: False).set_target_isr([]).build()
    assert kept == mr.PartitionChangeRecord(0, tid, leader=mr.NO_LEADER)
    unclean = PartitionChangeBuilder(q, tid, 0, lambda b: b == 3, unclean_election=True)
    assert unclean.build() == mr.PartitionChangeRecord(0, tid, isr=(3,), leader=3)
    assert mr.PartitionChangeRecord(0, tid).leader == mr.NO_LEADER_CHANGE


# ---------------------------------------------------------------------------------------
# Producer ids, config


def test_allocate_producer_ids_hands_out_consecutive_blocks() -> None:
    """Blocks of 1000 from 0; each a ProducerIdsRecord; a stale epoch is refused."""
    h = Harness()
    h.add_brokers(1)
    first = h.ctl.allocate_producer_ids(h.image, 1, h.epochs[1])
    assert first.records == (mr.ProducerIdsRecord(1, h.epochs[1], 1000),)
    assert (first.response.producer_id_start, first.response.producer_id_len) == (0, 1000)
    h.run(first)
    assert h.run(h.ctl.allocate_producer_ids(h.image, 1, h.epochs[1])).producer_id_start == 1000
    with pytest.raises(errors.StaleBrokerEpochError):
        h.ctl.allocate_producer_ids(h.image, 1, h.epochs[1] + 1)


def test_controller_config_from_kafka_properties() -> None:
    """Dotted Kafka names map to fields; wrong types raise ValueError."""
    config = ControllerConfig.from_properties(
        {
            "broker.session.timeout.ms": "18000",
            "unclean.leader.election.enable": "true",
            "num.partitions": 3,
            "other.key": "x",
        }
    )
    assert (config.broker_session_timeout_ms, config.unclean_leader_election_enable) == (
        18000,
        True,
    )
    assert config.num_partitions == 3
    with pytest.raises(ValueError):
        ControllerConfig.from_properties({"num.partitions": "many"})
    with pytest.raises(ValueError):
        ControllerConfig.from_properties({"auto.leader.rebalance.enable": "maybe"})


def test_failover_gives_every_registered_broker_a_fresh_session() -> None:
    """A new controller built on an image starts every broker's session at its now_ms."""
    h = Harness()
    h.add_brokers(1, 2)
    ctl = QuorumController(ControllerConfig(), h.image, 50_000)
    assert ctl.expire_sessions(h.image, 50_000 + TIMEOUT_MS).records == ()
    assert ctl.expire_sessions(h.image, 50_001 + TIMEOUT_MS).response.fenced_brokers == (1, 2)


def test_a_new_controller_fences_no_one_within_a_session_of_its_activation() -> None:
    """Issue #19: brokers last heard by the old controller long ago (its failover took
    longer than a session) still get a whole session from the new controller's
    activation; a broker whose heartbeat reaches the new controller in that time stays
    unfenced, one that stays silent is fenced just after it, and the first expiry
    deadline is the end of that grace."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    activated = 10 * TIMEOUT_MS  # every session the old controller held is long over
    h.ctl = QuorumController(h.config, h.image, activated)
    assert h.ctl.deadlines(h.image, activated).session_expiry_ms == activated + TIMEOUT_MS + 1
    assert h.ctl.expire_sessions(h.image, activated + TIMEOUT_MS).records == ()
    h.now_ms = activated + TIMEOUT_MS - 1
    h.heartbeat(1)
    h.heartbeat(2)
    fenced = h.run(h.ctl.expire_sessions(h.image, activated + TIMEOUT_MS + 1)).fenced_brokers
    assert fenced == (3,)
    assert [b for b in (1, 2, 3) if h.image.cluster.brokers[b].fenced] == [3]


# ---------------------------------------------------------------------------------------
# Partition reassignment (KIP-455)


def _reassign(
    h: Harness, *items: tuple[str, int, list[int] | None]
) -> dict[tuple[str, int], str | None]:
    response = h.run(h.ctl.alter_partition_reassignments(h.image, list(items)))
    return {
        (r.topic, r.partition): None if r.error is None else r.error.name for r in response.results
    }


def _state(h: Harness, t: str) -> tuple[object, ...]:
    p = h.partition(t)
    return (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader)


def test_reassignment_adds_then_completes_once_the_new_replica_is_in_sync() -> None:
    """[1, 2, 3] -> [2, 3, 4]: broker 4 is added while 1 stays (nothing is
    under-replicated by the move); when the leader puts 4 in the ISR, the
    reassignment completes in the same AlterPartition: 1 leaves, and since it led, the
    first target replica in the ISR leads."""
    h = Harness()
    h.add_brokers(1, 2, 3, 4)
    t = h.create("t", assignments={0: [1, 2, 3]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3))))
    assert _reassign(h, ("t", 0, [2, 3, 4])) == {("t", 0): None}
    assert _state(h, t) == ((2, 3, 4, 1), (1, 2, 3), (4,), (1,), 1)
    epoch = h.partition(t).leader_epoch
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3, 4))))
    assert _state(h, t) == ((2, 3, 4), (2, 3, 4), (), (), 2)
    assert h.partition(t).leader_epoch == epoch + 1


def test_reassignment_without_a_copy_completes_at_once() -> None:
    """A removal or a reordering adds nobody: it completes in the same command."""
    h = Harness()
    h.add_brokers(1, 2, 3)
    t = h.create("t", assignments={0: [1, 2, 3]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3))))
    assert _reassign(h, ("t", 0, [3, 2, 1])) == {("t", 0): None}
    assert _state(h, t) == ((3, 2, 1), (1, 2, 3), (), (), 1)
    assert _reassign(h, ("t", 0, [2, 3])) == {("t", 0): None}
    assert _state(h, t) == ((2, 3), (2, 3), (), (), 2)
    # The target is the assignment already: nothing to do, no record.
    assert h.ctl.alter_partition_reassignments(h.image, [("t", 0, [2, 3])]).records == ()


def test_reassignment_cancel_and_restart_go_back_to_the_original_replicas() -> None:
    h = Harness()
    h.add_brokers(1, 2, 3, 4)
    t = h.create("t", assignments={0: [1, 2]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2))))
    assert _reassign(h, ("t", 0, [3, 4])) == {("t", 0): None}
    assert _state(h, t) == ((3, 4, 1, 2), (1, 2), (3, 4), (1, 2), 1)
    # 3 catches up; 4 not yet: still reassigning.
    h.run(h.ctl.alter_partition(h.image, _alter(h, t, 1, (1, 2, 3))))
    assert _state(h, t) == ((3, 4, 1, 2), (1, 2, 3), (3, 4), (1, 2), 1)
    # A new target starts again from [1, 2]: 3 stays (kept, in sync), 4 is dropped.
    assert _reassign(h, ("t", 0, [1, 3])) == {("t", 0): None}
    # 3 is added again and already in sync: the move completes in the same command.
    assert _state(h, t) == ((1, 3), (1, 3), (), (), 1)
    t2 = h.create("u", assignments={0: [1, 2]})
    h.run(h.ctl.alter_partition(h.image, _alter(h, t2, 1, (1, 2))))
    assert _reassign(h, ("u", 0, [3])) == {("u", 0): None}
    h.run(h.ctl.alter_partition(h.image, _alter(h, t2, 1, (1, 2))))  # no change
    assert _reassign(h, ("u", 0, None)) == {("u", 0): None}
    assert _state(h, t2) == ((1, 2), (1, 2), (), (), 1)
    assert _reassign(h, ("u", 0, None)) == {("u", 0): "NO_REASSIGNMENT_IN_PROGRESS"}


def test_reassignment_refusals() -> None:
    h = Harness()
    h.add_brokers(1, 2)
    h.create("t", assignments={0: [1, 2]})
    items: list[tuple[str, int, list[int] | None]] = [
        ("t", 5, [1]),
        ("nope", 0, [1]),
        ("t", 0, []),
        ("t", 0, [1, 1]),
        ("t", 0, [1, 9]),
    ]
    result = h.ctl.alter_partition_reassignments(h.image, items)
    assert result.records == ()
    assert [None if r.error is None else r.error.name for r in result.response.results] == [
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "INVALID_REPLICA_ASSIGNMENT",
        "INVALID_REPLICA_ASSIGNMENT",
        "INVALID_REPLICA_ASSIGNMENT",
    ]
