"""The transaction APIs' messages (docs/protocol.md, "Transactions"): KIP-98's
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and WriteTxnMarkers, the
KIP-664 views DescribeTransactions and ListTransactions, as JSON over raftka's HTTP API.

InitProducerId (with a ``transactional_id``) and FindCoordinator (``key_type`` 1) keep
their existing messages (:mod:`.broker`, :mod:`.coordinator`). Field names follow
Kafka's schemas in snake case; errors travel inside the answers at the level Kafka puts
them (:class:`ErrorObject`, null for none). ``verify_only`` is KIP-890 part 1: a
partition leader asking the coordinator whether a partition is in the producer's
ongoing transaction before it appends the producer's first transactional batch there.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from raftka.common.messages import Int32, Message, PartitionId, TopicName
from raftka.common.messages.broker import ErrorObject, Int16, Int64, KafkaString

__all__ = [
    "TXN_ITEMS_MAX",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "DescribedTransactionState",
    "EndTxnRequest",
    "EndTxnResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
    "ListedTransaction",
    "TxnOffsetCommitPartition",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "TxnOffsetCommitTopic",
    "TxnPartitionResult",
    "TxnTopic",
    "TxnTopicResult",
    "WritableTxnMarker",
    "WritableTxnMarkerResult",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
]

#: Items of one list in a request (topics, partitions, markers, ids).
TXN_ITEMS_MAX: Final = 100_000

TransactionalId = Annotated[str, msgspec.Meta(min_length=1, max_length=2**15 - 1)]
Partitions = Annotated[tuple[PartitionId, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)]


class TxnTopic(Message, frozen=True, kw_only=True):
    name: TopicName
    partitions: Partitions


Topics = Annotated[tuple[TxnTopic, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)]


class TxnPartitionResult(Message, frozen=True, kw_only=True):
    partition_index: int
    error: ErrorObject | None = None


class TxnTopicResult(Message, frozen=True, kw_only=True):
    name: str
    partitions: tuple[TxnPartitionResult, ...] = ()


# ---------------------------------------------------------------------------------------
# AddPartitionsToTxn (client -> coordinator; with verify_only, leader -> coordinator)


class AddPartitionsToTxnRequest(Message, frozen=True, kw_only=True):
    transactional_id: TransactionalId
    producer_id: Int64
    producer_epoch: Int16
    topics: Topics
    #: KIP-890 part 1: only check, write nothing.
    verify_only: bool = False


class AddPartitionsToTxnResponse(Message, frozen=True, kw_only=True):
    #: A request-level error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...).
    error: ErrorObject | None = None
    results: tuple[TxnTopicResult, ...] = ()


# ---------------------------------------------------------------------------------------
# AddOffsetsToTxn (client -> transaction coordinator)


class AddOffsetsToTxnRequest(Message, frozen=True, kw_only=True):
    transactional_id: TransactionalId
    producer_id: Int64
    producer_epoch: Int16
    group_id: KafkaString


class AddOffsetsToTxnResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None


# ---------------------------------------------------------------------------------------
# EndTxn (client -> transaction coordinator)


class EndTxnRequest(Message, frozen=True, kw_only=True):
    transactional_id: TransactionalId
    producer_id: Int64
    producer_epoch: Int16
    #: True: commit; False: abort.
    committed: bool
    #: The client's transaction version (Kafka 4's clientTransactionVersion): raftka's
    #: own client is a version-2 client (it takes the bumped epoch from the answer);
    #: the Kafka listener passes 1 for EndTxn v0-4, whose answer has no epoch.
    transaction_version: Annotated[int, msgspec.Meta(ge=1, le=2)] = 2


class EndTxnResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    #: Transaction version 2 (KIP-890 part 2): the id and epoch to use from now on.
    producer_id: int = -1
    producer_epoch: int = -1


# ---------------------------------------------------------------------------------------
# TxnOffsetCommit (client -> group coordinator; visible only once the transaction commits)


class TxnOffsetCommitPartition(Message, frozen=True, kw_only=True):
    partition_index: PartitionId
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: KafkaString | None = None


class TxnOffsetCommitTopic(Message, frozen=True, kw_only=True):
    name: TopicName
    partitions: Annotated[
        tuple[TxnOffsetCommitPartition, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)
    ]


class TxnOffsetCommitRequest(Message, frozen=True, kw_only=True):
    transactional_id: TransactionalId
    group_id: KafkaString
    producer_id: Int64
    producer_epoch: Int16
    #: KIP-447: the consumer's group metadata, so a zombie member is fenced.
    generation_id: Int32 = -1
    member_id: KafkaString = ""
    group_instance_id: KafkaString | None = None
    topics: Annotated[tuple[TxnOffsetCommitTopic, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)]


class TxnOffsetCommitResponse(Message, frozen=True, kw_only=True):
    topics: tuple[TxnTopicResult, ...] = ()


# ---------------------------------------------------------------------------------------
# WriteTxnMarkers (transaction coordinator -> partition leader, broker to broker)


class WritableTxnMarker(Message, frozen=True, kw_only=True):
    producer_id: Int64
    producer_epoch: Int16
    #: True: COMMIT; False: ABORT.
    transaction_result: bool
    topics: Topics
    coordinator_epoch: Int32
    #: KIP-890: with 2 the marker's epoch must be above the producer's at the partition.
    transaction_version: Annotated[int, msgspec.Meta(ge=0, le=2)] = 2


class WriteTxnMarkersRequest(Message, frozen=True, kw_only=True):
    markers: Annotated[tuple[WritableTxnMarker, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)]


class WritableTxnMarkerResult(Message, frozen=True, kw_only=True):
    producer_id: int
    topics: tuple[TxnTopicResult, ...] = ()


class WriteTxnMarkersResponse(Message, frozen=True, kw_only=True):
    markers: tuple[WritableTxnMarkerResult, ...] = ()


# ---------------------------------------------------------------------------------------
# DescribeTransactions and ListTransactions (admin views, KIP-664)


class DescribeTransactionsRequest(Message, frozen=True, kw_only=True):
    transactional_ids: Annotated[
        tuple[TransactionalId, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)
    ]


class DescribedTransactionState(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    transactional_id: str
    #: Kafka's state name (Empty, Ongoing, PrepareCommit, ..., Dead).
    transaction_state: str = ""
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: tuple[TxnTopic, ...] = ()


class DescribeTransactionsResponse(Message, frozen=True, kw_only=True):
    transaction_states: tuple[DescribedTransactionState, ...] = ()


class ListTransactionsRequest(Message, frozen=True, kw_only=True):
    #: Empty: every state.
    state_filters: Annotated[tuple[KafkaString, ...], msgspec.Meta(max_length=16)] = ()
    #: Empty: every producer.
    producer_id_filters: Annotated[tuple[Int64, ...], msgspec.Meta(max_length=TXN_ITEMS_MAX)] = ()
    #: KIP-994: only transactions running longer than this (-1: all).
    duration_filter_ms: Int64 = -1


class ListedTransaction(Message, frozen=True, kw_only=True):
    transactional_id: str
    producer_id: int
    transaction_state: str


class ListTransactionsResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    #: State filters this broker does not know (Kafka's UnknownStateFilters).
    unknown_state_filters: tuple[str, ...] = ()
    transaction_states: tuple[ListedTransaction, ...] = ()
