"""KIP-890 part 1 on the produce path: a leader verifies a producer's first
transactional batch at a partition with the transaction coordinator before appending.

Theory of operation. A transactional batch that would start its producer's
transaction at a partition (producer state's ``needs_verification``) is appended only
if the coordinator of the request's ``transactional_id`` says the partition is in that
producer's ongoing transaction at exactly that epoch: the leader sends it
``AddPartitionsToTxn`` with ``verify_only`` (``POST /v1/add-partitions-to-txn`` to the
leader of the id's ``__transaction_state`` partition, found in this broker's metadata
image) and appends only the partitions it answers ``null`` for. Before asking, the
leader takes producer state's *verification guard* for the producer; the core compares
it again right before the append, so a marker written meanwhile (the coordinator ended
that transaction) voids the answer (``Replica.append_as_leader``).

Errors, as Kafka's ``ReplicaManager`` maps them: the coordinator's INVALID_TXN_STATE,
PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING (and anything else not retriable) reach
the producer as they are; CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR, and a
coordinator that cannot be found or reached, become NOT_ENOUGH_REPLICAS: retriable for
every producer and, unlike NOT_LEADER_OR_FOLLOWER, no reason to refresh metadata
(Kafka's choice). ``transaction.partition.verification.enable=false``
skips all of this (the core then gets no guards and checks nothing).

A produce with transactional batches but no ``transactional_id`` is refused whole:
Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED (its authorizer finds no id to
authorize); raftka's HTTP API has no authorizer and answers INVALID_REQUEST there (the
Kafka listener answers Kafka's error).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import aiohttp

from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.producer_state import ProducerBatch, VerificationGuard
from raftka.broker.replication.data_plane import Partition
from raftka.common.errors import (
    KafkaError,
    NotEnoughReplicasError,
    error_for_name,
)
from raftka.common.messages import decode, encode
from raftka.common.messages.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    TxnTopic,
)
from raftka.common.record.header import iter_batches
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import NO_LEADER
from raftka.server_common.node_http import PLAIN_HTTP, NodeHttp
from raftka.storage.log_manager import PartitionKey

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TxnVerifier",
    "Verification",
    "has_transactional_batch",
    "verification_error",
]

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
#: The coordinator's answers Kafka turns into NOT_ENOUGH_REPLICAS (retriable, no
#: metadata refresh): the verification could not be done now, not "refused".
_RETRY_AS_NOT_ENOUGH_REPLICAS: Final = frozenset(
    {
        "CONCURRENT_TRANSACTIONS",
        "NETWORK_EXCEPTION",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
    }
)


def has_transactional_batch(data: bytes | bytearray | memoryview) -> bool:
    """True if any batch of ``data`` has the transactional bit (headers only; a batch
    that does not parse is the validator's to refuse)."""
    try:
        return any(h.is_transactional for _, h in iter_batches(data, check_crc=False))
    except KafkaError:
        return False


def verification_error(name: str, message: str = "") -> KafkaError:
    """The produce error for the coordinator's (or the call's) error ``name``."""
    if name in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return NotEnoughReplicasError(
            "unable to verify the partition has been added to the transaction; "
            f"underlying error: {name}{': ' + message if message else ''}"
        )
    return error_for_name(name, message)


@dataclass(slots=True)
class Verification:
    """What a produce carries to the append: per partition, the producers verified
    (with their guards), and the partitions refused with the error to answer."""

    guards: dict[PartitionKey, dict[int, VerificationGuard]] = field(default_factory=dict)
    errors: dict[PartitionKey, KafkaError] = field(default_factory=dict)


class TxnVerifier:
    """The network half of KIP-890 part 1 (see the module docstring)."""

    def __init__(
        self,
        *,
        image: Callable[[], MetadataImage],
        address_of: Callable[[int], str | None],
        session: Callable[[], aiohttp.ClientSession | None],
        http: NodeHttp = PLAIN_HTTP,
    ) -> None:
        self._http = http
        self._image = image
        self._address_of = address_of
        self._session = session
        self.requests = 0  # verify_only calls sent (tests and metrics read it)

    async def verify(
        self,
        transactional_id: str,
        entries: Iterable[tuple[str, int, bytes]],
        partitions: Mapping[PartitionKey, Partition],
        *,
        timeout_ms: int,
    ) -> Verification:
        """Ask the coordinator about every partition of ``entries`` whose batches
        would start a transaction there; the guards and errors for the append."""
        out = Verification()
        # (producer id, epoch) -> partitions to verify for it
        wanted: dict[tuple[int, int], list[PartitionKey]] = defaultdict(list)
        for topic, index, data in entries:
            tp = (topic, index)
            p = partitions.get(tp)
            out.guards[tp] = {}
            if p is None or not p.state.is_leader:
                continue  # the append answers NOT_LEADER_OR_FOLLOWER and the like
            try:
                batches = [ProducerBatch.from_header(h) for _, h in iter_batches(data)]
            except KafkaError:
                continue  # the append's validator answers it
            for batch in batches:
                if p.producers.needs_verification(batch):
                    pid = batch.producer_id
                    if pid not in out.guards[tp]:
                        # Taken before the call: a marker meanwhile changes it.
                        out.guards[tp][pid] = p.producers.verification_guard(pid)
                        wanted[(pid, batch.producer_epoch)].append(tp)
        for (pid, epoch), tps in wanted.items():
            errors = await self._ask(transactional_id, pid, epoch, tps, timeout_ms)
            for tp, error in errors.items():
                out.errors[tp] = error
                out.guards[tp].pop(pid, None)
        return out

    async def _ask(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tps: Sequence[PartitionKey],
        timeout_ms: int,
    ) -> dict[PartitionKey, KafkaError]:
        """The verify_only call: the partitions it did not answer null for, each with
        its produce error."""
        self.requests += 1

        def every(error: KafkaError) -> dict[PartitionKey, KafkaError]:
            return dict.fromkeys(tps, error)

        address = self._coordinator_address(transactional_id)
        session = self._session()
        if address is None or session is None:
            return every(verification_error("COORDINATOR_NOT_AVAILABLE", transactional_id))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in tps:
            by_topic[topic].append(index)
        request = AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            topics=tuple(TxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            verify_only=True,
        )
        try:
            async with session.post(
                self._http.url(address, "/v1/add-partitions-to-txn"),
                data=encode(request),
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=max(timeout_ms, 1) / 1000),
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}: {raw[:200]!r}")
            answer = decode(raw, AddPartitionsToTxnResponse)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KafkaError) as e:
            log.info(
                "transaction verification failed",
                extra={"fields": {"coordinator": address, "error": str(e)}},
            )
            return every(verification_error("NETWORK_EXCEPTION", str(e)))
        if answer.error is not None:
            return every(verification_error(answer.error.error, answer.error.message))
        answered: dict[PartitionKey, KafkaError | None] = {}
        for topic_result in answer.results:
            for r in topic_result.partitions:
                tp = (topic_result.name, r.partition_index)
                answered[tp] = (
                    None if r.error is None else verification_error(r.error.error, r.error.message)
                )
        out: dict[PartitionKey, KafkaError] = {}
        for tp in tps:
            if tp not in answered:
                # Not answered at all: the coordinator did not check it, so nothing
                # vouches for it.
                out[tp] = verification_error("INVALID_TXN_STATE", f"{tp[0]}-{tp[1]} not answered")
            elif (error := answered[tp]) is not None:
                out[tp] = error
        return out

    def _coordinator_address(self, transactional_id: str) -> str | None:
        # The topic's own partition count placed the ids (it was created with
        # transaction.state.log.num.partitions); no topic yet: no coordinator yet.
        image = self._image()
        topic = image.topics.topic_by_name(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return None
        reg = topic.partitions.get(coordinator_partition(transactional_id, len(topic.partitions)))
        if reg is None or reg.leader == NO_LEADER:
            return None
        return self._address_of(reg.leader)
