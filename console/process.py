"""The console as a child process of ``raftka up`` (``python -m raftka console``).

A separate process, like every node of ``raftka up``: the console's clients and its
aiohttp server then never share an event loop (or the GIL) with ``up``'s monitor loop,
and a console failure cannot take the cluster's foreground process down with it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = ["STOP_DEADLINE_S", "ConsoleProcess"]

#: How long a stopped console may take to close its clients before it is killed.
STOP_DEADLINE_S: Final = 10.0


class ConsoleProcess:
    """``raftka console --port PORT --bootstrap-server ...``, its output in ``log_path``."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        bootstrap_servers: str,
        log_path: Path,
        command_config: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.bootstrap_servers = bootstrap_servers
        self.log_path = log_path
        #: The clients' settings for an HTTPS API (``--command-config``).
        self.command_config = command_config
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> None:
        args = [sys.executable, "-m", "raftka", "console", "--host", self.host]
        args += ["--port", str(self.port), "--bootstrap-server", self.bootstrap_servers]
        if self.command_config is not None:
            args += ["--command-config", str(self.command_config)]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def exit_code(self) -> int | None:
        """The exit code once the process has ended, None while it runs (or before)."""
        return None if self.popen is None else self.popen.poll()

    def stop(self) -> None:
        """SIGTERM (aiohttp closes its clients), then SIGKILL after STOP_DEADLINE_S."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
