"""The configuration of one raftka process, read from a file with Kafka's names.

Two file formats, one set of keys:

* Kafka's ``.properties`` (``key=value`` or ``key: value`` lines, ``#``/``!`` comments,
  a trailing backslash continues a line), so a KRaft ``server.properties`` reads here.
* TOML, whose nested tables flatten to the dotted names: ``[controller.quorum]`` with
  ``voters = "..."`` is ``controller.quorum.voters``. Lists join with commas
  (``process.roles = ["controller"]`` is ``controller``).

Every key must be known: a typo is a clear error naming the key, never silently
ignored (the process would run with a default the operator did not mean). Layers that
add keys (the broker) pass them as ``extra_keys``.

A controller serves its API and the Raft peer protocol on one port, the one its
``controller.quorum.voters`` entry names; ``listeners`` may change the bind host (for
example ``CONTROLLER://0.0.0.0:9093``) but not the port.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from raftka.raft.quorum.config import QuorumConfig
from raftka.server_common.controller_config import ControllerConfig

__all__ = [
    "NODE_KEYS",
    "SNAPSHOT_BYTES_DEFAULT",
    "ConfigError",
    "NodeConfig",
    "flatten_toml",
    "load_node_config",
    "parse_properties",
    "parse_voters",
    "read_config_file",
]

# Kafka's metadata.log.max.record.bytes.between.snapshots default (20 MiB).
SNAPSHOT_BYTES_DEFAULT: Final = 20 * 1024 * 1024
# A bound on a config file, so a wrong path (a log file, say) fails fast.
CONFIG_FILE_BYTES_MAX: Final = 1024 * 1024
VOTERS_MAX: Final = 255

EngineName = Literal["native", "pysyncobj"]
_ROLES: Final = frozenset({"controller", "broker"})

# Every key this layer understands. controller.quorum.* timeouts come from QuorumConfig.
NODE_KEYS: Final[frozenset[str]] = frozenset(
    {
        "node.id",
        "process.roles",
        "controller.quorum.voters",
        "controller.listener.names",
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
    }
    | {"controller.quorum." + name.replace("_", ".") for name in QuorumConfig.__dataclass_fields__}
)


class ConfigError(ValueError):
    """A config file or value is wrong; the message names the key and the file."""


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
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def address_of(self, node_id: int) -> str | None:
        """``host:port`` of a controller, or None if it is not a voter."""
        voter = self.voters.get(node_id)
        return None if voter is None else f"{voter[0]}:{voter[1]}"


# ---------------------------------------------------------------------------------------
# File formats


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Kafka's .properties syntax: ``key=value`` / ``key: value`` / ``key value``.

    Comments start with ``#`` or ``!``; a line ending in an odd number of backslashes
    continues on the next. Escapes other than line continuation are not interpreted
    (Kafka configs do not need them). A key given twice is an error.
    """
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + (lines[i].strip() if i < len(lines) else "")
            i += 1
        if not line or line[0] in "#!":
            continue
        cut = len(line)
        for sep in ("=", ":", " ", "\t"):
            at = line.find(sep)
            if at != -1 and at < cut:
                cut = at
        key = line[:cut].strip()
        value = line[cut + 1 :].strip() if cut < len(line) else ""
        if value[:1] in ("=", ":") and line[cut] in " \t":
            value = value[1:].strip()
        if not key:
            raise ConfigError(f"{source}:{start}: a line with no key: {lines[start - 1]!r}")
        if key in out:
            raise ConfigError(f"{source}:{start}: {key} is set twice")
        out[key] = value
    return out


def _toml_value(value: object, key: str, source: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list):
        return ",".join(_toml_value(v, key, source) for v in value)
    raise ConfigError(f"{source}: {key} has a value of unsupported type {type(value).__name__}")


def flatten_toml(data: Mapping[str, object], *, source: str = "<toml>") -> dict[str, str]:
    """Nested TOML tables as Kafka's dotted keys, every value as its string form."""
    out: dict[str, str] = {}

    def walk(table: Mapping[str, object], prefix: str) -> None:
        for name, value in table.items():
            key = prefix + name
            if isinstance(value, dict):
                walk(value, key + ".")
            else:
                if key in out:
                    raise ConfigError(f"{source}: {key} is set twice")
                out[key] = _toml_value(value, key, source)

    walk(data, "")
    return out


