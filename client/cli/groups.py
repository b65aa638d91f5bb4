"""``raftka groups``: list, describe, reset and delete offsets of, and delete consumer
groups (like kafka-consumer-groups).

A group is named as kafka-consumer-groups names it (``--group G``, repeatable for
delete) or positionally (``raftka groups describe G``); an empty name is Kafka's
INVALID_GROUP_ID. ``describe`` prints the group's state, protocol and members, then one
line per partition with a committed offset or an owner: committed offset, log end
offset, lag and owner. The log end offset is the high watermark by default
(``--isolation read_uncommitted``); with ``--isolation read_committed`` it is the last
stable offset (ListOffsets with read_committed, as Kafka's tool uses when asked so), the
end a read_committed consumer can reach: use it for groups whose consumers read
committed data, else an open transaction's records count as lag they cannot consume.
``reset-offsets`` prints the plan and applies it only with ``--execute`` (Kafka's dry
run by default), and only while the group has no active members (the coordinator
refuses otherwise; the command checks first to say so in words). ``delete-offsets``
deletes the committed offsets of ``--topic T`` (every partition) or ``--topic T:0,2``
(those partitions), kafka-consumer-groups' ``--delete-offsets``: one line per partition
with its outcome, exit status 1 if any partition was refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

import click

from raftka.client._transport import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    check_name,
    command_admin,
    describe_topic,
    many_names,
    name_options,
    one_line_errors,
    one_name,
)
from raftka.client.group_admin import GroupAdmin
from raftka.common.errors import NonEmptyGroupError
from raftka.common.structs import OffsetAndMetadata, TopicPartition

__all__ = ["groups_command"]

#: Group states in which offsets may be reset from outside (no active member).
_INACTIVE_STATES = frozenset({"Empty", "Dead"})

#: ``--isolation`` values and Kafka's isolation level numbers.
_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


@contextlib.contextmanager
def _admin(bootstrap_server: str, api_timeout_ms: int) -> Iterator[GroupAdmin]:
    admin = command_admin(GroupAdmin, bootstrap_server, api_timeout_ms)
    try:
        yield admin
    finally:
        admin.close()


@click.group("groups")
def groups_command() -> None:
    """List, describe, reset offsets of and delete consumer groups."""


@groups_command.command("list")
@bootstrap_option
@api_timeout_option
def list_command(bootstrap_server: str, api_timeout_ms: int) -> None:
    """Every group, with its state. A live broker that does not answer in time costs
    only its groups: a warning on stderr names it (as Kafka's AdminClient lists from
    the brokers that answer)."""
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        result = admin.list_groups_result()
        for broker_id, error in sorted(result.errors.items()):
            click.echo(
                f"warning: broker {broker_id} did not answer, its groups are not listed: {error}",
                err=True,
            )
        for g in result.groups:
            click.echo(f"{g.group_id}\t{g.state}\t{g.protocol_type or '-'}")


@groups_command.command("describe")
@name_options("group")
@click.option(
    "--isolation",
    type=click.Choice(sorted(_ISOLATION_LEVELS)),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: the log end is the last stable offset (for read_committed groups).",
)
@bootstrap_option
@api_timeout_option
def describe_command(
    *,
    group_args: tuple[str, ...],
    group_opt: str | None,
    isolation: str,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """State, members and per-partition offsets and lag of --group."""
    group = one_name("group", group_args, group_opt)
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        described = admin.describe_group(group)
        committed = admin.list_offsets(group)
        owners: dict[TopicPartition, str] = {}
        for m in described.members:
            for tp in m.assignment:
                owners[tp] = m.member_id
        partitions = sorted(set(committed) | set(owners))
        ends = (
            admin.partition_offsets(
                partitions, LATEST_TIMESTAMP, isolation_level=_ISOLATION_LEVELS[isolation]
            )
            if partitions
            else {}
        )
    click.echo(
        f"group {group}: state {described.state}, protocol "
        f"{described.protocol or '-'}, coordinator {described.coordinator_id}, "
        f"{len(described.members)} members"
    )
    for m in described.members:
        assigned = ",".join(str(tp) for tp in sorted(m.assignment)) or "-"
        click.echo(f"  member {m.member_id} ({m.client_id} {m.host}): {assigned}")
    end_name = "LAST-STABLE-OFFSET" if isolation == "read_committed" else "LOG-END-OFFSET"
    click.echo(f"TOPIC\tPARTITION\tCURRENT-OFFSET\t{end_name}\tLAG\tOWNER")
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        lag = "-" if current is None or end is None else str(max(end - current.offset, 0))
        click.echo(
            f"{tp.topic}\t{tp.partition}\t{'-' if current is None else current.offset}\t"
            f"{'-' if end is None else end}\t{lag}\t{owners.get(tp, '-')}"
        )


@groups_command.command("reset-offsets")
@name_options("group")
@click.option("--topic", required=True, help="The topic whose offsets to reset.")
@click.option("--to-earliest", is_flag=True, help="To the log start.")
@click.option("--to-latest", is_flag=True, help="To the log end.")
@click.option(
    "--to-datetime",
    metavar="YYYY-MM-DDTHH:MM:SS[.fff][+HH:MM]",
    help="To the first record at or after this time (local time without an offset).",
)
@click.option("--shift-by", type=int, help="Move each committed offset by N (may be < 0).")
@click.option("--execute", is_flag=True, help="Apply the plan (without it: print only).")
@bootstrap_option
@api_timeout_option
def reset_offsets_command(
    *,
    group_args: tuple[str, ...],
    group_opt: str | None,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    shift_by: int | None,
    execute: bool,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Reset --group's committed offsets of --topic (dry run unless --execute)."""
    group = one_name("group", group_args, group_opt)
    check_name("topic", topic)
    chosen = [to_earliest, to_latest, to_datetime is not None, shift_by is not None]
    if sum(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by"
        )
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        state = admin.describe_group(group).state
        if state not in _INACTIVE_STATES:
            raise NonEmptyGroupError(
                f"group {group} is {state}: offsets can be reset only while it has no "
                "active members (stop its consumers first)"
            )
        partitions = admin.topic_partitions(topic)
        earliest = admin.partition_offsets(partitions, EARLIEST_TIMESTAMP)
        latest = admin.partition_offsets(partitions, LATEST_TIMESTAMP)
        committed = admin.list_offsets(group)
        plan: dict[TopicPartition, int] = {}
        if to_earliest:
            plan = dict(earliest)
        elif to_latest:
            plan = dict(latest)
        elif to_datetime is not None:
            try:
                when = datetime.fromisoformat(to_datetime)
            except ValueError:
                raise click.BadParameter(f"{to_datetime!r} is not an ISO date-time") from None
            at = admin.partition_offsets(partitions, int(when.timestamp() * 1000))
            plan = {tp: latest[tp] if at[tp] < 0 else at[tp] for tp in partitions}
        else:
            assert shift_by is not None
            for tp in partitions:
                base = committed.get(tp)
                start = earliest[tp] if base is None else base.offset
                plan[tp] = min(max(start + shift_by, earliest[tp]), latest[tp])
        click.echo("TOPIC\tPARTITION\tNEW-OFFSET")
        for tp in sorted(plan):
            click.echo(f"{tp.topic}\t{tp.partition}\t{plan[tp]}")
        if not execute:
            click.echo("Dry run: nothing changed (add --execute to apply).")
            return
        admin.alter_offsets(group, {tp: OffsetAndMetadata(o, "", None) for tp, o in plan.items()})
    click.echo(f"Reset {len(plan)} offsets of group {group}.")


