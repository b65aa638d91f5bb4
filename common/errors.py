"""Kafka's error names and codes, as exceptions.

Every error raftka reports, on the wire or as an exception, carries Kafka's error name
(``CORRUPT_MESSAGE``), its numeric code (``2``) and whether a client may retry it, so a
person who knows Kafka recognises it and a client can act on it without parsing text.
Codes are those of the Kafka protocol guide; raftka adds none of its own.

Exceptions are named after the error in CamelCase with ``Error`` last
(``CORRUPT_MESSAGE`` -> :class:`CorruptMessageError`). ``error_for_code`` and
``error_for_name`` turn a wire error back into the matching exception.
"""

from __future__ import annotations

from typing import ClassVar, Final


class KafkaError(Exception):
    """Base of every raftka error. ``name``/``code`` are Kafka's; ``retriable`` says
    whether repeating the same request may succeed."""

    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        self.message = message or self.name
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message != self.name else self.name

    def to_wire(self) -> dict[str, object]:
        """The error as it travels in a JSON response: Kafka's name, code, a message."""
        return {"error": self.name, "error_code": self.code, "message": self.message}


class UnknownServerError(KafkaError):
    name, code = "UNKNOWN_SERVER_ERROR", -1


class OffsetOutOfRangeError(KafkaError):
    name, code = "OFFSET_OUT_OF_RANGE", 1


class CorruptMessageError(KafkaError):
    # Retriable in Kafka: a corruption on the wire may not repeat.
    name, code, retriable = "CORRUPT_MESSAGE", 2, True


class UnknownTopicOrPartitionError(KafkaError):
    name, code, retriable = "UNKNOWN_TOPIC_OR_PARTITION", 3, True


class InvalidFetchSizeError(KafkaError):
    name, code = "INVALID_FETCH_SIZE", 4


class LeaderNotAvailableError(KafkaError):
    name, code, retriable = "LEADER_NOT_AVAILABLE", 5, True


class NotLeaderOrFollowerError(KafkaError):
    name, code, retriable = "NOT_LEADER_OR_FOLLOWER", 6, True


class RequestTimedOutError(KafkaError):
    name, code, retriable = "REQUEST_TIMED_OUT", 7, True


class BrokerNotAvailableError(KafkaError):
    name, code = "BROKER_NOT_AVAILABLE", 8


class ReplicaNotAvailableError(KafkaError):
    name, code, retriable = "REPLICA_NOT_AVAILABLE", 9, True


class MessageTooLargeError(KafkaError):
    name, code = "MESSAGE_TOO_LARGE", 10


class OffsetMetadataTooLargeError(KafkaError):
    name, code = "OFFSET_METADATA_TOO_LARGE", 12


class NetworkError(KafkaError):
    name, code, retriable = "NETWORK_EXCEPTION", 13, True


class CoordinatorLoadInProgressError(KafkaError):
    name, code, retriable = "COORDINATOR_LOAD_IN_PROGRESS", 14, True


class CoordinatorNotAvailableError(KafkaError):
    name, code, retriable = "COORDINATOR_NOT_AVAILABLE", 15, True


class NotCoordinatorError(KafkaError):
    name, code, retriable = "NOT_COORDINATOR", 16, True


class InvalidTopicError(KafkaError):
    name, code = "INVALID_TOPIC_EXCEPTION", 17


class RecordListTooLargeError(KafkaError):
    name, code = "RECORD_LIST_TOO_LARGE", 18


class NotEnoughReplicasError(KafkaError):
    name, code, retriable = "NOT_ENOUGH_REPLICAS", 19, True


class NotEnoughReplicasAfterAppendError(KafkaError):
    name, code, retriable = "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True


class InvalidRequiredAcksError(KafkaError):
    name, code = "INVALID_REQUIRED_ACKS", 21


class IllegalGenerationError(KafkaError):
    name, code = "ILLEGAL_GENERATION", 22


class InconsistentGroupProtocolError(KafkaError):
    name, code = "INCONSISTENT_GROUP_PROTOCOL", 23


class InvalidGroupIdError(KafkaError):
    name, code = "INVALID_GROUP_ID", 24


class UnknownMemberIdError(KafkaError):
    name, code = "UNKNOWN_MEMBER_ID", 25


class InvalidSessionTimeoutError(KafkaError):
    name, code = "INVALID_SESSION_TIMEOUT", 26


class RebalanceInProgressError(KafkaError):
    name, code = "REBALANCE_IN_PROGRESS", 27


class InvalidTimestampError(KafkaError):
    name, code = "INVALID_TIMESTAMP", 32


class UnsupportedVersionError(KafkaError):
    name, code = "UNSUPPORTED_VERSION", 35


