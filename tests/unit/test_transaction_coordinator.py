"""The transaction coordinator core, command by command: what it writes, when it answers,
the errors it answers with (Kafka's names), the epoch rules of KIP-360 and KIP-890, the
timeout abort, expiration, loading and unloading.

Each test drives the pure core through a small driver (``Driver``) that plays the
broker: it appends records to a list (or fails them), completes appends on demand and
collects answers and markers. Nothing sleeps; time is ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from raftka.broker.coordinator import transaction_coordinator as txn
from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.coordinator.transaction_records import (
    TransactionLogRecord,
    TransactionRecordError,
    decode_transaction_key,
    transaction_record,
)
from raftka.broker.coordinator.transaction_state import (
    TransactionMetadata,
    TransactionResult,
    TransactionState,
)
from raftka.common import errors
from raftka.common.structs import TopicPartition

S = TransactionState
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT
TID = "tx-1"
A, B, C = (TopicPartition("out", p) for p in range(3))
TIMEOUT_MS = 60_000
NUM_PARTITIONS = 4


@dataclass
class Driver:
    """The broker's part: appends, parked answers, markers (see the module docstring)."""

    config: txn.TransactionCoordinatorConfig = field(
        default_factory=lambda: txn.TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=NUM_PARTITIONS
        )
    )
    now_ms: int = 1_000
    log: list[TransactionLogRecord] = field(default_factory=list)
    inflight: list[txn.AppendTransactionRecord] = field(default_factory=list)
    replies: dict[int, Any] = field(default_factory=dict)
    markers: list[txn.SendTxnMarkers] = field(default_factory=list)
    next_producer_id: int = 100
    core: txn.TransactionCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.core = txn.TransactionCoordinator(
            config=self.config, allocate_producer_id=self.allocate
        )
        for partition in range(self.config.transaction_state_log_num_partitions):
            self.core.begin_loading(partition=partition, coordinator_epoch=5)
            self.core.complete_loading(partition=partition, now_ms=self.now_ms)

    def allocate(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def handle(self, outputs: tuple[txn.TxnOutput, ...]) -> None:
        for out in outputs:
            if isinstance(out, txn.AppendTransactionRecord):
                self.inflight.append(out)
            elif isinstance(out, txn.TxnReply):
                self.replies[out.append_id] = out.response
            else:
                self.markers.append(out)

    def call(self, decision: txn.TxnDecision[Any], *, complete: bool = True) -> Any:
        """The answer of a request: now, or once its append completes (``complete``)."""
        self.handle(decision.outputs)
        if decision.response is not None:
            return decision.response
        (append,) = [o for o in decision.outputs if isinstance(o, txn.AppendTransactionRecord)]
        if not complete:
            return append
        self.complete_appends()
        return self.replies.pop(append.append_id)

    def complete_appends(self, error: type[errors.KafkaError] | None = None) -> None:
        while self.inflight:
            append = self.inflight.pop(0)
            if error is None:
                self.log.append(append.record)
            self.handle(
                self.core.append_completed(
                    append_id=append.append_id, error=error, now_ms=self.now_ms
                )
            )

    def write_markers(self) -> None:
        """Every leader writes its marker; then the Complete record is appended."""
        while self.markers:
            m = self.markers.pop(0)
            self.handle(
                self.core.markers_written(
                    transactional_id=m.transactional_id,
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    partitions=m.partitions,
                    now_ms=self.now_ms,
                )
            )
        self.complete_appends()

    # -- the commands, with the test's defaults --------------------------------------------

    def init(self, tid: str = TID, **kw: Any) -> txn.InitProducerIdResponse:
        kw.setdefault("transaction_timeout_ms", TIMEOUT_MS)
        r: txn.InitProducerIdResponse = self.call(
            self.core.init_producer_id(transactional_id=tid, now_ms=self.now_ms, **kw)
        )
        return r

    def add(
        self, pid: int, epoch: int, *partitions: TopicPartition, tid: str = TID
    ) -> txn.AddPartitionsToTxnResponse:
        r: txn.AddPartitionsToTxnResponse = self.call(
            self.core.add_partitions_to_txn(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                partitions=partitions,
                now_ms=self.now_ms,
            )
        )
        return r

    def end(
        self, pid: int, epoch: int, result: TransactionResult, tid: str = TID, version: int = 2
    ) -> txn.EndTxnResponse:
        r: txn.EndTxnResponse = self.call(
            self.core.end_txn(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                result=result,
                now_ms=self.now_ms,
                transaction_version=version,
            )
        )
        return r

    def verify(
        self, pid: int, epoch: int, *partitions: TopicPartition
    ) -> txn.AddPartitionsToTxnResponse:
        return self.core.verify_partitions(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, partitions=partitions
        )

    def state(self, tid: str = TID) -> TransactionMetadata:
        metadata = self.core.transaction(tid)
        assert metadata is not None
        return metadata


def ok(response: Any) -> None:
    if isinstance(response, txn.AddPartitionsToTxnResponse):
        assert set(response.errors.values()) == {None}, response
    else:
        assert response.error is None, response


def errors_of(response: txn.AddPartitionsToTxnResponse) -> set[type[errors.KafkaError] | None]:
    return set(response.errors.values())


# -- InitProducerId ----------------------------------------------------------------------


def test_init_producer_id_writes_first_and_answers_after() -> None:
    """A new id is not known until its Empty record is durable; the answer (epoch 0)
    comes with the append's completion, and the record decodes to the same metadata."""
    d = Driver()
    append = d.call(
        d.core.init_producer_id(
            transactional_id=TID, transaction_timeout_ms=TIMEOUT_MS, now_ms=d.now_ms
        ),
        complete=False,
    )
    assert isinstance(append, txn.AppendTransactionRecord)
    assert append.partition == coordinator_partition(TID, NUM_PARTITIONS)
    assert d.core.transaction(TID) is None
    d.complete_appends()
    assert d.replies.pop(append.append_id) == txn.InitProducerIdResponse(None, 101, 0)
    assert d.state().state is S.EMPTY
    assert d.log == [transaction_record(d.state())]


@pytest.mark.parametrize(
    ("append_error", "told"),
    [
        (errors.NotEnoughReplicasError, errors.CoordinatorNotAvailableError),
        (errors.NotLeaderOrFollowerError, errors.NotCoordinatorError),
    ],
)
def test_a_failed_append_changes_nothing(
    append_error: type[errors.KafkaError], told: type[errors.KafkaError]
) -> None:
    """The client is told Kafka's coordinator error and the durable state is unchanged:
    here an epoch bump that failed leaves epoch 0 in force."""
    d = Driver()
    ok(d.init())
    append = d.call(
        d.core.init_producer_id(
            transactional_id=TID, transaction_timeout_ms=TIMEOUT_MS, now_ms=d.now_ms
        ),
        complete=False,
    )
    d.complete_appends(error=append_error)
    assert d.replies.pop(append.append_id) == txn.InitProducerIdResponse(told)
    assert d.state().producer_epoch == 0
    ok(d.add(101, 0, A))  # epoch 0 still works


def test_init_again_bumps_the_epoch_and_fences_the_old_one() -> None:
    d = Driver()
    first = d.init()
    second = d.init()
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert errors_of(d.add(first.producer_id, 0, A)) == {errors.ProducerFencedError}
    assert errors_of(d.add(999, 1, A)) == {errors.InvalidProducerIdMappingError}
    ok(d.add(first.producer_id, 1, A))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"transaction_timeout_ms": 0}, errors.InvalidTransactionTimeoutError),
        ({"transaction_timeout_ms": 900_001}, errors.InvalidTransactionTimeoutError),
        ({"producer_id": 5}, errors.InvalidRequestError),  # an id without an epoch
        ({"tid": ""}, errors.InvalidRequestError),
    ],
)
def test_init_producer_id_refuses_bad_requests(kwargs: dict[str, Any], error: type) -> None:
    d = Driver()
    assert d.init(**kwargs) == txn.InitProducerIdResponse(error)
    assert d.log == []


