"""The group leader's assignment step turns any assignor failure into one clear group
error (IllegalStateError naming the group and the assignor), and the contract check
on an assignment runs with raise, so ``python -O`` cannot let an invalid one out.

How: a misbehaving assignor is registered under a test protocol name; the leader's
step (``run_assignor``) is called as the join does; and the contract check is run in a
``python -O`` subprocess on an assignment that gives a partition to a member that does
not subscribe to its topic.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from raftka.client.consumer import assignors
from raftka.client.consumer.assignors import PartitionAssignor, Subscription
from raftka.client.consumer.coordinator_client import run_assignor
from raftka.client.errors import IllegalStateError
from raftka.common.structs import TopicPartition


class _Broken(PartitionAssignor):
    name = "broken"

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        raise AssertionError("sticky: partitions left but every member is full")


class _Invalid(PartitionAssignor):
    name = "invalid"

    def _assign(
        self, members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
    ) -> Mapping[str, Sequence[TopicPartition]]:
        return {"m0": [TopicPartition("D", 0)]}  # m0 subscribes to E only


MEMBERS = {"m0": Subscription(("E",)), "m1": Subscription(("D",))}
COUNTS = {"D": 1, "E": 1}


@pytest.mark.parametrize("assignor", [_Broken, _Invalid])
def test_an_assignor_failure_is_one_clear_group_error(
    monkeypatch: pytest.MonkeyPatch, assignor: type[PartitionAssignor]
) -> None:
    monkeypatch.setitem(assignors.ASSIGNORS, assignor.name, assignor)
    with pytest.raises(IllegalStateError) as info:
        run_assignor("g1", assignor.name, MEMBERS, COUNTS)
    message = str(info.value)
    assert "'g1'" in message and f"'{assignor.name}' assignor failed" in message


def test_an_unknown_protocol_is_the_same_group_error() -> None:
    with pytest.raises(IllegalStateError, match="'nope' assignor failed"):
        run_assignor("g1", "nope", MEMBERS, COUNTS)


def test_the_contract_check_survives_python_dash_o() -> None:
    probe = (
        "from raftka.client.consumer.assignors.base import _check_valid, Assignment, "
        "Subscription, InvalidAssignmentError\n"
        "from raftka.common.structs import TopicPartition as TP\n"
        "try:\n"
        "    _check_valid({'m0': Assignment((TP('D', 0),))}, {'m0': Subscription(('E',))},"
        " {'D': 1, 'E': 1})\n"
        "except InvalidAssignmentError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.startswith("refused: D-0 assigned to m0, not subscribed"), out.stdout
