"""Seeded simulation of the transaction coordinator core with producers, partition
leaders, a lossy network and coordinator failover (KIP-98 with KIP-890's defences).

Each seed drives the real :class:`TransactionCoordinator` on a fake clock:

* **Coordinator**: one core owning the single ``__transaction_state`` partition, whose
  records go to an in-memory log. An append fails now and then (nothing written), or is
  written but reported failed (the ambiguous acks=all timeout), and its answer comes
  after a delay. The coordinator fails over at random: the core is dropped with every
  answer it still owed, and a new one loads the log written so far (whole, or compacted
  to the latest value per key) with the next coordinator epoch.
* **Producers**: two transactional ids, each run by successive incarnations (a crash
  restarts it as a new incarnation, which calls InitProducerId afresh). A transaction
  adds 1-3 partitions (sometimes sending its records without waiting for
  AddPartitionsToTxn's answer, as a pipelining client would), writes a record to each,
  then commits or aborts. A request unanswered within the request timeout counts as
  failed: a failed AddPartitions or produce aborts the transaction, a failed EndTxn is
  retried with the same epoch (as Kafka's client does), PRODUCER_FENCED ends the
  incarnation (or, half the time, it tries the KIP-360 recovery first).
* **Partition leaders**: three, each with a producer-state table. A transactional batch
  below the producer's epoch is fenced; the first batch of a producer's transaction at
  a partition is accepted only after the coordinator verified it (KIP-890 part 1,
  ``transaction.partition.verification.enable``), guarded so that a marker in between
  voids the verification. Markers of a lower coordinator epoch are fenced; with
  transaction version 2 a marker must carry an epoch above the producer's (a repeat of
  the last marker is answered without a second write).
* **Network**: every message is delayed 1-40 ms, some are lost, and some are held for
  0.7-3 s, past the timeouts, so that a produce, an AddPartitions, an EndTxn or a marker
  of a finished transaction arrives during the next one (the Jepsen 2024 interleavings).

After ``HEAL_MS`` the network is reliable, nothing crashes or fails over, and each
producer finishes its transaction and stops. Checked at the end:

* every transaction ended: no partition holds a producer's records without a marker
  after them, every id at the coordinator is idle, every producer finished;
* no torn transaction: every record of one client transaction got the same outcome,
  and that outcome is the one EndTxn answered (commit or abort) when it answered;
  nothing was committed that its producer never asked to commit;
* no late write in the next transaction: the records a marker resolves at a partition
  all belong to one client transaction;
* a fenced producer never writes again: no record of an incarnation is appended after
  a later incarnation of its id got its InitProducerId answer, and at each partition a
  producer's epochs never go down.

``test_the_checker_bites`` turns the defences off (verification, or transaction
version 1 without the per-transaction bump) and requires some seed to fail.

A failure names its seed; replay one with ``RAFTKA_TXN_SIM_SEED=<seed>``;
``RAFTKA_TXN_SIM_SEEDS`` sets how many seeds run (default 500).
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from raftka.broker.coordinator import transaction_coordinator as txn
from raftka.broker.coordinator.transaction_records import (
    TransactionLogRecord,
    decode_transaction_key,
)
from raftka.broker.coordinator.transaction_state import TransactionResult
from raftka.common.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    KafkaError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
)
from raftka.common.structs import TopicPartition

DEFAULT_SEEDS = 500
SEEDS_TO_BITE_MAX = 200
TIDS = ("app-a", "app-b")
PARTITIONS = tuple(TopicPartition("out", p) for p in range(3))
TXN_TIMEOUT_MS = 1_500
REQUEST_TIMEOUT_MS = 400
BACKOFF_MS = 30
HEAL_MS = 3_000
END_MS = HEAL_MS + 30_000
LOSS = 0.04
LATE = 0.04  # the chance that a message is held past the timeouts
APPEND_FAIL = 0.04
APPEND_AMBIGUOUS = 0.03
CRASH = 0.02  # per producer action
FAILOVER = 0.01  # per coordinator request
END_TXN_RETRIES_MAX = 10
COMMIT = TransactionResult.COMMIT
ABORT = TransactionResult.ABORT

Tag = tuple[str, int, int]  # (transactional id, incarnation, transaction number)


@dataclass(frozen=True)
class Switches:
    verification: bool = True
    #: The broker's transaction.version (caps the client's).
    transaction_version: int = 2
    #: The producers' EndTxn version (1: an EndTxn v0-4 client, which keeps its epoch).
    client_transaction_version: int = 2


class InvariantViolatedError(AssertionError):
    pass


# -- the world ---------------------------------------------------------------------------


class World:
    def __init__(self, seed: int, switches: Switches) -> None:
        self.rng = random.Random(seed)
        self.switches = switches
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.coordinator = CoordinatorNode(self)
        self.partitions = {tp: PartitionNode(self, tp) for tp in PARTITIONS}
        self.producers = [ProducerNode(self, tid) for tid in TIDS]
        # (transactional id) -> [(time, incarnation)] of InitProducerId answers.
        self.inits: dict[str, list[tuple[int, int]]] = {tid: [] for tid in TIDS}
        self.client_outcome: dict[Tag, TransactionResult] = {}
        self.commit_asked: set[Tag] = set()
        self.last_late_ms = 0

    @property
    def healed(self) -> bool:
        return self.now >= HEAL_MS

    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + delay_ms, next(self._seq), action))

    def send(self, deliver: Callable[[], None]) -> None:
        """A message over the network: maybe lost, maybe late, else a short delay."""
        if not self.healed:
            r = self.rng.random()
            if r < LOSS:
                return
            if r < LOSS + LATE:
                delay = self.rng.randint(700, 3_000)
                self.last_late_ms = max(self.last_late_ms, self.now + delay)
                self.at(delay, deliver)
                return
        self.at(1 + int(self.rng.random() * 40), deliver)  # randint, at a third of its cost

    def run(self) -> None:
        for producer in self.producers:
            self.at(self.rng.randint(0, 50), producer.start)
        self.at(0, self.coordinator.tick)
        queue = self._queue
        while queue and self.now <= END_MS:
            when, _, action = heapq.heappop(queue)
            self.now = when
            action()
            # Stop once everything is quiet and no late message is still on its way.
            if (
                when > HEAL_MS
                and when > self.last_late_ms
                and all(p.finished for p in self.producers)
                and self.coordinator.settled()
            ):
                break


# -- coordinator ---------------------------------------------------------------------------


class CoordinatorNode:
    """The broker shell around the core: appends, parked answers, marker sending."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.log: list[TransactionLogRecord] = []
        self.coordinator_epoch = 0
        self.generation = 0
        self.parked: dict[int, Callable[[object], None]] = {}
        self.next_producer_id = 1000
        self.core: txn.TransactionCoordinator | None = None
        self._start_core()

    def _allocate(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def _start_core(self) -> None:
        self.generation += 1
        self.coordinator_epoch += 1
        self.parked = {}
        core = txn.TransactionCoordinator(
            config=txn.TransactionCoordinatorConfig(
                transaction_state_log_num_partitions=1,
                transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
                transaction_remove_expired_transaction_cleanup_interval_ms=200,
                transactional_id_expiration_ms=1_000,
                transaction_version=self.world.switches.transaction_version,
                # Small, so that the producer-id rotation happens in some seeds.
                producer_epoch_max=8,
            ),
            allocate_producer_id=self._allocate,
        )
        core.begin_loading(partition=0, coordinator_epoch=self.coordinator_epoch)
        records = self.log
        if self.world.rng.random() < 0.5:
            latest = {decode_transaction_key(r.key): r for r in self.log}
            records = list(latest.values())  # what compaction may leave
        core.replay(partition=0, records=records)
        self.core = core
        self.handle(core.complete_loading(partition=0, now_ms=self.world.now))

    def _fail_over(self) -> None:
        self.core = None
        self.generation += 1
        self.world.at(self.world.rng.randint(0, 300), self._start_core)

    def settled(self) -> bool:
        core = self.core
        if core is None:
            return False
        for tid in core.transactional_ids():
            metadata = core.transaction(tid)
            assert metadata is not None
            if not metadata.state.is_idle or core.has_pending_write(tid):
                return False
        return True

    def tick(self) -> None:
        if self.core is not None:
            self.handle(self.core.tick(now_ms=self.world.now))
        self.world.at(100, self.tick)

    def request(
        self,
        call: Callable[[txn.TransactionCoordinator], txn.TxnDecision[Any]],
        reply: Callable[[object], None],
    ) -> None:
        """A request arrived: answer it now or park it on its append."""
        world = self.world
        if not world.healed and world.rng.random() < FAILOVER and self.core is not None:
            self._fail_over()
        if self.core is None:
            world.send(lambda: reply(NotCoordinatorError))
            return
        decision = call(self.core)
        if decision.response is not None:
            response = decision.response
            world.send(lambda: reply(response))
        else:
            appends = [o for o in decision.outputs if isinstance(o, txn.AppendTransactionRecord)]
            self.parked[appends[0].append_id] = reply
        self.handle(decision.outputs)

    def handle(self, outputs: tuple[txn.TxnOutput, ...]) -> None:
        world = self.world
        for out in outputs:
            if isinstance(out, txn.AppendTransactionRecord):
                self._append(out)
            elif isinstance(out, txn.TxnReply):
                reply = self.parked.pop(out.append_id, None)
                if reply is not None:
                    response = out.response
                    world.send(lambda r=reply, x=response: r(x))  # type: ignore[misc]
            else:
                assert isinstance(out, txn.SendTxnMarkers)
                for tp in sorted(out.partitions):
                    self._send_marker(out, tp, self.generation)

    def _append(self, out: txn.AppendTransactionRecord) -> None:
        world = self.world
        error: type[KafkaError] | None = None
        r = world.rng.random() if not world.healed else 1.0
        if r < APPEND_FAIL:
            error = NotEnoughReplicasError
        else:
            self.log.append(out.record)
            if r < APPEND_FAIL + APPEND_AMBIGUOUS:
                error = RequestTimedOutError  # written, but acks=all timed out
        generation = self.generation

        def completed() -> None:
            if self.generation == generation and self.core is not None:
                self.handle(
                    self.core.append_completed(
                        append_id=out.append_id, error=error, now_ms=world.now
                    )
                )

        world.at(world.rng.randint(1, 20), completed)

    def _send_marker(self, out: txn.SendTxnMarkers, tp: TopicPartition, generation: int) -> None:
        """WriteTxnMarkers to one leader, retried until it answers (Kafka's marker
        channel); a fenced answer stops it."""
        world = self.world
        done = [False]

        def answered(error: type[KafkaError] | None) -> None:
            if done[0] or self.generation != generation or self.core is None:
                return
            done[0] = True
            if error is None:
                self.handle(
                    self.core.markers_written(
                        transactional_id=out.transactional_id,
                        producer_id=out.producer_id,
                        producer_epoch=out.producer_epoch,
                        partitions=(tp,),
                        now_ms=world.now,
                    )
                )

        def attempt() -> None:
            if done[0] or self.generation != generation:
                return
            partition = world.partitions[tp]
            world.send(lambda: world.send(partial_answer(partition.write_marker(out))))
            world.at(300, attempt)

        def partial_answer(error: type[KafkaError] | None) -> Callable[[], None]:
            return lambda: answered(error)

        attempt()


# -- partitions ----------------------------------------------------------------------------


@dataclass
class Entry:
    time_ms: int
    producer_id: int
    epoch: int
    tag: Tag | None  # None: a marker
    result: TransactionResult | None = None


@dataclass
class ProducerEntry:
    epoch: int = -1
    open: bool = False
    coordinator_epoch: int = -1
    last_marker: tuple[int, TransactionResult] | None = None
    guard: int = 0


class PartitionNode:
    def __init__(self, world: World, tp: TopicPartition) -> None:
        self.world = world
        self.tp = tp
        self.log: list[Entry] = []
        self.producers: dict[int, ProducerEntry] = {}

    def produce(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        tag: Tag,
        reply: Callable[[type[KafkaError] | None], None],
    ) -> None:
        world = self.world
        entry = self.producers.setdefault(producer_id, ProducerEntry())
        if epoch < entry.epoch:
            world.send(lambda: reply(InvalidProducerEpochError))
            return
        if not world.switches.verification or (entry.open and epoch == entry.epoch):
            self._append(entry, producer_id, epoch, tag)
            world.send(lambda: reply(None))
            return
        # KIP-890 part 1: ask the coordinator first; a marker meanwhile voids the answer.
        entry.guard += 1
        guard = entry.guard

        def verified(response: object) -> None:
            error: type[KafkaError] | None
            if isinstance(response, txn.AddPartitionsToTxnResponse):
                error = response.errors[self.tp]
            else:
                assert isinstance(response, type)
                error = response
            if error is None and entry.guard != guard:
                error = ConcurrentTransactionsError
            if error is None and epoch < entry.epoch:
                error = InvalidProducerEpochError
            if error is None:
                self._append(entry, producer_id, epoch, tag)
            world.send(lambda: reply(error))

        def ask(core: txn.TransactionCoordinator) -> txn.TxnDecision[Any]:
            return txn.TxnDecision(
                core.verify_partitions(
                    transactional_id=tid,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    partitions=(self.tp,),
                )
            )

        world.send(lambda: world.coordinator.request(ask, verified))

    def _append(self, entry: ProducerEntry, producer_id: int, epoch: int, tag: Tag) -> None:
        entry.epoch = max(entry.epoch, epoch)
        entry.open = True
        self.log.append(Entry(self.world.now, producer_id, epoch, tag))

    def write_marker(self, out: txn.SendTxnMarkers) -> type[KafkaError] | None:
        entry = self.producers.setdefault(out.producer_id, ProducerEntry())
        if out.coordinator_epoch < entry.coordinator_epoch:
            return TransactionCoordinatorFencedError
        if out.transaction_version >= 2:
            if entry.last_marker == (out.producer_epoch, out.result) and not entry.open:
                return None  # a repeat of the marker already written
            if out.producer_epoch <= entry.epoch:
                return InvalidProducerEpochError
        elif out.producer_epoch < entry.epoch:
            return InvalidProducerEpochError
        entry.epoch = out.producer_epoch
        entry.open = False
        entry.coordinator_epoch = out.coordinator_epoch
        entry.last_marker = (out.producer_epoch, out.result)
        entry.guard += 1
        self.log.append(
            Entry(self.world.now, out.producer_id, out.producer_epoch, None, out.result)
        )
        return None


# -- producers -----------------------------------------------------------------------------

_RETRIABLE = (
    "CONCURRENT_TRANSACTIONS",
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
)


def _error_of(response: object) -> type[KafkaError] | None:
    """The error of an answer (a bare error class: the request failed before the core)."""
    if isinstance(response, type):
        return response
    if isinstance(response, txn.AddPartitionsToTxnResponse):
        return next(
            (response.errors[tp] for tp in sorted(response.errors) if response.errors[tp]), None
        )
    assert isinstance(response, txn.InitProducerIdResponse | txn.EndTxnResponse), response
    return response.error


class ProducerNode:
    """One transactional id's client, incarnation after incarnation."""

    def __init__(self, world: World, tid: str) -> None:
        self.world = world
        self.tid = tid
        self.incarnation = 0
        self.producer_id = -1
        self.epoch = -1
        self.txn_number = 0
        self.request_id = 0
        self.finished = False
        self.tag: Tag | None = None
        self.partitions: tuple[TopicPartition, ...] = ()
        self.unacked: set[TopicPartition] = set()
        self.failed = False
        self.added = False
        self.end_retries = 0

    def _ask(
        self,
        call: Callable[[txn.TransactionCoordinator], txn.TxnDecision[Any]],
        on_answer: Callable[[object], None],
    ) -> None:
        """A request to the coordinator. Each carries a fresh id: an answer (or the
        timeout) of an older one is ignored."""
        world = self.world
        self.request_id += 1
        rid, incarnation = self.request_id, self.incarnation

        def answer(response: object) -> None:
            if rid == self.request_id and incarnation == self.incarnation:
                self.request_id += 1
                on_answer(response)

        world.send(lambda: world.coordinator.request(call, answer))
        world.at(REQUEST_TIMEOUT_MS, lambda: answer(RequestTimedOutError))

    def _later(self, action: Callable[[], None]) -> None:
        """Retry ``action`` after the backoff if this incarnation is still on the same
        transaction by then (a retry must not act for the next one)."""
        incarnation, tag = self.incarnation, self.tag

        def retry() -> None:
            if (incarnation, tag) == (self.incarnation, self.tag):
                action()

        self.world.at(BACKOFF_MS, retry)

    def _maybe_crash(self) -> bool:
        world = self.world
        if world.healed or world.rng.random() >= CRASH:
            return False
        self.incarnation += 1  # whatever the old one waits for is dropped
        self.tag = None
        world.at(world.rng.randint(0, 500), self.start)
        return True

    def start(self) -> None:
        """A new incarnation: InitProducerId without a producer id."""
        self.incarnation += 1
        self.tag = None
        self._init(-1, -1)

    def _init(self, producer_id: int, epoch: int) -> None:
        """InitProducerId; with a producer id and epoch, the KIP-360 recovery."""
        world = self.world
        incarnation = self.incarnation

        def call(core: txn.TransactionCoordinator) -> txn.TxnDecision[Any]:
            return core.init_producer_id(
                transactional_id=self.tid,
                transaction_timeout_ms=TXN_TIMEOUT_MS,
                now_ms=world.now,
                producer_id=producer_id,
                producer_epoch=epoch,
            )

        def on_answer(response: object) -> None:
            error = _error_of(response)
            if error is None:
                assert isinstance(response, txn.InitProducerIdResponse)
                self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                world.inits[self.tid].append((world.now, incarnation))
                world.at(world.rng.randint(0, 30), self.begin)
            elif error.name in _RETRIABLE or error is RequestTimedOutError:
                self._later(lambda: self._init(producer_id, epoch))
            else:
                world.at(BACKOFF_MS, self.start)  # fenced: a new incarnation

        self._ask(call, on_answer)

    def begin(self) -> None:
        world = self.world
        if world.healed:
            self.finished = True
            return
        if self._maybe_crash():
            return
        self.txn_number += 1
        self.tag = (self.tid, self.incarnation, self.txn_number)
        self.partitions = tuple(world.rng.sample(PARTITIONS, world.rng.randint(1, 3)))
        self.unacked = set(self.partitions)
        self.failed = False
        self.added = False
        pipelined = world.rng.random() < 0.3
        self._add_partitions(pipelined)
        if pipelined:
            self._produce_all()

    def _add_partitions(self, pipelined: bool) -> None:
        world = self.world
        pid, epoch, partitions = self.producer_id, self.epoch, self.partitions

        def call(core: txn.TransactionCoordinator) -> txn.TxnDecision[Any]:
            return core.add_partitions_to_txn(
                transactional_id=self.tid,
                producer_id=pid,
                producer_epoch=epoch,
                partitions=partitions,
                now_ms=world.now,
            )

        def on_answer(response: object) -> None:
            error = _error_of(response)
            if error is None:
                self.added = True
                if not pipelined:
                    self._produce_all()
                elif not self.unacked:
                    self._finish()
            elif error.name in _RETRIABLE:
                self._later(lambda: self._add_partitions(pipelined))
            else:
                self.failed = True
                self._end(ABORT)

        self._ask(call, on_answer)

    def _produce_all(self) -> None:
        world = self.world
        assert self.tag is not None
        tag, pid, epoch, incarnation = self.tag, self.producer_id, self.epoch, self.incarnation
        for tp in self.partitions:

            def reply(error: type[KafkaError] | None, tp: TopicPartition = tp) -> None:
                world.send(lambda: self._produced(incarnation, tag, tp, error))

            partition = world.partitions[tp]
            world.send(lambda p=partition, r=reply: p.produce(self.tid, pid, epoch, tag, r))  # type: ignore[misc]
        # A produce unanswered in time fails the transaction.
        world.at(
            REQUEST_TIMEOUT_MS,
            lambda: self._produced(incarnation, tag, None, RequestTimedOutError),
        )

    def _produced(
        self,
        incarnation: int,
        tag: Tag,
        tp: TopicPartition | None,
        error: type[KafkaError] | None,
    ) -> None:
        if incarnation != self.incarnation or tag != self.tag or not self.unacked:
            return
        if error is None and tp is not None:
            self.unacked.discard(tp)
            if not self.unacked and self.added:
                self._finish()
            return
        if tp is not None and tp not in self.unacked:
            return
        self.unacked = set()
        self.failed = True
        self.request_id += 1  # forget a pending AddPartitions answer
        self._end(ABORT)

    def _finish(self) -> None:
        if self._maybe_crash():
            return
        commit = not self.failed and self.world.rng.random() < 0.75
        self._end(COMMIT if commit else ABORT)

    def _end(self, result: TransactionResult) -> None:
        assert self.tag is not None
        self.end_retries = 0
        if result is COMMIT:
            self.world.commit_asked.add(self.tag)
        self._send_end(result, self.producer_id, self.epoch)

    def _send_end(self, result: TransactionResult, pid: int, epoch: int) -> None:
        world = self.world
        tag = self.tag
        assert tag is not None

        def call(core: txn.TransactionCoordinator) -> txn.TxnDecision[Any]:
            return core.end_txn(
                transactional_id=self.tid,
                producer_id=pid,
                producer_epoch=epoch,
                result=result,
                now_ms=world.now,
                transaction_version=world.switches.client_transaction_version,
            )

        def on_answer(response: object) -> None:
            error = _error_of(response)
            if error is None:
                assert isinstance(response, txn.EndTxnResponse)
                world.client_outcome[tag] = result
                if response.producer_id >= 0:  # version 2 names the next epoch; 1 none
                    self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                world.at(world.rng.randint(0, 30), self.begin)
            elif (
                error.name in _RETRIABLE or error is RequestTimedOutError
            ) and self.end_retries < END_TXN_RETRIES_MAX:
                self.end_retries += 1
                self._later(lambda: self._send_end(result, pid, epoch))
            elif error.name == "PRODUCER_FENCED" and world.rng.random() < 0.5:
                self._init(pid, epoch)  # KIP-360: try to keep the producer id
            else:
                world.at(BACKOFF_MS, self.start)

        self._ask(call, on_answer)


# -- the checker ---------------------------------------------------------------------------


def check(world: World) -> None:
    if not all(p.finished for p in world.producers):
        raise InvariantViolatedError("a producer never finished after the network healed")
    if not world.coordinator.settled():
        raise InvariantViolatedError("a transaction is still open at the coordinator after healing")
    outcomes: dict[Tag, set[TransactionResult]] = {}
    for tp, partition in world.partitions.items():
        open_records: dict[int, list[Entry]] = {}
        last_epoch: dict[int, int] = {}
        for entry in partition.log:
            if entry.epoch < last_epoch.get(entry.producer_id, -1):
                raise InvariantViolatedError(
                    f"{tp}: producer {entry.producer_id} wrote epoch {entry.epoch} "
                    "after a higher one"
                )
            last_epoch[entry.producer_id] = entry.epoch
            if entry.tag is not None:
                open_records.setdefault(entry.producer_id, []).append(entry)
                _check_not_fenced(world, tp, entry)
                continue
            resolved = open_records.pop(entry.producer_id, [])
            tags = sorted({r.tag for r in resolved if r.tag is not None})
            if len(tags) > 1:
                raise InvariantViolatedError(
                    f"{tp}: one marker resolves records of {tags} "
                    "(a late write landed in the next transaction)"
                )
            for r in resolved:
                assert r.tag is not None and entry.result is not None
                outcomes.setdefault(r.tag, set()).add(entry.result)
        for pid, hanging in open_records.items():
            if hanging:
                raise InvariantViolatedError(
                    f"{tp}: producer {pid}'s records {[r.tag for r in hanging]} never got a "
                    "marker (a hanging transaction)"
                )
    for tag, results in outcomes.items():
        if len(results) > 1:
            raise InvariantViolatedError(
                f"transaction {tag} is torn: {sorted(r.value for r in results)}"
            )
        (result,) = results
        told = world.client_outcome.get(tag)
        if told is not None and told is not result:
            raise InvariantViolatedError(
                f"transaction {tag}: EndTxn answered {told.value}, the markers say {result.value}"
            )
        if result is COMMIT and tag not in world.commit_asked:
            raise InvariantViolatedError(
                f"transaction {tag} was committed but its producer never asked to"
            )


def _check_not_fenced(world: World, tp: TopicPartition, entry: Entry) -> None:
    assert entry.tag is not None
    tid, incarnation, _ = entry.tag
    for when, later in world.inits[tid]:
        if later > incarnation and when < entry.time_ms:
            raise InvariantViolatedError(
                f"{tp}: incarnation {incarnation} of {tid} wrote {entry.tag} at "
                f"{entry.time_ms} ms, after incarnation {later} was initialised at {when} ms "
                "(a fenced producer wrote)"
            )


def run_seed(seed: int, switches: Switches = Switches()) -> World:
    world = World(seed, switches)
    world.run()
    check(world)
    return world


def _seeds() -> list[int]:
    one = os.environ.get("RAFTKA_TXN_SIM_SEED")
    if one is not None:
        return [int(one)]
    return list(range(int(os.environ.get("RAFTKA_TXN_SIM_SEEDS", DEFAULT_SEEDS))))


def test_transactions_hold_under_faults() -> None:
    """Every seed: no torn, hanging, late-landed or fenced write; everything ends."""
    committed = aborted = 0
    for seed in _seeds():
        try:
            world = run_seed(seed)
        except AssertionError as exc:
            pytest.fail(f"seed {seed} (replay: RAFTKA_TXN_SIM_SEED={seed}): {exc}")
        committed += sum(1 for r in world.client_outcome.values() if r is COMMIT)
        aborted += sum(1 for r in world.client_outcome.values() if r is ABORT)
    # The runs must exercise both outcomes, or the checks above prove little.
    assert committed > 0 and aborted > 0, (committed, aborted)


@pytest.mark.parametrize(
    ("switches", "symptom"),
    [
        # A produce that reached a partition before (or without) its AddPartitionsToTxn
        # being durable is left behind by the markers: it hangs, or the next
        # transaction's marker takes it along.
        (Switches(verification=False), "(a hanging transaction)"),
        (Switches(verification=False), "(a late write landed in the next transaction)"),
        # Without the per-transaction bump a late produce or EndTxn of one transaction
        # is accepted by the next one at the same epoch.
        (Switches(transaction_version=1), "(a late write landed in the next transaction)"),
        (Switches(transaction_version=1), "is torn"),
        # A version-1 client on a version-2 broker gets version 1: the same exposure.
        (Switches(client_transaction_version=1), "(a late write landed in the next transaction)"),
    ],
    ids=[
        "no-verification-hangs",
        "no-verification-mixes",
        "no-bump-mixes",
        "no-bump-tears",
        "v1-client-mixes",
    ],
)
def test_the_checker_bites(switches: Switches, symptom: str) -> None:
    """With one KIP-890 defence off, some seed breaks a safety invariant and the checker
    names it (liveness failures, which the defences-off runs also show, do not count)."""
    seen = []
    for seed in range(SEEDS_TO_BITE_MAX):
        try:
            run_seed(seed, switches)
        except InvariantViolatedError as exc:
            if symptom in str(exc):
                return
            seen.append(f"seed {seed}: {exc}")
    pytest.fail(f"no seed showed {symptom!r} with {switches}; other failures: {seen[:5]}")
