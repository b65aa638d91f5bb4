"""``raftka partitions reassign``: move partition replicas between brokers (like
kafka-reassign-partitions).

Kafka's actions and files:

- ``--generate --topics-to-move-json-file F --broker-list 101,102,103`` prints the
  current assignment of the topics in ``F`` (``{"topics": [{"topic": "t"}], "version":
  1}``) and a proposed one over the listed brokers, both as reassignment files
  (``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [101,
  102], "log_dirs": ["any", "any"]}]}``). The proposal keeps each partition's
  replication factor and spreads replicas round-robin over the brokers, each
  partition starting one broker further (Kafka starts at a random broker; a fixed
  start makes the plan repeatable).
- ``--execute --reassignment-json-file F`` prints the current assignment (save it to
  roll back) and starts the moves. With ``--wait`` (raftka's), it shows a progress bar
  until every move has completed, or ``--timeout-s`` passes.
- ``--verify --reassignment-json-file F`` says, per partition, whether its move
  completed; ``--list`` shows the moves in progress; ``--cancel --reassignment-json-file
  F`` cancels the moves of ``F`` still in progress (their partitions go back to their
  original replicas).

A move copies the log to the new replicas before the old ones leave (KIP-455, see
:mod:`raftka.metadata.reassignment`), so producers with acks=all lose nothing. Kafka's
``--throttle`` (a replication quota for the move) is not offered: raftka's replica
fetchers have no quota yet, and an option that did nothing would mislead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import click
import orjson

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    JSON_FILE_VERSION,
    api_timeout_option,
    bad_json_file,
    bootstrap_option,
    command_admin,
    error_line,
    json_file_items,
    json_file_partition,
    one_line_errors,
)
from raftka.common.errors import KafkaError
from raftka.common.structs import TopicPartition

__all__ = [
    "assignment_json",
    "parse_reassignment_json",
    "parse_topics_json",
    "partitions_command",
    "propose",
]

#: The version of kafka-reassign-partitions' files.
FILE_VERSION = JSON_FILE_VERSION
#: How often --wait asks the controller for the moves in progress.
WAIT_POLL_S = 0.5

Assignment = dict[TopicPartition, tuple[int, ...]]


def parse_topics_json(text: bytes, source: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file``."""
    option = "--topics-to-move-json-file"
    topics: list[str] = []
    for i, item in enumerate(json_file_items(text, option, source, "topics")):
        topic = item.get("topic") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not topic:
            raise bad_json_file(option, source, f"topics[{i}].topic must be a topic name")
        if topic not in topics:
            topics.append(topic)
    return topics


def parse_reassignment_json(text: bytes, source: str) -> Assignment:
    """The target replicas per partition of a ``--reassignment-json-file``."""
    option = "--reassignment-json-file"
    out: Assignment = {}

    def bad(why: str) -> click.BadParameter:
        return bad_json_file(option, source, why)

    for i, raw in enumerate(json_file_items(text, option, source, "partitions")):
        tp, item = json_file_partition(raw, i, bad)
        replicas = item.get("replicas")
        if (
            not isinstance(replicas, list)
            or not replicas
            or not all(type(r) is int and r >= 0 for r in replicas)
        ):
            raise bad(f"partitions[{i}].replicas must be broker ids")
        log_dirs = item.get("log_dirs")
        if log_dirs is not None and (
            not isinstance(log_dirs, list) or any(d != "any" for d in log_dirs)
        ):
            # raftka places a replica in a log dir itself; a named dir would be ignored.
            raise bad(f'partitions[{i}].log_dirs: only "any" is supported')
        if tp in out:
            raise bad(f"{tp} is named twice")
        out[tp] = tuple(replicas)
    return out


def assignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """A reassignment file of ``assignment`` (kafka-reassign-partitions' layout)."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(assignment[tp]),
            "log_dirs": ["any"] * len(assignment[tp]),
        }
        for tp in sorted(assignment)
    ]
    return orjson.dumps({"version": FILE_VERSION, "partitions": partitions}).decode()


def propose(current: Assignment, brokers: Sequence[int]) -> Assignment:
    """A new assignment of ``current``'s partitions over ``brokers``: the same
    replication factor each, round-robin, each partition of a topic starting one
    broker further (see the module doc)."""
    ordered = sorted(set(brokers))
    out: Assignment = {}
    for tp in sorted(current):
        rf = len(current[tp])
        if rf > len(ordered):
            raise click.UsageError(
                f"{tp} has {rf} replicas but --broker-list names {len(ordered)} broker(s)"
            )
        out[tp] = tuple(ordered[(tp.partition + j) % len(ordered)] for j in range(rf))
    return out


def _current(admin: Admin, topics: Sequence[str]) -> Assignment:
    return {
        TopicPartition(d.name, p.partition): p.replicas
        for d in admin.describe_topics(list(topics))
        for p in d.partitions
    }


def _int_list(value: str, option: str) -> list[int]:
    try:
        ids = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a list of broker ids", param_hint=option
        ) from None
    if not ids:
        raise click.BadParameter("no broker ids", param_hint=option)
    return ids


def _raise_failures(results: Mapping[TopicPartition, KafkaError | None], what: str) -> None:
    failed = {tp: e for tp, e in results.items() if e is not None}
    for tp, error in sorted(failed.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        click.echo(f"Error {what} {tp}: {error_line(error)}", err=True)
    if failed:
        raise click.ClickException(f"{len(failed)} partition(s) failed")


@click.group("partitions")
def partitions_command() -> None:
    """Move partition replicas between brokers (like kafka-reassign-partitions)."""


@partitions_command.command("reassign")
@click.option("--generate", "action", flag_value="generate", help="Propose a new assignment.")
@click.option("--execute", "action", flag_value="execute", help="Start the moves of a file.")
@click.option("--verify", "action", flag_value="verify", help="Say which moves completed.")
@click.option("--cancel", "action", flag_value="cancel", help="Cancel the moves of a file.")
@click.option("--list", "action", flag_value="list", help="The moves in progress.")
@click.option(
    "--topics-to-move-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='--generate: {"topics": [{"topic": T}], "version": 1}',
)
@click.option("--broker-list", default=None, help="--generate: the brokers to spread over.")
@click.option(
    "--reassignment-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='{"partitions": [{"topic": T, "partition": P, "replicas": [...]}], "version": 1}',
)
@click.option("--wait", is_flag=True, help="--execute: show progress until every move completed.")
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="--wait: give up after this long (the moves go on).",
)
@bootstrap_option
@api_timeout_option
def reassign_command(
    *,
    action: str | None,
    topics_to_move_json_file: Path | None,
    broker_list: str | None,
    reassignment_json_file: Path | None,
    wait: bool,
    timeout_s: float,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Generate, execute, verify, list or cancel partition moves."""
    if action is None:
        raise click.UsageError("give one action: --generate, --execute, --verify, --cancel, --list")
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        if action == "generate":
            if topics_to_move_json_file is None or broker_list is None:
                raise click.UsageError(
                    "--generate needs --topics-to-move-json-file and --broker-list"
                )
            topics = parse_topics_json(
                topics_to_move_json_file.read_bytes(), str(topics_to_move_json_file)
            )
            brokers = _int_list(broker_list, "--broker-list")
            current = _current(admin, topics)
            click.echo("Current partition replica assignment")
            click.echo(assignment_json(current))
            click.echo("")
            click.echo("Proposed partition reassignment configuration")
            click.echo(assignment_json(propose(current, brokers)))
            return
        if action == "list":
            ongoing = admin.list_partition_reassignments()
            if not ongoing:
                click.echo("No partition reassignments found.")
            for tp in sorted(ongoing):
                r = ongoing[tp]
                click.echo(
                    f"{tp}: replicas: {','.join(map(str, r.replicas))}. "
                    f"adding: {','.join(map(str, r.adding_replicas))}. "
                    f"removing: {','.join(map(str, r.removing_replicas))}."
                )
            return
        if reassignment_json_file is None:
            raise click.UsageError(f"--{action} needs --reassignment-json-file")
        target = parse_reassignment_json(
            reassignment_json_file.read_bytes(), str(reassignment_json_file)
        )
        if action == "execute":
            current = _current(admin, sorted({tp.topic for tp in target}))
            missing = [str(tp) for tp in target if tp not in current]
            if missing:
                raise click.ClickException(
                    f"UNKNOWN_TOPIC_OR_PARTITION: {', '.join(missing)} do not exist"
                )
            click.echo("Current partition replica assignment")
            click.echo("")
            click.echo(assignment_json({tp: current[tp] for tp in target}))
            click.echo("")
            click.echo("Save this to use as the --reassignment-json-file option during rollback")
            _raise_failures(admin.alter_partition_reassignments(dict(target)), "reassigning")
            click.echo(
                "Successfully started partition reassignments for "
                + ",".join(str(tp) for tp in sorted(target))
            )
            if wait:
                _wait_done(admin, target, timeout_s)
            return
        if action == "cancel":
            ongoing = admin.list_partition_reassignments(target)
            cancel = {tp: None for tp in target if tp in ongoing}
            _raise_failures(admin.alter_partition_reassignments(cancel), "cancelling")
            click.echo(
                "Successfully cancelled partition reassignments for: "
                + ",".join(str(tp) for tp in sorted(cancel))
            )
            return
        # verify
        ongoing = admin.list_partition_reassignments(target)
        current = _current(admin, sorted({tp.topic for tp in target}))
        click.echo("Status of partition reassignment:")
        failed = 0
        for tp in sorted(target):
            if tp in ongoing:
                click.echo(f"Reassignment of partition {tp} is still in progress.")
            elif current.get(tp) == target[tp]:
                click.echo(f"Reassignment of partition {tp} is completed.")
            else:
                failed += 1
                click.echo(
                    f"There is no active reassignment of partition {tp}, but its replicas "
                    f"are {list(current.get(tp, ()))}, not {list(target[tp])}."
                )
        if failed:
            raise click.ClickException(f"{failed} partition(s) are not as the file says")


def _wait_done(admin: Admin, target: Assignment, timeout_s: float) -> None:
    """A progress bar over ``target``'s moves until none is in progress."""
    deadline = time.monotonic() + timeout_s
    done = 0
    with click.progressbar(length=len(target), label="Reassigning", show_pos=True) as bar:
        while True:
            ongoing = admin.list_partition_reassignments(target)
            now_done = len(target) - len(ongoing)
            bar.update(now_done - done)
            done = now_done
            if not ongoing:
                break
            if time.monotonic() >= deadline:
                raise click.ClickException(
                    f"{len(ongoing)} move(s) still in progress after {timeout_s:g} s "
                    "(they go on; check with --verify)"
                )
            time.sleep(WAIT_POLL_S)  # the next look at the controller, not synchronisation
    click.echo("Every partition reassignment completed.")
