"""Zig-zag varints against vectors computed by hand from the protobuf rules."""

from __future__ import annotations

import pytest

from raftka.common.errors import CorruptMessageError
from raftka.common.record import varint

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# (value, encoding). Zig-zag first (0,-1,1,-2.. -> 0,1,2,3..), then 7 bits per byte,
# low group first, high bit set on every byte but the last. For example 300 zig-zags
# to 600 = 0b100_1011000: 0x58|0x80 = 0xd8, then 600 >> 7 = 4.
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (300, "d804"),
    (INT32_MAX, "feffffff0f"),  # zig-zag 0xFFFFFFFE
    (INT32_MIN, "ffffffff0f"),  # zig-zag 0xFFFFFFFF
]
VARLONG_VECTORS = [
    *VARINT_VECTORS,
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
    (2**31, "8080808010"),  # one past int32: zig-zag 2^32 needs the 5th byte's bit 4
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_VECTORS)
def test_varint_vectors(value: int, encoded: str) -> None:
    """encode_varint/read_varint match each hand-computed vector, both directions."""
    assert varint.encode_varint(value).hex() == encoded
    out = bytearray(b"\xaa")
    varint.write_varint(out, value)
    assert out.hex() == "aa" + encoded
    assert varint.read_varint(bytes.fromhex("ee" + encoded + "ee"), 1) == (
        value,
        1 + len(encoded) // 2,
    )


@pytest.mark.parametrize(("value", "encoded"), VARLONG_VECTORS)
def test_varlong_vectors(value: int, encoded: str) -> None:
    """encode_varlong/read_varlong match each hand-computed vector, both directions."""
    assert varint.encode_varlong(value).hex() == encoded
    assert varint.read_varlong(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_encode_length_matches_varint_beyond_cache() -> None:
    """encode_length (cached below 8 KiB) agrees with the uncached path on both sides of
    the cache edge."""
    for n in (0, 1, 8191, 8192, 8193, 10**6):
        assert varint.encode_length(n) == varint.encode_varint(n)


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1])
def test_varint_out_of_range_is_refused(value: int) -> None:
    """Writing a value outside int32 as a varint raises ValueError, not a silent wrap."""
    with pytest.raises(ValueError, match="32-bit"):
        varint.encode_varint(value)


def test_varlong_out_of_range_is_refused() -> None:
    """Writing a value outside int64 as a varlong raises ValueError."""
    with pytest.raises(ValueError, match="64-bit"):
        varint.encode_varlong(INT64_MAX + 1)


@pytest.mark.parametrize(
    ("encoded", "reader"),
    [
        ("8080808080", varint.read_varint),  # continuation bit on the 5th byte
        ("ffffffff1f", varint.read_varint),  # 5th byte carries bit 32
        ("ffffffffffffffffff02", varint.read_varlong),  # 10th byte carries bit 64
        ("80", varint.read_varint),  # runs off the end
        ("", varint.read_varint),
    ],
)
def test_malformed_varints_raise_corrupt_message(encoded: str, reader: object) -> None:
    """Overlong, overflowing and truncated varints raise CorruptMessageError."""
    assert callable(reader)
    with pytest.raises(CorruptMessageError):
        reader(bytes.fromhex(encoded), 0)


def test_read_bytes_null_and_bounds() -> None:
    """read_bytes gives None for length -1, the bytes for a length, and
    CorruptMessageError for -2 or a length past the end."""
    assert varint.read_bytes(b"\x01", 0) == (None, 1)
    assert varint.read_bytes(b"\x04ab", 0) == (b"ab", 3)
    with pytest.raises(CorruptMessageError):
        varint.read_bytes(b"\x03", 0)
    with pytest.raises(CorruptMessageError):
        varint.read_bytes(b"\x06ab", 0)
