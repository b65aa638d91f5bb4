"""The ``raftka`` command run in-process against a test cluster, for the integration
tests of the command line (test modules cannot import each other, so the one way to
invoke it lives here, on pytest's ``pythonpath``)."""

from __future__ import annotations

from click.testing import CliRunner, Result

from raftka.__main__ import cli
from raftka.testing import RaftkaCluster

#: How long a command run by CliCluster.run may wait on the cluster.
CLI_API_TIMEOUT_MS = 20_000


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


def ok(result: Result) -> str:
    """The stdout of a command that must have succeeded."""
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


class CliCluster(RaftkaCluster):
    """A test cluster that runs ``raftka`` commands against itself."""

    def run(self, *args: str, stdin: str | None = None) -> Result:
        """One ``raftka`` command in-process, against this cluster."""
        return invoke_raftka(
            self.bootstrap_servers, args, api_timeout_ms=CLI_API_TIMEOUT_MS, stdin=stdin
        )

    def active_controller(self) -> str:
        return self.controllers.controllers[self.controllers.wait_leader()].address
