"""``raftka broker`` and ``raftka controller`` refuse a bad config file with one line
(``error: ...``) and exit status 1, before starting anything."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from raftka.broker.cli import broker_command
from raftka.metadata.cli import controller_command


@pytest.mark.parametrize("command", [broker_command, controller_command])
def test_a_bad_config_is_one_line_and_exit_1(command: click.Command, tmp_path: Path) -> None:
    path = tmp_path / "node.properties"
    path.write_text("node.id=x\n")
    result = CliRunner().invoke(command, ["--config", str(path)])
    assert result.exit_code == 1, result.output
    assert result.output == "error: node.id must be an integer, got 'x'\n"
    assert result.exception is None or isinstance(result.exception, SystemExit)
