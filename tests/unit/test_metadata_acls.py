"""ACLs in the metadata log: the records, their replay into the image
(``MetadataImage.acl_bindings``), removal, and the snapshot round trip."""

from __future__ import annotations

import random

import msgspec
import pytest
from acl_helpers import acl

from raftka.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from raftka.common.errors import InvalidRequestError, KafkaError
from raftka.common.messages import controller as msg
from raftka.metadata import metadata_records as mr
from raftka.metadata.acl_control import create_acls, delete_acls, describe_acls
from raftka.metadata.controller_api import RECORDS_PER_COMMAND_MAX, ControllerResult
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
    return acl(
        principal,
        operation,
        name,
        permission=permission,
        resource_type=resource_type,
        pattern=pattern_type,
        host=host,
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


# ---------------------------------------------------------------------------------------
# The controller's commands (acl_control)


def committed(image: MetadataImage, result: ControllerResult[object]) -> MetadataImage:
    return replayed(*result.records, image=image)


def created(
    image: MetadataImage, *creations: AclBinding | KafkaError
) -> tuple[MetadataImage, list[str | None]]:
    result = create_acls(image, creations, random.Random(1))
    errors = [None if r.error is None else r.error.name for r in result.response]
    return committed(image, result), errors


def test_create_writes_one_record_per_new_binding() -> None:
    result = create_acls(MetadataImage.EMPTY, [READ_ORDERS, DENY_BOB_PREFIX], random.Random(1))
    assert [r.error for r in result.response] == [None, None]
    assert [type(r) for r in result.records] == [mr.AccessControlEntryRecord] * 2
    assert len({r.id for r in result.records if isinstance(r, mr.AccessControlEntryRecord)}) == 2
    image = committed(MetadataImage.EMPTY, result)
    assert image.acl_bindings() == {READ_ORDERS, DENY_BOB_PREFIX}


def test_create_of_an_existing_or_repeated_binding_succeeds_and_adds_nothing() -> None:
    image, errors = created(MetadataImage.EMPTY, READ_ORDERS)
    assert errors == [None]
    result = create_acls(image, [READ_ORDERS, GROUP_READ, GROUP_READ], random.Random(2))
    assert [r.error for r in result.response] == [None, None, None]
    assert len(result.records) == 1  # GROUP_READ once; READ_ORDERS already there
    assert committed(image, result).acl_bindings() == {READ_ORDERS, GROUP_READ}


def test_a_bad_binding_fails_alone_in_its_place() -> None:
    bad = InvalidRequestError("an ACL's operation cannot be ANY")
    image, errors = created(MetadataImage.EMPTY, READ_ORDERS, bad, GROUP_READ)
    assert errors == [None, "INVALID_REQUEST", None]
    assert image.acl_bindings() == {READ_ORDERS, GROUP_READ}


def test_delete_lists_each_filters_matches_and_removes_each_once() -> None:
    image, _ = created(MetadataImage.EMPTY, READ_ORDERS, DENY_BOB_PREFIX, GROUP_READ)
    topics = AclBindingFilter(resource_type=ResourceType.TOPIC)
    bob = AclBindingFilter(principal="User:bob")
    result = delete_acls(image, [topics, bob, InvalidRequestError("bad filter")])
    first, second, third = result.response
    assert first.error is None and set(first.matching) == {READ_ORDERS, DENY_BOB_PREFIX}
    assert second.error is None and second.matching == (DENY_BOB_PREFIX,)
    assert third.error is not None and third.error.name == "INVALID_REQUEST"
    assert len(result.records) == 2  # DENY_BOB_PREFIX matched twice, removed once
    assert committed(image, result).acl_bindings() == {GROUP_READ}


def test_delete_matching_nothing_writes_nothing() -> None:
    image, _ = created(MetadataImage.EMPTY, READ_ORDERS)
    result = delete_acls(image, [AclBindingFilter(principal="User:nobody")])
    assert result.records == () and result.response[0].matching == ()


def test_describe_filters_including_match() -> None:
    image, _ = created(MetadataImage.EMPTY, READ_ORDERS, DENY_BOB_PREFIX, GROUP_READ)
    # By resource type, then name: topic "ord" before topic "orders", groups after.
    assert describe_acls(image, AclBindingFilter()) == (
        DENY_BOB_PREFIX,
        READ_ORDERS,
        GROUP_READ,
    )
    # MATCH: what applies to topic "orders": the literal and the "ord" prefix.
    match = AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    assert set(describe_acls(image, match)) == {READ_ORDERS, DENY_BOB_PREFIX}
    literal = AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    assert describe_acls(image, literal) == (READ_ORDERS,)


def test_too_many_creations_are_refused_whole() -> None:
    many = [READ_ORDERS] * (RECORDS_PER_COMMAND_MAX + 1)
    with pytest.raises(InvalidRequestError, match="more than"):
        create_acls(MetadataImage.EMPTY, many, random.Random(1))


# ---------------------------------------------------------------------------------------
# The wire form (common.messages.controller)


def test_wire_round_trip_and_unknown_names_are_invalid_request() -> None:
    for b in (READ_ORDERS, DENY_BOB_PREFIX, GROUP_READ):
        assert msg.acl_binding_of(msg.acl_binding_data(b)) == b
    f = AclBindingFilter(ResourceType.GROUP, "g", PatternType.MATCH, "User:a", "h")
    assert msg.acl_filter_of(msg.acl_filter_data(f)) == f
    data = msgspec.structs.replace(msg.acl_binding_data(READ_ORDERS), operation="Read")
    with pytest.raises(InvalidRequestError, match=r"unknown AclOperation 'Read'; one of .*READ"):
        msg.acl_binding_of(data)
    with pytest.raises(InvalidRequestError, match="pattern type cannot be UNKNOWN"):
        msg.acl_filter_of(msg.AclFilterData(pattern_type="UNKNOWN"))
    with pytest.raises(InvalidRequestError, match="unknown PatternType 'SOME'"):
        msg.acl_filter_of(msg.AclFilterData(pattern_type="SOME"))
