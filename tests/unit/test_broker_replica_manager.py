"""The ReplicaManager shell, in process: metadata -> roles, produce, fetch, ISR changes.

Each test builds a broker's view of the cluster from metadata records (through
MetadataApplier, as the broker does), drives ReplicaManager directly inside an asyncio
loop (no sockets; real segment logs in a temp dir; a fake clock where time matters for
the replica state) and checks the contract of the pure cores it wraps: acks=all waits
for the followers' fetches and completes through the purgatory, times out with
REQUEST_TIMED_OUT, is refused NOT_ENOUGH_REPLICAS under min.insync.replicas; consumers
never read above the HW and a parked fetch is woken by the append; a follower appends,
follows the leader's HW and truncates on a diverging epoch; ISR expansion and shrink go
through the AlterPartition sender; DeleteRecords moves the log start through the
core and refuses a bad body as INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any, cast

import msgspec
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from broker_harness import AppendGate, BrokerHarness, Clock, register_brokers, run, until

from raftka.broker.delete_records import delete_records_routes
from raftka.broker.io_workers import APPEND_HOLD_DOWN_MS, WORKERS
from raftka.broker.replication.data_plane import TxnMarkerWrite
from raftka.broker.replication.fetcher import ReplicaFetcher, _FetcherLinks, _plain_spawn
from raftka.broker.replication.manager import EARLIEST_TIMESTAMP, FetchPartition
from raftka.broker.replication.partition_state import EpochEndOffset
from raftka.common.messages import broker as api
from raftka.common.messages import decode
from raftka.common.messages.controller import AlterPartitionRequest, AlterPartitionResponse
from raftka.common.record import Record, build_batch, iter_records
from raftka.common.time import monotonic_ms
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.metadata.metadata_records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from raftka.server_common.http_errors import error_middleware, json_response

TOPIC_ID = str(uuid.uuid4())


class _Harness(BrokerHarness):
    """The harness over brokers 1, 2 and 3; AlterPartition requests are recorded and
    granted as asked."""

    def __init__(self, tmp_path: Path, **kwargs: Any) -> None:
        super().__init__(tmp_path, **kwargs)
        self.alters: list[dict[str, Any]] = []
        self.manager.alter_partition = self._alter

    async def _alter(
        self, request: AlterPartitionRequest, *, timeout_ms: int
    ) -> AlterPartitionResponse:
        self.alters.append(msgspec.structs.asdict(request))
        return AlterPartitionResponse(
            topic_id=request.topic_id,
            partition=request.partition,
            leader=1,
            leader_epoch=request.leader_epoch,
            partition_epoch=request.partition_epoch + 1,
            isr=list(request.new_isr),
        )

    def topic(self, *, leader: int, isr: tuple[int, ...], min_isr: int | None = None) -> None:
        records: list[MetadataRecord] = [
            *register_brokers(),
            TopicRecord(name="t", topic_id=TOPIC_ID),
            PartitionRecord(
                partition_id=0, topic_id=TOPIC_ID, replicas=(1, 2, 3), isr=isr, leader=leader
            ),
        ]
        if min_isr is not None:
            records.append(
                ConfigRecord(
                    resource_type="topic",
                    resource_name="t",
                    name="min.insync.replicas",
                    value=str(min_isr),
                )
            )
        self.commit(*records)

    async def follower_fetch(
        self,
        replica: int,
        offset: int,
        last_epoch: int | None = 0,
        *,
        broker_epoch: int | None = None,
    ) -> Any:
        """A follower fetch by ``replica``, with its broker epoch (by default the one
        ``register_brokers()`` registered, equal to its id)."""
        (result,) = await self.manager.fetch(
            replica_id=replica,
            broker_epoch=replica if broker_epoch is None else broker_epoch,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            partitions=[FetchPartition("t", 0, offset, last_fetched_epoch=last_epoch)],
        )
        return result


def _batch(*values: bytes, base_offset: int = 0, epoch: int = 0) -> bytes:
    return build_batch(
        [Record(v, timestamp_ms=1_000 + i) for i, v in enumerate(values)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def test_acks_all_completes_when_followers_reach_it_and_consumers_stay_below_hw(
    tmp_path: Path,
) -> None:
    """acks=all parks until every ISR member fetched past the batch; until then a
    consumer reads nothing (HW 0) although the leader's log holds the records."""

    async def body() -> None:
        h = _Harness(tmp_path, clock=Clock())
        h.topic(leader=1, isr=(1, 2, 3))
        produce = asyncio.create_task(
            h.manager.produce(
                acks=-1, timeout_ms=10_000, entries=[("t", 0, _batch(b"a", b"b", b"c"))]
            )
        )
        await until(lambda: len(h.manager.purgatory) == 1, "the produce appended and parked")
        assert not produce.done()
        assert (await h.consume(0)).records == b""
        await h.follower_fetch(2, 3)
        assert not produce.done(), "replica 3 is in the ISR and has not fetched"
        await h.follower_fetch(3, 3)
        (result,) = await asyncio.wait_for(produce, 1)
        assert result.error is None and result.base_offset == 0
        consumed = await h.consume(0)
        assert [r.value for r in iter_records(consumed.records)] == [b"a", b"b", b"c"]
        assert consumed.high_watermark == 3
        # Appended but not replicated: above the HW, invisible to consumers.
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"d"))])
        assert (await h.consume(0)).records == consumed.records
        await h.manager.close()

    run(body)


