"""``raftka leaders elect``: preferred or unclean leader election (like
kafka-leader-election).

Kafka's options: ``--election-type preferred|unclean``, and the partitions as
``--topic T --partition P``, ``--path-to-json-file F`` (``{"partitions": [{"topic":
"t", "partition": 0}]}``) or ``--all-topic-partitions``. The output is Kafka's:
``Successfully completed leader election (PREFERRED) for partitions t-0, t-1``,
``Valid replica already elected for partitions t-2``, and one ``Error completing leader
election (PREFERRED) for partition: t-3: <Kafka's error name>: <why>`` line per failure;
the command then exits with status 1, saying how many could not be elected.

An unclean election may lose acknowledged records (the new leader was not in sync):
it is for a partition that has no leader and whose in-sync replicas will not return.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    api_timeout_option,
    bad_json_file,
    bootstrap_option,
    command_admin,
    error_line,
    json_file_items,
    json_file_partition,
    one_line_errors,
)
from raftka.common.errors import ElectionNotNeededError, KafkaError
from raftka.common.structs import TopicPartition

__all__ = ["format_election", "leaders_command", "parse_partitions_json"]


def parse_partitions_json(text: bytes, source: str) -> list[TopicPartition]:
    """The partitions of kafka-leader-election's ``--path-to-json-file``;
    click.BadParameter (one line) for anything else."""

    option = "--path-to-json-file"

    def bad(why: str) -> click.BadParameter:
        return bad_json_file(option, source, why)

    out: list[TopicPartition] = []
    for i, raw in enumerate(json_file_items(text, option, source, "partitions")):
        tp, _ = json_file_partition(raw, i, bad)
        if tp in out:
            raise bad(f"{tp} is named twice")
        out.append(tp)
    return out


def format_election(
    election_type: str, results: dict[TopicPartition, KafkaError | None]
) -> list[str]:
    """kafka-leader-election's report lines for ``results``."""
    kind = election_type.upper()
    ordered = sorted(results)
    elected = [str(tp) for tp in ordered if results[tp] is None]
    not_needed = [str(tp) for tp in ordered if isinstance(results[tp], ElectionNotNeededError)]
    lines = []
    if elected:
        lines.append(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}"
        )
    if not_needed:
        lines.append(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for tp in ordered:
        error = results[tp]
        if error is not None and not isinstance(error, ElectionNotNeededError):
            lines.append(
                f"Error completing leader election ({kind}) for partition: {tp}: "
                f"{error_line(error)}"
            )
    return lines


@click.group("leaders")
def leaders_command() -> None:
    """Elect partition leaders (like kafka-leader-election)."""


@leaders_command.command("elect")
@click.option(
    "--election-type",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    required=True,
    help="preferred: back to the first replica; unclean: a leaderless partition, "
    "from outside the ISR if it must (may lose records).",
)
@click.option("--topic", default=None, help="With --partition: one partition.")
@click.option("--partition", type=click.IntRange(min=0), default=None)
@click.option(
    "--path-to-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='{"partitions": [{"topic": T, "partition": P}]}',
)
@click.option("--all-topic-partitions", is_flag=True, help="Every partition.")
@bootstrap_option
@api_timeout_option
def elect_command(
    *,
    election_type: str,
    topic: str | None,
    partition: int | None,
    path_to_json_file: Path | None,
    all_topic_partitions: bool,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Run a preferred or unclean leader election."""
    ways = sum([topic is not None, path_to_json_file is not None, all_topic_partitions])
    if ways != 1 or (topic is None) != (partition is None):
        raise click.UsageError(
            "name the partitions one way: --topic T --partition P, --path-to-json-file F "
            "or --all-topic-partitions"
        )
    partitions: list[TopicPartition] | None = None
    if topic is not None and partition is not None:
        partitions = [TopicPartition(topic, partition)]
    elif path_to_json_file is not None:
        partitions = parse_partitions_json(path_to_json_file.read_bytes(), str(path_to_json_file))
    kind: Literal["preferred", "unclean"] = (
        "preferred" if election_type.lower() == "preferred" else "unclean"
    )
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        results = admin.elect_leaders(kind, partitions)
    for line in format_election(kind, results):
        click.echo(line)
    failed = sum(
        1 for e in results.values() if e is not None and not isinstance(e, ElectionNotNeededError)
    )
    if failed:
        raise click.ClickException(f"{failed} replica(s) could not be elected")
