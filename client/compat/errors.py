"""kafka-python's exception names (``kafka.errors``) over raftka's Kafka errors.

A kafka-python program's ``from kafka.errors import X`` becomes ``from raftka.errors
import X``. Every name here is, where raftka has the error, *the very class raftka
raises* (``TopicAlreadyExistsError``, ``KafkaTimeoutError``, ...), so an ``except``
written for kafka-python catches what raftka's clients raise. kafka-python's spellings
that differ from Kafka's are aliases of the same class (``NotLeaderForPartitionError``
is ``NotLeaderOrFollowerError``, ``MessageSizeTooLargeError`` is
``MessageTooLargeError``, ``KafkaConfigurationError`` is the client's
``ClientConfigError``, ...).

aiokafka's ``ConsumerStoppedError``, ``IllegalOperation`` and ``ProducerClosed`` are
``IllegalStateError``, raftka's error for a call on a stopped or wrongly set-up client.

Broker errors raftka never reports (delegation tokens, ...) are declared with Kafka's
name and code so that code naming them imports and runs; raftka raises none of them.
The authorization and SASL errors are raftka's own classes (``raftka.common.errors``).

Mapped with a difference, said here once:

- ``BrokerResponseError`` is :class:`KafkaError` (raftka has no separate base for
  errors that came from a broker), so catching it catches client-side errors too.
- ``NoBrokersAvailable`` is :class:`KafkaTimeoutError`: raftka's constructors do no I/O,
  so an unreachable cluster shows up as the first call's timeout, not in the
  constructor.
- ``IllegalArgumentError`` is :class:`ValueError`, which raftka raises for bad
  arguments (``ClientConfigError`` is one too).

kafka-python's internal errors (``NodeNotReadyError``, ``StaleMetadata``,
``CorrelationIdError``, ...) and the ``RetriableError`` / ``InvalidMetadataError``
bases are not provided: raftka never raises them, and a base class that no raftka
error derives from would make an ``except`` silently never match. Use an error's
``retriable`` attribute instead.
"""

from __future__ import annotations

from raftka.client.config import ClientConfigError
from raftka.common.errors import *  # noqa: F403
from raftka.common.errors import (
    AuthorizationError,
    CorruptMessageError,
    IllegalStateError,
    InvalidConfigError,
    InvalidFetchSizeError,
    InvalidReplicaAssignmentError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NetworkError,
    NotLeaderOrFollowerError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
    UnsupportedVersionError,
    error_for_code,
)

# kafka-python's spellings of Kafka's errors: the same classes.
BrokerResponseError = KafkaError
CorruptRecordError = CorruptMessageError
CorruptRecordException = CorruptMessageError
IncompatibleBrokerVersion = UnsupportedVersionError
InvalidConfigurationError = InvalidConfigError
InvalidFetchRequestError = InvalidFetchSizeError
InvalidReplicationAssignmentError = InvalidReplicaAssignmentError
MessageSizeTooLargeError = MessageTooLargeError
NetworkExceptionError = NetworkError
NotLeaderForPartitionError = NotLeaderOrFollowerError
UnknownError = UnknownServerError
UnsupportedCodecError = UnsupportedCompressionTypeError
# Client-side errors.
KafkaConfigurationError = ClientConfigError
KafkaConnectionError = NetworkError
NoBrokersAvailable = KafkaTimeoutError
IllegalArgumentError = ValueError


# aiokafka's names for misuse of a stopped or wrongly set-up client: raftka raises
# IllegalStateError for each.
ConsumerStoppedError = IllegalStateError
IllegalOperation = IllegalStateError
ProducerClosed = IllegalStateError


class TopicMetadataTimeoutError(KafkaTimeoutError, UnknownTopicOrPartitionError):
    """``send`` found no such topic before ``max_block_ms`` ran out. kafka-python
    raises KafkaTimeoutError there and raftka UnknownTopicOrPartitionError; the
    kafka-python adapter raises this, which is both, so either ``except`` catches it."""


# Kafka's errors that raftka never reports, with Kafka's names and codes.


class StaleControllerEpochError(KafkaError):
    name, code = "STALE_CONTROLLER_EPOCH", 11


class InvalidCommitOffsetSizeError(KafkaError):
    name, code = "INVALID_COMMIT_OFFSET_SIZE", 28


class UnsupportedForMessageFormatError(KafkaError):
    name, code = "UNSUPPORTED_FOR_MESSAGE_FORMAT", 43


class PolicyViolationError(KafkaError):
    name, code = "POLICY_VIOLATION", 44


class LogDirNotFoundError(KafkaError):
    name, code = "LOG_DIR_NOT_FOUND", 57


class ReassignmentInProgressError(KafkaError):
    name, code = "REASSIGNMENT_IN_PROGRESS", 60


class DelegationTokenAuthDisabledError(KafkaError):
    name, code = "DELEGATION_TOKEN_AUTH_DISABLED", 61


