"""What every client command shares: the bootstrap default, its option, and errors.

The default bootstrap server is ``$RAFTKA_BOOTSTRAP_SERVERS`` if set, else the
``bootstrap_servers`` that ``raftka up`` recorded in ``./raftka-data/cluster.json``, else
``127.0.0.1:9092`` (Kafka's default listener). The cluster file is read as plain JSON:
the client may not import :mod:`raftka.local`.

Errors: a command never shows a traceback. Kafka's errors, bad client configuration,
OS errors and bad values end the command with one line on stderr
(``Error: UNKNOWN_TOPIC_OR_PARTITION: topic 'x' does not exist``) and exit status 1,
through :func:`one_line_errors`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import click

from raftka.client.admin import Admin
from raftka.client.config import ClientConfigError
from raftka.client.structs import TopicDescription
from raftka.common.errors import KafkaError

__all__ = [
    "API_TIMEOUT_MS_DEFAULT",
    "BOOTSTRAP_ENV",
    "CLUSTER_FILE",
    "CLUSTER_FILE_BYTES_MAX",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "api_timeout_option",
    "bootstrap_option",
    "ctrl_c_sets",
    "default_bootstrap_servers",
    "describe_topic",
    "error_line",
    "one_line_errors",
]

DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9092"
BOOTSTRAP_ENV: Final = "RAFTKA_BOOTSTRAP_SERVERS"
#: What ``raftka up`` writes (its default data directory).
CLUSTER_FILE: Final = "raftka-data/cluster.json"
CLUSTER_FILE_BYTES_MAX: Final = 1 << 20
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


bootstrap_option = click.option(
    "--bootstrap-server",
    "bootstrap_server",
    default=lambda: default_bootstrap_servers(env=os.environ, cwd=Path.cwd()),
    show_default=f"${BOOTSTRAP_ENV}, else ./{CLUSTER_FILE}'s, else {DEFAULT_BOOTSTRAP_SERVERS}",
    help="Brokers to bootstrap from, host:port[,host:port...].",
)

api_timeout_option = click.option(
    "--api-timeout-ms",
    "api_timeout_ms",
    type=click.IntRange(min=1),
    default=API_TIMEOUT_MS_DEFAULT,
    show_default=True,
    help="Give up on an unreachable or unanswering cluster after this many ms.",
)


def error_line(error: BaseException) -> str:
    """The one line a command prints for ``error``: Kafka's name and message for a
    KafkaError (its ``str``), the type and message otherwise; newlines folded."""
    text = str(error) if isinstance(error, KafkaError) else f"{type(error).__name__}: {error}"
    return " ".join(text.split())


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
    with Admin(
        bootstrap_servers=bootstrap_servers,
        default_api_timeout_ms=api_timeout_ms,
        request_timeout_ms=min(api_timeout_ms, 30_000),
    ) as admin:
        (description,) = admin.describe_topics([topic])
    return description


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
