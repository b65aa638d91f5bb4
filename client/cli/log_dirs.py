"""``raftka log-dirs describe``: what each broker stores in each log dir (like
kafka-log-dirs --describe).

It prints what Kafka's tool prints: two lines saying which brokers were asked and
which answered, then one JSON document, ``{"brokers": [{"broker": 1, "logDirs":
[{"logDir": ..., "error": null, "partitions": [{"partition": "t-0", "size": 123,
"offsetLag": 0, "isFuture": false}]}]}], "version": 1}`` (Kafka's field names and
layout, so scripts written against kafka-log-dirs read it). ``--broker-list`` and
``--topic-list`` are comma-separated, as Kafka's; every live broker and every topic
when left out.
"""

from __future__ import annotations

import click
import orjson

from raftka.client.admin import Admin, LogDirDescription
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    one_line_errors,
)

__all__ = ["log_dirs_command", "log_dirs_json"]

#: The version of kafka-log-dirs' output document.
LOG_DIRS_JSON_VERSION = 1


def _int_list(value: str | None, option: str) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a list of broker ids", param_hint=option
        ) from None


def log_dirs_json(
    described: dict[int, dict[str, LogDirDescription]], topics: set[str] | None
) -> dict[str, object]:
    """kafka-log-dirs' document for ``described`` (only ``topics``' partitions, when given)."""
    brokers = []
    for broker_id in sorted(described):
        dirs = []
        for log_dir, d in sorted(described[broker_id].items()):
            partitions = [
                {
                    "partition": str(tp),
                    "size": info.size,
                    "offsetLag": info.offset_lag,
                    "isFuture": info.is_future,
                }
                for tp, info in sorted(
                    d.replica_infos.items(), key=lambda kv: (kv[0].topic, kv[0].partition)
                )
                if topics is None or tp.topic in topics
            ]
            error = None if d.error is None else d.error.name
            dirs.append({"partitions": partitions, "error": error, "logDir": log_dir})
        brokers.append({"broker": broker_id, "logDirs": dirs})
    return {"brokers": brokers, "version": LOG_DIRS_JSON_VERSION}


@click.group("log-dirs")
def log_dirs_command() -> None:
    """Describe the brokers' log dirs (like kafka-log-dirs)."""


@log_dirs_command.command("describe")
@click.option("--broker-list", default=None, help="Comma-separated broker ids (default: all).")
@click.option("--topic-list", default=None, help="Comma-separated topics (default: all).")
@bootstrap_option
@api_timeout_option
def describe_command(
    *, broker_list: str | None, topic_list: str | None, bootstrap_server: str, api_timeout_ms: int
) -> None:
    """Each broker's log dirs: the partitions in each, their sizes and offset lag."""
    broker_ids = _int_list(broker_list, "--broker-list")
    topics = None if topic_list is None else {t for t in topic_list.split(",") if t.strip()}
    click.echo("Querying brokers for log directories information")
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        described = admin.describe_log_dirs(broker_ids)
    click.echo(
        "Received log directory information from brokers "
        + ",".join(str(b) for b in sorted(described))
    )
    click.echo(orjson.dumps(log_dirs_json(described, topics)).decode())
