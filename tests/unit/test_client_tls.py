"""``--command-config`` files (common/client_tls.py) and Kafka's properties syntax
(common/properties.py), which the processes' config files share."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from raftka.common.client_tls import (
    ClientTls,
    command_config,
    command_config_option,
    read_command_config,
)
from raftka.common.errors import InvalidConfigError
from raftka.common.properties import PropertiesError, parse_properties
from raftka.local.certs import new_ca


def test_properties_syntax() -> None:
    text = "# comment\n! also\na=1\nb: 2\nc 3\nd = x\\\n  y\n\ne=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": ""}


@pytest.mark.parametrize(
    ("text", "message"),
    [("a=1\na=2\n", "f:2: a is set twice"), ("=1\n", "f:1: a line with no key")],
)
def test_properties_refusals_name_the_line(text: str, message: str) -> None:
    with pytest.raises(PropertiesError, match=message):
        parse_properties(text, source="f")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "command.properties"
    path.write_text(text)
    return path


def test_a_command_config_reads_kafka_client_names(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "security.protocol=ssl\nssl.cafile: /ca.pem\nssl.certfile=/c.pem\n"
        "ssl.keyfile=/k.pem\nssl.key.password=pw\nssl.endpoint.identification.algorithm=\n",
    )
    assert read_command_config(path) == ClientTls(
        protocol="SSL",
        cafile="/ca.pem",
        certfile="/c.pem",
        keyfile="/k.pem",
        password="pw",
        check_hostname=False,
    )
    assert read_command_config(_write(tmp_path, "")) == ClientTls()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ssl.truststore.location=/t.jks\n", r"Java key store\); use ssl.cafile"),
        ("sasl.mechanism=PLAIN\n", "by certificate only"),
        ("bootstrap.servers=x:1\n", "unknown key 'bootstrap.servers'"),
        ("security.protocol=SASL_SSL\n", "expected PLAINTEXT or SSL"),
        ("ssl.cafile=/ca.pem\n", "security.protocol is PLAINTEXT, nothing uses it"),
        ("security.protocol=SSL\nssl.certfile=/c.pem\n", "go together"),
        ("security.protocol=SSL\nssl.cafile=/a\nssl.cafile=/b\n", "is set twice"),
    ],
)
def test_a_command_config_refuses_by_name(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        read_command_config(_write(tmp_path, text))


@click.command()
@command_config_option("help")
def _show() -> None:
    tls = command_config()
    click.echo("none" if tls is None else tls.protocol)


def test_the_option_loads_the_files_before_the_command_runs(tmp_path: Path) -> None:
    ca = new_ca(tmp_path / "ca")
    cert = ca.issue(tmp_path / "ca", "admin")
    good = _write(
        tmp_path,
        f"security.protocol=SSL\nssl.cafile={ca.cafile}\n"
        f"ssl.certfile={cert.certfile}\nssl.keyfile={cert.keyfile}\n",
    )
    runner = CliRunner()
    assert runner.invoke(_show, []).output == "none\n"
    ran = runner.invoke(_show, ["--command-config", str(good)])
    assert (ran.exit_code, ran.output) == (0, "SSL\n")
    bad = tmp_path / "bad.properties"
    bad.write_text(f"security.protocol=SSL\nssl.cafile={tmp_path / 'missing.pem'}\n")
    ran = runner.invoke(_show, ["--command-config", str(bad)])
    assert ran.exit_code == 2 and "ssl.cafile" in ran.output and "cannot load" in ran.output
