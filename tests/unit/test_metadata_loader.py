"""The metadata loader's one replay-or-skip rule, on controllers and brokers alike.

Checks: a payload replays into the next image at its offset; a payload that does not
replay (a change to an unknown topic) or does not decode (not JSON, an unknown record
type) is skipped whole, leaving an empty delta at its offset; and the same committed
log fed to a controller's :class:`MetadataLoader` (the engine's commit listener) and
to a broker's :class:`MetadataApplier` (``/v1/metadata`` answers) gives equal images
and equal skip counts. Pure: no sockets, no clock.
"""

from __future__ import annotations

import uuid

import msgspec

from raftka.broker.metadata_follower import MetadataApplier
from raftka.common.messages.controller import FetchMetadataResponse, MetadataBatch
from raftka.metadata.image import MetadataImage
from raftka.metadata.loader import MetadataLoader, image_from_snapshot, replay_payload
from raftka.metadata.metadata_records import (
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
    encode_records,
)
from raftka.raft.quorum.engine import CommittedRecord

T1, T2 = str(uuid.uuid4()), str(uuid.uuid4())

GOOD = encode_records(
    [
        TopicRecord(name="t1", topic_id=T1),
        PartitionRecord(partition_id=0, topic_id=T1, replicas=(1, 2), isr=(1, 2), leader=1),
    ]
)
UNKNOWN_TOPIC = encode_records([PartitionChangeRecord(partition_id=0, topic_id=T2, leader=1)])
NOT_JSON = b"[{"
UNKNOWN_TYPE = b'[{"type": "NoSuchRecord", "version": 0, "data": {}}]'
LOG = [GOOD, UNKNOWN_TOPIC, NOT_JSON, UNKNOWN_TYPE]


def test_a_payload_replays_at_its_offset() -> None:
    """The image moves to the payload's offset and the epoch never goes back."""
    replayed = replay_payload(MetadataImage.EMPTY, 3, 2, GOOD)
    assert not replayed.skipped and replayed.error is None
    assert replayed.image.offset == 3 and replayed.image.epoch == 2
    assert set(replayed.image.topics.by_name) == {"t1"}
    again = replay_payload(replayed.image, 4, 1, encode_records([]))
    assert again.image.epoch == 2


def test_a_payload_that_does_not_replay_or_decode_is_skipped_whole() -> None:
    """Each bad payload leaves the image's content as it was, at the payload's offset,
    with an empty delta (no local changes) and the error that made it skip."""
    image = replay_payload(MetadataImage.EMPTY, 1, 1, GOOD).image
    for offset, bad in enumerate([UNKNOWN_TOPIC, NOT_JSON, UNKNOWN_TYPE], start=2):
        replayed = replay_payload(image, offset, 1, bad)
        assert replayed.skipped and replayed.error is not None, bad
        assert replayed.image.offset == offset
        assert replayed.image.topics == image.topics
        assert replayed.delta.local_changes(1).is_empty()
        image = replayed.image


def test_controller_and_broker_replay_the_same_log_to_the_same_image() -> None:
    """The same committed payloads through a controller's loader and a broker's
    applier: equal images after every payload, the same payloads skipped."""
    loader = MetadataLoader(snapshot_bytes_between=1 << 30)
    applier = MetadataApplier(broker_id=1)
    for offset, payload in enumerate(LOG, start=1):
        loader.handle_commit([CommittedRecord(offset, 1, payload)])
        answer = FetchMetadataResponse(
            snapshot=None,
            batches=[MetadataBatch(offset=offset, epoch=1, records=msgspec.Raw(payload))],
            next_offset=offset + 1,
            high_watermark=offset + 1,
        )
        ((image, _changes),) = list(applier.apply_answer(answer))
        assert image == loader.image, offset
    assert loader.skipped_payloads == applier.skipped_payloads == 3


def test_a_snapshot_replaces_the_image() -> None:
    """A snapshot of an image rebuilds that image, on the loader and from bytes."""
    image = replay_payload(MetadataImage.EMPTY, 1, 1, GOOD).image
    data = encode_records(image.to_records())
    assert image_from_snapshot(image.offset + 1, image.epoch, data) == image
    loader = MetadataLoader(snapshot_bytes_between=1 << 30)
    loader.handle_snapshot(image.offset + 1, image.epoch, data)
    assert loader.image == image
