"""Command-line tools of the controller: run one, describe the quorum, dump the metadata.

``raftka controller --config FILE`` runs a controller process. ``raftka quorum status``
prints what kafka-metadata-quorum's ``describe --status`` and ``--replication`` show
(the leader, its epoch and high watermark, every voter's and observer's log end offset
and lag), asking the active controller when the one named knows it. ``raftka metadata
dump`` prints the committed metadata log of a controller, read through its API
(``GET /v1/metadata``): each payload's offset and epoch, then its records; a controller
that snapshotted away the log's start answers with the snapshot first.

Errors print one line on stderr and exit with status 1; never a traceback.
"""

from __future__ import annotations

import functools
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import click
import msgspec
import orjson

from raftka.common import client_tls
from raftka.common.errors import InvalidRequestError
from raftka.common.messages import decode, encode
from raftka.common.messages.controller import (
    METADATA_RECORDS_MAX,
    DescribeQuorumResponse,
    FetchMetadataRequest,
    FetchMetadataResponse,
    query_params,
)
from raftka.server_common.cli import CommandError, config_file_option, load_config
from raftka.server_common.node_config import load_node_config

__all__ = [
    "command_config_option",
    "command_tls",
    "controller_command",
    "metadata_group",
    "quorum_group",
]

DEFAULT_CONTROLLER: Final = "127.0.0.1:9093"
HTTP_TIMEOUT_S: Final = 10.0
# Bound on the pages ``metadata dump`` reads (each up to 1000 payloads).
DUMP_PAGES_MAX: Final = 100_000


M = TypeVar("M")


