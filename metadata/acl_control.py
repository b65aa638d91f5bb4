"""The controller's ACL commands: Kafka's AclControlManager, pure.

Theory of operation
-------------------
CreateAcls carries a list of bindings; each is answered on its own, in request order,
so one bad binding does not fail the others (Kafka's per-binding ``AclCreateResult``):

- a binding with an ANY/UNKNOWN resource type, operation or permission type, a pattern
  type other than LITERAL/PREFIXED, an empty resource or host name, a principal that is
  not ``Type:name``, or a CLUSTER resource not named ``kafka-cluster``: INVALID_REQUEST
  (the route refuses a name it does not know with the same error, naming the choices);
- a binding that exists already, or appears earlier in the same request: a success
  that writes nothing (as Kafka: creating an ACL is idempotent);
- otherwise one ``AccessControlEntryRecord`` under a fresh id from the command's seeded
  ``rng``.

DeleteAcls carries a list of filters. Each filter's answer lists every committed binding
it matches (Kafka's ``DeleteAclsFilterResult``), even one an earlier filter of the same
request also matched; each matched binding is removed once (one
``RemoveAccessControlEntryRecord`` per id). A filter with an UNKNOWN field fails alone
with INVALID_REQUEST.

A request that would write more than ``RECORDS_PER_COMMAND_MAX`` records is refused
whole with INVALID_REQUEST (a command commits as one payload; Kafka refuses the same
case with a BoundedListTooLongException).

DescribeAcls reads an image: the bindings a filter matches, in a stable order; a bad
filter fails the whole request with INVALID_REQUEST (DescribeAcls has one error).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from raftka.common.acl import AclBinding, AclBindingFilter, binding_sort_key
from raftka.common.errors import InvalidRequestError, KafkaError
from raftka.metadata.controller_api import RECORDS_PER_COMMAND_MAX, CommandBatch, ControllerResult
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
)
from raftka.metadata.topic_control import random_uuid4

__all__ = [
    "AclCreationResult",
    "AclDeletionResult",
    "create_acls",
    "delete_acls",
    "describe_acls",
]


@dataclass(frozen=True, slots=True)
class AclCreationResult:
    """One binding of a CreateAcls request: None when it exists now."""

    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AclDeletionResult:
    """One filter of a DeleteAcls request: the bindings it removed, or why it failed."""

    error: KafkaError | None
    matching: tuple[AclBinding, ...] = ()


def _too_many(count: int, what: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{count} ACLs to {what} in one request, more than {RECORDS_PER_COMMAND_MAX}"
    )


def create_acls(
    image: MetadataImage, creations: Sequence[AclBinding | KafkaError], rng: random.Random
) -> ControllerResult[tuple[AclCreationResult, ...]]:
    """CreateAcls. ``creations`` holds each requested binding, or the error its
    decoding raised (a malformed binding fails alone, in its place)."""
    if len(creations) > RECORDS_PER_COMMAND_MAX:
        raise _too_many(len(creations), "create")
    existing = image.acl_bindings()
    added: set[AclBinding] = set()
    batch = CommandBatch(image)
    results: list[AclCreationResult] = []
    for creation in creations:
        if isinstance(creation, KafkaError):
            results.append(AclCreationResult(creation))
            continue
        if creation not in existing and creation not in added:
            added.add(creation)
            batch.add(AccessControlEntryRecord.of(random_uuid4(rng), creation))
        results.append(AclCreationResult(None))
    return batch.result(tuple(results))


def delete_acls(
    image: MetadataImage, filters: Sequence[AclBindingFilter | KafkaError]
) -> ControllerResult[tuple[AclDeletionResult, ...]]:
    """DeleteAcls. ``filters`` holds each requested filter, or the error its decoding
    raised (that filter fails alone)."""
    ids = sorted(image.acls.by_id, key=lambda i: binding_sort_key(image.acls.by_id[i]))
    removed: dict[str, None] = {}
    results: list[AclDeletionResult] = []
    for acl_filter in filters:
        if isinstance(acl_filter, KafkaError):
            results.append(AclDeletionResult(acl_filter))
            continue
        matched = [i for i in ids if acl_filter.matches(image.acls.by_id[i])]
        removed.update(dict.fromkeys(matched))
        results.append(AclDeletionResult(None, tuple(image.acls.by_id[i] for i in matched)))
    if len(removed) > RECORDS_PER_COMMAND_MAX:
        raise _too_many(len(removed), "delete")
    batch = CommandBatch(image)
    for acl_id in removed:
        batch.add(RemoveAccessControlEntryRecord(id=acl_id))
    return batch.result(tuple(results))


def describe_acls(image: MetadataImage, acl_filter: AclBindingFilter) -> tuple[AclBinding, ...]:
    """DescribeAcls: the bindings ``acl_filter`` matches, in a stable order."""
    found = (b for b in image.acl_bindings() if acl_filter.matches(b))
    return tuple(sorted(found, key=binding_sort_key))
