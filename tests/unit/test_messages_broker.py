"""The broker's and the group coordinator's typed messages (common/messages).

Checks, without sockets: each message encodes to the wire's field names and decodes
back equal; bad input (wrong type, broken bound, missing field, not JSON) raises
INVALID_REQUEST naming the offending field by its path; the typed frame round-trips
and refuses lengths that do not fit; and the typed classes stay wire-compatible with
the dict-based code still on the other side (a follower's hand-built fetch request,
the dict frame reader in common/wire.py).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftka.common.errors import InvalidRequestError
from raftka.common.messages import broker as api
from raftka.common.messages import coordinator as group_api
from raftka.common.messages import decode, decode_value, encode
from raftka.common.wire import decode_frame as decode_dict_frame
from raftka.common.wire import encode_frame as encode_dict_frame

FETCH_BODY: dict[str, Any] = {
    "replica_id": 2,
    "broker_epoch": 17,
    "max_wait_ms": 500,
    "min_bytes": 1,
    "max_bytes": 10_485_760,
    "isolation_level": 0,
    "partitions": [
        {
            "topic": "orders",
            "partition": 0,
            "fetch_offset": 1200,
            "partition_max_bytes": 1_048_576,
            "current_leader_epoch": 3,
            "last_fetched_epoch": 2,
            "log_start_offset": 0,
        }
    ],
}


def test_follower_fetch_body_decodes_and_encodes_with_the_same_fields() -> None:
    """The body broker/replication/fetcher.py builds by hand (replica id, broker epoch,
    last fetched epoch, log start) decodes into FetchRequest and encodes back to the
    same JSON object."""
    fetch = decode(orjson.dumps(FETCH_BODY), api.FetchRequest)
    assert fetch.replica_id == 2 and fetch.broker_epoch == 17
    assert fetch.partitions[0].last_fetched_epoch == 2
    assert orjson.loads(encode(fetch)) == FETCH_BODY


def test_consumer_fetch_defaults_match_the_old_parser() -> None:
    """A minimal body gets the defaults the hand parser gave (replica -1, 1 MiB per
    partition, no epochs, log start -1)."""
    fetch = decode(
        b'{"partitions": [{"topic": "t", "partition": 1, "fetch_offset": 0}]}', api.FetchRequest
    )
    assert (fetch.replica_id, fetch.broker_epoch, fetch.max_wait_ms, fetch.min_bytes) == (
        -1,
        -1,
        0,
        1,
    )
    assert fetch.max_bytes == 50 * 1024 * 1024
    p = fetch.partitions[0]
    assert (p.partition_max_bytes, p.current_leader_epoch, p.log_start_offset) == (
        1024 * 1024,
        None,
        -1,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**FETCH_BODY, "replica_id": "2"}, "$.replica_id"),
        ({**FETCH_BODY, "max_wait_ms": True}, "$.max_wait_ms"),
        ({**FETCH_BODY, "max_bytes": -1}, "$.max_bytes"),
        ({**FETCH_BODY, "partitions": [{"topic": "t", "partition": -1, "fetch_offset": 0}]},
         "$.partitions[0].partition"),
        ({**FETCH_BODY, "partitions": [{"topic": "", "partition": 0, "fetch_offset": 0}]},
         "$.partitions[0].topic"),
        ({**FETCH_BODY, "partitions": [{"topic": "t", "partition": 0}]}, "fetch_offset"),
        ({**FETCH_BODY, "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 2**63}]},
         "$.partitions[0].fetch_offset"),
        ({**FETCH_BODY, "partitions": [1]}, "$.partitions[0]"),
        ({"replica_id": -1}, "partitions"),
    ],
)  # fmt: skip
def test_bad_fetch_fields_are_invalid_request_naming_the_field(
    body: dict[str, Any], field: str
) -> None:
    """Each malformed body raises INVALID_REQUEST whose message names the field."""
    with pytest.raises(InvalidRequestError) as info:
        decode(orjson.dumps(body), api.FetchRequest)
    assert info.value.name == "INVALID_REQUEST"
    assert field in info.value.message, info.value.message


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b"null", b'"x"'])
def test_not_an_object_is_invalid_request(raw: bytes) -> None:
    """Not JSON, or JSON that is not an object: INVALID_REQUEST."""
    with pytest.raises(InvalidRequestError):
        decode(raw, api.ListOffsetsRequest)


def test_partition_count_is_bounded() -> None:
    """More partitions than a request may carry: INVALID_REQUEST before any work."""
    too_many = [{"topic": "t", "partition": 0, "timestamp": -1}] * (api.PARTITIONS_MAX + 1)
    with pytest.raises(InvalidRequestError, match=r"\$\.partitions"):
        decode(orjson.dumps({"partitions": too_many}), api.ListOffsetsRequest)


def _produce(sizes: list[int]) -> api.ProduceRequest:
    return api.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        partitions=tuple(
            api.ProducePartition(topic=f"t{i}", partition=i, records_bytes=n)
            for i, n in enumerate(sizes)
        ),
    )


@given(st.lists(st.binary(max_size=64), max_size=8))
def test_produce_frame_round_trip(payloads: list[bytes]) -> None:
    """A produce frame decodes to the same header and the same payloads, in order."""
    header = _produce([len(p) for p in payloads])
    decoded, views = api.decode_frame(api.encode_frame(header, payloads), api.ProduceRequest)
    assert decoded == header
    assert [bytes(v) for v in views] == payloads


def test_typed_frame_reads_and_writes_the_dict_frame() -> None:
    """The dict frame code (still used by the replica fetcher) reads a typed fetch
    answer, and the typed reader reads a dict-built produce frame."""
    answer = api.FetchResponse(
        responses=(
            api.FetchPartitionResponse(
                topic="t",
                partition=0,
                high_watermark=5,
                diverging_epoch=api.DivergingEpoch(epoch=2, end_offset=4),
                current_leader=api.CurrentLeader(leader_id=1, leader_epoch=2, address="h:1"),
                records_bytes=3,
            ),
        )
    )
    header, payloads = decode_dict_frame(api.encode_frame(answer, [b"abc"]), "responses")
    assert header["responses"][0]["diverging_epoch"] == {"epoch": 2, "end_offset": 4}
    assert header["responses"][0]["error"] is None and bytes(payloads[0]) == b"abc"
    frame = encode_dict_frame(
        {"acks": 1, "partitions": [{"topic": "t", "partition": 0}]}, "partitions", [b"xy"]
    )
    produce, views = api.decode_frame(frame, api.ProduceRequest)
    assert produce.partitions[0].records_bytes == 2 and bytes(views[0]) == b"xy"


def _raw_frame(header: dict[str, Any], tail: bytes = b"") -> bytes:
    head = orjson.dumps(header)
    return len(head).to_bytes(4, "big") + head + tail


@pytest.mark.parametrize(
    ("frame", "text"),
    [
        (b"\x00\x00", "length prefix"),
        (b"\x00\x00\x00\x09{}", "does not fit"),
        (b"\x00\x00\x00\x02{}", "partitions"),
        (encode_dict_frame({"partitions": [{"topic": "t", "partition": 0}]}, "partitions", [b"x"])
         + b"!", "after the last payload"),
        (_raw_frame({"partitions": [{"topic": "t", "partition": 0, "records_bytes": 9}]}),
         "overruns the body - at `$.partitions[0].records_bytes`"),
        (_raw_frame({"partitions": [{"topic": "t", "partition": 0, "records_bytes": -1}]}),
         "$.partitions[0].records_bytes"),
    ],
)  # fmt: skip
def test_malformed_frames_are_invalid_request(frame: bytes, text: str) -> None:
    """Truncated frames, overrunning or negative lengths and trailing bytes raise
    INVALID_REQUEST rather than being misread."""
    with pytest.raises(InvalidRequestError) as info:
        api.decode_frame(frame, api.ProduceRequest)
    assert text in info.value.message, info.value.message


def test_metadata_request_from_a_query_is_bounded() -> None:
    """The metadata query's topic names get the topic-name bound."""
    assert decode_value({"topics": ["a", "b"]}, api.MetadataRequest).topics == ("a", "b")
    with pytest.raises(InvalidRequestError, match=r"\$\.topics\[0\]"):
        decode_value({"topics": ["x" * 250]}, api.MetadataRequest)