class DelegationTokenNotFoundError(KafkaError):
    name, code = "DELEGATION_TOKEN_NOT_FOUND", 62


class DelegationTokenOwnerMismatchError(KafkaError):
    name, code = "DELEGATION_TOKEN_OWNER_MISMATCH", 63


class DelegationTokenRequestNotAllowedError(KafkaError):
    name, code = "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", 64


class DelegationTokenAuthorizationFailedError(AuthorizationError):
    name, code = "DELEGATION_TOKEN_AUTHORIZATION_FAILED", 65


class DelegationTokenExpiredError(KafkaError):
    name, code = "DELEGATION_TOKEN_EXPIRED", 66


class InvalidPrincipalTypeError(KafkaError):
    name, code = "INVALID_PRINCIPAL_TYPE", 67


class FetchSessionIdNotFoundError(KafkaError):
    name, code, retriable = "FETCH_SESSION_ID_NOT_FOUND", 70, True


class InvalidFetchSessionEpochError(KafkaError):
    name, code, retriable = "INVALID_FETCH_SESSION_EPOCH", 71, True


class ListenerNotFoundError(KafkaError):
    name, code, retriable = "LISTENER_NOT_FOUND", 72, True


class TopicDeletionDisabledError(KafkaError):
    name, code = "TOPIC_DELETION_DISABLED", 73


class ThrottlingQuotaExceededError(KafkaError):
    name, code, retriable = "THROTTLING_QUOTA_EXCEEDED", 89, True


class FeatureUpdateFailedError(KafkaError):
    name, code = "FEATURE_UPDATE_FAILED", 96


class PrincipalDeserializationFailureError(KafkaError):
    name, code = "PRINCIPAL_DESERIALIZATION_FAILURE", 97


class UnknownTopicIdError(KafkaError):
    name, code, retriable = "UNKNOWN_TOPIC_ID", 100, True


class InconsistentTopicIdError(KafkaError):
    name, code, retriable = "INCONSISTENT_TOPIC_ID", 103, True


class FetchSessionTopicIdError(KafkaError):
    name, code, retriable = "FETCH_SESSION_TOPIC_ID_ERROR", 106, True


class OffsetMovedToTieredStorageError(KafkaError):
    name, code = "OFFSET_MOVED_TO_TIERED_STORAGE", 109


class FencedMemberEpochError(KafkaError):
    name, code = "FENCED_MEMBER_EPOCH", 110


class UnreleasedInstanceIdError(KafkaError):
    name, code = "UNRELEASED_INSTANCE_ID", 111


class UnsupportedAssignorError(KafkaError):
    name, code = "UNSUPPORTED_ASSIGNOR", 112


class StaleMemberEpochError(KafkaError):
    name, code = "STALE_MEMBER_EPOCH", 113


class MismatchedEndpointTypeError(KafkaError):
    name, code = "MISMATCHED_ENDPOINT_TYPE", 114


class UnsupportedEndpointTypeError(KafkaError):
    name, code = "UNSUPPORTED_ENDPOINT_TYPE", 115


class UnknownControllerIdError(KafkaError):
    name, code = "UNKNOWN_CONTROLLER_ID", 116


class UnknownSubscriptionIdError(KafkaError):
    name, code = "UNKNOWN_SUBSCRIPTION_ID", 117


class TelemetryTooLargeError(KafkaError):
    name, code = "TELEMETRY_TOO_LARGE", 118


class InvalidRegistrationError(KafkaError):
    name, code = "INVALID_REGISTRATION", 119


class TransactionAbortableError(KafkaError):
    name, code = "TRANSACTION_ABORTABLE", 120


class InvalidRecordStateError(KafkaError):
    name, code = "INVALID_RECORD_STATE", 121


class ShareSessionNotFoundError(KafkaError):
    name, code, retriable = "SHARE_SESSION_NOT_FOUND", 122, True


class InvalidShareSessionEpochError(KafkaError):
    name, code, retriable = "INVALID_SHARE_SESSION_EPOCH", 123, True


class FencedStateEpochError(KafkaError):
    name, code = "FENCED_STATE_EPOCH", 124


class InvalidVoterKeyError(KafkaError):
    name, code = "INVALID_VOTER_KEY", 125


class DuplicateVoterError(KafkaError):
    name, code = "DUPLICATE_VOTER", 126


class VoterNotFoundError(KafkaError):
    name, code = "VOTER_NOT_FOUND", 127


_DECLARED: dict[int, type[KafkaError]] = {
    cls.code: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, KafkaError) and cls.code > 0
}


def for_code(error_code: int) -> type[KafkaError]:
    """kafka-python's ``kafka.errors.for_code``: the class of a Kafka error code
    (``UnknownError`` for a code nobody declares)."""
    known = type(error_for_code(error_code))
    if known is UnknownServerError and error_code in _DECLARED:
        return _DECLARED[error_code]
    return known
