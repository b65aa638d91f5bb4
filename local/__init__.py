"""raftka.local: run raftka processes on this machine (local clusters, test fixtures)."""

from raftka.local.processes import (
    LOCAL_QUORUM_PROPERTIES,
    LocalCluster,
    NodeProcess,
    free_port_run,
    free_ports,
    http_json,
    http_post,
    wait_for,
)

__all__ = [
    "LOCAL_QUORUM_PROPERTIES",
    "LocalCluster",
    "NodeProcess",
    "free_port_run",
    "free_ports",
    "http_json",
    "http_post",
    "wait_for",
]
