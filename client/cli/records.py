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

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    api_timeout_option,
    bad_json_file,
    bootstrap_option,
    command_admin,
    json_file_items,
    json_file_partition,
    one_line_errors,
)
from raftka.common.structs import TopicPartition

__all__ = ["parse_offset_json", "records_command"]


def parse_offset_json(text: bytes, source: str) -> dict[TopicPartition, int]:
    """The partitions and offsets of a kafka-delete-records offset file;
    click.BadParameter (one line, naming ``source``) for anything else."""

    option = "--offset-json-file"

    def bad(why: str) -> click.BadParameter:
        return bad_json_file(option, source, why)

    out: dict[TopicPartition, int] = {}
    for i, raw in enumerate(json_file_items(text, option, source, "partitions")):
        tp, item = json_file_partition(raw, i, bad)
        offset = item.get("offset")
        if type(offset) is not int or offset < -1:
            raise bad(f"partitions[{i}].offset must be an integer >= 0, or -1")
        if tp in out:
            raise bad(f"{tp} is named twice")
        out[tp] = offset
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
