"""The ``raftka`` command run in-process against a test cluster, for the integration
tests of the command line (test modules cannot import each other, so the one way to
invoke it lives here, on pytest's ``pythonpath``)."""

from __future__ import annotations

from click.testing import CliRunner, Result

from raftka.__main__ import cli


def invoke_raftka(
    bootstrap_servers: str,
    args: tuple[str, ...],
    *,
    api_timeout_ms: int,
    stdin: str | bytes | None = None,
) -> Result:
    """One ``raftka`` command through click's CliRunner, with the cluster's bootstrap
    servers and a bounded ``--api-timeout-ms`` appended; ``stdin`` is its input."""
    return CliRunner().invoke(
        cli,
        [*args, "--bootstrap-server", bootstrap_servers, "--api-timeout-ms", str(api_timeout_ms)],
        input=stdin,
    )
