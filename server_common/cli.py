"""What the server commands (``raftka broker|controller|server``) share on the command
line: the ``--config FILE`` option and the one-line error they exit with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = ["CommandError", "config_file_option"]

F = TypeVar("F", bound=Callable[..., Any])


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