def test_requests_for_ids_elsewhere_or_loading_get_coordinator_errors() -> None:
    """NOT_COORDINATOR for a partition this broker does not lead,
    COORDINATOR_LOAD_IN_PROGRESS while it loads."""
    d = Driver()
    partition = d.core.partition_for(TID)
    d.core.unload(partition=partition)
    assert d.init().error is errors.NotCoordinatorError
    d.core.begin_loading(partition=partition, coordinator_epoch=6)
    assert d.init().error is errors.CoordinatorLoadInProgressError
    assert errors_of(d.verify(1, 0, A)) == {errors.CoordinatorLoadInProgressError}
    d.core.complete_loading(partition=partition, now_ms=d.now_ms)
    ok(d.init())


def test_one_write_in_flight_per_id() -> None:
    """A request that finds a write in flight is told CONCURRENT_TRANSACTIONS."""
    d = Driver()
    r = d.init()
    d.call(
        d.core.init_producer_id(
            transactional_id=TID, transaction_timeout_ms=TIMEOUT_MS, now_ms=d.now_ms
        ),
        complete=False,
    )
    assert errors_of(d.add(r.producer_id, 0, A)) == {errors.ConcurrentTransactionsError}
    assert d.end(r.producer_id, 0, ABORT).error is errors.ConcurrentTransactionsError


