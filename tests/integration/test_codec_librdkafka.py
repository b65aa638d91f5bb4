"""Batches written by librdkafka (confluent-kafka), one per codec, decode with raftka.

librdkafka only writes to a broker, so this starts a tiny fake Kafka broker on
127.0.0.1 that speaks just enough of the binary protocol: ApiVersions (v0 and v3),
Metadata v0 (one topic, one partition, led by itself) and Produce v3, whose record
batches it captures and acknowledges. The producer flushes (no sleeps: flush returns
when every message is acknowledged) and the captured bytes must decode with raftka to
exactly what was produced, CRC checked. Loopback sockets only.
"""

from __future__ import annotations

import queue
import socketserver
import struct
import threading
from collections.abc import Iterator

import pytest

from raftka.common.record import Compression, decode_batches

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "codec-test"
API_PRODUCE, API_METADATA, API_VERSIONS = 0, 3, 18
API_FETCH, API_FIND_COORDINATOR = 1, 10
# Fetch and FindCoordinator are offered but never served: librdkafka infers features
# from versions (v2 batches need Produce v3 + Fetch v4, lz4 needs FindCoordinator, zstd
# needs Produce v7 + Fetch v10). Produce stops at v7, the last non-flexible version.
SUPPORTED = [
    (API_PRODUCE, 3, 7),
    (API_FETCH, 4, 10),
    (API_METADATA, 0, 0),
    (API_FIND_COORDINATOR, 0, 0),
    (API_VERSIONS, 0, 3),
]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes:
        n = self.take(">i")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _api_versions(version: int) -> bytes:
    if version >= 3:  # flexible: compact array (length + 1), tagged fields
        body = struct.pack(">h", 0) + bytes([len(SUPPORTED) + 1])
        for key, lo, hi in SUPPORTED:
            body += struct.pack(">hhh", key, lo, hi) + b"\x00"
        return body + struct.pack(">i", 0) + b"\x00"
    body = struct.pack(">hi", 0, len(SUPPORTED))
    for key, lo, hi in SUPPORTED:
        body += struct.pack(">hhh", key, lo, hi)
    return body


def _metadata(port: int) -> bytes:
    brokers = struct.pack(">ii", 1, 1) + _string("127.0.0.1") + struct.pack(">i", port)
    partition = struct.pack(">hiii", 0, 0, 1, 1) + struct.pack(">i", 1) + struct.pack(">ii", 1, 1)
    topics = struct.pack(">i", 1) + struct.pack(">h", 0) + _string(TOPIC)
    return brokers + topics + struct.pack(">i", 1) + partition


def _produce(r: _Reader, version: int, captured: queue.Queue[bytes]) -> bytes:
    r.string()  # transactional id
    r.take(">h")  # acks
    r.take(">i")  # timeout
    topics = []
    for _ in range(r.take(">i")):
        name = r.string() or ""
        partitions = []
        for _ in range(r.take(">i")):
            index = r.take(">i")
            captured.put(r.bytes_())
            partitions.append(struct.pack(">ihqq", index, 0, 0, -1))
            if version >= 5:
                partitions.append(struct.pack(">q", 0))  # log start offset
        topics.append(_string(name) + struct.pack(">i", len(partitions)) + b"".join(partitions))
    return struct.pack(">i", len(topics)) + b"".join(topics) + struct.pack(">i", 0)


class _FakeBroker(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.captured: queue.Queue[bytes] = queue.Queue()


class _Handler(socketserver.BaseRequestHandler):
    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.request.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("client closed")
            buf += chunk
        return buf

    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _FakeBroker)
        port = server.server_address[1]
        try:
            while True:
                (size,) = struct.unpack(">i", self._read(4))
                r = _Reader(self._read(size))
                api_key, version, correlation_id = r.take(">h"), r.take(">h"), r.take(">i")
                r.string()  # client id
                if api_key == API_VERSIONS:
                    body = _api_versions(version)
                elif api_key == API_METADATA:
                    body = _metadata(port)
                elif api_key == API_PRODUCE:
                    body = _produce(r, version, server.captured)
                else:
                    return  # not offered: drop the connection
                response = struct.pack(">i", correlation_id) + body
                self.request.sendall(struct.pack(">i", len(response)) + response)
        except (ConnectionError, OSError):
            return


@pytest.fixture
def fake_broker() -> Iterator[_FakeBroker]:
    server = _FakeBroker()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("codec", list(Compression))
def test_raftka_reads_librdkafka(fake_broker: _FakeBroker, codec: Compression) -> None:
    """librdkafka's batches for ``codec`` (captured from its Produce request) decode with
    raftka: CRC valid, the codec named in the attributes, every key, value, header and
    timestamp as produced."""
    port = fake_broker.server_address[1]
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "broker.address.family": "v4",
            "compression.type": codec.name.lower(),
            "linger.ms": 50,
            "enable.idempotence": False,
            "acks": 1,
            "message.timeout.ms": 10_000,
        }
    )
    sent = []
    for i in range(300):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-" * 20).encode()
        headers = [("h", f"{i}".encode()), ("null", None)] if i % 5 == 0 else None
        producer.produce(
            TOPIC, value=value, key=key, headers=headers, timestamp=1_700_000_000_000 + i
        )
        sent.append((key, value, tuple(headers or ()), 1_700_000_000_000 + i))
    assert producer.flush(10) == 0, "librdkafka did not get every message acknowledged"

    captured = b""
    while not fake_broker.captured.empty():
        captured += fake_broker.captured.get_nowait()
    batches = list(decode_batches(captured))
    assert batches, "no record batch captured"
    assert {b.header.compression for b in batches} == {codec}
    got = [(r.key, r.value, r.headers, r.timestamp_ms) for b in batches for r in b.records]
    assert got == sent
