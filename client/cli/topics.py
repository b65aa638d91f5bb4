"""``raftka topics``: create, list, describe, alter and delete topics (kafka-topics).

A thin layer over :class:`raftka.client.Admin`: each subcommand is one or two admin
calls and prints what Kafka's tool prints, in its layout (tab-separated fields): a
line ``Topic: T  TopicId: ...  PartitionCount: 3  ReplicationFactor: 3  Configs: k=v``,
then per partition ``Topic: T  Partition: 0  Leader: 101  Replicas: 101,102,103
Isr: 101,102,103``.

``Configs`` lists the topic's non-default configs, as Kafka's describe does. Its
report options print only the partitions that need an operator's look, without the
summary lines, as kafka-topics' do: ``--under-replicated-partitions`` (ISR smaller than
the replicas), ``--unavailable-partitions`` (no leader, or a leader that is not a live
broker), ``--under-min-isr-partitions`` and ``--at-min-isr-partitions`` (ISR below, or
at, the topic's ``min.insync.replicas``). ``alter``
also does what Kafka keeps in kafka-configs (``--add-config k=v``, ``--delete-config
k``), next to ``--partitions N`` (add partitions up to N).

Topics are named as kafka-topics names them (``--topic T``, repeatable for describe and
delete) or positionally (``raftka topics create T``). Errors end the command with one
line and exit status 1 (see :mod:`._common`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final, TypeVar

import click

from raftka.client.admin import Admin, AlterConfigOp, ConfigEntry
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    many_names,
    name_options,
    one_line_errors,
    one_name,
)
from raftka.client.structs import (
    BROKER_DEFAULT,
    NewPartitions,
    NewTopic,
    PartitionInfo,
    TopicDescription,
)
from raftka.common.errors import TopicAlreadyExistsError

__all__ = [
    "REPORTS",
    "format_description",
    "parse_configs",
    "reported_partition",
    "topics_command",
]

_F = TypeVar("_F", bound=Callable[..., object])

#: kafka-topics' describe report options (each takes the option's name).
REPORTS: Final = (
    "under-replicated-partitions",
    "unavailable-partitions",
    "under-min-isr-partitions",
    "at-min-isr-partitions",
)


def parse_configs(values: Sequence[str], option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; click.BadParameter naming ``option`` for a bad item.
    The value may itself contain ``=`` (only the first one splits)."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not name=value", param_hint=option)
        out[name.strip()] = value
    return out


def reported_partition(
    report: str, p: PartitionInfo, *, live_brokers: Collection[int], min_insync: int
) -> bool:
    """True if ``p`` belongs in kafka-topics' ``--<report>`` (one of :data:`REPORTS`)."""
    if report == "under-replicated-partitions":
        return len(p.isr) < len(p.replicas)
    if report == "unavailable-partitions":
        return p.leader is None or p.leader < 0 or p.leader not in live_brokers
    if report == "under-min-isr-partitions":
        return len(p.isr) < min_insync
    if report == "at-min-isr-partitions":
        return len(p.isr) == min_insync
    raise ValueError(f"unknown report {report!r}")


def format_description(
    description: TopicDescription,
    configs: dict[str, ConfigEntry] | None,
    *,
    only: Collection[int] | None = None,
) -> list[str]:
    """kafka-topics' describe lines for one topic: a summary, then one per partition;
    with ``only``, the lines of those partitions alone (a report's output)."""
    partitions = description.partitions
    rf = len(partitions[0].replicas) if partitions else 0
    shown = ",".join(
        f"{e.name}={e.value}"
        for e in sorted((configs or {}).values(), key=lambda e: e.name)
        if not e.is_default and e.value is not None
    )
    lines = (
        []
        if only is not None
        else [
            f"Topic: {description.name}\tTopicId: {description.topic_id}\t"
            f"PartitionCount: {len(partitions)}\tReplicationFactor: {rf}\tConfigs: {shown}"
        ]
    )
    for p in sorted(partitions, key=lambda p: p.partition):
        if only is not None and p.partition not in only:
            continue
        leader = "none" if p.leader is None or p.leader < 0 else str(p.leader)
        line = (
            f"\tTopic: {description.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
        )
        # Kafka 4 prints Elr always; here only when there is one, so the usual line
        # stays the one Kafka 3 users know.
        if p.elr:
            line += f"\tElr: {','.join(map(str, p.elr))}"
        lines.append(line)
    return lines


def _admin(bootstrap_server: str, api_timeout_ms: int) -> Admin:
    return command_admin(Admin, bootstrap_server, api_timeout_ms)


