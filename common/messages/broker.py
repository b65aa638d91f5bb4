"""The broker API's messages (docs/protocol.md, "Broker API"): produce, fetch, list
offsets, metadata, InitProducerId, and the frame that carries record bytes.

Produce requests and fetch answers are *frames* (:mod:`raftka.common.wire`): a JSON
header, then each partition's RecordBatch bytes. The header is a message here
(:class:`ProduceRequest`, :class:`FetchResponse`) whose entries name their
``records_bytes``; :func:`encode_frame` and :func:`decode_frame` put a header message
and the payloads together and take them apart, decoding the header bytes straight into
the message (no dict in between). Record bytes stay bytes.

Both the client and the broker use these classes, and so does a follower's replica
fetcher (a :class:`FetchRequest` with its ``replica_id`` and ``broker_epoch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Final, Protocol, TypeVar

import msgspec

from raftka.common.errors import KafkaError
from raftka.common.messages import (
    Int32,
    Message,
    NonNegInt32,
    NonNegInt64,
    PartitionId,
    TopicName,
    decode,
    encode,
)
from raftka.common.wire import cut_payloads, join_frame, split_frame

__all__ = [
    "PARTITIONS_MAX",
    "AbortedTransaction",
    "CurrentLeader",
    "DivergingEpoch",
    "ErrorObject",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "Int64",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataTopic",
    "ProducePartition",
    "ProducePartitionResponse",
    "ProduceRequest",
    "ProduceResponse",
    "decode_frame",
    "encode_frame",
    "error_object",
]

#: Partitions in one produce, fetch or list-offsets request (the replica manager's
#: REQUEST_PARTITIONS_MAX: a request above it is refused before any work).
PARTITIONS_MAX: Final = 10_000
#: Brokers and topics in one metadata answer; a guard against a runaway peer.
METADATA_ITEMS_MAX: Final = 1_000_000

Int16 = Annotated[int, msgspec.Meta(ge=-(2**15), le=2**15 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
#: Kafka's STRING: an int16 length.
KafkaString = Annotated[str, msgspec.Meta(max_length=2**15 - 1)]


# ---------------------------------------------------------------------------------------
# Shared parts


class ErrorObject(Message, frozen=True, kw_only=True):
    """An error as every raftka answer carries it: Kafka's name and code, a message."""

    error: KafkaString
    error_code: Int16 = -1
    message: str = ""


def error_object(error: KafkaError | None) -> ErrorObject | None:
    """The wire form of ``error`` (None stays None)."""
    if error is None:
        return None
    return ErrorObject(error=error.name, error_code=error.code, message=error.message)


class CurrentLeader(Message, frozen=True, kw_only=True):
    """Who leads a partition as the answering broker's metadata says (with
    NOT_LEADER_OR_FOLLOWER), so a client can go there without a metadata round trip."""

    leader_id: Int32
    leader_epoch: Int32 = -1
    address: str | None = None


class DivergingEpoch(Message, frozen=True, kw_only=True):
    """A follower's log diverges from the leader's: truncate to ``end_offset``."""

    epoch: Int32
    end_offset: Int64


# ---------------------------------------------------------------------------------------
# The frame


class FrameEntry(Protocol):
    @property
    def records_bytes(self) -> int: ...


class FramedMessage(Protocol):
    """A frame header: its entries, in payload order, under the field ``ENTRIES``."""

    ENTRIES: ClassVar[str]

    def frame_entries(self) -> Sequence[FrameEntry]: ...


F = TypeVar("F", bound=FramedMessage)


def encode_frame(header: FramedMessage, payloads: Sequence[bytes | memoryview]) -> bytes:
    """``header`` (whose entries already name their ``records_bytes``) and the payloads,
    one per entry, as one frame body."""
    entries = header.frame_entries()
    assert len(entries) == len(payloads), (len(entries), len(payloads))
    for entry, payload in zip(entries, payloads, strict=True):
        assert entry.records_bytes == len(payload), (entry.records_bytes, len(payload))
    return join_frame(encode(header), payloads)


