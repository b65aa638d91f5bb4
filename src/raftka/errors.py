"""kafka-python's ``kafka.errors``, for raftka: ``from kafka.errors import X`` becomes
``from raftka.errors import X``.

Kafka's errors as raftka raises them (:mod:`raftka.common.errors`, imported at once:
it is small and loads nothing else) and, loaded on first use, kafka-python's other
names for them (``NotLeaderForPartitionError``, ``NoBrokersAvailable``,
``KafkaConfigurationError``, ``for_code``, ...) from :mod:`raftka.client.compat.errors`,
which says how each maps.
"""

from __future__ import annotations

import importlib
from typing import Any

from raftka.common.errors import *  # noqa: F403
from raftka.common.errors import KafkaError, error_for_code, error_for_name

__all__ = ["KafkaError", "error_for_code", "error_for_name"]


def __getattr__(name: str) -> Any:
    compat = importlib.import_module("raftka.client.compat.errors")
    try:
        value = getattr(compat, name)
    except AttributeError:
        raise AttributeError(f"module 'raftka.errors' has no attribute {name!r}") from None
    globals()[name] = value
    return value