def test_acks_all_times_out_and_min_insync_refuses(tmp_path: Path) -> None:
    """A produce no follower replicates fails REQUEST_TIMED_OUT at its timeout; with the
    ISR below the topic's min.insync.replicas acks=all is refused before the append
    (NOT_ENOUGH_REPLICAS) while acks=1 is appended; acks=2 is INVALID_REQUIRED_ACKS."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1, 2), min_isr=3)
        (refused,) = await h.manager.produce(
            acks=-1, timeout_ms=1_000, entries=[("t", 0, _batch(b"x"))]
        )
        assert refused.error is not None and refused.error.name == "NOT_ENOUGH_REPLICAS"
        (one,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"y"))])
        assert one.error is None and one.base_offset == 0
        (bad,) = await h.manager.produce(acks=2, timeout_ms=1_000, entries=[("t", 0, _batch(b"z"))])
        assert bad.error is not None and bad.error.name == "INVALID_REQUIRED_ACKS"
        h.commit(
            ConfigRecord(
                resource_type="topic", resource_name="t", name="min.insync.replicas", value="1"
            )
        )
        h.commit(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(1, 2), leader=1))
        (timed_out,) = await h.manager.produce(
            acks=-1, timeout_ms=30, entries=[("t", 0, _batch(b"w"))]
        )
        assert timed_out.error is not None and timed_out.error.name == "REQUEST_TIMED_OUT"
        await h.manager.close()

    run(body)


def test_parked_consumer_fetch_is_woken_by_the_append(tmp_path: Path) -> None:
    """A consumer fetch at the log end parks (max_wait_ms 10 s) and returns as soon as
    an acks=1 append on a single-replica ISR moves the HW, not at its deadline."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1,))
        fetch = asyncio.create_task(h.consume(0, max_wait_ms=10_000))
        await asyncio.sleep(0)
        assert not fetch.done()
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"hello"))])
        result = await asyncio.wait_for(fetch, 2)
        assert [r.value for r in iter_records(result.records)] == [b"hello"]
        await h.manager.close()

    run(body)


