"""Replicas are who they say they are (DESIGN invariant 9, KIP-903), with real processes.

One controller and two brokers; a topic with RF=2 whose follower is SIGSTOPped, so
that acks=1 produces leave the leader's HW below its LEO (the follower stays in the
ISR: replica.lag.time.max.ms and broker.session.timeout.ms are a minute here). Then
follower fetches in the paused follower's name, sent over raw HTTP with the typed
``FetchRequest`` and a fetch offset at the leader's LEO, which would move the HW to
the LEO if credited:

(a) broker epoch -1, (b) an epoch other than its registration's (older and newer),
(c) a broker id outside the replica set

are each refused (STALE_BROKER_EPOCH, STALE_BROKER_EPOCH, NOT_LEADER_OR_FOLLOWER) and
the HW a consumer sees is unmoved. Resumed, the real follower fetches with its
registered epoch and the HW reaches the LEO.

A second test restarts the follower with an empty disk (kill -9, its log directory
removed): it may rejoin the ISR only once it holds every committed record, so a
failover to it right after it rejoined loses no acks=all record (invariant 1).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.common.messages import broker as api
from raftka.common.messages import decode, encode
from raftka.common.record import Record, build_batch, iter_records
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.local import LocalCluster, http_json, http_post, wait_for
from raftka.local.brokers import LocalBrokers

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
TOPIC = "guarded"
# Long enough that nothing but a credited fetch can move the HW during the test.
PATIENCE_MS = "60000"


def _fetch(
    address: str, *, replica_id: int, broker_epoch: int, offset: int
) -> api.FetchPartitionResponse:
    request = api.FetchRequest(
        replica_id=replica_id,
        broker_epoch=broker_epoch,
        max_wait_ms=0,
        min_bytes=0,
        partitions=(api.FetchPartition(topic=TOPIC, partition=0, fetch_offset=offset),),
    )
    status, raw, ctype = http_post(address, "/v1/fetch", encode(request), "application/json", 10)
    assert status == 200 and ctype == FRAME_CONTENT_TYPE, raw[:300]
    header, _ = api.decode_frame(raw, api.FetchResponse)
    return header.responses[0]


def _high_watermark(address: str) -> int:
    """The HW as a consumer's fetch answer reports it."""
    answer = _fetch(address, replica_id=-1, broker_epoch=-1, offset=0)
    assert answer.error is None, answer
    return answer.high_watermark


def _produce(address: str, values: list[bytes], *, acks: int) -> int:
    batch = build_batch([Record(v, timestamp_ms=int(time.time() * 1000)) for v in values])
    header = api.ProduceRequest(
        acks=acks,
        timeout_ms=10_000,
        partitions=(api.ProducePartition(topic=TOPIC, partition=0, records_bytes=len(batch)),),
    )
    status, raw, _ = http_post(
        address, "/v1/produce", api.encode_frame(header, [batch]), FRAME_CONTENT_TYPE, 10
    )
    assert status == 200, raw[:300]
    (result,) = decode(raw, api.ProduceResponse).responses
    assert result.error is None, result
    return result.base_offset


def _partition(brokers: LocalBrokers, only: int | None = None) -> dict[str, Any] | None:
    """The partition as the first running broker (or broker ``only``) sees it."""
    for broker_id in brokers.ids if only is None else [only]:
        if not brokers[broker_id].running:
            continue
        md = brokers.metadata(broker_id)
        for t in (md or {}).get("topics", []):
            if t["name"] == TOPIC and t["partitions"]:
                p: dict[str, Any] = t["partitions"][0]
                return p
    return None


def _two_brokers(
    tmp_path: Path, session_timeout_ms: str
) -> Iterator[tuple[LocalCluster, LocalBrokers]]:
    """One controller (broker sessions of ``session_timeout_ms``) and two brokers whose
    ISR changes only by fencing, registration and catching up (lag bound a minute)."""
    with LocalCluster(
        tmp_path, controllers=1, extra_properties={"broker.session.timeout.ms": session_timeout_ms}
    ) as controllers:
        controllers.start()
        controllers.wait_leader()
        with LocalBrokers(
            controllers, count=2, extra_properties={"replica.lag.time.max.ms": PATIENCE_MS}
        ) as brokers:
            brokers.start()
            yield controllers, brokers


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalBrokers]]:
    yield from _two_brokers(tmp_path, PATIENCE_MS)


def _create_topic(controllers: LocalCluster, brokers: LocalBrokers) -> dict[str, Any]:
    controller = next(iter(controllers.controllers.values()))
    body = {
        "topics": [
            {
                "name": TOPIC,
                "num_partitions": 1,
                "replication_factor": 2,
                "configs": {"min.insync.replicas": "1"},
            }
        ]
    }
    status, answer = http_json(controller.address, "/v1/topics", method="POST", body=body)
    assert status == 200 and answer["topics"][0]["error"] is None, answer
    p: dict[str, Any] = wait_for(
        lambda: (q := _partition(brokers)) and q["leader"] >= 0 and len(q["isr"]) == 2 and q,
        timeout_s=DEADLINE_S,
        message=lambda: f"partition not ready: {_partition(brokers)}",
    )
    return p


