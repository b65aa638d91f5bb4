"""kafka-python's ``kafka.structs``, for raftka: ``from kafka.structs import
TopicPartition, OffsetAndMetadata`` becomes ``from raftka.structs import ...``.

The very classes raftka's clients use: ``TopicPartition(topic, partition)`` and
``OffsetAndMetadata(offset, metadata, leader_epoch)`` (kafka-python's three fields;
here ``metadata`` defaults to ``""`` and ``leader_epoch`` to ``None``, and the
kafka-python adapters also take ``None`` metadata and ``-1`` for an unknown epoch) from
:mod:`raftka.common.structs`, which is cheap to import; ``OffsetAndTimestamp(offset,
timestamp, leader_epoch)`` from :mod:`raftka.client.structs`, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raftka.common.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from raftka.client.structs import OffsetAndTimestamp

__all__ = ["OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition"]


def __getattr__(name: str) -> Any:
    if name != "OffsetAndTimestamp":
        raise AttributeError(f"module 'raftka.structs' has no attribute {name!r}")
    value = importlib.import_module("raftka.client.structs").OffsetAndTimestamp
    globals()[name] = value
    return value
