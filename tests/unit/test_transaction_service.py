"""The transaction coordinator's broker shell over a real ReplicaManager (broker 1).

``__transaction_state`` has one partition that broker 1 leads; metadata changes are
committed through the harness and the service is told, as the broker tells it. Checked:
it loads what it leads (COORDINATOR_LOAD_IN_PROGRESS-free once loaded) and answers
requests whose records are appended to the partition's log; a new service over the same
log loads the same state and re-sends the markers of a decided transaction; a new leader
epoch reloads with the new coordinator epoch; losing the leadership unloads
(NOT_COORDINATOR); InitProducerId without a producer id block is
COORDINATOR_LOAD_IN_PROGRESS; ListTransactions' filters.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from broker_harness import BrokerHarness, register_brokers, run, until

from raftka.broker.coordinator import transaction_service
from raftka.broker.coordinator.service import RequestContext
from raftka.broker.coordinator.transaction_service import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinatorService,
)
from raftka.common.messages import broker as broker_api
from raftka.common.messages import transactions as api
from raftka.metadata.metadata_records import PartitionChangeRecord, PartitionRecord, TopicRecord

TOPIC_ID = str(uuid.uuid4())
DATA_TOPIC_ID = str(uuid.uuid4())
CONTEXT = RequestContext()


class Ids:
    """A producer id block at hand (or none: ``available`` False)."""

    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.next = 1000

    def producer_id_now(self) -> int | None:
        if not self.available:
            return None
        self.next += 1
        return self.next

    async def wait_for_block(self, *, timeout_ms: int) -> None:
        if not self.available:
            raise TimeoutError


class Harness(BrokerHarness):
    def __init__(self, root: Path) -> None:
        super().__init__(root, transaction_state_log_num_partitions=1)
        self.commit(
            *register_brokers(),
            TopicRecord(name=TRANSACTION_STATE_TOPIC, topic_id=TOPIC_ID),
            PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=(1, 2), isr=(1,), leader=1),
            # The transactions' topic, led by broker 2 (no address here: markers to it
            # are retried, never written).
            TopicRecord(name="t", topic_id=DATA_TOPIC_ID),
            *[
                PartitionRecord(
                    partition_id=p, topic_id=DATA_TOPIC_ID, replicas=(2,), isr=(2,), leader=2
                )
                for p in (0, 1)
            ],
        )

    def service(self, ids: Ids | None = None) -> TransactionCoordinatorService:
        given = ids or Ids()
        return TransactionCoordinatorService(
            config=self.config,
            replicas=self.manager,
            channel=lambda: None,
            producer_ids=lambda: given,  # type: ignore[arg-type,return-value]
            session=lambda: None,
            address_of=lambda node: None,
            marker_backoff_ms=50,
            marker_backoff_max_ms=50,
        )


async def _loaded(service: TransactionCoordinatorService) -> None:
    service.on_metadata()
    await until(lambda: bool(service._owned) and not service._loading, "the partition loaded")


async def _init(service: TransactionCoordinatorService, tid: str) -> tuple[int, int]:
    answer = await service.init_producer_id(
        broker_api.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
    )
    assert answer.error is None, answer
    return answer.producer_id, answer.producer_epoch


async def _add(
    service: TransactionCoordinatorService, tid: str, producer: tuple[int, int], *parts: int
) -> Any:
    answer = await service.add_partitions_to_txn(
        api.AddPartitionsToTxnRequest(
            transactional_id=tid,
            producer_id=producer[0],
            producer_epoch=producer[1],
            topics=(api.TxnTopic(name="t", partitions=parts),),
        ),
        CONTEXT,
    )
    return {p.partition_index: p.error for r in answer.results for p in r.partitions}


async def _describe(
    service: TransactionCoordinatorService, tid: str
) -> api.DescribedTransactionState:
    answer = await service.describe_transactions(
        api.DescribeTransactionsRequest(transactional_ids=(tid,)), CONTEXT
    )
    (state,) = answer.transaction_states
    return state


def test_serves_appends_and_a_new_coordinator_loads_the_state(tmp_path: Path) -> None:
    async def body() -> None:
        h = Harness(tmp_path)
        first = h.service()
        await _loaded(first)
        producer = await _init(first, "tx")
        assert producer == (1001, 0)
        assert await _add(first, "tx", producer, 0, 1) == {0: None, 1: None}
        ended = await first.end_txn(
            api.EndTxnRequest(
                transactional_id="tx",
                producer_id=producer[0],
                producer_epoch=producer[1],
                committed=True,
            ),
            CONTEXT,
        )
        assert ended.error is None and ended.producer_epoch == 1
        # No leader answers markers here: the transaction stays decided, markers pending.
        assert (await _describe(first, "tx")).transaction_state == "PrepareCommit"
        assert first.markers.pending() == {"tx"}
        log = h.logs.get((TRANSACTION_STATE_TOPIC, 0))
        assert log is not None and log.log_end_offset == 3  # Empty, Ongoing, PrepareCommit
        await first.close()

        second = h.service()
        await _loaded(second)
        state = await _describe(second, "tx")
        assert (state.transaction_state, state.producer_id, state.producer_epoch) == (
            "PrepareCommit",
            1001,
            1,
        )
        assert {(t.name, t.partitions) for t in state.topics} == {("t", (0, 1))}
        assert second.markers.pending() == {"tx"}  # the markers are sent again after a load
        await second.close()
        await h.manager.close()

    run(body)


def test_a_new_leader_epoch_reloads_and_losing_the_leadership_unloads(tmp_path: Path) -> None:
    async def body() -> None:
        h = Harness(tmp_path)
        service = h.service()
        await _loaded(service)
        assert service._owned == {0: 0}
        producer = await _init(service, "tx")
        # The same leader named again: a new leader epoch, a new coordinator epoch.
        h.commit(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        await _loaded(service)
        assert service._owned == {0: 1}
        assert (await _describe(service, "tx")).producer_id == producer[0]
        h.commit(PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=2, isr=(1, 2)))
        service.on_metadata()
        assert service._owned == {}
        state = await _describe(service, "tx")
        assert state.error is not None and state.error.error == "NOT_COORDINATOR"
        await service.close()
        await h.manager.close()

    run(body)


def test_no_producer_id_block_is_coordinator_load_in_progress(tmp_path: Path) -> None:
    async def body() -> None:
        h = Harness(tmp_path)
        ids = Ids(available=False)
        service = h.service(ids)
        await _loaded(service)
        answer = await service.init_producer_id(
            broker_api.InitProducerIdRequest(transactional_id="tx")
        )
        assert answer.error is not None
        assert answer.error.error == "COORDINATOR_LOAD_IN_PROGRESS"
        ids.available = True
        assert await _init(service, "tx") == (1001, 0)
        await service.close()
        await h.manager.close()

    run(body)


def test_list_transactions_filters(tmp_path: Path) -> None:
    async def body() -> None:
        h = Harness(tmp_path)
        service = h.service()
        await _loaded(service)
        ongoing = await _init(service, "a")
        await _add(service, "a", ongoing, 0)
        empty = await _init(service, "b")

        async def listed(**filters: Any) -> tuple[list[str], tuple[str, ...]]:
            answer = await service.list_transactions(
                api.ListTransactionsRequest(**filters), CONTEXT
            )
            assert answer.error is None
            return (
                [t.transactional_id for t in answer.transaction_states],
                answer.unknown_state_filters,
            )

        assert await listed() == (["a", "b"], ())
        assert await listed(state_filters=("Ongoing", "Nope")) == (["a"], ("Nope",))
        assert await listed(producer_id_filters=(empty[0],)) == (["b"], ())
        # Only transactions running longer than the filter: none has run an hour.
        assert await listed(duration_filter_ms=3_600_000) == ([], ())
        await service.close()
        await h.manager.close()

    run(body)


def test_markers_to_a_deleted_topic_count_as_written_and_complete_is_written(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        h = Harness(tmp_path)
        service = h.service()
        await _loaded(service)
        producer = await _init(service, "tx")
        added = await service.add_partitions_to_txn(
            api.AddPartitionsToTxnRequest(
                transactional_id="tx",
                producer_id=producer[0],
                producer_epoch=producer[1],
                topics=(api.TxnTopic(name="gone", partitions=(0,)),),
            ),
            CONTEXT,
        )
        assert all(p.error is None for r in added.results for p in r.partitions)
        ended = await service.end_txn(
            api.EndTxnRequest(
                transactional_id="tx",
                producer_id=producer[0],
                producer_epoch=producer[1],
                committed=False,
            ),
            CONTEXT,
        )
        assert ended.error is None
        log = h.logs.get((TRANSACTION_STATE_TOPIC, 0))
        assert log is not None

        # Empty, Ongoing, PrepareAbort, then CompleteAbort once the "markers" are done.
        def state() -> str | None:
            metadata = service.core.transaction("tx")
            return None if metadata is None else metadata.state.value

        await until(lambda: state() == "CompleteAbort", "the CompleteAbort record applied")
        assert log.log_end_offset == 4
        assert not service.markers.pending()
        assert (await _describe(service, "tx")).topics == ()
        await service.close()
        await h.manager.close()

    run(body)


async def _end(
    service: TransactionCoordinatorService, tid: str, producer: tuple[int, int], commit: bool
) -> tuple[int, int]:
    ended = await service.end_txn(
        api.EndTxnRequest(
            transactional_id=tid,
            producer_id=producer[0],
            producer_epoch=producer[1],
            committed=commit,
        ),
        CONTEXT,
    )
    assert ended.error is None, ended
    return ended.producer_id, ended.producer_epoch


def test_the_next_transaction_is_held_until_the_last_one_completes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """An AddPartitionsToTxn that arrives while the previous transaction's markers are
    out is answered once the Complete record is durable (not CONCURRENT_TRANSACTIONS at
    once); if the markers never finish, it is answered CONCURRENT_TRANSACTIONS after
    COMPLETION_WAIT_MAX_MS, so the client's own retry takes over."""
    monkeypatch.setattr(transaction_service, "COMPLETION_WAIT_MAX_MS", 300)

    async def body() -> None:
        h = Harness(tmp_path)
        service = h.service()
        await _loaded(service)
        # Markers to a deleted topic count as written: the transaction completes soon.
        producer = await _init(service, "quick")
        added = await service.add_partitions_to_txn(
            api.AddPartitionsToTxnRequest(
                transactional_id="quick",
                producer_id=producer[0],
                producer_epoch=producer[1],
                topics=(api.TxnTopic(name="gone", partitions=(0,)),),
            ),
            CONTEXT,
        )
        assert all(p.error is None for r in added.results for p in r.partitions)
        producer = await _end(service, "quick", producer, commit=True)
        metadata = service.core.transaction("quick")
        assert metadata is not None and metadata.state.is_prepare
        assert await _add(service, "quick", producer, 0) == {0: None}
        # Markers to "t" (its leader has no address) are never written.
        stuck = await _init(service, "stuck")
        assert await _add(service, "stuck", stuck, 1) == {1: None}
        stuck = await _end(service, "stuck", stuck, commit=True)
        loop = asyncio.get_running_loop()
        began = loop.time()
        (error,) = (await _add(service, "stuck", stuck, 1)).values()
        assert error is not None and error.error == "CONCURRENT_TRANSACTIONS"
        assert loop.time() - began >= 0.3
        await service.close()
        await h.manager.close()

    run(body)
