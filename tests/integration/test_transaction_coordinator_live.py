"""The transaction coordinator on a real cluster: 3 controllers + 3 brokers as processes.

One module-scoped cluster; the brokers run with ``transaction.state.log.num.partitions=3``
and a 200 ms timed-out-transaction check. Each test uses its own transactional ids and
talks to the brokers' HTTP API as a client would: FindCoordinator(key_type 1), then the
transaction routes at the coordinator, retrying the coordinator errors a client retries.

- FindCoordinator names the leader of the id's __transaction_state partition;
- InitProducerId twice bumps the epoch and fences the older one (PRODUCER_FENCED);
  INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms;
- AddPartitionsToTxn (and its verify_only form), AddOffsetsToTxn, EndTxn(commit) are
  answered; DescribeTransactions shows PrepareCommit or CompleteCommit (CompleteCommit
  once the partition leaders answer WriteTxnMarkers); the marker retries stay few
  (backoff, not a hot loop) whatever the leaders answer; ListTransactions lists it;
- kill -9 of the coordinator's broker: another broker becomes the coordinator and
  loads the state (describe shows the same Ongoing transaction) and writes to it
  (EndTxn(abort) answered);
- an Ongoing transaction past its transaction.timeout.ms is aborted by the coordinator
  (PrepareAbort/CompleteAbort, epoch bumped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from raftka.broker.coordinator.placement import coordinator_partition
from raftka.local import http_json, wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
TXN_PARTITIONS = 3
#: The errors a client retries by finding the coordinator again.
COORDINATOR_ERRORS = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"}
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    props = {
        "replica.lag.time.max.ms": "1500",
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }
    with RaftkaCluster.start(
        tmp_path_factory.mktemp("txn"),
        controller_properties={"broker.session.timeout.ms": "2500"},
        broker_properties=props,
    ) as cluster:
        yield cluster


def _post(cluster: RaftkaCluster, broker: int, path: str, body: dict[str, Any]) -> Any:
    status, answer = http_json(
        cluster.brokers[broker].address, path, method="POST", body=body, timeout_s=20.0
    )
    assert status == 200, (path, body, status, answer)
    return answer


def _running(cluster: RaftkaCluster) -> list[int]:
    return [b for b in cluster.brokers.ids if cluster.brokers[b].running]


def _find(cluster: RaftkaCluster, tid: str) -> int:
    """The coordinator of ``tid`` as a running broker names it (and is running)."""

    def find() -> int | None:
        for b in _running(cluster):
            try:
                answer = _post(cluster, b, "/v1/find-coordinator", {"key": tid, "key_type": 1})
            except OSError:
                continue
            if answer["error"] is None and cluster.brokers[answer["node_id"]].running:
                node: int = answer["node_id"]
                return node
        return None

    found: int = wait_for(find, timeout_s=DEADLINE_S, message=f"no coordinator for {tid}")
    return found


def _error(answer: dict[str, Any]) -> str | None:
    error = answer.get("error")
    return None if error is None else str(error["error"])


def _call(
    cluster: RaftkaCluster,
    tid: str,
    path: str,
    body: dict[str, Any],
    *,
    retry: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``path`` at the coordinator of ``tid``, retried (with a new FindCoordinator) while
    it answers a coordinator error or one of ``retry``."""
    last: list[Any] = []

    def attempt() -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = _post(cluster, _find(cluster, tid), path, body)
        except OSError as e:
            last[:] = [e]
            return None
        last[:] = [answer]
        # Coordinator errors come at the top, per partition (AddPartitionsToTxn) or per
        # id (DescribeTransactions).
        errors = (
            {_error(answer)}
            | {
                str(p["error"]["error"])
                for t in answer.get("results", [])
                for p in t["partitions"]
                if p["error"] is not None
            }
            | {_error(t) for t in answer.get("transaction_states", [])}
        )
        if errors & (COORDINATOR_ERRORS | retry):
            return None
        return answer

    found: dict[str, Any] = wait_for(
        attempt, timeout_s=DEADLINE_S, message=lambda: f"{path} for {tid}: {last}"
    )
    return found


