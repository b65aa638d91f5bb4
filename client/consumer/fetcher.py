"""The consumer's fetcher: fetch requests in flight while the application works.

Theory of operation (Kafka's Fetcher, simplified):

- :class:`SubscriptionState` holds, per assigned partition, the *position* (the next
  offset to hand out; None until reset), whether it is paused, and whether a reset is
  pending. The consumer's ``seek``/``pause`` change it; nothing here does I/O.
- ``send_fetches`` sends one ``POST /v1/fetch`` per leader broker that has none in
  flight, for every fetchable partition (assigned, positioned, not paused, nothing
  buffered). The answers land in a buffer of :class:`CompletedFetch`; ``poll`` takes
  records from it and, before returning them, sends the next fetches: that is the
  pipelining (the next fetch is in flight while the application processes).
- A completed fetch is used only if its fetch offset still equals the partition's
  position (a ``seek`` meanwhile makes it stale: dropped). Records below the position
  are skipped (a fetch answers from the start of the batch holding the offset); a
  trailing partial batch is skipped by the codec, and the next fetch starts after the
  last whole record.
- Errors per partition: NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION /
  FENCED/UNKNOWN_LEADER_EPOCH refresh metadata and fetch again, and so does a leader
  that fails to connect, times out, or stays silent past the long poll once the
  metadata names another leader (``await_unless_leader_moved``); OFFSET_OUT_OF_RANGE
  resets the position by ``auto_offset_reset`` (or raises OffsetOutOfRangeError when
  it is ``none``); other errors are raised from ``poll``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from raftka.client._transport import (
    LEADER_CHECK_MS,
    MetadataCache,
    Transport,
    await_unless_leader_moved,
    error_from_message,
    monotonic_ms,
)
from raftka.client.config import ConsumerConfig
from raftka.client.consumer.subscription_state import SubscriptionState, TopicPartitionState
from raftka.client.structs import ConsumerRecord, TopicPartition
from raftka.common.errors import (
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    SerializationError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages import broker as api
from raftka.common.record import DecodedBatch, decode_batches
from raftka.common.record.read_committed import AbortedTransaction, filter_read_committed
from raftka.common.time import wait_event

__all__ = ["CompletedFetch", "Fetcher"]

log = logging.getLogger(__name__)

#: Kafka's isolation_level numbers in fetch and ListOffsets requests.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1

#: Completed fetches kept before ``poll`` takes them (one per partition at most, as
#: a partition with buffered data is not fetched again; this bounds a bug).
COMPLETED_FETCHES_MAX: Final = 100_000


@dataclass(slots=True)
class CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    batches: list[DecodedBatch]
    high_watermark: int
    error: KafkaError | None = None
    #: The fetch answer's last stable offset (-1 when it carried none).
    last_stable_offset: int = -1
    #: Index into the flattened records of ``batches`` already handed out.
    batch_index: int = 0
    record_index: int = 0


class Fetcher:
    """Fetches on one event loop; the buffer of completed fetches is shared.

    Thread safety: everything but :meth:`take_records` runs on the consumer's loop.
    ``take_records`` may also run in the blocking ``Consumer.poll``'s caller thread
    (records already fetched are returned without a hop to the loop): ``_lock`` guards
    the buffer and the positions it advances, and the loop takes it wherever it reads
    or changes them (``send_fetches``, a fetch landing, ``clear_buffered``)."""

    def __init__(
        self,
        *,
        config: ConsumerConfig,
        transport: Transport,
        metadata: MetadataCache,
        subscriptions: SubscriptionState,
    ) -> None:
        self._config = config
        self._transport = transport
        self._metadata = metadata
        self._subs = subscriptions
        self._completed: deque[CompletedFetch] = deque()
        #: Guards _completed and the positions take_records advances (see the class).
        self._lock = threading.Lock()
        #: take_records used up a completed fetch, or a fetch answer arrived, since the
        #: last send_fetches: a partition may be fetched again (the blocking poll asks
        #: the loop to send fetches only then).
        self._emptied = False
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._in_flight_tps: set[TopicPartition] = set()
        self._arrived = asyncio.Event()
        self._refresh_task: asyncio.Task[None] | None = None
        self._isolation_level = (
            READ_COMMITTED if config.isolation_level == "read_committed" else READ_UNCOMMITTED
        )

    async def close(self) -> None:
        tasks = list(self._in_flight.values())
        if self._refresh_task is not None:
            tasks.append(self._refresh_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def clear_buffered(self, tp: TopicPartition | None = None) -> None:
        with self._lock:
            if tp is None:
                self._completed.clear()
            else:
                self._completed = deque(c for c in self._completed if c.tp != tp)

    def _buffer(self, completed: CompletedFetch) -> None:
        with self._lock:
            assert len(self._completed) < COMPLETED_FETCHES_MAX
            self._completed.append(completed)

    def _start_refresh(self) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            await self._metadata.refresh_with_backoff()
            self._arrived.set()

        self._refresh_task = asyncio.create_task(refresh())

    # ------------------------------------------------------------------ sending

    def send_fetches(self) -> None:
        with self._lock:
            self._emptied = False
            buffered = {c.tp for c in self._completed}
            fetchable = self._subs.fetchable()
            positions = {tp: self._subs.assignment[tp].position for tp in fetchable}
        by_broker: dict[tuple[int, str], list[TopicPartition]] = {}
        missing_leader = False
        for tp in fetchable:
            if tp in buffered or tp in self._in_flight_tps:
                continue
            leader = self._metadata.view.leader_address(tp)
            if leader is None:
                missing_leader = True
                continue
            by_broker.setdefault(leader, []).append(tp)
        if missing_leader or self._metadata.needs_refresh(monotonic_ms()):
            self._start_refresh()
        for (broker_id, address), tps in by_broker.items():
            if broker_id in self._in_flight:
                continue
            offsets = {}
            for tp in tps:
                position = positions[tp]
                assert position is not None
                offsets[tp] = position
            self._in_flight_tps.update(tps)
            task = asyncio.create_task(self._fetch(broker_id, address, offsets))
            self._in_flight[broker_id] = task

    async def _fetch(
        self, broker_id: int, address: str, offsets: dict[TopicPartition, int]
    ) -> None:
        config = self._config
        request = api.FetchRequest(
            replica_id=-1,
            broker_epoch=-1,
            isolation_level=self._isolation_level,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            partitions=tuple(
                api.FetchPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    fetch_offset=offset,
                    partition_max_bytes=config.max_partition_fetch_bytes,
                    # KIP-320 fencing: a broker at another epoch answers
                    # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH instead of data.
                    current_leader_epoch=self._leader_epoch(tp),
                )
                for tp, offset in offsets.items()
            ),
        )
        try:
            # A leader silent past its long poll is checked against fresh metadata and
            # left once another broker leads (see await_unless_leader_moved).
            answer = await await_unless_leader_moved(
                self._transport.request_frame(
                    address,
                    "/v1/fetch",
                    api.FetchResponse,
                    message=request,
                    timeout_ms=config.request_timeout_ms + config.fetch_max_wait_ms,
                ),
                metadata=self._metadata,
                broker_id=broker_id,
                address=address,
                partitions=list(offsets),
                check_after_ms=config.fetch_max_wait_ms + LEADER_CHECK_MS,
            )
            assert answer is not None
            self._handle(answer[0], answer[1], offsets)
        except KafkaError as e:
            log.debug("fetch from %s failed: %s", address, e)
            self._metadata.invalidate()
            if not e.retriable:
                for tp, offset in offsets.items():
                    self._buffer(CompletedFetch(tp, offset, [], -1, e))
        finally:
            del self._in_flight[broker_id]
            self._in_flight_tps.difference_update(offsets)
            # A partition this answer did not buffer (an error to retry, a leader
            # change) is fetchable again: the next poll must send fetches.
            self._emptied = True
            self._arrived.set()

    def _handle(
        self,
        header: api.FetchResponse,
        payloads: list[memoryview],
        offsets: dict[TopicPartition, int],
    ) -> None:
        for entry, payload in zip(header.responses, payloads, strict=True):
            tp = TopicPartition(entry.topic, entry.partition)
            if tp not in offsets:
                continue
            hw = entry.high_watermark
            if entry.error is not None:
                error = error_from_message(entry.error)
                if (
                    isinstance(
                        error,
                        NotLeaderOrFollowerError
                        | UnknownTopicOrPartitionError
                        | FencedLeaderEpochError
                        | UnknownLeaderEpochError,
                    )
                    or error.retriable
                ):
                    self._metadata.invalidate()
                    continue
                self._buffer(CompletedFetch(tp, offsets[tp], [], hw, error))
                continue
            try:
                batches = list(decode_batches(payload, check_crc=self._config.check_crcs))
                if self._isolation_level == READ_COMMITTED:
                    batches = _committed_only(batches, entry.aborted_transactions, offsets[tp])
            except KafkaError as e:
                self._buffer(CompletedFetch(tp, offsets[tp], [], hw, e))
                continue
            self._buffer(
                CompletedFetch(
                    tp, offsets[tp], batches, hw, last_stable_offset=entry.last_stable_offset
                )
            )

    def wake(self) -> None:
        """End a ``wait`` early (the group needs the consumer's attention)."""
        self._arrived.set()

    async def wait(self, timeout_s: float) -> None:
        """Until a fetch completes (or ``timeout_s``)."""
        self._arrived.clear()
        await wait_event(self._arrived, timeout_s)

    # ------------------------------------------------------------------ taking

    def take_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records from the buffer, advancing positions.
        Raises the first buffered error for a partition still at its fetch offset.
        Any thread (see the class)."""
        with self._lock:
            return self._take_records_locked(max_records)

    @property
    def fetch_wanted(self) -> bool:
        """Whether a partition's buffer emptied since the last ``send_fetches`` (so a
        fetch may go out now). Any thread."""
        return self._emptied

    def _take_records_locked(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        while self._completed and taken < max_records:
            completed = self._completed[0]
            state = self._subs.assignment.get(completed.tp)
            if state is None or state.paused or state.position != completed.fetch_offset:
                self._completed.popleft()  # unassigned, paused or sought meanwhile
                self._emptied = True
                continue
            if completed.error is not None:
                self._completed.popleft()
                self._emptied = True
                self._on_error(completed, state)
                continue
            if completed.high_watermark >= 0:
                state.high_watermark = completed.high_watermark
            if completed.last_stable_offset >= 0:
                state.last_stable_offset = completed.last_stable_offset
            records = self._records(completed, state, max_records - taken)
            if records:
                out.setdefault(completed.tp, []).extend(records)
                taken += len(records)
            if completed.batch_index >= len(completed.batches):
                self._completed.popleft()
                self._emptied = True
        return out

    def _records(
        self, completed: CompletedFetch, state: TopicPartitionState, limit: int
    ) -> list[ConsumerRecord]:
        assert state.position is not None
        out: list[ConsumerRecord] = []
        tp = completed.tp
        key_de = self._config.key_deserializer
        value_de = self._config.value_deserializer
        while completed.batch_index < len(completed.batches) and len(out) < limit:
            batch = completed.batches[completed.batch_index]
            header = batch.header
            if header.is_control:
                completed.batch_index += 1
                completed.record_index = 0
                state.position = max(
                    state.position, header.base_offset + header.last_offset_delta + 1
                )
                continue
            records = batch.records
            # Per batch, not per record: the consumer's hottest loop.
            timestamp_type = header.timestamp_type
            leader_epoch = header.partition_leader_epoch
            topic, partition = tp.topic, tp.partition
            append = out.append
            position = state.position
            index = completed.record_index
            n_records = len(records)
            while index < n_records and len(out) < limit:
                r = records[index]
                index += 1
                if r.offset < position:
                    continue
                raw_key, raw_value = r.key, r.value
                if key_de is None and value_de is None:
                    key, value = raw_key, raw_value
                else:
                    try:
                        key = raw_key if key_de is None else key_de(raw_key)
                        value = raw_value if value_de is None else value_de(raw_value)
                    except Exception as e:
                        # Kafka's RecordDeserializationException: the position stays
                        # at the bad record so the application may seek past it.
                        completed.record_index = index - 1
                        state.position = position
                        if out:
                            return out
                        raise SerializationError(
                            f"deserializing the record at offset {r.offset} of {tp} "
                            f"failed: {type(e).__name__}: {e}"
                        ) from e
                append(
                    ConsumerRecord(
                        topic,
                        partition,
                        r.offset,
                        r.timestamp_ms,
                        timestamp_type,
                        key,
                        value,
                        r.headers,
                        -1 if raw_key is None else len(raw_key),
                        -1 if raw_value is None else len(raw_value),
                        leader_epoch,
                    )
                )
                position = r.offset + 1
                state.leader_epoch = leader_epoch
            completed.record_index = index
            state.position = position
            if completed.record_index >= len(records):
                completed.batch_index += 1
                completed.record_index = 0
                state.position = max(
                    state.position, header.base_offset + header.last_offset_delta + 1
                )
        # Keep the fetch's offset in step with the position so the rest stays usable.
        completed.fetch_offset = state.position
        return out

    def _leader_epoch(self, tp: TopicPartition) -> int | None:
        topic = self._metadata.view.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        epoch = topic.partitions[tp.partition].leader_epoch
        return epoch if epoch >= 0 else None

    def _on_error(self, completed: CompletedFetch, state: TopicPartitionState) -> None:
        error = completed.error
        assert error is not None
        known = self._leader_epoch(completed.tp)
        if (
            isinstance(error, OffsetOutOfRangeError)
            and state.leader_epoch is not None
            and (known is None or known < state.leader_epoch)
        ):
            # The answer came from a leader older than the records already read: a
            # deposed leader with a shorter log, not a truncation. Keep the position
            # and ask for fresh metadata instead of resetting (which would go back).
            log.info(
                "fetch offset %d of %s out of range at a stale leader (epoch %s < %d); "
                "refreshing metadata",
                completed.fetch_offset,
                completed.tp,
                known,
                state.leader_epoch,
            )
            self._metadata.invalidate()
            return
        if isinstance(error, OffsetOutOfRangeError):
            if self._config.auto_offset_reset == "none":
                raise OffsetOutOfRangeError(
                    f"fetch offset {completed.fetch_offset} of {completed.tp} is out of range "
                    "and auto_offset_reset is none"
                )
            log.info(
                "fetch offset %d of %s out of range; resetting to %s",
                completed.fetch_offset,
                completed.tp,
                self._config.auto_offset_reset,
            )
            state.position = None
            state.reset_to = self._config.auto_offset_reset
            return
        raise error


def _committed_only(
    batches: list[DecodedBatch],
    aborted: Sequence[api.AbortedTransaction] | None,
    fetch_offset: int,
) -> list[DecodedBatch]:
    """``batches`` with only the records a read_committed reader gets
    (``filter_read_committed``: no aborted transaction's records, no marker). A batch
    left empty stays, so taking records still moves the position past it."""
    kept = filter_read_committed(
        batches,
        [AbortedTransaction(a.producer_id, a.first_offset) for a in aborted or ()],
        fetch_offset=fetch_offset,
    ).records
    offsets = {r.offset for r in kept}
    return [
        b
        if b.header.is_control
        else DecodedBatch(b.header, tuple(r for r in b.records if r.offset in offsets))
        for b in batches
    ]
