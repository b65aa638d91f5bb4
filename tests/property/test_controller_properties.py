"""Property test of the controller core: hypothesis draws random command sequences
(register, heartbeat with any flags, clock advance plus session expiry, create and
delete topics, AlterPartition from the leader or from anyone, preferred-leader
rebalance) over four brokers. Each command's records are replayed through MetadataDelta
at the next log offsets, and after every step the cluster invariants are checked:
every leader is in its ISR and is an unfenced broker (or there is no leader); the ISR is
a non-empty subset of the replicas; leader and partition epochs never decrease; a fenced
broker leads nothing; broker epochs never decrease. A command that raises a Kafka error
must leave the image as it was (it returned no records)."""

from __future__ import annotations

import contextlib
import random
import uuid
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.common.errors import KafkaError
from raftka.metadata.controller import QuorumController
from raftka.metadata.controller_api import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    ControllerResult,
    CreatableTopic,
    RegisterBrokerRequest,
)
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import NO_LEADER, Endpoint
from raftka.server_common.controller_config import ControllerConfig

R = TypeVar("R")
BROKERS = [1, 2, 3, 4]
TOPICS = ["a", "b", "c"]
TIMEOUT_MS = 9000

_op = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(BROKERS), st.integers(0, 2)),
    st.tuples(
        st.just("heartbeat"),
        st.sampled_from(BROKERS),
        st.booleans(),  # caught up
        st.sampled_from([(False, False)] * 4 + [(True, False), (False, True), (True, True)]),
    ),
    st.tuples(st.just("expire"), st.sampled_from([0, 1000, TIMEOUT_MS // 2, TIMEOUT_MS + 1])),
    st.tuples(
        st.just("create"),
        st.sampled_from(TOPICS),
        st.integers(1, 3),
        st.integers(1, 3),
        st.sampled_from([None, "true"]),
    ),
    st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
    st.tuples(
        st.just("alter"),
        st.sampled_from(TOPICS),
        st.integers(0, 2),
        st.lists(st.booleans(), min_size=3, max_size=3),  # which replicas to propose
        st.booleans(),  # sent by the leader (else by a random broker)
    ),
    st.tuples(st.just("rebalance")),
)


def _check(before: MetadataImage, after: MetadataImage) -> None:
    for broker_id, old in before.cluster.brokers.items():
        new = after.cluster.broker(broker_id)
        assert new is not None and new.epoch >= old.epoch, (old, new)
    for topic in after.topics.by_id.values():
        for index, p in topic.partitions.items():
            where = f"{topic.name}-{index} {p}"
            assert p.isr and set(p.isr) <= set(p.replicas), where
            if p.leader != NO_LEADER:
                assert p.leader in p.isr, where
                leader = after.cluster.broker(p.leader)
                assert leader is not None and not leader.fenced, where
            old = before.topics.partition(topic.topic_id, index)
            if old is not None:
                assert p.leader_epoch >= old.leader_epoch, where
                assert p.partition_epoch >= old.partition_epoch, where
    for broker in after.cluster.brokers.values():
        if broker.fenced:
            assert not after.topics.partitions_led_by(broker.broker_id), broker


class _Sim:
    def __init__(self, seed: int) -> None:
        self.image = MetadataImage.EMPTY
        self.now_ms = 0
        self.ctl = QuorumController(ControllerConfig(), self.image, 0)
        self.rng = random.Random(seed)
        self.epochs: dict[int, int] = {}

    def bootstrap(self) -> None:
        """Every broker registered and caught up, so the random commands start from a
        working cluster (they fence, shut down and re-register brokers from there)."""
        for broker_id in BROKERS:
            self.step(("register", broker_id, 0))
        for broker_id in BROKERS:
            self.step(("heartbeat", broker_id, True, (False, False)))

    def commit(self, result: ControllerResult[R]) -> R:
        # One payload, one log entry per command, as the controller process appends.
        delta = MetadataDelta(self.image)
        delta.replay_all(result.records)
        if result.records:
            delta.offset, delta.epoch = self.image.offset + 1, 1
        after = delta.apply()
        _check(self.image, after)
        self.image = after
        return result.response

    def step(self, op: tuple[object, ...]) -> None:
        image, next_offset = self.image, self.image.offset + 1
        kind = op[0]
        if kind == "register":
            broker_id, generation = op[1], op[2]
            assert isinstance(broker_id, int) and isinstance(generation, int)
            incarnation = str(uuid.UUID(int=broker_id * 10 + generation + 1, version=4))
            request = RegisterBrokerRequest(
                broker_id, incarnation, (Endpoint("PLAINTEXT", "h", 9000 + broker_id),)
            )
            response = self.commit(
                self.ctl.register_broker(
                    image, request, now_ms=self.now_ms, next_offset=next_offset
                )
            )
            self.epochs[broker_id] = response.broker_epoch
        elif kind == "heartbeat":
            broker_id, caught_up, flags = op[1], op[2], op[3]
            assert isinstance(broker_id, int) and isinstance(flags, tuple)
            if broker_id not in self.epochs:
                return
            offset = image.offset if caught_up else -1
            request = BrokerHeartbeatRequest(broker_id, self.epochs[broker_id], offset, *flags)
            self.commit(
                self.ctl.heartbeat(image, request, now_ms=self.now_ms, next_offset=next_offset)
            )
        elif kind == "expire":
            assert isinstance(op[1], int)
            self.now_ms += op[1]
            self.commit(self.ctl.expire_sessions(image, self.now_ms))
        elif kind == "create":
            name, partitions, rf, unclean = op[1], op[2], op[3], op[4]
            assert isinstance(name, str) and isinstance(partitions, int) and isinstance(rf, int)
            configs = {} if unclean is None else {"unclean.leader.election.enable": "true"}
            self.commit(
                self.ctl.create_topics(
                    image, [CreatableTopic(name, partitions, rf, configs=configs)], rng=self.rng
                )
            )
        elif kind == "delete":
            assert isinstance(op[1], str)
            self.commit(self.ctl.delete_topics(image, names=[op[1]]))
        elif kind == "alter":
            name, index, members, by_leader = op[1], op[2], op[3], op[4]
            assert isinstance(name, str) and isinstance(index, int) and isinstance(members, list)
            topic = image.topics.topic_by_name(name)
            p = None if topic is None else topic.partition(index)
            if topic is None or p is None:
                return
            sender = p.leader if by_leader and p.leader != NO_LEADER else self.rng.choice(BROKERS)
            chosen = [r for r, keep in zip(p.replicas, members, strict=False) if keep]
            isr = tuple(dict.fromkeys([sender, *chosen]))
            request = AlterPartitionRequest(
                sender,
                self.epochs.get(sender, -1) if sender >= 0 else 0,
                topic.topic_id,
                index,
                p.leader_epoch,
                p.partition_epoch,
                isr,
            )
            self.commit(self.ctl.alter_partition(image, request))
        else:
            self.commit(self.ctl.rebalance_leaders(image, self.now_ms))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(st.integers(0, 2**32), st.lists(_op, min_size=5, max_size=50))
def test_random_command_sequences_keep_cluster_invariants(
    seed: int, ops: list[tuple[object, ...]]
) -> None:
    """Random commands, each replayed and checked (see the module doc)."""
    sim = _Sim(seed)
    sim.bootstrap()
    for op in ops:
        before = sim.image
        try:
            sim.step(op)
        except KafkaError:
            assert sim.image is before, op  # an error writes nothing


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32), st.lists(_op, min_size=5, max_size=50))
def test_every_broker_eventually_gets_a_leader_back(
    seed: int, ops: list[tuple[object, ...]]
) -> None:
    """After any sequence, if every broker registers again and heartbeats caught up, no
    partition is left without a leader: every ISR member is back, so election succeeds."""
    sim = _Sim(seed)
    sim.bootstrap()
    for op in ops:
        with contextlib.suppress(KafkaError):
            sim.step(op)
    sim.step(("expire", TIMEOUT_MS + 1))  # old sessions end, so new incarnations may register
    for broker_id in BROKERS:
        sim.step(("register", broker_id, 3))
    for broker_id in BROKERS:
        sim.step(("heartbeat", broker_id, True, (False, False)))
    for topic in sim.image.topics.by_id.values():
        for index, p in topic.partitions.items():
            assert p.leader != NO_LEADER, (topic.name, index, p)
