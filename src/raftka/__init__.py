"""raftka: a KRaft-style replicated commit log in Python.

The distribution's code lives in the repository's top-level folders (``common/``,
``storage/``, ``raft/``, ``server_common/``, ``metadata/``, ``broker/``, ``client/``,
``local/``, ``chaos/``); installed, each imports as ``raftka.<folder>``. This package
root holds the ``raftka`` command, the pytest plugin (see the README's layout) and,
for applications, the client's names at the top level:

- raftka's own clients: ``from raftka import Producer, Consumer, Admin,
  AsyncProducer, AsyncConsumer, AsyncAdmin, TopicPartition`` (the same objects as in
  :mod:`raftka.client`);
- kafka-python's and aiokafka's (``raftka.client.compat``): ``from raftka import
  KafkaProducer, KafkaConsumer, KafkaAdminClient, AIOKafkaProducer,
  AIOKafkaConsumer``, with ``raftka.errors``, ``raftka.admin`` and ``raftka.structs``
  in place of ``kafka.errors``, ``kafka.admin`` and ``kafka.structs``.

Every one of them is loaded on first use (a module ``__getattr__``), so ``import
raftka`` stays cheap: the ``raftka`` command and the pytest plugin, which import this
package in every process, load no client code and no aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from raftka.client import (
        Admin,
        AsyncAdmin,
        AsyncConsumer,
        AsyncProducer,
        Consumer,
        ConsumerRebalanceListener,
        OffsetAndMetadata,
        Producer,
        TopicPartition,
    )
    from raftka.client.compat import (
        AIOKafkaConsumer,
        AIOKafkaProducer,
        KafkaAdminClient,
        KafkaConsumer,
        KafkaProducer,
    )

__version__ = "0.1.0"

#: Each lazily exported name and the module it comes from.
_LAZY: Final = {
    "Admin": "raftka.client",
    "AsyncAdmin": "raftka.client",
    "AsyncConsumer": "raftka.client",
    "AsyncProducer": "raftka.client",
    "Consumer": "raftka.client",
    "ConsumerRebalanceListener": "raftka.client",
    "OffsetAndMetadata": "raftka.client",
    "Producer": "raftka.client",
    "TopicPartition": "raftka.client",
    "AIOKafkaConsumer": "raftka.client.compat",
    "AIOKafkaProducer": "raftka.client.compat",
    "KafkaAdminClient": "raftka.client.compat",
    "KafkaConsumer": "raftka.client.compat",
    "KafkaProducer": "raftka.client.compat",
}

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRebalanceListener",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "OffsetAndMetadata",
    "Producer",
    "TopicPartition",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raftka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
