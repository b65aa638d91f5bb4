"""Kafka's ACL checks on the broker's HTTP API, for the routes raftka's client uses.

With the authorizer on (``authorizer.class.name``), a broker's HTTPS API used to serve
``super.users`` only, because its routes checked no ACLs. The routes of
:data:`ACL_PATHS` now ask the same :class:`~raftka.broker.kafka.authorization.Access`
the Kafka listener asks, with Kafka's operations, so a user governed by ACLs can
produce, consume, join a group and run transactions with raftka's client; the node
middleware lets any authenticated principal reach them (:mod:`raftka.server_common.node_http`).
Every other route (admin, listings, the nodes' own) stays for ``super.users``.

What each route checks (as :mod:`raftka.broker.kafka.apis` does for the same API):

- Metadata: DESCRIBE on each topic; topics it may not describe are left out of "every
  topic" and answered TOPIC_AUTHORIZATION_FAILED when named.
- Produce: WRITE on each topic (TOPIC_AUTHORIZATION_FAILED per partition); a
  transactional produce needs WRITE on its transactional id, an idempotent one
  IDEMPOTENT_WRITE on the cluster or WRITE on some topic (every partition refused).
- Fetch (a consumer's): READ on each topic; ListOffsets: DESCRIBE; per partition.
- InitProducerId: WRITE on the transactional id, or the idempotent producer's right.
- FindCoordinator: DESCRIBE on the group or transactional id.
- JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit: READ on the group
  (committing also READ on each topic); OffsetFetch: DESCRIBE on the group and on each
  topic (KIP-163).
- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: WRITE on the
  transactional id, plus WRITE on the topics added, READ on the group and READ on the
  topics whose offsets are committed.

One difference from Kafka, on purpose: OffsetCommit and TxnOffsetCommit naming a topic
the principal may not READ are refused whole (TOPIC_AUTHORIZATION_FAILED, HTTP 403)
instead of partition by partition; raftka's client commits the partitions it consumed,
which it could read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec
from aiohttp import web

from raftka.broker.kafka.authorization import ALLOW_ALL, Access, AuthorizerCache
from raftka.common.acl import AclOperation
from raftka.common.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from raftka.common.messages import Message
from raftka.common.messages import broker as broker_api
from raftka.common.messages import coordinator as api
from raftka.common.messages import transactions as txn_api
from raftka.metadata.authorizer import AuthorizerConfig
from raftka.metadata.image import MetadataImage
from raftka.server_common.node_http import PRINCIPAL_KEY

__all__ = [
    "ACL_PATHS",
    "AnswerFilter",
    "HttpAcls",
    "check_coordinator_request",
    "install",
    "refuse_producer",
    "request_access",
    "topic_refused",
]

_O = AclOperation

#: The routes whose handlers check ACLs (any authenticated principal reaches them).
ACL_PATHS: Final = frozenset(
    {
        "/v1/metadata",
        "/v1/produce",
        "/v1/init-producer-id",
        "/v1/fetch",
        "/v1/list-offsets",
        "/v1/find-coordinator",
        "/v1/join-group",
        "/v1/sync-group",
        "/v1/heartbeat",
        "/v1/leave-group",
        "/v1/offset-commit",
        "/v1/offset-fetch",
        "/v1/add-partitions-to-txn",
        "/v1/add-offsets-to-txn",
        "/v1/end-txn",
        "/v1/txn-offset-commit",
    }
)


class HttpAcls:
    """The authorizer of the broker's current image, for its HTTP routes."""

    def __init__(self, config: AuthorizerConfig | None, image: Callable[[], MetadataImage]):
        self._cache = AuthorizerCache(config)
        self._image = image

    def access(self, request: web.Request) -> Access:
        principal = request.get(PRINCIPAL_KEY)
        if principal is None:
            return ALLOW_ALL  # plain HTTP authenticates nobody and so refuses nobody
        return self._cache.access(self._image, principal, request.remote or "")


_KEY: Final = web.AppKey("raftka.http_acls", HttpAcls)


def install(app: web.Application, acls: HttpAcls) -> None:
    app[_KEY] = acls


def request_access(request: web.Request) -> Access:
    """What the request's principal may do (all of it where no :class:`HttpAcls` is
    installed: a controller's coordinator-free app, a test's)."""
    acls = request.app.get(_KEY)
    return ALLOW_ALL if acls is None else acls.access(request)


