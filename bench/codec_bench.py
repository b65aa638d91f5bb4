"""RecordBatch v2 codec throughput: records/s to encode and decode one batch per codec.

One batch is 1000 records with 100-byte values and 8-byte keys (semi-structured text,
so the codecs have something to compress), timestamps 1 ms apart. Each measurement is
the median of ``--repeats`` timings, each timing ``--loops`` encodes or decodes.
kafka-python's DefaultRecordBatch decodes the same bytes in the same run as a
reference (``vs_kafka_python`` is raftka's speed over kafka-python's).

Prints one JSON object per line per result, then a table. ``--quick`` runs a few
repeats for a smoke check.

    /work/venv/bin/python bench/codec_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from raftka.common.record import Compression, Record, build_batch, decode_batch

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100


def _records() -> list[Record]:
    base_ts = 1_700_000_000_000
    records = []
    for i in range(RECORDS_PER_BATCH):
        value = f'{{"user":{i % 97},"event":"click","seq":{i},"page":"/p/{i * 7919 % 10007}"'
        value = (value + " " * VALUE_BYTES)[: VALUE_BYTES - 1] + "}"
        records.append(
            Record(value=value.encode(), key=f"key-{i % 64:04d}".encode(), timestamp_ms=base_ts + i)
        )
    return records


def _median_rate(fn: Callable[[], object], loops: int, repeats: int) -> float:
    """Median records/s over ``repeats`` timings of ``loops`` calls."""
    fn()  # warm up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
        rates.append(loops * RECORDS_PER_BATCH / elapsed)
    return statistics.median(rates)


def _kafka_python_decoder(buf: bytes) -> Callable[[], object] | None:
    try:
        from kafka.record.default_records import DefaultRecordBatch
    except ImportError:
        return None

    def decode() -> object:
        return [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(bytearray(buf))]

    return decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats, for a smoke run")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--loops", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 9)
    loops = args.loops or (3 if args.quick else 10)

    records = _records()
    results = []
    for codec in Compression:
        buf = build_batch(records, compression=codec)
        assert len(decode_batch(buf).records) == RECORDS_PER_BATCH
        encode = _median_rate(lambda c=codec: build_batch(records, compression=c), loops, repeats)
        decode = _median_rate(lambda b=buf: decode_batch(b), loops, repeats)
        kp = _kafka_python_decoder(buf)
        kp_decode = _median_rate(kp, loops, repeats) if kp is not None else None
        for op, rate in (("encode", encode), ("decode", decode)):
            row: dict[str, object] = {
                "bench": "codec",
                "op": op,
                "codec": codec.name.lower(),
                "records_per_batch": RECORDS_PER_BATCH,
                "value_bytes": VALUE_BYTES,
                "batch_bytes": len(buf),
                "records_per_s": round(rate),
                "repeats": repeats,
                "loops": loops,
            }
            if op == "decode" and kp_decode is not None:
                row["kafka_python_records_per_s"] = round(kp_decode)
                row["vs_kafka_python"] = round(rate / kp_decode, 2)
            results.append(row)
            print(json.dumps(row), flush=True)

    print()
    print(
        f"{'codec':<8}{'bytes':>8}{'encode rec/s':>15}{'decode rec/s':>15}"
        f"{'kafka-python':>15}{'ratio':>8}"
    )
    for enc, dec in zip(results[::2], results[1::2], strict=True):
        kp = dec.get("kafka_python_records_per_s", "-")
        ratio = dec.get("vs_kafka_python", "-")
        print(
            f"{enc['codec']!s:<8}{enc['batch_bytes']!s:>8}{enc['records_per_s']!s:>15}"
            f"{dec['records_per_s']!s:>15}{kp!s:>15}{ratio!s:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