def test_a_producer_id_source_error_is_answered() -> None:
    """No producer id at hand (the broker's block not fetched yet): the error is the
    answer and nothing is written."""
    d = Driver()

    def no_ids() -> int:
        raise errors.CoordinatorLoadInProgressError("no producer id block yet")

    d.core = txn.TransactionCoordinator(config=d.config, allocate_producer_id=no_ids)
    d.core.begin_loading(partition=d.core.partition_for(TID), coordinator_epoch=1)
    d.core.complete_loading(partition=d.core.partition_for(TID), now_ms=0)
    assert d.init().error is errors.CoordinatorLoadInProgressError
    assert d.log == []


# -- KIP-360 ------------------------------------------------------------------------------


def test_kip360_recovery_bumps_and_its_retry_is_answered_the_same() -> None:
    """InitProducerId with the current id and epoch bumps; the same request again (its
    answer was lost) gets the same epoch without a write; an older epoch is fenced."""
    d = Driver()
    r = d.init()
    d.init()  # epoch 1: a new incarnation; epoch 0 is now stale
    assert d.init(producer_id=r.producer_id, producer_epoch=0).error is errors.ProducerFencedError
    bumped = d.init(producer_id=r.producer_id, producer_epoch=1)
    assert bumped.producer_epoch == 2
    writes = len(d.log)
    assert d.init(producer_id=r.producer_id, producer_epoch=1) == bumped
    assert len(d.log) == writes


# -- AddPartitionsToTxn / AddOffsetsToTxn / verification --------------------------------


def test_add_partitions_begins_and_extends_the_transaction() -> None:
    d = Driver()
    r = d.init()
    ok(d.add(r.producer_id, 0, A))
    assert d.state().state is S.ONGOING
    assert d.state().transaction_start_time_ms == d.now_ms
    writes = len(d.log)
    ok(d.add(r.producer_id, 0, A))  # already there: answered without a write
    assert len(d.log) == writes
    d.now_ms += 5
    ok(d.add(r.producer_id, 0, B))
    assert d.state().partitions == {A, B}
    assert d.state().transaction_start_time_ms == d.now_ms - 5  # the timeout's origin stays


def test_add_offsets_adds_the_groups_consumer_offsets_partition() -> None:
    d = Driver()
    r = d.init()
    response = d.call(
        d.core.add_offsets_to_txn(
            transactional_id=TID,
            producer_id=r.producer_id,
            producer_epoch=0,
            group_id="grp",
            now_ms=d.now_ms,
        )
    )
    assert response == txn.AddOffsetsToTxnResponse(None)
    assert d.state().partitions == {
        TopicPartition("__consumer_offsets", coordinator_partition("grp", 50))
    }


