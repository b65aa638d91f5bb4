"""kafka-python's exception names in raftka.errors: each is the class raftka raises
(so an ``except`` written for kafka-python catches raftka's error), kafka-python's
spellings are aliases of the same classes, the errors raftka never reports keep
Kafka's names and codes, and ``for_code`` answers classes. Where kafka-python is
installed (a dev dependency), every error code it names is checked against it."""

from __future__ import annotations

import inspect

import pytest

import raftka.common.errors as common
import raftka.errors
from raftka.client.config import ClientConfigError


def test_names_shared_with_raftka_are_raftkas_classes() -> None:
    for name in (
        "KafkaError",
        "KafkaTimeoutError",
        "TopicAlreadyExistsError",
        "UnknownTopicOrPartitionError",
        "CommitFailedError",
        "IllegalStateError",
        "NoOffsetForPartitionError",
        "OffsetOutOfRangeError",
        "RebalanceInProgressError",
        "ConcurrentTransactionsError",
        "InvalidTxnStateError",
        "TransactionalIdNotFoundError",
    ):
        assert getattr(raftka.errors, name) is getattr(common, name), name


def test_kafka_python_spellings_are_aliases() -> None:
    e = raftka.errors
    assert e.NotLeaderForPartitionError is common.NotLeaderOrFollowerError
    assert e.MessageSizeTooLargeError is common.MessageTooLargeError
    assert e.NoBrokersAvailable is common.KafkaTimeoutError
    assert e.KafkaConnectionError is common.NetworkError
    assert e.KafkaConfigurationError is ClientConfigError
    assert e.BrokerResponseError is common.KafkaError
    assert e.UnknownError is common.UnknownServerError
    assert e.IllegalArgumentError is ValueError


def test_an_except_for_kafka_python_catches_raftkas_error() -> None:
    """A refused keyword raises ClientConfigError: caught as kafka-python's
    KafkaConfigurationError and as its base KafkaError."""
    from raftka import KafkaConsumer
    from raftka.errors import KafkaConfigurationError, KafkaError

    with pytest.raises(KafkaConfigurationError, match="ssl_cafile"):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", ssl_cafile="/ca.pem")
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", ssl_cafile="/ca.pem")


def test_errors_raftka_never_reports_keep_kafkas_names_and_codes() -> None:
    e = raftka.errors
    assert (e.TopicAuthorizationFailedError.code, e.TopicAuthorizationFailedError.name) == (
        29,
        "TOPIC_AUTHORIZATION_FAILED",
    )
    assert issubclass(e.TopicAuthorizationFailedError, e.AuthorizationError)
    assert issubclass(e.AuthorizationError, common.KafkaError)
    assert e.ConcurrentTransactionsError.retriable


def test_for_code() -> None:
    e = raftka.errors
    assert e.for_code(36) is common.TopicAlreadyExistsError
    assert e.for_code(6) is common.NotLeaderOrFollowerError
    assert e.for_code(29) is e.TopicAuthorizationFailedError
    assert e.for_code(12345) is common.UnknownServerError


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="RetriableError"):
        raftka.errors.RetriableError  # noqa: B018  (deliberately not provided)


def test_every_kafka_python_error_code_maps_to_the_same_code() -> None:
    """For each kafka-python error class with an error code: raftka.errors has the
    name, with the same code (kafka-python 3's names). The retriable flags are
    Kafka's (raftka's), which differ from kafka-python's for a few errors."""
    kafka_errors = pytest.importorskip("kafka.errors")
    checked = 0
    for name, cls in vars(kafka_errors).items():
        if not inspect.isclass(cls) or not issubclass(cls, kafka_errors.KafkaError):
            continue
        errno = getattr(cls, "errno", None)
        if errno is None or errno <= 0:
            continue
        ours = getattr(raftka.errors, name)
        assert ours.code == errno, name
        checked += 1
    assert checked > 100
