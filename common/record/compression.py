"""Compression codecs of Kafka's record batches: none, gzip, snappy, lz4, zstd.

Theory of operation: a v2 batch compresses the concatenated records as one payload with
the codec named in attribute bits 0-2. Every codec here goes through cramjam (Rust);
what is Kafka-specific is the framing around two of them:

* snappy: Kafka's Java client writes snappy-java's *xerial* stream: a 16-byte header
  (``0x82 'SNAPPY' 0x00``, int32 version 1, int32 minimum compatible version 1) and
  then blocks of ``[int32 big-endian compressed length][raw snappy block]``, each block
  at most 32 KiB uncompressed. We write that; on read we accept it and plain raw snappy
  too (librdkafka and older clients may write either).
* lz4: the standard LZ4 *frame* format. Kafka's Java reader decompresses each block on
  its own, so the frame must declare independent blocks; cramjam's frame compressor
  links blocks, so we write the frame ourselves around cramjam's block compressor:
  magic, FLG (version 1, independent blocks, nothing optional), BD (64 KiB blocks), the
  descriptor checksum, blocks, end mark. Reading uses cramjam's full frame decoder,
  which also takes linked blocks, checksums and content sizes.
* gzip and zstd: the standard formats, at Kafka's default levels (6 and 3). Readers
  take frames with or without a content size and concatenated gzip members.

Decompression bombs: a few hundred bytes of zstd can claim gigabytes. Every decoder
writes into an output bounded by ``decompressed_bytes_max`` and fails with
:class:`CorruptMessageError` past it. The default, 32 MiB, is 32 times Kafka's default
``max.message.bytes`` (1 MiB + 12): room for highly compressible batches (JSON at 10x
is common) while one decode can never take more than that much memory. Callers that
raise ``max.message.bytes`` should raise this too. For gzip, lz4 and zstd the bound is
an anonymous mmap of that size: the kernel hands out its pages only as the decoder
writes them, so an unused bound costs no memory and no zeroing.

Errors: garbage, truncation and oversize all raise :class:`CorruptMessageError`; an
unknown codec id raises :class:`UnsupportedCompressionTypeError`. Nothing else escapes.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import Final

import cramjam

from raftka.common.errors import CorruptMessageError, UnsupportedCompressionTypeError
from raftka.common.record.header import Compression

Buffer = bytes | bytearray | memoryview

DECOMPRESSED_BYTES_MAX_DEFAULT: Final = 32 * 1024 * 1024

GZIP_LEVEL_DEFAULT: Final = 6  # Kafka's compression.gzip.level default
ZSTD_LEVEL_DEFAULT: Final = 3  # Kafka's compression.zstd.level default

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES_MAX: Final = 32 * 1024  # snappy-java's default block size

LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
# FLG 0x60: version 01, independent blocks, no block checksum, no content size, no
# content checksum, no dictionary. BD 0x40: 64 KiB maximum block size. 0x82 is the
# descriptor checksum, (xxh32(b"\x60\x40", seed=0) >> 8) & 0xFF; a unit test checks it
# against the lz4 library.
LZ4_FRAME_HEADER: Final = LZ4_MAGIC + b"\x60\x40\x82"
LZ4_BLOCK_BYTES_MAX: Final = 64 * 1024
_LZ4_UNCOMPRESSED_BIT: Final = 0x80000000
_LZ4_END_MARK: Final = b"\x00\x00\x00\x00"

_INT32_BE = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")


def compress(codec: Compression, data: Buffer) -> bytes:
    """Compress a batch's records with ``codec`` in the framing Kafka's readers expect."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL_DEFAULT))
    if codec is Compression.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec is Compression.LZ4:
        return _lz4_frame_compress(data)
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL_DEFAULT))
    raise UnsupportedCompressionTypeError(f"compression codec {codec!r}")


