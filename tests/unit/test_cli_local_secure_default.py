"""Client commands reach ``raftka up --secure``'s local cluster with the client
certificate it wrote, as they reach its bootstrap servers: only when the cluster comes
from ``./raftka-data/cluster.json`` by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson
import pytest
from click.testing import CliRunner

from raftka.client.cli._common import (
    BOOTSTRAP_ENV,
    CLUSTER_FILE,
    LOCAL_CLIENT_CONFIG,
    bootstrap_option,
    security_options,
)
from raftka.local.secure import RAFTKA_CLIENT_FILE
from raftka.local.up import DEFAULT_DATA_DIR, SECURE_DIR


@click.command()
@bootstrap_option
def _show(bootstrap_server: str) -> None:
    click.echo(orjson.dumps({"bootstrap": bootstrap_server, **security_options()}))


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(_show, list(args), env={BOOTSTRAP_ENV: "", **(env or {})})
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = orjson.loads(result.output)
    return loaded


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A directory where raftka up --secure ran with its default data directory."""
    (tmp_path / LOCAL_CLIENT_CONFIG).parent.mkdir(parents=True)
    (tmp_path / CLUSTER_FILE).write_bytes(orjson.dumps({"bootstrap_servers": "127.0.0.1:9096"}))
    (tmp_path / LOCAL_CLIENT_CONFIG).write_text(
        "security.protocol=SSL\nssl.cafile=ca.pem\nssl.certfile=admin.pem\nssl.keyfile=admin.key\n"
    )
    return tmp_path


def test_the_local_secure_cluster_is_reached_with_its_client_file(here: Path) -> None:
    shown = _run(here)
    assert shown["bootstrap"] == "127.0.0.1:9096"
    assert shown["security_protocol"] == "SSL"
    assert (shown["ssl_cafile"], shown["ssl_certfile"]) == ("ca.pem", "admin.pem")


def test_another_cluster_named_on_the_command_line_gets_no_credentials(here: Path) -> None:
    assert _run(here, "--bootstrap-server", "10.0.0.1:9096") == {"bootstrap": "10.0.0.1:9096"}


def test_another_cluster_named_in_the_environment_gets_no_credentials(here: Path) -> None:
    shown = _run(here, env={BOOTSTRAP_ENV: "10.0.0.1:9096"})
    assert shown == {"bootstrap": "10.0.0.1:9096"}


def test_a_plain_local_cluster_stays_plain(here: Path) -> None:
    (here / LOCAL_CLIENT_CONFIG).unlink()
    assert _run(here) == {"bootstrap": "127.0.0.1:9096"}


def test_command_config_wins(here: Path) -> None:
    (here / "plain.properties").write_text("security.protocol=PLAINTEXT\n")
    shown = _run(here, "--command-config", "plain.properties")
    assert shown == {"bootstrap": "127.0.0.1:9096", "security_protocol": "PLAINTEXT"}


def test_the_path_is_where_raftka_up_writes_it() -> None:
    # The client may not import raftka.local, so it names the file itself.
    assert Path(LOCAL_CLIENT_CONFIG) == Path(DEFAULT_DATA_DIR) / SECURE_DIR / RAFTKA_CLIENT_FILE
    assert Path(CLUSTER_FILE).parent == Path(DEFAULT_DATA_DIR)
