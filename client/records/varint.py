"""Zig-zag varints as Kafka's record format uses them (protobuf's encoding)."""

from __future__ import annotations

from raftka.client.errors import CorruptMessageError

_VARINT_BYTES_MAX = 5
_VARLONG_BYTES_MAX = 10


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint (32-bit range)."""
    _write_unsigned(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    """Append a zig-zag varlong (64-bit range)."""
    _write_unsigned(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _write_unsigned(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_bytes(out: bytearray, data: bytes | None) -> None:
    """Append a varint length (-1 for None) and the bytes."""
    if data is None:
        out.append(1)  # zig-zag of -1
        return
    write_varint(out, len(data))
    out += data


def _read_unsigned(buf: bytes, pos: int, bytes_max: int) -> tuple[int, int]:
    result = shift = 0
    for i in range(bytes_max):
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptMessageError(f"varint longer than {bytes_max} bytes")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; returns (value, next position)."""
    v, pos = _read_unsigned(buf, pos, _VARINT_BYTES_MAX)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    v, pos = _read_unsigned(buf, pos, _VARLONG_BYTES_MAX)
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
    return buf[pos:end], end
