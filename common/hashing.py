"""The hashes Kafka's placement decisions hang on, bit for bit as Java computes them.

- :func:`murmur2` is the Java client's ``Utils.murmur2`` (seed ``0x9747b28c``): the
  default partitioner hashes a record's serialized key with it, so a key must land on the
  partition a Java (or librdkafka ``murmur2_random``) producer would choose.
- :func:`to_positive` is ``Utils.toPositive``: clear the sign bit (``h & 0x7fffffff``),
  not ``abs`` (which would fold ``-x`` and ``x`` together and leave ``MIN_VALUE``
  negative).
- :func:`java_string_hash` is ``java.lang.String.hashCode`` and :func:`java_abs` is
  Kafka's ``Utils.abs`` (``Integer.MIN_VALUE`` maps to 0, unlike ``Math.abs``).
  The coordinators' placement rule built on them lives with the coordinators
  (:mod:`raftka.broker.coordinator.placement`).

Everything works on Python ints kept in 32 bits; results are Java ``int`` values
(signed, in ``[-2**31, 2**31)``) unless the name says positive.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "java_abs",
    "java_string_hash",
    "murmur2",
    "murmur2_partition",
    "to_positive",
]

_MASK32: Final = 0xFFFFFFFF
_INT_MIN: Final = -(2**31)
# Kafka's murmur2 constants (MurmurHash2 by Austin Appleby, with Kafka's own seed).
_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24


def _signed32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2(byte[])``: a signed 32-bit hash.

    Java reads each byte as a signed ``byte`` and masks it with ``0xff`` before shifting,
    so a byte is always its unsigned value here, in the four-byte blocks and in the tail.
    All arithmetic wraps at 32 bits; Java's ``>>>`` is a logical shift, which on an
    unsigned 32-bit value is Python's ``>>``.
    """
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(buf[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    # Java's switch falls through from case 3 to 2 to 1; the multiply runs once, and only
    # when there is a tail at all.
    if tail == 3:
        h ^= buf[whole + 2] << 16
    if tail >= 2:
        h ^= buf[whole + 1] << 8
    if tail >= 1:
        h ^= buf[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _signed32(h)


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: the int with its sign bit cleared."""
    return number & 0x7FFFFFFF


def murmur2_partition(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The default partitioner's choice for a keyed record:
    ``toPositive(murmur2(key)) % numPartitions`` over all partitions of the topic."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


def java_string_hash(text: str) -> int:
    """``java.lang.String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code
    units, wrapping at 32 bits. A character outside the BMP counts as its two surrogates;
    a lone surrogate in ``text`` (Python allows them) counts as itself, as in Java."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK32
    return _signed32(h)


def java_abs(number: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` gives 0
    (``Math.abs`` would return it unchanged, still negative)."""
    assert _INT_MIN <= number < 2**31, "not a Java int"
    return 0 if number == _INT_MIN else abs(number)
