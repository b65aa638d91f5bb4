"""Properties of the RecordBatch v2 codec, over random records and random bytes.

Examples are capped so the whole module runs in a few seconds; hypothesis prints the
failing example (and its seed with --hypothesis-seed) so a failure replays.
"""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.common.errors import CorruptMessageError
from raftka.common.record import (
    Compression,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_batches,
    decompress,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_bytes_or_none = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3).map(tuple)
# Timestamps span negative values (Kafka's NO_TIMESTAMP is -1) and years of ms, so
# deltas are large, negative, and need multi-byte varlongs.
_records = st.lists(
    st.builds(
        Record,
        value=_bytes_or_none,
        key=_bytes_or_none,
        timestamp_ms=st.integers(min_value=-1, max_value=2**45),
        headers=_headers,
    ),
    min_size=1,
    max_size=40,
)
_batch_kwargs = st.fixed_dictionaries(
    {
        "base_offset": st.integers(min_value=0, max_value=2**62),
        "compression": st.sampled_from(list(Compression)),
        "timestamp_type": st.sampled_from(list(TimestampType)),
        "producer_id": st.integers(min_value=-1, max_value=2**63 - 1),
        "producer_epoch": st.integers(min_value=-1, max_value=2**15 - 1),
        "base_sequence": st.integers(min_value=-1, max_value=2**31 - 1),
        "partition_leader_epoch": st.integers(min_value=-1, max_value=2**31 - 1),
        "is_transactional": st.booleans(),
    }
)


@FAST
@given(records=_records, kwargs=_batch_kwargs)
def test_round_trip(records: list[Record], kwargs: dict[str, object]) -> None:
    """decode(encode(x)) gives back every record (absolute offsets; LOG_APPEND_TIME
    batches read maxTimestamp) and every header field, for every codec."""
    buf = build_batch(records, **kwargs)  # type: ignore[arg-type]
    batch = decode_batch(buf)
    h = batch.header
    base_offset = kwargs["base_offset"]
    assert isinstance(base_offset, int)
    max_ts = max(r.timestamp_ms for r in records)
    log_append = kwargs["timestamp_type"] is TimestampType.LOG_APPEND_TIME
    expected = [
        (base_offset + i, max_ts if log_append else r.timestamp_ms, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]
    assert [tuple(r) for r in batch.records] == expected
    assert (h.base_offset, h.compression, h.timestamp_type) == (
        base_offset,
        kwargs["compression"],
        kwargs["timestamp_type"],
    )
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        kwargs["producer_id"],
        kwargs["producer_epoch"],
        kwargs["base_sequence"],
    )
    assert h.partition_leader_epoch == kwargs["partition_leader_epoch"]
    assert h.is_transactional == kwargs["is_transactional"]
    assert (h.base_timestamp, h.max_timestamp) == (records[0].timestamp_ms, max_ts)
    assert h.records_count == len(records) == h.last_offset_delta + 1
    assert h.size_bytes == len(buf)


@FAST
@given(
    records=_records,
    compression=st.sampled_from(list(Compression)),
    data=st.data(),
)
def test_any_byte_change_in_crc_range_is_detected(
    records: list[Record], compression: Compression, data: st.DataObject
) -> None:
    """Changing any one byte from the attributes to the end makes decode_batch raise
    CorruptMessageError (CRC-32C catches every burst of up to 32 bits)."""
    buf = bytearray(build_batch(records, compression=compression))
    pos = data.draw(st.integers(min_value=21, max_value=len(buf) - 1), label="pos")
    flip = data.draw(st.integers(min_value=1, max_value=255), label="xor")
    buf[pos] ^= flip
    try:
        decode_batch(buf)
    except CorruptMessageError:
        return
    raise AssertionError(f"byte {pos} ^ {flip:#x} went unnoticed")


@FAST
@given(raw=st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_message(raw: bytes) -> None:
    """decode_batch and decode_batches on random bytes either decode or raise
    CorruptMessageError; nothing else escapes."""
    for check_crc in (True, False):
        with contextlib.suppress(CorruptMessageError):
            decode_batch(raw, check_crc=check_crc)
        with contextlib.suppress(CorruptMessageError):
            list(decode_batches(raw, check_crc=check_crc))


@FAST
@given(
    records=_records,
    compression=st.sampled_from(list(Compression)),
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=8
    ),
)
def test_mutated_records_raise_only_corrupt_message(
    records: list[Record], compression: Compression, edits: list[tuple[int, int]]
) -> None:
    """With the CRC check off (so the record parser and decompressors see the damage),
    a valid batch with random bytes overwritten after the header either decodes or
    raises CorruptMessageError."""
    buf = bytearray(build_batch(records, compression=compression))
    for pos, value in edits:
        buf[61 + pos % (len(buf) - 61)] = value
    with contextlib.suppress(CorruptMessageError):
        decode_batch(buf, check_crc=False)


@FAST
@given(codec=st.sampled_from(list(Compression)), raw=st.binary(max_size=300))
def test_decompress_random_bytes_raises_only_corrupt_message(
    codec: Compression, raw: bytes
) -> None:
    """decompress on random bytes, bare or behind a codec's magic header, decodes or
    raises CorruptMessageError."""
    prefixes = {
        Compression.SNAPPY: b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
        Compression.LZ4: b"\x04\x22\x4d\x18\x60\x40\x82",
        Compression.ZSTD: b"\x28\xb5\x2f\xfd",
        Compression.GZIP: b"\x1f\x8b\x08\x00",
    }
    for payload in (raw, prefixes.get(codec, b"") + raw):
        with contextlib.suppress(CorruptMessageError):
            decompress(codec, payload, decompressed_bytes_max=1 << 20)


@FAST
@given(
    batches=st.lists(_records, min_size=1, max_size=4),
    cut=st.integers(min_value=0),
)
def test_fetch_response_cut_anywhere_yields_whole_batches(
    batches: list[list[Record]], cut: int
) -> None:
    """Concatenated batches cut at any byte decode to exactly the batches that are
    wholly before the cut, never an error."""
    encoded = []
    offset = 0
    for records in batches:
        encoded.append(build_batch(records, base_offset=offset))
        offset += len(records)
    buf = b"".join(encoded)
    cut %= len(buf) + 1
    whole, end = 0, 0
    for e in encoded:
        if end + len(e) > cut:
            break
        whole, end = whole + 1, end + len(e)
    got = list(decode_batches(buf[:cut]))
    assert len(got) == whole
    assert [b.header.base_offset for b in got] == [
        struct.unpack_from(">q", e)[0] for e in encoded[:whole]
    ]
