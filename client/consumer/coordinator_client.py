"""The consumer's side of the group protocol: the I/O shell around :mod:`.membership`.

Theory of operation
-------------------
:class:`ConsumerCoordinator` belongs to one :class:`AsyncConsumer` and its event loop.

* **Finding the coordinator.** FindCoordinator goes to any known broker; the answer is
  kept until a request to it fails with a coordinator error or a network error.
* **Joining** happens from ``poll`` (:meth:`ConsumerCoordinator.poll`), never behind
  the application's back: first the member's *prepare* step (auto-commit, then the
  listener's ``on_partitions_revoked`` for EAGER), then JoinGroup + SyncGroup in a
  background task, so that a ``poll`` whose timeout ends mid-rebalance returns and the
  next ``poll`` picks the result up. The listener's ``on_partitions_assigned`` runs in
  the ``poll`` that applies the result.
* **Heartbeats** run on their own task every ``heartbeat_interval_ms`` while the member
  is Stable, so slow processing between polls does not expire the session. The task
  also enforces ``max_poll_interval_ms``: a consumer that stops polling leaves the group
  (its partitions go to members that do poll) and rejoins on its next ``poll``.
* **Offsets.** ``commit`` sends the member's generation (or -1 when the consumer is
  assigned partitions manually), retrying coordinator errors until its deadline;
  ``fetch_committed`` is OffsetFetch. Positions of newly assigned partitions come from
  the committed offsets (the consumer asks, then resets the rest by
  ``auto_offset_reset``).

Retries: every loop here is bounded by a deadline or by the consumer's lifetime (the
join task is cancelled on close), with ``retry_backoff_ms`` between attempts.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import orjson

from raftka.client._transport import MetadataCache, Transport, error_from_message, monotonic_ms
from raftka.client.config import ConsumerConfig
from raftka.client.consumer.assignors import (
    Assignment,
    assignor_for,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raftka.client.consumer.assignors import Subscription as MemberSubscription
from raftka.client.consumer.listener import ConsumerGroupMetadata, ConsumerRebalanceListener
from raftka.client.consumer.membership import (
    PROTOCOL_TYPE,
    GroupOptions,
    MemberState,
    Phase,
    Reaction,
    Subscription,
    assignment_change,
    classify,
    rebalance_protocol,
)
from raftka.client.consumer.subscription_state import SubscriptionState
from raftka.common.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnstableOffsetCommitError,
)
from raftka.common.messages import Message
from raftka.common.messages import coordinator as api
from raftka.common.messages.broker import ErrorObject
from raftka.common.structs import OffsetAndMetadata, TopicPartition
from raftka.common.time import wait_event

__all__ = ["ConsumerCoordinator"]

log = logging.getLogger(__name__)

#: Extra time a JoinGroup/SyncGroup request gets over the rebalance timeout (Kafka's
#: JOIN_GROUP_TIMEOUT_LAPSE_MS): the coordinator answers at the rebalance timeout.
JOIN_TIMEOUT_LAPSE_MS: Final = 5_000
#: MEMBER_ID_REQUIRED answers in a row before the join is treated as broken.
MEMBER_ID_RETRIES_MAX: Final = 3


@dataclass(frozen=True, slots=True)
class _Joined:
    """A finished JoinGroup + SyncGroup: the generation and this member's share."""

    generation_id: int
    member_id: str
    protocol_name: str | None
    partitions: tuple[TopicPartition, ...]


M = TypeVar("M")


def _error_of(error: ErrorObject | None) -> KafkaError | None:
    return None if error is None else error_from_message(error)


