"""``raftka server --config FILE``: one process with the roles ``process.roles`` names.

With ``process.roles = ["controller", "broker"]`` (Kafka's *combined* mode) the process
runs a controller and a broker on one event loop, each on its own listener::

    node.id=1
    process.roles=controller,broker
    listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
    controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293
    log.dirs=/var/lib/raftka/1

The controller listener is the one named by ``controller.listener.names`` (default
``CONTROLLER``); its port must be this node's voter port. The broker listener is the
first other one. A broker listener named ``HTTPS`` makes the controller's HTTPS too,
with the same ``listener.name.https.ssl.*`` settings (a cluster is HTTPS throughout).
With ``listener.security.protocol.map`` each listener takes its protocol from the map
and its own ``listener.name.<name>.*`` keys, as in Kafka; the controller listener and
the broker's HTTP API must then both be SSL or both PLAINTEXT.
The broker reaches the quorum over HTTP(S) exactly as a separate broker process would
(its own controller is one of ``controller.quorum.voters``): one code path, and the
controller API stays the only way in. ``metadata.log.dir`` defaults to
``<first log dir>/__cluster_metadata``, a name the broker never takes for a partition
directory (those are ``<topic>-<partition>``).

SIGTERM or SIGINT stops the broker first (controlled shutdown, while this process's
controller still votes) and then the controller. A process with one role runs that
role as ``raftka controller`` / ``raftka broker`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import click

from raftka.broker.config import BROKER_KEYS, BrokerConfig, broker_config
from raftka.server_common.cli import CommandError, config_file_option
from raftka.server_common.listener_map import (
    MAP_KEY,
    listener_names,
    parse_protocol_map,
    without_listeners,
)
from raftka.server_common.node_config import NodeConfig, node_config_from_properties
from raftka.server_common.node_http import HTTPS_LISTENER, api_listener_name
from raftka.server_common.process_config import ConfigError, read_config_file

__all__ = ["combined_configs", "server_command", "split_listeners"]

CONFIG_FILE_BYTES_MAX: Final = 1024 * 1024
METADATA_DIR_NAME: Final = "__cluster_metadata"


def split_listeners(
    listeners: str, controller_names: str = "CONTROLLER"
) -> tuple[str | None, str | None]:
    """(controller listener, broker listeners) of a ``NAME://host:port,...`` list: the
    broker keeps every other entry in order (its HTTP API first, then a Kafka listener,
    see raftka.broker.config)."""
    names = {n.strip().upper() for n in controller_names.split(",") if n.strip()}
    controller: str | None = None
    broker: list[str] = []
    for entry in (e.strip() for e in listeners.split(",") if e.strip()):
        name = entry.split("://", 1)[0].upper() if "://" in entry else ""
        if name in names:
            controller = controller or entry
        else:
            broker.append(entry)
    return controller, ",".join(broker) or None


def combined_configs(
    props: Mapping[str, str], *, source: str = "config"
) -> tuple[NodeConfig | None, BrokerConfig | None]:
    """The controller's and the broker's configs from one file's keys (None for a role
    the process does not have). ConfigError names what is wrong."""
    roles = {r.strip() for r in props.get("process.roles", "").split(",") if r.strip()}
    if not roles or not roles <= {"controller", "broker"}:
        raise ConfigError(
            f"{source}: process.roles must list controller and/or broker, "
            f"got {props.get('process.roles')!r}"
        )
    if roles == {"controller"}:
        return node_config_from_properties(props, source=source, extra_keys=BROKER_KEYS), None
    if roles == {"broker"}:
        node = node_config_from_properties(props, source=source, extra_keys=BROKER_KEYS)
        return None, broker_config(node)
    if "listeners" not in props:
        raise ConfigError(
            f"{source}: a combined process needs listeners for both roles, for example "
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
        )
    names = props.get("controller.listener.names", "CONTROLLER")
    controller_listener, broker_listener = split_listeners(props["listeners"], names)
    if controller_listener is None or broker_listener is None:
        raise ConfigError(
            f"{source}: listeners must name a controller listener ({names}) and a broker "
            f"listener, got {props['listeners']!r}"
        )
    controller_base, broker_base = props, props
    if MAP_KEY in props:
        controller_base, broker_base = _mapped_halves(
            props, controller_listener, broker_listener, source
        )
    elif api_listener_name({"listeners": broker_listener}) == HTTPS_LISTENER:
        # The whole cluster is HTTPS or none of it (server_common/node_http.py): the
        # controller half serves its listener with the same TLS settings.
        controller_listener = f"{HTTPS_LISTENER}://{controller_listener.split('://', 1)[-1]}"
    log_dirs = [d.strip() for d in props.get("log.dirs", "").split(",") if d.strip()]
    if not log_dirs:
        raise ConfigError(f"{source}: log.dirs is required for a broker")
    metadata_dir = props.get("metadata.log.dir") or str(Path(log_dirs[0]) / METADATA_DIR_NAME)
    controller_props = {
        **controller_base,
        "listeners": controller_listener,
        "metadata.log.dir": metadata_dir,
    }
    # A controller advertises its voter address; advertised.listeners is the broker's.
    controller_props.pop("advertised.listeners", None)
    # Checked as a broker-only node: the controller's port rule is not the broker's.
    broker_props = {
        **broker_base,
        "process.roles": "broker",
        "listeners": broker_listener,
        "metadata.log.dir": metadata_dir,
    }
    advertised = props.get("advertised.listeners")
    if advertised is not None:
        _, broker_advertised = split_listeners(advertised, names)
        if broker_advertised is None:
            broker_props.pop("advertised.listeners")
        else:
            broker_props["advertised.listeners"] = broker_advertised
    controller = node_config_from_properties(
        controller_props, source=source, extra_keys=BROKER_KEYS
    )
    broker_node = node_config_from_properties(broker_props, source=source, extra_keys=BROKER_KEYS)
    if broker_node.listen_port == controller.listen_port:
        raise ConfigError(f"{source}: the broker and controller listeners share a port")
    try:
        return controller, broker_config(broker_node)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _mapped_halves(
    props: Mapping[str, str], controller_listener: str, broker_listeners: str, source: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The controller's and the broker's keys of a combined process whose listeners
    listener.security.protocol.map names: each half without the other's per-listener
    keys (each listener has its own, as in Kafka). Refused: a controller listener that
    is HTTPS while the broker's API is not, or the reverse (server_common/node_http.py:
    the nodes reach each other with one scheme)."""
    protocols = parse_protocol_map(props[MAP_KEY])
    (controller_name,) = listener_names(controller_listener)
    names = listener_names(broker_listeners)
    broker_names, api_name = set(names), names[0]
    tls = {n: protocols.get(n) == "SSL" for n in (controller_name, api_name) if n in protocols}
    if len(tls) == 2 and tls[controller_name] != tls[api_name]:
        raise ConfigError(
            f"{source}: {MAP_KEY}: the controller listener {controller_name} and the broker's "
            f"HTTP API {api_name} must both be SSL or both PLAINTEXT (one cluster, one scheme)"
        )
    return (
        without_listeners(props, broker_names - {controller_name}),
        without_listeners(props, {controller_name}),
    )