def refuse_producer(access: Access, transactional_id: str | None) -> KafkaError | None:
    """InitProducerId's and a produce's whole-request refusal, if any."""
    if transactional_id is not None:
        if access.may_transactional_id(_O.WRITE, transactional_id):
            return None
        return TransactionalIdAuthorizationFailedError(
            f"WRITE on transactional id {transactional_id!r} is needed"
        )
    if access.may_write_idempotently():
        return None
    return ClusterAuthorizationFailedError(
        "an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on a topic"
    )


def topic_refused(topic: str, operation: AclOperation) -> TopicAuthorizationFailedError:
    return TopicAuthorizationFailedError(f"{operation.name} on topic {topic!r} is needed")


#: An answer as the principal may see it (OffsetFetch's topic filter).
AnswerFilter = Callable[[Message], Message]


def check_coordinator_request(access: Access, message: Message) -> AnswerFilter | None:
    """Raise the Kafka error that refuses a group or transaction coordinator request
    whole; else the filter its answer needs, if any."""
    if access.authorizer is None:
        return None
    if isinstance(message, api.FindCoordinatorRequest):
        if message.key_type == 1:
            _need_transactional_id(access, _O.DESCRIBE, message.key)
        else:
            _need_group(access, _O.DESCRIBE, message.key)
        return None
    if isinstance(message, txn_api.AddPartitionsToTxnRequest):
        # verify_only is the leaders' call, kept for nodes by the route.
        _need_transactional_id(access, _O.WRITE, message.transactional_id)
        _need_topics(access, _O.WRITE, (t.name for t in message.topics))
        return None
    if isinstance(message, txn_api.AddOffsetsToTxnRequest):
        _need_transactional_id(access, _O.WRITE, message.transactional_id)
        _need_group(access, _O.READ, message.group_id)
        return None
    if isinstance(message, txn_api.EndTxnRequest):
        _need_transactional_id(access, _O.WRITE, message.transactional_id)
        return None
    if isinstance(message, txn_api.TxnOffsetCommitRequest):
        _need_transactional_id(access, _O.WRITE, message.transactional_id)
        _need_group(access, _O.READ, message.group_id)
        _need_topics(access, _O.READ, (t.name for t in message.topics))
        return None
    if isinstance(message, api.OffsetCommitRequest):
        _need_group(access, _O.READ, message.group_id)
        _need_topics(access, _O.READ, (t.name for t in message.topics))
        return None
    if isinstance(message, api.OffsetFetchRequest):
        _need_group(access, _O.DESCRIBE, message.group_id)
        return _offset_fetch_filter(access, named=message.topics is not None)
    group_id = getattr(message, "group_id", None)
    if isinstance(group_id, str):
        # JoinGroup, SyncGroup, Heartbeat, LeaveGroup.
        _need_group(access, _O.READ, group_id)
        return None
    # Listings, DescribeGroups, DeleteGroups and the like: the node middleware lets
    # only super.users reach them, so there is nothing left to check.
    return None


def _offset_fetch_filter(access: Access, *, named: bool) -> AnswerFilter:
    """Topics it may not DESCRIBE: left out of "every topic"; named, refused."""

    def answer(message: Message) -> Message:
        assert isinstance(message, api.OffsetFetchResponse)
        topics: list[api.OffsetFetchTopicResponse] = []
        for t in message.topics:
            if access.may_topic(_O.DESCRIBE, t.name):
                topics.append(t)
            elif named:
                error = broker_api.error_object(topic_refused(t.name, _O.DESCRIBE))
                partitions = tuple(
                    api.OffsetFetchPartitionResponse(partition=p.partition, error=error)
                    for p in t.partitions
                )
                topics.append(api.OffsetFetchTopicResponse(name=t.name, partitions=partitions))
        return _replace(message, topics=tuple(topics))

    return answer


def _replace(message: Message, **changes: Any) -> Message:
    return msgspec.structs.replace(message, **changes)


def _need_group(access: Access, operation: AclOperation, group_id: str) -> None:
    if not access.may_group(operation, group_id):
        raise GroupAuthorizationFailedError(f"{operation.name} on group {group_id!r} is needed")


def _need_transactional_id(access: Access, operation: AclOperation, tid: str) -> None:
    if not access.may_transactional_id(operation, tid):
        raise TransactionalIdAuthorizationFailedError(
            f"{operation.name} on transactional id {tid!r} is needed"
        )


def _need_topics(access: Access, operation: AclOperation, names: Iterable[str]) -> None:
    wanted = list(names)
    allowed = access.topics(operation, wanted)
    for name in wanted:
        if name not in allowed:
            raise topic_refused(name, operation)
