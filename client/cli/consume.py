"""``raftka consume --topic TOPIC``: print records to stdout (kafka-console-consumer).

The topic may also be given positionally (``raftka consume TOPIC``).

Each record is one line: its value, preceded by ``CreateTime:<ms>`` with
``--print-timestamp`` and by its key with ``--print-key`` (``null`` for none), the parts
joined by ``--key-separator`` (a tab by default, as Kafka's formatter). Bytes are
written unchanged.

Where to start: by default the consumer reads every partition from its end (new
records only); ``--from-beginning`` from each partition's log start; ``--partition P``
reads only P, and ``--offset`` (an offset, ``earliest`` or ``latest``; needs
``--partition``) starts there. ``--group G`` joins consumer group G through
``subscribe()`` instead of assigning partitions (a committed offset then wins over
``--from-beginning``, as in Kafka).

When to stop: after ``--max-messages`` records, after ``--timeout-ms`` without a
record, or at Ctrl-C; the consumer is closed each way and "Processed a total of N
messages" goes to stderr, as Kafka's tool prints. ``--timeout-ms`` counts from the
command's start and also bounds its first call (the topic's description), so a
cluster that cannot be reached ends the command with one line within about that
time, not after ``--api-timeout-ms``.
"""

from __future__ import annotations

import sys
import time
from typing import BinaryIO, Final, Literal

import click

from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    check_name,
    ctrl_c_sets,
    describe_topic,
    name_options,
    one_line_errors,
    one_name,
    security_options,
)
from raftka.client.consumer.consumer import Consumer
from raftka.client.structs import ConsumerRecord, TopicPartition
from raftka.common.errors import UnknownTopicOrPartitionError
from raftka.common.record.header import TimestampType

__all__ = ["consume_command", "format_record"]

#: One poll waits at most this long, so the idle timeout and Ctrl-C are noticed.
POLL_TIMEOUT_MS: Final = 500
_TIMESTAMP_NAMES: Final = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def format_record(
    record: ConsumerRecord, *, print_key: bool, print_timestamp: bool, separator: bytes
) -> bytes:
    """One output line (with its line break) for ``record``."""
    parts: list[bytes] = []
    if print_timestamp:
        name = _TIMESTAMP_NAMES.get(record.timestamp_type, "NoTimestampType")
        parts.append(f"{name}:{record.timestamp}".encode())
    if print_key:
        parts.append(b"null" if record.key is None else record.key)
    parts.append(b"null" if record.value is None else record.value)
    return separator.join(parts) + b"\n"


def _start_offset(value: str) -> int | Literal["earliest", "latest"]:
    if value in ("earliest", "latest"):
        return value  # type: ignore[return-value]  # narrowed by the test above
    try:
        offset = int(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an offset, earliest or latest", param_hint="--offset"
        ) from None
    if offset < 0:
        raise click.BadParameter("must be >= 0", param_hint="--offset")
    return offset


@click.command("consume")
@name_options("topic", help_text="Topic to read (also accepted as the first argument).")
@click.option("--from-beginning", is_flag=True, help="Start at the log start, not the end.")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="Read only this one.")
@click.option(
    "--offset",
    default=None,
    help="Start offset in --partition: a number, earliest or latest.",
)
@click.option("--max-messages", type=click.IntRange(min=1), default=None)
@click.option("--group", default=None, help="Consume as a member of this consumer group.")
@click.option("--print-key", is_flag=True)
@click.option("--print-timestamp", is_flag=True)
@click.option("--key-separator", default="\t", show_default="a tab")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many ms without a record (default: wait forever).",
)
@bootstrap_option
@api_timeout_option
def consume_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: str | None,
    from_beginning: bool,
    partition: int | None,
    offset: str | None,
    max_messages: int | None,
    group: str | None,
    print_key: bool,
    print_timestamp: bool,
    key_separator: str,
    timeout_ms: int | None,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Print the records of --topic to standard output, one per line."""
    started_s = time.monotonic()
    topic = one_name("topic", topic_args, topic_opt)
    if group is not None:
        check_name("group", group)
    # The topic's description is the first call: an unreachable cluster fails there,
    # so bounding it by --timeout-ms bounds the command by about that.
    describe_timeout_ms = api_timeout_ms if timeout_ms is None else min(api_timeout_ms, timeout_ms)
    start = None if offset is None else _start_offset(offset)
    if start is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if group is not None and partition is not None:
        raise click.UsageError("--group and --partition cannot be combined")
    out = sys.stdout.buffer
    count = 0
    with one_line_errors():
        description = describe_topic(
            bootstrap_servers=bootstrap_server, topic=topic, api_timeout_ms=describe_timeout_ms
        )
        count_partitions = len(description.partitions)
        if partition is not None and partition >= count_partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has {count_partitions} partitions, no partition {partition}"
            )
        consumer = Consumer(
            bootstrap_servers=bootstrap_server,
            group_id=group,
            auto_offset_reset="earliest" if from_beginning else "latest",
            default_api_timeout_ms=api_timeout_ms,
            request_timeout_ms=min(api_timeout_ms, 30_000),
            **security_options(),
        )
        try:
            if group is not None:
                consumer.subscribe([topic])
            elif partition is not None:
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                if start == "earliest":
                    consumer.seek_to_beginning(tp)
                elif start == "latest":
                    consumer.seek_to_end(tp)
                elif start is not None:
                    consumer.seek(tp, start)
            else:
                consumer.assign(TopicPartition(topic, p) for p in range(count_partitions))
            count = _run(
                consumer,
                out,
                max_messages=max_messages,
                idle_timeout_ms=timeout_ms,
                print_key=print_key,
                print_timestamp=print_timestamp,
                separator=key_separator.encode(),
                started_s=started_s,
            )
        finally:
            try:
                consumer.close()
            finally:
                out.flush()
    click.echo(f"Processed a total of {count} messages", err=True)


def _run(
    consumer: Consumer,
    out: BinaryIO,
    *,
    max_messages: int | None,
    idle_timeout_ms: int | None,
    print_key: bool,
    print_timestamp: bool,
    separator: bytes,
    started_s: float,
) -> int:
    """Poll and print until max_messages, the idle timeout (counted from ``started_s``
    until the first record) or Ctrl-C; the count."""
    count = 0
    last_record_s = started_s
    with ctrl_c_sets() as interrupted:
        while (max_messages is None or count < max_messages) and not interrupted.is_set():
            wanted = None if max_messages is None else max_messages - count
            poll_ms = POLL_TIMEOUT_MS
            if idle_timeout_ms is not None:
                left_ms = idle_timeout_ms - (time.monotonic() - last_record_s) * 1000
                poll_ms = max(0, min(poll_ms, int(left_ms)))
            batches = consumer.poll(poll_ms, max_records=wanted)
            now_s = time.monotonic()
            for records in batches.values():
                for record in records:
                    count += 1
                    out.write(
                        format_record(
                            record,
                            print_key=print_key,
                            print_timestamp=print_timestamp,
                            separator=separator,
                        )
                    )
                    last_record_s = now_s
            if batches:
                out.flush()
            elif idle_timeout_ms is not None and (now_s - last_record_s) * 1000 >= idle_timeout_ms:
                break
    return count
