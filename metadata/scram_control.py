"""The controller's SCRAM commands: Kafka's ScramControlManager, pure.

Theory of operation
-------------------
AlterUserScramCredentials carries *upsertions* (user, mechanism, iterations, salt and
the salted password ``Hi(password, salt, iterations)``) and *deletions* (user,
mechanism). The password never reaches the controller: the client salts and hashes it,
and the controller derives StoredKey and ServerKey from the salted password
(:func:`raftka.server_common.sasl.credential_from_salted_password`) and writes a
``UserScramCredentialRecord``; a deletion writes a ``RemoveUserScramCredentialRecord``.

Every entry is answered per user, as Kafka does, so one bad entry does not fail the
others; the checks and their errors are Kafka's, in Kafka's order:

- a user named more than once in one request (in deletions, upsertions or both, any
  mechanism): DUPLICATE_RESOURCE for that user, and none of its entries apply;
- an empty user name: UNACCEPTABLE_CREDENTIAL;
- a mechanism other than SCRAM-SHA-256 / SCRAM-SHA-512: UNSUPPORTED_SASL_MECHANISM;
- deleting a credential that does not exist: RESOURCE_NOT_FOUND;
- an upsertion with iterations outside 4096..16384, a salt shorter than 12 bytes
  (raftka's addition: the server's SCRAM could never use it), or a salted password
  that is not the mechanism's hash length: UNACCEPTABLE_CREDENTIAL.

A request with more entries than a command may write records
(``RECORDS_PER_COMMAND_MAX``) is refused whole with INVALID_REQUEST.

DescribeUserScramCredentials reads the image: for each user (every user with a
credential when none is named) its mechanisms and iteration counts, never the keys; a
named user with no credential is RESOURCE_NOT_FOUND, a user named twice
DUPLICATE_RESOURCE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raftka.common.errors import (
    DuplicateResourceError,
    InvalidRequestError,
    KafkaError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
)
from raftka.common.scram import check_iterations, check_mechanism, check_salt
from raftka.metadata.controller_api import (
    RECORDS_PER_COMMAND_MAX,
    CommandBatch,
    ControllerResult,
)
from raftka.metadata.image import MetadataImage, ScramUser
from raftka.metadata.metadata_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from raftka.server_common.sasl import credential_from_salted_password

__all__ = [
    "AlterUserScramCredentialsResponse",
    "DescribeUserScramCredentialsResult",
    "ScramCredentialDeletion",
    "ScramCredentialUpsertion",
    "UserScramResult",
    "alter_user_scram_credentials",
    "describe_user_scram_credentials",
]


@dataclass(frozen=True, slots=True)
class ScramCredentialDeletion:
    name: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion:
    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class UserScramResult:
    """One user of an AlterUserScramCredentials request: None when its entries applied."""

    user: str
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsResponse:
    results: tuple[UserScramResult, ...]


@dataclass(frozen=True, slots=True)
class DescribeUserScramCredentialsResult:
    """One user's credentials (mechanism, iterations), or why there are none to show."""

    user: str
    error: KafkaError | None
    credentials: tuple[ScramUser, ...] = ()


def _deletion_record(
    image: MetadataImage, d: ScramCredentialDeletion
) -> RemoveUserScramCredentialRecord:
    if not d.name:
        raise UnacceptableCredentialError("Username must not be empty")
    check_mechanism(d.mechanism)
    if image.scram_credential(d.name, d.mechanism) is None:
        raise ResourceNotFoundError(
            f"Attempt to delete a user credential that does not exist: {d.name} {d.mechanism}"
        )
    return RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism)


def _upsertion_record(u: ScramCredentialUpsertion) -> UserScramCredentialRecord:
    if not u.name:
        raise UnacceptableCredentialError("Username must not be empty")
    check_mechanism(u.mechanism)
    check_iterations(u.iterations)
    check_salt(u.salt)
    c = credential_from_salted_password(u.mechanism, u.salt, u.salted_password, u.iterations)
    return UserScramCredentialRecord(
        name=u.name,
        mechanism=u.mechanism,
        salt=c.salt,
        stored_key=c.stored_key,
        server_key=c.server_key,
        iterations=c.iterations,
    )


def alter_user_scram_credentials(
    image: MetadataImage,
    deletions: Sequence[ScramCredentialDeletion],
    upsertions: Sequence[ScramCredentialUpsertion],
) -> ControllerResult[AlterUserScramCredentialsResponse]:
    """AlterUserScramCredentials: per-user results in the order users first appear
    (deletions, then upsertions), with the checks of the module doc."""
    entries: list[ScramCredentialDeletion | ScramCredentialUpsertion] = [
        *deletions,
        *upsertions,
    ]
    if len(entries) > RECORDS_PER_COMMAND_MAX:
        # One record per entry, and a command commits as one payload.
        raise InvalidRequestError(
            f"{len(entries)} credential changes in one request, more than {RECORDS_PER_COMMAND_MAX}"
        )
    seen: dict[str, int] = {}
    for entry in entries:
        seen[entry.name] = seen.get(entry.name, 0) + 1
    errors: dict[str, KafkaError | None] = {}
    records: list[UserScramCredentialRecord | RemoveUserScramCredentialRecord] = []
    for entry in entries:
        if entry.name in errors:
            continue
        if seen[entry.name] > 1:
            errors[entry.name] = DuplicateResourceError(
                f"A user credential cannot be altered twice in the same request: {entry.name!r}"
            )
            continue
        try:
            if isinstance(entry, ScramCredentialDeletion):
                records.append(_deletion_record(image, entry))
            else:
                records.append(_upsertion_record(entry))
        except KafkaError as e:
            errors[entry.name] = e
        else:
            errors[entry.name] = None
    batch = CommandBatch(image)
    for record in records:
        batch.add(record)
    return batch.result(
        AlterUserScramCredentialsResponse(
            tuple(UserScramResult(user, error) for user, error in errors.items())
        )
    )


def describe_user_scram_credentials(
    image: MetadataImage, users: Sequence[str] | None
) -> tuple[DescribeUserScramCredentialsResult, ...]:
    """DescribeUserScramCredentials: every user with a credential (``users`` None or
    empty, as Kafka), else the named ones in the asked order."""
    by_user: dict[str, list[ScramUser]] = {}
    for row in image.scram.users():
        by_user.setdefault(row.user, []).append(row)
    if not users:
        return tuple(
            DescribeUserScramCredentialsResult(user, None, tuple(rows))
            for user, rows in by_user.items()
        )
    out: list[DescribeUserScramCredentialsResult] = []
    counts = {user: users.count(user) for user in users}
    for user in dict.fromkeys(users):
        if counts[user] > 1:
            error: KafkaError | None = DuplicateResourceError(
                f"Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user!r}"
            )
        elif user not in by_user:
            error = ResourceNotFoundError(
                f"Attempt to describe a user credential that does not exist: {user!r}"
            )
        else:
            error = None
        out.append(DescribeUserScramCredentialsResult(user, error, tuple(by_user.get(user, ()))))
    return tuple(out)
