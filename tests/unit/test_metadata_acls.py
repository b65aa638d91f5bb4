"""ACLs in the metadata log: the records, their replay into the image
(``MetadataImage.acl_bindings``), removal, and the snapshot round trip."""

from __future__ import annotations

import pytest

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.common.errors import KafkaError
from raftka.metadata import metadata_records as mr
from raftka.metadata.delta import MetadataDelta, MetadataReplayError, image_from_records
from raftka.metadata.image import MetadataImage

ID1 = "00000000-0000-4000-8000-0000000000a1"
ID2 = "00000000-0000-4000-8000-0000000000a2"
ID3 = "00000000-0000-4000-8000-0000000000a3"


def binding(
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    *,
    name: str = "orders",
    pattern_type: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    resource_type: ResourceType = ResourceType.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )


def replayed(
    *records: mr.MetadataRecord, image: MetadataImage = MetadataImage.EMPTY
) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta.apply()


READ_ORDERS = binding()
DENY_BOB_PREFIX = binding(
    "User:bob",
    AclOperation.WRITE,
    name="ord",
    pattern_type=PatternType.PREFIXED,
    permission=AclPermissionType.DENY,
)
GROUP_READ = binding(resource_type=ResourceType.GROUP, name="g1", host="10.0.0.1")


def test_replay_creates_bindings_the_image_exposes() -> None:
    image = replayed(
        mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
        mr.AccessControlEntryRecord.of(ID2, DENY_BOB_PREFIX),
        mr.AccessControlEntryRecord.of(ID3, GROUP_READ),
    )
    assert image.acl_bindings() == frozenset({READ_ORDERS, DENY_BOB_PREFIX, GROUP_READ})
    assert image.acls.by_id[ID2] == DENY_BOB_PREFIX
    assert not image.is_empty()


def test_removal_removes_that_binding_only() -> None:
    image = replayed(
        mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
        mr.AccessControlEntryRecord.of(ID2, DENY_BOB_PREFIX),
    )
    after = replayed(mr.RemoveAccessControlEntryRecord(id=ID1), image=image)
    assert after.acl_bindings() == frozenset({DENY_BOB_PREFIX})
    # The older image still holds what it held.
    assert image.acl_bindings() == frozenset({READ_ORDERS, DENY_BOB_PREFIX})


def test_create_and_remove_in_one_delta_leaves_nothing() -> None:
    image = replayed(
        mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
        mr.RemoveAccessControlEntryRecord(id=ID1),
        # The same binding again under a new id, once the first is gone, is fine.
        mr.AccessControlEntryRecord.of(ID2, READ_ORDERS),
        mr.RemoveAccessControlEntryRecord(id=ID2),
    )
    assert image.is_empty()
    assert image.acl_bindings() == frozenset()


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        (
            [
                mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
                mr.AccessControlEntryRecord.of(ID1, GROUP_READ),
            ],
            "ACL id .* exists",
        ),
        (
            [
                mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
                mr.AccessControlEntryRecord.of(ID2, READ_ORDERS),
            ],
            "repeats an existing binding",
        ),
        ([mr.RemoveAccessControlEntryRecord(id=ID1)], "no ACL with id"),
    ],
)
def test_records_that_disagree_with_the_image_do_not_replay(
    records: list[mr.MetadataRecord], expected: str
) -> None:
    with pytest.raises(MetadataReplayError, match=expected):
        replayed(*records)


def test_duplicate_binding_across_deltas_does_not_replay() -> None:
    image = replayed(mr.AccessControlEntryRecord.of(ID1, READ_ORDERS))
    with pytest.raises(MetadataReplayError, match="repeats an existing binding"):
        replayed(mr.AccessControlEntryRecord.of(ID2, READ_ORDERS), image=image)


def test_snapshot_round_trip_keeps_bindings() -> None:
    image = replayed(
        mr.AccessControlEntryRecord.of(ID2, DENY_BOB_PREFIX),
        mr.AccessControlEntryRecord.of(ID1, READ_ORDERS),
        mr.AccessControlEntryRecord.of(ID3, GROUP_READ),
        mr.RemoveAccessControlEntryRecord(id=ID3),
    )
    records = mr.decode_records(mr.encode_records(image.to_records()))
    assert [r.id for r in records if isinstance(r, mr.AccessControlEntryRecord)] == [ID1, ID2]
    again = image_from_records(records, image.offset, image.epoch)
    assert again == image
    assert again.acl_bindings() == frozenset({READ_ORDERS, DENY_BOB_PREFIX})
    assert again.acls.by_id == image.acls.by_id


def test_untouched_acls_image_is_shared() -> None:
    image = replayed(mr.AccessControlEntryRecord.of(ID1, READ_ORDERS))
    after = replayed(
        mr.TopicRecord(name="t", topic_id="7d1f6c4e-2a4b-4c8e-9f10-0123456789ab"), image=image
    )
    assert after.acls is image.acls


def test_record_carries_kafka_codes() -> None:
    data = mr.AccessControlEntryRecord.of(ID2, DENY_BOB_PREFIX).to_dict()["data"]
    assert data == {
        "id": ID2,
        "resource_type": 2,
        "resource_name": "ord",
        "pattern_type": 4,
        "principal": "User:bob",
        "host": "*",
        "operation": 4,
        "permission_type": 2,
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"id": "not-a-uuid"}, "UUID"),
        ({"resource_type": 1}, "resource type cannot be ANY"),
        ({"resource_type": 99}, "ResourceType code"),
        ({"pattern_type": 2}, "LITERAL or PREFIXED, got MATCH"),
        ({"operation": 1}, "operation cannot be ANY"),
        ({"operation": True}, "AclOperation code"),
        ({"permission_type": 0}, "ALLOW or DENY, got UNKNOWN"),
        ({"principal": "alice"}, "must be <type>:<name>"),
        ({"resource_name": ""}, "non-empty string"),
        ({"host": ""}, "non-empty string"),
        ({"resource_type": 4}, "kafka-cluster"),
    ],
)
def test_malformed_acl_records_are_refused(change: dict[str, object], expected: str) -> None:
    data = mr.AccessControlEntryRecord.of(ID1, READ_ORDERS).to_dict()
    data["data"].update(change)
    with pytest.raises(mr.MetadataRecordError, match=expected) as info:
        mr.record_from_dict(data)
    assert isinstance(info.value, KafkaError) and info.value.name == "INVALID_REQUEST"