def test_verification_accepts_only_partitions_of_the_ongoing_transaction() -> None:
    """KIP-890 part 1: None for a partition in the producer's ongoing transaction at this
    epoch; INVALID_TXN_STATE for one not in it (or a partition still being added);
    PRODUCER_FENCED for another epoch; CONCURRENT_TRANSACTIONS once EndTxn is under way."""
    d = Driver()
    r = d.init()
    pid = r.producer_id
    assert errors_of(d.verify(pid, 0, A)) == {errors.InvalidTxnStateError}  # Empty
    ok(d.add(pid, 0, A))
    assert d.verify(pid, 0, A, B).errors == {A: None, B: errors.InvalidTxnStateError}
    assert errors_of(d.verify(pid, 1, A)) == {errors.ProducerFencedError}
    assert errors_of(d.verify(pid + 1, 0, A)) == {errors.InvalidProducerIdMappingError}
    d.call(
        d.core.add_partitions_to_txn(
            transactional_id=TID, producer_id=pid, producer_epoch=0, partitions=(B,), now_ms=0
        ),
        complete=False,
    )
    assert d.verify(pid, 0, B).errors == {B: errors.InvalidTxnStateError}  # not durable yet
    d.complete_appends()
    ok(d.verify(pid, 0, B))
    d.call(
        d.core.end_txn(
            transactional_id=TID, producer_id=pid, producer_epoch=0, result=COMMIT, now_ms=0
        ),
        complete=False,
    )
    assert errors_of(d.verify(pid, 0, A)) == {errors.ConcurrentTransactionsError}
    d.complete_appends()
    # Prepared: the epoch moved on, so the old epoch is fenced outright.
    assert errors_of(d.verify(pid, 0, A)) == {errors.ProducerFencedError}


# -- EndTxn ------------------------------------------------------------------------------


def test_commit_bumps_the_epoch_sends_markers_and_completes() -> None:
    """Version 2: PrepareCommit carries epoch + 1, EndTxn answers it, markers carry it and
    the coordinator epoch; Complete is written once every partition has its marker."""
    d = Driver()
    r = d.init()
    pid = r.producer_id
    ok(d.add(pid, 0, A, B))
    answer = d.end(pid, 0, COMMIT)
    assert answer == txn.EndTxnResponse(None, pid, 1)
    assert d.state().state is S.PREPARE_COMMIT
    (markers,) = d.markers
    assert (markers.producer_epoch, markers.coordinator_epoch, markers.result) == (1, 5, COMMIT)
    assert markers.partitions == {A, B}
    d.markers.clear()
    d.handle(
        d.core.markers_written(
            transactional_id=TID, producer_id=pid, producer_epoch=1, partitions=(A,), now_ms=0
        )
    )
    assert d.inflight == []  # B's marker is still due
    d.handle(
        d.core.markers_written(
            transactional_id=TID, producer_id=pid, producer_epoch=1, partitions=(B,), now_ms=0
        )
    )
    d.complete_appends()
    assert d.state().state is S.COMPLETE_COMMIT
    assert d.state().partitions == frozenset()
    ok(d.add(pid, 1, C))  # the next transaction, at the new epoch


def test_end_txn_retries_are_answered_and_late_ones_are_fenced() -> None:
    """The epoch held before the bump may repeat its EndTxn: CONCURRENT_TRANSACTIONS while
    the markers are written, then the same answer; the other outcome is
    INVALID_TXN_STATE. Once the next transaction is Ongoing, that late EndTxn is
    PRODUCER_FENCED and cannot end it (the Jepsen 2024 interleaving)."""
    d = Driver()
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    ok(d.end(pid, 0, COMMIT))
    assert d.end(pid, 0, COMMIT).error is errors.ConcurrentTransactionsError
    d.write_markers()
    assert d.end(pid, 0, COMMIT) == txn.EndTxnResponse(None, pid, 1)
    assert d.end(pid, 0, ABORT).error is errors.InvalidTxnStateError
    ok(d.add(pid, 1, B))
    assert d.end(pid, 0, COMMIT).error is errors.ProducerFencedError
    assert d.state().state is S.ONGOING


def test_version_1_lets_a_late_end_txn_end_the_next_transaction() -> None:
    """What version 2 prevents, shown on version 1: the epoch does not move, so a late
    EndTxn(commit) of the previous transaction commits the next one."""
    d = Driver(config=txn.TransactionCoordinatorConfig(transaction_version=1))
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    # Version 1 answers no producer id and epoch: the client keeps its own.
    assert d.end(pid, 0, ABORT) == txn.EndTxnResponse(None)
    d.write_markers()
    ok(d.add(pid, 0, B))
    assert d.end(pid, 0, COMMIT) == txn.EndTxnResponse(None)  # the late one
    assert d.state().state is S.PREPARE_COMMIT
    assert d.markers[0].partitions == {B}