async def _serve(controller_config: NodeConfig | None, broker_cfg: BrokerConfig | None) -> int:
    # Imported here: `raftka server --help` and config errors stay fast.
    from raftka.broker.server import BrokerServer  # noqa: PLC0415
    from raftka.metadata.controller_process import ControllerServer, create_engine  # noqa: PLC0415
    from raftka.server_common.supervision import install_process_fatal  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A background task of either role that dies stops the whole process (exit 1).
    fatal = install_process_fatal()
    fatal_watch = asyncio.create_task(fatal.event.wait())
    fatal_watch.add_done_callback(lambda _: stop.set())
    controller: ControllerServer | None = None
    broker: BrokerServer | None = None
    try:
        if controller_config is not None:
            controller_config.metadata_log_dir.mkdir(parents=True, exist_ok=True)
            controller = ControllerServer(controller_config, create_engine(controller_config))
            await controller.start()
        if broker_cfg is not None:
            broker = BrokerServer(broker_cfg)
            # Registration waits for an active controller: a signal may come first.
            starting = asyncio.create_task(broker.start())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([starting, stopper], return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            else:
                stopper.cancel()
                starting.result()  # raise start-up errors
        await stop.wait()
    finally:
        fatal_watch.cancel()
        # The broker first: its controlled shutdown needs the quorum, ours included.
        if broker is not None:
            await broker.stop()
        if controller is not None:
            await controller.stop()
        fatal.cancel_watchdog()
    return 0 if fatal.reason is None else 1


@click.command("server")
@config_file_option("A .properties or .toml file; process.roles names the roles to run.")
def server_command(config_path: Path) -> None:
    """Run the roles process.roles names; both is Kafka's combined mode."""
    try:
        controller_config, broker_cfg = combined_configs(
            read_config_file(config_path), source=str(config_path)
        )
    except ConfigError as e:
        raise CommandError(str(e)) from None
    from raftka.server_common.logging_setup import configure_logging  # noqa: PLC0415

    level = (controller_config.log_level if controller_config else None) or (
        broker_cfg.log_level if broker_cfg else "INFO"
    )
    configure_logging(level)
    try:
        code = asyncio.run(_serve(controller_config, broker_cfg))
    except OSError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(1) from None
    raise SystemExit(code)
