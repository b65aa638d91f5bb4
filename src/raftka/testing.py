"""pytest fixtures that start a real local raftka cluster once per test session.

Installed with raftka (a ``pytest11`` entry point), so any project's tests can use::

    def test_round_trip(raftka_cluster, raftka_topic):
        topic = raftka_topic(partitions=3)
        with Producer(bootstrap_servers=raftka_cluster.bootstrap_servers) as p:
            p.send(topic, b"hello").result(10)

- ``raftka_cluster`` (session scope): 3 controllers and ``--raftka-brokers`` brokers
  (default 3; also the ``raftka_brokers`` ini option) as real OS processes on
  127.0.0.1 through :mod:`raftka.local`, data in a session temp directory. Yields a
  :class:`RaftkaCluster` (``bootstrap_servers``, the ``controllers`` and ``brokers``
  handles to kill, pause or restart nodes, ``create_topic``); every process is killed
  at the end of the session. It starts only in a session that asks for it.
- ``raftka_topic`` (function scope): a factory ``raftka_topic(partitions=1,
  replication_factor=None, configs=None, name=None) -> str`` that creates a uniquely
  named topic and returns once every running broker knows all its leaders; the
  topics it made are deleted when the test ends (best effort).

pytest loads this module in every session of every project that has raftka
installed, so importing it must stay cheap and do nothing: it defines the options and
fixtures only, and imports the cluster and client code inside the fixtures.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

import pytest

if TYPE_CHECKING:
    from raftka.client.admin import Admin
    from raftka.local.brokers import LocalBrokers
    from raftka.local.processes import LocalCluster

__all__ = ["RaftkaCluster", "TopicFactory", "raftka_cluster", "raftka_topic"]

BROKERS_DEFAULT: Final = 3
CONTROLLERS: Final = 3
#: How long a fixture waits for the cluster or a topic before failing the test.
READY_TIMEOUT_S: Final = 60.0
API_TIMEOUT_MS: Final = 30_000

TopicFactory = Callable[..., str]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raftka", "raftka local cluster (raftka_cluster fixture)")
    group.addoption(
        "--raftka-brokers",
        type=int,
        default=None,
        dest="raftka_brokers",
        help=f"brokers the raftka_cluster fixture starts (default {BROKERS_DEFAULT}).",
    )
    parser.addini(
        "raftka_brokers",
        f"brokers the raftka_cluster fixture starts (default {BROKERS_DEFAULT}).",
        default=str(BROKERS_DEFAULT),
    )


@dataclass
class RaftkaCluster:
    """A running local cluster: what the ``raftka_cluster`` fixture yields."""

    controllers: LocalCluster
    brokers: LocalBrokers
    _admin: Admin | None = field(default=None, repr=False)
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @classmethod
    def start(
        cls,
        data_dir: Path,
        *,
        brokers: int = BROKERS_DEFAULT,
        controller_properties: Mapping[str, str] | None = None,
        broker_properties: Mapping[str, str] | None = None,
        timeout_s: float = READY_TIMEOUT_S,
        kafka_listener: bool = False,
    ) -> Self:
        """Start 3 controllers and ``brokers`` brokers as real processes with their data
        in ``data_dir``, and return once a controller leads and every broker is
        unfenced; whatever was started is killed if that fails. ``kafka_listener``
        gives each broker a Kafka binary-protocol listener too
        (``brokers.kafka_bootstrap_servers``). Use it as a context manager (or call
        :meth:`close`)."""
        from raftka.local.brokers import LocalBrokers  # noqa: PLC0415  (keeps the plugin import cheap)
        from raftka.local.processes import LocalCluster  # noqa: PLC0415  (keeps the plugin import cheap)

        controllers = LocalCluster(
            data_dir, controllers=CONTROLLERS, extra_properties=controller_properties
        )
        started: LocalBrokers | None = None
        try:
            controllers.start(timeout_s)
            controllers.wait_leader(timeout_s)
            started = LocalBrokers(
                controllers,
                count=brokers,
                extra_properties=broker_properties,
                kafka_listener=kafka_listener,
            )
            started.start(timeout_s)
        except BaseException:
            if started is not None:
                started.close()
            controllers.close()
            raise
        return cls(controllers, started)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def bootstrap_servers(self) -> str:
        return self.brokers.bootstrap_servers

    @property
    def admin(self) -> Admin:
        """A shared blocking admin client (closed with the cluster)."""
        if self._admin is None:
            from raftka.client.admin import Admin  # noqa: PLC0415  (keeps the plugin import cheap)

            self._admin = Admin(
                bootstrap_servers=self.bootstrap_servers, default_api_timeout_ms=API_TIMEOUT_MS
            )
        return self._admin

    def unique_name(self, prefix: str = "test") -> str:
        return f"{prefix}-{os.getpid()}-{next(self._names)}"

    def create_topic(
        self,
        name: str | None = None,
        *,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
        timeout_s: float = READY_TIMEOUT_S,
    ) -> str:
        """Create a topic (replication factor: min(3, brokers) unless given) and wait
        until every running broker's metadata has a leader for each partition."""
        from raftka.client.structs import NewTopic  # noqa: PLC0415  (keeps the plugin import cheap)

        topic = name or self.unique_name()
        rf = replication_factor or min(3, len(self.brokers.ids))
        self.admin.create_topics(
            [NewTopic(topic, partitions, rf, configs=dict(configs or {}))],
            timeout_ms=API_TIMEOUT_MS,
        )
        self.wait_topic(topic, partitions, timeout_s=timeout_s)
        return topic

    def wait_topic(
        self, topic: str, partitions: int | None = None, *, timeout_s: float = READY_TIMEOUT_S
    ) -> None:
        """Wait until every running broker's metadata has ``topic`` (with ``partitions``
        partitions, when given) and a leader for each of its partitions."""
        from raftka.local import wait_for  # noqa: PLC0415  (keeps the plugin import cheap)

        def known_everywhere() -> bool:
            for broker_id in self.brokers.ids:
                if not self.brokers[broker_id].running:
                    continue
                metadata = self.brokers.metadata(broker_id) or {}
                found = {t["name"]: t for t in metadata.get("topics", [])}.get(topic)
                if found is None:
                    return False
                if partitions is not None and len(found["partitions"]) != partitions:
                    return False
                if any(p["leader"] < 0 for p in found["partitions"]):
                    return False
            return True

        wait_for(
            known_everywhere,
            timeout_s=timeout_s,
            message=f"topic {topic} has no leader on every broker",
        )

    def close(self) -> None:
        try:
            if self._admin is not None:
                self._admin.close()
        finally:
            try:
                self.brokers.close()
            finally:
                self.controllers.close()


def _broker_count(config: pytest.Config) -> int:
    option = config.getoption("raftka_brokers")
    count = int(option if option is not None else config.getini("raftka_brokers"))
    if count < 1:
        raise pytest.UsageError(f"--raftka-brokers must be at least 1, not {count}")
    return count


@pytest.fixture(scope="session")
def raftka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RaftkaCluster]:
    """3 controllers and N brokers as real processes for the whole session."""
    data_dir = tmp_path_factory.mktemp("raftka")
    with RaftkaCluster.start(data_dir, brokers=_broker_count(request.config)) as cluster:
        yield cluster


@pytest.fixture
def raftka_topic(raftka_cluster: RaftkaCluster) -> Iterator[TopicFactory]:
    """A factory of uniquely named topics, deleted when the test ends."""
    made: list[str] = []

    def make(
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> str:
        topic = raftka_cluster.create_topic(
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
            **kwargs,
        )
        made.append(topic)
        return topic

    yield make
    if made:
        # Best effort: a test that stopped brokers or controllers may leave them down.
        with contextlib.suppress(Exception):
            raftka_cluster.admin.delete_topics(made, timeout_ms=5_000)
