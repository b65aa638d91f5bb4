"""``raftka records delete``: delete records below an offset (like kafka-delete-records).

Kafka's tool reads the partitions and offsets from a JSON file (``--offset-json-file``)
of the form ``{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version":
1}``; an offset of ``-1`` means the high watermark (delete everything committed). The
same file works here. Each partition's log start offset moves to its offset on every
in-sync replica (:meth:`raftka.client.Admin.delete_records`), and the command prints
what Kafka's prints: one ``partition: t-0  low_watermark: 5`` line per partition.

A file that is not that JSON is refused before anything is deleted, with one line
naming what is wrong; an offset above the high watermark is Kafka's
OFFSET_OUT_OF_RANGE, and nothing is deleted from that partition.
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    one_line_errors,
)
from raftka.common.structs import TopicPartition

__all__ = ["parse_offset_json", "records_command"]

#: The only version of kafka-delete-records' file format.
OFFSET_JSON_VERSION = 1


def parse_offset_json(text: bytes, source: str) -> dict[TopicPartition, int]:
    """The partitions and offsets of a kafka-delete-records offset file;
    click.BadParameter (one line, naming ``source``) for anything else."""

    def bad(why: str) -> click.BadParameter:
        return click.BadParameter(why, param_hint=f"--offset-json-file {source}")

    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise bad(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise bad('expected {"partitions": [{"topic": ..., "partition": ..., "offset": ...}]}')
    version = doc.get("version", OFFSET_JSON_VERSION)
    if version != OFFSET_JSON_VERSION:
        raise bad(f"unsupported version {version!r} (only {OFFSET_JSON_VERSION})")
    out: dict[TopicPartition, int] = {}
    for i, item in enumerate(doc["partitions"]):
        if not isinstance(item, dict):
            raise bad(f"partitions[{i}] is not an object")
        topic, partition, offset = item.get("topic"), item.get("partition"), item.get("offset")
        if not isinstance(topic, str) or not topic:
            raise bad(f"partitions[{i}].topic must be a topic name")
        if type(partition) is not int or partition < 0:
            raise bad(f"partitions[{i}].partition must be an integer >= 0")
        if type(offset) is not int or offset < -1:
            raise bad(f"partitions[{i}].offset must be an integer >= 0, or -1")
        tp = TopicPartition(topic, partition)
        if tp in out:
            raise bad(f"{tp} is named twice")
        out[tp] = offset
    if not out:
        raise bad("no partitions")
    return out


@click.group("records")
def records_command() -> None:
    """Delete records (like kafka-delete-records)."""


@records_command.command("delete")
@click.option(
    "--offset-json-file",
    "offset_json_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}; '
    "offset -1 is the high watermark.",
)
@bootstrap_option
@api_timeout_option
def delete_command(*, offset_json_file: Path, bootstrap_server: str, api_timeout_ms: int) -> None:
    """Delete every record below each partition's offset."""
    before = parse_offset_json(offset_json_file.read_bytes(), str(offset_json_file))
    click.echo("Executing records delete operation")
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        low_watermarks = admin.delete_records(before)
    click.echo("Records delete operation completed:")
    for tp in sorted(low_watermarks):
        click.echo(f"partition: {tp}\tlow_watermark: {low_watermarks[tp]}")