class TopicAlreadyExistsError(KafkaError):
    name, code = "TOPIC_ALREADY_EXISTS", 36


class InvalidPartitionsError(KafkaError):
    name, code = "INVALID_PARTITIONS", 37


class InvalidReplicationFactorError(KafkaError):
    name, code = "INVALID_REPLICATION_FACTOR", 38


class InvalidReplicaAssignmentError(KafkaError):
    name, code = "INVALID_REPLICA_ASSIGNMENT", 39


class InvalidConfigError(KafkaError):
    name, code = "INVALID_CONFIG", 40


class NotControllerError(KafkaError):
    name, code, retriable = "NOT_CONTROLLER", 41, True


class InvalidRequestError(KafkaError):
    name, code = "INVALID_REQUEST", 42


class OutOfOrderSequenceNumberError(KafkaError):
    name, code = "OUT_OF_ORDER_SEQUENCE_NUMBER", 45


class DuplicateSequenceNumberError(KafkaError):
    name, code = "DUPLICATE_SEQUENCE_NUMBER", 46


class InvalidProducerEpochError(KafkaError):
    name, code = "INVALID_PRODUCER_EPOCH", 47


class InvalidTxnStateError(KafkaError):
    name, code = "INVALID_TXN_STATE", 48


class InvalidProducerIdMappingError(KafkaError):
    name, code = "INVALID_PRODUCER_ID_MAPPING", 49


class InvalidTransactionTimeoutError(KafkaError):
    name, code = "INVALID_TRANSACTION_TIMEOUT", 50


class ConcurrentTransactionsError(KafkaError):
    # Retriable in Kafka: the transaction in the way completes on its own.
    name, code, retriable = "CONCURRENT_TRANSACTIONS", 51, True


class TransactionCoordinatorFencedError(KafkaError):
    name, code = "TRANSACTION_COORDINATOR_FENCED", 52


class OperationNotAttemptedError(KafkaError):
    name, code = "OPERATION_NOT_ATTEMPTED", 55


class KafkaStorageError(KafkaError):
    # Kafka marks it retriable: the partition may move to a replica with a healthy disk.
    name, code, retriable = "KAFKA_STORAGE_ERROR", 56, True


class UnknownProducerIdError(KafkaError):
    name, code = "UNKNOWN_PRODUCER_ID", 59


class NonEmptyGroupError(KafkaError):
    name, code = "NON_EMPTY_GROUP", 68


class GroupIdNotFoundError(KafkaError):
    name, code = "GROUP_ID_NOT_FOUND", 69


class GroupSubscribedToTopicError(KafkaError):
    name, code = "GROUP_SUBSCRIBED_TO_TOPIC", 86


class FencedLeaderEpochError(KafkaError):
    name, code, retriable = "FENCED_LEADER_EPOCH", 74, True


class UnknownLeaderEpochError(KafkaError):
    name, code, retriable = "UNKNOWN_LEADER_EPOCH", 75, True


class UnsupportedCompressionTypeError(KafkaError):
    name, code = "UNSUPPORTED_COMPRESSION_TYPE", 76


class StaleBrokerEpochError(KafkaError):
    name, code = "STALE_BROKER_EPOCH", 77


class OffsetNotAvailableError(KafkaError):
    name, code, retriable = "OFFSET_NOT_AVAILABLE", 78, True


class MemberIdRequiredError(KafkaError):
    name, code = "MEMBER_ID_REQUIRED", 79


class PreferredLeaderNotAvailableError(KafkaError):
    name, code, retriable = "PREFERRED_LEADER_NOT_AVAILABLE", 80, True


class EligibleLeadersNotAvailableError(KafkaError):
    name, code, retriable = "ELIGIBLE_LEADERS_NOT_AVAILABLE", 83, True


class ElectionNotNeededError(KafkaError):
    name, code, retriable = "ELECTION_NOT_NEEDED", 84, True


class NoReassignmentInProgressError(KafkaError):
    name, code = "NO_REASSIGNMENT_IN_PROGRESS", 85


class GroupMaxSizeReachedError(KafkaError):
    name, code = "GROUP_MAX_SIZE_REACHED", 81


class FencedInstanceIdError(KafkaError):
    name, code = "FENCED_INSTANCE_ID", 82


class InvalidRecordError(KafkaError):
    name, code = "INVALID_RECORD", 87


class UnstableOffsetCommitError(KafkaError):
    """OffsetFetch with require_stable (KIP-447): the partition has transactional
    offsets whose transaction has not ended yet; retry once it has."""

    name, code, retriable = "UNSTABLE_OFFSET_COMMIT", 88, True


class ProducerFencedError(KafkaError):
    name, code = "PRODUCER_FENCED", 90


