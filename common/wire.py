"""raftka's binary frame: a small JSON header followed by raw record bytes.

Produce requests and fetch responses carry RecordBatch v2 bytes for many partitions.
Rather than JSON (base64) or multipart, one body is::

    u32 big-endian  header length H
    H bytes         the header, a JSON object (orjson)
    ...             the record bytes of every partition, concatenated

Every partition entry of the header names its ``records_bytes`` (0 for none); the
payloads follow in the order the entries appear, so a reader slices the rest of the
body without copying. Content type :data:`FRAME_CONTENT_TYPE`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from raftka.common.errors import InvalidRequestError

__all__ = [
    "FRAME_CONTENT_TYPE",
    "FRAME_HEADER_BYTES_MAX",
    "cut_payloads",
    "decode_frame",
    "encode_frame",
    "join_frame",
    "split_frame",
]

FRAME_CONTENT_TYPE: Final = "application/vnd.raftka.frame"
#: Bound on the JSON header of one frame.
FRAME_HEADER_BYTES_MAX: Final = 16 * 1024 * 1024
_LEN = struct.Struct(">I")


def encode_frame(header: dict[str, Any], entries_key: str, payloads: Sequence[bytes]) -> bytes:
    """``header[entries_key]`` is the list of partition entries; each gets the length of
    the matching payload as ``records_bytes``."""
    entries = header[entries_key]
    assert len(entries) == len(payloads), (len(entries), len(payloads))
    for entry, payload in zip(entries, payloads, strict=True):
        entry["records_bytes"] = len(payload)
    return join_frame(orjson.dumps(header), payloads)


def decode_frame(body: bytes, entries_key: str) -> tuple[dict[str, Any], list[memoryview]]:
    """The header and one payload view per entry of ``header[entries_key]``.
    InvalidRequestError when the frame is malformed."""
    head, rest = split_frame(body)
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"frame header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get(entries_key), list):
        raise InvalidRequestError(f"frame header needs a list {entries_key!r}")
    sizes = [
        e.get("records_bytes", 0) if isinstance(e, dict) else None for e in header[entries_key]
    ]
    payloads = cut_payloads(
        rest, sizes, lambda i, size: f"{entries_key}[{i}].records_bytes {size!r} does not fit"
    )
    return header, payloads


def cut_payloads(
    rest: memoryview, sizes: Sequence[object], misfit: Callable[[int, object], str]
) -> list[memoryview]:
    """``rest`` cut into one payload per entry of ``sizes``, in order. InvalidRequestError
    with ``misfit(i, size)`` when entry ``i``'s size is not a length that fits what is
    left, and when bytes are left after the last payload."""
    pos = 0
    payloads: list[memoryview] = []
    for i, size in enumerate(sizes):
        if type(size) is not int or size < 0 or pos + size > len(rest):
            raise InvalidRequestError(misfit(i, size))
        payloads.append(rest[pos : pos + size])
        pos += size
    if pos != len(rest):
        raise InvalidRequestError(f"{len(rest) - pos} bytes after the last payload")
    return payloads


def join_frame(head: bytes, payloads: Sequence[bytes | memoryview]) -> bytes:
    """An encoded header and its payloads as one frame body."""
    return b"".join([_LEN.pack(len(head)), head, *payloads])


def split_frame(body: bytes) -> tuple[memoryview, memoryview]:
    """A frame body's header bytes and the payload bytes behind them (views, no copy).
    InvalidRequestError when the length prefix does not fit the body."""
    view = memoryview(body)
    if len(view) < _LEN.size:
        raise InvalidRequestError("frame shorter than its length prefix")
    (head_len,) = _LEN.unpack_from(view, 0)
    if head_len > FRAME_HEADER_BYTES_MAX or _LEN.size + head_len > len(view):
        raise InvalidRequestError(f"frame header of {head_len} bytes does not fit the body")
    end = _LEN.size + head_len
    return view[_LEN.size : end], view[end:]
