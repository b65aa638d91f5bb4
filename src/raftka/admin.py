"""kafka-python's ``kafka.admin``, for raftka: ``from kafka.admin import
KafkaAdminClient, NewTopic`` becomes ``from raftka.admin import ...``.

The ACL classes (``ACL``, ``ACLFilter``, ``ResourcePattern``, ``ResourcePatternFilter``)
are kafka-python's too; its ACL enums are raftka's (the same names and codes).
``NewTopic`` here is kafka-python's (``name, num_partitions, replication_factor,
replica_assignments, topic_configs``); raftka's own is ``raftka.client.NewTopic``.
Loaded on first use, so importing this module is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from raftka.client.compat.kafka_python import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewTopic,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from raftka.client.structs import NewPartitions

_LAZY: Final = {
    "ACL": "raftka.client.compat.kafka_python",
    "ACLFilter": "raftka.client.compat.kafka_python",
    "ACLOperation": "raftka.client.compat.kafka_python",
    "ACLPermissionType": "raftka.client.compat.kafka_python",
    "ACLResourcePatternType": "raftka.client.compat.kafka_python",
    "ResourcePattern": "raftka.client.compat.kafka_python",
    "ResourcePatternFilter": "raftka.client.compat.kafka_python",
    "ResourceType": "raftka.client.compat.kafka_python",
    "ConfigResource": "raftka.client.compat.kafka_python",
    "ConfigResourceType": "raftka.client.compat.kafka_python",
    "KafkaAdminClient": "raftka.client.compat.kafka_python",
    "NewTopic": "raftka.client.compat.kafka_python",
    "NewPartitions": "raftka.client.structs",
}

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "ConfigResource",
    "ConfigResourceType",
    "KafkaAdminClient",
    "NewPartitions",
    "NewTopic",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raftka.admin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
