"""Properties of the typed request messages at the broker's and the coordinator's edges.

Checks, with hypothesis: (1) for every request type the broker decodes, *any* JSON
value (and any bytes) either decodes or raises INVALID_REQUEST, never another
exception, so bad input cannot take a handler past the error middleware's named answer;
(2) a decoded message encodes and decodes back equal (both ends use one class, so what
one side writes the other reads unchanged); (3) a produce frame with any payloads
round-trips through the typed frame codec.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.coordinator.routes import ROUTES
from raftka.common.errors import InvalidRequestError
from raftka.common.messages import broker as api
from raftka.common.messages import coordinator as group_api
from raftka.common.messages import decode, encode

REQUEST_TYPES: tuple[type[Any], ...] = (
    api.FetchRequest,
    api.ListOffsetsRequest,
    api.InitProducerIdRequest,
    api.ProduceRequest,
    *(route.request_type for route in ROUTES),
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
#: JSON values shaped like requests: objects with the API's own field names.
_names = st.sampled_from(
    [
        "partitions",
        "topic",
        "partition",
        "fetch_offset",
        "replica_id",
        "group_id",
        "member_id",
        "generation_id",
        "topics",
        "name",
        "offset",
        "groups",
        "protocols",
        "metadata",
        "assignments",
        "members",
        "key",
        "timestamp",
        "acks",
    ]
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=6),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.sampled_from(REQUEST_TYPES), _json)
def test_any_json_decodes_or_is_invalid_request(message_type: type[Any], value: object) -> None:
    """Decoding never raises anything but INVALID_REQUEST; what decodes re-encodes
    to a body that decodes to the same message."""
    try:
        message = decode(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS), message_type)
    except InvalidRequestError as e:
        assert e.name == "INVALID_REQUEST" and e.message
        return
    except orjson.JSONEncodeError:
        return  # an integer orjson cannot write: not a body anyone can send
    assert decode(encode(message), message_type) == message


@given(st.sampled_from(REQUEST_TYPES), st.binary(max_size=64))
def test_any_bytes_decode_or_are_invalid_request(message_type: type[Any], raw: bytes) -> None:
    """Arbitrary bytes (not JSON, truncated, binary) are INVALID_REQUEST or decode."""
    with contextlib.suppress(InvalidRequestError):
        decode(raw, message_type)


_partition = st.builds(
    group_api.OffsetCommitPartition,
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
    leader_epoch=st.none() | st.integers(-(2**31), 2**31 - 1),
    metadata=st.text(max_size=16),
)


@given(
    st.lists(
        st.builds(
            group_api.OffsetCommitTopic,
            name=st.text(min_size=1, max_size=12),
            partitions=st.lists(_partition, max_size=4).map(tuple),
        ),
        max_size=4,
    ).map(tuple),
    st.integers(-(2**31), 2**31 - 1),
)
def test_offset_commit_round_trips(
    topics: tuple[group_api.OffsetCommitTopic, ...], generation: int
) -> None:
    """A commit with any offsets, epochs and metadata strings reads back equal."""
    request = group_api.OffsetCommitRequest(group_id="g", generation_id=generation, topics=topics)
    assert decode(encode(request), group_api.OffsetCommitRequest) == request


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.integers(0, 2**31 - 1), st.binary()),
        max_size=6,
    ),
    st.sampled_from([-1, 0, 1]),
)
def test_produce_frame_round_trips(entries: list[tuple[str, int, bytes]], acks: int) -> None:
    """Any partitions and payloads come back as sent, payload bytes untouched."""
    header = api.ProduceRequest(
        acks=acks,
        partitions=tuple(
            api.ProducePartition(topic=t, partition=p, records_bytes=len(b)) for t, p, b in entries
        ),
    )
    decoded, payloads = api.decode_frame(
        api.encode_frame(header, [b for _, _, b in entries]), api.ProduceRequest
    )
    assert decoded == header
    assert [bytes(p) for p in payloads] == [b for _, _, b in entries]