@groups_command.command("delete")
@name_options("group", multiple=True, help_text="Repeatable (also accepted as arguments).")
@bootstrap_option
@api_timeout_option
def delete_command(
    *,
    group_args: tuple[str, ...],
    group_opt: tuple[str, ...],
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Delete groups and their committed offsets (they must have no active members)."""
    groups = many_names("group", group_args, group_opt)
    if not groups:
        raise click.UsageError("give the group: --group NAME (repeatable)")
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        admin.delete_groups(groups)
    for group in groups:
        click.echo(f"Deleted group {group}.")


def _topic_partitions(
    spec: str, bootstrap_server: str, api_timeout_ms: int
) -> list[TopicPartition]:
    """``T`` (every partition of the topic, UNKNOWN_TOPIC_OR_PARTITION if there is no
    such topic) or ``T:P,...`` (those partitions, as kafka-consumer-groups' --topic)."""
    topic, sep, numbers = spec.partition(":")
    check_name("topic", topic)
    if not sep:
        description = describe_topic(
            bootstrap_servers=bootstrap_server, topic=topic, api_timeout_ms=api_timeout_ms
        )
        return [TopicPartition(topic, p.partition) for p in description.partitions]
    try:
        indexes = [int(n) for n in numbers.split(",")]
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected TOPIC or TOPIC:P,P,...") from None
    if any(i < 0 for i in indexes):
        raise click.BadParameter(f"{spec!r}: a partition is a number >= 0")
    return [TopicPartition(topic, i) for i in indexes]


@groups_command.command("delete-offsets")
@name_options("group")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,P,...]",
    help="Repeatable: a topic (every partition) or some of its partitions.",
)
@bootstrap_option
@api_timeout_option
def delete_offsets_command(
    *,
    group_args: tuple[str, ...],
    group_opt: str | None,
    topics: tuple[str, ...],
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Delete --group's committed offsets of --topic (an active consumer group keeps
    those of the topics it subscribes to: GROUP_SUBSCRIBED_TO_TOPIC)."""
    group = one_name("group", group_args, group_opt)
    with one_line_errors():
        partitions = [
            tp
            for spec in topics
            for tp in _topic_partitions(spec, bootstrap_server, api_timeout_ms)
        ]
        with _admin(bootstrap_server, api_timeout_ms) as admin:
            outcome = admin.delete_offsets(group, partitions)
    click.echo("TOPIC\tPARTITION\tSTATUS")
    for tp in sorted(outcome):
        error = outcome[tp]
        click.echo(f"{tp.topic}\t{tp.partition}\t{'Successful' if error is None else error.name}")
    failed = sum(e is not None for e in outcome.values())
    if failed:
        raise click.ClickException(f"{failed} of {len(outcome)} partitions were not deleted")
