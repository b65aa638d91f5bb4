"""``raftka perf``: one group over the layers' performance tools.

``log`` (storage alone) lives in :mod:`raftka.storage.perf`; ``produce`` and
``consume`` (the client against brokers) in :mod:`raftka.client.cli.perf`. The
client must not import raft, so the group that joins them lives here, at the top
level, which may import both.
"""

from __future__ import annotations

import click

from raftka.client.cli.perf import consume_command, produce_command
from raftka.storage.perf import perf_log

__all__ = ["perf_command"]


@click.group("perf")
def perf_command() -> None:
    """Performance tools: storage (log), producer (produce) and consumer (consume)."""


perf_command.add_command(perf_log, "log")
perf_command.add_command(produce_command, "produce")
perf_command.add_command(consume_command, "consume")
