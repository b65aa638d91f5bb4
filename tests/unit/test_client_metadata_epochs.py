"""KIP-320's metadata rule in the client (``keep_newer_leaders``): an answer whose
leader epoch for a partition is older than the one already known (a deposed broker,
cut off, still believing it leads) does not replace the known leader; a newer epoch
does; a recreated topic (another id) is taken as it is."""

from __future__ import annotations

from raftka.client._transport import ClusterView, TopicView, keep_newer_leaders
from raftka.client.structs import PartitionInfo


def _view(topic_id: str, *leaders: tuple[int, int]) -> ClusterView:
    parts = tuple(
        PartitionInfo("t", i, leader, epoch, (1, 2, 3), (1, 2, 3))
        for i, (leader, epoch) in enumerate(leaders)
    )
    return ClusterView(topics={"t": TopicView("t", topic_id, None, parts)})


def _leaders(view: ClusterView) -> list[tuple[int | None, int]]:
    return [(p.leader, p.leader_epoch) for p in view.topics["t"].partitions]


def test_an_older_epoch_does_not_replace_the_known_leader() -> None:
    """Partition 0 comes back at epoch 3 (stale) after epoch 5 was seen: kept at 5;
    partition 1 moves from epoch 2 to 4: taken."""
    known = _view("id", (2, 5), (1, 2))
    merged = keep_newer_leaders(known, _view("id", (1, 3), (3, 4)))
    assert _leaders(merged) == [(2, 5), (3, 4)]


def test_equal_or_newer_epochs_are_taken_as_they_are() -> None:
    known = _view("id", (2, 5))
    fresh = _view("id", (2, 5))
    assert keep_newer_leaders(known, fresh) is fresh
    assert _leaders(keep_newer_leaders(known, _view("id", (3, 6)))) == [(3, 6)]


def test_a_recreated_topic_is_not_compared() -> None:
    """Another topic id: the epochs start again, so the new answer wins."""
    merged = keep_newer_leaders(_view("old", (2, 9)), _view("new", (1, 0)))
    assert _leaders(merged) == [(1, 0)]