@click.group("topics")
def topics_command() -> None:
    """Create, list, describe, alter and delete topics (like kafka-topics)."""


@topics_command.command("create")
@name_options("topic")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Partition count (default: the cluster's num.partitions).",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Replicas per partition (default: the cluster's default.replication.factor).",
)
@click.option("--config", "configs", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("--if-not-exists", is_flag=True, help="No error if the topic exists.")
@bootstrap_option
@api_timeout_option
def create_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Create a topic."""
    topic = one_name("topic", topic_args, topic_opt)
    parsed = parse_configs(configs, "--config")
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        new = NewTopic(
            topic,
            BROKER_DEFAULT if partitions is None else partitions,
            BROKER_DEFAULT if replication_factor is None else replication_factor,
            configs=parsed,
        )
        try:
            admin.create_topics([new])
        except TopicAlreadyExistsError:
            if if_not_exists:
                return
            raise
    click.echo(f"Created topic {topic}.")


@topics_command.command("list")
@click.option("--exclude-internal/--include-internal", default=True, show_default=True)
@bootstrap_option
@api_timeout_option
def list_command(*, exclude_internal: bool, bootstrap_server: str, api_timeout_ms: int) -> None:
    """Print every topic's name, one per line."""
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        names = admin.list_topics(list_internal=not exclude_internal)
    for name in sorted(names):
        click.echo(name)


def _report_options(command: _F) -> _F:
    for report in reversed(REPORTS):
        command = click.option(
            f"--{report}",
            "reports",
            flag_value=report,
            multiple=True,
            help=f"Only the {report.replace('-', ' ')} (kafka-topics' report).",
        )(command)
    return command


@topics_command.command("describe")
@name_options("topic", multiple=True, help_text="Repeatable; every topic when none is named.")
@_report_options
@bootstrap_option
@api_timeout_option
def describe_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: tuple[str, ...],
    reports: tuple[str, ...],
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Show partitions (leader, replicas, ISR) and non-default configs."""
    topics = many_names("topic", topic_args, topic_opt)
    if len(set(reports)) > 1:
        raise click.UsageError(
            "give one report option at a time: " + ", ".join(f"--{r}" for r in sorted(set(reports)))
        )
    report = reports[0] if reports else None
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        descriptions = admin.describe_topics(topics or None)
        configs = admin.describe_configs([d.name for d in descriptions])
        live = {n.node_id for n in admin.describe_cluster().brokers} if report else set()
    for d in descriptions:
        only = None
        if report is not None:
            min_isr_entry = configs.get(d.name, {}).get("min.insync.replicas")
            min_isr = int(min_isr_entry.value or 1) if min_isr_entry is not None else 1
            only = {
                p.partition
                for p in d.partitions
                if reported_partition(report, p, live_brokers=live, min_insync=min_isr)
            }
        for line in format_description(d, configs.get(d.name), only=only):
            click.echo(line)


@topics_command.command("alter")
@name_options("topic")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="The new partition count (partitions can only be added).",
)
@click.option("--add-config", "add_configs", multiple=True, metavar="NAME=VALUE")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="NAME")
@bootstrap_option
@api_timeout_option
def alter_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: str | None,
    partitions: int | None,
    add_configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Add partitions and set or remove configs."""
    topic = one_name("topic", topic_args, topic_opt)
    to_set = parse_configs(add_configs, "--add-config")
    if partitions is None and not to_set and not delete_configs:
        raise click.UsageError(
            "nothing to alter: give --partitions, --add-config or --delete-config"
        )
    ops = [AlterConfigOp(k, v) for k, v in to_set.items()]
    ops += [AlterConfigOp(k, None, "DELETE") for k in delete_configs]
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        # Describe first: an unknown topic is one clear error before anything changes.
        admin.describe_topics([topic])
        if ops:
            admin.incremental_alter_configs({topic: ops})
            click.echo(f"Updated config for topic {topic}.")
        if partitions is not None:
            admin.create_partitions({topic: NewPartitions(partitions)})
            click.echo(f"Topic {topic} now has {partitions} partitions.")


@topics_command.command("delete")
@name_options("topic", multiple=True, help_text="Repeatable (also accepted as arguments).")
@bootstrap_option
@api_timeout_option
def delete_command(
    *,
    topic_args: tuple[str, ...],
    topic_opt: tuple[str, ...],
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Delete topics."""
    topics = many_names("topic", topic_args, topic_opt)
    if not topics:
        raise click.UsageError("give the topic: --topic NAME (repeatable)")
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        admin.delete_topics(list(topics))
    for name in topics:
        click.echo(f"Deleted topic {name}.")