def test_the_transaction_version_is_the_clients_per_transaction() -> None:
    """A client of EndTxn v0-4 (version 1) keeps its epoch: no bump at EndTxn, markers at
    that epoch and of version 1, and its next transaction is not fenced. The same id's
    next EndTxn from a version-2 client bumps. The version survives a reload (markers
    resent after a coordinator move keep the partition leaders' epoch rule)."""
    d = Driver()
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    # No producer id and epoch in a version-1 answer (EndTxn v0-4 has none).
    assert d.end(pid, 0, COMMIT, version=1) == txn.EndTxnResponse(None)
    assert (d.markers[-1].producer_epoch, d.markers[-1].transaction_version) == (0, 1)
    d.write_markers()
    assert d.state().client_transaction_version == 1
    ok(d.add(pid, 0, B))  # the next transaction, same epoch
    assert d.end(pid, 0, ABORT, version=1) == txn.EndTxnResponse(None)  # a retry...
    d.write_markers()
    assert d.end(pid, 0, ABORT, version=1) == txn.EndTxnResponse(None)  # ...answered
    ok(d.add(pid, 0, C))
    ok(d.end(pid, 0, COMMIT, version=1))  # markers never written
    _, outputs = _reload(d, coordinator_epoch=6)
    (markers,) = outputs
    assert isinstance(markers, txn.SendTxnMarkers)
    assert (markers.producer_epoch, markers.transaction_version) == (0, 1)
    d.write_markers()
    ok(d.add(pid, 0, A))
    assert d.end(pid, 0, COMMIT, version=2) == txn.EndTxnResponse(None, pid, 1)
    assert (d.markers[-1].producer_epoch, d.markers[-1].transaction_version) == (1, 2)


def test_the_brokers_transaction_version_caps_the_clients() -> None:
    """transaction.version=1 on the broker: a version-2 client gets version 1 too."""
    d = Driver(config=txn.TransactionCoordinatorConfig(transaction_version=1))
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    assert d.end(pid, 0, COMMIT, version=2) == txn.EndTxnResponse(None)
    assert d.markers[-1].transaction_version == 1


def test_end_txn_of_an_empty_transaction() -> None:
    """Nothing added: commit is INVALID_TXN_STATE; version 2 aborts anyway (no markers)
    to hand out a fresh epoch; version 1 refuses the abort too."""
    d = Driver()
    pid = d.init().producer_id
    assert d.end(pid, 0, COMMIT).error is errors.InvalidTxnStateError
    assert d.end(pid, 0, ABORT) == txn.EndTxnResponse(None, pid, 1)
    assert d.markers == []
    assert d.state().state is S.COMPLETE_ABORT
    v1 = Driver(config=txn.TransactionCoordinatorConfig(transaction_version=1))
    pid = v1.init().producer_id
    assert v1.end(pid, 0, ABORT).error is errors.InvalidTxnStateError


def test_end_txn_errors() -> None:
    d = Driver()
    assert d.end(5, 0, COMMIT).error is errors.InvalidProducerIdMappingError  # unknown id
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    assert d.end(pid + 1, 0, COMMIT).error is errors.InvalidProducerIdMappingError
    assert d.end(pid, 3, COMMIT).error is errors.ProducerFencedError
    assert d.end(pid, 0, COMMIT, tid="").error is errors.InvalidRequestError


# -- fencing and timeouts ----------------------------------------------------------------


def test_init_producer_id_aborts_the_ongoing_transaction_first() -> None:
    """A new incarnation finds a transaction Ongoing: it is aborted at epoch + 1 (through
    PrepareEpochFence), the caller is told CONCURRENT_TRANSACTIONS; the old incarnation
    is fenced for good (its KIP-360 attempt too); the retry, once complete, bumps again."""
    d = Driver()
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    assert d.init().error is errors.ConcurrentTransactionsError
    assert d.state().state is S.PREPARE_ABORT and d.state().producer_epoch == 1
    assert (d.markers[0].result, d.markers[0].producer_epoch) == (ABORT, 1)
    assert d.init().error is errors.ConcurrentTransactionsError  # markers still due
    assert d.end(pid, 0, COMMIT).error is errors.ProducerFencedError
    d.write_markers()
    assert d.init(producer_id=pid, producer_epoch=0).error is errors.ProducerFencedError
    assert d.init() == txn.InitProducerIdResponse(None, pid, 2)


