"""What every client command shares: the bootstrap default, its option, and errors.

The default bootstrap server is ``$RAFTKA_BOOTSTRAP_SERVERS`` if set, else the
``bootstrap_servers`` that ``raftka up`` recorded in ``./raftka-data/cluster.json``, else
``127.0.0.1:9096`` (the first broker of ``raftka up``'s default layout). The cluster
file is read as plain JSON: the client may not import :mod:`raftka.local`.

Errors: a command never shows a traceback. Kafka's errors, bad client configuration,
OS errors and bad values end the command with one line on stderr
(``Error: UNKNOWN_TOPIC_OR_PARTITION: topic 'x' does not exist``) and exit status 1,
through :func:`one_line_errors`. A connection that could not be made is said in plain
words with the address (``NETWORK_EXCEPTION: cannot connect to 127.0.0.1:1: connection
refused``), not as the HTTP library's exception text.

Names: every command takes its topic and group the way Kafka's tools do
(``--topic T``, ``--group G``) and also as a positional argument (``raftka produce T``,
raftka's first grammar), through :func:`name_options` and :func:`one_name` /
:func:`many_names`. An empty name is Kafka's INVALID_TOPIC_EXCEPTION / INVALID_GROUP_ID.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Final, Literal, TypeVar

import click
import orjson
from click.core import ParameterSource

from raftka.client.admin import Admin
from raftka.client.config import ClientConfigError, SecurityOptions
from raftka.client.group_admin import GroupAdmin
from raftka.client.structs import TopicDescription
from raftka.common.client_tls import (
    ClientTls,
    command_config,
    command_config_option,
    read_command_config,
)
from raftka.common.errors import InvalidGroupIdError, InvalidTopicError, KafkaError
from raftka.common.structs import TopicPartition

__all__ = [
    "API_TIMEOUT_MS_DEFAULT",
    "BOOTSTRAP_ENV",
    "CLUSTER_FILE",
    "CLUSTER_FILE_BYTES_MAX",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "LOCAL_CLIENT_CONFIG",
    "api_timeout_option",
    "bootstrap_option",
    "check_name",
    "command_admin",
    "ctrl_c_sets",
    "default_bootstrap_servers",
    "describe_topic",
    "error_line",
    "local_cluster_tls",
    "many_names",
    "name_options",
    "one_line_errors",
    "one_name",
    "plain_connection_error",
    "security_options",
    "topic_name_callback",
]

#: ``raftka up``'s first broker (its controllers take 9093-9095, brokers 9096-9098):
#: the cluster a person most likely runs. Kafka's 9092 would only ever be refused.
DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9096"
BOOTSTRAP_ENV: Final = "RAFTKA_BOOTSTRAP_SERVERS"
#: What ``raftka up`` writes (its default data directory).
CLUSTER_FILE: Final = "raftka-data/cluster.json"
CLUSTER_FILE_BYTES_MAX: Final = 1 << 20
#: The client settings ``raftka up --secure`` writes beside that file (its admin's
#: certificate, for --command-config; raftka.local.up's SECURE_DIR/RAFTKA_CLIENT_FILE,
#: which a unit test keeps equal: the client may not import raftka.local).
LOCAL_CLIENT_CONFIG: Final = "raftka-data/secure/raftka-client.properties"
#: How long a command waits for the cluster (metadata, a controller) before it gives
#: up with one line: shorter than the client's 60 s default, since a person waits.
API_TIMEOUT_MS_DEFAULT: Final = 15_000


def default_bootstrap_servers(*, env: Mapping[str, str], cwd: Path) -> str:
    """$RAFTKA_BOOTSTRAP_SERVERS, else the ``bootstrap_servers`` of a local cluster's
    ``./raftka-data/cluster.json``, else 127.0.0.1:9092. A cluster file that cannot
    be read is ignored (the connection error then names the address tried)."""
    if env.get(BOOTSTRAP_ENV):
        return env[BOOTSTRAP_ENV]
    path = cwd / CLUSTER_FILE
    try:
        with path.open("rb") as f:
            loaded = json.loads(f.read(CLUSTER_FILE_BYTES_MAX))
    except (OSError, ValueError):
        return DEFAULT_BOOTSTRAP_SERVERS
    servers = loaded.get("bootstrap_servers") if isinstance(loaded, dict) else None
    return servers if isinstance(servers, str) and servers else DEFAULT_BOOTSTRAP_SERVERS


_bootstrap_server_option = click.option(
    "--bootstrap-server",
    "bootstrap_server",
    default=lambda: default_bootstrap_servers(env=os.environ, cwd=Path.cwd()),
    show_default=f"${BOOTSTRAP_ENV}, else ./{CLUSTER_FILE}'s, else {DEFAULT_BOOTSTRAP_SERVERS}",
    help="Brokers to bootstrap from, host:port[,host:port...].",
)
_F = TypeVar("_F", bound=Callable[..., object])


_command_config_option = command_config_option(
    "Client settings for an HTTPS cluster, as Kafka's tools take them: a properties "
    "file of security.protocol=SSL, ssl.cafile, ssl.certfile, ssl.keyfile, "
    "ssl.key.password, ssl.endpoint.identification.algorithm. Default: none, except "
    f"for ./{CLUSTER_FILE}'s cluster (no --bootstrap-server, no ${BOOTSTRAP_ENV}) "
    f"when raftka up --secure made it: then ./{LOCAL_CLIENT_CONFIG}."
)


def bootstrap_option(f: _F) -> _F:
    """``--bootstrap-server`` and ``--command-config`` (read by :func:`security_options`)."""
    return _bootstrap_server_option(_command_config_option(f))


def security_options() -> SecurityOptions:
    """The clients' security settings of this command's ``--command-config``; none
    given: ``raftka up --secure``'s for its local cluster (:func:`local_cluster_tls`),
    else PLAINTEXT, the clients' default."""
    tls = command_config() or local_cluster_tls(env=os.environ, cwd=Path.cwd())
    if tls is None:
        return {}
    if tls.protocol != "SSL":
        return {"security_protocol": "PLAINTEXT"}
    return {
        "security_protocol": "SSL",
        "ssl_cafile": tls.cafile,
        "ssl_certfile": tls.certfile,
        "ssl_keyfile": tls.keyfile,
        "ssl_password": tls.password,
        "ssl_check_hostname": tls.check_hostname,
    }


