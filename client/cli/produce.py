"""``raftka produce --topic TOPIC``: send stdin's lines as records (kafka-console-producer).

Each line (without its line break) is one record's value. With ``--key-separator SEP``
each line is ``key SEP value``, split at the first SEP. Bytes go through unchanged: no
decoding. The topic may also be given positionally (``raftka produce TOPIC``).

A line the producer cannot send (Kafka's MESSAGE_TOO_LARGE: longer than
``max_request_size``, or, uncompressed, a record whose batch alone exceeds the topic's
``max.message.bytes``; or, with ``--key-separator``, a line without it) ends the command
by default: the lines before it are delivered first, the command says how many, and
exits 1 naming the line; nothing after it is sent. With ``--ignore-errors`` such a
line is reported on stderr, skipped, and the lines after it are sent (exit 0 if they
all arrive). A record the cluster refuses after sending always makes the exit status
1, with a count and the first error.

The topic's limit is checked here, before sending, because the broker refuses a
whole batch that exceeds it, and the producer does not split a refused batch (Kafka's
does): one oversized record would take the good records batched with it down too.
For the same reason batches are capped at ``max.message.bytes`` (``batch_size``).

The records go through the blocking :class:`raftka.client.Producer` (its own loop
thread sends). Standard input is read on the main thread with ``select`` and
``os.read`` on its descriptor: no reader thread, so nothing holds the stdin lock at
interpreter shutdown (a daemon reader blocked in ``read`` made the interpreter abort
with exit 134 when the command ended early), and the wait is bounded so Ctrl-C is
noticed between lines. End of input or Ctrl-C flushes and closes the producer (every
record read is sent or reported failed) and exits 0.
"""

from __future__ import annotations

import collections
import os
import select
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Final

import click

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    ctrl_c_sets,
    error_line,
    name_options,
    one_line_errors,
    one_name,
    security_options,
)
from raftka.client.producer.accumulator import RECORD_OVERHEAD_MAX
from raftka.client.producer.producer import Producer
from raftka.client.structs import RecordMetadata, TopicDescription
from raftka.common.errors import KafkaError, MessageTooLargeError, UnknownTopicOrPartitionError
from raftka.common.record import Record
from raftka.common.record.batch import encode_records
from raftka.common.record.header import HEADER_SIZE

__all__ = ["LineSplitter", "Oversized", "lone_batch_bytes", "produce_command", "split_line"]

#: Bytes asked of stdin per read; a line may span many reads.
READ_CHUNK_BYTES: Final = 64 * 1024
#: How long one wait for input lasts before the loop looks at Ctrl-C again.
STDIN_WAIT_S: Final = 0.2
#: How long closing waits for buffered records on the way out.
CLOSE_TIMEOUT_MS: Final = 30_000
#: Skipped lines reported one by one with --ignore-errors; the rest only counted.
SKIP_REPORTS_MAX: Final = 10
#: The producer's default batch_size (Kafka's), lowered to a topic's smaller limit.
BATCH_BYTES_DEFAULT: Final = 16_384
MAX_MESSAGE_BYTES: Final = "max.message.bytes"


class BadLineError(ValueError):
    """A line that cannot become a record (no key separator)."""


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line (its line break already removed)."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise BadLineError(f"no key separator {separator!r} in line {line[:80]!r}")
    return key, value


def lone_batch_bytes(key: bytes | None, value: bytes, limit: int) -> int | None:
    """The size of an uncompressed batch holding only this record, if it is over
    ``limit`` (what a broker compares with ``max.message.bytes``); None if it fits.
    Exact (the record is encoded) only when a cheap upper bound is over the limit."""
    bound = HEADER_SIZE + RECORD_OVERHEAD_MAX + len(key or b"") + len(value)
    if bound <= limit:
        return None
    exact = HEADER_SIZE + len(encode_records([Record(value, key)], 0))
    return exact if exact > limit else None


