"""Creating a coordinator's internal topic: the configured replication factor, never
capped at the live brokers (Kafka's rule), and a refusal named in FindCoordinator's answer.

Broker 1 in process (real ReplicaManager, no sockets) with a fake controller channel that
records the creation requests and answers as raftka's controller does when too few
brokers are usable: INVALID_REPLICATION_FACTOR in the topic's result.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from broker_harness import BrokerHarness, register_brokers, run, until

from raftka.broker.coordinator.coordinator_topic import CoordinatorTopic
from raftka.broker.lifecycle import ControllerChannel
from raftka.common.errors import CoordinatorNotAvailableError

REFUSAL = {
    "error": "INVALID_REPLICATION_FACTOR",
    "error_code": 38,
    "message": "Unable to replicate the partition 3 time(s): only 1 broker(s) are usable",
}


class Controller:
    """Records each creation body; answers with ``error`` (None: created)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = REFUSAL

    async def post(self, path: str, body: Any, *, timeout_ms: int) -> dict[str, Any]:
        assert path == "/v1/topics"
        self.bodies.append(body)
        return {"topics": [{"name": body["topics"][0]["name"], "error": self.error}]}


def _topic(h: BrokerHarness, controller: Controller) -> CoordinatorTopic:
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    return CoordinatorTopic(
        name="__transaction_state",
        num_partitions=50,
        replication_factor=3,
        replication_setting="transaction.state.log.replication.factor",
        min_isr=2,
        configs={"cleanup.policy": "compact"},
        replicas=h.manager,
        channel=lambda: cast(ControllerChannel, controller),
        request_timeout_ms=1000,
        spawn=spawn,
    )


def test_one_live_broker_gets_no_topic_and_the_answer_names_the_setting(
    tmp_path: Path,
) -> None:
    """With one live broker the request still asks for 3 replicas and min.isr 2; the
    controller's refusal is kept and FindCoordinator's error names the setting to lower;
    a later success clears it."""

    async def body() -> None:
        h = BrokerHarness(tmp_path)
        h.commit(*register_brokers([1]))
        controller = Controller()
        topic = _topic(h, controller)
        first = topic.locate("tx", "transactional id")
        assert isinstance(first.error, CoordinatorNotAvailableError)
        assert "being created" in str(first.error)
        await until(lambda: bool(controller.bodies), "a creation request")
        (request,) = controller.bodies[0]["topics"]
        assert request["replication_factor"] == 3
        assert request["configs"] == {"cleanup.policy": "compact", "min.insync.replicas": "2"}

        def refused() -> bool:
            error = topic.locate("tx", "transactional id").error
            return "cannot be created yet" in str(error)

        await until(refused, "the refusal in FindCoordinator's answer")
        error = str(topic.locate("tx", "transactional id").error)
        assert "transaction.state.log.replication.factor=3" in error, error
        assert "INVALID_REPLICATION_FACTOR" in error, error
        controller.error = None
        asked = len(controller.bodies)
        await until(lambda: len(controller.bodies) > asked, "another creation request")
        await until(
            lambda: "being created" in str(topic.locate("tx", "transactional id").error),
            "the refusal forgotten after a creation",
        )

    run(body)
