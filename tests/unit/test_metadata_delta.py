"""Fixture tests for raftka.metadata image and delta, in Kafka's style:
IMAGE1 + DELTA1_RECORDS == IMAGE2 for each sub-image, structural sharing, epoch rules,
local changes and replay errors."""

from __future__ import annotations

import pytest

from raftka.metadata import image as im
from raftka.metadata import metadata_records as mr
from raftka.metadata.delta import MetadataDelta, MetadataReplayError, image_from_records
from raftka.metadata.image import FrozenMap, MetadataImage

FOO = "00000000-0000-4000-8000-00000000f001"
BAR = "00000000-0000-4000-8000-00000000ba02"
BAZ = "00000000-0000-4000-8000-00000000ba23"
INC = "00000000-0000-4000-8000-000000000001"
EP = (mr.Endpoint("PLAINTEXT", "localhost", 9092),)


def _broker(broker_id: int, epoch: int, fenced: bool = False) -> im.BrokerRegistration:
    return im.BrokerRegistration(broker_id, INC, epoch, EP, None, fenced, False)


def _part(
    replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, le: int = 0, pe: int = 0
) -> im.PartitionRegistration:
    return im.PartitionRegistration(replicas, isr, (), (), leader, le, pe)


def _replay(image: MetadataImage, records: list[mr.MetadataRecord]) -> MetadataDelta:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta


# IMAGE1: brokers 1, 2, 3 (3 fenced); topics foo (2 partitions) and bar (1 partition);
# one topic config on foo and one broker config; producer ids up to 1000.
CLUSTER1 = im.ClusterImage(
    FrozenMap({1: _broker(1, 10), 2: _broker(2, 11), 3: _broker(3, 12, True)})
)
FOO1 = im.TopicImage(
    "foo", FOO, FrozenMap({0: _part((1, 2, 3), (1, 2, 3), 1), 1: _part((2, 3, 1), (2, 3), 2)})
)
BAR1 = im.TopicImage("bar", BAR, FrozenMap({0: _part((3, 1), (3, 1), 3, le=5, pe=7)}))
TOPICS1 = im.TopicsImage(FrozenMap({FOO: FOO1, BAR: BAR1}), FrozenMap({"foo": FOO1, "bar": BAR1}))
CONFIGS1 = im.ConfigurationsImage(
    FrozenMap(
        {
            im.ConfigResource("topic", "foo"): FrozenMap({"retention.ms": "1000"}),
            im.ConfigResource("broker", "1"): FrozenMap({"log.retention.hours": "1"}),
        }
    )
)
IMAGE1 = MetadataImage(10, 1, CLUSTER1, TOPICS1, CONFIGS1, im.ProducerIdsImage(1000))

# DELTA1: broker 3 unfenced and 2 enters controlled shutdown, broker 4 registers,
# broker 1 re-registers; foo-0's leader moves to 2 and ISR shrinks; bar is deleted;
# topic baz created; configs changed; a producer-id block handed out.
DELTA1_RECORDS: list[mr.MetadataRecord] = [
    mr.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=12, fenced=mr.UNFENCE),
    mr.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=11, in_controlled_shutdown=1),
    mr.RegisterBrokerRecord(broker_id=4, incarnation_id=INC, broker_epoch=20, endpoints=EP),
    mr.RegisterBrokerRecord(
        broker_id=1, incarnation_id=INC, broker_epoch=21, endpoints=EP, fenced=False
    ),
    mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, leader=2, isr=(2, 3)),
    mr.RemoveTopicRecord(topic_id=BAR),
    mr.TopicRecord(name="baz", topic_id=BAZ),
    mr.PartitionRecord(partition_id=0, topic_id=BAZ, replicas=(4, 1), isr=(4, 1), leader=4),
    mr.ConfigRecord("topic", "foo", "retention.ms", None),
    mr.ConfigRecord("topic", "baz", "cleanup.policy", "compact"),
    mr.ConfigRecord("broker", "", "num.io.threads", "8"),
    mr.ProducerIdsRecord(broker_id=1, broker_epoch=21, next_producer_id=2000),
    mr.NoOpRecord(),
]