def test_a_fetch_leaves_no_watch_behind(tmp_path: Path) -> None:
    """A parked fetch that times out, and one woken by an append, take their watch back
    from the partition's signal: an idle partition's signal does not collect a future
    per fetch that ever parked on it."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1,))
        signal = h.manager.partitions[("t", 0)].signal
        timed_out = await h.consume(0, max_wait_ms=30)
        assert timed_out.records == b""
        assert signal.watchers == 0
        fetch = asyncio.create_task(h.consume(0, max_wait_ms=10_000))
        await asyncio.sleep(0)
        assert signal.watchers == 1  # parked
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"hello"))])
        await asyncio.wait_for(fetch, 2)
        assert signal.watchers == 0
        await h.manager.close()

    run(body)


def test_errors_name_the_leader(tmp_path: Path) -> None:
    """A produce or consumer fetch on a follower answers NOT_LEADER_OR_FOLLOWER with the
    current leader's id, epoch and address; an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
    a consumer fetch beyond the log end OFFSET_OUT_OF_RANGE; a corrupt batch
    CORRUPT_MESSAGE."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=2, isr=(1, 2, 3))
        (r,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"x"))])
        assert r.error is not None and r.error.name == "NOT_LEADER_OR_FOLLOWER"
        assert r.current_leader == {"leader_id": 2, "leader_epoch": 0, "address": "127.0.0.1:9002"}
        (u,) = await h.manager.produce(
            acks=1, timeout_ms=1_000, entries=[("nope", 0, _batch(b"x"))]
        )
        assert u.error is not None and u.error.name == "UNKNOWN_TOPIC_OR_PARTITION"
        f = await h.consume(0)
        assert f.error.name == "NOT_LEADER_OR_FOLLOWER" and f.current_leader["leader_id"] == 2
        h.commit(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        assert (await h.consume(5)).error.name == "OFFSET_OUT_OF_RANGE"
        broken = bytearray(_batch(b"x"))
        broken[-1] ^= 0xFF
        (c,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, bytes(broken))])
        assert c.error is not None and c.error.name == "CORRUPT_MESSAGE"
        await h.manager.close()

    run(body)


