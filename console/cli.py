"""``raftka console``: serve the web console for a cluster until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click
from aiohttp import web

from raftka.client.cli._common import api_timeout_option, bootstrap_option, security_options
from raftka.client.config import AdminConfig, ClientConfigError
from raftka.console.app import ConsoleSettings, make_app

__all__ = ["DEFAULT_CONSOLE_PORT", "console_command"]

#: Just below ``raftka up``'s default ports (controllers from 9093). ``raftka up`` itself
#: gives its console the port after its Kafka listeners instead (see local/up.py).
DEFAULT_CONSOLE_PORT: Final = 9090


@click.command("console")
@bootstrap_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_CONSOLE_PORT,
    show_default=True,
    help="Port to listen on.",
)
@click.option(
    "--reports",
    "reports_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A folder of `raftka chaos` reports: their timeline pictures are listed and shown.",
)
@api_timeout_option
def console_command(
    bootstrap_server: str, host: str, port: int, reports_dir: Path | None, api_timeout_ms: int
) -> None:
    """Serve the web console (overview, topics, groups, messages, chaos reports)."""
    security = security_options()
    try:
        # The certificate files are read here, so a bad one is one line, not a
        # traceback from the app's start-up.
        AdminConfig(bootstrap_servers=bootstrap_server, **security).tls_context()  # type: ignore[arg-type]
    except ClientConfigError as e:
        raise click.ClickException(str(e)) from None
    settings = ConsoleSettings(
        bootstrap_servers=bootstrap_server,
        api_timeout_ms=api_timeout_ms,
        reports_dir=None if reports_dir is None else reports_dir.resolve(),
        security=security,
    )
    url = f"http://{host}:{port}/"
    try:
        web.run_app(
            make_app(settings),
            host=host,
            port=port,
            print=lambda _: click.echo(f"console: {url} (cluster {bootstrap_server})"),
            access_log=None,
        )
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