CLUSTER2 = im.ClusterImage(
    FrozenMap(
        {
            1: _broker(1, 21),
            2: im.BrokerRegistration(2, INC, 11, EP, None, False, True),
            3: _broker(3, 12),
            4: _broker(4, 20, fenced=True),
        }
    )
)
FOO2 = im.TopicImage(
    "foo", FOO, FrozenMap({0: _part((1, 2, 3), (2, 3), 2, le=1, pe=1), 1: FOO1.partitions[1]})
)
BAZ2 = im.TopicImage("baz", BAZ, FrozenMap({0: _part((4, 1), (4, 1), 4)}))
TOPICS2 = im.TopicsImage(FrozenMap({FOO: FOO2, BAZ: BAZ2}), FrozenMap({"foo": FOO2, "baz": BAZ2}))
CONFIGS2 = im.ConfigurationsImage(
    FrozenMap(
        {
            im.ConfigResource("broker", "1"): FrozenMap({"log.retention.hours": "1"}),
            im.ConfigResource("topic", "baz"): FrozenMap({"cleanup.policy": "compact"}),
            im.ConfigResource("broker", ""): FrozenMap({"num.io.threads": "8"}),
        }
    )
)
IMAGE2 = MetadataImage(10, 1, CLUSTER2, TOPICS2, CONFIGS2, im.ProducerIdsImage(2000))


def test_image1_plus_delta1_is_image2() -> None:
    """Replaying DELTA1_RECORDS over IMAGE1 gives IMAGE2, compared sub-image by
    sub-image so a failure names the part that differs."""
    image = _replay(IMAGE1, DELTA1_RECORDS).apply()
    assert image.cluster == CLUSTER2
    assert image.topics == TOPICS2
    assert image.configs == CONFIGS2
    assert image.producer_ids == im.ProducerIdsImage(2000)
    assert image == IMAGE2


def test_images_round_trip_through_records() -> None:
    """EMPTY, IMAGE1 and IMAGE2, written as records (and through bytes) and replayed
    over EMPTY, come back equal."""
    for image in (MetadataImage.EMPTY, IMAGE1, IMAGE2):
        records = mr.decode_records(mr.encode_records(image.to_records()))
        assert image_from_records(records, image.offset, image.epoch) == image


def test_untouched_parts_are_shared() -> None:
    """A delta that changes one partition of foo rebuilds only the topics image and
    foo: cluster, configs, producer ids, topic bar and partition foo-1 are the same
    objects (``is``)."""
    delta = _replay(IMAGE1, [mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, isr=(1, 2))])
    image = delta.apply()
    assert image.cluster is IMAGE1.cluster
    assert image.configs is IMAGE1.configs
    assert image.producer_ids is IMAGE1.producer_ids
    assert image.topics is not IMAGE1.topics
    assert image.topics.by_id[BAR] is BAR1
    assert image.topics.by_name["bar"] is BAR1
    assert image.topics.by_id[FOO] is image.topics.by_name["foo"]
    assert image.topics.by_id[FOO].partitions[1] is FOO1.partitions[1]
    assert IMAGE1.topics.by_id[FOO] is FOO1  # the old image is untouched
    assert FOO1.partitions[0].isr == (1, 2, 3)


def test_cluster_only_delta_shares_topics() -> None:
    """A broker fencing change leaves the topics image itself shared; a NoOp-only
    delta without an offset returns the very same image."""
    image = _replay(
        IMAGE1, [mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=mr.FENCE)]
    ).apply()
    assert image.topics is IMAGE1.topics
    assert image.cluster.brokers[2] is IMAGE1.cluster.brokers[2]
    assert image.cluster.brokers[1].fenced
    assert _replay(IMAGE1, [mr.NoOpRecord()]).apply() is IMAGE1


def test_offsets_and_epochs_advance_with_replay() -> None:
    """replay(record, offset, epoch) sets the image's offset/epoch; offsets must grow
    and epochs must not shrink."""
    delta = MetadataDelta(IMAGE1)
    delta.replay(mr.NoOpRecord(), offset=11, epoch=2)
    assert (delta.apply().offset, delta.apply().epoch) == (11, 2)
    with pytest.raises(MetadataReplayError, match="offset"):
        delta.replay(mr.NoOpRecord(), offset=11)
    with pytest.raises(MetadataReplayError, match="epoch"):
        delta.replay(mr.NoOpRecord(), offset=12, epoch=1)


