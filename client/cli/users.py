"""``raftka users``: add, delete and list SCRAM users (like kafka-configs on users).

- ``raftka users add --user alice --mechanism SCRAM-SHA-256 [--iterations 8192]`` is
  ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'
  --entity-type users --entity-name alice``. The password comes from ``--password``,
  else from standard input: a hidden prompt (typed twice) on a terminal, else the
  first line read (so ``printf 'pw\\n' | raftka users add ...`` works in scripts and
  the password stays out of the process list). It is salted and hashed here and
  never sent.
- ``raftka users delete --user alice --mechanism SCRAM-SHA-256`` is ``kafka-configs
  --alter --delete-config SCRAM-SHA-256 --entity-type users --entity-name alice``.
- ``raftka users list [--user alice]`` is ``kafka-configs --describe --entity-type
  users``, with Kafka's line: ``SCRAM credential configs for user-principal 'alice'
  are SCRAM-SHA-256=iterations=8192``.

Errors are Kafka's, on one line: UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL
(iterations outside 4096..16384, an empty user name), RESOURCE_NOT_FOUND (deleting or
listing a user without such a credential).
"""

from __future__ import annotations

import sys

import click

from raftka.client.admin import Admin, UserScramCredentialDeletion, UserScramCredentialUpsertion
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    one_line_errors,
)
from raftka.common.errors import UnacceptableCredentialError
from raftka.common.scram import ITERATIONS_MAX, ITERATIONS_MIN, SCRAM_MECHANISMS

__all__ = ["format_users", "users_command"]

_user_option = click.option("--user", "user", required=True, help="The user name.")
_mechanism_option = click.option(
    "--mechanism",
    "mechanism",
    required=True,
    # Not a click.Choice: a wrong one is Kafka's UNSUPPORTED_SASL_MECHANISM, one line.
    metavar="|".join(SCRAM_MECHANISMS),
    help="The SCRAM mechanism.",
)


@click.group("users")
def users_command() -> None:
    """Add, delete and list SCRAM users (like kafka-configs --entity-type users)."""


def _read_password(given: str | None) -> str:
    if given is not None:
        return given
    if sys.stdin.isatty():
        entered: str = click.prompt("Password", hide_input=True, confirmation_prompt=True)
        return entered
    line = sys.stdin.readline()
    return line[:-1] if line.endswith("\n") else line


@users_command.command("add")
@_user_option
@_mechanism_option
@click.option(
    "--iterations",
    type=int,
    default=ITERATIONS_MIN,
    show_default=True,
    help=f"SCRAM iterations, {ITERATIONS_MIN}..{ITERATIONS_MAX}.",
)
@click.option(
    "--password",
    default=None,
    help="The password (else a hidden prompt on a terminal, or the first line of stdin).",
)
@bootstrap_option
@api_timeout_option
def add_command(
    *,
    user: str,
    mechanism: str,
    iterations: int,
    password: str | None,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Add a user's SCRAM credential, or replace it (like kafka-configs --add-config)."""
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        secret = _read_password(password)
        if not secret:
            raise UnacceptableCredentialError("the password must not be empty")
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, mechanism, secret, iterations)]
        )
        click.echo(f"Completed updating config for user {user}.")


@users_command.command("delete")
@_user_option
@_mechanism_option
@bootstrap_option
@api_timeout_option
def delete_command(
    *, user: str, mechanism: str, bootstrap_server: str, api_timeout_ms: int
) -> None:
    """Delete a user's SCRAM credential (like kafka-configs --delete-config)."""
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mechanism)])
        click.echo(f"Completed updating config for user {user}.")


def format_users(described: dict[str, list[tuple[str, int]]]) -> list[str]:
    """kafka-configs' describe lines: one per user, its mechanisms comma-separated."""
    return [
        f"SCRAM credential configs for user-principal '{user}' are "
        + ", ".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in rows)
        for user, rows in described.items()
    ]


@users_command.command("list")
@click.option("--user", "users", multiple=True, help="Only this user (repeatable).")
@bootstrap_option
@api_timeout_option
def list_command(*, users: tuple[str, ...], bootstrap_server: str, api_timeout_ms: int) -> None:
    """List users with their SCRAM mechanisms and iterations (never the keys)."""
    with one_line_errors(), command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
        described = admin.describe_user_scram_credentials(list(users) or None)
        rows = {u: [(c.mechanism, c.iterations) for c in cs] for u, cs in described.items()}
        for line in format_users(rows):
            click.echo(line)
