"""Unit tests for raftka.metadata.metadata_records: the typed records and their JSON codec."""

from __future__ import annotations

import orjson
import pytest

from raftka.common.errors import InvalidRequestError, KafkaError
from raftka.metadata import metadata_records as mr

T1 = "7d1f6c4e-2a4b-4c8e-9f10-0123456789ab"
INC = "00000000-0000-4000-8000-000000000001"

ONE_OF_EACH: list[mr.MetadataRecord] = [
    mr.RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=INC,
        broker_epoch=10,
        endpoints=(mr.Endpoint("PLAINTEXT", "localhost", 9092),),
        rack="r1",
    ),
    mr.UnregisterBrokerRecord(broker_id=1, broker_epoch=10),
    mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=mr.FENCE),
    mr.TopicRecord(name="orders", topic_id=T1),
    mr.PartitionRecord(
        partition_id=0, topic_id=T1, replicas=(1, 2, 3), isr=(1, 2), leader=1, leader_epoch=4
    ),
    mr.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,), leader=mr.NO_LEADER_CHANGE),
    mr.RemoveTopicRecord(topic_id=T1),
    mr.ConfigRecord("topic", "orders", "retention.ms", "1000"),
    mr.ConfigRecord("broker", "", "log.retention.hours", None),
    mr.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
    mr.UserScramCredentialRecord(
        name="alice",
        mechanism="SCRAM-SHA-256",
        salt=b"\x00salt-of-alice",
        stored_key=bytes(range(32)),
        server_key=bytes(range(32, 64)),
        iterations=8192,
    ),
    mr.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-512"),
    mr.AccessControlEntryRecord(
        id=INC,
        resource_type=2,
        resource_name="orders",
        pattern_type=4,
        principal="User:alice",
        host="*",
        operation=3,
        permission_type=3,
    ),
    mr.RemoveAccessControlEntryRecord(id=INC),
    mr.NoOpRecord(),
]


def test_every_record_type_round_trips_through_bytes() -> None:
    """Each record type, encoded and decoded, equals itself; covers all RECORD_TYPES by
    checking the sample list names every registered type."""
    assert {r.type for r in ONE_OF_EACH} == set(mr.RECORD_TYPES)
    for record in ONE_OF_EACH:
        assert mr.decode_record(mr.encode_record(record)) == record
    assert mr.decode_records(mr.encode_records(ONE_OF_EACH)) == ONE_OF_EACH


def test_wire_form_is_type_version_data() -> None:
    """The JSON object carries type, version and data with the field names, lists for
    tuples and endpoints as objects."""
    obj = orjson.loads(mr.encode_record(ONE_OF_EACH[0]))
    assert obj["type"] == "RegisterBrokerRecord"
    assert obj["version"] == 0
    assert obj["data"]["endpoints"] == [{"name": "PLAINTEXT", "host": "localhost", "port": 9092}]
    assert obj["data"]["fenced"] is True


def test_lists_are_normalised_to_tuples() -> None:
    """A record built with lists holds tuples, so it equals and hashes like one built
    with tuples."""
    a = mr.PartitionRecord(partition_id=0, topic_id=T1, replicas=[1, 2], isr=[1], leader=1)  # type: ignore[arg-type]
    b = mr.PartitionRecord(partition_id=0, topic_id=T1, replicas=(1, 2), isr=(1,), leader=1)
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.replicas, tuple)


def test_defaults_may_be_omitted_when_decoding() -> None:
    """A field with a default may be missing from the data (forward compatibility)."""
    data = {"broker_id": 1, "broker_epoch": 3}
    raw = orjson.dumps({"type": "BrokerRegistrationChangeRecord", "version": 0, "data": data})
    assert mr.decode_record(raw) == mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3)


def _raw(type_name: str, data: object, version: object = 0) -> bytes:
    return orjson.dumps({"type": type_name, "version": version, "data": data})


GOOD_PARTITION = {"partition_id": 0, "topic_id": T1, "replicas": [1, 2], "isr": [1], "leader": 1}

