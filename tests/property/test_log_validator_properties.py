"""The validator's promise, under mutation: whatever bytes a producer sends, either the
validator refuses them with one of Kafka's produce errors, or every batch decodes with
the same codec a consumer uses.

How: hypothesis builds valid batches of every codec, then flips, inserts or deletes
bytes anywhere (optionally re-computing the CRC, so that corruption behind a right CRC
is tried too) and checks that contract on the result.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
)
from raftka.common.record import Compression, Record, build_batch, decode_batches
from raftka.common.record.header import CRC_OFFSET, HEADER_SIZE, compute_crc
from raftka.storage.log_validator import ValidationConfig, validate_client_batches

NOW = 1_700_000_000_000
PRODUCE_ERRORS = (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
)

record = st.builds(
    Record,
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=10)),
    st.integers(NOW - 5_000, NOW + 5_000),
    st.just(()),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    codec = draw(st.sampled_from(list(Compression)))
    batches = [
        build_batch(draw(st.lists(record, min_size=1, max_size=6)), compression=codec)
        for _ in range(draw(st.integers(1, 3)))
    ]
    buf = bytearray(b"".join(batches))
    # Most mutations land in the records sections (past the 61-byte headers), where a
    # right CRC over wrong bytes is the case the segment log cannot catch.
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "flip", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif buf:
            del buf[pos : pos + draw(st.integers(1, 8))]
    if draw(st.integers(0, 3)) > 0:
        _fix_framing(buf)
    return bytes(buf)


def _fix_framing(buf: bytearray) -> None:
    """Re-compute each batch's CRC (and, for a single batch, its length) over whatever
    the mutations left, so that only the records section is wrong."""
    pos = 0
    while pos + HEADER_SIZE <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        size = length + 12
        if size < HEADER_SIZE or pos + size > len(buf):
            if pos == 0:  # one batch: make its length cover the rest
                struct.pack_into(">i", buf, 8, len(buf) - 12)
                size = len(buf)
            else:
                return
        struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
        pos += size


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_a_mutated_request_is_refused_or_decodes(buf: bytes) -> None:
    try:
        summary = validate_client_batches(buf, now_ms=NOW, config=ValidationConfig())
    except PRODUCE_ERRORS:
        return
    decoded = list(decode_batches(buf))
    assert len(decoded) == summary.batches
    assert sum(len(b.records) for b in decoded) == summary.records
