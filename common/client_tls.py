"""A client's TLS to raftka's HTTPS API, shared by the client library and the tools.

Theory of operation
-------------------
A node whose HTTP API is HTTPS (``listeners=HTTPS://...``, server_common/node_http.py)
authenticates every request by the client's certificate. Everything that calls that
API from outside the nodes (the raftka client, ``raftka status``, ``raftka quorum``,
the client commands) needs the same few settings, with Kafka's client names:
``security.protocol`` (PLAINTEXT or SSL), the CA to trust, the client's certificate
and key (PEM files, as Python's ``ssl`` module takes them) and the key's password,
and whether to check the node's host name (Kafka's
``ssl.endpoint.identification.algorithm``: ``https``, the default, or empty).

:func:`read_command_config` reads them from a properties file, as Kafka's tools take
``--command-config FILE``::

    security.protocol=SSL
    ssl.cafile=/etc/raftka/tls/ca.pem
    ssl.certfile=/etc/raftka/tls/admin.pem
    ssl.keyfile=/etc/raftka/tls/admin-key.pem
    # ssl.key.password=...                 (when the key file is encrypted)
    # ssl.endpoint.identification.algorithm=   (empty: no host-name check)

Any other key is refused by name (Java key store names with the PEM name to use), and
SASL is refused: the commands log in by certificate only (some, such as ``raftka
status``, call the controllers without the client library, which holds the SASL login).
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

import click

from raftka.common.errors import InvalidConfigError
from raftka.common.properties import PropertiesError, parse_properties

__all__ = [
    "COMMAND_CONFIG_KEYS",
    "SSL_CLOSE_LEAKS",
    "ClientTls",
    "command_config",
    "command_config_option",
    "connector_tls",
    "read_command_config",
]

#: CPython leaks the socket of an asyncio TLS connection closed before its shutdown
#: finished, until 3.12.8 and in 3.13.0 (gh-118960): aiohttp's
#: ``TCPConnector(enable_cleanup_closed=True)`` aborts those at close (and warns where
#: the fix is in, so it is asked for only where needed).
SSL_CLOSE_LEAKS: Final = sys.version_info < (3, 12, 8) or (
    (3, 13, 0) <= sys.version_info < (3, 13, 1)
)


def connector_tls(context: ssl.SSLContext | None) -> dict[str, object]:
    """aiohttp ``TCPConnector`` keywords for ``context`` (None: plain, or the system's
    defaults for https): the context, and the cleanup of TLS connections closed
    mid-shutdown where CPython leaks them (SSL_CLOSE_LEAKS)."""
    if context is None:
        return {"ssl": True, "enable_cleanup_closed": False}
    return {"ssl": context, "enable_cleanup_closed": SSL_CLOSE_LEAKS}


#: The keys a ``--command-config`` file may hold.
COMMAND_CONFIG_KEYS: Final = (
    "security.protocol",
    "ssl.cafile",
    "ssl.certfile",
    "ssl.keyfile",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)
_JAVA_ONLY: Final = {
    "ssl.truststore.location": "ssl.cafile",
    "ssl.keystore.location": "ssl.certfile and ssl.keyfile",
    "ssl.truststore.type": "ssl.cafile",
    "ssl.keystore.type": "ssl.certfile and ssl.keyfile",
}
_FILE_BYTES_MAX: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class ClientTls:
    """One client's settings; ``protocol`` PLAINTEXT leaves every file None."""

    protocol: str = "PLAINTEXT"
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = None
    check_hostname: bool = True

    def context(
        self, *, cafile_name: str = "ssl.cafile", certfile_name: str = "ssl.certfile"
    ) -> ssl.SSLContext | None:
        """The TLS context of SSL (None for PLAINTEXT), its files read now;
        InvalidConfigError naming the setting (by the caller's names for them) whose
        file cannot be loaded."""
        if self.protocol != "SSL":
            return None
        try:
            context = ssl.create_default_context(cafile=self.cafile)
        except (OSError, ssl.SSLError) as e:
            raise InvalidConfigError(f"{cafile_name} {self.cafile}: cannot load it: {e}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.certfile is not None:
            try:
                context.load_cert_chain(self.certfile, self.keyfile, password=self.password)
            except (OSError, ssl.SSLError) as e:
                raise InvalidConfigError(
                    f"{certfile_name} {self.certfile}: cannot load it: {e}"
                ) from None
        return context


def read_command_config(path: Path | str) -> ClientTls:
    """The settings of a ``--command-config`` file (Kafka's properties syntax,
    raftka.common.properties); InvalidConfigError naming the file and the key."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise InvalidConfigError(f"{path}: {e.strerror or e}") from None
    if len(raw) > _FILE_BYTES_MAX:
        raise InvalidConfigError(f"{path}: larger than {_FILE_BYTES_MAX} bytes")
    try:
        values = parse_properties(raw.decode("utf-8", "replace"), source=str(path))
    except PropertiesError as e:
        raise InvalidConfigError(str(e)) from None
    for key in values:
        if key in _JAVA_ONLY:
            raise InvalidConfigError(
                f"{path}: {key} is not supported (Java key store); use {_JAVA_ONLY[key]}"
            )
        if key.startswith("sasl."):
            raise InvalidConfigError(
                f"{path}: {key}: raftka's commands reach the HTTP API by certificate "
                "only (SASL_SSL is the client library's and the Kafka listener's)"
            )
        if key not in COMMAND_CONFIG_KEYS:
            raise InvalidConfigError(
                f"{path}: unknown key {key!r} (known: {', '.join(COMMAND_CONFIG_KEYS)})"
            )
    protocol = values.pop("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL"):
        raise InvalidConfigError(
            f"{path}: security.protocol={protocol}: expected PLAINTEXT or SSL (raftka's "
            "commands reach the HTTP API by certificate only)"
        )
    if protocol == "PLAINTEXT" and values:
        raise InvalidConfigError(
            f"{path}: {sorted(values)[0]}: security.protocol is PLAINTEXT, nothing uses it"
        )
    algorithm = values.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", ""):
        raise InvalidConfigError(
            f"{path}: ssl.endpoint.identification.algorithm must be https or empty"
        )
    tls = ClientTls(
        protocol=protocol,
        cafile=values.get("ssl.cafile") or None,
        certfile=values.get("ssl.certfile") or None,
        keyfile=values.get("ssl.keyfile") or None,
        password=values.get("ssl.key.password") or None,
        check_hostname=algorithm == "https",
    )
    if (tls.certfile is None) != (tls.keyfile is None):
        raise InvalidConfigError(f"{path}: ssl.certfile and ssl.keyfile go together")
    return tls


_META_KEY: Final = "raftka.command_config"
_F = TypeVar("_F", bound=Callable[..., object])


def _read_option(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    try:
        tls = read_command_config(value)
        tls.context()  # its files are read now: a bad one is a usage error, before any call
    except InvalidConfigError as e:
        raise click.BadParameter(e.message, ctx=ctx, param_hint="--command-config") from None
    ctx.meta[_META_KEY] = tls


def command_config_option(help_text: str) -> Callable[[_F], _F]:
    """A click ``--command-config FILE`` option whose settings :func:`command_config`
    returns; shared by the client commands and the tools that ask nodes directly."""
    return click.option(
        "--command-config",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        expose_value=False,
        callback=_read_option,
        help=help_text,
    )


def command_config() -> ClientTls | None:
    """The running command's ``--command-config`` settings (None when not given)."""
    ctx = click.get_current_context(silent=True)
    found = None if ctx is None else ctx.meta.get(_META_KEY)  # meta is shared by subcontexts
    return found if isinstance(found, ClientTls) else None
