"""Property tests for metadata replay: random valid record sequences, generated from a
small model of the cluster (so every record fits the state before it), replayed in one
delta or in many; images written back as records; every record through bytes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.common.scram import ITERATIONS_MAX, ITERATIONS_MIN, SCRAM_MECHANISMS
from raftka.metadata import metadata_records as mr
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage

BROKERS = list(range(5))
NAMES = ["a", "b", "c", "d"]
KEYS = ["retention.ms", "cleanup.policy"]


@dataclass
class _Partition:
    replicas: tuple[int, ...]
    leader: int


@dataclass
class _Model:
    """Just enough state to emit only records that replay cleanly."""

    brokers: dict[int, int] = field(default_factory=dict)  # id -> broker epoch
    topics: dict[str, str] = field(default_factory=dict)  # id -> name
    partitions: dict[str, dict[int, _Partition]] = field(default_factory=dict)
    epoch_counter: int = 0
    id_counter: int = 0
    next_producer_id: int = 0
    scram: set[tuple[str, str]] = field(default_factory=set)  # (user, mechanism)
    acls: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (principal, op)


def _uuid(n: int) -> str:
    return str(uuid.UUID(int=n + 1, version=4))


def _subset(draw: st.DrawFn, items: tuple[int, ...], min_size: int = 0) -> tuple[int, ...]:
    picked = draw(st.lists(st.sampled_from(items), unique=True, min_size=min_size))
    return tuple(picked)


def _assignment(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    replicas = tuple(draw(st.lists(st.sampled_from(BROKERS), unique=True, min_size=1, max_size=3)))
    isr = _subset(draw, replicas)
    leader = draw(st.sampled_from((*isr, mr.NO_LEADER)))
    return replicas, isr, leader


def _step(draw: st.DrawFn, m: _Model) -> list[mr.MetadataRecord]:
    kind = draw(
        st.sampled_from(
            [
                "register",
                "unregister",
                "broker_change",
                "topic",
                "partition_change",
                "partition_change",
                "remove",
                "config",
                "pid",
                "scram_set",
                "scram_remove",
                "acl_create",
                "acl_remove",
                "noop",
            ]
        )
    )
    if kind == "register":
        m.epoch_counter += 1
        broker = draw(st.sampled_from(BROKERS))
        m.brokers[broker] = m.epoch_counter
        return [
            mr.RegisterBrokerRecord(
                broker_id=broker,
                incarnation_id=_uuid(broker),
                broker_epoch=m.epoch_counter,
                endpoints=(mr.Endpoint("PLAINTEXT", f"host{broker}", 9092 + broker),),
                rack=draw(st.sampled_from([None, "r1"])),
                fenced=draw(st.booleans()),
                in_controlled_shutdown=draw(st.booleans()),
            )
        ]
    if kind in ("unregister", "broker_change") and m.brokers:
        broker = draw(st.sampled_from(sorted(m.brokers)))
        epoch = m.brokers[broker]
        if kind == "unregister":
            del m.brokers[broker]
            return [mr.UnregisterBrokerRecord(broker_id=broker, broker_epoch=epoch)]
        return [
            mr.BrokerRegistrationChangeRecord(
                broker_id=broker,
                broker_epoch=epoch,
                fenced=draw(st.sampled_from([-1, 0, 1])),
                in_controlled_shutdown=draw(st.sampled_from([0, 1])),
            )
        ]
    if kind == "topic":
        free = [n for n in NAMES if n not in m.topics.values()]
        if not free:
            return []
        m.id_counter += 1
        topic_id = _uuid(1000 + m.id_counter)
        m.topics[topic_id] = draw(st.sampled_from(free))
        out: list[mr.MetadataRecord] = [mr.TopicRecord(name=m.topics[topic_id], topic_id=topic_id)]
        m.partitions[topic_id] = {}
        for index in range(draw(st.integers(1, 3))):
            replicas, isr, leader = _assignment(draw)
            m.partitions[topic_id][index] = _Partition(replicas, leader)
            out.append(
                mr.PartitionRecord(
                    partition_id=index,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=isr,
                    leader=leader,
                    leader_epoch=draw(st.integers(0, 3)),
                    partition_epoch=draw(st.integers(0, 3)),
                    eligible_leader_replicas=draw(st.sampled_from([None, isr])),
                )
            )
        return out
    if kind == "partition_change" and m.topics:
        topic_id = draw(st.sampled_from(sorted(m.topics)))
        index = draw(st.sampled_from(sorted(m.partitions[topic_id])))
        part = m.partitions[topic_id][index]
        if draw(st.booleans()):
            replicas, isr, leader = _assignment(draw)
            new_replicas: tuple[int, ...] | None = replicas
            moving = (replicas, ()) if draw(st.booleans()) else ((), ())
        else:
            new_replicas, replicas, moving = None, part.replicas, (None, None)
            isr = _subset(draw, replicas)
            leader = draw(st.sampled_from((*replicas, mr.NO_LEADER)))
        keep_leader = part.leader in (*replicas, mr.NO_LEADER) and draw(st.booleans())
        record_leader = mr.NO_LEADER_CHANGE if keep_leader else leader
        part.replicas = replicas
        part.leader = part.leader if keep_leader else leader
        return [
            mr.PartitionChangeRecord(
                partition_id=index,
                topic_id=topic_id,
                isr=isr,
                leader=record_leader,
                replicas=new_replicas,
                adding_replicas=moving[0],
                removing_replicas=moving[1],
                last_known_elr=draw(st.sampled_from([None, (), isr])),
            )
        ]
    if kind == "remove" and m.topics:
        topic_id = draw(st.sampled_from(sorted(m.topics)))
        del m.topics[topic_id], m.partitions[topic_id]
        return [mr.RemoveTopicRecord(topic_id=topic_id)]
    if kind == "config":
        value = draw(st.sampled_from([None, "1", "2"]))
        key = draw(st.sampled_from(KEYS))
        if m.topics and draw(st.booleans()):
            name = m.topics[draw(st.sampled_from(sorted(m.topics)))]
            return [mr.ConfigRecord("topic", name, key, value)]
        return [mr.ConfigRecord("broker", draw(st.sampled_from(["", "1"])), key, value)]
    if kind == "pid":
        m.next_producer_id += draw(st.integers(1, 1000))
        return [
            mr.ProducerIdsRecord(broker_id=0, broker_epoch=1, next_producer_id=m.next_producer_id)
        ]
    if kind == "scram_set":
        user = draw(st.sampled_from(["alice", "bob"]))
        mechanism = draw(st.sampled_from(sorted(SCRAM_MECHANISMS)))
        m.scram.add((user, mechanism))
        size = 32 if mechanism == "SCRAM-SHA-256" else 64
        return [
            mr.UserScramCredentialRecord(
                name=user,
                mechanism=mechanism,
                salt=draw(st.binary(min_size=12, max_size=32)),
                stored_key=draw(st.binary(min_size=size, max_size=size)),
                server_key=draw(st.binary(min_size=size, max_size=size)),
                iterations=draw(st.integers(ITERATIONS_MIN, ITERATIONS_MAX)),
            )
        ]
    if kind == "scram_remove" and m.scram:
        user, mechanism = draw(st.sampled_from(sorted(m.scram)))
        m.scram.discard((user, mechanism))
        return [mr.RemoveUserScramCredentialRecord(name=user, mechanism=mechanism)]
    if kind == "acl_create":
        # Replay refuses a binding that exists, so the model keeps the distinct part.
        entry = (draw(st.sampled_from(["User:alice", "User:bob"])), draw(st.sampled_from([3, 4])))
        if entry in m.acls.values():
            return [mr.NoOpRecord()]
        m.id_counter += 1
        acl_id = _uuid(10_000 + m.id_counter)
        m.acls[acl_id] = entry
        return [
            mr.AccessControlEntryRecord(
                id=acl_id,
                resource_type=2,
                resource_name="orders",
                pattern_type=3,
                principal=entry[0],
                host="*",
                operation=entry[1],
                permission_type=3,
            )
        ]
    if kind == "acl_remove" and m.acls:
        acl_id = draw(st.sampled_from(sorted(m.acls)))
        del m.acls[acl_id]
        return [mr.RemoveAccessControlEntryRecord(id=acl_id)]
    return [mr.NoOpRecord()]


@st.composite
def record_sequences(draw: st.DrawFn) -> list[mr.MetadataRecord]:
    model = _Model()
    records: list[mr.MetadataRecord] = []
    for _ in range(draw(st.integers(0, 30))):
        records.extend(_step(draw, model))
    return records


def _one_delta(records: list[mr.MetadataRecord]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for offset, record in enumerate(records):
        delta.replay(record, offset=offset, epoch=1)
    return delta.apply()


@settings(max_examples=150, deadline=None)
@given(records=record_sequences(), data=st.data())
def test_one_delta_equals_many_small_deltas(
    records: list[mr.MetadataRecord], data: st.DataObject
) -> None:
    """Replaying a valid sequence in one delta, or cut at random points into many
    deltas applied one after another, gives equal images (offsets included)."""
    cuts = data.draw(st.sets(st.integers(0, len(records))))
    image = MetadataImage.EMPTY
    delta = MetadataDelta(image)
    for offset, record in enumerate(records):
        if offset in cuts:
            image = delta.apply()
            delta = MetadataDelta(image)
        delta.replay(record, offset=offset, epoch=1)
    assert delta.apply() == _one_delta(records)


@settings(max_examples=150, deadline=None)
@given(records=record_sequences())
def test_image_to_records_round_trip(records: list[mr.MetadataRecord]) -> None:
    """image -> to_records -> bytes -> records -> replay over EMPTY == image."""
    image = _one_delta(records)
    written = mr.decode_records(mr.encode_records(image.to_records()))
    assert image_from_records(written, image.offset, image.epoch) == image


@settings(max_examples=100, deadline=None)
@given(records=record_sequences())
def test_every_record_round_trips_through_bytes(records: list[mr.MetadataRecord]) -> None:
    """Every generated record decodes to itself, alone and as a list."""
    for record in records:
        assert mr.decode_record(mr.encode_record(record)) == record
    assert mr.decode_records(mr.encode_records(records)) == records


@settings(max_examples=100, deadline=None)
@given(records=record_sequences(), data=st.data())
def test_local_changes_match_the_images(
    records: list[mr.MetadataRecord], data: st.DataObject
) -> None:
    """For a random split (before, after), local_changes(b) of the second delta agrees
    with the two images: a partition led by b in the new image and changed is in
    leaders, one b replicates but does not lead is in followers, and every delete was a
    replica of b before and is not one now (same topic id)."""
    cut = data.draw(st.integers(0, len(records)))
    before = _one_delta(records[:cut]) if cut else MetadataImage.EMPTY
    delta = MetadataDelta(before)
    delta.replay_all(records[cut:])
    after = delta.apply()
    for broker in BROKERS:
        changes = delta.local_changes(broker)
        for tp, reg in changes.leaders.items():
            assert after.topics.partition(tp.topic_id, tp.partition) == reg
            assert reg.leader == broker
            assert before.topics.partition(tp.topic_id, tp.partition) != reg
        for tp, reg in changes.followers.items():
            assert after.topics.partition(tp.topic_id, tp.partition) == reg
            assert broker in reg.replicas and reg.leader != broker
        for tp in changes.deletes:
            old = before.topics.partition(tp.topic_id, tp.partition)
            new = after.topics.partition(tp.topic_id, tp.partition)
            assert old is not None and broker in old.replicas
            assert new is None or broker not in new.replicas
        # Completeness: every partition of b that differs between the images is reported.
        for tp in after.topics.partitions_with_replica(broker):
            new_reg = after.topics.partition(tp.topic_id, tp.partition)
            if before.topics.partition(tp.topic_id, tp.partition) != new_reg:
                assert tp in changes.leaders or tp in changes.followers
        for tp in before.topics.partitions_with_replica(broker):
            new_reg = after.topics.partition(tp.topic_id, tp.partition)
            if new_reg is None or broker not in new_reg.replicas:
                assert tp in changes.deletes