def offset_commit_topics(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> tuple[api.OffsetCommitTopic, ...]:
    """OffsetCommit's topics, each with its partitions, in order."""
    by_topic: dict[str, list[api.OffsetCommitPartition]] = {}
    for tp, om in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            api.OffsetCommitPartition(
                partition=tp.partition,
                offset=om.offset,
                metadata=om.metadata or "",
                leader_epoch=om.leader_epoch,
            )
        )
    return tuple(api.OffsetCommitTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result


class ConsumerCoordinator:
    """See the module docstring. Not thread-safe: the consumer's event loop only."""

    def __init__(
        self,
        *,
        group_id: str,
        options: GroupOptions,
        config: ConsumerConfig,
        transport: Transport,
        metadata: MetadataCache,
        subscriptions: SubscriptionState,
        on_assignment_changed: Callable[[], None],
        wake: Callable[[], None],
    ) -> None:
        self.group_id = group_id
        self.options = options
        self._config = config
        self._transport = transport
        self._metadata = metadata
        self._subs = subscriptions
        self._on_assignment_changed = on_assignment_changed
        self._wake = wake
        #: Called with the offsets of every successful commit (consumer interceptors).
        self.on_committed: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None] | None = (
            None
        )
        self.state = MemberState()
        self.protocol = rebalance_protocol(options.partition_assignment_strategy)
        self.subscription: Subscription | None = None
        self.listener = ConsumerRebalanceListener()
        self._coordinator: str | None = None
        self._join_task: asyncio.Task[_Joined] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_wake = asyncio.Event()
        self._last_poll_ms = monotonic_ms()
        self._next_auto_commit_ms = monotonic_ms() + options.auto_commit_interval_ms
        self._last_assignment: tuple[TopicPartition, ...] = ()
        self._last_generation = -1
        self._partitions_lost = False
        self._subscribed_topics: frozenset[str] = frozenset()
        self._pattern_checked_ms = -1
        self._async_commits: set[asyncio.Task[None]] = set()
        self._closed = False

    # ------------------------------------------------------------------ views

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata(
            self.group_id,
            self.state.generation_id,
            self.state.member_id,
            self.options.group_instance_id,
        )

    @property
    def subscribed(self) -> bool:
        return self.subscription is not None

    def subscribe(self, subscription: Subscription, listener: ConsumerRebalanceListener) -> None:
        self.subscription = subscription
        self.listener = listener
        self.state.rejoin_needed = True
        self._pattern_checked_ms = -1

    # ------------------------------------------------------------------ coordinator

    async def _find_coordinator(self, deadline_ms: int) -> str:
        if self._coordinator is not None:
            return self._coordinator
        last: KafkaError = CoordinatorNotAvailableError("no broker answered")
        while True:
            known = [f"{n.host}:{n.port}" for n in self._metadata.view.brokers.values()]
            for address in dict.fromkeys([*known, *self._config.bootstrap_servers]):
                try:
                    answer = await self._transport.request_message(
                        address,
                        "POST",
                        "/v1/find-coordinator",
                        api.FindCoordinatorResponse,
                        message=api.FindCoordinatorRequest(key=self.group_id),
                        timeout_ms=self._timeout(deadline_ms),
                    )
                except KafkaError as e:
                    last = e
                    continue
                error = _error_of(answer.error)
                if error is None:
                    self._coordinator = f"{answer.host}:{answer.port}"
                    return self._coordinator
                last = error
                if not error.retriable:
                    raise error
                break  # a broker answered: it knows; wait before asking again
            await self._backoff(deadline_ms, last)

    def coordinator_unknown(self) -> None:
        self._coordinator = None

    def _timeout(self, deadline_ms: int, *, base_ms: int | None = None) -> int:
        base = self._config.request_timeout_ms if base_ms is None else base_ms
        return max(1, min(base, deadline_ms - monotonic_ms()))

    async def _backoff(self, deadline_ms: int, last: KafkaError) -> None:
        remaining = deadline_ms - monotonic_ms()
        if remaining <= 0:
            raise KafkaTimeoutError(f"group {self.group_id!r}: no answer in time; last: {last}")
        await asyncio.sleep(min(self._config.retry_backoff_ms, remaining) / 1000)

    async def _call(
        self,
        path: str,
        message: Message,
        answer_type: type[M],
        deadline_ms: int,
        *,
        timeout_ms: int | None = None,
    ) -> M:
        """One request to the coordinator; a network failure forgets the coordinator."""
        address = await self._find_coordinator(deadline_ms)
        try:
            return await self._transport.request_message(
                address,
                "POST",
                path,
                answer_type,
                message=message,
                timeout_ms=timeout_ms or self._timeout(deadline_ms),
            )
        except (NetworkError, RequestTimedOutError):
            self.coordinator_unknown()
            raise

    async def _call_retrying(
        self, path: str, message: Message, answer_type: type[M], deadline_ms: int
    ) -> M:
        """``_call``, tried again after the backoff on a network failure or timeout
        (the coordinator is looked up again) until ``deadline_ms``."""
        while True:
            try:
                return await self._call(path, message, answer_type, deadline_ms)
            except (NetworkError, RequestTimedOutError) as e:
                await self._backoff(deadline_ms, e)

    # ------------------------------------------------------------------ poll

    async def poll(self, deadline_ms: int) -> None:
        """The group's share of ``poll``: auto-commit when due, apply a finished
        rebalance, start one when needed, and wait for it until ``deadline_ms``."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        now = monotonic_ms()
        self._last_poll_ms = now
        if self.subscription is not None:
            await self._check_pattern(now)
            if self._join_task is None and self.state.rejoin_needed:
                await self._prepare_join()
                self.state.phase = Phase.REBALANCING
                self._join_task = asyncio.create_task(self._join_and_sync())
            if self._join_task is not None:
                await asyncio.wait([self._join_task], timeout=max(deadline_ms - now, 0) / 1000)
                if self._join_task.done():
                    task, self._join_task = self._join_task, None
                    await self._apply(task.result())
        if self.options.enable_auto_commit and now >= self._next_auto_commit_ms:
            self._next_auto_commit_ms = now + self.options.auto_commit_interval_ms
            self._auto_commit_async()

    @property
    def rejoin_needed(self) -> bool:
        return self.subscription is not None and (
            self.state.rejoin_needed or (self._join_task is not None and self._join_task.done())
        )

    async def _check_pattern(self, now: int) -> None:
        assert self.subscription is not None
        if self.subscription.pattern is None:
            if self.subscription.topics != self._subscribed_topics:
                self._subscribed_topics = self.subscription.topics
                self._metadata.add_topics(sorted(self._subscribed_topics))
            return
        if self._pattern_checked_ms >= 0 and now - self._pattern_checked_ms < (
            self._config.metadata_max_age_ms
        ):
            return
        self._pattern_checked_ms = now
        try:
            view = await self._metadata.refresh(all_topics=True)
        except KafkaError as e:
            log.debug("pattern subscription: metadata refresh failed: %s", e)
            return
        # Kafka's exclude.internal.topics=true: a pattern never matches __ topics.
        available = [t for t in view.topics if not t.startswith("__")]
        matching = self.subscription.matching(available)
        if matching != self._subscribed_topics:
            self._subscribed_topics = matching
            self._metadata.add_topics(sorted(matching))
            self.state.rejoin_needed = True

    async def _prepare_join(self) -> None:
        """Before JoinGroup: commit and revoke (EAGER) or report lost partitions."""
        owned = set(self._subs.assignment)
        if self._partitions_lost:
            self._partitions_lost = False
            if owned:
                self._set_assignment(())
                await _maybe_await(self.listener.on_partitions_lost(owned))
            return
        if self.protocol == "EAGER" and owned:
            if self.options.enable_auto_commit:
                await self._commit_quietly("before a rebalance")
            self._set_assignment(())
            await _maybe_await(self.listener.on_partitions_revoked(owned))

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        self._subs.assign(sorted(set(partitions)))
        self._on_assignment_changed()

    async def _apply(self, joined: _Joined) -> None:
        owned = set(self._subs.assignment)
        change = assignment_change(owned=owned, assigned=joined.partitions, protocol=self.protocol)
        self.state.joined(
            member_id=joined.member_id,
            generation_id=joined.generation_id,
            protocol_name=joined.protocol_name,
        )
        self.state.stable()
        self._last_assignment = joined.partitions
        self._last_generation = joined.generation_id
        if change.revoked:
            if self.options.enable_auto_commit:
                await self._commit_quietly("before revoking", only=change.revoked)
            self._set_assignment(change.assignment)
            await _maybe_await(self.listener.on_partitions_revoked(set(change.revoked)))
        else:
            self._set_assignment(change.assignment)
        if change.rejoin:
            self.state.rejoin_needed = True
        log.info(
            "joined group %s generation %d as %s: %d partitions",
            self.group_id,
            joined.generation_id,
            joined.member_id,
            len(change.assignment),
        )
        self._ensure_heartbeats()
        await _maybe_await(self.listener.on_partitions_assigned(set(change.added)))

    # ------------------------------------------------------------------ join + sync

    def _subscription_bytes(self) -> bytes:
        owned = tuple(self._subs.assignment) or self._last_assignment
        sub = MemberSubscription(
            topics=tuple(sorted(self._subscribed_topics)),
            owned_partitions=tuple(sorted(owned)),
            generation_id=self._last_generation,
        )
        return orjson.dumps(encode_subscription(sub))

    def _join_timeout_ms(self) -> int:
        return max(
            self._config.request_timeout_ms,
            self.options.rebalance_timeout_ms + JOIN_TIMEOUT_LAPSE_MS,
        )

    async def _join_and_sync(self) -> _Joined:
        """JoinGroup, then SyncGroup, until both succeed (or a fatal error)."""
        member_id_retries = 0
        while True:
            # Each attempt has its own deadline; the loop ends with the consumer.
            deadline = monotonic_ms() + self._join_timeout_ms()
            try:
                joined = await self._join_once(deadline)
            except (NetworkError, RequestTimedOutError, KafkaTimeoutError) as e:
                log.debug("join of %s failed: %s", self.group_id, e)
                self.coordinator_unknown()
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)
                continue
            if isinstance(joined, _Joined):
                return joined
            reaction, error = joined
            if reaction is Reaction.RETRY_WITH_MEMBER_ID:
                member_id_retries += 1
                if member_id_retries > MEMBER_ID_RETRIES_MAX:
                    raise error
                continue
            member_id_retries = 0
            if reaction is Reaction.FATAL:
                raise error
            if reaction is Reaction.FIND_COORDINATOR:
                self.coordinator_unknown()
            elif reaction is Reaction.RESET_GENERATION:
                self.state.reset_generation(forget_member_id=False)
            elif reaction is Reaction.RESET_MEMBER:
                self.state.reset_generation(forget_member_id=True)
            if reaction is not Reaction.REJOIN:
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)

    async def _join_once(self, deadline_ms: int) -> _Joined | tuple[Reaction, KafkaError]:
        metadata = self._subscription_bytes()
        request = api.JoinGroupRequest(
            group_id=self.group_id,
            member_id=self.state.member_id,
            group_instance_id=self.options.group_instance_id,
            session_timeout_ms=self.options.session_timeout_ms,
            rebalance_timeout_ms=self.options.rebalance_timeout_ms,
            protocol_type=PROTOCOL_TYPE,
            protocols=tuple(
                api.JoinGroupProtocol(name=name, metadata=metadata)
                for name in self.options.partition_assignment_strategy
            ),
            client_id=self._config.client_id,
        )
        timeout_ms = self._join_timeout_ms()
        answer = await self._call(
            "/v1/join-group", request, api.JoinGroupResponse, deadline_ms, timeout_ms=timeout_ms
        )
        error = _error_of(answer.error)
        reaction = classify(error)
        if error is not None:
            if reaction is Reaction.RETRY_WITH_MEMBER_ID:
                self.state.member_id = answer.member_id
            return reaction, error
        member_id = answer.member_id
        generation = answer.generation_id
        protocol_name = answer.protocol_name
        self.state.member_id = member_id
        assignments: tuple[api.SyncGroupAssignment, ...] = ()
        if answer.leader == member_id and not answer.skip_assignment:
            assignments = await self._assign(str(protocol_name), answer.members)
        sync = await self._call(
            "/v1/sync-group",
            api.SyncGroupRequest(
                group_id=self.group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=self.options.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=protocol_name,
                assignments=assignments,
            ),
            api.SyncGroupResponse,
            deadline_ms,
            timeout_ms=timeout_ms,
        )
        sync_error = _error_of(sync.error)
        if sync_error is not None:
            return classify(sync_error), sync_error
        raw = sync.assignment
        assignment = decode_assignment(orjson.loads(raw)) if raw else Assignment()
        return _Joined(generation, member_id, protocol_name, assignment.partitions)

    async def _assign(
        self, protocol_name: str, members: tuple[api.JoinGroupMember, ...]
    ) -> tuple[api.SyncGroupAssignment, ...]:
        """The leader's job: run the chosen assignor over every member's subscription."""
        subscriptions: dict[str, MemberSubscription] = {}
        for m in members:
            raw = m.metadata
            subscriptions[m.member_id] = decode_subscription(
                orjson.loads(raw) if raw else {"topics": []},
                group_instance_id=m.group_instance_id,
            )
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        self._metadata.add_topics(topics)
        try:
            view = await self._metadata.refresh()
        except KafkaError as e:
            log.warning("leader of %s: metadata refresh failed: %s", self.group_id, e)
            view = self._metadata.view
        counts = {
            t: len(view.topics[t].partitions)
            for t in topics
            if t in view.topics and view.topics[t].error is None and view.topics[t].partitions
        }
        result = run_assignor(self.group_id, protocol_name, subscriptions, counts)
        return tuple(
            api.SyncGroupAssignment(member_id=member, assignment=orjson.dumps(encode_assignment(a)))
            for member, a in result.items()
        )

    # ------------------------------------------------------------------ heartbeats

    def _ensure_heartbeats(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        interval_s = self.options.heartbeat_interval_ms / 1000
        while not self._closed:
            await wait_event(self._heartbeat_wake, interval_s)
            self._heartbeat_wake.clear()
            if self.state.phase is not Phase.STABLE or self._closed:
                continue
            if monotonic_ms() - self._last_poll_ms > self.options.max_poll_interval_ms:
                log.warning(
                    "consumer of %s did not poll within max_poll_interval_ms=%d: leaving",
                    self.group_id,
                    self.options.max_poll_interval_ms,
                )
                await self._leave_quietly("poll interval expired")
                self._partitions_lost = True
                self._wake()
                continue
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> None:
        deadline = monotonic_ms() + self.options.heartbeat_interval_ms
        request = api.HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.state.generation_id,
            member_id=self.state.member_id,
            group_instance_id=self.options.group_instance_id,
        )
        try:
            answer = await self._call("/v1/heartbeat", request, api.HeartbeatResponse, deadline)
        except KafkaError as e:
            log.debug("heartbeat of %s failed: %s", self.group_id, e)
            self.coordinator_unknown()
            return
        error = _error_of(answer.error)
        reaction = classify(error)
        if reaction is Reaction.OK:
            return
        if reaction is Reaction.FIND_COORDINATOR:
            self.coordinator_unknown()
            self._heartbeat_wake.set()  # retry soon with the new coordinator
            await asyncio.sleep(self._config.retry_backoff_ms / 1000)
            return
        if reaction is Reaction.REJOIN:
            self.state.rejoin_needed = True
        elif reaction in (Reaction.RESET_GENERATION, Reaction.RESET_MEMBER):
            self.state.reset_generation(forget_member_id=reaction is Reaction.RESET_MEMBER)
            self._partitions_lost = True
        else:
            log.warning("heartbeat of %s: %s; rejoining", self.group_id, error)
            self.state.reset_generation(forget_member_id=True)
            self._partitions_lost = True
        self._wake()

    # ------------------------------------------------------------------ leaving

    async def _leave_quietly(self, why: str) -> None:
        """LeaveGroup (dynamic members only, as Kafka) and forget the generation."""
        member_id = self.state.member_id
        self.state.reset_generation(forget_member_id=True)
        if not member_id or self.options.group_instance_id is not None:
            return
        try:
            deadline = monotonic_ms() + self._config.request_timeout_ms
            await self._call(
                "/v1/leave-group",
                api.LeaveGroupRequest(
                    group_id=self.group_id, members=(api.LeaveGroupMember(member_id=member_id),)
                ),
                api.LeaveGroupResponse,
                deadline,
            )
            log.info("left group %s (%s)", self.group_id, why)
        except KafkaError as e:
            log.debug("leave of %s failed: %s", self.group_id, e)

    async def unsubscribe(self) -> None:
        owned = set(self._subs.assignment)
        if self._join_task is not None:
            self._join_task.cancel()
            self._join_task = None
        if owned and self.subscription is not None:
            if self.options.enable_auto_commit:
                await self._commit_quietly("on unsubscribe")
            self._set_assignment(())
            await _maybe_await(self.listener.on_partitions_revoked(owned))
        self.subscription = None
        self._subscribed_topics = frozenset()
        await self._leave_quietly("unsubscribe")

    async def close(self, *, leave: bool = True) -> None:
        """Commit (auto-commit), revoke, leave (unless ``leave`` is False: the session
        then expires on the coordinator, as after a crash), stop the tasks."""
        if self._closed:
            return
        try:
            if leave:
                if self.options.enable_auto_commit and self._subs.assignment:
                    await self._commit_quietly("on close")
                if self.subscription is not None:
                    owned = set(self._subs.assignment)
                    if owned:
                        await _maybe_await(self.listener.on_partitions_revoked(owned))
                    await self._leave_quietly("close")
        finally:
            self._closed = True
            tasks = [t for t in (self._join_task, self._heartbeat_task) if t is not None]
            tasks += list(self._async_commits)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ offsets

    def positions(
        self, only: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = set(self._subs.assignment) if only is None else set(only)
        return {
            tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
            for tp, s in self._subs.assignment.items()
            if tp in wanted and s.position is not None
        }

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, deadline_ms: int
    ) -> None:
        """OffsetCommit of ``offsets`` (default: every position), retrying coordinator
        errors until ``deadline_ms``."""
        chosen = dict(self.positions() if offsets is None else offsets)
        if not chosen:
            return
        for tp, om in chosen.items():
            if type(om.offset) is not int or om.offset < 0:
                raise ValueError(f"cannot commit offset {om.offset!r} for {tp}")
        if self.subscription is not None:
            if self.state.phase is Phase.REBALANCING:
                raise RebalanceInProgressError(
                    "the consumer is rebalancing: call poll() to complete the rebalance, "
                    "then commit again"
                )
            if not self.state.in_generation:
                # Out of the group (left after max_poll_interval_ms, session expired,
                # generation reset): the partitions may already be another member's.
                # Kafka answers CommitFailedException here, not a rebalance error.
                raise CommitFailedError(
                    f"commit of group {self.group_id!r} failed: this consumer is not in an "
                    "active generation (it left the group, e.g. after max_poll_interval_ms "
                    "without a poll, or its session expired); poll() rejoins"
                )
            generation, member_id = self.state.generation_id, self.state.member_id
        else:
            generation, member_id = -1, ""
        request = api.OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=self.options.group_instance_id,
            topics=offset_commit_topics(chosen),
        )
        while True:
            answer = await self._call_retrying(
                "/v1/offset-commit", request, api.OffsetCommitResponse, deadline_ms
            )
            errors = [
                error_from_message(p.error)
                for t in answer.topics
                for p in t.partitions
                if p.error is not None
            ]
            if not errors:
                if self.on_committed is not None:
                    self.on_committed(chosen)
                return
            first = errors[0]
            reaction = classify(first)
            if reaction is Reaction.FIND_COORDINATOR:
                self.coordinator_unknown()
                await self._backoff(deadline_ms, first)
                continue
            if reaction is Reaction.REJOIN:
                self.state.rejoin_needed = True
                raise RebalanceInProgressError(
                    f"commit of group {self.group_id!r}: the group is rebalancing ({first})"
                )
            if reaction in (Reaction.RESET_GENERATION, Reaction.RESET_MEMBER):
                self.state.reset_generation(forget_member_id=reaction is Reaction.RESET_MEMBER)
                self._partitions_lost = True
                self._wake()
                raise CommitFailedError(
                    f"commit of group {self.group_id!r} failed: the group already rebalanced "
                    f"and gave the partitions to another member ({first})"
                )
            raise first

    async def _commit_quietly(self, why: str, only: Iterable[TopicPartition] | None = None) -> None:
        try:
            await self.commit(
                self.positions(only), monotonic_ms() + self._config.request_timeout_ms
            )
        except KafkaError as e:
            log.warning("auto-commit of %s %s failed: %s", self.group_id, why, e)

    def _auto_commit_async(self) -> None:
        if not self._subs.assignment or (
            self.subscription is not None and not self.state.in_generation
        ):
            return
        task = asyncio.create_task(self._commit_quietly("on its interval"))
        self._async_commits.add(task)
        task.add_done_callback(self._async_commits.discard)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        callback: Callable[[Mapping[TopicPartition, OffsetAndMetadata], KafkaError | None], Any]
        | None,
    ) -> asyncio.Task[None]:
        chosen = dict(self.positions() if offsets is None else offsets)

        async def run() -> None:
            error: KafkaError | None = None
            try:
                await self.commit(chosen, monotonic_ms() + self._config.request_timeout_ms)
            except KafkaError as e:
                error = e
            if callback is not None:
                try:
                    await _maybe_await(callback(chosen, error))
                except Exception:
                    log.exception("commit callback failed")

        task = asyncio.create_task(run())
        self._async_commits.add(task)
        task.add_done_callback(self._async_commits.discard)
        return task

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition], deadline_ms: int
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offset of each partition (None where there is none). A
        read_committed consumer asks with ``require_stable`` (KIP-447, as Kafka's
        consumer): an offset a transaction has written but not yet ended is waited for
        (UNSTABLE_OFFSET_COMMIT, retried until ``deadline_ms``), not passed over."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        by_topic: dict[str, list[api.OffsetFetchPartition]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(
                api.OffsetFetchPartition(partition=tp.partition)
            )
        request = api.OffsetFetchRequest(
            group_id=self.group_id,
            topics=tuple(
                api.OffsetFetchTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
            require_stable=self._config.isolation_level == "read_committed",
        )
        unstable: KafkaError | None = None
        while True:
            try:
                answer = await self._call_retrying(
                    "/v1/offset-fetch", request, api.OffsetFetchResponse, deadline_ms
                )
            except KafkaTimeoutError as timeout:
                if unstable is None:
                    raise
                # The deadline passed while a transaction held the offsets: say so.
                raise KafkaTimeoutError(
                    f"group {self.group_id!r}: committed offsets still pending at the "
                    f"deadline; last: {unstable}"
                ) from timeout
            error = _error_of(answer.error)
            if error is None:
                unstable = next(
                    (
                        pending
                        for t in answer.topics
                        for p in t.partitions
                        if isinstance(pending := _error_of(p.error), UnstableOffsetCommitError)
                    ),
                    None,
                )
                if unstable is None:
                    break
                await self._backoff(deadline_ms, unstable)
                continue
            if classify(error) is not Reaction.FIND_COORDINATOR:
                raise error
            if not isinstance(error, CoordinatorNotAvailableError):
                self.coordinator_unknown()
            await self._backoff(deadline_ms, error)
        found: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
        for t in answer.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                if tp in found and p.offset >= 0:
                    found[tp] = OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)
        return found


def run_assignor(
    group_id: str,
    protocol_name: str,
    subscriptions: Mapping[str, MemberSubscription],
    partitions_per_topic: Mapping[str, int],
) -> dict[str, Assignment]:
    """The group leader's assignment, or one clear ``IllegalStateError`` naming the
    group and the assignor when the assignor fails (an assertion of its own, a bug, an
    unknown protocol name): the consumer's poll raises it like any Kafka error, instead
    of an ``AssertionError`` escaping from deep inside the join, or an invalid
    assignment going out under ``python -O``."""
    try:
        return assignor_for(protocol_name).assign(
            members=subscriptions, partitions_per_topic=partitions_per_topic
        )
    except Exception as error:  # any assignor failure becomes the group's error
        raise IllegalStateError(
            f"group {group_id!r}: the {protocol_name!r} assignor failed on this leader: "
            f"{type(error).__name__}: {error}"
        ) from error