def test_the_timeout_aborts_and_the_producer_may_recover() -> None:
    """tick aborts a transaction older than its timeout with a bumped epoch; its producer
    is fenced from adding more, learns the abort from EndTxn(abort) and gets the new
    epoch (or recovers by KIP-360)."""
    d = Driver()
    pid = d.init(transaction_timeout_ms=1_000).producer_id
    ok(d.add(pid, 0, A))
    d.handle(d.core.tick(now_ms=d.now_ms + 1_000))
    assert d.inflight == []  # not yet: strictly older than the timeout
    d.now_ms += 20_000  # past the next check interval
    d.handle(d.core.tick(now_ms=d.now_ms))
    d.complete_appends()
    assert d.state().state is S.PREPARE_ABORT
    assert errors_of(d.add(pid, 0, B)) == {errors.ProducerFencedError}
    d.write_markers()
    assert d.end(pid, 0, ABORT) == txn.EndTxnResponse(None, pid, 1)
    assert d.end(pid, 0, COMMIT).error is errors.InvalidTxnStateError


def test_expired_ids_get_a_tombstone_and_are_forgotten() -> None:
    """An id idle for transactional.id.expiration.ms is written as a tombstone and
    forgotten once durable; an Ongoing one never expires."""
    config = txn.TransactionCoordinatorConfig(
        transactional_id_expiration_ms=10_000,
        transaction_remove_expired_transaction_cleanup_interval_ms=1_000,
    )
    d = Driver(config=config)
    d.init("idle")
    pid = d.init("busy", transaction_timeout_ms=900_000).producer_id
    ok(d.add(pid, 0, A, tid="busy"))
    d.now_ms += 10_000
    d.handle(d.core.tick(now_ms=d.now_ms))
    assert [a.transactional_id for a in d.inflight] == ["idle"]
    assert d.inflight[0].record.value is None
    d.complete_appends()
    assert d.core.transaction("idle") is None
    assert d.core.transaction("busy") is not None
    (described,) = d.core.describe_transactions(["idle"])
    assert described.error is errors.TransactionalIdNotFoundError


def test_a_failed_complete_write_is_retried_by_tick() -> None:
    d = Driver()
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    ok(d.end(pid, 0, ABORT))
    m = d.markers.pop()
    d.handle(
        d.core.markers_written(
            transactional_id=TID,
            producer_id=pid,
            producer_epoch=1,
            partitions=m.partitions,
            now_ms=0,
        )
    )
    d.complete_appends(error=errors.NotEnoughReplicasError)
    assert d.state().state is S.PREPARE_ABORT
    d.now_ms += 10_000
    d.handle(d.core.tick(now_ms=d.now_ms))
    d.complete_appends()
    assert d.state().state is S.COMPLETE_ABORT


# -- producer id rotation ----------------------------------------------------------------


def test_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    """When the bumped epoch reaches the last usable one, Complete moves the id to a new
    producer id at epoch 0; EndTxn is answered only then, and its retry with the old id
    gets the new one. InitProducerId at an exhausted epoch rotates as well."""
    d = Driver(config=txn.TransactionCoordinatorConfig(producer_epoch_max=4))
    pid = d.init().producer_id
    for epoch in (0, 1):
        ok(d.add(pid, epoch, A))
        ok(d.end(pid, epoch, COMMIT))
        d.write_markers()
    ok(d.add(pid, 2, A))
    append = d.call(
        d.core.end_txn(
            transactional_id=TID, producer_id=pid, producer_epoch=2, result=COMMIT, now_ms=0
        ),
        complete=False,
    )
    d.complete_appends()
    assert append.append_id not in d.replies  # held until Complete
    assert d.markers[0].producer_epoch == 3
    d.write_markers()
    new = d.replies.pop(append.append_id)
    assert new == txn.EndTxnResponse(None, pid + 1, 0)
    assert d.end(pid, 2, COMMIT) == new  # the retry
    ok(d.add(pid + 1, 0, B))
    ok(d.end(pid + 1, 0, ABORT))
    d.write_markers()
    ok(d.end(pid + 1, 1, ABORT))  # an empty abort: epoch 2
    d.write_markers()
    assert d.init() == txn.InitProducerIdResponse(None, pid + 1, 3)
    assert d.init() == txn.InitProducerIdResponse(None, pid + 2, 0)