class InvalidUpdateVersionError(KafkaError):
    name, code = "INVALID_UPDATE_VERSION", 95


class InconsistentVoterSetError(KafkaError):
    name, code = "INCONSISTENT_VOTER_SET", 94


class SnapshotNotFoundError(KafkaError):
    name, code = "SNAPSHOT_NOT_FOUND", 98


class PositionOutOfRangeError(KafkaError):
    name, code = "POSITION_OUT_OF_RANGE", 99


class DuplicateBrokerRegistrationError(KafkaError):
    name, code = "DUPLICATE_BROKER_REGISTRATION", 101


class BrokerIdNotRegisteredError(KafkaError):
    name, code = "BROKER_ID_NOT_REGISTERED", 102


class InconsistentClusterIdError(KafkaError):
    name, code = "INCONSISTENT_CLUSTER_ID", 104


class TransactionalIdNotFoundError(KafkaError):
    name, code = "TRANSACTIONAL_ID_NOT_FOUND", 105


class IneligibleReplicaError(KafkaError):
    name, code = "INELIGIBLE_REPLICA", 107


class NewLeaderElectedError(KafkaError):
    name, code = "NEW_LEADER_ELECTED", 108


# Security (authentication and authorization): Kafka's codes, none retriable.


class AuthorizationError(KafkaError):
    """Base of the authorization errors (Kafka's AuthorizationException)."""


class TopicAuthorizationFailedError(AuthorizationError):
    name, code = "TOPIC_AUTHORIZATION_FAILED", 29


class GroupAuthorizationFailedError(AuthorizationError):
    name, code = "GROUP_AUTHORIZATION_FAILED", 30


class ClusterAuthorizationFailedError(AuthorizationError):
    name, code = "CLUSTER_AUTHORIZATION_FAILED", 31


class UnsupportedSaslMechanismError(KafkaError):
    name, code = "UNSUPPORTED_SASL_MECHANISM", 33


class IllegalSaslStateError(KafkaError):
    name, code = "ILLEGAL_SASL_STATE", 34


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    name, code = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 53


class SecurityDisabledError(KafkaError):
    name, code = "SECURITY_DISABLED", 54


class SaslAuthenticationFailedError(KafkaError):
    name, code = "SASL_AUTHENTICATION_FAILED", 58


class ResourceNotFoundError(KafkaError):
    name, code = "RESOURCE_NOT_FOUND", 91


class DuplicateResourceError(KafkaError):
    name, code = "DUPLICATE_RESOURCE", 92


class UnacceptableCredentialError(KafkaError):
    name, code = "UNACCEPTABLE_CREDENTIAL", 93


# Client-side errors: Kafka's Java client raises these without a wire code.


class KafkaTimeoutError(KafkaError):
    """A client operation did not complete within its timeout (Kafka's TimeoutException)."""

    name, code, retriable = "KAFKA_TIMEOUT", -1, True


class CommitFailedError(KafkaError):
    name, code = "COMMIT_FAILED", -1


class NoOffsetForPartitionError(KafkaError):
    name, code = "NO_OFFSET_FOR_PARTITION", -1


class IllegalStateError(KafkaError):
    name, code = "ILLEGAL_STATE", -1


class SerializationError(KafkaError):
    name, code = "SERIALIZATION_ERROR", -1


class TransactionAbortedError(KafkaError):
    """A record of a transaction that was aborted before it was sent (Kafka's
    TransactionAbortedException)."""

    name, code = "TRANSACTION_ABORTED", -1


def _registry() -> tuple[dict[int, type[KafkaError]], dict[str, type[KafkaError]]]:
    by_code: dict[int, type[KafkaError]] = {}
    by_name: dict[str, type[KafkaError]] = {}
    pending: list[type[KafkaError]] = [KafkaError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        by_name.setdefault(cls.name, cls)
        if cls.code >= 0:
            assert cls.code not in by_code or by_code[cls.code] is cls, cls
            by_code[cls.code] = cls
    by_name["UNKNOWN_SERVER_ERROR"] = UnknownServerError
    by_code[-1] = UnknownServerError
    return by_code, by_name


_REGISTRY: Final = _registry()
_BY_CODE: Final = _REGISTRY[0]
_BY_NAME: Final = _REGISTRY[1]


def error_for_code(code: int, message: str = "") -> KafkaError:
    """The exception for a Kafka error code (UNKNOWN_SERVER_ERROR for one we do not know)."""
    return _BY_CODE.get(code, UnknownServerError)(message)


def error_for_name(name: str, message: str = "") -> KafkaError:
    """The exception for a Kafka error name (UNKNOWN_SERVER_ERROR for one we do not know)."""
    return _BY_NAME.get(name, UnknownServerError)(message)
