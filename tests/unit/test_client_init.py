"""raftka.client's public surface is curated: ``__all__`` is pinned here, so adding or
removing a name is a deliberate change to this list; every name in it resolves."""

from __future__ import annotations

import raftka.client

EXPECTED = {
    "Admin",
    "AdminConfig",
    "AlterConfigOp",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncGroupAdmin",
    "AsyncProducer",
    "ClientConfigError",
    "ClusterDescription",
    "ConfigEntry",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerInterceptor",
    "ConsumerRebalanceListener",
    "GroupAdmin",
    "ConsumerRecord",
    "KafkaError",
    "ListedOffset",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "Producer",
    "ProducerInterceptor",
    "ProducerRecord",
    "ProducerConfig",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
}


def test_all_is_pinned_and_resolves() -> None:
    """__all__ equals the pinned set, is sorted, and each name is an attribute."""
    assert set(raftka.client.__all__) == EXPECTED
    assert list(raftka.client.__all__) == sorted(raftka.client.__all__)
    for name in raftka.client.__all__:
        assert getattr(raftka.client, name) is not None


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