def read_config_file(path: Path) -> dict[str, str]:
    """The properties of a .properties or .toml config file, with Kafka's dotted names."""
    source = str(path)
    try:
        with path.open("rb") as f:
            raw = f.read(CONFIG_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise ConfigError(f"cannot read config file {source}: {e.strerror}") from None
    if len(raw) > CONFIG_FILE_BYTES_MAX:
        raise ConfigError(f"{source}: larger than {CONFIG_FILE_BYTES_MAX} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    if path.suffix.lower() == ".toml":
        try:
            return flatten_toml(tomllib.loads(text), source=source)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: invalid TOML: {e}") from None
    return parse_properties(text, source=source)


# ---------------------------------------------------------------------------------------
# Values


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(f"{what}: expected host:port, got {text!r}")
    port = int(port_text)
    if not 0 < port <= 65535:
        raise ConfigError(f"{what}: port {port} is outside 1..65535")
    return host, port


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters``: ``1@host:port,2@host:port,...`` (ids unique, >= 0)."""
    voters: dict[int, tuple[str, int]] = {}
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ConfigError("controller.quorum.voters: no voters given")
    if len(entries) > VOTERS_MAX:
        raise ConfigError(f"controller.quorum.voters: more than {VOTERS_MAX} voters")
    for entry in entries:
        node, at, address = entry.partition("@")
        if not at or not node.strip().isdigit():
            raise ConfigError(
                f"controller.quorum.voters: expected id@host:port, got {entry!r} "
                "(for example 1@127.0.0.1:9093)"
            )
        node_id = int(node)
        if node_id in voters:
            raise ConfigError(f"controller.quorum.voters: node {node_id} is listed twice")
        voters[node_id] = _host_port(address, f"controller.quorum.voters entry {entry!r}")
    addresses = list(voters.values())
    if len(set(addresses)) != len(addresses):
        raise ConfigError("controller.quorum.voters: two voters share one host:port")
    return voters


def _listener(text: str, key: str) -> tuple[str, int]:
    """The first listener of ``NAME://host:port,...`` (or a bare ``host:port``)."""
    first = text.split(",", maxsplit=1)[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, port = _host_port(first, key)
    return host, port


def _int(props: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{key} must be at least {minimum}, got {value}")
    return value


def node_config_from_properties(
    props: Mapping[str, str], *, source: str = "config", extra_keys: Collection[str] = ()
) -> NodeConfig:
    """Check and build a NodeConfig from flattened Kafka-style keys."""
    unknown = sorted(k for k in props if k not in NODE_KEYS and k not in extra_keys)
    if unknown:
        raise ConfigError(
            f"{source}: unknown config key {unknown[0]!r}"
            + (f" (and {len(unknown) - 1} more: {', '.join(unknown[1:])})" if unknown[1:] else "")
        )
    if "node.id" not in props:
        raise ConfigError(f"{source}: node.id is required")
    node_id = _int(props, "node.id", 0, 0)
    roles = tuple(r.strip() for r in props.get("process.roles", "controller").split(",") if r)
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
    if "listeners" in props:
        listen_host, listen_port = _listener(props["listeners"], "listeners")
    elif is_controller:
        listen_host, listen_port = voters[node_id]
    else:
        raise ConfigError(f"{source}: listeners is required for a broker-only process")
    if is_controller and listen_port != voters[node_id][1]:
        raise ConfigError(
            f"{source}: listeners port {listen_port} differs from this node's voter port "
            f"{voters[node_id][1]} (a controller serves its API and Raft on one port)"
        )
    if "advertised.listeners" in props:
        adv_host, adv_port = _listener(props["advertised.listeners"], "advertised.listeners")
    elif is_controller:
        adv_host, adv_port = voters[node_id]
    else:
        adv_host, adv_port = listen_host, listen_port
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
        pysyncobj_port_offset=_int(props, "quorum.pysyncobj.port.offset", 1000, 1),
        snapshot_bytes_between=_int(
            props, "metadata.log.max.record.bytes.between.snapshots", SNAPSHOT_BYTES_DEFAULT, 1
        ),
        log_level=level,
        quorum=quorum,
        controller=controller,
        properties=dict(props),
    )


def load_node_config(path: Path | str, *, extra_keys: Collection[str] = ()) -> NodeConfig:
    """Read a .properties or .toml file (by suffix) and check it; ConfigError if wrong."""
    path = Path(path)
    return node_config_from_properties(
        read_config_file(path), source=str(path), extra_keys=extra_keys
    )
