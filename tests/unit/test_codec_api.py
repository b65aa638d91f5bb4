"""The public surface of raftka.common.record is pinned, so a change is deliberate."""

from __future__ import annotations

from raftka.common import record as records


def test_all_is_pinned_and_importable() -> None:
    """__all__ lists exactly these names and each one resolves."""
    assert sorted(records.__all__) == sorted(
        [
            "DECOMPRESSED_BYTES_MAX_DEFAULT",
            "HEADER_SIZE",
            "BatchHeader",
            "Compression",
            "ControlRecordType",
            "DecodedBatch",
            "DecodedRecord",
            "EndTransactionMarker",
            "Header",
            "Record",
            "TimestampType",
            "build_batch",
            "build_end_transaction_batch",
            "compress",
            "crc_valid",
            "decode_batch",
            "decode_batches",
            "decompress",
            "end_transaction_marker",
            "iter_batches",
            "iter_records",
            "parse_control_key",
            "parse_end_transaction_marker",
            "parse_header",
            "peek_batch_size",
        ]
    )
    for name in records.__all__:
        assert getattr(records, name) is not None