def test_follower_appends_follows_hw_and_truncates_on_divergence(tmp_path: Path) -> None:
    """As a follower: the leader's batches are appended at our LEO and our HW becomes
    min(leader HW, LEO); a diverging epoch truncates log and epoch cache to the
    leader's end of that epoch."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=2, isr=(1, 2, 3))
        p = h.manager.partitions[("t", 0)]
        await h.manager.on_follower_records(
            p,
            records=_batch(b"a", b"b", epoch=0) + _batch(b"c", b"d", base_offset=2, epoch=0),
            leader_high_watermark=10,
            leader_log_start_offset=0,
        )
        assert p.log.log_end_offset == 4 and p.state.high_watermark == 4 == p.log.high_watermark
        # Our epoch 0 runs to 4; the leader's epoch 0 ended at 2.
        await h.manager.on_follower_diverging(
            p, diverging=EpochEndOffset(0, 2), leader_high_watermark=2, leader_log_start_offset=0
        )
        assert p.log.log_end_offset == 2 == p.state.log_end_offset
        assert p.state.high_watermark <= 2
        await h.manager.close()

    run(body)


def test_a_slow_follower_append_moves_the_next_follower_writes_to_the_workers(
    tmp_path: Path,
) -> None:
    """A follower append slow inline (50 ms) moves the log dir to worker mode: the next
    follower append and a truncation run on a worker; after the hold-down the next
    follower append runs inline again."""

    async def body() -> None:
        clock = Clock()
        h = _Harness(tmp_path, clock=clock)
        h.topic(leader=2, isr=(1, 2, 3))
        p = h.manager.partitions[("t", 0)]
        threads: list[int] = []
        real_append, real_truncate = p.log.append_as_follower, p.log.truncate_to

        def append(records: bytes) -> Any:
            threads.append(threading.get_ident())
            if len(threads) == 1:
                time.sleep(0.05)  # the injected slow write, not a synchronisation
            return real_append(records)

        def truncate(offset: int) -> Any:
            threads.append(threading.get_ident())
            return real_truncate(offset)

        p.log.append_as_follower = append  # type: ignore[method-assign]
        p.log.truncate_to = truncate  # type: ignore[method-assign]

        async def follow(*values: bytes, at: int) -> None:
            await h.manager.on_follower_records(
                p,
                records=_batch(*values, base_offset=at, epoch=0),
                leader_high_watermark=0,
                leader_log_start_offset=0,
            )
            assert p.log.log_end_offset == at + len(values)

        loop_thread = threading.get_ident()
        await follow(b"a", b"b", at=0)
        await follow(b"c", at=2)
        await h.manager.on_follower_diverging(
            p, diverging=EpochEndOffset(0, 2), leader_high_watermark=0, leader_log_start_offset=0
        )
        assert p.log.log_end_offset == 2
        assert len(threads) == 3, "two appends and a truncation"
        assert threads[0] == loop_thread and loop_thread not in threads[1:], threads
        clock.now_ms += APPEND_HOLD_DOWN_MS
        await follow(b"c2", at=2)
        assert threads[-1] == loop_thread
        assert (h.manager.appends.to_workers, h.manager.appends.to_inline) == (1, 1)
        await h.manager.close()

    run(body)


def test_an_isr_change_is_counted_when_its_metadata_arrives_before_the_answer(
    tmp_path: Path,
) -> None:
    """The controller's answer to AlterPartition can come after the broker already applied
    the committed ISR from the metadata log (which ends the pending proposal): the change
    happened, and the ISR-expansion counter (Kafka counts on the answer) still counts it
    (a Prometheus test caught it uncounted)."""

    async def body() -> None:
        h = _Harness(tmp_path)
        granted = h.manager.alter_partition

        async def metadata_first(
            request: AlterPartitionRequest, *, timeout_ms: int
        ) -> AlterPartitionResponse:
            answer = await granted(request, timeout_ms=timeout_ms)
            h.commit(
                PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=tuple(answer.isr))
            )
            return answer

        h.manager.alter_partition = metadata_first
        h.topic(leader=1, isr=(1, 2))
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"a"))])
        await h.follower_fetch(3, 1)
        await until(lambda: h.alters, "no AlterPartition sent for the caught-up follower")
        await until(
            lambda: h.manager.partitions[("t", 0)].state.committed_isr == {1, 2, 3},
            "the expanded ISR never applied",
        )
        assert (h.manager.isr_expands, h.manager.isr_shrinks) == (1, 0)
        await h.manager.close()

    run(body)


def test_leader_reports_divergence_and_expands_then_shrinks_isr(tmp_path: Path) -> None:
    """As leader: a follower claiming offsets past our end of its epoch gets a diverging
    epoch; a caught-up follower outside the ISR is added through AlterPartition; a
    follower silent for replica.lag.time.max.ms is removed through AlterPartition."""

    async def body() -> None:
        clock = Clock()
        h = _Harness(tmp_path, clock=clock, replica_lag_time_max_ms=1_000)
        h.topic(leader=1, isr=(1, 2))
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"a", b"b"))])
        diverging = await h.follower_fetch(2, 5, last_epoch=0)
        assert diverging.diverging_epoch == EpochEndOffset(0, 2)
        await h.follower_fetch(2, 2)
        await h.follower_fetch(3, 2)
        for _ in range(10):
            await asyncio.sleep(0)  # the AlterPartition task runs
        assert h.alters and h.alters[-1]["new_isr"] == [1, 2, 3]
        assert h.manager.partitions[("t", 0)].state.committed_isr == {1, 2, 3}
        assert (h.manager.isr_expands, h.manager.isr_shrinks) == (1, 0)  # the metrics' counts
        # A follower at our log end is in sync however long ago it fetched; one that
        # has not fetched a newer record for the lag bound is not.
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"c"))])
        await h.follower_fetch(2, 3)
        clock.now_ms += 5_000
        h.manager.maybe_shrink_isrs()
        for _ in range(10):
            await asyncio.sleep(0)
        assert h.alters[-1]["new_isr"] == [1, 2]
        assert (h.manager.isr_expands, h.manager.isr_shrinks) == (1, 1)
        await h.manager.close()

    run(body)


def _idempotent(*values: bytes, seq: int, producer_id: int = 7, epoch: int = 0) -> bytes:
    return build_batch(
        [Record(v, timestamp_ms=1_000) for v in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def test_idempotent_retries_are_deduplicated_across_leader_change_and_restart(
    tmp_path: Path,
) -> None:
    """A retried idempotent batch is answered with its original offset and not appended
    again; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; a replica that appended the
    batch as a follower, then becomes leader, and a broker reopening its logs, both
    still recognise the retry (invariant 4)."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1,))
        entries = [("t", 0, _idempotent(b"a", b"b", seq=0))]
        (first,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=entries)
        (retry,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=entries)
        assert first.error is None and retry.error is None
        assert first.base_offset == retry.base_offset == 0
        p = h.manager.partitions[("t", 0)]
        assert p.log.log_end_offset == 2
        gap = [("t", 0, _idempotent(b"c", seq=5))]
        (out_of_order,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=gap)
        assert out_of_order.error is not None
        assert out_of_order.error.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        await h.manager.close()

        # A follower copies the batch, then leads: the retry is still a duplicate.
        f = _Harness(tmp_path / "follower")
        f.topic(leader=2, isr=(1, 2))
        fp = f.manager.partitions[("t", 0)]
        await f.manager.on_follower_records(
            fp,
            records=_idempotent(b"a", b"b", seq=0),
            leader_high_watermark=2,
            leader_log_start_offset=0,
        )
        f.commit(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        (dup,) = await f.manager.produce(acks=1, timeout_ms=1_000, entries=entries)
        assert dup.error is None and dup.base_offset == 0 and fp.log.log_end_offset == 2
        await f.manager.close()

        # A restarted broker rebuilds the table from its log.
        r = _Harness(tmp_path / "follower")
        r.topic(leader=1, isr=(1,))
        (again,) = await r.manager.produce(acks=1, timeout_ms=1_000, entries=entries)
        assert again.error is None and again.base_offset == 0
        assert r.manager.partitions[("t", 0)].log.log_end_offset == 2
        await r.manager.close()

    run(body)


def _config_record(name: str, value: str | None) -> ConfigRecord:
    return ConfigRecord(resource_type="topic", resource_name="t", name=name, value=value)


def test_retention_check_deletes_old_segments_and_moves_the_log_start(tmp_path: Path) -> None:
    """With retention.bytes and small segments, the retention check (what the broker's
    log.retention.check.interval.ms timer runs) deletes whole committed segments: the
    replica's log start moves up, a fetch below it is OFFSET_OUT_OF_RANGE, and the
    producer-state snapshots below it go too."""

    async def body() -> None:
        h = _Harness(tmp_path, clock=Clock())
        h.topic(leader=1, isr=(1,))
        h.commit(_config_record("segment.bytes", "1000"), _config_record("retention.bytes", "2000"))
        for _ in range(60):
            (r,) = await h.manager.produce(
                acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"x" * 100, b"y" * 100))]
            )
            assert r.error is None, r.error
        p = h.manager.partitions[("t", 0)]
        assert p.log.log_start_offset == 0
        assert h.manager.enforce_retention() > 0
        start = p.log.log_start_offset
        assert start > 0 and p.state.log_start_offset == start
        assert p.log.size_bytes <= 2000 + 1000
        assert (await h.consume(0)).error is not None
        assert (await h.consume(start)).error is None
        await h.manager.close()

    run(body)