def decode_frame(body: bytes, header_type: type[F]) -> tuple[F, list[memoryview]]:
    """The header message and one payload view per entry; INVALID_REQUEST (naming the
    field) when the header breaks its bounds or the lengths do not fit the body."""
    head, rest = split_frame(body)
    header = decode(head, header_type)
    payloads = cut_payloads(
        rest,
        [entry.records_bytes for entry in header.frame_entries()],
        lambda i, size: (
            f"records_bytes {size} overruns the body - at `$.{header.ENTRIES}[{i}].records_bytes`"
        ),
    )
    return header, payloads


# ---------------------------------------------------------------------------------------
# Produce (POST /v1/produce: a frame; the answer is JSON, or 204 for acks=0)


class ProducePartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: PartitionId
    records_bytes: NonNegInt32 = 0


class ProduceRequest(Message, frozen=True, kw_only=True):
    #: 0, 1 or -1; other values answer INVALID_REQUIRED_ACKS per partition (Kafka's
    #: int16 bound is the only one checked here).
    acks: Int16 = 1
    timeout_ms: NonNegInt32 = 30_000
    #: A transactional producer's id (its batches carry the transactional flag): the
    #: leader verifies a producer's first transactional batch at a partition with the
    #: id's transaction coordinator (KIP-890 part 1) before appending it.
    transactional_id: KafkaString | None = None
    partitions: Annotated[tuple[ProducePartition, ...], msgspec.Meta(max_length=PARTITIONS_MAX)]

    ENTRIES: ClassVar[str] = "partitions"

    def frame_entries(self) -> Sequence[ProducePartition]:
        return self.partitions


class ProducePartitionResponse(Message, frozen=True, kw_only=True):
    topic: str
    partition: int
    error: ErrorObject | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    current_leader: CurrentLeader | None = None


class ProduceResponse(Message, frozen=True, kw_only=True):
    responses: tuple[ProducePartitionResponse, ...] = ()

    ENTRIES: ClassVar[str] = "responses"

    def frame_entries(self) -> Sequence[FrameEntry]:
        return ()  # a JSON answer: no payloads


# ---------------------------------------------------------------------------------------
# InitProducerId (POST /v1/init-producer-id)


class InitProducerIdRequest(Message, frozen=True, kw_only=True):
    #: Null for an idempotent producer; set, the id's transaction coordinator answers.
    transactional_id: KafkaString | None = None
    timeout_ms: NonNegInt32 = 30_000
    #: The transactional producer's transaction.timeout.ms (Kafka's default, 60 s).
    transaction_timeout_ms: Int32 = 60_000
    #: KIP-360: the id and epoch the producer holds, to bump them after an error.
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


class InitProducerIdResponse(Message, frozen=True, kw_only=True):
    error: ErrorObject | None = None
    producer_id: int = -1
    producer_epoch: int = -1


# ---------------------------------------------------------------------------------------
# Fetch (POST /v1/fetch: JSON; the answer is a frame)


class FetchPartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: PartitionId
    #: Signed as Kafka's: a negative offset answers OFFSET_OUT_OF_RANGE per partition.
    fetch_offset: Int64
    partition_max_bytes: NonNegInt32 = 1024 * 1024
    #: KIP-320 fencing; null skips the check.
    current_leader_epoch: Int32 | None = None
    #: Followers: the epoch of their last record (divergence check).
    last_fetched_epoch: Int32 | None = None
    #: Followers: their log start offset.
    log_start_offset: Int64 = -1


