"""Kafka's ``listener.security.protocol.map``: listeners named freely, their security
protocols given by the map.

Theory of operation
-------------------
Without the map a listener's name is its security protocol (Kafka's default map:
``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``), and raftka's first listener,
its HTTP API, is HTTPS when named ``HTTPS`` (server_common/node_http.py). With the map,
Kafka's form works as well::

    listeners=INTERNAL://10.0.0.1:8080,EXTERNAL://10.0.0.1:9092
    listener.security.protocol.map=INTERNAL:SSL,EXTERNAL:SASL_SSL
    listener.name.internal.ssl.certfile=...
    listener.name.external.sasl.enabled.mechanisms=SCRAM-SHA-512

:func:`apply_protocol_map` rewrites such a config, once, into the names the rest of the
configuration code reads: the first listener becomes ``HTTPS`` (mapped to SSL) or
``HTTP`` (PLAINTEXT), a Kafka listener takes its protocol's name, and the
``listener.name.<listener>.`` keys, ``inter.broker.listener.name`` and
``controller.listener.names`` follow. So there is one set of checks, not a second one
keyed by custom names. Errors found later name the canonical keys; :meth:`Renamed.explain`
puts the user's names back into their messages.

Refused by name: a protocol other than Kafka's four; a listener the map does not name
(Kafka's rule); SASL for the HTTP API (it authenticates by certificate); a
``listener.name.`` key naming no listener of this node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from raftka.server_common.process_config import ConfigError

__all__ = [
    "MAP_KEY",
    "Renamed",
    "apply_protocol_map",
    "explain",
    "listener_names",
    "parse_protocol_map",
    "without_listeners",
]

MAP_KEY: Final = "listener.security.protocol.map"
_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_PREFIX: Final = "listener.name."
_KEY_PREFIX: Final = re.compile(r"listener\.name\.([^.\s'\"]+)\.")


@dataclass(frozen=True, slots=True)
class Renamed:
    """A config with canonical listener names, and how to say its errors in the
    user's names (``names``: canonical -> as written; empty when nothing was renamed)."""

    props: dict[str, str]
    names: Mapping[str, str] = field(default_factory=dict)

    def explain(self, message: str) -> str:
        """``message`` in the user's listener names (see :func:`explain`)."""
        return explain(self.names, message)


def explain(names: Mapping[str, str], message: str) -> str:
    """``message`` with every ``listener.name.<canonical>.`` prefix of ``names``
    (canonical -> as written) back in the user's spelling, in one pass (a name may be
    another's canonical one)."""
    back = {c.lower(): n.lower() for c, n in names.items()}
    if not back:
        return message
    return _KEY_PREFIX.sub(lambda m: f"{_PREFIX}{back.get(m.group(1), m.group(1))}.", message)


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` as {NAME: PROTOCOL} (upper case); ConfigError naming the
    key for a malformed entry, an unknown protocol or a name given twice."""
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = (part.strip().upper() for part in entry.partition(":"))
        if not sep or not name:
            raise ConfigError(f"{MAP_KEY}: {entry!r} is not NAME:PROTOCOL")
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"{MAP_KEY}: {name}:{protocol}: the protocols are {', '.join(_PROTOCOLS)}"
            )
        if name in out:
            raise ConfigError(f"{MAP_KEY}: listener {name} appears twice")
        out[name] = protocol
    if not out:
        raise ConfigError(f"{MAP_KEY}: empty (leave it out for Kafka's default map)")
    return out


def listener_names(text: str) -> list[str]:
    """The upper-case names of a ``NAME://host:port,...`` list ("" for an unnamed entry)."""
    return [
        e.split("://", 1)[0].strip().upper() if "://" in e else ""
        for e in (e.strip() for e in text.split(","))
        if e
    ]


def _rename_entries(text: str, renames: Mapping[str, str]) -> str:
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, address = entry.partition("://")
        out.append(f"{renames.get(name.strip().upper(), name)}{sep}{address}" if sep else entry)
    return ",".join(out)


def apply_protocol_map(props: Mapping[str, str]) -> Renamed:
    """``props`` with canonical listener names (see the module doc); unchanged without
    the map. ConfigError naming the key when the map and the listeners disagree."""
    if MAP_KEY not in props:
        return Renamed(dict(props))
    protocols = parse_protocol_map(props[MAP_KEY])
    names = listener_names(props.get("listeners", ""))
    renames: dict[str, str] = {}
    for index, name in enumerate(names):
        if not name:
            raise ConfigError(f"listeners: with {MAP_KEY}, every listener needs a NAME://")
        if name not in protocols:
            raise ConfigError(f"{MAP_KEY}: no security protocol for listener {name} (listeners)")
        protocol = protocols[name]
        if index == 0:
            # raftka's HTTP API: TLS with client certificates, or plain.
            if protocol.startswith("SASL_"):
                raise ConfigError(
                    f"{MAP_KEY}: {name}:{protocol}: the first listener is raftka's HTTP API, "
                    "which is TLS or plain: map it to SSL (or PLAINTEXT); SASL logins on it "
                    f"come from listener.name.{name.lower()}.sasl.enabled.mechanisms"
                )
            canonical = "HTTPS" if protocol == "SSL" else "HTTP"
        else:
            canonical = protocol
        if canonical in renames.values():
            raise ConfigError(
                f"{MAP_KEY}: listeners {', '.join(names[1:])} would be two {protocol} "
                "listeners; raftka serves one Kafka listener beside its HTTP API"
            )
        renames[name] = canonical
    out: dict[str, str] = {}
    for key, value in props.items():
        if not key.startswith(_PREFIX):
            out[key] = value
            continue
        listener, _, rest = key[len(_PREFIX) :].partition(".")
        if listener.upper() not in renames:
            raise ConfigError(
                f"{key}: no listener named {listener.upper()} in listeners (with {MAP_KEY}, "
                "a per-listener key takes the listener's name)"
            )
        canonical_key = f"{_PREFIX}{renames[listener.upper()].lower()}.{rest}"
        if canonical_key in out:
            raise ConfigError(f"{key}: given twice (in another spelling of the listener name)")
        out[canonical_key] = value
    out["listeners"] = _rename_entries(props.get("listeners", ""), renames)
    if "advertised.listeners" in props:
        out["advertised.listeners"] = _rename_entries(props["advertised.listeners"], renames)
    inter = props.get("inter.broker.listener.name")
    if inter is not None:
        out["inter.broker.listener.name"] = renames.get(inter.strip().upper(), inter)
    controller_names = props.get("controller.listener.names")
    if controller_names is not None:
        out["controller.listener.names"] = ",".join(
            renames.get(n.strip().upper(), n.strip()) for n in controller_names.split(",")
        )
    out[MAP_KEY] = ",".join(f"{c}:{protocols[n]}" for n, c in renames.items())
    return Renamed(out, {c: n for n, c in renames.items() if c != n})


def without_listeners(props: Mapping[str, str], names: set[str]) -> dict[str, str]:
    """``props`` without the ``listener.name.<name>.`` keys of ``names`` (upper case):
    one half of a combined process, whose other half serves those listeners."""
    lowered = {n.lower() for n in names}
    return {
        k: v
        for k, v in props.items()
        if not (k.startswith(_PREFIX) and k[len(_PREFIX) :].partition(".")[0].lower() in lowered)
    }
