"""What the server commands (``raftka broker|controller|server``) share on the command
line: the ``--config FILE`` option, reading the file, and the one-line error they exit
with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from raftka.server_common.process_config import ConfigError

__all__ = ["CommandError", "config_file_option", "load_config"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class CommandError(click.ClickException):
    """One line on stderr (``error: ...``), exit status 1, no traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def config_file_option(help_text: str) -> Callable[[F], F]:
    """The required ``--config FILE`` option, passed as ``config_path``."""
    return click.option(
        "--config",
        "config_path",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
    )


def load_config(loader: Callable[[Path], T], config_path: Path) -> T:
    """``loader(config_path)``; a ConfigError becomes the command's one-line error."""
    try:
        return loader(config_path)
    except ConfigError as e:
        raise CommandError(str(e)) from None
