"""``raftka broker --config FILE``: run a broker process.

Errors in the config print one line on stderr and exit with status 1, never a
traceback. The process runs until SIGTERM or SIGINT, then shuts down cleanly
(controlled shutdown, logs closed with their clean-shutdown markers) and exits 0.
"""

from __future__ import annotations

from pathlib import Path

import click

from raftka.server_common.cli import config_file_option, load_config

__all__ = ["broker_command"]


@click.command("broker")
@config_file_option("A .properties or .toml file (Kafka's key names).")
def broker_command(config_path: Path) -> None:
    """Run a broker: partition logs, replication, produce and fetch."""
    from raftka.broker.config import load_broker_config  # noqa: PLC0415

    config = load_config(load_broker_config, config_path)
    # Imported here: the config check stays fast and its errors short.
    from raftka.broker.server import run_broker  # noqa: PLC0415

    raise SystemExit(run_broker(config))
