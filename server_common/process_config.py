"""Process configuration files with Kafka's names: the formats and the value parsers.

Theory of operation
-------------------
Every raftka process reads one file; this module turns it into flattened Kafka-style
keys (``{"node.id": "1", "controller.quorum.voters": "...", ...}``) and parses the
values every layer shares. Two file formats, one set of keys:

* Kafka's ``.properties`` (``key=value`` or ``key: value`` lines, ``#``/``!`` comments,
  a trailing backslash continues a line), so a KRaft ``server.properties`` reads here.
* TOML, whose nested tables flatten to the dotted names: ``[controller.quorum]`` with
  ``voters = "..."`` is ``controller.quorum.voters``. Lists join with commas
  (``process.roles = ["controller"]`` is ``controller``).

Checking the keys and building the typed node configuration is
``raftka.server_common.node_config`` (it holds the Raft and controller configs, which live
above this layer); the broker adds its own keys in ``raftka.broker.config``. Errors are
:class:`ConfigError`, naming the key and the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from raftka.common import properties

__all__ = [
    "ConfigError",
    "flatten_toml",
    "int_property",
    "parse_host_port",
    "parse_properties",
    "parse_voters",
    "read_config_file",
]

# A bound on a config file, so a wrong path (a log file, say) fails fast.
CONFIG_FILE_BYTES_MAX: Final = 1024 * 1024
VOTERS_MAX: Final = 255


class ConfigError(ValueError):
    """A config file or value is wrong; the message names the key and the file."""


# ---------------------------------------------------------------------------------------
# File formats


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Kafka's .properties syntax (raftka.common.properties); ConfigError on a bad line."""
    try:
        return properties.parse_properties(text, source=source)
    except properties.PropertiesError as e:
        raise ConfigError(str(e)) from None


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


def int_property(props: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    """The integer ``props[key]`` (``default`` when the key is absent), at least
    ``minimum``; ConfigError naming the key otherwise."""
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


def parse_host_port(text: str, what: str) -> tuple[str, int]:
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
        voters[node_id] = parse_host_port(address, f"controller.quorum.voters entry {entry!r}")
    addresses = list(voters.values())
    if len(set(addresses)) != len(addresses):
        raise ConfigError("controller.quorum.voters: two voters share one host:port")
    return voters
