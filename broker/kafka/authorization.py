"""Who is asking on the Kafka listener, and what the ACLs let them do (Kafka's
``authorizer.class.name``; the decision itself is :mod:`raftka.metadata.authorizer`).

Theory of operation
-------------------
Every Kafka API handler asks one :class:`Access` (the request's principal and host and
the authorizer of the broker's current metadata image) before it calls a service. With
the authorizer off (the default) an ``Access`` holds no authorizer and every question
answers yes, so nothing changes. The questions are Kafka's ``KafkaApis`` checks:

- one resource (``may``): WRITE on a topic for Produce, READ on a group for JoinGroup;
- the cluster or the resource (``may_create_topic``): CREATE on the cluster covers every
  topic (CreateTopics, Metadata's auto-creation);
- some resource of a type (``may_write_idempotently``): KIP-679, an idempotent producer
  needs IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic;
- filters (``describable``): what a listing may show. A topic or group the principal
  may not DESCRIBE is never listed, so a denied request learns no names it did not send.

The authorizer is rebuilt only when the image's ACL set is a different object
(``MetadataImage.acl_bindings()`` is shared by every image until an ACL record replays),
so a request pays one identity check, not a rebuild.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from raftka.common.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from raftka.common.errors import KafkaError
from raftka.common.record.header import iter_batches
from raftka.metadata.authorizer import AclAuthorizer, AuthorizerConfig
from raftka.server_common.ssl_principal import ANONYMOUS

if TYPE_CHECKING:
    from raftka.metadata.image import MetadataImage

__all__ = [
    "ALLOW_ALL",
    "SUPPORTED_OPERATIONS",
    "Access",
    "AuthorizerCache",
    "has_idempotent_batch",
]

_T = TypeVar("_T")

_O = AclOperation
#: The operations each resource type supports (Kafka's ``supportedOperations``), the
#: ones KIP-430's authorized-operations answers report on.
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
        _O.ALTER,
        _O.DESCRIBE,
    ),
}


class AuthorizerCache:
    """The authorizer of the latest image seen; None when the authorizer is off. One
    per listener, used from the event loop only."""

    def __init__(self, config: AuthorizerConfig | None) -> None:
        self._config = config
        self._bindings: frozenset[AclBinding] | None = None
        self._authorizer: AclAuthorizer | None = None

    @property
    def enabled(self) -> bool:
        return self._config is not None

    def authorizer(self, image: MetadataImage) -> AclAuthorizer | None:
        if self._config is None:
            return None
        bindings = image.acl_bindings()
        if self._authorizer is None or bindings is not self._bindings:
            self._authorizer = AclAuthorizer(self._config, bindings)
            self._bindings = bindings
        return self._authorizer

    def access(self, image: Callable[[], MetadataImage], principal: str, host: str) -> Access:
        """What ``principal`` from ``host`` may do under the ACLs of ``image()``;
        :data:`ALLOW_ALL` when the authorizer is off (the image is not even read)."""
        if self._config is None:
            return ALLOW_ALL
        return Access(self.authorizer(image()), principal, host)


@dataclass(frozen=True, slots=True)
class Access:
    """What one request's principal, from its host, may do; ``authorizer`` None: all."""

    authorizer: AclAuthorizer | None
    principal: str
    host: str

    def may(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def may_cluster(self, operation: AclOperation) -> bool:
        return self.may(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def may_topic(self, operation: AclOperation, name: str) -> bool:
        return self.may(operation, ResourceType.TOPIC, name)

    def may_group(self, operation: AclOperation, group_id: str) -> bool:
        return self.may(operation, ResourceType.GROUP, group_id)

    def may_transactional_id(self, operation: AclOperation, transactional_id: str) -> bool:
        return self.may(operation, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def may_create_topic(self, name: str) -> bool:
        """CreateTopics and Metadata's auto-creation: CREATE on the cluster or the topic."""
        return self.may_cluster(AclOperation.CREATE) or self.may_topic(AclOperation.CREATE, name)

    def may_write_idempotently(self) -> bool:
        """An idempotent producer (InitProducerId without a transactional id, Produce of
        idempotent batches): IDEMPOTENT_WRITE on the cluster or WRITE on some topic."""
        if self.authorizer is None or self.may_cluster(AclOperation.IDEMPOTENT_WRITE):
            return True
        return self.authorizer.authorize_by_resource_type(
            self.principal, self.host, AclOperation.WRITE, ResourceType.TOPIC
        )

    def topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The distinct ``names`` whose topic allows ``operation``."""
        if self.authorizer is None:
            return set(names)  # off: no question per name on the data path
        return {n for n in set(names) if self.may_topic(operation, n)}

    def describable(
        self, resource_type: ResourceType, items: Iterable[_T], name: Callable[[_T], str]
    ) -> list[_T]:
        """The ``items`` whose resource (named ``name(item)``) the principal may
        DESCRIBE, in order: what a listing shows."""
        return [i for i in items if self.may(AclOperation.DESCRIBE, resource_type, name(i))]

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit set (bit ``1 << code``) of the operations the resource type
        supports that the principal may do on ``name``; with the authorizer off, all of
        them, as Kafka answers without an authorizer."""
        return sum(
            1 << op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.may(op, resource_type, name)
        )


#: Everything allowed: the authorizer off, or nobody authenticated (plain HTTP).
ALLOW_ALL: Final = Access(None, ANONYMOUS, "")


def has_idempotent_batch(data: bytes | bytearray | memoryview) -> bool:
    """True if any batch of ``data`` carries a producer id (an idempotent or
    transactional producer's; headers only, as Kafka's ``hasIdempotentRecords``). A
    batch that does not parse is the validator's to refuse."""
    try:
        return any(h.producer_id >= 0 for _, h in iter_batches(data, check_crc=False))
    except KafkaError:
        return False
