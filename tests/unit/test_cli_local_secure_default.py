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
    _layout(cwd)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(_show, list(args), env={BOOTSTRAP_ENV: "", **(env or {})})
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = orjson.loads(result.output)
    return loaded


_LAYOUT: dict[str, str] = {}


def _layout(here: Path) -> None:
    for name, text in _LAYOUT.items():
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_text(text)


@pytest.fixture(autouse=True)
def _secure_local_cluster() -> None:
    _LAYOUT.clear()
    _LAYOUT[CLUSTER_FILE] = orjson.dumps({"bootstrap_servers": "127.0.0.1:9096"}).decode()
    _LAYOUT[LOCAL_CLIENT_CONFIG] = (
        "security.protocol=SSL\nssl.cafile=ca.pem\nssl.certfile=admin.pem\nssl.keyfile=admin.key\n"
    )


def test_the_local_secure_cluster_is_reached_with_its_client_file(tmp_path: Path) -> None:
    shown = _run(tmp_path)
    assert shown["bootstrap"] == "127.0.0.1:9096"
    assert shown["security_protocol"] == "SSL"
    assert (shown["ssl_cafile"], shown["ssl_certfile"]) == ("ca.pem", "admin.pem")


def test_another_cluster_named_on_the_command_line_gets_no_credentials(tmp_path: Path) -> None:
    assert _run(tmp_path, "--bootstrap-server", "10.0.0.1:9096") == {"bootstrap": "10.0.0.1:9096"}


def test_another_cluster_named_in_the_environment_gets_no_credentials(tmp_path: Path) -> None:
    shown = _run(tmp_path, env={BOOTSTRAP_ENV: "10.0.0.1:9096"})
    assert shown == {"bootstrap": "10.0.0.1:9096"}


def test_a_plain_local_cluster_stays_plain(tmp_path: Path) -> None:
    del _LAYOUT[LOCAL_CLIENT_CONFIG]
    assert _run(tmp_path) == {"bootstrap": "127.0.0.1:9096"}


def test_command_config_wins(tmp_path: Path) -> None:
    _LAYOUT["plain.properties"] = "security.protocol=PLAINTEXT\n"
    shown = _run(tmp_path, "--command-config", "plain.properties")
    assert shown == {"bootstrap": "127.0.0.1:9096", "security_protocol": "PLAINTEXT"}


def test_the_path_is_where_raftka_up_writes_it() -> None:
    # The client may not import raftka.local, so it names the file itself.
    assert Path(LOCAL_CLIENT_CONFIG) == Path(DEFAULT_DATA_DIR) / SECURE_DIR / RAFTKA_CLIENT_FILE
    assert Path(CLUSTER_FILE).parent == Path(DEFAULT_DATA_DIR)
