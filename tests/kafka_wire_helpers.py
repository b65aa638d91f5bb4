"""Raw Kafka frames over a socket, and the Kafka listener's authentication counters, for
the tests that speak to a secured listener by hand (test modules cannot import each
other)."""

from __future__ import annotations

import io
import socket
import ssl
import struct
import urllib.request
from collections.abc import Iterable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from prometheus_client.parser import text_string_to_metric_families


def kafka_request(key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    """One size-prefixed request frame (header v1, v2 for flexible versions)."""
    cls = load_request_schema(key, version)
    body = io.BytesIO()
    entity_writer(cls)(body, cls(**fields))
    header = struct.pack(">hhi", key, version, correlation_id) + b"\x00\x04test"
    if cls.__flexible__:
        header += b"\x00"  # request header v2's empty tagged fields
    frame = header + body.getvalue()
    return struct.pack(">i", len(frame)) + frame


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def read_answer(sock: socket.socket, key: int, version: int) -> Any:
    """The next response frame, decoded as ``key``'s response of ``version``."""
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    frame = read_exactly(sock, size)
    cls = load_response_schema(key, version)
    answer, _ = entity_reader(cls)(frame, 4 + (1 if cls.__flexible__ else 0))
    return answer


def closed(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection, waiting at most the socket's
    timeout: a timeout means it is still open."""
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def authentications(http_addresses: Iterable[str], listener: str, outcome: str) -> float:
    """Kafka's ``successful``/``failed-authentication-total`` of one listener, summed
    over the brokers' ``/metrics``."""
    return socket_server_counter(http_addresses, listener, f"{outcome}_authentication")


def socket_server_counter(http_addresses: Iterable[str], listener: str, counter: str) -> float:
    """One of Kafka's ``socket-server-metrics`` counters of one listener (e.g.
    ``successful_reauthentication``), summed over the brokers' ``/metrics``."""
    name = f"kafka_server_socketservermetrics_{counter}_total"
    total = 0.0
    for address in http_addresses:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            total += sum(
                s.value
                for s in family.samples
                if s.name == name and s.labels == {"listener": listener}
            )
    return total
