"""``raftka configs``: describe and alter topic and broker configs (like kafka-configs).

Kafka's options: ``--entity-type topics|brokers``, ``--entity-name N`` (every topic or
live broker when left out, for ``--describe``), ``--describe [--all]``, and ``--alter``
with ``--add-config 'k1=v1,k2=[a,b]'`` (a bracketed value may hold commas) and
``--delete-config k1,k2``. The output is Kafka's: ``Dynamic configs for topic orders
are:`` (or ``All configs for ...`` with ``--all``), then one line per config, ``
key=value sensitive=false synonyms={SOURCE:key=value}``; a sensitive value prints as
null.

Topics: the dynamic configs are the topic's overrides; ``--all`` adds every other
config with its effective value and where it comes from (the broker default or
Kafka's). Brokers: raftka's broker configs are static (the properties file, read at
start) except the dynamic ones of :mod:`raftka.metadata.broker_dynamic_config` (the
replication throttles, ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate``), which ``--alter`` sets for one broker
(``--entity-name ID``) or for every broker (``--entity-default``); ``--describe``
shows those, ``--all`` adds the properties it was started with (STATIC_BROKER_CONFIG).
Any other broker key is refused by the controller with INVALID_CONFIG, by name, instead
of being accepted and ignored.
"""

from __future__ import annotations

import click

from raftka.client.admin import Admin, AlterConfigOp, ConfigEntry
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    one_line_errors,
)

__all__ = ["configs_command", "format_configs", "parse_add_config"]


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' ``--add-config``: ``k1=v1,k2=[a,b]``; a bracketed value keeps its
    commas (and loses its brackets). click.BadParameter for an item without ``=``."""
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            raise click.BadParameter(f"{text[i:]!r} is not key=value", param_hint="--add-config")
        key = text[i:eq].strip()
        if not key or "," in key:
            raise click.BadParameter(
                f"{text[i:eq]!r} is not a config name", param_hint="--add-config"
            )
        if text.startswith("[", eq + 1):
            close = text.find("]", eq + 2)
            if close < 0:
                raise click.BadParameter(f"{key}: no closing ]", param_hint="--add-config")
            value, i = text[eq + 2 : close], close + 1
            if i < len(text) and text[i] != ",":
                raise click.BadParameter(f"{key}: text after ]", param_hint="--add-config")
            i += 1
        else:
            comma = text.find(",", eq + 1)
            end = len(text) if comma < 0 else comma
            value, i = text[eq + 1 : end], end + 1
        out[key] = value
    return out


def format_configs(
    kind: str, name: str, entries: dict[str, ConfigEntry], *, everything: bool
) -> list[str]:
    """kafka-configs' describe lines for one entity (``kind``: topic or broker)."""
    lines = [f"{'All' if everything else 'Dynamic'} configs for {kind} {name} are:"]
    for key in sorted(entries):
        e = entries[key]
        dynamic = e.source in ("DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG")
        if not everything and not dynamic:
            continue
        value = "null" if e.is_sensitive or e.value is None else e.value
        lines.append(
            f"  {key}={value} sensitive={str(e.is_sensitive).lower()} "
            f"synonyms={{{e.source}:{key}={value}}}"
        )
    return lines


@click.command("configs")
@click.option(
    "--entity-type",
    type=click.Choice(["topics", "brokers"]),
    required=True,
    help="topics or brokers.",
)
@click.option("--entity-name", default=None, help="The topic or broker id (describe: all).")
@click.option(
    "--entity-default", is_flag=True, help="brokers --alter: the default of every broker."
)
@click.option("--describe", "action", flag_value="describe", help="Show the configs.")
@click.option("--alter", "action", flag_value="alter", help="Set or remove configs.")
@click.option(
    "--all", "everything", is_flag=True, help="--describe: every config, not only overrides."
)
@click.option("--add-config", default=None, metavar="K=V[,K=[A,B]]")
@click.option("--delete-config", default=None, metavar="K[,K]")
@bootstrap_option
@api_timeout_option
def configs_command(
    *,
    entity_type: str,
    entity_name: str | None,
    entity_default: bool,
    action: str | None,
    everything: bool,
    add_config: str | None,
    delete_config: str | None,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Describe or alter topic and broker configs (like kafka-configs)."""
    if action is None:
        raise click.UsageError("give --describe or --alter")
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        if action == "describe":
            if add_config is not None or delete_config is not None:
                raise click.UsageError("--add-config and --delete-config go with --alter")
            if entity_type == "topics":
                names = [entity_name] if entity_name else admin.list_topics()
                described = admin.describe_configs(sorted(names))
                for name in sorted(described):
                    for line in format_configs(
                        "topic", name, described[name], everything=everything
                    ):
                        click.echo(line)
            else:
                ids = None if entity_name is None else [_broker_id(entity_name)]
                brokers = admin.describe_broker_configs(ids)
                for broker_id in sorted(brokers):
                    for line in format_configs(
                        "broker", str(broker_id), brokers[broker_id], everything=everything
                    ):
                        click.echo(line)
            return
        if entity_default and (entity_type != "brokers" or entity_name is not None):
            raise click.UsageError("--entity-default goes with --entity-type brokers alone")
        if entity_name is None and not entity_default:
            raise click.UsageError("--alter needs --entity-name")
        to_set = {} if add_config is None else parse_add_config(add_config)
        to_delete = (
            []
            if delete_config is None
            else [k.strip() for k in delete_config.split(",") if k.strip()]
        )
        if not to_set and not to_delete:
            raise click.UsageError("--alter needs --add-config or --delete-config")
        ops = [AlterConfigOp(k, v) for k, v in to_set.items()]
        ops += [AlterConfigOp(k, None, "DELETE") for k in to_delete]
        if entity_type == "brokers":
            target = None if entity_name is None else _broker_id(entity_name)
            admin.incremental_alter_broker_configs({target: ops})
            which = "default broker" if target is None else f"broker {target}"
            click.echo(f"Completed updating config for {which}.")
            return
        assert entity_name is not None
        admin.describe_topics([entity_name])  # an unknown topic: one clear error first
        admin.incremental_alter_configs({entity_name: ops})
        click.echo(f"Completed updating config for topic {entity_name}.")


def _broker_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a broker id", param_hint="--entity-name"
        ) from None