# -- loading and unloading ---------------------------------------------------------------


def test_replaying_the_log_rebuilds_the_same_state_and_resends_markers() -> None:
    """A new coordinator fed the log (latest value per key, tombstones forget) has the
    same metadata; a transaction caught in PrepareCommit gets its markers again, with the
    new coordinator epoch."""
    d = Driver()
    p1 = d.init("t1").producer_id
    ok(d.add(p1, 0, A, B, tid="t1"))
    ok(d.end(p1, 0, COMMIT, tid="t1"))  # markers never written
    p2 = d.init("t2").producer_id
    ok(d.add(p2, 0, C, tid="t2"))
    fresh, outputs = _reload(d, coordinator_epoch=6)
    for tid in ("t1", "t2"):
        assert fresh.transaction(tid) == d.core.transaction(tid)
    (markers,) = outputs
    assert isinstance(markers, txn.SendTxnMarkers)
    assert (markers.transactional_id, markers.coordinator_epoch) == ("t1", 6)
    assert markers.partitions == {A, B}


def test_replay_refuses_a_record_of_another_partition() -> None:
    d = Driver()
    d.init()
    wrong = (d.core.partition_for(TID) + 1) % NUM_PARTITIONS
    d.core.unload(partition=wrong)
    d.core.begin_loading(partition=wrong, coordinator_epoch=1)
    with pytest.raises(TransactionRecordError, match="does not belong"):
        d.core.replay(partition=wrong, records=d.log)


def test_unload_answers_waiters_and_ignores_late_completions() -> None:
    d = Driver()
    pid = d.init().producer_id
    append = d.call(
        d.core.add_partitions_to_txn(
            transactional_id=TID, producer_id=pid, producer_epoch=0, partitions=(A,), now_ms=0
        ),
        complete=False,
    )
    outputs = d.core.unload(partition=d.core.partition_for(TID))
    assert outputs == (
        txn.TxnReply(
            append.append_id, TID, txn.AddPartitionsToTxnResponse({A: errors.NotCoordinatorError})
        ),
    )
    assert d.core.transaction(TID) is None
    assert d.core.append_completed(append_id=append.append_id, error=None, now_ms=0) == ()


def test_config_refuses_what_it_cannot_honour() -> None:
    with pytest.raises(ValueError, match=r"transaction\.version 3"):
        txn.TransactionCoordinatorConfig(transaction_version=3)
    with pytest.raises(ValueError, match=r"transaction\.state\.log\.num\.partitions"):
        txn.TransactionCoordinatorConfig(transaction_state_log_num_partitions=0)


def _tid_of(record: TransactionLogRecord) -> str:
    return decode_transaction_key(record.key)


# -- every command in every state --------------------------------------------------------


def driver_in(state: TransactionState) -> Driver:
    """A driver whose id is durably in ``state`` (markers not written for Prepare*)."""
    d = Driver()
    pid = d.init().producer_id
    if state is S.EMPTY:
        return d
    ok(d.add(pid, 0, A))
    if state is S.ONGOING:
        return d
    commit = state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    ok(d.end(pid, 0, COMMIT if commit else ABORT))
    if state.is_complete:
        d.write_markers()
    d.markers.clear()
    assert d.state().state is state
    return d


