"""Fault injection for raftka's Jepsen-style tests.

- :mod:`raftka.chaos.netns`: test hosts as network namespaces on one bridge, node
  processes inside them, reachability probes, and the ``up``/``down``/``status`` CLI.
- :mod:`raftka.chaos.nemesis`: reversible faults (partitions, one-way drops, loss,
  delay, pause, kill) with a JSON-lines fault log, and seeded schedules.
- :mod:`raftka.chaos.delay`: the user-space nfnetlink-queue delayer (no netem here).

Network faults need root; process faults do not.
"""

from raftka.chaos.nemesis import (
    KINDS,
    Bridge,
    Delay,
    FaultLog,
    Isolate,
    Kill,
    Loss,
    MajoritiesRing,
    MajorityMinority,
    Nemesis,
    Node,
    OneWay,
    Partition,
    Pause,
    ScheduledFault,
    build_nemesis,
    generate_schedule,
    run_schedule,
)
from raftka.chaos.netns import (
    ROOT_REASON,
    RUNNER,
    Cluster,
    Host,
    NeedsRootError,
    NetnsError,
    Reachability,
    have_root,
)

__all__ = [
    "KINDS",
    "ROOT_REASON",
    "RUNNER",
    "Bridge",
    "Cluster",
    "Delay",
    "FaultLog",
    "Host",
    "Isolate",
    "Kill",
    "Loss",
    "MajoritiesRing",
    "MajorityMinority",
    "NeedsRootError",
    "Nemesis",
    "NetnsError",
    "Node",
    "OneWay",
    "Partition",
    "Pause",
    "Reachability",
    "ScheduledFault",
    "build_nemesis",
    "generate_schedule",
    "have_root",
    "run_schedule",
]
