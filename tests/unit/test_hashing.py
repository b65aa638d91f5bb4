"""Kafka's hashes against published vectors and an independent implementation.

murmur2: the expected values are those Apache Kafka's own UtilsTest.testMurmur2 pins
for the Java client, and those librdkafka's rdmurmur2.c unit test pins (labelled there
as Java's results; they include the empty key and tails of every length). A hypothesis
test compares with kafka-python's port of the Java function on arbitrary bytes.
String.hashCode and Utils.abs: values computed from Java's definition by hand, including
the well-known string whose hashCode is Integer.MIN_VALUE.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.coordinator.placement import coordinator_partition
from raftka.common.hashing import (
    java_abs,
    java_string_hash,
    murmur2,
    murmur2_partition,
    to_positive,
)

KAFKA_UTILS_TEST = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# librdkafka's vectors are unsigned 32-bit patterns of the same Java int.
LIBRDKAFKA = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_UTILS_TEST)
def test_murmur2_matches_kafka_utils_test(key: bytes, expected: int) -> None:
    """murmur2 returns the signed int Kafka's Java client returns for each key."""
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA)
def test_murmur2_matches_librdkafka_vectors(key: bytes, expected: int) -> None:
    """Same bit pattern as librdkafka's Java-compatible murmur2 (all tail lengths)."""
    assert murmur2(key) & 0xFFFFFFFF == expected
    assert -(2**31) <= murmur2(key) < 2**31


def test_murmur2_treats_high_bytes_as_unsigned() -> None:
    """Bytes >= 0x80 (negative as Java bytes) hash like kafka-python's port, in the
    block part and in each tail position."""
    from kafka.partitioner.default import murmur2 as reference

    for key in (b"\xff", b"\x80\xff", b"\xfe\x81\x90", b"\xff\xff\xff\xff", b"\x80" * 7):
        assert murmur2(key) & 0xFFFFFFFF == reference(key)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    """Against kafka-python's independent port of Utils.murmur2 on arbitrary keys."""
    from kafka.partitioner.default import murmur2 as reference

    assert murmur2(key) & 0xFFFFFFFF == reference(key)
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)


def test_to_positive_clears_only_the_sign_bit() -> None:
    """toPositive masks the sign bit: -1 -> MAX_VALUE, MIN_VALUE -> 0 (not abs)."""
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    assert to_positive(-973932308) == 1173551340


def test_murmur2_partition_uses_the_masked_hash() -> None:
    """The keyed partition is (murmur2 & 0x7fffffff) % n, never a negative index."""
    # "21" hashes negative: 1173551340 % 7 = 3, while Python's -973932308 % 7 would be 1.
    assert murmur2_partition(b"21", 7) == 1173551340 % 7 == 3
    assert murmur2_partition(b"abc", 10) == 479470107 % 10
    with pytest.raises(ValueError):
        murmur2_partition(b"x", 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision with "BB"
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # hashCode == Integer.MIN_VALUE
        ("\u00e9", 0xE9),  # one UTF-16 unit, not the two UTF-8 bytes
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # surrogate pair: two code units
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    """String.hashCode over UTF-16 code units with int32 wrap-around."""
    assert java_string_hash(text) == expected


def test_java_string_hash_wraps_like_an_int() -> None:
    """A long string overflows many times; the result stays a Java int computed the
    slow way (exact big-int polynomial, then reduced mod 2**32)."""
    text = "consumer-group-" * 40
    exact = sum(ord(c) * 31 ** (len(text) - 1 - i) for i, c in enumerate(text)) % 2**32
    signed = exact - 2**32 if exact >= 2**31 else exact
    assert java_string_hash(text) == signed


def test_java_abs_maps_min_value_to_zero() -> None:
    """Kafka's Utils.abs: MIN_VALUE -> 0 (Math.abs would stay negative)."""
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5
    assert java_abs(2**31 - 1) == 2**31 - 1


def test_coordinator_partition() -> None:
    """abs(hashCode) % n, with the MIN_VALUE string landing on partition 0."""
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    # A negative hash: abs first, then modulo (Python's % on the negative would differ).
    h = java_string_hash("my-group")
    assert coordinator_partition("my-group", 50) == abs(h) % 50
    with pytest.raises(ValueError):
        coordinator_partition("g", 0)
