"""The ``raftka`` command: a thin dispatcher over the layers.

Each subcommand lives with the layer it belongs to and is imported only when it runs,
so ``raftka produce`` never imports broker code and start-up stays fast. The table
below is the whole command surface; the help line for each is kept here so that
``raftka --help`` imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from typing import Final

import click

# name -> (module, attribute, one-line help)
_COMMANDS: Final[dict[str, tuple[str, str, str]]] = {
    "broker": (
        "raftka.broker.cli",
        "broker_command",
        "Run a broker (partition logs, replication, produce and fetch).",
    ),
    "configs": (
        "raftka.client.cli.configs",
        "configs_command",
        "Describe and alter topic and broker configs (like kafka-configs).",
    ),
    "consume": (
        "raftka.client.cli.consume",
        "consume_command",
        "Print a topic's records to stdout (like kafka-console-consumer).",
    ),
    "chaos": (
        "raftka.chaos.cli",
        "chaos_group",
        "Jepsen-style fault tests: run a workload under seeded faults, check, report.",
    ),
    "console": (
        "raftka.console.cli",
        "console_command",
        "Serve the web console: overview, topics, groups, messages, chaos reports.",
    ),
    "controller": (
        "raftka.metadata.cli",
        "controller_command",
        "Run a controller (a metadata quorum voter and the controller API).",
    ),
    "dump-log": (
        "raftka.broker.dump_log",
        "dump_log_command",
        "Print the record batches of segment files (like kafka-dump-log).",
    ),
    "groups": (
        "raftka.client.cli.groups",
        "groups_command",
        "List, describe, reset offsets of and delete consumer groups.",
    ),
    "leaders": (
        "raftka.client.cli.leaders",
        "leaders_command",
        "Elect partition leaders: preferred or unclean (like kafka-leader-election).",
    ),
    "log-dirs": (
        "raftka.client.cli.log_dirs",
        "log_dirs_command",
        "Describe the brokers' log dirs: partitions, sizes, lag (like kafka-log-dirs).",
    ),
    "metadata": (
        "raftka.metadata.cli",
        "metadata_group",
        "Read the metadata log (dump).",
    ),
    "partitions": (
        "raftka.client.cli.reassign",
        "partitions_command",
        "Move partition replicas between brokers (like kafka-reassign-partitions).",
    ),
    "perf": (
        "raftka.perf_cli",
        "perf_command",
        "Performance tools: storage (log), produce and consume (like Kafka's perf-test).",
    ),
    "records": (
        "raftka.client.cli.records",
        "records_command",
        "Delete records below an offset (like kafka-delete-records).",
    ),
    "server": (
        "raftka.server_cli",
        "server_command",
        "Run the roles process.roles names (controller and broker: combined mode).",
    ),
    "status": (
        "raftka.local.up",
        "status_command",
        "Show a cluster: every node's state, the active controller, partition leaders.",
    ),
    "topics": (
        "raftka.client.cli.topics",
        "topics_command",
        "Create, list, describe, alter and delete topics (like kafka-topics).",
    ),
    "transactions": (
        "raftka.client.cli.transactions",
        "transactions_command",
        "List, describe, abort and find hanging transactions (like kafka-transactions).",
    ),
    "up": (
        "raftka.local.up",
        "up_command",
        "Start a local cluster (3 controllers, 3 brokers) in the foreground; no config.",
    ),
    "acls": (
        "raftka.client.cli.acls",
        "acls_command",
        "Add, remove and list ACLs (like kafka-acls).",
    ),
    "users": (
        "raftka.client.cli.users",
        "users_command",
        "Add, delete and list SCRAM users (like kafka-configs --entity-type users).",
    ),
    "produce": (
        "raftka.client.cli.produce",
        "produce_command",
        "Send stdin's lines to a topic as records (like kafka-console-producer).",
    ),
    "quorum": (
        "raftka.metadata.cli",
        "quorum_group",
        "Describe the metadata quorum (like kafka-metadata-quorum).",
    ),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = _COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), (module, attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="raftka", prog_name="raftka")
def cli() -> None:
    """raftka: a KRaft-style replicated commit log in Python."""


def main() -> None:
    # No raftka command uses hypothesis, but kio (the Kafka messages' types, which a
    # broker imports) imports it whenever it is installed, as it is with the [dev]
    # extra: 0.4 s of CPU at every broker start, a third of it. A None entry in
    # sys.modules makes that import fail as if hypothesis were absent, which kio
    # handles (the import system's documented rule for None).
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    cli.main(args=sys.argv[1:], prog_name="raftka")


if __name__ == "__main__":
    main()