def test_group_bytes_travel_as_base64_as_before() -> None:
    """Member metadata and assignments are base64 text on the wire (the API's format),
    bytes in the message; bad base64 is INVALID_REQUEST naming the field."""
    join = group_api.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(group_api.JoinGroupProtocol(name="range", metadata=b"\x00\xff"),),
    )
    wire = orjson.loads(encode(join))
    assert wire["protocols"] == [{"name": "range", "metadata": "AP8="}]
    assert decode(encode(join), group_api.JoinGroupRequest) == join
    wire["protocols"][0]["metadata"] = "not base64!"
    with pytest.raises(InvalidRequestError, match=r"\$\.protocols\[0\]\.metadata"):
        decode(orjson.dumps(wire), group_api.JoinGroupRequest)


@pytest.mark.parametrize(
    ("message_type", "body", "field"),
    [
        (group_api.HeartbeatRequest, {"group_id": "g", "member_id": "m"}, "generation_id"),
        (group_api.HeartbeatRequest,
         {"group_id": "g", "member_id": "m", "generation_id": "1"}, "$.generation_id"),
        (group_api.OffsetCommitRequest,
         {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition": 0}]}]},
         "$.topics[0].partitions[0]"),
        (group_api.OffsetCommitRequest,
         {"group_id": "g", "topics": [{"name": "t", "partitions": [
             {"partition": 0, "offset": 1, "metadata": None}]}]},
         "$.topics[0].partitions[0].metadata"),
        (group_api.DescribeGroupsRequest, {"groups": ["g", 1]}, "$.groups[1]"),
        (group_api.ListGroupsRequest, {"states_filter": "Stable"}, "$.states_filter"),
        (group_api.FindCoordinatorRequest, {"key_type": 0}, "key"),
    ],
)  # fmt: skip
def test_bad_coordinator_fields_name_the_field(
    message_type: type[Any], body: dict[str, Any], field: str
) -> None:
    """Coordinator requests refuse wrong types and missing fields, naming them."""
    with pytest.raises(InvalidRequestError) as info:
        decode(orjson.dumps(body), message_type)
    assert field in info.value.message, info.value.message


def test_offset_fetch_without_topics_asks_for_everything() -> None:
    """``"topics": null`` and a missing ``topics`` both mean every committed offset."""
    assert decode(b'{"group_id": "g"}', group_api.OffsetFetchRequest).topics is None
    assert decode(b'{"group_id": "g", "topics": null}', group_api.OffsetFetchRequest).topics is None


def test_messages_are_frozen() -> None:
    """A decoded message cannot be changed behind the decoder's back."""
    fetch = decode(orjson.dumps(FETCH_BODY), api.FetchRequest)
    with pytest.raises(AttributeError):
        fetch.replica_id = 5  # type: ignore[misc]
