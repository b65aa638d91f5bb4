"""Typed messages vs. the hand validators: decode and encode time per message for the
produce frame header and the fetch request, the two bodies on every data path.

*Before* is the broker's code at commit 59f4f70 (``git show 59f4f70:broker/server.py``),
reproduced below as it was: orjson into dicts, then ``_int``/``_opt_int``/``_str`` per
field (the produce header through ``common.wire.decode_frame``, which is unchanged);
on the client side, a dict built by hand and ``orjson.dumps`` / ``encode_frame``.
*After* is ``common/messages/broker.py``: msgspec decodes the JSON straight into the
frozen message classes, checking every declared bound on the way, and encodes them.
The fetch rows also time what the handler does next, converting the message's
partitions to the replica manager's ``FetchPartition`` (``after+convert``), since the
old parser produced those directly.

Each cell is the median over ``--repeats`` timings of ``--loops`` calls, in
microseconds per message. The bodies hold the partitions a consumer (1) and a busy
producer or follower (100) send. ``--quick`` is a smoke run.

    .venv/bin/python bench/messages_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from raftka.broker.replication.manager import FetchPartition
from raftka.broker.server import fetch_partitions
from raftka.common.errors import InvalidRequestError
from raftka.common.messages import broker as api
from raftka.common.messages import decode, encode
from raftka.common.wire import decode_frame, encode_frame

# ---------------------------------------------------------------------------------------
# Before: the hand validators of broker/server.py at 59f4f70, verbatim.


def _int(obj: dict[str, Any], name: str, default: int | None = None, *, where: str = "") -> int:
    value = obj.get(name, default)
    if type(value) is not int:
        raise InvalidRequestError(f"{where}{name}: expected an integer, got {value!r}")
    return value


def _opt_int(obj: dict[str, Any], name: str, *, where: str = "") -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise InvalidRequestError(f"{where}{name}: expected an integer or null, got {value!r}")
    return value


def _str(obj: dict[str, Any], name: str, *, where: str = "") -> str:
    value = obj.get(name)
    if type(value) is not str:
        raise InvalidRequestError(f"{where}{name}: expected a string, got {value!r}")
    return value


def _json_body(raw: bytes, what: str) -> dict[str, Any]:
    # The old handler's ``await request.read()`` is the argument here.
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"{what}: the body is not JSON: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("partitions"), list):
        raise InvalidRequestError(f"{what} needs a JSON object with a list 'partitions'")
    return body


def before_produce_decode(raw: bytes) -> tuple[int, int, list[tuple[str, int, bytes]]]:
    header, payloads = decode_frame(raw, "partitions")
    acks = _int(header, "acks", 1)
    timeout_ms = _int(header, "timeout_ms", 30_000)
    entries: list[tuple[str, int, bytes]] = []
    for i, (entry, payload) in enumerate(zip(header["partitions"], payloads, strict=True)):
        where = f"partitions[{i}]."
        entries.append(
            (
                _str(entry, "topic", where=where),
                _int(entry, "partition", where=where),
                bytes(payload),
            )
        )
    return acks, timeout_ms, entries


def before_fetch_decode(raw: bytes) -> tuple[dict[str, int], list[FetchPartition]]:
    body = _json_body(raw, "fetch")
    partitions: list[FetchPartition] = []
    for i, item in enumerate(body["partitions"]):
        where = f"partitions[{i}]."
        if not isinstance(item, dict):
            raise InvalidRequestError(f"partitions[{i}]: expected an object")
        partitions.append(
            FetchPartition(
                topic=_str(item, "topic", where=where),
                partition=_int(item, "partition", where=where),
                fetch_offset=_int(item, "fetch_offset", where=where),
                partition_max_bytes=_int(item, "partition_max_bytes", 1024 * 1024, where=where),
                current_leader_epoch=_opt_int(item, "current_leader_epoch", where=where),
                last_fetched_epoch=_opt_int(item, "last_fetched_epoch", where=where),
                log_start_offset=_int(item, "log_start_offset", -1, where=where),
            )
        )
    scalars = {
        "replica_id": _int(body, "replica_id", -1),
        "broker_epoch": _int(body, "broker_epoch", -1),
        "max_wait_ms": _int(body, "max_wait_ms", 0),
        "min_bytes": _int(body, "min_bytes", 1),
        "max_bytes": _int(body, "max_bytes", 50 * 1024 * 1024),
    }
    return scalars, partitions


def before_produce_encode(partitions: int, payloads: list[bytes]) -> bytes:
    # client/producer/sender.py at 59f4f70.
    header: dict[str, Any] = {
        "acks": -1,
        "timeout_ms": 30_000,
        "partitions": [{"topic": "orders", "partition": i} for i in range(partitions)],
    }
    return encode_frame(header, "partitions", payloads)


def before_fetch_encode(partitions: int) -> bytes:
    # client/consumer/fetcher.py at 59f4f70 (plus the follower's fields).
    body = {
        "replica_id": 2,
        "broker_epoch": 17,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 10 * 1024 * 1024,
        "partitions": [
            {
                "topic": "orders",
                "partition": i,
                "fetch_offset": 1_000_000 + i,
                "partition_max_bytes": 1024 * 1024,
                "current_leader_epoch": 7,
                "last_fetched_epoch": 7,
                "log_start_offset": 0,
            }
            for i in range(partitions)
        ],
    }
    return orjson.dumps(body)


# ---------------------------------------------------------------------------------------
# After: the typed messages.


def after_produce_decode(raw: bytes) -> tuple[int, int, list[tuple[str, int, bytes]]]:
    header, payloads = api.decode_frame(raw, api.ProduceRequest)
    entries = [
        (e.topic, e.partition, bytes(p)) for e, p in zip(header.partitions, payloads, strict=True)
    ]
    return header.acks, header.timeout_ms, entries


def after_fetch_decode(raw: bytes) -> api.FetchRequest:
    return decode(raw, api.FetchRequest)


def after_fetch_decode_convert(raw: bytes) -> list[FetchPartition]:
    return fetch_partitions(decode(raw, api.FetchRequest))


def after_produce_encode(partitions: int, payloads: list[bytes]) -> bytes:
    header = api.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        partitions=tuple(
            api.ProducePartition(topic="orders", partition=i, records_bytes=len(payloads[i]))
            for i in range(partitions)
        ),
    )
    return api.encode_frame(header, payloads)


def after_fetch_encode(partitions: int) -> bytes:
    return encode(
        api.FetchRequest(
            replica_id=2,
            broker_epoch=17,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=10 * 1024 * 1024,
            partitions=tuple(
                api.FetchPartition(
                    topic="orders",
                    partition=i,
                    fetch_offset=1_000_000 + i,
                    partition_max_bytes=1024 * 1024,
                    current_leader_epoch=7,
                    last_fetched_epoch=7,
                    log_start_offset=0,
                )
                for i in range(partitions)
            ),
        )
    )


# ---------------------------------------------------------------------------------------


Case = tuple[str, str, Callable[[], object], Callable[[], object]]


def _cases(partitions: int, payloads: list[bytes], produce: bytes, fetch: bytes) -> list[Case]:
    """(message, operation, before, after) for one body size."""
    return [
        (
            "produce header",
            "decode",
            lambda: before_produce_decode(produce),
            lambda: after_produce_decode(produce),
        ),
        (
            "fetch request",
            "decode",
            lambda: before_fetch_decode(fetch),
            lambda: after_fetch_decode(fetch),
        ),
        (
            "fetch request",
            "decode+convert",
            lambda: before_fetch_decode(fetch),
            lambda: after_fetch_decode_convert(fetch),
        ),
        (
            "produce header",
            "encode",
            lambda: before_produce_encode(partitions, payloads),
            lambda: after_produce_encode(partitions, payloads),
        ),
        (
            "fetch request",
            "encode",
            lambda: before_fetch_encode(partitions),
            lambda: after_fetch_encode(partitions),
        ),
    ]


def _median_us(fn: Callable[[], object], loops: int, repeats: int) -> float:
    """Median microseconds per call over ``repeats`` timings of ``loops`` calls."""
    fn()  # warm up (msgspec builds its decoder on first use)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        timings.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(timings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats, loops = (3, 200) if args.quick else (args.repeats, args.loops)

    rows: list[dict[str, Any]] = []
    for partitions in (1, 100):
        # 1 KiB of record bytes per partition: the frame slicing is timed as well.
        payloads = [bytes(1024)] * partitions
        produce = before_produce_encode(partitions, payloads)
        fetch = before_fetch_encode(partitions)
        # Both sides read the same bytes and agree on what they mean.
        assert after_produce_decode(produce) == before_produce_decode(produce)
        assert after_fetch_decode_convert(fetch) == before_fetch_decode(fetch)[1]
        assert orjson.loads(after_fetch_encode(partitions)) == orjson.loads(fetch)
        for message, op, before, after in _cases(partitions, payloads, produce, fetch):
            before_us = _median_us(before, loops, repeats)
            after_us = _median_us(after, loops, repeats)
            row = {
                "message": message,
                "op": op,
                "partitions": partitions,
                "before_us": round(before_us, 2),
                "after_us": round(after_us, 2),
                "speedup": round(before_us / after_us, 2),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)

    print()
    print(f"python {sys.version.split()[0]}; median of {repeats} x {loops} calls; µs per message")
    print(
        f"{'message':<15} {'op':<15} {'partitions':>10} {'before µs':>10} {'after µs':>10} "
        f"{'speedup':>8}"
    )
    for r in rows:
        print(
            f"{r['message']:<15} {r['op']:<15} {r['partitions']:>10} {r['before_us']:>10.2f} "
            f"{r['after_us']:>10.2f} {r['speedup']:>7.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
