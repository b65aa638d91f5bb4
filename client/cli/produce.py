"""``raftka produce TOPIC``: send stdin's lines as records (kafka-console-producer).

Each line (without its line break) is one record's value. With ``--key-separator SEP``
each line is ``key SEP value``, split at the first SEP; a line without SEP ends the
command with an error (as Kafka's ``parse.key=true`` does), after the lines before it
were sent. Bytes go through unchanged: no decoding.

The records go through the blocking :class:`raftka.client.Producer` (its own loop
thread sends while this thread reads stdin). End of input or Ctrl-C flushes and closes
the producer (every record read is sent or reported failed) and exits 0; any delivery
failure makes the exit status 1 with one line naming the first error.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterable
from typing import Final

import click

from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    ctrl_c_sets,
    describe_topic,
    error_line,
    one_line_errors,
)
from raftka.client.producer.producer import Producer
from raftka.client.structs import RecordMetadata
from raftka.common.errors import UnknownTopicOrPartitionError

__all__ = ["produce_command", "split_line"]

#: Bound on one input line (a record); longer lines are an error, not a silent cut.
LINE_BYTES_MAX: Final = 1024 * 1024
#: Bound on the lines read ahead of the producer.
STDIN_QUEUE_MAX: Final = 1_000
#: How often the main thread looks at Ctrl-C while no line arrives.
STDIN_WAIT_S: Final = 0.2
#: How long closing waits for buffered records on the way out.
CLOSE_TIMEOUT_MS: Final = 30_000


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line (its line break already removed)."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"no key separator {separator!r} in line {line[:80]!r}")
    return key, value


def _lines(stream: Iterable[bytes]) -> Iterable[bytes]:
    for raw in stream:
        if len(raw) > LINE_BYTES_MAX:
            raise ValueError(f"an input line is longer than {LINE_BYTES_MAX} bytes")
        yield raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw


_EOF: Final = b"\x00<end of input>"  # a sentinel compared by identity, never sent


class _StdinReader:
    """Reads lines on a daemon thread into a bounded queue, so the main thread waits
    with a timeout and notices Ctrl-C between lines (a read blocked in the kernel
    would not return for a signal handled without an exception)."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(STDIN_QUEUE_MAX)
        thread = threading.Thread(
            target=self._read, args=(stream,), name="raftka-produce-stdin", daemon=True
        )
        thread.start()

    def _read(self, stream: Iterable[bytes]) -> None:
        try:
            for line in _lines(stream):
                self._queue.put(line)
            self._queue.put(_EOF)
        except (OSError, ValueError) as e:
            self._queue.put(e)

    def next(self, timeout_s: float) -> bytes | BaseException | None:
        """The next line, _EOF, the reader's error, or None if none came in time."""
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None


class _Outcome:
    """Delivery results; the callbacks run on the producer's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failed = 0
        self.first_error: BaseException | None = None

    def callback(self, _md: RecordMetadata | None, exc: BaseException | None) -> None:
        if exc is None:
            return
        with self._lock:
            self.failed += 1
            if self.first_error is None:
                self.first_error = exc


@click.command("produce")
@click.argument("topic")
@click.option(
    "--key-separator",
    default=None,
    help="Split each line into key and value at the first occurrence of this string.",
)
@click.option(
    "--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True
)
@click.option(
    "--compression-type",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    default=None,
    help="Send every record to this partition (default: by key, else sticky).",
)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@bootstrap_option
@api_timeout_option
def produce_command(
    *,
    topic: str,
    key_separator: str | None,
    acks: str,
    compression_type: str,
    partition: int | None,
    linger_ms: int,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Send each line of standard input to TOPIC as one record."""
    separator = None if key_separator is None else key_separator.encode()
    if separator == b"":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    outcome = _Outcome()
    sent = 0
    with one_line_errors():
        description = describe_topic(
            bootstrap_servers=bootstrap_server, topic=topic, api_timeout_ms=api_timeout_ms
        )
        if partition is not None and partition >= len(description.partitions):
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has {len(description.partitions)} partitions, "
                f"no partition {partition}"
            )
        producer = Producer(
            bootstrap_servers=bootstrap_server,
            acks=acks,
            compression_type=compression_type,
            linger_ms=linger_ms,
            max_block_ms=api_timeout_ms,
            # Idempotence (Kafka's default) needs acks=all, so only then is it on.
            enable_idempotence=acks in ("all", "-1"),
        )
        try:
            lines = _StdinReader(sys.stdin.buffer)
            with ctrl_c_sets() as interrupted:
                while not interrupted.is_set():
                    line = lines.next(STDIN_WAIT_S)
                    if line is _EOF:
                        break
                    if isinstance(line, BaseException):
                        raise line
                    if line is None:
                        continue  # nothing yet: look at Ctrl-C again
                    key, value = split_line(line, separator)
                    producer.send(topic, value, key, partition=partition, callback=outcome.callback)
                    sent += 1
        finally:
            # Every record read is sent (or fails) before the command ends.
            producer.close(CLOSE_TIMEOUT_MS)
    if outcome.first_error is not None:
        raise click.ClickException(
            f"{outcome.failed} of {sent} records failed; first: {error_line(outcome.first_error)}"
        )