def _init(cluster: RaftkaCluster, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    answer = _call(
        cluster,
        tid,
        "/v1/init-producer-id",
        {"transactional_id": tid, "transaction_timeout_ms": timeout_ms},
        retry=frozenset({"CONCURRENT_TRANSACTIONS"}),
    )
    assert answer["error"] is None, answer
    return answer["producer_id"], answer["producer_epoch"]


def _add(
    cluster: RaftkaCluster,
    tid: str,
    producer: tuple[int, int],
    topic: str,
    *parts: int,
    verify: bool = False,
) -> dict[int, str | None]:
    answer = _call(
        cluster,
        tid,
        "/v1/add-partitions-to-txn",
        {
            "transactional_id": tid,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "topics": [{"name": topic, "partitions": list(parts)}],
            "verify_only": verify,
        },
    )
    (result,) = answer["results"]
    return {
        p["partition_index"]: None if p["error"] is None else p["error"]["error"]
        for p in result["partitions"]
    }


def _end(
    cluster: RaftkaCluster, tid: str, producer: tuple[int, int], *, committed: bool
) -> dict[str, Any]:
    body = {
        "transactional_id": tid,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "committed": committed,
    }
    return _call(cluster, tid, "/v1/end-txn", body)


def _describe(cluster: RaftkaCluster, tid: str) -> dict[str, Any]:
    answer = _call(cluster, tid, "/v1/describe-transactions", {"transactional_ids": [tid]})
    (state,) = answer["transaction_states"]
    assert state["error"] is None, state
    return dict(state)


def test_find_coordinator_names_the_partition_leader(cluster: RaftkaCluster) -> None:
    tid = cluster.unique_name("find")
    coordinator = _find(cluster, tid)
    partition = coordinator_partition(tid, TXN_PARTITIONS)

    def topic_in_metadata() -> dict[str, Any] | None:
        # The answering broker's image named the coordinator; the coordinator's own
        # metadata answer may lag it by a record (propagation is eventual).
        metadata = cluster.brokers.metadata(coordinator) or {}
        found = [t for t in metadata.get("topics", []) if t["name"] == "__transaction_state"]
        return found[0] if found else None

    topic = wait_for(
        topic_in_metadata,
        timeout_s=DEADLINE_S,
        message=f"broker {coordinator}'s metadata never listed __transaction_state",
    )
    assert len(topic["partitions"]) == TXN_PARTITIONS
    leader = {p["partition"]: p["leader"] for p in topic["partitions"]}[partition]
    assert coordinator == leader
    # Another broker is not the coordinator of this id: NOT_COORDINATOR, not an answer.
    other = next(b for b in _running(cluster) if b != coordinator)
    answer = _post(
        cluster,
        other,
        "/v1/init-producer-id",
        {"transactional_id": tid, "transaction_timeout_ms": 1000},
    )
    assert _error(answer) == "NOT_COORDINATOR", answer


def test_init_producer_id_bumps_the_epoch_and_fences_the_older(cluster: RaftkaCluster) -> None:
    tid = cluster.unique_name("fence")
    topic = cluster.create_topic(partitions=2)
    first = _init(cluster, tid)
    assert first[1] == 0
    second = _init(cluster, tid)
    assert second == (first[0], 1)
    assert _add(cluster, tid, first, topic, 0) == {0: "PRODUCER_FENCED"}
    assert _add(cluster, tid, second, topic, 0, 1) == {0: None, 1: None}
    # A partition leader's verify_only: in the ongoing transaction at this epoch, or not.
    assert _add(cluster, tid, second, topic, 0, verify=True) == {0: None}
    too_long = _call(
        cluster,
        tid,
        "/v1/init-producer-id",
        {"transactional_id": tid, "transaction_timeout_ms": 900_001},
    )
    assert _error(too_long) == "INVALID_TRANSACTION_TIMEOUT", too_long


def test_end_txn_commit_is_answered_and_markers_do_not_spin(cluster: RaftkaCluster) -> None:
    tid = cluster.unique_name("commit")
    topic = cluster.create_topic(partitions=2)
    producer = _init(cluster, tid)
    assert _add(cluster, tid, producer, topic, 0, 1) == {0: None, 1: None}
    offsets = _call(
        cluster,
        tid,
        "/v1/add-offsets-to-txn",
        {
            "transactional_id": tid,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "group_id": "g-" + tid,
        },
    )
    assert offsets["error"] is None, offsets
    coordinator = _find(cluster, tid)

    def retries() -> int:
        health = cluster.brokers[coordinator].health() or {}
        return int(health.get("txn_markers", {}).get("retries", 0))

    retries_before = retries()
    ended_at = time.monotonic()
    ended = _end(cluster, tid, producer, committed=True)
    # Transaction version 2: the answer names the epoch to use next (bumped).
    assert ended["error"] is None and ended["producer_epoch"] == producer[1] + 1, ended
    state = _describe(cluster, tid)
    assert state["transaction_state"] in ("PrepareCommit", "CompleteCommit"), state
    assert {t["name"] for t in state["topics"]} in ({topic, "__consumer_offsets"}, set()), state
    listed = _call(cluster, tid, "/v1/list-transactions", {"producer_id_filters": [producer[0]]})
    assert [t["transactional_id"] for t in listed["transaction_states"]] == [tid], listed
    # Whatever the leaders answer (no WriteTxnMarkers route yet, or markers written),
    # the sender backs off (100 ms doubling to 5 s): its 5th failed round comes 1.5 s
    # after the first at the earliest; a hot loop would take milliseconds.
    wait_for(
        lambda: (
            _describe(cluster, tid)["transaction_state"] == "CompleteCommit"
            or retries() >= retries_before + 5
        ),
        timeout_s=DEADLINE_S,
        message="markers neither written nor retried",
    )
    if _describe(cluster, tid)["transaction_state"] != "CompleteCommit":
        assert time.monotonic() - ended_at >= 1.2
    health = cluster.brokers[coordinator].wait_healthy()
    assert health["tasks_failed"] == [], health


def test_kill_9_of_the_coordinator_the_next_one_loads_the_state(cluster: RaftkaCluster) -> None:
    tid = cluster.unique_name("failover")
    topic = cluster.create_topic(partitions=1)
    producer = _init(cluster, tid)
    assert _add(cluster, tid, producer, topic, 0) == {0: None}
    before = _describe(cluster, tid)
    assert before["transaction_state"] == "Ongoing"
    coordinator = _find(cluster, tid)
    cluster.brokers[coordinator].kill()
    try:
        assert _find(cluster, tid) != coordinator
        after = _describe(cluster, tid)
        assert after == before, (before, after)
        # The new coordinator serves the loaded id: the producer's epoch still holds,
        # and it writes (acks=all on the surviving replicas).
        assert _add(cluster, tid, producer, topic, 0, verify=True) == {0: None}
        ended = _end(cluster, tid, producer, committed=False)
        assert ended["error"] is None, ended
        aborted = _describe(cluster, tid)["transaction_state"]
        assert aborted in ("PrepareAbort", "CompleteAbort"), aborted
    finally:
        cluster.brokers[coordinator].start()
        cluster.brokers.wait_unfenced(coordinator)


def test_timed_out_transaction_is_aborted_by_the_coordinator(cluster: RaftkaCluster) -> None:
    tid = cluster.unique_name("timeout")
    topic = cluster.create_topic(partitions=1)
    producer = _init(cluster, tid, timeout_ms=1_000)
    assert _add(cluster, tid, producer, topic, 0) == {0: None}

    def aborted() -> dict[str, Any] | None:
        state = _describe(cluster, tid)
        return state if state["transaction_state"] in ("PrepareAbort", "CompleteAbort") else None

    state = wait_for(aborted, timeout_s=DEADLINE_S, message=f"{tid} not aborted")
    assert state["producer_id"] == producer[0] and state["producer_epoch"] > producer[1], state
    # The old epoch is fenced now.
    assert _add(cluster, tid, producer, topic, 0) == {0: "PRODUCER_FENCED"}
