"""The broker's binary frame (JSON header + concatenated record bytes).

Checks: encode then decode returns the header (with records_bytes filled in) and each
payload; truncated bodies, lengths that overrun, trailing bytes and non-JSON headers
raise INVALID_REQUEST rather than being misread.
"""

from __future__ import annotations

import pytest

from raftka.common.errors import InvalidRequestError
from raftka.common.wire import decode_frame, encode_frame


def test_round_trip() -> None:
    """Three partitions, one empty, come back in order with their lengths."""
    header = {
        "acks": -1,
        "partitions": [
            {"topic": "a", "partition": 0},
            {"topic": "b", "partition": 1},
            {"topic": "c", "partition": 2},
        ],
    }
    frame = encode_frame(header, "partitions", [b"xyz", b"", b"0123456789"])
    decoded, payloads = decode_frame(frame, "partitions")
    assert decoded["acks"] == -1
    assert [p["records_bytes"] for p in decoded["partitions"]] == [3, 0, 10]
    assert [bytes(p) for p in payloads] == [b"xyz", b"", b"0123456789"]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda f: f[:2],  # shorter than the prefix
        lambda f: f[:-1],  # last payload cut
        lambda f: f + b"!",  # trailing bytes
        lambda f: b"\x00\x00\x00\x03abc" + f[7:],  # header not JSON
        lambda f: b"\xff\xff\xff\xff" + f[4:],  # header length overruns
    ],
)
def test_malformed_frames_are_rejected(mangle: object) -> None:
    """Each malformation raises InvalidRequestError."""
    frame = encode_frame({"partitions": [{"topic": "a"}]}, "partitions", [b"payload"])
    with pytest.raises(InvalidRequestError):
        decode_frame(mangle(frame), "partitions")  # type: ignore[operator]
