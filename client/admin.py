"""``AsyncAdmin`` and ``Admin``: Kafka's admin client over raftka's APIs.

Topic, config, SCRAM-user and ACL commands go to the *active controller*
(``POST/DELETE /v1/topics``, ``POST /v1/partitions``, ``POST/GET /v1/configs``,
``/v1/scram-credentials``, ``/v1/acls``): the controllers are
``bootstrap_controllers`` when given, else the list a broker's metadata names. A
controller that is not active answers NOT_CONTROLLER with the active one's address;
the admin follows it, and retries retriable errors with ``retry_backoff_ms`` until
``default_api_timeout_ms`` (or a call's ``timeout_ms``) runs out: KafkaTimeoutError.
Reads of the cluster (``list_topics``, ``describe_topics``, ``describe_cluster``,
``list_offsets``) ask brokers, as Kafka's admin does.

Per-item errors: Kafka's admin returns a future per topic. Here a call that names
several topics applies them all (the controller answers each) and then raises the
first per-topic error as Kafka's typed exception (``TopicAlreadyExistsError``...), with
every topic's outcome in the exception's ``results`` attribute
(``{name: KafkaError | None}``); it returns None when all succeeded.

Thread safety: ``AsyncAdmin`` belongs to one event loop; ``Admin`` is thread-safe
(calls run one at a time on its loop thread).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Unpack, cast

import msgspec

from raftka.client._admin_base import AdminClientBase
from raftka.client._sync import ClosingOnExit, LoopThread
from raftka.client._transport import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ListedOffset,
    error_from_message,
    error_from_wire,
    list_offsets,
    monotonic_ms,
)
from raftka.client.config import AdminConfig, SecurityOptions
from raftka.client.structs import (
    NewPartitions,
    NewTopic,
    Node,
    TopicDescription,
    TopicPartition,
)
from raftka.common.acl import AclBinding, AclBindingFilter
from raftka.common.errors import (
    BrokerNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages import Message, decode_value
from raftka.common.messages import controller as msg
from raftka.common.messages import log_dirs as log_dirs_api
from raftka.common.scram import ITERATIONS_MIN, salted_password

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AsyncAdmin",
    "ClusterDescription",
    "ConfigEntry",
    "ListedOffset",
    "LogDirDescription",
    "OffsetSpec",
    "PartitionReassignment",
    "ReplicaInfo",
    "ScramCredentialInfo",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]

T = TypeVar("T")
K = TypeVar("K")
M = TypeVar("M", bound=Message)

#: Random salt bytes of a credential the admin makes.
SCRAM_SALT_BYTES = 32

#: ``list_offsets`` specs: Kafka's OffsetSpec.earliest()/latest()/forTimestamp(ts).
OffsetSpec = Literal["earliest", "latest"] | int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic config as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    is_sensitive: bool
    type: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs operation: ``SET``/``DELETE``/``APPEND``/``SUBTRACT``."""

    name: str
    value: str | None = None
    op: Literal["SET", "DELETE", "APPEND", "SUBTRACT"] = "SET"

    def __post_init__(self) -> None:
        if self.op not in ("SET", "DELETE", "APPEND", "SUBTRACT"):
            raise ValueError(f"op must be SET, DELETE, APPEND or SUBTRACT, not {self.op!r}")
        if self.op != "DELETE" and self.value is None:
            raise ValueError(f"{self.op} of {self.name!r} needs a value")


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for ``mechanism`` (Kafka's UserScramCredentialUpsertion).
    The password stays here: the admin sends only a random salt and the salted password."""

    user: str
    mechanism: str
    password: str
    iterations: int = ITERATIONS_MIN

    def __repr__(self) -> str:  # never print a password
        return (
            f"UserScramCredentialUpsertion(user={self.user!r}, mechanism={self.mechanism!r}, "
            f"iterations={self.iterations})"
        )


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """What DescribeUserScramCredentials shows of one credential."""

    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """describe_cluster: the unfenced brokers, the active controller id (None if the
    broker asked does not know it) and the controllers' addresses."""

    brokers: tuple[Node, ...]
    controller_id: int | None
    controllers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress (Kafka's PartitionReassignment): every replica now
    (the target ones first, then those leaving), those being added, those leaving."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica in a log dir (Kafka's ReplicaInfo): its size in bytes, its offset
    lag (high watermark minus log end, never below 0) and whether it is a future
    replica (never, in raftka: replicas do not move between dirs)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of a broker (Kafka's LogDirDescription): its error (None, or
    KAFKA_STORAGE_ERROR when it cannot be read), its replicas, total and usable bytes."""

    error: KafkaError | None
    replica_infos: Mapping[TopicPartition, ReplicaInfo]
    total_bytes: int
    usable_bytes: int


def _raise_first(results: Mapping[K, KafkaError | None]) -> None:
    for error in results.values():
        if error is not None:
            error.results = results  # type: ignore[attr-defined]
            raise error


class AsyncAdmin(AdminClientBase):
    """Kafka's admin client on asyncio. Not thread-safe."""

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        bootstrap_controllers: str | Sequence[str] | None = None,
        client_id: str = "raftka-python",
        request_timeout_ms: int = 30_000,
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        connections_max_idle_ms: int = 540_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        **security: Unpack[SecurityOptions],
    ) -> None:
        super().__init__(
            AdminConfig(
                bootstrap_servers=bootstrap_servers,  # type: ignore[arg-type]  # normalised
                bootstrap_controllers=bootstrap_controllers,  # type: ignore[arg-type]
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                default_api_timeout_ms=default_api_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                metadata_max_age_ms=metadata_max_age_ms,
                connections_max_idle_ms=connections_max_idle_ms,
                send_buffer_bytes=send_buffer_bytes,
                receive_buffer_bytes=receive_buffer_bytes,
                **security,
            )
        )
        self._active_controller: str | None = None

    # ------------------------------------------------------------------ controllers

    async def _controllers(self, deadline_ms: int) -> list[str]:
        if self.config.bootstrap_controllers is not None:
            return list(self.config.bootstrap_controllers)
        _, metadata = self._started()
        if not metadata.view.controllers:
            await self._retry(metadata.refresh, deadline_ms)
        return list(metadata.view.controllers)

    async def _retry(self, fn: Any, deadline_ms: int) -> Any:
        last: KafkaError | None = None
        while True:
            try:
                return await fn()
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
            now = monotonic_ms()
            if now >= deadline_ms:
                raise KafkaTimeoutError(f"the call did not complete in time; last error: {last}")
            await asyncio.sleep(min(self.config.retry_backoff_ms, deadline_ms - now) / 1000)

    async def _controller_call(
        self,
        method: str,
        path: str,
        *,
        body: Message | None = None,
        params: Mapping[str, str | Sequence[str]] | None = None,
        timeout_ms: int | None,
    ) -> Any:
        """The active controller's JSON answer to ``body`` (a message of
        ``raftka.common.messages.controller``), following NOT_CONTROLLER redirects."""
        transport, _ = self._started()
        json_body = None if body is None else _json_value(body)
        deadline = self._deadline(timeout_ms)
        controllers = await self._controllers(deadline)
        if not controllers:
            raise KafkaTimeoutError("no controller address known")
        attempt = 0
        last: KafkaError | None = None
        while True:
            address = self._active_controller or controllers[attempt % len(controllers)]
            attempt += 1
            remaining = deadline - monotonic_ms()
            try:
                return await transport.request_json(
                    address,
                    method,
                    path,
                    json_body=json_body,
                    params=params,
                    timeout_ms=max(1, min(self.config.request_timeout_ms, remaining)),
                )
            except NotControllerError as e:
                last = e
                answer = getattr(e, "body", None) or {}
                leader = answer.get("leader_address") if isinstance(answer, dict) else None
                self._active_controller = leader if isinstance(leader, str) else None
                if self._active_controller is not None:
                    continue  # go there at once
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
                self._active_controller = None
            now = monotonic_ms()
            if now >= deadline:
                raise KafkaTimeoutError(
                    f"{method} {path} did not complete in time; last error: {last}"
                )
            if attempt % len(controllers) == 0:
                await asyncio.sleep(min(self.config.retry_backoff_ms, deadline - now) / 1000)

    # ------------------------------------------------------------------ topics

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Create topics; raises the first per-topic error (see the module doc)."""
        topics: list[msg.CreatableTopic] = []
        for t in new_topics:
            # A None value travels as null and the controller refuses it naming the
            # key, as before (messages are not validated when built).
            configs = cast(dict[str, str], dict(t.configs))
            if t.replica_assignment is not None:
                topics.append(
                    msg.CreatableTopic(
                        name=t.name,
                        configs=configs,
                        assignments={p: list(r) for p, r in sorted(t.replica_assignment.items())},
                    )
                )
            else:
                topics.append(
                    msg.CreatableTopic(
                        name=t.name,
                        configs=configs,
                        num_partitions=t.num_partitions,
                        replication_factor=t.replication_factor,
                    )
                )
        if not topics:
            return
        request = msg.CreateTopicsRequest(topics=topics, validate_only=validate_only)
        await self._topics_call("POST", "/v1/topics", request, msg.CreateTopicsResponse, timeout_ms)

    async def delete_topics(self, topics: Iterable[str], *, timeout_ms: int | None = None) -> None:
        names = list(topics)
        if not names:
            return
        request = msg.DeleteTopicsRequest(names=names)
        await self._topics_call(
            "DELETE", "/v1/topics", request, msg.DeleteTopicsResponse, timeout_ms
        )

    async def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        topics = [
            msg.CreatablePartitions(
                name=name,
                count=spec.total_count,
                assignments=(
                    None
                    if spec.new_assignments is None
                    else [list(r) for r in spec.new_assignments]
                ),
            )
            for name, spec in new_partitions.items()
        ]
        if not topics:
            return
        request = msg.CreatePartitionsRequest(topics=topics, validate_only=validate_only)
        await self._topics_call(
            "POST", "/v1/partitions", request, msg.CreatePartitionsResponse, timeout_ms
        )

    async def _topics_call(
        self,
        method: str,
        path: str,
        body: Message,
        response_type: type[
            msg.CreateTopicsResponse | msg.DeleteTopicsResponse | msg.CreatePartitionsResponse
        ],
        timeout_ms: int | None,
    ) -> None:
        """One per-topic controller call (create, delete, add partitions): the first
        topic's error is raised, named by its topic."""
        answer = await self._controller_call(method, path, body=body, timeout_ms=timeout_ms)
        results = decode_value(answer, response_type).topics
        _raise_first({str(t.name): _item_error(t.error) for t in results})

    async def _broker_metadata(self, *, timeout_ms: int | None) -> Any:
        _, metadata = self._started()
        return await self._retry(
            lambda: metadata.refresh(all_topics=True), self._deadline(timeout_ms)
        )

    async def list_topics(
        self, *, list_internal: bool = False, timeout_ms: int | None = None
    ) -> set[str]:
        view = await self._broker_metadata(timeout_ms=timeout_ms)
        return {n for n in view.topics if list_internal or not n.startswith("__")}

    async def describe_topics(
        self, topics: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[TopicDescription]:
        """Each topic asked for (all when None), in the order asked;
        UnknownTopicOrPartitionError for one that does not exist."""
        view = await self._broker_metadata(timeout_ms=timeout_ms)
        names = sorted(view.topics) if topics is None else list(topics)
        out = []
        for name in names:
            t = view.topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if t.error is not None:
                raise t.error
            out.append(
                TopicDescription(
                    name=name,
                    topic_id=t.topic_id or "",
                    is_internal=name.startswith("__"),
                    partitions=t.partitions,
                )
            )
        return out

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        view = await self._broker_metadata(timeout_ms=timeout_ms)
        return ClusterDescription(
            brokers=tuple(sorted(view.brokers.values())),
            controller_id=view.controller_id,
            controllers=view.controllers,
        )

    # ------------------------------------------------------------------ elections

    async def elect_leaders(
        self,
        election_type: Literal["preferred", "unclean"],
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's electLeaders (KIP-460): ``"preferred"`` moves each partition's
        leadership to its first replica where that replica is an active ISR member;
        ``"unclean"`` elects a leader for each leaderless partition, outside the ISR if
        it must (records the new leader lacks are lost). ``partitions`` None: every
        partition, answering only those that needed an election. Per partition: None
        when elected, else ElectionNotNeededError, PreferredLeaderNotAvailableError,
        EligibleLeadersNotAvailableError or UnknownTopicOrPartitionError."""
        if election_type not in ("preferred", "unclean"):
            raise ValueError(f"election_type must be preferred or unclean, not {election_type!r}")
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = msg.ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=(
                None
                if partitions is None
                else [msg.ElectionPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
            ),
        )
        answer = await self._controller_call(
            "POST", "/v1/elect-leaders", body=request, timeout_ms=timeout_ms
        )
        return {
            TopicPartition(r.topic, r.partition): _item_error(r.error)
            for r in decode_value(answer, msg.ElectLeadersResponse).results
        }

    # ------------------------------------------------------------------ reassignments

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's alterPartitionReassignments (KIP-455): move each partition to its
        target replicas (None: cancel its reassignment in progress). The new replicas
        copy the log first; the old ones leave once every new one is in sync. Per
        partition: None when started (or done), else its error
        (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
        NO_REASSIGNMENT_IN_PROGRESS)."""
        request = msg.AlterPartitionReassignmentsRequest(
            partitions=[
                msg.ReassignablePartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    replicas=None if replicas is None else list(replicas),
                )
                for tp, replicas in reassignments.items()
            ]
        )
        if not request.partitions:
            return {}
        answer = await self._controller_call(
            "POST", "/v1/reassignments", body=request, timeout_ms=timeout_ms
        )
        return {
            TopicPartition(r.topic, r.partition): _item_error(r.error)
            for r in decode_value(answer, msg.AlterPartitionReassignmentsResponse).results
        }

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """Kafka's listPartitionReassignments: the reassignments in progress (of
        ``partitions`` only, when given)."""
        wanted = None if partitions is None else set(partitions)
        answer = await self._controller_call("GET", "/v1/reassignments", timeout_ms=timeout_ms)
        out: dict[TopicPartition, PartitionReassignment] = {}
        for r in decode_value(answer, msg.ListPartitionReassignmentsResponse).reassignments:
            tp = TopicPartition(r.topic, r.partition)
            if wanted is None or tp in wanted:
                out[tp] = PartitionReassignment(
                    tuple(r.replicas), tuple(r.adding_replicas), tuple(r.removing_replicas)
                )
        return out

    # ------------------------------------------------------------------ configs

    async def describe_configs(
        self,
        topics: Iterable[str],
        *,
        keys: Iterable[str] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, ConfigEntry]]:
        """Every config of each topic (or only ``keys``) with its effective value."""
        out: dict[str, dict[str, ConfigEntry]] = {}
        key_list = [] if keys is None else list(keys)
        for topic in topics:
            request = msg.DescribeConfigsRequest(topic=topic, key=key_list)
            answer = await self._controller_call(
                "GET", "/v1/configs", params=msg.query_params(request), timeout_ms=timeout_ms
            )
            out[topic] = {
                e.name: _config_entry(e)
                for e in decode_value(answer, msg.DescribeConfigsResponse).entries
            }
        return out

    async def describe_broker_configs(
        self, broker_ids: Iterable[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, dict[str, ConfigEntry]]:
        """DescribeConfigs of broker resources: each broker's (every live one when none
        is named) static configs, the properties it was started with, and its dynamic
        ones (the replication throttles) as it last read them from committed metadata.
        Sensitive values are None. A broker id that is not a
        live broker is BROKER_NOT_AVAILABLE."""
        answers = await self._ask_brokers(
            broker_ids,
            "GET",
            "/v1/broker-configs",
            msg.DescribeConfigsResponse,
            message=None,
            timeout_ms=timeout_ms,
        )
        return {b: {e.name: _config_entry(e) for e in a.entries} for b, a in answers.items()}

    async def incremental_alter_configs(
        self,
        configs: Mapping[str, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Kafka's incrementalAlterConfigs for topics: ``{topic: [AlterConfigOp]}``."""
        await self._incremental_alter(
            "topic", configs, validate_only=validate_only, timeout_ms=timeout_ms
        )

    async def incremental_alter_broker_configs(
        self,
        configs: Mapping[int | None, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Kafka's incrementalAlterConfigs for brokers' dynamic configs: ``{broker id
        (None: the cluster-wide default): [AlterConfigOp]}``; the keys raftka honours
        are in ``raftka.metadata.broker_dynamic_config``, others are INVALID_CONFIG."""
        await self._incremental_alter(
            "broker",
            {"" if b is None else str(b): ops for b, ops in configs.items()},
            validate_only=validate_only,
            timeout_ms=timeout_ms,
        )

    async def _incremental_alter(
        self,
        resource_type: Literal["topic", "broker"],
        configs: Mapping[str, Iterable[AlterConfigOp]],
        *,
        validate_only: bool,
        timeout_ms: int | None,
    ) -> None:
        resources = [
            msg.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=topic,
                ops=[
                    msg.AlterConfigOp(
                        name=op.name, op=op.op, value=None if op.op == "DELETE" else op.value
                    )
                    for op in ops
                ],
            )
            for topic, ops in configs.items()
        ]
        if not resources:
            return
        answer = await self._controller_call(
            "POST",
            "/v1/configs",
            body=msg.IncrementalAlterConfigsRequest(
                resources=resources, validate_only=validate_only
            ),
            timeout_ms=timeout_ms,
        )
        results = decode_value(answer, msg.IncrementalAlterConfigsResponse).resources
        _raise_first({r.resource_name: _item_error(r.error) for r in results})

    async def alter_configs(
        self,
        configs: Mapping[str, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Incremental, unlike Kafka's deprecated alterConfigs: each ``{key: value}``
        is SET, each ``{key: None}`` DELETEd (back to its default); configs not named
        are left alone."""
        await self.incremental_alter_configs(
            {
                topic: [
                    AlterConfigOp(k, None, "DELETE") if v is None else AlterConfigOp(k, v)
                    for k, v in entries.items()
                ]
                for topic, entries in configs.items()
            },
            validate_only=validate_only,
            timeout_ms=timeout_ms,
        )

    # ------------------------------------------------------------------ SCRAM users

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Kafka's alterUserScramCredentials. Each upsertion's password is salted and
        hashed here (a random salt); one that cannot be (a mechanism that is not SCRAM,
        iterations outside 4096..16384) fails alone with Kafka's error, without being
        sent. Per-user errors as the module doc says (``results`` by user)."""
        deletions: list[msg.ScramCredentialDeletionData] = []
        upsertions: list[msg.ScramCredentialUpsertionData] = []
        local: dict[str, KafkaError | None] = {}
        for a in alterations:
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append(
                    msg.ScramCredentialDeletionData(name=a.user, mechanism=a.mechanism)
                )
                continue
            salt = secrets.token_bytes(SCRAM_SALT_BYTES)
            try:
                salted = salted_password(a.mechanism, a.password, salt, a.iterations)
            except KafkaError as e:
                local[a.user] = e
                continue
            upsertions.append(
                msg.ScramCredentialUpsertionData(
                    name=a.user,
                    mechanism=a.mechanism,
                    iterations=a.iterations,
                    salt=salt,
                    salted_password=salted,
                )
            )
        results: dict[str, KafkaError | None] = {}
        if deletions or upsertions:
            answer = await self._controller_call(
                "POST",
                "/v1/scram-credentials",
                body=msg.AlterUserScramCredentialsRequest(
                    deletions=deletions, upsertions=upsertions
                ),
                timeout_ms=timeout_ms,
            )
            for r in decode_value(answer, msg.AlterUserScramCredentialsResponse).results:
                results[r.user] = _item_error(r.error)
        results.update(local)
        _raise_first(results)

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Kafka's describeUserScramCredentials: each user's mechanisms and iteration
        counts (never keys), every user with a credential when ``users`` is None. A
        named user with none: RESOURCE_NOT_FOUND (``results`` by user)."""
        request = msg.DescribeUserScramCredentialsRequest(user=list(users or ()))
        answer = await self._controller_call(
            "GET",
            "/v1/scram-credentials",
            params=msg.query_params(request),
            timeout_ms=timeout_ms,
        )
        described = decode_value(answer, msg.DescribeUserScramCredentialsResponse).results
        _raise_first({r.user: _item_error(r.error) for r in described})
        return {
            r.user: [ScramCredentialInfo(c.mechanism, c.iterations) for c in r.credentials]
            for r in described
        }

    # ------------------------------------------------------------------ ACLs

    async def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> None:
        """Kafka's createAcls. A binding that exists already is a success; the
        controller answers each binding, and the first error is raised (``results``
        by binding)."""
        creations = list(bindings)
        if not creations:
            return
        answer = await self._controller_call(
            "POST",
            "/v1/acls",
            body=msg.CreateAclsRequest(creations=[msg.acl_binding_data(b) for b in creations]),
            timeout_ms=timeout_ms,
        )
        results = decode_value(answer, msg.CreateAclsResponse).results
        _raise_first({b: _item_error(r.error) for b, r in zip(creations, results, strict=True)})

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Kafka's describeAcls: the committed bindings ``acl_filter`` matches (every
        binding when None), from the active controller's image."""
        answer = await self._controller_call(
            "GET",
            "/v1/acls",
            params=msg.query_params(msg.acl_filter_data(acl_filter or AclBindingFilter())),
            timeout_ms=timeout_ms,
        )
        return [msg.acl_binding_of(b) for b in decode_value(answer, msg.DescribeAclsResponse).acls]

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding]]:
        """Kafka's deleteAcls: per filter, every binding it matched (now deleted). A
        filter's error is raised after all applied (``results`` by filter)."""
        wanted = list(filters)
        if not wanted:
            return {}
        answer = await self._controller_call(
            "POST",
            "/v1/acls/delete",
            body=msg.DeleteAclsRequest(filters=[msg.acl_filter_data(f) for f in wanted]),
            timeout_ms=timeout_ms,
        )
        results = decode_value(answer, msg.DeleteAclsResponse).filter_results
        _raise_first({f: _item_error(r.error) for f, r in zip(wanted, results, strict=True)})
        return {
            f: [msg.acl_binding_of(b) for b in r.matching_acls]
            for f, r in zip(wanted, results, strict=True)
        }

    # ------------------------------------------------------------------ offsets

    async def list_offsets(
        self, specs: Mapping[TopicPartition, OffsetSpec], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, ListedOffset]:
        """Kafka's listOffsets: "earliest" (log start), "latest" (high watermark) or a
        timestamp (the first offset at or after it; offset -1 if none)."""
        transport, metadata = self._started()
        timestamps: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if spec == "earliest":
                timestamps[tp] = EARLIEST_TIMESTAMP
            elif spec == "latest":
                timestamps[tp] = LATEST_TIMESTAMP
            elif type(spec) is int and spec >= 0:
                timestamps[tp] = spec
            else:
                raise ValueError(f"offset spec for {tp} must be earliest, latest or a timestamp")
        return await list_offsets(
            transport,
            metadata,
            timestamps,
            deadline_ms=self._deadline(timeout_ms),
            retry_backoff_ms=self.config.retry_backoff_ms,
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Kafka's deleteRecords: delete every record below ``before[tp]`` (``-1``: the
        high watermark) by moving the partition's log start offset there. Returns each
        partition's new low watermark (the smallest log start among its in-sync
        replicas, once they all reached the offset). OffsetOutOfRangeError for an
        offset above the high watermark; retriable errors (a leader moving, followers
        slow to follow) are retried until the timeout: KafkaTimeoutError."""
        for tp, offset in before.items():
            if type(offset) is not int or offset < -1:
                raise ValueError(f"the offset for {tp} must be >= 0 or -1, not {offset!r}")
        transport, metadata = self._started()
        deadline = self._deadline(timeout_ms)
        metadata.add_topics(sorted({tp.topic for tp in before}))
        remaining = {TopicPartition(tp.topic, tp.partition): o for tp, o in before.items()}
        results: dict[TopicPartition, int] = {}
        last: KafkaError | None = None
        while remaining:
            try:
                await metadata.refresh()
            except KafkaError as e:
                last = e
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in remaining:
                leader = metadata.view.leader_address(tp)
                topic = metadata.view.topics.get(tp.topic)
                if leader is not None:
                    by_leader.setdefault(leader[1], []).append(tp)
                elif (
                    topic is not None
                    and topic.error is None
                    and tp.partition >= len(topic.partitions)
                ):
                    raise UnknownTopicOrPartitionError(f"{tp} does not exist")
                else:
                    last = topic.error if topic is not None and topic.error else last
            for address, tps in by_leader.items():
                http_ms = max(1, min(self.config.request_timeout_ms, deadline - monotonic_ms()))
                body = {
                    # The broker answers before the HTTP timeout ends.
                    "timeout_ms": max(0, http_ms - DELETE_RECORDS_MARGIN_MS),
                    "partitions": [
                        {"topic": tp.topic, "partition": tp.partition, "offset": remaining[tp]}
                        for tp in tps
                    ],
                }
                try:
                    answer = await transport.request_json(
                        address, "POST", "/v1/delete-records", json_body=body, timeout_ms=http_ms
                    )
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                    continue
                for r in answer.get("responses", []):
                    tp = TopicPartition(r["topic"], int(r["partition"]))
                    if tp not in remaining:
                        continue
                    if r.get("error") is not None:
                        error = error_from_wire(r["error"])
                        if not error.retriable:
                            raise error
                        last = error
                        continue
                    results[tp] = int(r["low_watermark"])
                    del remaining[tp]
            if not remaining:
                break
            metadata.invalidate()
            now = monotonic_ms()
            if now >= deadline:
                if isinstance(last, UnknownTopicOrPartitionError):
                    raise last
                raise KafkaTimeoutError(
                    f"delete records of {sorted(map(str, remaining))} did not complete in time"
                    + (f"; last error: {last}" if last is not None else "")
                )
            await asyncio.sleep(min(self.config.retry_backoff_ms, deadline - now) / 1000)
        return results

    # ------------------------------------------------------------------ log dirs

    async def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Kafka's describeLogDirs: for each broker (every live one when none is named),
        each of its log dirs with the replicas stored there. A broker id that is not
        a live broker is BROKER_NOT_AVAILABLE."""
        answers = await self._ask_brokers(
            broker_ids,
            "POST",
            "/v1/describe-log-dirs",
            log_dirs_api.DescribeLogDirsResponse,
            message=log_dirs_api.DescribeLogDirsRequest(),
            timeout_ms=timeout_ms,
        )
        return {
            broker_id: {
                r.log_dir: LogDirDescription(
                    error=None if r.error is None else error_from_message(r.error),
                    replica_infos={
                        TopicPartition(p.topic, p.partition): ReplicaInfo(
                            p.size, p.offset_lag, p.is_future
                        )
                        for p in r.partitions
                    },
                    total_bytes=r.total_bytes,
                    usable_bytes=r.usable_bytes,
                )
                for r in answer.results
            }
            for broker_id, answer in answers.items()
        }

    async def _ask_brokers(
        self,
        broker_ids: Iterable[int] | None,
        method: str,
        path: str,
        answer_type: type[M],
        *,
        message: Message | None,
        timeout_ms: int | None,
    ) -> dict[int, M]:
        """``path``'s answer from each broker (every live one when ``broker_ids`` is
        None), in turn; BROKER_NOT_AVAILABLE for an id that is not a live broker."""
        transport, _ = self._started()
        deadline = self._deadline(timeout_ms)
        view = await self._broker_metadata(timeout_ms=timeout_ms)
        nodes: Mapping[int, Node] = view.brokers
        out: dict[int, M] = {}
        for broker_id in sorted(nodes) if broker_ids is None else list(broker_ids):
            node = nodes.get(broker_id)
            if node is None:
                raise BrokerNotAvailableError(f"broker {broker_id} is not a live broker")
            out[broker_id] = await transport.request_message(
                f"{node.host}:{node.port}",
                method,
                path,
                answer_type,
                message=message,
                timeout_ms=max(1, deadline - monotonic_ms()),
            )
        return out


#: How much sooner than the HTTP timeout the broker is asked to answer DeleteRecords.
DELETE_RECORDS_MARGIN_MS = 1_000


def _json_value(message: Message) -> object:
    """A message as the plain value the transport's JSON encoder (orjson) takes: integer
    dict keys (CreateTopics' ``{partition: replicas}``) become strings, as in JSON."""
    return msgspec.to_builtins(message, str_keys=True)


def _config_entry(e: msg.ConfigEntryData) -> ConfigEntry:
    return ConfigEntry(
        name=e.name,
        value=e.value,
        source=e.source,
        is_default=e.is_default,
        read_only=e.read_only,
        is_sensitive=e.is_sensitive,
        type=e.type,
    )


def _item_error(error: msg.ErrorData | None) -> KafkaError | None:
    return None if error is None else error_from_wire(msgspec.to_builtins(error))


class Admin(ClosingOnExit):
    """The blocking admin client: an :class:`AsyncAdmin` on its own loop thread.
    Thread-safe. Same keyword arguments and methods as ``AsyncAdmin``."""

    def __init__(self, **config: Any) -> None:
        self._async = AsyncAdmin(**config)
        self.config = self._async.config
        self._thread = LoopThread(f"raftka-admin-{self.config.client_id}")

    def _run(self, coro: Coroutine[Any, Any, T], timeout_ms: int | None) -> T:
        base = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return self._thread.run(coro, (base + self.config.request_timeout_ms) / 1000 + 5)

    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.create_topics(
                list(new_topics), validate_only=validate_only, timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def delete_topics(self, topics: Iterable[str], *, timeout_ms: int | None = None) -> None:
        self._run(self._async.delete_topics(list(topics), timeout_ms=timeout_ms), timeout_ms)

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.create_partitions(
                new_partitions, validate_only=validate_only, timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def list_topics(
        self, *, list_internal: bool = False, timeout_ms: int | None = None
    ) -> set[str]:
        return self._run(
            self._async.list_topics(list_internal=list_internal, timeout_ms=timeout_ms), timeout_ms
        )

    def describe_topics(
        self, topics: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[TopicDescription]:
        return self._run(
            self._async.describe_topics(
                None if topics is None else list(topics), timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        return self._run(self._async.describe_cluster(timeout_ms=timeout_ms), timeout_ms)

    def describe_configs(
        self,
        topics: Iterable[str],
        *,
        keys: Iterable[str] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, ConfigEntry]]:
        return self._run(
            self._async.describe_configs(
                list(topics), keys=None if keys is None else list(keys), timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def incremental_alter_configs(
        self,
        configs: Mapping[str, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.incremental_alter_configs(
                {k: list(v) for k, v in configs.items()},
                validate_only=validate_only,
                timeout_ms=timeout_ms,
            ),
            timeout_ms,
        )

    def incremental_alter_broker_configs(
        self,
        configs: Mapping[int | None, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.incremental_alter_broker_configs(
                {k: list(v) for k, v in configs.items()},
                validate_only=validate_only,
                timeout_ms=timeout_ms,
            ),
            timeout_ms,
        )

    def alter_configs(
        self,
        configs: Mapping[str, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.alter_configs(configs, validate_only=validate_only, timeout_ms=timeout_ms),
            timeout_ms,
        )

    def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(
            self._async.alter_user_scram_credentials(list(alterations), timeout_ms=timeout_ms),
            timeout_ms,
        )

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        return self._run(
            self._async.describe_user_scram_credentials(
                None if users is None else list(users), timeout_ms=timeout_ms
            ),
            timeout_ms,
        )

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None) -> None:
        self._run(self._async.create_acls(list(bindings), timeout_ms=timeout_ms), timeout_ms)

    def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        return self._run(self._async.describe_acls(acl_filter, timeout_ms=timeout_ms), timeout_ms)

    def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding]]:
        return self._run(self._async.delete_acls(list(filters), timeout_ms=timeout_ms), timeout_ms)

    def list_offsets(
        self, specs: Mapping[TopicPartition, OffsetSpec], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, ListedOffset]:
        return self._run(self._async.list_offsets(dict(specs), timeout_ms=timeout_ms), timeout_ms)

    def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._run(
            self._async.delete_records(dict(before), timeout_ms=timeout_ms), timeout_ms
        )

    def elect_leaders(
        self,
        election_type: Literal["preferred", "unclean"],
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(
            self._async.elect_leaders(election_type, partitions, timeout_ms=timeout_ms),
            timeout_ms,
        )

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        return self._run(
            self._async.alter_partition_reassignments(reassignments, timeout_ms=timeout_ms),
            timeout_ms,
        )

    def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        return self._run(
            self._async.list_partition_reassignments(partitions, timeout_ms=timeout_ms),
            timeout_ms,
        )

    def describe_broker_configs(
        self, broker_ids: Iterable[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, dict[str, ConfigEntry]]:
        return self._run(
            self._async.describe_broker_configs(broker_ids, timeout_ms=timeout_ms), timeout_ms
        )

    def describe_log_dirs(
        self, broker_ids: Iterable[int] | None = None, *, timeout_ms: int | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        return self._run(
            self._async.describe_log_dirs(broker_ids, timeout_ms=timeout_ms), timeout_ms
        )

    def close(self) -> None:
        try:
            if self._thread.started:
                self._run(self._async.close(), None)
            else:
                self._async._closed = True
        finally:
            self._thread.close()
