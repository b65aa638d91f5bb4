"""MetadataApplier: /v1/metadata answers in, (image, local changes) out, in log order.

Checks: each payload yields one update, in order, with the local changes of that
payload only (lead, follow, delete); a payload that does not replay is skipped as the
controllers skip it; an answer overlapping what was applied is not applied twice; a
snapshot replaces the image and its local changes are the difference from the old
image (local_changes_between), including deletes of topics that vanished.
"""

from __future__ import annotations

import uuid

import orjson

from raftka.broker.metadata_follower import MetadataApplier, local_changes_between
from raftka.common.messages import decode
from raftka.common.messages.controller import FetchMetadataResponse
from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)

T1, T2, T3 = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())


def _answer(
    start: int, *payloads: list[MetadataRecord], snapshot: dict[str, object] | None = None
) -> FetchMetadataResponse:
    """The answer a controller sends, decoded as the follower decodes it."""
    batches = [
        {"offset": start + i, "epoch": 1, "records": [r.to_dict() for r in records]}
        for i, records in enumerate(payloads)
    ]
    end = start + len(payloads)
    answer = {"snapshot": snapshot, "batches": batches, "next_offset": end, "high_watermark": end}
    return decode(orjson.dumps(answer), FetchMetadataResponse)


def _topic(topic_id: str, name: str, leader: int) -> list[MetadataRecord]:
    return [
        TopicRecord(name=name, topic_id=topic_id),
        PartitionRecord(
            partition_id=0, topic_id=topic_id, replicas=(1, 2), isr=(1, 2), leader=leader
        ),
    ]


def test_updates_in_log_order_with_per_payload_changes() -> None:
    """Three payloads: lead t1, follow t2, then t1 moves away (delete)."""
    applier = MetadataApplier(broker_id=1)
    updates = list(
        applier.apply_answer(
            _answer(
                1,
                _topic(T1, "t1", 1),
                _topic(T2, "t2", 2),
                [
                    PartitionChangeRecord(
                        partition_id=0, topic_id=T1, replicas=(2, 3), isr=(2,), leader=2
                    )
                ],
            )
        )
    )
    assert [image.offset for image, _ in updates] == [1, 2, 3]
    assert [tp.topic for tp in updates[0][1].leaders] == ["t1"] and not updates[0][1].followers
    assert [tp.topic for tp in updates[1][1].followers] == ["t2"] and not updates[1][1].leaders
    assert [tp.topic for tp in updates[2][1].deletes] == ["t1"]
    assert applier.next_offset == 4
    # The same answer again (a retry after a failover) changes nothing.
    assert list(applier.apply_answer(_answer(1, _topic(T1, "t1", 1)))) == []


def test_bad_payload_is_skipped_like_the_controllers_do() -> None:
    """A change to an unknown topic does not replay: skipped, the offset still moves."""
    applier = MetadataApplier(broker_id=1)
    bad = [PartitionChangeRecord(partition_id=0, topic_id=T2, leader=1)]
    updates = list(applier.apply_answer(_answer(1, bad, _topic(T1, "t1", 1))))
    assert applier.skipped_payloads == 1
    assert updates[0][1].is_empty() and updates[0][0].offset == 1
    assert set(updates[1][0].topics.by_name) == {"t1"}


def test_snapshot_replaces_the_image_and_diffs_local_changes() -> None:
    """A snapshot without t1 and with t2 led by us: delete t1, lead t2."""
    applier = MetadataApplier(broker_id=1)
    list(applier.apply_answer(_answer(1, _topic(T1, "t1", 1))))
    snap_records = _topic(T2, "t2", 1)
    snapshot = {"end_offset": 50, "epoch": 3, "records": [r.to_dict() for r in snap_records]}
    ((image, changes),) = list(applier.apply_answer(_answer(50, snapshot=snapshot)))
    assert image.offset == 49 and applier.next_offset == 50
    assert [tp.topic for tp in changes.deletes] == ["t1"]
    assert [tp.topic for tp in changes.leaders] == ["t2"]


def test_local_changes_between_matches_a_delta() -> None:
    """Diffing two images gives what replaying the records in between would."""
    old = image_from_records(
        [*_topic(T1, "t1", 1), *_topic(T2, "t2", 2), *_topic(T3, "t3", 2)], 5, 1
    )
    delta = MetadataDelta(old)
    delta.replay_all(
        [
            PartitionChangeRecord(partition_id=0, topic_id=T2, isr=(1,), leader=1),
            PartitionChangeRecord(partition_id=0, topic_id=T3, replicas=(2, 3), isr=(2,)),
            RemoveTopicRecord(topic_id=T1),
        ]
    )
    new = delta.apply()
    assert local_changes_between(old, new, 1) == delta.local_changes(1)
    assert local_changes_between(old, new, 2) == delta.local_changes(2)
    gone = local_changes_between(new, MetadataImage.EMPTY, 1)
    assert {tp.topic for tp in gone.deletes} == {"t2"}


def test_a_starting_broker_gets_one_first_image_once_caught_up_and_registered() -> None:
    """catch_up_first: nothing until the answer reaches the high watermark and the
    image includes the registration offset; then one update with the final roles (t1
    led at first, moved away: only its delete; t2 followed) and every delete met on the
    way; after that, one update per payload again."""
    registered_at = [3]
    applier = MetadataApplier(1, catch_up_first=True, catch_up_to=lambda: registered_at[0])
    moved = [
        PartitionChangeRecord(partition_id=0, topic_id=T1, replicas=(2, 3), isr=(2,), leader=2)
    ]
    assert list(applier.apply_answer(_answer(1, _topic(T1, "t1", 1)))) == []
    assert not applier.published, "the answer's HW (2) is below the registration (3)"
    (first,) = applier.apply_answer(_answer(2, _topic(T2, "t2", 2), moved))
    image, changes = first
    assert image.offset == 3 and applier.published
    assert not changes.leaders and [tp.topic for tp in changes.followers] == ["t2"]
    assert [tp.topic for tp in changes.deletes] == ["t1"]
    (after,) = applier.apply_answer(
        _answer(4, [PartitionChangeRecord(partition_id=0, topic_id=T2, leader=1)])
    )
    assert [tp.topic for tp in after[1].leaders] == ["t2"]


def test_a_starting_broker_waits_for_the_high_watermark_not_just_the_answer() -> None:
    applier = MetadataApplier(1, catch_up_first=True)
    answer = _answer(1, _topic(T1, "t1", 1))
    behind = FetchMetadataResponse(
        snapshot=None,
        batches=answer.batches,
        next_offset=answer.next_offset,
        high_watermark=answer.high_watermark + 5,
    )
    assert list(applier.apply_answer(behind)) == [] and not applier.published
