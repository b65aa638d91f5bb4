"""Compression codecs of Kafka's record batches (placeholder: none only, codec helper extends)."""

from __future__ import annotations

from raftka.client.errors import UnsupportedCompressionTypeError
from raftka.client.records.header import Compression


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    raise UnsupportedCompressionTypeError(f"{codec.name.lower()} not implemented yet")


def decompress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    raise UnsupportedCompressionTypeError(f"{codec.name.lower()} not implemented yet")