def _place_topic(
    controllers: LocalCluster, brokers: LocalBrokers
) -> tuple[dict[str, Any], int, int, str]:
    """Create the topic; its partition, the leader's id, the follower's id and the
    leader's address."""
    p = _create_topic(controllers, brokers)
    leader_id: int = p["leader"]
    follower_id: int = next(b for b in p["replicas"] if b != leader_id)
    # The first broker's metadata named the leader; the leader's own may lag it (a
    # produce there was once refused with UNKNOWN_TOPIC_OR_PARTITION).
    wait_for(
        lambda: (q := _partition(brokers, only=leader_id)) is not None and q["leader"] == leader_id,
        timeout_s=DEADLINE_S,
        message=lambda: (
            f"broker {leader_id} does not see itself lead: {_partition(brokers, only=leader_id)}"
        ),
    )
    return p, leader_id, follower_id, brokers[leader_id].address


def test_impostor_follower_fetches_are_refused_and_the_hw_stays(
    cluster: tuple[LocalCluster, LocalBrokers],
) -> None:
    controllers, brokers = cluster
    _, _, follower_id, leader = _place_topic(controllers, brokers)
    follower_health = brokers[follower_id].health()
    assert follower_health is not None
    follower_epoch = int(follower_health["broker_epoch"])
    assert follower_epoch >= 0

    # acks=all: the follower has fetched with its real epoch and the HW is 1.
    assert _produce(leader, [b"first"], acks=-1) == 0
    assert _high_watermark(leader) == 1

    brokers[follower_id].pause()
    try:
        assert _produce(leader, [b"a", b"b", b"c"], acks=1) == 1
        leo = 4
        assert _high_watermark(leader) == 1

        impostors = [
            ("epoch -1", follower_id, -1, "STALE_BROKER_EPOCH"),
            ("an older epoch", follower_id, follower_epoch - 1, "STALE_BROKER_EPOCH"),
            ("a newer epoch", follower_id, follower_epoch + 1, "STALE_BROKER_EPOCH"),
            ("not a replica", 999, follower_epoch, "NOT_LEADER_OR_FOLLOWER"),
        ]
        for what, replica_id, epoch, error in impostors:
            answer_ = _fetch(leader, replica_id=replica_id, broker_epoch=epoch, offset=leo)
            assert answer_.error is not None and answer_.error.error == error, (what, answer_)
            assert answer_.records_bytes == 0, what
            assert _high_watermark(leader) == 1, f"{what}: the HW moved"
    finally:
        brokers[follower_id].resume()

    # The real follower, with its registered epoch, moves the HW to the LEO.
    wait_for(
        lambda: _high_watermark(leader) == leo,
        timeout_s=DEADLINE_S,
        message=lambda: f"HW {_high_watermark(leader)} never reached {leo}",
    )


def _read_all(address: str) -> list[bytes]:
    """Every record below the HW of the partition, from its leader at ``address``.

    An answer without records below the HW is not the end: right after a leadership
    change the leader's log may be held by an I/O worker (its leader-epoch checkpoint)
    and a fetch then reads nothing, as in Kafka a fetch may answer empty; ask again."""
    out: list[bytes] = []
    offset = 0
    deadline = time.monotonic() + DEADLINE_S
    while True:
        request = api.FetchRequest(
            partitions=(api.FetchPartition(topic=TOPIC, partition=0, fetch_offset=offset),),
        )
        status, raw, _ = http_post(address, "/v1/fetch", encode(request), "application/json", 10)
        assert status == 200, raw[:300]
        header, payloads = api.decode_frame(raw, api.FetchResponse)
        answer = header.responses[0]
        assert answer.error is None, answer
        records = [r for r in iter_records(bytes(payloads[0])) if r.offset >= offset]
        if not records:
            if offset >= answer.high_watermark:
                return out
            assert time.monotonic() < deadline, f"no record below the HW at {offset}: {answer}"
            continue
        out += [r.value or b"" for r in records]
        offset = records[-1].offset + 1


@pytest.fixture
def quick_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalBrokers]]:
    """Sessions expire in 2.5 s: a killed broker is fenced quickly."""
    yield from _two_brokers(tmp_path, "2500")


def test_a_follower_restarted_with_an_empty_disk_rejoins_only_caught_up(
    quick_cluster: tuple[LocalCluster, LocalBrokers],
) -> None:
    controllers, brokers = quick_cluster
    p, leader_id, follower_id, leader = _place_topic(controllers, brokers)
    values = [f"v{i}".encode() for i in range(20)]
    for v in values:
        _produce(leader, [v], acks=-1)

    follower = brokers[follower_id]
    follower.kill()
    shutil.rmtree(follower.data_dir / "logs")
    follower.start()
    brokers.wait_unfenced(follower_id)
    # The follower's own view: unfenced, it has applied its registration and with it
    # its removal from the ISR, so seeing itself in the ISR means it rejoined since.
    wait_for(
        lambda: (
            (q := _partition(brokers, follower_id)) is not None
            and sorted(q["isr"]) == sorted(p["isr"])
        ),
        timeout_s=DEADLINE_S,
        message=lambda: f"the restarted follower never rejoined: {_partition(brokers)}",
    )
    # Back in the ISR: it must hold every acknowledged record. Fail over to it.
    brokers[leader_id].kill()
    wait_for(
        lambda: (q := _partition(brokers)) is not None and q["leader"] == follower_id,
        timeout_s=DEADLINE_S,
        message=lambda: f"no failover to {follower_id}: {_partition(brokers)}",
    )
    assert _read_all(follower.address) == values