def test_producer_state_survives_a_restart_through_its_snapshot(tmp_path: Path) -> None:
    """An idempotent producer's batches, then a clean close (which snapshots the producer
    state) and a new ReplicaManager on the same directory: a retry of the last batch is
    answered with its original offset and not appended again."""

    def idem(seq: int) -> bytes:
        return build_batch(
            [Record(b"v%d" % seq, timestamp_ms=1_000)],
            producer_id=42,
            producer_epoch=0,
            base_sequence=seq,
        )

    async def body() -> None:
        h = _Harness(tmp_path, clock=Clock())
        h.topic(leader=1, isr=(1,))
        for seq in range(5):
            (r,) = await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, idem(seq))])
            assert r.error is None and r.base_offset == seq
        await h.manager.close()
        snapshots = [n for n in (tmp_path / "logs" / "t-0").iterdir() if n.suffix == ".snapshot"]
        assert snapshots, "a clean close writes a producer-state snapshot"
        again = _Harness(tmp_path, clock=Clock())
        again.topic(leader=1, isr=(1,))
        (r,) = await again.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, idem(4))])
        assert r.error is None and r.base_offset == 4
        assert again.manager.partitions[("t", 0)].log.log_end_offset == 5
        await again.manager.close()

    run(body)


def test_delete_records_route_moves_the_log_start_and_refuses_bad_input(tmp_path: Path) -> None:
    """POST /v1/delete-records on a single-replica leader: -1 deletes up to the HW (the
    segment log's start moves, ListOffsets earliest follows), above the HW answers
    OFFSET_OUT_OF_RANGE for that partition; a body that breaks the typed request answers
    INVALID_REQUEST naming the field, before any partition is touched."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1,))
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"a", b"b"))])
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"c"))])
        app = web.Application(
            middlewares=[
                error_middleware(lambda e: json_response(e.to_wire(), 400), logging.getLogger())
            ]
        )
        app.add_routes(delete_records_routes(lambda _: h.manager))
        async with TestClient(TestServer(app)) as client:
            ok = await client.post(
                "/v1/delete-records",
                json={"partitions": [{"topic": "t", "partition": 0, "offset": -1}]},
            )
            assert ok.status == 200
            (answer,) = (await ok.json())["responses"]
            assert answer["error"] is None and answer["low_watermark"] == 3
            assert h.manager.partitions[("t", 0)].log.log_start_offset == 3
            (earliest,) = h.manager.list_offsets([("t", 0, EARLIEST_TIMESTAMP)])
            assert earliest.offset == 3
            above = await client.post(
                "/v1/delete-records",
                json={"partitions": [{"topic": "t", "partition": 0, "offset": 9}]},
            )
            (refused,) = (await above.json())["responses"]
            assert refused["error"]["error"] == "OFFSET_OUT_OF_RANGE"
            bad = await client.post(
                "/v1/delete-records",
                json={"partitions": [{"topic": "t", "partition": 0, "offset": "x"}]},
            )
            error = await bad.json()
            assert bad.status == 400 and error["error"] == "INVALID_REQUEST"
            assert "$.partitions[0].offset" in error["message"]
        await h.manager.close()

    run(body)


def test_follower_fetches_are_checked_against_the_images_registration(tmp_path: Path) -> None:
    """The shell hands the core the epoch of the follower's registration in the current
    image (KIP-903): a fetch with another epoch is STALE_BROKER_EPOCH and moves nothing;
    once the image fences that broker even its registered epoch is refused; a broker
    outside the replica set is NOT_LEADER_OR_FOLLOWER."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.topic(leader=1, isr=(1, 2))
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"a", b"b"))])
        assert (await h.consume(0)).high_watermark == 0

        async def fetch_as(replica: int, epoch: int) -> Any:
            return await h.follower_fetch(replica, 2, None, broker_epoch=epoch)

        # register_brokers() registers broker b with epoch b.
        for replica, epoch, error in [
            (2, -1, "STALE_BROKER_EPOCH"),
            (2, 7, "STALE_BROKER_EPOCH"),
            (9, 2, "NOT_LEADER_OR_FOLLOWER"),
        ]:
            result = await fetch_as(replica, epoch)
            assert result.error is not None and result.error.name == error, (replica, epoch)
            assert (await h.consume(0)).high_watermark == 0
        h.commit(BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=2, fenced=1))
        fenced = await fetch_as(2, 2)
        assert fenced.error is not None and fenced.error.name == "STALE_BROKER_EPOCH"
        assert (await h.consume(0)).high_watermark == 0
        h.commit(BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=2, fenced=-1))
        assert (await fetch_as(2, 2)).error is None
        assert (await h.consume(0)).high_watermark == 2
        await h.manager.close()

    run(body)


