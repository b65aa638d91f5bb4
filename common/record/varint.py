"""Zig-zag varints as Kafka's record format uses them (protobuf's encoding).

A signed value ``v`` is first zig-zagged to an unsigned one (0, -1, 1, -2, ... map to
0, 1, 2, 3, ...) so that small negative numbers stay short, then written 7 bits at a
time, least significant group first, with the high bit of each byte saying "more
follows". A varint carries a 32-bit value (at most 5 bytes), a varlong a 64-bit one (at
most 10 bytes).

The functions here are the readable reference. :mod:`.batch` inlines the one-byte case
of reading in its hot loop and falls back to :func:`read_unsigned` for longer ones;
:func:`encode_varint` serves small values from a precomputed table for the encoder.
"""

from __future__ import annotations

from typing import Final

from raftka.common.errors import CorruptMessageError

VARINT_BYTES_MAX: Final = 5
VARLONG_BYTES_MAX: Final = 10
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_U32_MASK: Final = 0xFFFFFFFF
_U64_MASK: Final = 0xFFFFFFFFFFFFFFFF
# Unsigned values below this have their encoding cached: lengths up to 8 KiB and
# offset deltas up to 8191 (zig-zag doubles them) are served by one list lookup.
_CACHED_BELOW: Final = 1 << 14


def _encode_unsigned(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_UNSIGNED_CACHE: Final[list[bytes]] = [_encode_unsigned(v) for v in range(_CACHED_BELOW)]
#: SMALL_NONNEGATIVE[n] is the zig-zag varint of n for 0 <= n < len(...): what a
#: record's lengths, offset delta and (usually) timestamp delta encode to, for callers
#: whose per-record loop is hot enough that a table index beats a function call.
SMALL_NONNEGATIVE: Final[tuple[bytes, ...]] = tuple(
    _UNSIGNED_CACHE[v << 1] for v in range(_CACHED_BELOW >> 1)
)

# Zig-zag decoding of a one-byte varint, for the decoder's fast path.
ZIGZAG_ONE_BYTE: Final[tuple[int, ...]] = tuple((v >> 1) ^ -(v & 1) for v in range(0x80))


def zigzag32(value: int) -> int:
    """The unsigned zig-zag form of a 32-bit signed value."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a 32-bit varint")
    return ((value << 1) ^ (value >> 31)) & _U32_MASK


def zigzag64(value: int) -> int:
    """The unsigned zig-zag form of a 64-bit signed value."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a 64-bit varlong")
    return ((value << 1) ^ (value >> 63)) & _U64_MASK


def encode_varint(value: int) -> bytes:
    """The bytes of a zig-zag varint (32-bit range)."""
    u = zigzag32(value)
    return _UNSIGNED_CACHE[u] if u < _CACHED_BELOW else _encode_unsigned(u)


def encode_varlong(value: int) -> bytes:
    """The bytes of a zig-zag varlong (64-bit range)."""
    u = zigzag64(value)
    return _UNSIGNED_CACHE[u] if u < _CACHED_BELOW else _encode_unsigned(u)


def encode_length(length: int) -> bytes:
    """The varint of a non-negative length: a cache lookup for lengths under 8 KiB."""
    u = length << 1
    return _UNSIGNED_CACHE[u] if u < _CACHED_BELOW else encode_varint(length)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint (32-bit range)."""
    out += encode_varint(value)


def write_varlong(out: bytearray, value: int) -> None:
    """Append a zig-zag varlong (64-bit range)."""
    out += encode_varlong(value)


def write_bytes(out: bytearray, data: bytes | None) -> None:
    """Append a varint length (-1 for None) and the bytes."""
    if data is None:
        out.append(1)  # zig-zag of -1
        return
    out += encode_length(len(data))
    out += data


def read_unsigned(buf: bytes, pos: int, bytes_max: int) -> tuple[int, int]:
    """Read an unsigned varint of at most ``bytes_max`` bytes at ``pos``.

    Returns (value, next position). Raises CorruptMessageError if it runs longer than
    ``bytes_max`` bytes, if its last byte carries bits beyond the 32 or 64 bits the
    type holds, or if it runs past the end of ``buf``.
    """
    bits = 32 if bytes_max == VARINT_BYTES_MAX else 64
    result = shift = 0
    for i in range(bytes_max):
        if pos + i >= len(buf):
            raise CorruptMessageError("varint runs past the end of the buffer")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if i == bytes_max - 1 and b >> (bits - shift):
                raise CorruptMessageError(f"varint of {bytes_max} bytes overflows its type")
            return result, pos + i + 1
        shift += 7
    raise CorruptMessageError(f"varint longer than {bytes_max} bytes")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; returns (value, next position)."""
    v, pos = read_unsigned(buf, pos, VARINT_BYTES_MAX)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a zig-zag varlong at ``pos``; returns (value, next position)."""
    v, pos = read_unsigned(buf, pos, VARLONG_BYTES_MAX)
    return (v >> 1) ^ -(v & 1), pos


def read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """Read a varint-length-prefixed byte string (None for length -1)."""
    length, pos = read_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptMessageError(f"negative length {length}")
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptMessageError("length runs past the end of the batch")
    return bytes(buf[pos:end]), end