def test_partition_epoch_and_leader_epoch_rules() -> None:
    """Every PartitionChangeRecord bumps partition_epoch; leader_epoch grows only when
    the record names a leader (also the same leader again, Kafka's way to force it)."""
    bar = (BAR, 0)
    steps: list[tuple[mr.PartitionChangeRecord, int, int, int]] = [
        # record, expected leader, leader_epoch, partition_epoch (start: 3, 5, 7)
        (mr.PartitionChangeRecord(partition_id=0, topic_id=BAR, isr=(3,)), 3, 5, 8),
        (mr.PartitionChangeRecord(partition_id=0, topic_id=BAR, leader=1, isr=(1,)), 1, 6, 9),
        (mr.PartitionChangeRecord(partition_id=0, topic_id=BAR, leader=1), 1, 7, 10),
        (
            mr.PartitionChangeRecord(partition_id=0, topic_id=BAR, leader=mr.NO_LEADER),
            mr.NO_LEADER,
            8,
            11,
        ),
        (
            mr.PartitionChangeRecord(partition_id=0, topic_id=BAR, replicas=(3, 1, 2)),
            mr.NO_LEADER,
            8,
            12,
        ),
    ]
    image = IMAGE1
    for record, leader, leader_epoch, partition_epoch in steps:
        image = _replay(image, [record]).apply()
        part = image.topics.partition(*bar)
        assert part is not None
        assert (part.leader, part.leader_epoch, part.partition_epoch) == (
            leader,
            leader_epoch,
            partition_epoch,
        ), record


def test_local_changes_leader_change_and_isr_change() -> None:
    """foo-0's leader moves 1 -> 2: broker 2 now leads it, brokers 1 and 3 follow it
    (an ISR change is reported to every replica), and partitions not in the delta
    (foo-1) are reported to nobody."""
    delta = _replay(IMAGE1, [mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, leader=2)])
    foo0 = im.TopicIdPartition(FOO, "foo", 0)
    new = delta.apply().topics.partition(FOO, 0)
    two = delta.local_changes(2)
    assert dict(two.leaders) == {foo0: new} and not two.followers and not two.deletes
    for broker in (1, 3):
        changes = delta.local_changes(broker)
        assert dict(changes.followers) == {foo0: new} and not changes.leaders
    assert delta.local_changes(9).is_empty()


def test_local_changes_reassignment_away_deletes() -> None:
    """Moving foo-0 from replicas (1, 2, 3) to (1, 2, 4) tells broker 3 to delete it,
    broker 4 to follow it and broker 1 that it still leads it."""
    delta = _replay(
        IMAGE1,
        [mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, replicas=(1, 2, 4), isr=(1, 2))],
    )
    foo0 = im.TopicIdPartition(FOO, "foo", 0)
    assert delta.local_changes(3).deletes == {foo0}
    assert not delta.local_changes(3).followers
    assert foo0 in delta.local_changes(4).followers
    assert foo0 in delta.local_changes(1).leaders


def test_local_changes_topic_deletion_and_new_topic() -> None:
    """Deleting bar deletes bar-0 on its replicas (3 and 1); a new topic baz tells its
    leader 4 to lead and 1 to follow; a new topic of a deleted one's name keeps both
    apart by topic id."""
    delta = _replay(IMAGE1, DELTA1_RECORDS)
    bar0 = im.TopicIdPartition(BAR, "bar", 0)
    baz0 = im.TopicIdPartition(BAZ, "baz", 0)
    assert delta.local_changes(3).deletes == {bar0}
    one = delta.local_changes(1)
    assert one.deletes == {bar0}
    assert set(one.followers) == {baz0, im.TopicIdPartition(FOO, "foo", 0)}
    assert set(delta.local_changes(4).leaders) == {baz0}

    new_bar = "00000000-0000-4000-8000-00000000ba99"
    reuse = _replay(
        IMAGE1,
        [
            mr.RemoveTopicRecord(topic_id=BAR),
            mr.TopicRecord(name="bar", topic_id=new_bar),
            mr.PartitionRecord(partition_id=0, topic_id=new_bar, replicas=(1,), isr=(1,), leader=1),
        ],
    )
    changes = reuse.local_changes(1)
    assert changes.deletes == {bar0}
    assert set(changes.leaders) == {im.TopicIdPartition(new_bar, "bar", 0)}
    image = reuse.apply()
    assert image.topics.by_name["bar"].topic_id == new_bar
    assert BAR not in image.topics.by_id


def test_topic_created_and_deleted_in_one_delta_leaves_nothing() -> None:
    """A topic created and removed within one delta is absent from the image, and its
    configs too, and no broker is told about it."""
    delta = _replay(
        IMAGE1,
        [
            mr.TopicRecord(name="tmp", topic_id=BAZ),
            mr.PartitionRecord(partition_id=0, topic_id=BAZ, replicas=(1,), isr=(1,), leader=1),
            mr.ConfigRecord("topic", "tmp", "k", "v"),
            mr.RemoveTopicRecord(topic_id=BAZ),
        ],
    )
    image = delta.apply()
    assert image.topics == IMAGE1.topics
    assert image.configs == IMAGE1.configs
    assert delta.local_changes(1).is_empty()