def _describe(
    bootstrap_servers: str, topic: str, api_timeout_ms: int
) -> tuple[TopicDescription, int | None]:
    """The topic's description (an unknown topic is one immediate
    UNKNOWN_TOPIC_OR_PARTITION) and its max.message.bytes (None if not told)."""
    with command_admin(Admin, bootstrap_servers, api_timeout_ms) as admin:
        (description,) = admin.describe_topics([topic])
        try:
            configs = admin.describe_configs([topic], keys=[MAX_MESSAGE_BYTES])
        except KafkaError:
            return description, None  # the broker still enforces it, batch by batch
    entry = configs.get(topic, {}).get(MAX_MESSAGE_BYTES)
    value = None if entry is None else entry.value
    return description, int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the splitter's bound: only its length is kept."""

    size: int


class LineSplitter:
    """Bytes in, lines out (pure: no I/O). A line's break (``\\n``, and ``\\r`` before
    it) is removed. A line longer than ``line_bytes_max`` is never held: the splitter
    drops its bytes as they come and yields :class:`Oversized` with its length where
    the line would be, so memory stays bounded and the lines after it still come."""

    def __init__(self, line_bytes_max: int) -> None:
        assert line_bytes_max > 0
        self._max = line_bytes_max
        self._buffer = bytearray()
        self._oversized_bytes: int | None = None  # bytes dropped of the current line

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self._oversized_bytes is not None:
                self._oversized_bytes += len(piece)
            else:
                self._buffer += piece
                if len(self._buffer.rstrip(b"\r")) > self._max:
                    self._oversized_bytes = len(self._buffer)
                    self._buffer.clear()
            if end < 0:
                break
            out.append(self._finish())
            start = end + 1
        return out

    def end(self) -> list[bytes | Oversized]:
        """The last line, if the input did not end with a line break."""
        if self._oversized_bytes is None and not self._buffer:
            return []
        return [self._finish()]

    def _finish(self) -> bytes | Oversized:
        if self._oversized_bytes is not None:
            item: bytes | Oversized = Oversized(self._oversized_bytes)
            self._oversized_bytes = None
        else:
            item = bytes(self._buffer.rstrip(b"\r"))
        self._buffer.clear()
        return item


class _EndOfInput:
    pass


_EOF: Final = _EndOfInput()