def test_leader_throttle_holds_back_a_listed_replica_outside_the_isr(tmp_path: Path) -> None:
    """leader.replication.throttled.rate on this broker and the partition listed in
    leader.replication.throttled.replicas: a follower outside the ISR (3) gets its first
    answer, then nothing while the quota is in debt, then records again once the clock
    has repaid it; an ISR member (2) is never held back; the bytes are counted; with the
    configs deleted nothing is held back."""

    async def body() -> None:
        clock = Clock()
        h = _Harness(tmp_path, clock=clock)
        h.topic(leader=1, isr=(1, 2))
        rate = "leader.replication.throttled.rate"
        h.commit(
            ConfigRecord(resource_type="broker", resource_name="1", name=rate, value="100"),
            _config_record("leader.replication.throttled.replicas", "0:1,0:2,0:3"),
        )
        (r,) = await h.manager.produce(
            acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"x" * 400))]
        )
        assert r.error is None
        first = await h.follower_fetch(3, 0, None)
        size = len(first.records)
        assert size > 100  # one answer may exceed the bucket: a debt
        assert (await h.follower_fetch(3, 0, None)).records == b""
        assert len((await h.follower_fetch(2, 0, None)).records) == size
        quota = h.manager.quotas.leader
        assert quota.throttled_bytes == 2 * size
        clock.now_ms += quota.delay_ms(clock.now_ms)
        assert len((await h.follower_fetch(3, 0, None)).records) == size
        # The reassignment verified: the configs go, and so does the throttle.
        h.commit(
            ConfigRecord(resource_type="broker", resource_name="1", name=rate, value=None),
            _config_record("leader.replication.throttled.replicas", None),
        )
        for _ in range(3):
            assert len((await h.follower_fetch(3, 0, None)).records) == size
        await h.manager.close()

    run(body)


