"""raftka.client's public surface is curated: ``__all__`` is pinned here, so adding or
removing a name is a deliberate change to this list; every name in it resolves."""

from __future__ import annotations

import raftka.client


def test_subscribe_without_group_id_is_refused() -> None:
    """subscribe() on either consumer face without a group_id raises IllegalStateError
    naming what is missing (a group) and the alternative (assign), as Kafka's
    InvalidGroupIdException does."""
    import pytest

    from raftka.common.errors import IllegalStateError

    for cls in (raftka.client.AsyncConsumer, raftka.client.Consumer):
        consumer = cls(bootstrap_servers="127.0.0.1:1")
        with pytest.raises(IllegalStateError, match=r"consumer groups.*assign\(\)"):
            consumer.subscribe(["t"])


def test_names_users_import_from_before_the_split_still_resolve() -> None:
    """The codec, errors and shared structs moved to raftka.common; what users of the
    client imported keeps working and is the very same object (an ``except`` on the
    old name still catches what the servers raise)."""
    import raftka.client.errors
    import raftka.client.structs
    import raftka.common.errors
    import raftka.common.structs

    assert raftka.client.TopicPartition is raftka.common.structs.TopicPartition
    assert raftka.client.OffsetAndMetadata is raftka.common.structs.OffsetAndMetadata
    assert raftka.client.structs.TopicPartition is raftka.common.structs.TopicPartition
    assert raftka.client.KafkaError is raftka.common.errors.KafkaError
    public = [n for n in dir(raftka.common.errors) if n.endswith("Error")]
    assert len(public) > 50
    for name in public:
        assert getattr(raftka.client.errors, name) is getattr(raftka.common.errors, name)
    assert raftka.client.errors.error_for_name("NOT_CONTROLLER").name == "NOT_CONTROLLER"
