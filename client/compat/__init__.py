"""kafka-python's and aiokafka's names over raftka's client (``raftka.client.compat``).

Existing Python Kafka code runs with its import lines changed: ``from kafka import
KafkaProducer`` becomes ``from raftka import KafkaProducer`` (and ``kafka.errors`` ->
``raftka.errors``, ``kafka.admin`` -> ``raftka.admin``, ``kafka.structs`` ->
``raftka.structs``); ``from aiokafka import AIOKafkaConsumer`` becomes ``from raftka
import AIOKafkaConsumer``. The classes here are thin adapters over raftka's own clients
(:mod:`.kafka_python`, :mod:`.aiokafka`), never a second implementation; the
exception names are raftka's own classes under kafka-python's names (:mod:`.errors`).
What is supported, tuning-only or refused is listed in docs/client.md ("Coming from
kafka-python or aiokafka").
"""

from raftka.client.compat.aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from raftka.client.compat.kafka_python import (
    ConfigResource,
    ConfigResourceType,
    FutureRecordMetadata,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
)

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ConfigResource",
    "ConfigResourceType",
    "FutureRecordMetadata",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "NewTopic",
]