def _chunk_reader(stream: BinaryIO) -> Callable[[float], bytes | None]:
    """A function that waits at most ``timeout_s`` for input: a chunk, ``b""`` at end
    of input, None when nothing came in time."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        # No descriptor (an in-memory stream, as click's test runner gives): a read
        # never blocks, so it can be read directly.
        return lambda _timeout_s: stream.read(READ_CHUNK_BYTES)

    def read(timeout_s: float) -> bytes | None:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            return None
        try:
            return os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:  # a non-blocking descriptor raced with another reader
            return None

    return read


class _StdinLines:
    """stdin's lines on the main thread, each wait bounded (see the module's docstring)."""

    def __init__(self, stream: BinaryIO, line_bytes_max: int) -> None:
        self._read = _chunk_reader(stream)
        self._splitter = LineSplitter(line_bytes_max)
        self._ready: collections.deque[bytes | Oversized] = collections.deque()
        self._ended = False

    def next(self, timeout_s: float) -> bytes | Oversized | _EndOfInput | None:
        """The next line, _EOF, or None if no whole line came within about timeout_s."""
        if not self._ready and not self._ended:
            chunk = self._read(timeout_s)
            if chunk == b"":
                self._ended = True
                self._ready.extend(self._splitter.end())
            elif chunk is not None:
                self._ready.extend(self._splitter.feed(chunk))
        if self._ready:
            return self._ready.popleft()
        return _EOF if self._ended else None


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


def _stdin() -> BinaryIO:
    if sys.stdin is None:  # the process was started with descriptor 0 closed
        raise OSError("standard input is closed")
    return sys.stdin.buffer


@click.command("produce")
@name_options("topic", help_text="Topic to send to (also accepted as the first argument).")
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
@click.option(
    "--ignore-errors",
    is_flag=True,
    help="Skip a line that cannot be sent (MESSAGE_TOO_LARGE, no key separator) and go "
    "on, instead of stopping there.",
)
@bootstrap_option
@api_timeout_option
def produce_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: str | None,
    key_separator: str | None,
    acks: str,
    compression_type: str,
    partition: int | None,
    linger_ms: int,
    ignore_errors: bool,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Send each line of standard input to --topic as one record."""
    topic = one_name("topic", topic_args, topic_opt)
    separator = None if key_separator is None else key_separator.encode()
    if separator == b"":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    outcome = _Outcome()
    sent = 0
    skipped = 0
    stopped_at: tuple[int, Exception] | None = None  # the line that ended the command
    with one_line_errors():
        description, topic_bytes_max = _describe(bootstrap_server, topic, api_timeout_ms)
        if partition is not None and partition >= len(description.partitions):
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has {len(description.partitions)} partitions, "
                f"no partition {partition}"
            )
        producer = Producer(
            bootstrap_servers=bootstrap_server,
            **security_options(),
            acks=acks,
            compression_type=compression_type,
            linger_ms=linger_ms,
            max_block_ms=api_timeout_ms,
            # Idempotence (Kafka's default) needs acks=all, so only then is it on.
            enable_idempotence=acks in ("all", "-1"),
            batch_size=BATCH_BYTES_DEFAULT
            if topic_bytes_max is None
            else max(1, min(BATCH_BYTES_DEFAULT, topic_bytes_max)),
        )
        request_bytes_max = producer.config.max_request_size
        # Compressed, a batch may fit where its records do not: the broker decides.
        check_bytes_max = topic_bytes_max if compression_type == "none" else None
        try:
            # A line longer than max_request_size can never be sent: it is not even held.
            lines = _StdinLines(_stdin(), request_bytes_max)
            line_number = 0
            with ctrl_c_sets() as interrupted:
                while not interrupted.is_set():
                    line = lines.next(STDIN_WAIT_S)
                    if line is None:
                        continue  # nothing yet: look at Ctrl-C again
                    if isinstance(line, _EndOfInput):
                        break
                    line_number += 1
                    try:
                        if isinstance(line, Oversized):
                            raise MessageTooLargeError(
                                f"the line is {line.size} bytes, larger than "
                                f"max_request_size={request_bytes_max}"
                            )
                        key, value = split_line(line, separator)
                        over = (
                            None
                            if check_bytes_max is None
                            else lone_batch_bytes(key, value, check_bytes_max)
                        )
                        if over is not None:
                            raise MessageTooLargeError(
                                f"the record is {over} bytes as a batch, larger than "
                                f"{MAX_MESSAGE_BYTES}={check_bytes_max} of topic {topic}"
                            )
                        producer.send(
                            topic, value, key, partition=partition, callback=outcome.callback
                        )
                    except (MessageTooLargeError, BadLineError) as e:
                        if not ignore_errors:
                            stopped_at = (line_number, e)
                            break
                        skipped += 1
                        if skipped <= SKIP_REPORTS_MAX:
                            reason = error_line(e) if isinstance(e, KafkaError) else str(e)
                            click.echo(f"Skipped line {line_number}: {reason}", err=True)
                        continue
                    sent += 1
        finally:
            # Every record read is sent (or fails) before the command ends.
            producer.close(timeout_ms=CLOSE_TIMEOUT_MS)
    if skipped > SKIP_REPORTS_MAX:
        click.echo(f"Skipped {skipped} lines in all.", err=True)
    failures = _failures(outcome, sent)
    if stopped_at is not None:
        number, error = stopped_at
        # Kafka's name first, as on every other error line.
        where = (
            f"{error.name}: line {number}: {error.message}"
            if isinstance(error, KafkaError)
            else f"line {number}: {error}"
        )
        delivered = sent - outcome.failed
        raise click.ClickException(
            "; ".join(
                [
                    where,
                    f"{_records(delivered)} before it delivered, nothing after it was sent "
                    "(--ignore-errors skips such lines)",
                    *failures,
                ]
            )
        )
    if failures:
        raise click.ClickException(failures[0])


def _failures(outcome: _Outcome, sent: int) -> list[str]:
    """The delivery failures in one phrase, or none."""
    if outcome.first_error is None:
        return []
    first = error_line(outcome.first_error)
    return [f"{outcome.failed} of {_records(sent)} failed; first: {first}"]


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"