def local_cluster_tls(*, env: Mapping[str, str], cwd: Path) -> ClientTls | None:
    """``raftka up --secure``'s client settings when this command talks to the cluster
    of ``./raftka-data/cluster.json`` by default (neither ``--bootstrap-server`` nor
    ``$RAFTKA_BOOTSTRAP_SERVERS``) and that cluster is a secure one (a data directory
    with the file is never resumed without --secure); None otherwise. As the bootstrap
    default comes from that directory, so do the credentials to reach it."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or env.get(BOOTSTRAP_ENV):
        return None
    if ctx.get_parameter_source("bootstrap_server") is not ParameterSource.DEFAULT:
        return None  # given on the command line (or the command has no such option)
    if _LOCAL_TLS_META_KEY in ctx.meta:  # a command may build several clients: read once
        found: ClientTls | None = ctx.meta[_LOCAL_TLS_META_KEY]
        return found
    path = cwd / LOCAL_CLIENT_CONFIG
    found = None
    if (cwd / CLUSTER_FILE).is_file() and path.is_file():
        found = read_command_config(path)
    ctx.meta[_LOCAL_TLS_META_KEY] = found
    return found


_LOCAL_TLS_META_KEY: Final = "raftka.local_cluster_tls"


api_timeout_option = click.option(
    "--api-timeout-ms",
    "api_timeout_ms",
    type=click.IntRange(min=1),
    default=API_TIMEOUT_MS_DEFAULT,
    show_default=True,
    help="Give up on an unreachable or unanswering cluster after this many ms.",
)


# aiohttp's connection failure as the transport words it ("... ClientConnectorError:
# Cannot connect to host 127.0.0.1:1 ssl:default [Connect call failed ('127.0.0.1', 1)]").
# The transport passes only that text on (its errors are raised ``from None``), so the
# command line reads it back here rather than in the transport, which another change owns.
_CONNECT_FAILED = re.compile(r"Cannot connect to host (\S+?)(?: ssl:\S+)? \[([^\]]*)\]")
# The OS reason inside the brackets, in plain words (first match wins).
_REASONS: Final = (
    ("connect call failed", "connection refused"),
    ("connection refused", "connection refused"),
    ("name or service not known", "unknown host"),
    ("nodename nor servname", "unknown host"),
    ("temporary failure in name resolution", "unknown host"),
    ("no address associated", "unknown host"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network is unreachable"),
    ("timed out", "connection timed out"),
)


def plain_connection_error(text: str) -> str | None:
    """``NETWORK_EXCEPTION: cannot connect to HOST:PORT: <reason>`` when ``text`` (an
    error's message, however wrapped) holds a failed connection; None otherwise."""
    match = _CONNECT_FAILED.search(text)
    if match is None:
        return None
    address, detail = match.group(1), match.group(2)
    lowered = detail.lower()
    reason = next((plain for key, plain in _REASONS if key in lowered), None)
    if reason is None:
        reason = detail.strip() or "failed"  # an OS error the table does not know
    return f"NETWORK_EXCEPTION: cannot connect to {address}: {reason}"


def error_line(error: BaseException) -> str:
    """The one line a command prints for ``error``: a failed connection in plain words
    (:func:`plain_connection_error`), else Kafka's name and message for a KafkaError
    (its ``str``), the type and message otherwise; newlines folded."""
    text = str(error) if isinstance(error, KafkaError) else f"{type(error).__name__}: {error}"
    text = plain_connection_error(text) or text
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------
# Topic and group names: Kafka's options, raftka's positionals as aliases

NameKind = Literal["topic", "group"]
# Bound, not constrained: subclasses (TransactionAdmin) keep their own type.
AdminT = TypeVar("AdminT", bound=Admin | GroupAdmin)


def _empty_name_error(kind: NameKind) -> KafkaError:
    if kind == "topic":
        return InvalidTopicError("topic name is illegal, it can't be empty")
    return InvalidGroupIdError("the group id is empty")


def check_name(kind: NameKind, name: str) -> str:
    """``name`` itself; one line with Kafka's error for an empty one."""
    if not name:
        raise click.ClickException(error_line(_empty_name_error(kind)))
    return name


def topic_name_callback(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A click callback for a plain ``--topic`` option: :func:`check_name`."""
    return check_name("topic", value)


def name_options(
    kind: NameKind, *, multiple: bool = False, help_text: str = ""
) -> Callable[[_F], _F]:
    """A positional ``[TOPIC]...`` (raftka's first grammar, kept so scripts do not break)
    plus Kafka's ``--topic`` option (``--group`` for groups), repeatable when
    ``multiple``. The command reads them as ``<kind>_args`` and ``<kind>_opt`` and
    resolves them with :func:`one_name` or :func:`many_names`."""

    def decorate(f: _F) -> _F:
        f = click.option(
            f"--{kind}",
            f"{kind}_opt",
            multiple=multiple,
            default=() if multiple else None,
            help=help_text or f"The {kind}'s name (also accepted as the first argument).",
        )(f)
        return click.argument(
            f"{kind}_args", nargs=-1, metavar=f"[{kind.upper()}]{'...' if multiple else ''}"
        )(f)

    return decorate


def one_name(kind: NameKind, positional: tuple[str, ...], option: str | None) -> str:
    """The one name given as ``--<kind> X`` or ``X`` (both: they must agree)."""
    given = [*positional, *(() if option is None else (option,))]
    if not given:
        raise click.UsageError(f"give the {kind}: --{kind} NAME")
    if len(set(given)) > 1:
        raise click.UsageError(f"one {kind} only, got {', '.join(map(repr, given))}")
    return check_name(kind, given[0])


def many_names(kind: NameKind, positional: tuple[str, ...], option: tuple[str, ...]) -> list[str]:
    """Every name given as ``--<kind> X`` (repeatable) or positionally, in order, once each."""
    return [check_name(kind, n) for n in dict.fromkeys([*positional, *option])]


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn the errors a client command can meet into one-line ClickExceptions."""
    try:
        yield
    except (KafkaError, ClientConfigError, OSError, ValueError) as e:
        raise click.ClickException(error_line(e)) from None


def describe_topic(*, bootstrap_servers: str, topic: str, api_timeout_ms: int) -> TopicDescription:
    """The topic's description, asked once up front so that an unknown topic is one
    immediate UNKNOWN_TOPIC_OR_PARTITION (a producer or consumer would wait for it to
    appear until its timeout) and an unreachable cluster fails within
    ``api_timeout_ms``."""
    with command_admin(Admin, bootstrap_servers, api_timeout_ms) as admin:
        (description,) = admin.describe_topics([topic])
    return description


def command_admin(cls: type[AdminT], bootstrap_servers: str, api_timeout_ms: int) -> AdminT:
    """An admin client (``Admin`` or ``GroupAdmin``) for one command: every call bounded
    by ``api_timeout_ms``, and each request by at most 30 s of it."""
    return cls(
        bootstrap_servers=bootstrap_servers,
        default_api_timeout_ms=api_timeout_ms,
        request_timeout_ms=min(api_timeout_ms, 30_000),
        **security_options(),
    )


@contextlib.contextmanager
def ctrl_c_sets() -> Iterator[threading.Event]:
    """While inside, Ctrl-C (SIGINT) sets the event instead of raising
    KeyboardInterrupt, so a command's loop ends between two steps rather than
    abandoning a client call half-way on the client's loop thread.
    Outside the main thread (where signals cannot be handled) it changes nothing."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------------------------------
# Kafka tools' JSON files (kafka-reassign-partitions, kafka-delete-records,
# kafka-leader-election)

#: The only version of those files.
JSON_FILE_VERSION: Final = 1


def bad_json_file(option: str, source: str, why: str) -> click.BadParameter:
    """The one-line refusal of a JSON file given as ``option``."""
    return click.BadParameter(why, param_hint=f"{option} {source}")


def json_file_items(text: bytes, option: str, source: str, key: str) -> list[object]:
    """The non-empty list under ``key`` of a Kafka tool's JSON file (``{"<key>": [...],
    "version": 1}``, the version optional); click.BadParameter for anything else."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise bad_json_file(option, source, f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise bad_json_file(option, source, f'expected {{"{key}": [...], "version": 1}}')
    version = doc.get("version", JSON_FILE_VERSION)
    if version != JSON_FILE_VERSION:
        raise bad_json_file(
            option, source, f"unsupported version {version!r} (only {JSON_FILE_VERSION})"
        )
    items: list[object] = doc[key]
    if not items:
        raise bad_json_file(option, source, f"no {key}")
    return items


def json_file_partition(
    item: object, i: int, bad: Callable[[str], click.BadParameter]
) -> tuple[TopicPartition, dict[str, object]]:
    """The topic partition an item of a Kafka tool's ``partitions`` list names, and the
    item; ``bad(why)`` for an item that is not ``{"topic": T, "partition": P, ...}``."""
    if not isinstance(item, dict):
        raise bad(f"partitions[{i}] is not an object")
    topic, partition = item.get("topic"), item.get("partition")
    if not isinstance(topic, str) or not topic:
        raise bad(f"partitions[{i}].topic must be a topic name")
    if type(partition) is not int or partition < 0:
        raise bad(f"partitions[{i}].partition must be an integer >= 0")
    return TopicPartition(topic, partition), item
