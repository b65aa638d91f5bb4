"""Consumer-group administration: list, describe, offsets, reset and delete.

Kafka's Admin group calls (listConsumerGroups, describeConsumerGroups,
listConsumerGroupOffsets, alterConsumerGroupOffsets, deleteConsumerGroups), kept in
their own client so the topic admin stays focused. :class:`AsyncGroupAdmin` is the
implementation; :class:`GroupAdmin` runs it on a loop thread.

* ``list_groups`` asks *every* live broker (each knows the groups it coordinates), all
  at once; a broker that does not answer in time costs only its groups (Kafka's
  AdminClient lists from the brokers that answer: ``list_groups_result`` names the
  others, ``raftka groups list`` warns about them on stderr).
* Every other call finds the group's coordinator (FindCoordinator at any broker) and
  retries coordinator errors (moved, loading, not available) until its deadline.
* ``alter_offsets`` commits with generation -1, which the coordinator accepts only
  while the group is Empty (no active members): Kafka's rule that offsets of an active
  group cannot be reset from outside.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

import orjson

from raftka.client._admin_base import AdminClientBase
from raftka.client._sync import ClosingOnExit, LoopThread
from raftka.client._transport import (
    error_from_message,
    list_offsets,
    monotonic_ms,
)
from raftka.client.config import AdminConfig, SecurityOptions
from raftka.client.consumer.assignors import decode_assignment
from raftka.client.consumer.coordinator_client import offset_commit_topics
from raftka.common.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
)
from raftka.common.messages import Message
from raftka.common.messages import coordinator as api
from raftka.common.messages.broker import ErrorObject
from raftka.common.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "AsyncGroupAdmin",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "GroupAdmin",
    "ListGroupsResult",
    "MemberDescription",
]


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    """What ``list_groups_result`` found: the groups of the brokers that answered and,
    per broker id that did not, its error (the message names its address)."""

    groups: list[ConsumerGroupListing]
    errors: dict[int, KafkaError]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: The member's partitions (empty unless the group is Stable).
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    protocol_type: str
    #: The assignor in use (empty unless the group is Stable).
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator_id: int


def _assignment(raw: bytes) -> tuple[TopicPartition, ...]:
    if not raw:
        return ()
    try:
        return decode_assignment(orjson.loads(raw)).partitions
    except (ValueError, orjson.JSONDecodeError):
        return ()  # not a consumer-protocol assignment


A = TypeVar("A")

log = logging.getLogger(__name__)


class AsyncGroupAdmin(AdminClientBase):
    """Group administration on asyncio. Not thread-safe."""

    _kind = "group admin"

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "raftka-python",
        request_timeout_ms: int = 30_000,
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        **security: Unpack[SecurityOptions],
    ) -> None:
        super().__init__(
            AdminConfig(
                bootstrap_servers=bootstrap_servers,  # type: ignore[arg-type]  # normalised
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                default_api_timeout_ms=default_api_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                send_buffer_bytes=send_buffer_bytes,
                receive_buffer_bytes=receive_buffer_bytes,
                **security,
            )
        )

    def _remaining(self, deadline_ms: int) -> int:
        return max(1, min(self.config.request_timeout_ms, deadline_ms - monotonic_ms()))

    async def _backoff(self, deadline_ms: int, last: KafkaError | None) -> None:
        remaining = deadline_ms - monotonic_ms()
        if remaining <= 0:
            raise KafkaTimeoutError(f"the call did not complete in time; last error: {last}")
        await asyncio.sleep(min(self.config.retry_backoff_ms, remaining) / 1000)

    async def _brokers(self, deadline_ms: int) -> list[tuple[int, str]]:
        _, metadata = self._started()
        last: KafkaError | None = None
        while True:
            try:
                view = await metadata.refresh()
                return [(b, f"{n.host}:{n.port}") for b, n in sorted(view.brokers.items())]
            except KafkaError as e:
                last = e
            await self._backoff(deadline_ms, last)

    async def _coordinator_call(
        self,
        group_id: str,
        path: str,
        message: Message,
        answer_type: type[A],
        deadline_ms: int,
        *,
        key_type: int = 0,
    ) -> tuple[int, A]:
        """(coordinator id, answer) of ``path`` at the group's coordinator; retries
        coordinator errors (in the answer's top-level ``error``, where it has one)
        until the deadline."""
        transport, _ = self._started()
        last: KafkaError | None = None
        while True:
            try:
                node_id, address = await self._find_coordinator(
                    group_id, deadline_ms, key_type=key_type
                )
                answer = await transport.request_message(
                    address,
                    "POST",
                    path,
                    answer_type,
                    message=message,
                    timeout_ms=self._remaining(deadline_ms),
                )
                # The coordinator's own errors are in a top-level ``error``; answers
                # with errors per item only (OffsetCommit, DeleteGroups) have none.
                raw: ErrorObject | None = getattr(answer, "error", None)
                error = None if raw is None else error_from_message(raw)
                if error is None or not error.retriable:
                    return node_id, answer
                last = error
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
            await self._backoff(deadline_ms, last)

    async def _coordinator_call_per_group(
        self,
        group_id: str,
        path: str,
        message: Message,
        answer_type: type[A],
        deadline_ms: int,
        *,
        group_error: Callable[[A], ErrorObject | None],
    ) -> tuple[int, A]:
        """:meth:`_coordinator_call` for answers that carry the group's own error per
        item (DescribeGroups, DeleteGroups), which ``group_error`` picks out: asked
        again after a backoff while that error is retriable (the coordinator moved or
        is loading, as after a broker restart), raised when it is not."""
        while True:
            node_id, answer = await self._coordinator_call(
                group_id, path, message, answer_type, deadline_ms
            )
            raw = group_error(answer)
            if raw is None:
                return node_id, answer
            error = error_from_message(raw)
            if not error.retriable:
                raise error
            await self._backoff(deadline_ms, error)

    async def _find_coordinator(
        self, group_id: str, deadline_ms: int, *, key_type: int = 0
    ) -> tuple[int, str]:
        """The coordinator of ``group_id``: a group's (``key_type`` 0) or a
        transactional id's (1)."""
        transport, _ = self._started()
        last: KafkaError = CoordinatorNotAvailableError("no broker answered")
        for _, address in await self._brokers(deadline_ms):
            try:
                answer = await transport.request_message(
                    address,
                    "POST",
                    "/v1/find-coordinator",
                    api.FindCoordinatorResponse,
                    message=api.FindCoordinatorRequest(key=group_id, key_type=key_type),
                    timeout_ms=self._remaining(deadline_ms),
                )
            except KafkaError as e:
                last = e
                continue
            if answer.error is None:
                return answer.node_id, f"{answer.host}:{answer.port}"
            last = error_from_message(answer.error)
        raise last

    # ------------------------------------------------------------------ calls

    async def list_groups(self, *, timeout_ms: int | None = None) -> list[ConsumerGroupListing]:
        """Every group of every live broker that answered, sorted by id (Kafka's
        ``listConsumerGroups().valid()``); a broker that did not answer is logged as a
        warning. :meth:`list_groups_result` also says which brokers did not answer."""
        result = await self.list_groups_result(timeout_ms=timeout_ms)
        for broker_id, error in sorted(result.errors.items()):
            log.warning("ListGroups: broker %d did not answer: %s", broker_id, error)
        return result.groups

    async def list_groups_result(self, *, timeout_ms: int | None = None) -> ListGroupsResult:
        """Every group of the live (unfenced) brokers the metadata names, asked all at
        once, each within the call's timeout: what the brokers answered plus, per broker
        that did not, its error (a fenced broker is not in the metadata, so not asked).
        Raises only when no broker answered."""
        transport, _ = self._started()
        deadline = self._deadline(timeout_ms)
        brokers = await self._brokers(deadline)

        async def ask(address: str) -> api.ListGroupsResponse:
            return await transport.request_message(
                address,
                "POST",
                "/v1/list-groups",
                api.ListGroupsResponse,
                message=api.ListGroupsRequest(),
                timeout_ms=self._remaining(deadline),
            )

        answers = await asyncio.gather(
            *(ask(address) for _, address in brokers), return_exceptions=True
        )
        found: dict[str, ConsumerGroupListing] = {}
        errors: dict[int, KafkaError] = {}
        for (broker_id, _), answer in zip(brokers, answers, strict=True):
            if isinstance(answer, KafkaError):
                errors[broker_id] = answer  # its message names the address
                continue
            if isinstance(answer, BaseException):
                raise answer  # not a broker's failure: a bug or a cancellation
            for g in answer.groups:
                found[g.group_id] = ConsumerGroupListing(g.group_id, g.protocol_type, g.state)
        if errors and len(errors) == len(brokers):
            raise next(iter(errors.values()))
        return ListGroupsResult([found[g] for g in sorted(found)], errors)

    async def describe_group(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> ConsumerGroupDescription:
        """State, protocol and members (with their assignments) of one group; an unknown
        group is described as Dead with no members (Kafka's answer)."""
        deadline = self._deadline(timeout_ms)
        node_id, answer = await self._coordinator_call_per_group(
            group_id,
            "/v1/describe-groups",
            api.DescribeGroupsRequest(groups=(group_id,)),
            api.DescribeGroupsResponse,
            deadline,
            group_error=lambda a: a.groups[0].error,
        )
        (g,) = answer.groups
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                host=m.client_host,
                assignment=_assignment(m.member_assignment),
            )
            for m in g.members
        )
        return ConsumerGroupDescription(
            group_id, g.state, g.protocol_type, g.protocol, members, node_id
        )

    async def list_offsets(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group."""
        deadline = self._deadline(timeout_ms)
        _, answer = await self._coordinator_call(
            group_id,
            "/v1/offset-fetch",
            api.OffsetFetchRequest(group_id=group_id, topics=None),
            api.OffsetFetchResponse,
            deadline,
        )
        if answer.error is not None:
            raise error_from_message(answer.error)
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in answer.topics:
            for p in t.partitions:
                if p.offset >= 0:
                    out[TopicPartition(t.name, p.partition)] = OffsetAndMetadata(
                        p.offset, p.metadata, p.leader_epoch
                    )
        return out

    async def alter_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set committed offsets; the group must have no active members."""
        deadline = self._deadline(timeout_ms)
        # No leader epoch: a reset from outside the group does not come from a fetch.
        request = api.OffsetCommitRequest(
            group_id=group_id,
            generation_id=-1,
            member_id="",
            topics=offset_commit_topics(
                {tp: OffsetAndMetadata(om.offset, om.metadata, None) for tp, om in offsets.items()}
            ),
        )
        # A per-partition NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (the offsets
        # topic still being created or loaded) is retried: setting them again is harmless.
        await self._coordinator_call_per_group(
            group_id,
            "/v1/offset-commit",
            request,
            api.OffsetCommitResponse,
            deadline,
            group_error=lambda a: next(
                (p.error for t in a.topics for p in t.partitions if p.error is not None), None
            ),
        )

    async def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete empty groups (NON_EMPTY_GROUP for an active one, GROUP_ID_NOT_FOUND)."""
        deadline = self._deadline(timeout_ms)
        for group_id in group_ids:
            await self._coordinator_call_per_group(
                group_id,
                "/v1/delete-groups",
                api.DeleteGroupsRequest(groups=(group_id,)),
                api.DeleteGroupsResponse,
                deadline,
                group_error=lambda a: next((r.error for r in a.results if r.error), None),
            )

    async def delete_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Delete the group's committed offsets of ``partitions`` (Kafka's OffsetDelete,
        kafka-consumer-groups' ``--delete-offsets``): each partition's outcome, None
        when deleted (also when it had none); GROUP_SUBSCRIBED_TO_TOPIC for a topic an
        active consumer group subscribes to, UNKNOWN_TOPIC_OR_PARTITION. The group's
        own error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) is raised."""
        wanted: dict[str, list[int]] = {}
        for tp in partitions:
            wanted.setdefault(tp.topic, []).append(tp.partition)
        request = api.OffsetDeleteRequest(
            group_id=group_id,
            topics=tuple(
                api.OffsetFetchTopic(
                    name=t, partitions=tuple(api.OffsetFetchPartition(partition=p) for p in ps)
                )
                for t, ps in wanted.items()
            ),
        )
        _, answer = await self._coordinator_call_per_group(
            group_id,
            "/v1/offset-delete",
            request,
            api.OffsetDeleteResponse,
            self._deadline(timeout_ms),
            group_error=lambda a: a.error,
        )
        return {
            TopicPartition(t.name, p.partition): (
                None if p.error is None else error_from_message(p.error)
            )
            for t in answer.topics
            for p in t.partitions
        }

    async def partition_offsets(
        self,
        partitions: Iterable[TopicPartition],
        timestamp: int,
        *,
        isolation_level: int = 0,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """ListOffsets: ``timestamp`` is EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a time
        in ms (the first offset at or after it; the log end when there is none). With
        ``isolation_level`` 1 (read_committed) LATEST_TIMESTAMP is the last stable
        offset."""
        transport, metadata = self._started()
        found = await list_offsets(
            transport,
            metadata,
            dict.fromkeys(partitions, timestamp),
            deadline_ms=self._deadline(timeout_ms),
            retry_backoff_ms=self.config.retry_backoff_ms,
            isolation_level=isolation_level,
        )
        return {tp: r.offset for tp, r in found.items()}

    async def topic_partitions(
        self, topic: str, *, timeout_ms: int | None = None
    ) -> list[TopicPartition]:
        _, metadata = self._started()
        view = await metadata.wait_for_topic(topic, self._deadline(timeout_ms))
        return [TopicPartition(topic, p.partition) for p in view.partitions]


class GroupAdmin(ClosingOnExit):
    """The blocking face of :class:`AsyncGroupAdmin` (same arguments and methods)."""

    def __init__(self, **config: Any) -> None:
        self._async = AsyncGroupAdmin(**config)
        self._thread = LoopThread("raftka-group-admin")

    def _run(self, coro: Coroutine[Any, Any, A]) -> A:
        timeout_s = self._async.config.default_api_timeout_ms / 1000 + 5
        return self._thread.run(coro, timeout_s)

    def list_groups(self, **kw: Any) -> list[ConsumerGroupListing]:
        return self._run(self._async.list_groups(**kw))

    def list_groups_result(self, **kw: Any) -> ListGroupsResult:
        return self._run(self._async.list_groups_result(**kw))

    def describe_group(self, group_id: str, **kw: Any) -> ConsumerGroupDescription:
        return self._run(self._async.describe_group(group_id, **kw))

    def list_offsets(self, group_id: str, **kw: Any) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._run(self._async.list_offsets(group_id, **kw))

    def alter_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], **kw: Any
    ) -> None:
        self._run(self._async.alter_offsets(group_id, offsets, **kw))

    def delete_groups(self, group_ids: Iterable[str], **kw: Any) -> None:
        self._run(self._async.delete_groups(list(group_ids), **kw))

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], **kw: Any
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(self._async.delete_offsets(group_id, list(partitions), **kw))

    def partition_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int, **kw: Any
    ) -> dict[TopicPartition, int]:
        return self._run(self._async.partition_offsets(list(partitions), timestamp, **kw))

    def topic_partitions(self, topic: str, **kw: Any) -> list[TopicPartition]:
        return self._run(self._async.topic_partitions(topic, **kw))

    def close(self) -> None:
        try:
            if self._thread.started:
                self._run(self._async.close())
        finally:
            self._thread.close()
