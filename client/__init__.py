"""raftka.client: Kafka's client library for raftka.

``Producer``/``Consumer``/``Admin`` block; ``AsyncProducer``/``AsyncConsumer``/
``AsyncAdmin`` are their asyncio twins (one core under both faces). Options are
Kafka's, in snake_case, as typed keyword arguments with Kafka's defaults; constructors
do no I/O. Errors are Kafka's (:mod:`raftka.common.errors`).
"""

from raftka.client.admin import (
    Admin,
    AlterConfigOp,
    AsyncAdmin,
    ClusterDescription,
    ConfigEntry,
    ListedOffset,
)
from raftka.client.config import (
    AdminConfig,
    ClientConfigError,
    ConsumerConfig,
    ProducerConfig,
)
from raftka.client.consumer.consumer import AsyncConsumer, Consumer
from raftka.client.consumer.listener import ConsumerGroupMetadata, ConsumerRebalanceListener
from raftka.client.group_admin import AsyncGroupAdmin, GroupAdmin
from raftka.client.interceptors import ConsumerInterceptor, ProducerInterceptor, ProducerRecord
from raftka.client.producer.producer import AsyncProducer, Producer
from raftka.client.structs import (
    ConsumerRecord,
    NewPartitions,
    NewTopic,
    Node,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)
from raftka.common.errors import KafkaError

__all__ = [
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
    "ConsumerRecord",
    "GroupAdmin",
    "KafkaError",
    "ListedOffset",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "Producer",
    "ProducerConfig",
    "ProducerInterceptor",
    "ProducerRecord",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
