"""Helpers for integration tests that need a group with committed offsets."""

from __future__ import annotations

from collections.abc import Mapping

from raftka.client.group_admin import GroupAdmin
from raftka.client.structs import OffsetAndMetadata
from raftka.common.errors import CoordinatorNotAvailableError, NotCoordinatorError
from raftka.common.structs import TopicPartition
from raftka.local import wait_for


def commit_offsets(
    admin: GroupAdmin,
    group: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    *,
    timeout_s: float = 30,
) -> int:
    """Commit ``offsets`` for ``group`` (alter_offsets: the group must be empty) and
    return its coordinator's id. The first group of a cluster makes the brokers create
    __consumer_offsets: the commit is retried until it has a leader and coordinator."""

    def commit() -> bool:
        try:
            admin.alter_offsets(group, offsets)
        except (NotCoordinatorError, CoordinatorNotAvailableError):
            return False
        return True

    wait_for(commit, timeout_s=timeout_s, message=f"no group coordinator for {group}")
    return admin.describe_group(group).coordinator_id
