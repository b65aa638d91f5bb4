"""The configuration of one raftka node (controller, broker or both), with Kafka's names.

Theory of operation
-------------------
A node's file (``.properties`` or TOML, read by
``raftka.server_common.process_config.read_config_file``) is flattened to Kafka's
dotted keys and checked here into a :class:`NodeConfig`: ``node.id``,
``process.roles``, ``controller.quorum.voters``, the listeners, the metadata log
directory, the quorum engine, the snapshot interval, the log level, and the typed
configs of the layers below: the Raft quorum's timeouts (:class:`QuorumConfig`,
``controller.quorum.*``) and the controller's own (:class:`ControllerConfig`). Every
key must be known: a typo is a clear error naming the key, never silently ignored.
Layers that add keys (the broker) pass them as ``extra_keys`` and read them from
``properties``.

It lives in ``metadata`` because it holds the configs of ``raft`` and ``metadata``:
``server_common`` (below them) keeps only the file formats and value parsers, so the
layers keep importing downwards only.

A controller serves its API and the Raft peer protocol on one port, the one its
``controller.quorum.voters`` entry names; ``listeners`` may change the bind host (for
example ``CONTROLLER://0.0.0.0:9093``) but not the port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from raftka.server_common.controller_config import ControllerConfig
from raftka.server_common.listener_map import (
    MAP_KEY,
    apply_protocol_map,
    explain,
    listener_names,
)
from raftka.server_common.node_http import HTTPS_KEYS, PLAIN_HTTP, NodeHttp, node_http
from raftka.server_common.process_config import (
    ConfigError,
    int_property,
    parse_host_port,
    parse_voters,
    read_config_file,
)
from raftka.server_common.quorum_config import QuorumConfig

__all__ = [
    "NODE_KEYS",
    "SNAPSHOT_BYTES_DEFAULT",
    "NodeConfig",
    "load_node_config",
    "node_config_from_properties",
]

# Kafka's metadata.log.max.record.bytes.between.snapshots default (20 MiB).
SNAPSHOT_BYTES_DEFAULT: Final = 20 * 1024 * 1024

EngineName = Literal["native", "pysyncobj"]
_ROLES: Final = frozenset({"controller", "broker"})

# Every key this layer understands. controller.quorum.* timeouts come from QuorumConfig.
NODE_KEYS: Final[frozenset[str]] = frozenset(
    {
        "node.id",
        "process.roles",
        "controller.quorum.voters",
        "controller.listener.names",
        MAP_KEY,
        "listeners",
        "advertised.listeners",
        "metadata.log.dir",
        "log.dirs",
        "quorum.engine",
        "quorum.pysyncobj.password",
        "quorum.pysyncobj.port.offset",
        "metadata.log.max.record.bytes.between.snapshots",
        "log.level",
        # ControllerConfig's keys.
        "broker.session.timeout.ms",
        "num.partitions",
        "default.replication.factor",
        "unclean.leader.election.enable",
        "auto.leader.rebalance.enable",
        "leader.imbalance.check.interval.seconds",
        # The HTTPS API's node principals (server_common/node_http.py); a broker's
        # authorizer reads it too.
        "super.users",
    }
    | HTTPS_KEYS
    | {"controller.quorum." + name.replace("_", ".") for name in QuorumConfig.__dataclass_fields__}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """One process's configuration, parsed and checked.

    ``voters`` maps each controller's node id to the (host, port) peers and clients use;
    ``listen_host``/``listen_port`` is where this process binds (a controller's port is
    its voter port); ``advertised_host``/``advertised_port`` is what others are told.
    ``snapshot_bytes_between`` is Kafka's
    ``metadata.log.max.record.bytes.between.snapshots``: a snapshot is written once this
    many payload bytes were committed since the last one. ``properties`` keeps every
    flattened key as given, for layers that read more.
    """

    node_id: int
    process_roles: tuple[str, ...]
    voters: Mapping[int, tuple[str, int]]
    listen_host: str
    listen_port: int
    advertised_host: str
    advertised_port: int
    metadata_log_dir: Path
    quorum_engine: EngineName = "native"
    pysyncobj_password: str | None = None
    pysyncobj_port_offset: int = 1000
    snapshot_bytes_between: int = SNAPSHOT_BYTES_DEFAULT
    log_level: str = "INFO"
    quorum: QuorumConfig = field(default_factory=QuorumConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    #: The HTTP API's scheme, TLS contexts and node principals (HTTP unless the first
    #: listener is named HTTPS).
    http: NodeHttp = PLAIN_HTTP
    properties: Mapping[str, str] = field(default_factory=dict)
    #: Listeners renamed by listener.security.protocol.map (server_common/listener_map.py):
    #: canonical name -> the config's, for messages about ``properties``.
    renamed_listeners: Mapping[str, str] = field(default_factory=dict, compare=False)

    def explain(self, message: str) -> str:
        """A message about ``properties`` in the config's own listener names."""
        return explain(self.renamed_listeners, message)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def address_of(self, node_id: int) -> str | None:
        """``host:port`` of a controller, or None if it is not a voter."""
        voter = self.voters.get(node_id)
        return None if voter is None else f"{voter[0]}:{voter[1]}"