_C, _I = errors.ConcurrentTransactionsError, errors.InvalidTxnStateError
# state -> (InitProducerId, AddPartitionsToTxn, EndTxn(commit), EndTxn(abort)), each
# request made with the producer id and epoch the id holds in that state (None: done).
COMMAND_MATRIX = {
    S.EMPTY: (None, None, _I, None),
    S.ONGOING: (_C, None, None, None),  # InitProducerId: the fencing abort first
    S.PREPARE_COMMIT: (_C, _C, _C, _C),
    S.PREPARE_ABORT: (_C, _C, _C, _C),
    S.COMPLETE_COMMIT: (None, None, _I, None),  # abort: version 2's empty abort
    S.COMPLETE_ABORT: (None, None, _I, None),
}


@pytest.mark.parametrize("state", list(COMMAND_MATRIX), ids=lambda s: s.value)
@pytest.mark.parametrize("command", range(4), ids=["init", "add", "commit", "abort"])
def test_every_command_in_every_state(state: TransactionState, command: int) -> None:
    """Each client command, at the current producer id and epoch, in each durable state:
    the answer Kafka gives, and a refusal writes nothing."""
    d = driver_in(state)
    before, writes = d.state(), len(d.log)
    pid, epoch = before.producer_id, before.producer_epoch
    if command == 0:
        error = d.init().error
    elif command == 1:
        (error,) = set(d.add(pid, epoch, B).errors.values())
    else:
        error = d.end(pid, epoch, COMMIT if command == 2 else ABORT).error
    assert error is COMMAND_MATRIX[state][command]
    if error is not None and not (state is S.ONGOING and command == 0):
        assert len(d.log) == writes and d.state() == before


def _reload(
    d: Driver, coordinator_epoch: int = 7
) -> tuple[txn.TransactionCoordinator, list[txn.TxnOutput]]:
    """A new coordinator that loaded every partition from the driver's log."""
    fresh = txn.TransactionCoordinator(config=d.config, allocate_producer_id=d.allocate)
    outputs: list[txn.TxnOutput] = []
    for partition in range(d.config.transaction_state_log_num_partitions):
        fresh.begin_loading(partition=partition, coordinator_epoch=coordinator_epoch)
        fresh.replay(
            partition=partition,
            records=[r for r in d.log if fresh.partition_for(_tid_of(r)) == partition],
        )
        outputs += fresh.complete_loading(partition=partition, now_ms=d.now_ms)
    return fresh, outputs


def test_replay_forgets_a_tombstoned_id_and_finishes_an_empty_abort() -> None:
    """A tombstone after an id's records removes it on load; a PrepareAbort without
    partitions (version 2's empty abort) found on load is completed at once."""
    config = txn.TransactionCoordinatorConfig(
        transaction_state_log_num_partitions=NUM_PARTITIONS,
        transactional_id_expiration_ms=1_000,
        transaction_remove_expired_transaction_cleanup_interval_ms=1_000,
    )
    d = Driver(config=config)
    d.init("gone")
    d.now_ms += 1_000
    d.handle(d.core.tick(now_ms=d.now_ms))
    d.complete_appends()
    pid = d.init("empty").producer_id
    d.call(
        d.core.end_txn(
            transactional_id="empty", producer_id=pid, producer_epoch=0, result=ABORT, now_ms=0
        ),
        complete=False,
    )
    # The PrepareAbort reaches the log; the coordinator dies before its Complete.
    d.log.append(d.inflight.pop().record)
    fresh, outputs = _reload(d)
    assert fresh.transaction("gone") is None
    (complete,) = outputs
    assert isinstance(complete, txn.AppendTransactionRecord)
    fresh.append_completed(append_id=complete.append_id, error=None, now_ms=d.now_ms)
    metadata = fresh.transaction("empty")
    assert metadata is not None and metadata.state is S.COMPLETE_ABORT
    assert metadata.producer_epoch == 1


def test_a_marker_report_for_another_epoch_is_ignored() -> None:
    """markers_written names the producer id and epoch of its txn.SendTxnMarkers: a late
    report of an older transaction does not complete the current one."""
    d = Driver()
    pid = d.init().producer_id
    ok(d.add(pid, 0, A))
    ok(d.end(pid, 0, ABORT))
    assert (
        d.core.markers_written(
            transactional_id=TID, producer_id=pid, producer_epoch=0, partitions=(A,), now_ms=0
        )
        == ()
    )
    assert d.state().state is S.PREPARE_ABORT
    d.write_markers()
    assert d.state().state is S.COMPLETE_ABORT
