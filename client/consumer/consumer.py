"""``AsyncConsumer`` and ``Consumer``: Kafka's consumer, manual assignment or groups.

One core, two faces: :class:`AsyncConsumer` is the implementation; :class:`Consumer`
runs it on a background loop thread (:mod:`raftka.client._sync`).

``assign`` sets the partitions; ``subscribe`` (with a ``group_id``) makes the consumer a
member of its group, whose coordinator hands out the partitions
(:mod:`.coordinator_client`); the two are mutually exclusive. ``poll`` takes part in the
group (rebalances, auto-commit), positions partitions that need it (the group's
committed offset when there is one, else ListOffsets by ``auto_offset_reset``, or
NoOffsetForPartitionError when it is ``none``), returns buffered records and keeps the
next fetches in flight (:mod:`.fetcher`). ``commit``/``commit_async``/``committed``
need a ``group_id``.

``isolation_level="read_committed"`` reads below the last stable offset and drops
aborted transactions' records and every transaction marker (:mod:`.fetcher`);
``read_uncommitted`` reads every record below the high watermark.

Thread safety: ``AsyncConsumer`` belongs to one event loop. ``Consumer`` may be called
from any thread (calls are serialised on its loop thread), but as in Kafka a consumer
is meant to be driven by one thread; ``wakeup`` is not provided yet. ``Consumer.poll``
with manually assigned partitions returns records already fetched in the caller's
thread, without a hop to the loop (see :meth:`Consumer.poll`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final, Literal, TypeVar, Unpack

from raftka.client._closing import AsyncStartedOnEnter
from raftka.client._sync import ClosingOnExit, LoopThread
from raftka.client._transport import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ClusterView,
    MetadataCache,
    Transport,
    list_offsets,
    monotonic_ms,
    open_connection,
)
from raftka.client.config import ClientConfigError, ConsumerConfig, Deserializer, SecurityOptions
from raftka.client.consumer.assignors import DEFAULT_ASSIGNMENT_STRATEGY
from raftka.client.consumer.coordinator_client import ConsumerCoordinator
from raftka.client.consumer.fetcher import READ_COMMITTED, READ_UNCOMMITTED, Fetcher
from raftka.client.consumer.listener import ConsumerGroupMetadata, ConsumerRebalanceListener
from raftka.client.consumer.membership import GroupOptions, Subscription
from raftka.client.consumer.subscription_state import SubscriptionState
from raftka.client.interceptors import ConsumerInterceptor, check_interceptors
from raftka.client.interceptors import close_all as close_interceptors
from raftka.client.interceptors import on_commit as interceptors_on_commit
from raftka.client.interceptors import on_consume as interceptors_on_consume
from raftka.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from raftka.common.errors import (
    AuthorizationError,
    IllegalStateError,
    KafkaError,
    NoOffsetForPartitionError,
    TopicAuthorizationFailedError,
)

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], KafkaError | None], Any]

__all__ = ["AsyncConsumer", "Consumer"]

T = TypeVar("T")

#: Iteration polls with this timeout and polls again while nothing arrives.
ITER_POLL_TIMEOUT_MS: Final = 1_000


class AsyncConsumer(AsyncStartedOnEnter):
    """Kafka's consumer on asyncio (manual assignment or a group). Not thread-safe."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "raftka-python",
        group_id: str | None = None,
        auto_offset_reset: Literal["earliest", "latest", "none"] = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int = 500,
        isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
        check_crcs: bool = True,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        connections_max_idle_ms: int = 540_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        default_api_timeout_ms: int = 60_000,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        partition_assignment_strategy: Sequence[str] = DEFAULT_ASSIGNMENT_STRATEGY,
        group_instance_id: str | None = None,
        interceptors: Sequence[ConsumerInterceptor] = (),
        **security: Unpack[SecurityOptions],
    ) -> None:
        self._interceptors: tuple[ConsumerInterceptor, ...] = check_interceptors(
            "interceptors", interceptors, ConsumerInterceptor
        )
        self.config = ConsumerConfig(
            bootstrap_servers=bootstrap_servers,  # type: ignore[arg-type]  # normalised
            client_id=client_id,
            group_id=group_id,
            auto_offset_reset=auto_offset_reset,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            isolation_level=isolation_level,
            check_crcs=check_crcs,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            send_buffer_bytes=send_buffer_bytes,
            receive_buffer_bytes=receive_buffer_bytes,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            **security,
        )
        if type(default_api_timeout_ms) is not int or default_api_timeout_ms < 1:
            raise ClientConfigError(
                f"default_api_timeout_ms={default_api_timeout_ms!r}: expected an integer >= 1"
            )
        self.default_api_timeout_ms = default_api_timeout_ms
        self.group_options = GroupOptions(
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            partition_assignment_strategy=tuple(partition_assignment_strategy),
            group_instance_id=group_instance_id,
        )
        self._subs = SubscriptionState()
        self._coordinator: ConsumerCoordinator | None = None
        self._subscription: Subscription | None = None
        self._listener = ConsumerRebalanceListener()
        self._background: set[asyncio.Task[None]] = set()
        self._transport: Transport | None = None
        self._metadata: MetadataCache | None = None
        self._fetcher: Fetcher | None = None
        self._closed = False
        # The metadata answer last looked at for subscribed topics the ACLs hide.
        self._hidden_checked: ClusterView | None = None

    # ------------------------------------------------------------------ lifecycle

    def _ensure_started(self) -> tuple[Transport, MetadataCache, Fetcher]:
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")
        if self._fetcher is None:
            c = self.config
            self._transport, self._metadata = open_connection(c)
            self._metadata.add_topics(sorted({tp.topic for tp in self._subs.assignment}))
            self._fetcher = Fetcher(
                config=c,
                transport=self._transport,
                metadata=self._metadata,
                subscriptions=self._subs,
            )
            if c.group_id:
                fetcher = self._fetcher
                self._coordinator = ConsumerCoordinator(
                    group_id=c.group_id,
                    options=self.group_options,
                    config=c,
                    transport=self._transport,
                    metadata=self._metadata,
                    subscriptions=self._subs,
                    on_assignment_changed=fetcher.clear_buffered,
                    wake=fetcher.wake,
                )
                if self._interceptors:
                    interceptors = self._interceptors
                    self._coordinator.on_committed = lambda offsets: interceptors_on_commit(
                        interceptors, offsets
                    )
                if self._subscription is not None:
                    self._coordinator.subscribe(self._subscription, self._listener)
        assert self._transport is not None and self._metadata is not None
        return self._transport, self._metadata, self._fetcher

    def _group(self) -> ConsumerCoordinator:
        """The group coordinator client; InvalidGroupIdError-like IllegalStateError
        without a group_id."""
        self._ensure_started()
        if self._coordinator is None:
            raise IllegalStateError(
                "this needs a group_id: committed offsets belong to a consumer group"
            )
        return self._coordinator

    async def start(self) -> None:
        """Nothing to connect to up front; kept for aiokafka's shape."""
        self._ensure_started()

    async def close(self) -> None:
        """Auto-commit (when enabled), revoke, leave the group, stop fetching."""
        if self._closed:
            return
        try:
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            if self._coordinator is not None:
                await self._coordinator.close(leave=True)
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        if not self._closed:
            close_interceptors(self._interceptors)
        self._closed = True
        if self._coordinator is not None:
            await self._coordinator.close(leave=False)
        if self._fetcher is not None:
            await self._fetcher.close()
        if self._transport is not None:
            await self._transport.close()

    # ------------------------------------------------------------------ assignment

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group ``group_id`` for ``topics`` (or every topic matching
        the regular expression ``pattern``); the partitions arrive in a later ``poll``.
        ``listener`` hears about revocations and assignments. Replaces an earlier
        subscription; IllegalStateError after ``assign``."""
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")
        if not self.config.group_id:
            raise IllegalStateError(
                "subscribe() uses consumer groups and needs a group_id; without one, "
                "use assign() with explicit partitions"
            )
        if self._subscription is None and self._subs.assignment:
            raise IllegalStateError(
                "subscribe() after assign(): a consumer either is assigned partitions "
                "manually or subscribes, not both (call unsubscribe() first)"
            )
        names = frozenset([topics] if isinstance(topics, str) else topics)
        if pattern is not None and names:
            raise ValueError("subscribe() takes topics or a pattern, not both")
        if pattern is None and not names:
            raise ValueError("subscribe() needs topics or a pattern")
        if any(not isinstance(t, str) or not t for t in names):
            raise ValueError(f"invalid topic names {sorted(map(repr, names))}")
        self._subscription = Subscription(
            topics=names, pattern=None if pattern is None else re.compile(pattern)
        )
        self._listener = listener or ConsumerRebalanceListener()
        if self._coordinator is not None:
            self._coordinator.subscribe(self._subscription, self._listener)

    def subscription(self) -> set[str]:
        """The topics subscribed to by name (for a pattern: those it matched so far)."""
        if self._subscription is None:
            return set()
        if self._subscription.pattern is None:
            return set(self._subscription.topics)
        return {tp.topic for tp in self._subs.assignment}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group id, generation and member id (-1/"" when not joined)."""
        if self._coordinator is None:
            if not self.config.group_id:
                raise IllegalStateError("no group_id: the consumer is in no group")
            return ConsumerGroupMetadata(
                self.config.group_id, -1, "", self.group_options.group_instance_id
            )
        return self._coordinator.group_metadata()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manually assign exactly these partitions (replacing the previous assignment).
        Positions of partitions kept across calls are kept."""
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")
        if self._subscription is not None:
            raise IllegalStateError(
                "assign() after subscribe(): a consumer either subscribes or is assigned "
                "partitions manually, not both (call unsubscribe() first)"
            )
        tps = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        for tp in tps:
            if not tp.topic or tp.partition < 0:
                raise ValueError(f"invalid partition {tp!r}")
        self._subs.assign(tps)
        if self._fetcher is not None:
            self._fetcher.clear_buffered()
        if self._metadata is not None:
            self._metadata.add_topics(sorted({tp.topic for tp in tps}))

    def assignment(self) -> set[TopicPartition]:
        return set(self._subs.assignment)

    def unsubscribe(self) -> None:
        """Drop the subscription (revoking and leaving the group in the background:
        ``close`` waits for it) or the manual assignment."""
        if self._subscription is None:
            self.assign([])
            return
        self._subscription = None
        coordinator = self._coordinator
        if coordinator is not None:
            task = asyncio.get_running_loop().create_task(coordinator.unsubscribe())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        else:
            self._subs.assign([])

    # ------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if type(offset) is not int or offset < 0:
            raise ValueError(f"seek offset must be a non-negative integer, not {offset!r}")
        state = self._subs.state(partition)
        state.position = offset
        state.reset_to = None
        if self._fetcher is not None:
            self._fetcher.clear_buffered(partition)

    def _seek_reset(self, partitions: Iterable[TopicPartition], to: str) -> None:
        tps = list(partitions) or list(self._subs.assignment)
        for tp in tps:
            state = self._subs.state(tp)
            state.position = None
            state.reset_to = to
            if self._fetcher is not None:
                self._fetcher.clear_buffered(tp)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Lazily: the next ``poll``/``position`` looks up the log start."""
        self._seek_reset(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Lazily: the next ``poll``/``position`` looks up the high watermark."""
        self._seek_reset(partitions, "latest")

    async def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record ``poll`` returns for the partition."""
        state = self._subs.state(partition)
        if state.position is None:
            await self._reset_positions(self._deadline(timeout_ms), [partition])
        assert state.position is not None
        return state.position

    def known_position(self, partition: TopicPartition) -> int | None:
        """The position as this consumer knows it, without a request: None where
        ``position`` would first look up a committed offset or reset."""
        return self._subs.state(partition).position

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._subs.assignment.items() if s.paused}

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = True
            if self._fetcher is not None:
                self._fetcher.clear_buffered(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = False

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of the partition reported (None before)."""
        hw = self._subs.state(partition).high_watermark
        return None if hw < 0 else hw

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The last stable offset the last fetch of the partition reported (None
        before): below it no transaction is open; a read_committed reader reads up to
        it."""
        lso = self._subs.state(partition).last_stable_offset
        return None if lso < 0 else lso

    def _deadline(self, timeout_ms: int | None) -> int:
        return monotonic_ms() + (self.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    async def _reset_positions(self, deadline_ms: int, tps: list[TopicPartition]) -> None:
        transport, metadata, _ = self._ensure_started()
        if self._coordinator is not None:
            # A group's committed offset comes first; auto_offset_reset only without one.
            plain = [tp for tp in tps if self._subs.assignment[tp].reset_to is None]
            committed = await self._coordinator.fetch_committed(plain, deadline_ms)
            for tp, offset in committed.items():
                known = self._subs.assignment.get(tp)
                if offset is not None and known is not None and known.position is None:
                    known.position = offset.offset
            tps = [
                tp
                for tp in tps
                if (known := self._subs.assignment.get(tp)) is not None and known.position is None
            ]
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            state = self._subs.assignment[tp]
            strategy = state.reset_to or self.config.auto_offset_reset
            if strategy == "none":
                raise NoOffsetForPartitionError(
                    f"no position for {tp} and auto_offset_reset is none"
                )
            wanted[tp] = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        if not wanted:
            return
        found = await list_offsets(
            transport,
            metadata,
            wanted,
            deadline_ms=deadline_ms,
            retry_backoff_ms=self.config.retry_backoff_ms,
            isolation_level=_isolation_level(self.config),
        )
        for tp, listed in found.items():
            current = self._subs.assignment.get(tp)
            if current is not None and current.position is None:
                current.position = listed.offset
                current.reset_to = None

    # ------------------------------------------------------------------ offsets lookups

    async def _list(
        self, timestamps: dict[TopicPartition, int], timeout_ms: int | None
    ) -> dict[TopicPartition, Any]:
        transport, metadata, _ = self._ensure_started()
        return await list_offsets(
            transport,
            metadata,
            timestamps,
            deadline_ms=self._deadline(timeout_ms),
            retry_backoff_ms=self.config.retry_backoff_ms,
            isolation_level=_isolation_level(self.config),
        )

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        found = await self._list({tp: EARLIEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """The high watermark of each partition (read_uncommitted's end)."""
        found = await self._list({tp: LATEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the one given, per partition
        (None when there is none)."""
        for tp, ts in timestamps.items():
            if type(ts) is not int or ts < 0:
                raise ValueError(f"the timestamp for {tp} must be >= 0, not {ts!r}")
        found = await self._list(dict(timestamps), timeout_ms)
        return {
            tp: None if r.offset < 0 else OffsetAndTimestamp(r.offset, r.timestamp, r.leader_epoch)
            for tp, r in found.items()
        }

    async def partitions_for_topic(self, topic: str) -> set[int]:
        _, metadata, _ = self._ensure_started()
        view = await metadata.wait_for_topic(topic, self._deadline(None))
        return {p.partition for p in view.partitions}

    # ------------------------------------------------------------------ polling

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions, waiting at most ``timeout_ms`` for
        some; ``{}`` when none arrive in time. At most ``max_records`` (default
        ``max_poll_records``)."""
        _, metadata, fetcher = self._ensure_started()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be >= 1, not {limit}")
        if not self._subs.assignment and self._subscription is None:
            raise IllegalStateError(
                "the consumer is neither subscribed to topics nor assigned any partitions"
            )
        deadline = monotonic_ms() + max(timeout_ms, 0)
        while True:
            if self._coordinator is not None:
                await self._coordinator.poll(deadline)
                self._raise_hidden_topics(metadata.view)
            needing = self._subs.needing_reset()
            if needing:
                # A reset is a lookup with its own bound (a poll(0) still positions).
                reset_deadline = max(deadline, monotonic_ms() + self.config.request_timeout_ms)
                await self._reset_positions(reset_deadline, needing)
            records = fetcher.take_records(limit)
            # Pipelining: the next fetches go out before the records are returned.
            fetcher.send_fetches()
            if records:
                if self._interceptors:
                    return interceptors_on_consume(self._interceptors, records)
                return records
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                return {}
            if self._coordinator is not None and self._coordinator.rejoin_needed:
                continue  # the group needs this poll: rejoin now
            await fetcher.wait(remaining / 1000)

    def _raise_hidden_topics(self, view: ClusterView) -> None:
        """Kafka's consumer: subscribed topics the principal may not DESCRIBE raise
        TopicAuthorizationFailedError from ``poll``, once per metadata answer (the
        topics it may read are consumed on)."""
        if self._subscription is None or view is self._hidden_checked:
            return
        self._hidden_checked = view
        hidden = sorted(
            t
            for t in self._subscription.topics
            if (topic := view.topics.get(t)) is not None
            and isinstance(topic.error, AuthorizationError)
        )
        if hidden:
            raise TopicAuthorizationFailedError(f"not authorized to access topics: {hidden}")

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """aiokafka's name for ``poll``."""
        return await self.poll(timeout_ms, max_records)

    # ------------------------------------------------------------------ offsets

    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition, i.e.
        everything ``poll`` returned) and wait for the coordinator. CommitFailedError
        when the group rebalanced and the partitions went to another member;
        RebalanceInProgressError while a rebalance runs (``poll`` completes it)."""
        await self._group().commit(
            None if offsets is None else dict(offsets), self._deadline(timeout_ms)
        )

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> asyncio.Task[None]:
        """Commit in the background; ``callback(offsets, error_or_None)`` when done."""
        return self._group().commit_async(None if offsets is None else dict(offsets), callback)

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where there is none)."""
        return await self._group().fetch_committed(list(partitions), self._deadline(timeout_ms))

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            record = await self._next_record()
            if record is not None:
                return record

    async def _next_record(self) -> ConsumerRecord | None:
        # One record per poll: the position moves past exactly the records handed
        # over, so a caller that stops (getone returning, a loop breaking out of
        # ``async for``) loses nothing. Polling a whole batch and yielding from it
        # would move the position past records the caller never saw.
        batch = await self.poll(ITER_POLL_TIMEOUT_MS, max_records=1)
        for records in batch.values():
            return records[0]
        return None

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            record = await self._next_record()
            if record is not None:
                yield record


class Consumer(ClosingOnExit):
    """The blocking consumer: an :class:`AsyncConsumer` on its own loop thread.
    Same keyword arguments as ``AsyncConsumer``. Calls from several threads are
    serialised, but drive a consumer from one thread as in Kafka."""

    def __init__(self, **config: Any) -> None:
        self._async = AsyncConsumer(**config)
        self.config = self._async.config
        self._thread = LoopThread(f"raftka-consumer-{self.config.client_id}")
        #: Iteration's batch: records a poll returned, of which the first ``_handed``
        #: were handed over. The rest are given back (see :meth:`_give_back`) before
        #: any call that reads or moves positions, so that positions and commits never
        #: run ahead of what the application received.
        self._batch: list[ConsumerRecord] = []
        self._handed = 0

    def _safety_s(self, timeout_ms: int | None) -> float:
        base = self._async.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return (base + self.config.request_timeout_ms) / 1000 + 5

    def _run(self, coro: Coroutine[Any, Any, T], timeout_ms: int | None = None) -> T:
        return self._thread.run(coro, self._safety_s(timeout_ms))

    def _sync_call(self, fn: Any, *args: Any) -> Any:
        """A synchronous method of the async core: on its loop, or directly when called
        from the loop thread itself (a rebalance listener runs there)."""
        if not self._thread.started or self._thread.in_loop_thread():
            return fn(*args)
        return self._run(_call(fn, *args))

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """See :meth:`AsyncConsumer.subscribe`; the listener runs on the consumer's loop
        thread inside ``poll`` (see :mod:`raftka.client.consumer.listener`)."""
        self._give_back()
        self._sync_call(self._async.subscribe, list(topics), pattern, listener)

    def subscription(self) -> set[str]:
        return self._async.subscription()

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._async.group_metadata()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._give_back()
        self._sync_call(self._async.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._async.assignment()

    def unsubscribe(self) -> None:
        self._give_back()
        self._sync_call(self._async.unsubscribe)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._give_back()
        self._sync_call(self._async.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._give_back()
        self._sync_call(self._async.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._give_back()
        self._sync_call(self._async.seek_to_end, *partitions)

    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(self._async.commit(self._handed_offsets(offsets), timeout_ms), timeout_ms)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit in the background; ``callback`` runs on the consumer's loop thread."""
        self._sync_call(self._async.commit_async, self._handed_offsets(offsets), callback)

    def committed(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._run(self._async.committed(list(partitions), timeout_ms), timeout_ms)

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        for record in self._batch[self._handed :]:
            if record.topic == partition.topic and record.partition == partition.partition:
                return record.offset  # the next record iteration hands over
        return self._run(self._async.position(partition, timeout_ms), timeout_ms)

    def pause(self, *partitions: TopicPartition) -> None:
        self._give_back()
        self._sync_call(self._async.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._sync_call(self._async.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._async.paused()

    def known_position(self, partition: TopicPartition) -> int | None:
        for record in self._batch[self._handed :]:
            if record.topic == partition.topic and record.partition == partition.partition:
                return record.offset  # as position(): the next record iteration hands over
        return self._async.known_position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._async.highwater(partition)

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        return self._async.last_stable_offset(partition)

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._run(self._async.beginning_offsets(list(partitions), timeout_ms), timeout_ms)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._run(self._async.end_offsets(list(partitions), timeout_ms), timeout_ms)

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._run(self._async.offsets_for_times(timestamps, timeout_ms), timeout_ms)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._run(self._async.partitions_for_topic(topic))

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """See :meth:`AsyncConsumer.poll`. Fast path: with manually assigned partitions
        (no group: its heartbeats, rebalances and auto-commit need the loop), every
        partition positioned, and records already fetched, they are taken from the
        fetcher's buffer (under its lock) in this thread and the next fetches are
        handed to the loop with ``call_soon_threadsafe``: no round trip to the loop
        thread. Otherwise (a group, nothing buffered yet, a reset or an error to
        handle) the poll runs on the loop as before. Drive it from one thread, as
        ``seek``/``assign`` from another thread would race the positions."""
        if self._batch:
            self._give_back()
        core = self._async
        fetcher = core._fetcher
        if (
            fetcher is not None
            and core._coordinator is None
            and core._subscription is None
            and not core._closed
            and self._thread.started
            and not core._subs.needing_reset()
        ):
            limit = self.config.max_poll_records if max_records is None else max_records
            if limit < 1:
                raise ValueError(f"max_records must be >= 1, not {limit}")
            records = fetcher.take_records(limit)
            if records:
                # Pipelining as the loop's poll does: the next fetches go out now, for
                # the partitions whose buffer emptied (only then: each call is a
                # wake-up of the loop thread, a GIL handoff).
                if fetcher.fetch_wanted:
                    self._thread.loop.call_soon_threadsafe(fetcher.send_fetches)
                if core._interceptors:
                    return interceptors_on_consume(core._interceptors, records)
                return records
        return self._run(core.poll(timeout_ms, max_records), timeout_ms)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        # A whole batch per poll (a poll per record would cost a loop-thread hop per
        # record for a group member), and a loop that stops inside a batch loses
        # nothing: leaving the generator (break, an exception; in CPython the moment
        # the for loop drops it) gives the rest back, so the next poll returns it.
        try:
            while True:
                record = self._next_record(ITER_POLL_TIMEOUT_MS)
                if record is not None:
                    yield record
        finally:
            self._give_back()

    def _next_record(self, timeout_ms: int) -> ConsumerRecord | None:
        """Iteration's next record: from the batch the last poll returned, else from a
        new poll (waiting at most ``timeout_ms``); None when none arrived. Also what
        kafka-python's ``KafkaConsumer.__next__`` calls."""
        batch = self._batch
        if self._handed < len(batch):
            self._handed += 1
            return batch[self._handed - 1]
        self._batch, self._handed = [], 0
        records = [r for rs in self.poll(timeout_ms).values() for r in rs]
        if not records:
            return None
        self._batch, self._handed = records, 1
        return records[0]

    def _give_back(self) -> None:
        """Seek each partition with records iteration fetched and did not hand over
        back to the first of them (a no-op without such records)."""
        unhanded = self._batch[self._handed :]
        self._batch, self._handed = [], 0
        first: dict[TopicPartition, int] = {}
        for record in unhanded:
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        for tp, offset in first.items():
            # A partition revoked or a consumer closed meanwhile: nothing to give back.
            with contextlib.suppress(KafkaError):
                self._sync_call(self._async.seek, tp, offset)

    def _handed_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None
    ) -> Mapping[TopicPartition, OffsetAndMetadata] | None:
        """What ``commit(None)`` commits: every position, but where iteration holds
        records not handed over, the first of them (Kafka commits what ``poll``
        returned; iteration has returned only what it handed over)."""
        if offsets is not None or self._handed >= len(self._batch):
            return offsets
        chosen: dict[TopicPartition, OffsetAndMetadata] = self._sync_call(
            lambda: self._async._group().positions()
        )
        seen: set[TopicPartition] = set()
        for record in self._batch[self._handed :]:
            tp = TopicPartition(record.topic, record.partition)
            if tp not in seen and tp in chosen:
                seen.add(tp)
                chosen[tp] = OffsetAndMetadata(record.offset, "", record.leader_epoch)
        return chosen

    def close(self) -> None:
        try:
            if self._thread.started:
                self._give_back()  # before close's auto-commit
                self._run(self._async.close())
            else:
                self._async._closed = True
        finally:
            self._thread.close()


async def _call(fn: Any, *args: Any) -> Any:
    """Run a synchronous method of the async core on its loop (its state lives there)."""
    return fn(*args)


def _isolation_level(config: ConsumerConfig) -> int:
    """Kafka's isolation_level number for the consumer's setting."""
    return READ_COMMITTED if config.isolation_level == "read_committed" else READ_UNCOMMITTED
