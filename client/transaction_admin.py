"""Transaction administration: list, describe, abort and find hanging transactions.

Kafka's Admin transaction calls (KIP-664: listTransactions, describeTransactions,
describeProducers, abortTransaction) and kafka-transactions.sh's hanging-transaction
finder, over raftka's HTTP API. :class:`AsyncTransactionAdmin` is the implementation;
:class:`TransactionAdmin` runs it on a loop thread. ``raftka transactions`` is its CLI.

* ``list_transactions`` asks every live broker (each lists the transactional ids it
  coordinates), like ``list_groups``.
* ``describe_transaction`` asks the id's coordinator (FindCoordinator key_type 1).
* ``abort_ongoing`` aborts an id's ongoing transaction *through its coordinator*: it
  reads the producer id and epoch from DescribeTransactions and sends EndTxn(abort)
  with them, so no InitProducerId (which would also fence the producer) is needed; the
  coordinator writes the ABORT markers and, with KIP-890 part 2, bumps the epoch, so
  the running producer's next request is fenced (it must abort too and go on).
* ``abort_marker`` is Kafka's ``abortTransaction`` for a *hanging* transaction, one the
  coordinator no longer knows: it writes an ABORT marker to one partition directly
  (WriteTxnMarkers at the leader) with the producer id, epoch and coordinator epoch the
  operator took from ``describe_producers`` / ``find_hanging``.
* ``find_hanging`` is kafka-transactions.sh's ``find-hanging``; see its docstring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from raftka.client._sync import LoopThread
from raftka.client._transport import error_from_message
from raftka.client.group_admin import AsyncGroupAdmin, GroupAdmin
from raftka.common.errors import (
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaError,
    LeaderNotAvailableError,
)
from raftka.common.messages import transactions as api
from raftka.common.messages.producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from raftka.common.structs import TopicPartition

__all__ = [
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "AsyncTransactionAdmin",
    "HangingTransaction",
    "OpenTransaction",
    "ProducerDescription",
    "TransactionAdmin",
    "TransactionDescription",
    "TransactionListing",
]

#: kafka-transactions.sh find-hanging's ``--max-transaction-timeout`` default (15
#: minutes, Kafka's ``transaction.max.timeout.ms`` default).
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS: Final = 900_000

#: FindCoordinator's key type of a transactional id.
_TRANSACTION_KEY: Final = 1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: -1 when no transaction is open.
    transaction_start_time_ms: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One producer of a partition, as the partition leader's producer state has it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    #: First offset of its open transaction here; -1 when none is open.
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerDescription


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    partition: TopicPartition
    producer: ProducerDescription
    #: The transactional id the coordinators list for the producer id, if any.
    transactional_id: str | None
    #: Why it is hanging, one line.
    reason: str


class AsyncTransactionAdmin(AsyncGroupAdmin):
    """Transaction administration on asyncio (same arguments as AsyncGroupAdmin)."""

    _kind = "transaction admin"

    async def list_transactions_from(
        self,
        *,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        timeout_ms: int | None = None,
    ) -> tuple[list[TransactionListing], dict[int, KafkaError]]:
        """Every transaction of the live brokers that answered (filtered by Kafka's
        state names and producer ids), and per broker that did not, its error. An
        unknown state filter is INVALID_REQUEST naming it (Kafka's tool refuses it
        too). Raises when no broker answered."""
        transport, _ = self._started()
        deadline = self._deadline(timeout_ms)
        brokers = await self._brokers(deadline)
        request = api.ListTransactionsRequest(
            state_filters=tuple(states), producer_id_filters=tuple(producer_ids)
        )

        async def ask(address: str) -> api.ListTransactionsResponse:
            while True:
                answer = await transport.request_message(
                    address,
                    "POST",
                    "/v1/list-transactions",
                    api.ListTransactionsResponse,
                    message=request,
                    timeout_ms=self._remaining(deadline),
                )
                error = None if answer.error is None else error_from_message(answer.error)
                if error is None or not error.retriable:
                    if error is not None:
                        raise error
                    return answer
                await self._backoff(deadline, error)  # loading: ask again

        answers = await asyncio.gather(
            *(ask(address) for _, address in brokers), return_exceptions=True
        )
        found: dict[str, TransactionListing] = {}
        errors: dict[int, KafkaError] = {}
        for (broker_id, _), answer in zip(brokers, answers, strict=True):
            if isinstance(answer, KafkaError):
                errors[broker_id] = answer
                continue
            if isinstance(answer, BaseException):
                raise answer  # not a broker's failure: a bug or a cancellation
            if answer.unknown_state_filters:
                unknown = ", ".join(answer.unknown_state_filters)
                raise InvalidRequestError(f"unknown transaction state filter(s): {unknown}")
            for t in answer.transaction_states:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state, broker_id
                )
        if errors and len(errors) == len(brokers):
            raise next(iter(errors.values()))
        return [found[t] for t in sorted(found)], errors

    async def list_transactions(
        self, *, states: Sequence[str] = (), timeout_ms: int | None = None
    ) -> list[TransactionListing]:
        listed, _ = await self.list_transactions_from(states=states, timeout_ms=timeout_ms)
        return listed

    async def describe_transaction(
        self, transactional_id: str, *, timeout_ms: int | None = None
    ) -> TransactionDescription:
        """The coordinator's view of one id; TRANSACTIONAL_ID_NOT_FOUND for an id it
        does not have."""
        deadline = self._deadline(timeout_ms)
        while True:
            node_id, answer = await self._coordinator_call(
                transactional_id,
                "/v1/describe-transactions",
                api.DescribeTransactionsRequest(transactional_ids=(transactional_id,)),
                api.DescribeTransactionsResponse,
                deadline,
                key_type=_TRANSACTION_KEY,
            )
            (s,) = answer.transaction_states
            if s.error is None:
                break
            error = error_from_message(s.error)
            if not error.retriable:
                raise error
            await self._backoff(deadline, error)
        return TransactionDescription(
            transactional_id=s.transactional_id,
            coordinator_id=node_id,
            state=s.transaction_state,
            producer_id=s.producer_id,
            producer_epoch=s.producer_epoch,
            transaction_timeout_ms=s.transaction_timeout_ms,
            transaction_start_time_ms=s.transaction_start_time_ms,
            partitions=tuple(
                TopicPartition(t.name, p) for t in s.topics for p in sorted(t.partitions)
            ),
        )

    async def abort_ongoing(
        self, transactional_id: str, *, timeout_ms: int | None = None
    ) -> TransactionDescription:
        """Abort the id's ongoing transaction through its coordinator (EndTxn(abort)
        with the producer id and epoch the coordinator describes); INVALID_TXN_STATE
        when it has none ongoing. Returns the description after the abort."""
        deadline = self._deadline(timeout_ms)
        before = await self.describe_transaction(transactional_id, timeout_ms=timeout_ms)
        if before.state != "Ongoing":
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no ongoing transaction "
                f"(state {before.state})"
            )
        _, answer = await self._coordinator_call(
            transactional_id,
            "/v1/end-txn",
            api.EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=before.producer_id,
                producer_epoch=before.producer_epoch,
                committed=False,
            ),
            api.EndTxnResponse,
            deadline,
            key_type=_TRANSACTION_KEY,
        )
        if answer.error is not None:
            raise error_from_message(answer.error)
        return await self.describe_transaction(transactional_id, timeout_ms=timeout_ms)

    async def abort_marker(
        self,
        partition: TopicPartition,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timeout_ms: int | None = None,
    ) -> None:
        """Write an ABORT marker for ``producer_id``'s open transaction on
        ``partition`` at its leader (Kafka's Admin.abortTransaction). The leader checks
        the epochs as for the coordinator's markers (INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED)."""
        transport, metadata = self._started()
        deadline = self._deadline(timeout_ms)
        request = api.WriteTxnMarkersRequest(
            markers=(
                api.WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=False,
                    topics=(api.TxnTopic(name=partition.topic, partitions=(partition.partition,)),),
                    coordinator_epoch=coordinator_epoch,
                    # Kafka's admin abort sends no transaction version: the marker's
                    # epoch may equal the producer's (the open transaction's own).
                    transaction_version=0,
                ),
            )
        )
        last: KafkaError | None = None
        while True:
            try:
                address = await self._leader(partition, deadline)
                answer = await transport.request_message(
                    address,
                    "POST",
                    "/v1/write-txn-markers",
                    api.WriteTxnMarkersResponse,
                    message=request,
                    timeout_ms=self._remaining(deadline),
                )
                raw = next(
                    (p.error for m in answer.markers for t in m.topics for p in t.partitions),
                    None,
                )
                if raw is None:
                    return
                error = error_from_message(raw)
                if not error.retriable:
                    raise error
                last = error
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
            metadata.invalidate()
            await self._backoff(deadline, last)

    async def _leader(self, tp: TopicPartition, deadline_ms: int) -> str:
        _, metadata = self._started()
        await metadata.wait_for_topic(tp.topic, deadline_ms)
        found = metadata.view.leader_address(tp)
        if found is None:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader now")
        return found[1]

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, list[ProducerDescription]]:
        """Each partition's producers at its leader (Kafka's describeProducers),
        retrying leader moves until the deadline."""
        transport, metadata = self._started()
        deadline = self._deadline(timeout_ms)
        remaining = set(partitions)
        out: dict[TopicPartition, list[ProducerDescription]] = {}
        last: KafkaError | None = None
        while remaining:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                try:
                    by_leader.setdefault(await self._leader(tp, deadline), []).append(tp)
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
            for address, tps in by_leader.items():
                topics: dict[str, list[int]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                try:
                    answer = await transport.request_message(
                        address,
                        "POST",
                        "/v1/describe-producers",
                        DescribeProducersResponse,
                        message=DescribeProducersRequest(
                            topics=tuple(
                                api.TxnTopic(name=t, partitions=tuple(ps))
                                for t, ps in topics.items()
                            )
                        ),
                        timeout_ms=self._remaining(deadline),
                    )
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                    continue
                for t in answer.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error is not None:
                            error = error_from_message(p.error)
                            if not error.retriable:
                                raise error
                            last = error
                            continue
                        out[tp] = [
                            ProducerDescription(
                                producer_id=s.producer_id,
                                producer_epoch=s.producer_epoch,
                                last_sequence=s.last_sequence,
                                last_timestamp=s.last_timestamp,
                                coordinator_epoch=s.coordinator_epoch,
                                current_txn_start_offset=s.current_txn_start_offset,
                            )
                            for s in p.active_producers
                        ]
                        remaining.discard(tp)
            if remaining:
                metadata.invalidate()
                await self._backoff(deadline, last)
        return out

    async def broker_partitions(
        self, broker_id: int, *, timeout_ms: int | None = None
    ) -> list[TopicPartition]:
        """The partitions ``broker_id`` leads now (where its producer state answers)."""
        _, metadata = self._started()
        deadline = self._deadline(timeout_ms)
        last: KafkaError | None = None
        while True:
            try:
                view = await metadata.refresh(all_topics=True)
                break
            except KafkaError as e:
                last = e
            await self._backoff(deadline, last)
        if broker_id not in view.brokers:
            raise InvalidRequestError(f"broker {broker_id} is not a live broker")
        return [
            TopicPartition(t.name, p.partition)
            for t in sorted(view.topics.values(), key=lambda t: t.name)
            for p in t.partitions
            if p.leader == broker_id
        ]

    async def find_hanging(
        self,
        *,
        broker_id: int | None = None,
        partitions: Iterable[TopicPartition] = (),
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        now_ms: int,
        timeout_ms: int | None = None,
    ) -> list[HangingTransaction]:
        """kafka-transactions.sh ``find-hanging``: the open transactions of the
        partitions ``broker_id`` leads (or of ``partitions``) that no coordinator will
        ever finish. An open transaction (its producer has a
        ``current_txn_start_offset`` in DescribeProducers) is hanging when

        * its producer id has no transactional id at any coordinator (ListTransactions
          by producer id), or that id's transaction is not Ongoing / PrepareCommit /
          PrepareAbort with this partition under this producer id (the coordinator
          finished or forgot it, so no marker will come); or
        * its producer last wrote here more than ``max_transaction_timeout_ms`` ago
          (``transaction.max.timeout.ms``: the coordinator would have aborted any
          transaction of its own by then).

        A transaction whose markers are in flight (PrepareCommit/PrepareAbort with the
        partition) is not reported. ``now_ms`` is wall-clock time (the producers'
        ``last_timestamp`` is the batch's)."""
        wanted = list(partitions)
        if broker_id is not None:
            wanted += await self.broker_partitions(broker_id, timeout_ms=timeout_ms)
        described = await self.describe_producers(wanted, timeout_ms=timeout_ms)
        open_txns = [
            OpenTransaction(tp, p)
            for tp, ps in sorted(described.items())
            for p in ps
            if p.current_txn_start_offset >= 0
        ]
        if not open_txns:
            return []
        listed, _ = await self.list_transactions_from(
            producer_ids=sorted({o.producer.producer_id for o in open_txns}),
            timeout_ms=timeout_ms,
        )
        ids = {t.producer_id: t.transactional_id for t in listed}
        descriptions: dict[str, TransactionDescription | KafkaError] = {}
        for tid in sorted(set(ids.values())):
            try:
                descriptions[tid] = await self.describe_transaction(tid, timeout_ms=timeout_ms)
            except KafkaError as e:
                if e.retriable:
                    raise
                descriptions[tid] = e  # e.g. TRANSACTIONAL_ID_NOT_FOUND: it expired
        hanging = []
        for o in open_txns:
            owner = ids.get(o.producer.producer_id)
            reason = _hanging_reason(
                o,
                owner,
                None if owner is None else descriptions.get(owner),
                max_transaction_timeout_ms,
                now_ms,
            )
            if reason is not None:
                hanging.append(HangingTransaction(o.partition, o.producer, owner, reason))
        return hanging


_LIVE_STATES: Final = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def _hanging_reason(
    o: OpenTransaction,
    transactional_id: str | None,
    description: TransactionDescription | KafkaError | None,
    max_transaction_timeout_ms: int,
    now_ms: int,
) -> str | None:
    """Why ``o`` is hanging, or None when a coordinator still owns it (pure: tested
    on its own)."""
    age = now_ms - o.producer.last_timestamp
    if age > max_transaction_timeout_ms:
        return f"open for {age} ms, above transaction.max.timeout.ms {max_transaction_timeout_ms}"
    if transactional_id is None:
        return "no coordinator knows the producer id"
    if isinstance(description, KafkaError) or description is None:
        return f"the coordinator does not have {transactional_id!r}: {description}"
    if description.producer_id != o.producer.producer_id:
        return (
            f"{transactional_id!r} now has producer id {description.producer_id}, "
            f"not {o.producer.producer_id}"
        )
    if description.state not in _LIVE_STATES:
        return f"{transactional_id!r} is {description.state}"
    if o.partition not in description.partitions:
        tp = f"{o.partition.topic}-{o.partition.partition}"
        return f"{transactional_id!r}'s transaction does not include {tp}"
    return None


class TransactionAdmin(GroupAdmin):
    """The blocking face of :class:`AsyncTransactionAdmin` (same arguments and
    methods; the group calls too)."""

    def __init__(self, **config: Any) -> None:
        self._txn = AsyncTransactionAdmin(**config)
        self._async = self._txn
        self._thread = LoopThread("raftka-transaction-admin")

    def list_transactions_from(
        self, **kw: Any
    ) -> tuple[list[TransactionListing], dict[int, KafkaError]]:
        return self._run(self._txn.list_transactions_from(**kw))

    def list_transactions(self, **kw: Any) -> list[TransactionListing]:
        return self._run(self._txn.list_transactions(**kw))

    def describe_transaction(self, transactional_id: str, **kw: Any) -> TransactionDescription:
        return self._run(self._txn.describe_transaction(transactional_id, **kw))

    def abort_ongoing(self, transactional_id: str, **kw: Any) -> TransactionDescription:
        return self._run(self._txn.abort_ongoing(transactional_id, **kw))

    def abort_marker(self, partition: TopicPartition, **kw: Any) -> None:
        self._run(self._txn.abort_marker(partition, **kw))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], **kw: Any
    ) -> dict[TopicPartition, list[ProducerDescription]]:
        return self._run(self._txn.describe_producers(list(partitions), **kw))

    def find_hanging(self, **kw: Any) -> list[HangingTransaction]:
        return self._run(self._txn.find_hanging(**kw))
