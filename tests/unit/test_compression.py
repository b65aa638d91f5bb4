"""Compression codecs: framing Kafka's readers expect, formats other writers produce,
and bounded, typed failure on garbage and decompression bombs.

Reference encoders come from independent libraries (python-lz4, zstandard, gzip,
kafka-python's snappy framing), so a shared bug with cramjam cannot hide.
"""

from __future__ import annotations

import gzip
import os
import struct

import lz4.frame
import pytest
import zstandard
from kafka import codec as kafka_codec

from raftka.common.errors import CorruptMessageError, UnsupportedCompressionTypeError
from raftka.common.record import Compression, compress, decompress
from raftka.common.record.compression import LZ4_FRAME_HEADER, XERIAL_HEADER

SAMPLES = [b"", b"x", b"hello world " * 20_000, os.urandom(100_000)]
CODECS = list(Compression)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "random"])
def test_round_trip(codec: Compression, data: bytes) -> None:
    """decompress(compress(x)) == x for every codec on empty, tiny, compressible and
    incompressible data (the last exercises lz4's stored-block path)."""
    assert decompress(codec, compress(codec, data)) == data


def test_lz4_frame_header_is_kafka_compatible() -> None:
    """Our LZ4 frame declares independent blocks (Kafka's Java reader decompresses each
    block alone), 64 KiB blocks, and a descriptor checksum equal to the one python-lz4
    writes for the same flags."""
    reference = lz4.frame.compress(
        b"",
        block_linked=False,
        store_size=False,
        content_checksum=False,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
    )
    assert reference[:7] == LZ4_FRAME_HEADER
    flg = LZ4_FRAME_HEADER[4]
    assert flg >> 6 == 1 and flg & 0x20, "version 1 with independent blocks"
    framed = compress(Compression.LZ4, os.urandom(10) * 20_000)
    assert framed.startswith(LZ4_FRAME_HEADER)
    assert framed.endswith(b"\x00\x00\x00\x00")


@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "random"])
def test_lz4_reads_other_writers(data: bytes) -> None:
    """Frames from python-lz4 with linked blocks, content size, block and content
    checksums all decode; and python-lz4 reads ours."""
    theirs = lz4.frame.compress(
        data, block_linked=True, store_size=True, content_checksum=True, block_checksum=True
    )
    assert decompress(Compression.LZ4, theirs) == data
    assert lz4.frame.decompress(compress(Compression.LZ4, data)) == data


def test_snappy_xerial_framing_layout() -> None:
    """Our snappy output is xerial: the 16-byte header (magic, version 1, compatible 1)
    then [int32 length][raw block] with blocks of at most 32 KiB uncompressed."""
    data = b"abcdefgh" * 10_000  # 80000 bytes: 3 blocks of 32768, 32768, 14464
    framed = compress(Compression.SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) == XERIAL_HEADER
    pos, sizes = 16, []
    import cramjam

    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        sizes.append(len(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length]))))
        pos += 4 + length
    assert sizes == [32768, 32768, 14464]


@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "random"])
def test_snappy_reads_xerial_and_raw_from_kafka_python(data: bytes) -> None:
    """kafka.codec's xerial-framed and plain raw snappy both decode; kafka.codec reads
    ours."""
    xerial = kafka_codec.snappy_encode(data, xerial_compatible=True)
    raw = kafka_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(Compression.SNAPPY, xerial) == data
    assert decompress(Compression.SNAPPY, raw) == data
    assert kafka_codec.snappy_decode(compress(Compression.SNAPPY, data)) == data


def test_gzip_concatenated_members() -> None:
    """A gzip payload of several concatenated members decodes to all of them."""
    payload = gzip.compress(b"first ") + gzip.compress(b"second ") + gzip.compress(b"third")
    assert decompress(Compression.GZIP, payload) == b"first second third"


def test_zstd_with_and_without_content_size() -> None:
    """zstd frames with a content size, without one (streamed), and two concatenated
    frames all decode."""
    data = b"zstd " * 10_000
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(data)
    without = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    stream = zstandard.ZstdCompressor().compressobj()
    streamed = stream.compress(data) + stream.flush()
    two = zstandard.ZstdCompressor().compress(data[:7]) + zstandard.ZstdCompressor().compress(
        data[7:]
    )
    for payload in (with_size, without, streamed, two):
        assert decompress(Compression.ZSTD, payload) == data
    assert (
        zstandard.ZstdDecompressor().decompressobj().decompress(compress(Compression.ZSTD, data))
        == data
    )


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
def test_decompression_bomb_is_bounded(codec: Compression) -> None:
    """Output one byte over decompressed_bytes_max raises CorruptMessageError; exactly
    at the limit it decodes."""
    data = b"\x00" * 100_000
    payload = compress(codec, data)
    assert decompress(codec, payload, decompressed_bytes_max=100_000) == data
    with pytest.raises(CorruptMessageError):
        decompress(codec, payload, decompressed_bytes_max=99_999)


def test_snappy_raw_bomb_is_refused_before_allocation() -> None:
    """A raw snappy block whose header claims 4 GiB is refused by the size check (the
    varint ffffffff0f), not by trying to allocate."""
    with pytest.raises(CorruptMessageError, match="claims"):
        decompress(Compression.SNAPPY, bytes.fromhex("ffffffff0f") + b"\x00" * 8)


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00",
        b"garbage garbage garbage",
        os.urandom(300),
        XERIAL_HEADER + b"\x00\x00\x00\x09ab",
    ],
    ids=["empty", "zero", "text", "random", "xerial-overrun"],
)
def test_garbage_raises_corrupt_message(codec: Compression, garbage: bytes) -> None:
    """Garbage never raises anything but CorruptMessageError. The one exception is
    b"\x00" for snappy: that is raw snappy's valid encoding of nothing."""
    if codec is Compression.SNAPPY and garbage == b"\x00":
        assert decompress(codec, garbage) == b""
        return
    with pytest.raises(CorruptMessageError):
        decompress(codec, garbage)


def test_truncated_payloads_raise_corrupt_message() -> None:
    """Every codec's output cut short by one byte raises CorruptMessageError."""
    data = os.urandom(64) * 100
    for codec in CODECS:
        if codec is Compression.NONE:
            continue
        with pytest.raises(CorruptMessageError):
            decompress(codec, compress(codec, data)[:-1])


def test_unknown_codec_is_unsupported() -> None:
    """A codec id outside the enum raises UnsupportedCompressionTypeError."""
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(7, b"x")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(7, b"x")  # type: ignore[arg-type]