def _get(
    address: str, path: str, answer_type: type[M], params: Mapping[str, Any] | None = None
) -> M:
    """The controller's answer to ``GET path?params`` as ``answer_type``."""
    if params:
        path = f"{path}?{urllib.parse.urlencode(params, doseq=True)}"
    tls = command_tls()
    url = f"{'http' if tls is None else 'https'}://{address}{path}"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S, context=tls) as response:
            data = response.read()
    except urllib.error.HTTPError as e:
        try:
            body = orjson.loads(e.read())
            detail = f"{body.get('error')}: {body.get('message')}"
        except (orjson.JSONDecodeError, AttributeError):
            detail = f"HTTP {e.code}"
        raise CommandError(f"{address}{path}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CommandError(f"cannot reach the controller at {address}: {reason}") from None
    try:
        return decode(data, answer_type)
    except InvalidRequestError as e:
        raise CommandError(f"{address}{path}: unexpected answer: {e.message}") from None


def _first_reachable(addresses: str) -> tuple[str, DescribeQuorumResponse]:
    """The first controller of a comma-separated list that answers /v1/quorum."""
    errors: list[str] = []
    for address in [a.strip() for a in addresses.split(",") if a.strip()]:
        try:
            return address, _get(address, "/v1/quorum", DescribeQuorumResponse)
        except CommandError as e:
            errors.append(e.message)
    raise CommandError("; ".join(errors) or "no controller address given")


# ---------------------------------------------------------------------------------------
# raftka controller


@click.command("controller")
@config_file_option("A .properties or .toml file (Kafka's key names).")
def controller_command(config_path: Path) -> None:
    """Run a controller: a quorum voter plus the controller API."""
    config = load_config(load_node_config, config_path)
    if not config.is_controller:
        raise CommandError(f"{config_path}: process.roles does not include controller")
    # Imported here: the read-only tools must not pay for the server's imports.
    from raftka.metadata.controller_process import run_controller  # noqa: PLC0415

    raise SystemExit(run_controller(config))


# ---------------------------------------------------------------------------------------
# raftka quorum status

_bootstrap_controller = click.option(
    "--bootstrap-controller",
    "bootstrap",
    default=DEFAULT_CONTROLLER,
    show_default=True,
    help="host:port of one or more controllers, comma-separated.",
)
_F = TypeVar("_F", bound=Callable[..., object])


#: ``--command-config FILE`` of the tools that ask nodes directly (common/client_tls.py):
#: over HTTPS with its client certificate; read back with :func:`command_tls`.
command_config_option = client_tls.command_config_option(
    "For HTTPS nodes: a properties file of security.protocol=SSL, ssl.cafile, "
    "ssl.certfile, ssl.keyfile (a certificate of super.users), ssl.key.password."
)


def command_tls() -> ssl.SSLContext | None:
    """This command's ``--command-config`` TLS context (None: plain HTTP)."""
    tls = client_tls.command_config()
    return None if tls is None else _context(tls)


@functools.lru_cache(maxsize=4)
def _context(tls: client_tls.ClientTls) -> ssl.SSLContext | None:
    # One context per settings: `raftka status` asks every node on every refresh, and
    # a context reads its certificate files when it is made.
    return tls.context()


def _bootstrap(f: _F) -> _F:
    return _bootstrap_controller(command_config_option(f))


@click.group("quorum")
def quorum_group() -> None:
    """Describe the metadata quorum (like kafka-metadata-quorum)."""


@quorum_group.command("status")
@_bootstrap
@click.option("--json", "as_json", is_flag=True, help="Print the leader's description as JSON.")
def quorum_status(bootstrap: str, as_json: bool) -> None:
    """Leader, epoch, high watermark, and each voter's and observer's log end and lag."""
    address, info = _first_reachable(bootstrap)
    leader_address = info.leader_address
    if info.role != "leader" and leader_address is not None:
        # Only the leader knows every replica's log end offset.
        try:
            info = _get(leader_address, "/v1/quorum", DescribeQuorumResponse)
        except CommandError as e:
            click.echo(f"warning: {e.message}; showing {address}'s view", err=True)
    if as_json:
        click.echo(orjson.dumps(msgspec.to_builtins(info), option=orjson.OPT_INDENT_2).decode())
        return
    voters, observers = info.voters, info.observers
    rows = [
        ("LeaderId", info.leader_id),
        ("LeaderEpoch", info.epoch),
        ("HighWatermark", info.high_watermark),
        ("MaxFollowerLag", info.max_follower_lag),
        ("CurrentVoters", [v.node_id for v in voters]),
        ("CurrentObservers", [o.node_id for o in observers]),
    ]
    for name, value in rows:
        click.echo(f"{name + ':':<18}{'unknown' if value is None else value}")
    click.echo("")
    header = f"{'NodeId':<8}{'Address':<24}{'LogEndOffset':>14}{'Lag':>8}  Status"
    click.echo(header)
    for status, replicas in (("Voter", voters), ("Observer", observers)):
        for r in replicas:
            shown = "Leader" if r.node_id == info.leader_id else status
            leo = "-" if r.log_end_offset is None else r.log_end_offset
            lag = "-" if r.lag is None else r.lag
            click.echo(f"{r.node_id:<8}{r.address or '-':<24}{leo!s:>14}{lag!s:>8}  {shown}")


# ---------------------------------------------------------------------------------------
# raftka metadata dump


@click.group("metadata")
def metadata_group() -> None:
    """Read the metadata log."""


#: Fields the text dump does not print, as Kafka's RecordRedactor: what a SCRAM
#: credential keeps of a password (``--json`` passes the stored bytes through).
_REDACTED: Final = {"UserScramCredentialRecord": frozenset({"salt", "stored_key", "server_key"})}


def _record_line(record: dict[str, Any]) -> str:
    data = record.get("data") or {}
    hidden = _REDACTED.get(str(record.get("type")), frozenset())
    fields = " ".join(
        f"{k}={'(redacted)' if k in hidden else orjson.dumps(v).decode()}" for k, v in data.items()
    )
    return f"{record.get('type')} v{record.get('version')} {fields}".rstrip()


@metadata_group.command("dump")
@_bootstrap
@click.option("--from-offset", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per payload.")
def metadata_dump(bootstrap: str, from_offset: int, as_json: bool) -> None:
    """Print the committed metadata log of a controller (through its API)."""
    address, _ = _first_reachable(bootstrap)
    offset = from_offset
    for _ in range(DUMP_PAGES_MAX):
        request = FetchMetadataRequest(
            offset=offset, max_wait_ms=0, records_max=METADATA_RECORDS_MAX
        )
        page = _get(address, "/v1/metadata", FetchMetadataResponse, query_params(request))
        snapshot = page.snapshot
        if snapshot is not None:
            records = orjson.loads(bytes(snapshot.records))
            if as_json:
                click.echo(encode({"snapshot": snapshot}).decode())
            else:
                click.echo(
                    f"snapshot end_offset: {snapshot.end_offset} epoch: {snapshot.epoch} "
                    f"records: {len(records)}"
                )
                for record in records:
                    click.echo(f"  {_record_line(record)}")
        for batch in page.batches:
            if as_json:
                click.echo(encode(batch).decode())
            else:
                click.echo(f"offset: {batch.offset} epoch: {batch.epoch}")
                for record in orjson.loads(bytes(batch.records)):
                    click.echo(f"  {_record_line(record)}")
        next_offset = page.next_offset
        if next_offset >= page.high_watermark or next_offset == offset:
            return
        offset = next_offset
    raise CommandError(f"stopped after {DUMP_PAGES_MAX} pages")