def _endpoint(
    props: Mapping[str, str],
    key: str,
    voter: tuple[str, int] | None,
    otherwise: tuple[str, int] | None,
    source: str,
) -> tuple[str, int]:
    """The (host, port) of ``key`` (``listeners`` or ``advertised.listeners``): as set,
    else a controller's voter address, else ``otherwise``; a broker-only process without
    ``otherwise`` must set it."""
    if key in props:
        return _listener(props[key], key)
    if voter is not None:
        return voter
    if otherwise is None:
        raise ConfigError(f"{source}: {key} is required for a broker-only process")
    return otherwise


def _listener(text: str, key: str) -> tuple[str, int]:
    """The first listener of ``NAME://host:port,...`` (or a bare ``host:port``)."""
    first = text.split(",", maxsplit=1)[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, port = parse_host_port(first, key)
    return host, port


def node_config_from_properties(
    props: Mapping[str, str], *, source: str = "config", extra_keys: Collection[str] = ()
) -> NodeConfig:
    """Check and build a NodeConfig from flattened Kafka-style keys (listeners renamed
    by listener.security.protocol.map first; errors in the config's own names)."""
    # Before the renaming, so that errors name the listeners as written.
    _check_controller_listener_names(props, source)
    try:
        renamed = apply_protocol_map(props)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    try:
        node = _node_config(renamed.props, source, extra_keys)
    except ConfigError as e:
        raise ConfigError(renamed.explain(str(e))) from None
    return dataclasses.replace(node, renamed_listeners=renamed.names)


def _roles(props: Mapping[str, str]) -> tuple[str, ...]:
    """``process.roles`` as written (checked by _node_config)."""
    return tuple(r.strip() for r in props.get("process.roles", "controller").split(",") if r)


def _check_controller_listener_names(props: Mapping[str, str], source: str) -> None:
    """Kafka's rules for ``controller.listener.names`` on a one-role process (combined
    mode reads it to split its listeners, in server_cli): a controller's listener must
    be one it names, and a broker's listeners none of them."""
    given = props.get("controller.listener.names")
    roles = _roles(props)
    if given is None or len(roles) != 1:
        return
    names = {n.strip().upper() for n in given.split(",") if n.strip()}
    ours = listener_names(props.get("listeners", "")) or ["CONTROLLER"]
    if roles == ("controller",) and ours[0] not in names:
        raise ConfigError(
            f"{source}: controller.listener.names ({given}) does not name this controller's "
            f"listener {ours[0]}"
        )
    if roles == ("broker",) and names & set(ours):
        raise ConfigError(
            f"{source}: controller.listener.names ({given}) names a listener of this broker "
            f"({sorted(names & set(ours))[0]}): a broker-only process serves no controller "
            "listener"
        )


def _node_config(props: Mapping[str, str], source: str, extra_keys: Collection[str]) -> NodeConfig:
    unknown = sorted(k for k in props if k not in NODE_KEYS and k not in extra_keys)
    if unknown:
        raise ConfigError(
            f"{source}: unknown config key {unknown[0]!r}"
            + (f" (and {len(unknown) - 1} more: {', '.join(unknown[1:])})" if unknown[1:] else "")
        )
    if "node.id" not in props:
        raise ConfigError(f"{source}: node.id is required")
    node_id = int_property(props, "node.id", 0, 0)
    roles = _roles(props)
    if not roles or any(r not in _ROLES for r in roles) or len(set(roles)) != len(roles):
        raise ConfigError(
            f"{source}: process.roles must list controller and/or broker, "
            f"got {props.get('process.roles')!r}"
        )
    if "controller.quorum.voters" not in props:
        raise ConfigError(f"{source}: controller.quorum.voters is required")
    voters = parse_voters(props["controller.quorum.voters"])
    is_controller = "controller" in roles
    if is_controller and node_id not in voters:
        raise ConfigError(
            f"{source}: node.id {node_id} is a controller but not in controller.quorum.voters "
            f"({sorted(voters)})"
        )
    voter = voters[node_id] if is_controller else None
    listen_host, listen_port = _endpoint(props, "listeners", voter, None, source)
    if is_controller and listen_port != voters[node_id][1]:
        raise ConfigError(
            f"{source}: listeners port {listen_port} differs from this node's voter port "
            f"{voters[node_id][1]} (a controller serves its API and Raft on one port)"
        )
    adv_host, adv_port = _endpoint(
        props, "advertised.listeners", voter, (listen_host, listen_port), source
    )
    log_dir = props.get("metadata.log.dir") or props.get("log.dirs", "").split(",")[0].strip()
    if not log_dir:
        raise ConfigError(f"{source}: metadata.log.dir (or log.dirs) is required")
    engine = props.get("quorum.engine", "native").strip()
    if engine not in ("native", "pysyncobj"):
        raise ConfigError(f"{source}: quorum.engine must be native or pysyncobj, got {engine!r}")
    level = props.get("log.level", "INFO").strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"{source}: log.level must be DEBUG, INFO, WARNING or ERROR")
    try:
        quorum = QuorumConfig.from_properties(
            {k: v for k, v in props.items() if k != "controller.quorum.voters"}
        )
        controller = ControllerConfig.from_properties(props)
    except (ValueError, AssertionError) as e:
        detail = str(e) or "a value is out of range"
        raise ConfigError(f"{source}: {detail}") from None
    try:
        http = node_http(props)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    if http.secure and engine == "pysyncobj":
        raise ConfigError(
            f"{source}: quorum.engine=pysyncobj: its peer port has no TLS; an HTTPS API "
            "needs quorum.engine=native"
        )
    if not http.secure and "broker" not in roles and "super.users" in props:
        # A broker's authorizer reads it; a controller only with an HTTPS API.
        raise ConfigError(f"{source}: super.users: no HTTPS API or authorizer uses it")
    return NodeConfig(
        node_id=node_id,
        process_roles=roles,
        voters=voters,
        listen_host=listen_host,
        listen_port=listen_port,
        advertised_host=adv_host,
        advertised_port=adv_port,
        metadata_log_dir=Path(log_dir),
        quorum_engine="native" if engine == "native" else "pysyncobj",
        pysyncobj_password=props.get("quorum.pysyncobj.password"),
        pysyncobj_port_offset=int_property(props, "quorum.pysyncobj.port.offset", 1000, 1),
        snapshot_bytes_between=int_property(
            props, "metadata.log.max.record.bytes.between.snapshots", SNAPSHOT_BYTES_DEFAULT, 1
        ),
        log_level=level,
        quorum=quorum,
        controller=controller,
        http=http,
        properties=dict(props),
    )


def load_node_config(path: Path | str, *, extra_keys: Collection[str] = ()) -> NodeConfig:
    """Read a .properties or .toml file (by suffix) and check it; ConfigError if wrong."""
    path = Path(path)
    return node_config_from_properties(
        read_config_file(path), source=str(path), extra_keys=extra_keys
    )
