"""Kafka's RecordBatch v2 (magic 2): header, records, compression, control records.

Bytes in, immutable values out; no I/O. ``build_batch`` and ``decode_batch`` are the
codec; ``decode_batches`` and ``iter_records`` walk a fetch response (a trailing partial
batch is skipped); :mod:`.header` views a batch without decoding its records.
"""

from raftka.common.record.batch import (
    DecodedBatch,
    DecodedRecord,
    Header,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
    iter_records,
)
from raftka.common.record.compression import (
    DECOMPRESSED_BYTES_MAX_DEFAULT,
    compress,
    decompress,
)
from raftka.common.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_transaction_batch,
    end_transaction_marker,
    parse_control_key,
    parse_end_transaction_marker,
)
from raftka.common.record.header import (
    HEADER_SIZE,
    BatchHeader,
    Compression,
    TimestampType,
    crc_valid,
    iter_batches,
    parse_header,
    peek_batch_size,
)

__all__ = [
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
