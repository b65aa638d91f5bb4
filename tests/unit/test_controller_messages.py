"""The controller API's typed messages (common/messages/controller.py).

Checks: every request survives encode -> decode unchanged (both ends use one class);
a bad field is refused with INVALID_REQUEST naming it, an unknown field too (the
controller's requests are strict), while an answer with an unknown field still
decodes (a newer controller); bounds hold at their edges; a GET request written as
query parameters by ``query_params`` reads back the same through the controller's
route; and metadata payloads pass through as raw JSON, byte for byte.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import make_mocked_request

from raftka.common.errors import InvalidRequestError
from raftka.common.messages import controller as msg
from raftka.common.messages import decode, encode
from raftka.metadata.routes import decode_query

REQUESTS: list[Any] = [
    msg.RegisterBrokerRequest(
        broker_id=1,
        incarnation_id="abc",
        endpoints=[msg.EndpointData(name="PLAINTEXT", host="h", port=9092)],
        rack="r1",
    ),
    msg.BrokerHeartbeatRequest(broker_id=1, broker_epoch=7, current_metadata_offset=-1),
    msg.CreateTopicsRequest(
        topics=[
            msg.CreatableTopic(name="a", num_partitions=3, configs={"retention.ms": "1"}),
            msg.CreatableTopic(name="b", assignments={0: [1, 2], 1: [2, 1]}),
            msg.CreatableTopic(name="c", assignments=[[1], [2]]),
        ],
        validate_only=True,
    ),
    msg.DeleteTopicsRequest(names=["a"], topic_ids=["id"]),
    msg.CreatePartitionsRequest(
        topics=[msg.CreatablePartitions(name="a", count=4, assignments=[[1, 2]])]
    ),
    msg.IncrementalAlterConfigsRequest(
        resources=[
            msg.AlterConfigsResource(
                resource_type="topic",
                resource_name="a",
                ops=[msg.AlterConfigOp(name="retention.ms", op="DELETE")],
            )
        ]
    ),
    msg.AlterPartitionRequest(
        broker_id=1,
        broker_epoch=5,
        topic_id="id",
        partition=0,
        leader_epoch=2,
        partition_epoch=3,
        new_isr=[1, 2],
    ),
    msg.AllocateProducerIdsRequest(broker_id=1, broker_epoch=5),
]


@pytest.mark.parametrize("request_message", REQUESTS, ids=lambda m: type(m).__name__)
def test_requests_round_trip(request_message: Any) -> None:
    """What a sender encodes, the controller decodes to an equal message."""
    assert decode(encode(request_message), type(request_message)) == request_message


@pytest.mark.parametrize(
    ("message_type", "body", "field"),
    [
        (msg.BrokerHeartbeatRequest, b'{"broker_id": 1}', "broker_epoch"),
        (
            msg.BrokerHeartbeatRequest,
            b'{"broker_id": -1, "broker_epoch": 1, "current_metadata_offset": 0}',
            "$.broker_id",
        ),
        (
            msg.BrokerHeartbeatRequest,
            b'{"broker_id": 1, "broker_epoch": 1, "current_metadata_offset": -2}',
            "$.current_metadata_offset",
        ),
        (msg.CreateTopicsRequest, b'{"topics": [{"name": "a", "x": 1}]}', "`x`"),
        (
            msg.CreateTopicsRequest,
            b'{"topics": [{"name": "a", "replication_factor": 32768}]}',
            "$.topics[0].replication_factor",
        ),
        (
            msg.CreateTopicsRequest,
            b'{"topics": [{"name": "a", "assignments": {"x": [1]}}]}',
            "$.topics[0].assignments",
        ),
        (
            msg.IncrementalAlterConfigsRequest,
            b'{"resources": [{"resource_type": "group", "resource_name": "g", "ops": []}]}',
            "$.resources[0].resource_type",
        ),
        (
            msg.IncrementalAlterConfigsRequest,
            b'{"resources": [{"resource_type": "topic", "resource_name": "t",'
            b' "ops": [{"name": "k", "op": "PUT"}]}]}',
            "$.resources[0].ops[0].op",
        ),
        (
            msg.RegisterBrokerRequest,
            b'{"broker_id": 1, "incarnation_id": "x",'
            b' "endpoints": [{"name": "P", "host": "h", "port": 65536}]}',
            "$.endpoints[0].port",
        ),
    ],
)
def test_a_bad_field_is_named(message_type: Any, body: bytes, field: str) -> None:
    """INVALID_REQUEST, and the message names the offending field."""
    with pytest.raises(InvalidRequestError) as caught:
        decode(body, message_type)
    assert field in caught.value.message


def test_items_are_bounded() -> None:
    """More than REQUEST_ITEMS_MAX replicas in one list is refused."""
    body = encode({"topics": [{"name": "a", "assignments": [[1] * (msg.REQUEST_ITEMS_MAX + 1)]}]})
    with pytest.raises(InvalidRequestError):
        decode(body, msg.CreateTopicsRequest)


def test_answers_ignore_unknown_fields() -> None:
    """A newer controller's answer with an extra field still decodes."""
    answer = decode(b'{"broker_epoch": 4, "new_field": true}', msg.RegisterBrokerResponse)
    assert answer.broker_epoch == 4


