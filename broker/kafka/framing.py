"""Kafka's request framing, without I/O (docs/kafka-protocol.md, "Framing").

Theory of operation: a request is a 4-byte big-endian size and that many bytes; the
bytes start with a request header, v1 (api key, api version, correlation id, nullable
client id) or, for a flexible API version, v2 (the same plus tagged fields). The body
follows. A response is a size, a response header (v0: the correlation id; v1 for
flexible versions: plus tagged fields; ApiVersions answers always use v0 so a client
that does not yet know our versions can read it) and the body.

:func:`parse_header` reads the fixed part first (api key and version decide the header
version), so an unknown API or version is known before anything version-specific is
parsed; it raises :class:`FrameError` (the peer broke the protocol: the connection
closes) for a header that does not parse.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

__all__ = [
    "API_VERSIONS_KEY",
    "SIZE",
    "FrameError",
    "Header",
    "encode_response",
    "frame_size",
    "parse_fixed",
    "parse_header",
]

#: The size prefix of every frame.
SIZE: Final = struct.Struct(">i")
_FIXED: Final = struct.Struct(">hhi")
API_VERSIONS_KEY: Final = 18

_read_v1 = entity_reader(RequestHeaderV1)
_read_v2 = entity_reader(RequestHeaderV2)
_write_v0 = entity_writer(ResponseHeaderV0)
_write_v1 = entity_writer(ResponseHeaderV1)


class FrameError(Exception):
    """The peer broke the framing: the connection is closed (as Kafka closes it)."""


@dataclass(frozen=True, slots=True)
class Header:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: Where the body starts in the frame.
    body_offset: int


def frame_size(prefix: bytes, max_bytes: int, limit_name: str = "socket.request.max.bytes") -> int:
    """The size a 4-byte prefix declares; FrameError when it is negative, too small
    for a header, or above ``max_bytes`` (the setting ``limit_name``)."""
    size = int(SIZE.unpack(prefix)[0])
    if size < _FIXED.size:
        raise FrameError(f"request size {size} is smaller than a request header")
    if size > max_bytes:
        raise FrameError(f"request size {size} is larger than {limit_name} {max_bytes}")
    return size


def parse_fixed(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the part of every header version."""
    if len(frame) < _FIXED.size:
        raise FrameError("frame shorter than a request header")
    key, version, correlation_id = _FIXED.unpack_from(frame, 0)
    return key, version, correlation_id


def parse_header(frame: bytes, *, flexible: bool) -> Header:
    """The request header, v2 when the request's version is ``flexible``, else v1."""
    try:
        header: Any
        header, end = (_read_v2 if flexible else _read_v1)(frame, 0)
    except Exception as e:  # kio raises its own and ValueError/IndexError on short input
        raise FrameError(f"bad request header: {type(e).__name__}: {e}") from None
    return Header(
        api_key=int(header.request_api_key),
        api_version=int(header.request_api_version),
        correlation_id=int(header.correlation_id),
        client_id=header.client_id,
        body_offset=end,
    )


def encode_response(correlation_id: int, body: bytes, *, flexible_header: bool) -> bytes:
    """A whole response frame: size, response header (v1 if ``flexible_header``), body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    if flexible_header:
        _write_v1(out, ResponseHeaderV1(correlation_id=correlation_id))  # type: ignore[arg-type]
    else:
        _write_v0(out, ResponseHeaderV0(correlation_id=correlation_id))  # type: ignore[arg-type]
    out.write(body)
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    return bytes(frame)