class FetchRequest(Message, frozen=True, kw_only=True):
    """A consumer's (``replica_id`` -1) or a follower's fetch (its broker id and
    broker epoch, for KIP-380-style fencing of a restarted follower)."""

    replica_id: Int32 = -1
    broker_epoch: Int64 = -1
    max_wait_ms: NonNegInt32 = 0
    min_bytes: Int32 = 1
    max_bytes: NonNegInt32 = 50 * 1024 * 1024
    #: Kafka's isolation level: 0 read_uncommitted, 1 read_committed (data only below
    #: the last stable offset, with the aborted transactions of the range).
    isolation_level: Annotated[int, msgspec.Meta(ge=0, le=1)] = 0
    partitions: Annotated[tuple[FetchPartition, ...], msgspec.Meta(max_length=PARTITIONS_MAX)]


class AbortedTransaction(Message, frozen=True, kw_only=True):
    """Kafka's AbortedTransaction: a producer's aborted transaction starting at
    ``first_offset`` (it ends at that producer's next ABORT marker)."""

    producer_id: Int64
    first_offset: Int64


class FetchPartitionResponse(Message, frozen=True, kw_only=True):
    topic: str
    partition: int
    error: ErrorObject | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: DivergingEpoch | None = None
    current_leader: CurrentLeader | None = None
    #: read_committed only (null for read_uncommitted, as Kafka's).
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    records_bytes: NonNegInt64 = 0


class FetchResponse(Message, frozen=True, kw_only=True):
    responses: tuple[FetchPartitionResponse, ...] = ()

    ENTRIES: ClassVar[str] = "responses"

    def frame_entries(self) -> Sequence[FetchPartitionResponse]:
        return self.responses


# ---------------------------------------------------------------------------------------
# ListOffsets (POST /v1/list-offsets)


class ListOffsetsPartition(Message, frozen=True, kw_only=True):
    topic: TopicName
    partition: PartitionId
    #: -2 earliest, -1 latest, else a timestamp in ms.
    timestamp: Int64


class ListOffsetsRequest(Message, frozen=True, kw_only=True):
    #: 1 (read_committed): "latest" is the last stable offset, not the high watermark.
    isolation_level: Annotated[int, msgspec.Meta(ge=0, le=1)] = 0
    partitions: Annotated[tuple[ListOffsetsPartition, ...], msgspec.Meta(max_length=PARTITIONS_MAX)]


class ListOffsetsPartitionResponse(Message, frozen=True, kw_only=True):
    topic: str
    partition: int
    error: ErrorObject | None = None
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int | None = None


class ListOffsetsResponse(Message, frozen=True, kw_only=True):
    responses: tuple[ListOffsetsPartitionResponse, ...] = ()


# ---------------------------------------------------------------------------------------
# Metadata (GET /v1/metadata?topics=a,b)


class MetadataRequest(Message, frozen=True, kw_only=True):
    """The query string's ``topics`` (comma-separated); None asks for every topic."""

    topics: Annotated[tuple[TopicName, ...], msgspec.Meta(max_length=PARTITIONS_MAX)] | None = None


class MetadataBroker(Message, frozen=True, kw_only=True):
    id: int
    host: str | None = None
    port: int | None = None
    rack: str | None = None


class MetadataPartition(Message, frozen=True, kw_only=True):
    partition: int
    #: -1 (or null) while no leader is elected.
    leader: int | None = -1
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    #: KIP-966's eligible leader replicas: out of the ISR, yet holding every record
    #: below the high watermark (see metadata/election.py).
    eligible_leader_replicas: tuple[int, ...] = ()
    error: ErrorObject | None = None


class MetadataTopic(Message, frozen=True, kw_only=True):
    name: str
    topic_id: str | None = None
    error: ErrorObject | None = None
    partitions: tuple[MetadataPartition, ...] = ()


class MetadataResponse(Message, frozen=True, kw_only=True):
    controller_id: int | None = None
    controllers: tuple[str, ...] = ()
    brokers: Annotated[tuple[MetadataBroker, ...], msgspec.Meta(max_length=METADATA_ITEMS_MAX)] = ()
    topics: Annotated[tuple[MetadataTopic, ...], msgspec.Meta(max_length=METADATA_ITEMS_MAX)] = ()
    metadata_offset: int = -1