class _FakeLeader:
    """Leader 2 answering the fetcher's ``POST /v1/fetch`` in process: one 400-byte
    record per partition asked for, at its fetch offset. Keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[api.FetchRequest] = []

    def post(self, url: str, *, data: bytes, headers: Any, timeout: Any) -> Any:
        request = decode(data, api.FetchRequest)
        self.requests.append(request)
        payloads = [_batch(b"x" * 400, base_offset=p.fetch_offset) for p in request.partitions]
        header = api.FetchResponse(
            responses=tuple(
                api.FetchPartitionResponse(
                    topic=p.topic,
                    partition=p.partition,
                    high_watermark=p.fetch_offset + 1,
                    log_start_offset=0,
                    records_bytes=len(b),
                )
                for p, b in zip(request.partitions, payloads, strict=True)
            )
        )
        frame = api.encode_frame(header, payloads)

        class _Answer:
            status = 200
            content_type = FRAME_CONTENT_TYPE

            async def read(self) -> bytes:
                return frame

            async def __aenter__(self) -> _Answer:
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

        return _Answer()


def test_follower_throttle_leaves_a_listed_replica_out_of_the_fetch(tmp_path: Path) -> None:
    """follower.replication.throttled.rate on this broker (1, a follower outside the
    ISR) and its replica listed in follower.replication.throttled.replicas: the first
    fetch brings more than the bucket holds, so the next round sends no request and
    backs the partition off; once the clock has repaid the debt it is fetched again.
    Unlisted (the config deleted), it is fetched every round."""

    async def body() -> None:
        clock = Clock()
        h = _Harness(tmp_path, clock=clock)
        h.topic(leader=2, isr=(2, 3))
        h.commit(
            ConfigRecord(
                resource_type="broker",
                resource_name="1",
                name="follower.replication.throttled.rate",
                value="100",
            ),
            _config_record("follower.replication.throttled.replicas", "0:1"),
        )
        leader = _FakeLeader()
        links = _FetcherLinks(
            h.manager, cast(Any, leader), lambda b: "leader:1", lambda: 1, _plain_spawn
        )
        fetcher = ReplicaFetcher(leader_id=2, links=links)
        tp = ("t", 0)
        fetcher.add(tp)
        p = h.manager.partitions[tp]
        await fetcher._fetch_once("leader:1", [tp])
        assert len(leader.requests) == 1 and p.log.log_end_offset == 1
        quota = h.manager.quotas.follower
        assert quota.throttled_bytes > 100 and quota.exceeded(clock.now_ms)
        await fetcher._fetch_once("leader:1", [tp])
        assert len(leader.requests) == 1, "a throttled replica was fetched over its quota"
        assert fetcher._backoff_until[tp] > monotonic_ms()
        clock.now_ms += quota.delay_ms(clock.now_ms)
        await fetcher._fetch_once("leader:1", [tp])
        assert len(leader.requests) == 2 and p.log.log_end_offset == 2
        h.commit(_config_record("follower.replication.throttled.replicas", None))
        for n in range(3):
            await fetcher._fetch_once("leader:1", [tp])
            assert len(leader.requests) == 3 + n


def test_follower_fetch_meeting_an_append_job_reads_and_credits_it(tmp_path: Path) -> None:
    """A follower's fetch that arrives while the leader's append holds the log (on a
    worker) waits for the job, then reads its records; the follower's next fetch
    credits them, and acks=all completes once every ISR member has them."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.manager.appends.pin(WORKERS)  # the ioappend path, as on a slow disk
        h.topic(leader=1, isr=(1, 2))
        gate = AppendGate(h.manager.partitions[("t", 0)].log)
        produce = asyncio.create_task(
            h.manager.produce(acks=-1, timeout_ms=10_000, entries=[("t", 0, _batch(b"a", b"b"))])
        )
        await until(gate.entered.is_set, "the append on a worker")
        fetch = asyncio.create_task(
            h.manager.fetch(
                replica_id=2,
                broker_epoch=2,
                max_wait_ms=5_000,
                min_bytes=1,
                max_bytes=1 << 20,
                partitions=[FetchPartition("t", 0, 0, last_fetched_epoch=None)],
            )
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert not fetch.done(), "the follower's fetch answered while the append held the log"
        gate.open.set()
        (read,) = await asyncio.wait_for(fetch, 5)
        assert read.error is None
        assert [r.value for r in iter_records(read.records)] == [b"a", b"b"]
        assert not produce.done(), "acks=all completed before the follower had the records"
        await h.follower_fetch(2, 2)
        (result,) = await asyncio.wait_for(produce, 5)
        assert result.error is None and result.base_offset == 0
        await h.manager.close()

    run(body)


def test_follower_append_runs_on_a_worker_holding_the_log(tmp_path: Path) -> None:
    """The leader's records for a follower are appended by an I/O worker while the log
    is held (a consumer read meanwhile gets nothing from it), then the log is given
    back with the records in it."""

    async def body() -> None:
        h = _Harness(tmp_path)
        h.manager.appends.pin(WORKERS)  # the ioappend path, as on a slow disk
        h.topic(leader=2, isr=(1, 2, 3))
        p = h.manager.partitions[("t", 0)]
        gate = threading.Event()
        entered = threading.Event()
        real = p.log.append_as_follower

        def slow(records: bytes) -> Any:
            entered.set()
            gate.wait(10)
            return real(records)

        p.log.append_as_follower = slow  # type: ignore[method-assign]
        append = asyncio.create_task(
            h.manager.on_follower_records(
                p, records=_batch(b"a", b"b"), leader_high_watermark=2, leader_log_start_offset=0
            )
        )
        await until(entered.is_set, "the follower append on a worker")
        assert h.manager.is_cleaning(("t", 0)), "the follower append runs without a hold"
        gate.set()
        await asyncio.wait_for(append, 5)
        assert not h.manager.is_cleaning(("t", 0))
        assert p.log.log_end_offset == 2 and p.state.high_watermark == 2
        await h.manager.close()

    run(body)


def test_txn_marker_waits_for_the_isr_and_read_committed_stops_at_the_lso(
    tmp_path: Path,
) -> None:
    """The shell's transaction paths: a transactional produce (verification is the
    HTTP route's, not passed here) holds the LSO at its offset for read_committed
    fetches and ListOffsets; a WriteTxnMarkers append parks until the ISR fetched past
    the marker (acks=all), then the LSO is the HW and the abort is in the answer."""

    async def body() -> None:
        h = _Harness(tmp_path, clock=Clock())
        h.topic(leader=1, isr=(1, 2))
        txn = build_batch(
            [Record(b"t", timestamp_ms=1_000)],
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, _batch(b"p"))])
        await h.manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, txn)])
        await h.follower_fetch(2, 2)  # HW 2: both batches committed, the txn open

        async def read_committed() -> Any:
            (result,) = await h.manager.fetch(
                replica_id=-1,
                broker_epoch=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                partitions=[FetchPartition("t", 0, 0)],
                isolation_level=1,
            )
            return result

        first = await read_committed()
        assert (first.high_watermark, first.last_stable_offset) == (2, 1)
        assert [r.value for r in iter_records(first.records)] == [b"p"]
        assert first.aborted_transactions == ()
        latest = h.manager.list_offsets([("t", 0, -1)], isolation_level=1)
        assert latest[0].offset == 1
        marker = TxnMarkerWrite(
            topic="t",
            partition=0,
            producer_id=7,
            producer_epoch=0,
            committed=False,
            coordinator_epoch=1,
            transaction_version=1,
        )
        write = asyncio.create_task(h.manager.write_txn_markers([marker], timeout_ms=10_000))
        await until(lambda: len(h.manager.purgatory) == 1, "the marker appended and parked")
        assert not write.done()
        # The marker's wall-clock timestamp rolled the segment (the records carry
        # 1000): the roll's snapshot job holds the log until it ends.
        await h.manager.wait_io_released([("t", 0)])
        await h.follower_fetch(2, 3)
        (result,) = await asyncio.wait_for(write, 1)
        assert result.error is None and result.base_offset == 2
        after = await read_committed()
        assert (after.high_watermark, after.last_stable_offset) == (3, 3)
        assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(7, 1)]
        assert h.manager.list_offsets([("t", 0, -1)], isolation_level=1)[0].offset == 3
        await h.manager.close()

    run(body)
