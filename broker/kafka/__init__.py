"""Kafka's binary protocol on every broker (docs/kafka-protocol.md).

:mod:`.framing` is the pure part (frames and headers, bytes in and out);
:mod:`.listener` the asyncio server (connections, limits, response order);
:mod:`.apis` the table of supported APIs and versions and the thin handlers that decode
a request with ``kio``, call the broker's existing services and encode the answer.
"""

from raftka.broker.kafka.listener import KafkaListener

__all__ = ["KafkaListener"]