def decompress(
    codec: Compression,
    data: Buffer,
    *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
) -> bytes:
    """Decompress a batch's records; CorruptMessageError on garbage or oversize output."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.SNAPPY:
        if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _snappy_xerial_decompress(data, decompressed_bytes_max)
        return _snappy_raw_decompress(data, decompressed_bytes_max)
    if codec is Compression.GZIP:
        return _bounded(cramjam.gzip.decompress_into, data, decompressed_bytes_max, "gzip")
    if codec is Compression.LZ4:
        return _bounded(cramjam.lz4.decompress_into, data, decompressed_bytes_max, "lz4")
    if codec is Compression.ZSTD:
        return _bounded(cramjam.zstd.decompress_into, data, decompressed_bytes_max, "zstd")
    raise UnsupportedCompressionTypeError(f"compression codec {codec!r}")


def _bounded(
    decompress_into: Callable[[Buffer, mmap.mmap], int],
    data: Buffer,
    decompressed_bytes_max: int,
    name: str,
) -> bytes:
    # One byte more than allowed: filling it proves the output is over the limit, and
    # cramjam fails outright when the output would not fit at all.
    out = mmap.mmap(-1, decompressed_bytes_max + 1)
    try:
        try:
            size = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            raise CorruptMessageError(
                f"{name} payload is corrupt or inflates past {decompressed_bytes_max} bytes: {exc}"
            ) from None
        if size > decompressed_bytes_max:
            raise CorruptMessageError(
                f"{name} payload inflates past {decompressed_bytes_max} bytes"
            )
        return out[:size]
    finally:
        out.close()


def _snappy_xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    # At least one block, even for no data: readers that sniff for the xerial header
    # (kafka-python's among them) want more than the 16 header bytes.
    for start in range(0, max(len(view), 1), XERIAL_BLOCK_BYTES_MAX):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES_MAX]))
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_size(block: Buffer) -> int:
    try:
        return int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(f"snappy payload is corrupt: {exc}") from None


def _snappy_raw_decompress(data: Buffer, decompressed_bytes_max: int) -> bytes:
    if not data:
        raise CorruptMessageError("snappy payload is empty")
    # Raw snappy starts with the uncompressed length: check it before allocating.
    size = _snappy_raw_size(data)
    if size > decompressed_bytes_max:
        raise CorruptMessageError(
            f"snappy payload claims {size} bytes, more than {decompressed_bytes_max}"
        )
    out = bytearray(size)
    _snappy_raw_into(data, memoryview(out), size)
    return bytes(out)


def _snappy_raw_into(block: Buffer, out: memoryview, size: int) -> None:
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(f"snappy payload is corrupt: {exc}") from None
    if written != size:
        raise CorruptMessageError(f"snappy block gave {written} bytes, its header says {size}")


def _snappy_xerial_decompress(data: Buffer, decompressed_bytes_max: int) -> bytes:
    view = memoryview(data)
    end = len(view)
    if end < len(XERIAL_HEADER):
        raise CorruptMessageError("xerial snappy header is truncated")
    # Version and minimum compatible version (bytes 8..16) are not checked: snappy-java
    # has only ever written 1 and 1, and its own reader ignores them too.
    blocks: list[tuple[memoryview, int]] = []
    total = 0
    pos = len(XERIAL_HEADER)
    while pos < end:
        if end - pos < 4:
            raise CorruptMessageError("xerial snappy block length is truncated")
        (length,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptMessageError(f"xerial snappy block of {length} bytes overruns the payload")
        block = view[pos : pos + length]
        pos += length
        size = _snappy_raw_size(block)
        total += size
        if total > decompressed_bytes_max:
            raise CorruptMessageError(
                f"snappy payload inflates past {decompressed_bytes_max} bytes"
            )
        blocks.append((block, size))
    out = bytearray(total)
    out_view = memoryview(out)
    at = 0
    for block, size in blocks:
        _snappy_raw_into(block, out_view[at : at + size], size)
        at += size
    return bytes(out)


def _lz4_frame_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [LZ4_FRAME_HEADER]
    for start in range(0, len(view), LZ4_BLOCK_BYTES_MAX):
        chunk = view[start : start + LZ4_BLOCK_BYTES_MAX]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) < len(chunk):
            parts.append(_UINT32_LE.pack(len(block)))
            parts.append(block)
        else:  # incompressible: the frame format stores it as is, flagged
            parts.append(_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)