MALFORMED: list[tuple[str, bytes, str]] = [
    ("bad JSON", b'{"type": ', "invalid JSON"),
    ("not an object", b"[1, 2]", "JSON object"),
    ("extra top-level key", b'{"type":"NoOpRecord","version":0,"data":{},"x":1}', "keys"),
    ("unknown type", _raw("FooRecord", {}), "unknown metadata record type"),
    ("type not a string", _raw(5, {}), "type"),  # type: ignore[arg-type]
    ("future version", _raw("NoOpRecord", {}, version=1), "version"),
    ("version is a bool", _raw("NoOpRecord", {}, version=False), "version"),
    ("data not an object", _raw("NoOpRecord", [1]), "data"),
    ("missing field", _raw("TopicRecord", {"name": "a"}), "missing field(s) ['topic_id']"),
    ("unknown field", _raw("TopicRecord", {"name": "a", "topic_id": T1, "x": 1}), "unknown"),
    (
        "string for int",
        _raw("UnregisterBrokerRecord", {"broker_id": "1", "broker_epoch": 1}),
        "broker_id",
    ),
    (
        "bool for int",
        _raw("UnregisterBrokerRecord", {"broker_id": True, "broker_epoch": 1}),
        "broker_id",
    ),
    (
        "negative broker",
        _raw("UnregisterBrokerRecord", {"broker_id": -1, "broker_epoch": 1}),
        "broker_id",
    ),
    (
        "int32 overflow",
        _raw("UnregisterBrokerRecord", {"broker_id": 2**31, "broker_epoch": 1}),
        "broker_id",
    ),
    (
        "int for bool",
        _raw(
            "RegisterBrokerRecord",
            {
                "broker_id": 1,
                "incarnation_id": INC,
                "broker_epoch": 1,
                "endpoints": [],
                "fenced": 1,
            },
        ),
        "fenced",
    ),
    ("bad uuid", _raw("TopicRecord", {"name": "a", "topic_id": "not-a-uuid"}), "UUID"),
    ("uppercase uuid", _raw("TopicRecord", {"name": "a", "topic_id": T1.upper()}), "canonical"),
    ("empty name", _raw("TopicRecord", {"name": "", "topic_id": T1}), "name"),
    ("replicas not a list", _raw("PartitionRecord", {**GOOD_PARTITION, "replicas": 3}), "replicas"),
    (
        "replica not an int",
        _raw("PartitionRecord", {**GOOD_PARTITION, "replicas": [1, "2"]}),
        "replicas[1]",
    ),
    (
        "duplicate replicas",
        _raw("PartitionRecord", {**GOOD_PARTITION, "replicas": [1, 1]}),
        "distinct",
    ),
    ("isr outside replicas", _raw("PartitionRecord", {**GOOD_PARTITION, "isr": [1, 9]}), "isr"),
    ("leader outside replicas", _raw("PartitionRecord", {**GOOD_PARTITION, "leader": 9}), "leader"),
    (
        "no-change leader in PartitionRecord",
        _raw("PartitionRecord", {**GOOD_PARTITION, "leader": -2}),
        "leader",
    ),
    (
        "fence value out of range",
        _raw("BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": 1, "fenced": 2}),
        "fenced",
    ),
    (
        "bad endpoint",
        _raw(
            "RegisterBrokerRecord",
            {
                "broker_id": 1,
                "incarnation_id": INC,
                "broker_epoch": 1,
                "endpoints": [["PLAINTEXT", "h", 1]],
            },
        ),
        "endpoint",
    ),
    (
        "bad port",
        _raw(
            "RegisterBrokerRecord",
            {
                "broker_id": 1,
                "incarnation_id": INC,
                "broker_epoch": 1,
                "endpoints": [{"name": "P", "host": "h", "port": 70000}],
            },
        ),
        "port",
    ),
    (
        "bad resource type",
        _raw(
            "ConfigRecord",
            {"resource_type": "group", "resource_name": "g", "name": "k", "value": "v"},
        ),
        "resource_type",
    ),
    (
        "bad broker resource",
        _raw(
            "ConfigRecord",
            {"resource_type": "broker", "resource_name": "b1", "name": "k", "value": "v"},
        ),
        "broker resource name",
    ),
    (
        "value not a string",
        _raw(
            "ConfigRecord",
            {"resource_type": "topic", "resource_name": "t", "name": "k", "value": 5},
        ),
        "value",
    ),
]


@pytest.mark.parametrize(("why", "raw", "says"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_records_raise_metadata_record_error(why: str, raw: bytes, says: str) -> None:
    """Each malformed input raises MetadataRecordError (an INVALID_REQUEST KafkaError),
    never KeyError/TypeError, and the message points at the problem."""
    with pytest.raises(mr.MetadataRecordError) as info:
        mr.decode_record(raw)
    assert isinstance(info.value, InvalidRequestError)
    assert isinstance(info.value, KafkaError)
    assert info.value.name == "INVALID_REQUEST"
    assert says in str(info.value), (why, str(info.value))


def test_record_list_errors_name_the_bad_record() -> None:
    """decode_records rejects a non-array and says which element is malformed."""
    with pytest.raises(mr.MetadataRecordError, match="JSON array"):
        mr.decode_records(b"{}")
    raw = b"[" + mr.encode_record(mr.NoOpRecord()) + b"," + _raw("Nope", {}) + b"]"
    with pytest.raises(mr.MetadataRecordError, match="record 1"):
        mr.decode_records(raw)


def test_non_bytes_input_is_rejected() -> None:
    """decode_record given a str (not bytes) raises MetadataRecordError."""
    with pytest.raises(mr.MetadataRecordError, match="bytes"):
        mr.decode_record('{"type": "NoOpRecord"}')  # type: ignore[arg-type]


def test_constructing_a_bad_record_fails_the_same_way() -> None:
    """The checks run when a record is built in code, not only when decoded."""
    with pytest.raises(mr.MetadataRecordError, match="isr"):
        mr.PartitionRecord(partition_id=0, topic_id=T1, replicas=(1,), isr=(2,))
    with pytest.raises(mr.MetadataRecordError, match="replicas must not be empty"):
        mr.PartitionRecord(partition_id=0, topic_id=T1, replicas=(), isr=())
    with pytest.raises(mr.MetadataRecordError, match="both adding and removing"):
        mr.PartitionRecord(
            partition_id=0,
            topic_id=T1,
            replicas=(1, 2),
            isr=(1,),
            removing_replicas=(2,),
            adding_replicas=(2,),
        )