@pytest.mark.parametrize(
    ("request_message", "lists"),
    [
        (msg.FetchMetadataRequest(offset=12, max_wait_ms=500, records_max=7), frozenset()),
        (msg.DescribeConfigsRequest(topic="t", key=["a", "b"]), frozenset({"key"})),
        (msg.DescribeConfigsRequest(topic="t"), frozenset({"key"})),
        (msg.DescribeConfigsRequest(topic="123", key=["7"]), frozenset({"key"})),
    ],
)
def test_query_parameters_round_trip(request_message: Any, lists: frozenset[str]) -> None:
    """query_params (the sender) and the route's query decoding (the controller)
    agree."""
    from urllib.parse import urlencode

    query = urlencode(msg.query_params(request_message), doseq=True)
    request = make_mocked_request("GET", f"/v1/x?{query}")
    assert decode_query(request, type(request_message), lists) == request_message


def test_bad_query_parameters_are_named() -> None:
    """A non-integer, an out-of-range value and an unknown parameter each name it."""
    for query, field in [
        ("offset=abc", "offset"),
        ("records_max=0", "records_max"),
        ("bogus=1", "bogus"),
        ("offset=1e3", "offset"),
    ]:
        with pytest.raises(InvalidRequestError) as caught:
            decode_query(
                make_mocked_request("GET", f"/v1/metadata?{query}"), msg.FetchMetadataRequest
            )
        assert field in caught.value.message, query


def test_metadata_payloads_pass_through_as_raw_json() -> None:
    """The stored payload bytes appear verbatim in the answer and come back intact."""
    payload = b'[{"type":"NoOpRecord","version":0,"data":{}}]'
    answer = msg.FetchMetadataResponse(
        snapshot=None,
        batches=[msg.MetadataBatch(offset=1, epoch=1, records=msgspec.Raw(payload))],
        next_offset=2,
        high_watermark=2,
    )
    wire = encode(answer)
    assert payload in wire
    assert bytes(decode(wire, msg.FetchMetadataResponse).batches[0].records) == payload


def test_the_admin_clients_body_survives_orjson() -> None:
    """The admin client hands its transport plain values that orjson encodes (integer
    partition keys become strings) and the controller decodes them to the message
    the admin built."""
    import orjson

    from raftka.client.admin import _json_value

    built = msg.CreateTopicsRequest(
        topics=[msg.CreatableTopic(name="a", assignments={0: [1, 2], 1: [2, 1]})]
    )
    assert decode(orjson.dumps(_json_value(built)), msg.CreateTopicsRequest) == built
