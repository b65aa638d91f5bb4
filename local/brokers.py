"""Start broker processes against a running :class:`LocalCluster`'s controllers.

:class:`LocalBrokers` writes one config per broker
(``<data>/broker-<id>/broker.properties``, its partition logs under
``<data>/broker-<id>/logs``) and runs each as a real OS process
(``python -m raftka broker --config FILE``) through the same :class:`NodeProcess` as
the controllers, so tests use the same signals (kill -9, SIGSTOP/SIGCONT, SIGTERM).
Broker ids start at 101 by default, apart from the controllers' 1, 2, 3.

Local brokers use shorter timeouts than Kafka's defaults so failures show within a
test's patience (:data:`LOCAL_BROKER_PROPERTIES`): heartbeat 250 ms, replica lag
3000 ms, follower long-poll 200 ms, fetch backoff 100 ms, HW checkpoint 500 ms. The
controllers' ``broker.session.timeout.ms`` decides how fast a dead broker is fenced:
start the LocalCluster with a short one (for example 2000) when a test kills brokers.

A cluster of fewer than three brokers also sizes the internal topics' replication to
itself (:func:`internal_topic_properties`), as Kafka's single-broker example config
does: with the default of 3, ``__consumer_offsets`` and ``__transaction_state`` would
never be created there.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from raftka.local.processes import (
    START_DEADLINE_S,
    LocalCluster,
    NodeGroup,
    NodeProcess,
    configured_node,
    free_ports,
    http_json,
    wait_for,
)

__all__ = [
    "BROKER_ID_BASE",
    "LOCAL_BROKER_PROPERTIES",
    "LocalBrokers",
    "internal_topic_properties",
]

BROKER_ID_BASE: Final = 101
LOCAL_BROKER_PROPERTIES: Final[Mapping[str, str]] = {
    "broker.heartbeat.interval.ms": "250",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "request.timeout.ms": "10000",
    "controlled.shutdown.timeout.ms": "10000",
}


def internal_topic_properties(brokers: int) -> dict[str, str]:
    """The internal topics' replication settings for a cluster of ``brokers`` brokers:
    none (Kafka's defaults) from three on, else replication = the cluster's size."""
    if brokers >= 3:
        return {}
    return {
        "offsets.topic.replication.factor": str(brokers),
        "transaction.state.log.replication.factor": str(brokers),
        "transaction.state.log.min.isr": str(min(2, brokers)),
    }


class LocalBrokers(NodeGroup):
    """N brokers on 127.0.0.1 for a LocalCluster; a context manager like it.

    ``ports`` gives each broker's port (``raftka up``); without it free ports are picked.
    """

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        count: int = 3,
        data_dir: Path | None = None,
        host: str = "127.0.0.1",
        first_id: int = BROKER_ID_BASE,
        ports: Sequence[int] | None = None,
        extra_properties: Mapping[str, str] | None = None,
        kafka_ports: Sequence[int] | None = None,
        kafka_listener: bool = False,
        kafka_security_protocol: str = "PLAINTEXT",
        https: ssl.SSLContext | None = None,
        listener_names: tuple[str, str] | None = None,
    ) -> None:
        """``kafka_listener`` (or ``kafka_ports``, one per broker) gives every broker a
        Kafka binary-protocol listener beside its HTTP API (free ports if not given),
        named ``kafka_security_protocol`` (PLAINTEXT, or SSL with ``ssl.*`` settings in
        ``extra_properties``). ``https``: the brokers' HTTP API is HTTPS (as
        LocalCluster's), reached with this client context. ``listener_names`` (the
        API's, the Kafka listener's) names them freely, Kafka's way: their protocols
        then come from a ``listener.security.protocol.map`` written beside them."""
        assert count >= 1
        assert ports is None or len(ports) == count
        assert listener_names is None or kafka_listener or kafka_ports is not None, (
            "listener_names names the HTTP API and the Kafka listener: ask for the latter"
        )
        self.cluster = cluster
        base = Path(data_dir) if data_dir is not None else cluster.data_dir
        if kafka_ports is None and kafka_listener:
            # One call, so that no port is picked twice.
            picked = free_ports(count if ports is not None else 2 * count, host)
            kafka_ports = picked[-count:]
            ports = ports if ports is not None else picked[:count]
        ports = list(ports) if ports is not None else free_ports(count, host)
        assert kafka_ports is None or len(kafka_ports) == count
        #: broker id -> its Kafka listener's host:port (empty without one)
        self.kafka_addresses: dict[int, str] = {}
        self.brokers: dict[int, NodeProcess] = {}
        for offset, port in enumerate(ports):
            broker_id = first_id + offset
            node_dir = base / f"broker-{broker_id}"
            api = "PLAINTEXT" if https is None else "HTTPS"
            listeners = f"{api}://{host}:{port}"
            names: dict[str, str] = {}
            if kafka_ports is not None:
                # The first listener is the HTTP API; the one after it speaks Kafka.
                api = "HTTP" if https is None else "HTTPS"
                kafka_name = kafka_security_protocol
                if listener_names is not None:
                    api_protocol = "PLAINTEXT" if https is None else "SSL"
                    (api, kafka_name) = listener_names
                    names["listener.security.protocol.map"] = (
                        f"{api}:{api_protocol},{kafka_name}:{kafka_security_protocol}"
                    )
                listeners = f"{api}://{host}:{port},{kafka_name}://{host}:{kafka_ports[offset]}"
                self.kafka_addresses[broker_id] = f"{host}:{kafka_ports[offset]}"
            props = {
                **names,
                "node.id": str(broker_id),
                "process.roles": "broker",
                "controller.quorum.voters": cluster.voters,
                "listeners": listeners,
                "log.dirs": str(node_dir / "logs"),
                **LOCAL_BROKER_PROPERTIES,
                **internal_topic_properties(count),
                **(extra_properties or {}),
            }
            self.brokers[broker_id] = configured_node(
                "broker", node_id=broker_id, host=host, port=port, node_dir=node_dir, props=props
            )
            self.brokers[broker_id].tls = https

    def nodes(self) -> Iterable[NodeProcess]:
        return self.brokers.values()

    def __getitem__(self, broker_id: int) -> NodeProcess:
        return self.brokers[broker_id]

    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The Kafka listeners, for Kafka's own clients ("" without them)."""
        return ",".join(self.kafka_addresses.values())

    def start(self, timeout_s: float = START_DEADLINE_S) -> None:
        """Start every broker and wait until each is registered and unfenced."""
        for node in self.brokers.values():
            node.start()
        for broker_id in self.brokers:
            self.wait_unfenced(broker_id, timeout_s)

    def wait_unfenced(self, broker_id: int, timeout_s: float = START_DEADLINE_S) -> dict[str, Any]:
        node = self.brokers[broker_id]

        def check() -> dict[str, Any] | None:
            if node.popen is not None and node.popen.poll() is not None:
                raise RuntimeError(
                    f"broker {broker_id} exited with {node.popen.returncode}:\n{node.tail()}"
                )
            health = node.health()
            return health if health is not None and health.get("fenced") is False else None

        return wait_for(
            check,
            timeout_s=timeout_s,
            message=lambda: f"broker {broker_id} not unfenced; log:\n{node.tail()}",
        )

    def metadata(self, broker_id: int) -> dict[str, Any] | None:
        """GET /v1/metadata of one broker, or None if it does not answer."""
        try:
            node = self.brokers[broker_id]
            status, body = http_json(node.address, "/v1/metadata", timeout_s=2.0, tls=node.tls)
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None