def test_image_queries() -> None:
    """The helper queries answer from IMAGE1: live brokers, partitions led by a broker,
    partition by topic name and index, configs by resource."""
    assert [b.broker_id for b in IMAGE1.cluster.live_brokers()] == [1, 2]
    assert IMAGE1.topics.partitions_led_by(1) == [im.TopicIdPartition(FOO, "foo", 0)]
    assert IMAGE1.topics.partitions_led_by(3) == [im.TopicIdPartition(BAR, "bar", 0)]
    assert IMAGE1.topics.partition_by_name("foo", 1) == _part((2, 3, 1), (2, 3), 2)
    assert IMAGE1.topics.partition_by_name("nope", 0) is None
    assert IMAGE1.configs.topic_config("foo") == {"retention.ms": "1000"}
    assert IMAGE1.configs.broker_config(1) == {"log.retention.hours": "1"}
    assert IMAGE1.configs.broker_config(None) == {}
    assert IMAGE1.cluster.brokers[1].endpoint("PLAINTEXT") == EP[0]
    assert not IMAGE1.is_empty() and MetadataImage.EMPTY.is_empty()


REPLAY_ERRORS: list[tuple[str, mr.MetadataRecord, str]] = [
    (
        "partition change on unknown topic",
        mr.PartitionChangeRecord(partition_id=0, topic_id=BAZ, isr=(1,)),
        "unknown topic id",
    ),
    (
        "partition change on unknown partition",
        mr.PartitionChangeRecord(partition_id=5, topic_id=FOO, isr=(1,)),
        "no partition 5",
    ),
    (
        "partition record on unknown topic",
        mr.PartitionRecord(partition_id=0, topic_id=BAZ, replicas=(1,), isr=(1,)),
        "unknown topic id",
    ),
    (
        "change breaks isr within replicas",
        mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, replicas=(1, 2)),
        "isr",
    ),
    (
        "change names a leader outside replicas",
        mr.PartitionChangeRecord(partition_id=0, topic_id=FOO, leader=7),
        "leader 7",
    ),
    ("remove unknown topic", mr.RemoveTopicRecord(topic_id=BAZ), "unknown topic id"),
    ("duplicate topic name", mr.TopicRecord(name="foo", topic_id=BAZ), "already exists"),
    ("duplicate topic id", mr.TopicRecord(name="new", topic_id=FOO), "already exists"),
    ("config of unknown topic", mr.ConfigRecord("topic", "nope", "k", "v"), "unknown topic"),
    (
        "unregister unknown broker",
        mr.UnregisterBrokerRecord(broker_id=9, broker_epoch=1),
        "not registered",
    ),
    (
        "unregister with stale epoch",
        mr.UnregisterBrokerRecord(broker_id=1, broker_epoch=9),
        "epoch",
    ),
    (
        "change of unknown broker",
        mr.BrokerRegistrationChangeRecord(broker_id=9, broker_epoch=1, fenced=mr.FENCE),
        "not registered",
    ),
    (
        "change with stale epoch",
        mr.BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=9, in_controlled_shutdown=mr.IN_CONTROLLED_SHUTDOWN
        ),
        "epoch",
    ),
    (
        "re-register with an older epoch",
        mr.RegisterBrokerRecord(broker_id=1, incarnation_id=INC, broker_epoch=10, endpoints=EP),
        "does not exceed",
    ),
    (
        "producer ids going back",
        mr.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
        "does not exceed",
    ),
]


@pytest.mark.parametrize(
    ("why", "record", "says"), REPLAY_ERRORS, ids=[e[0] for e in REPLAY_ERRORS]
)
def test_replay_errors_leave_the_delta_unchanged(
    why: str, record: mr.MetadataRecord, says: str
) -> None:
    """A record that does not fit IMAGE1 raises MetadataReplayError (ILLEGAL_STATE) with
    a message naming the problem, and the delta still applies to IMAGE1."""
    delta = MetadataDelta(IMAGE1)
    with pytest.raises(MetadataReplayError) as info:
        delta.replay(record)
    assert says in str(info.value), (why, str(info.value))
    assert info.value.name == "ILLEGAL_STATE"
    assert delta.apply() == IMAGE1
    assert delta.local_changes(1).is_empty()
