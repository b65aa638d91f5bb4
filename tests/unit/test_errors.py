"""Kafka's error names and codes map both ways and carry the retriable flag Kafka gives."""

from __future__ import annotations

import re

import pytest

from raftka.client import errors
from raftka.common.errors import AuthorizationError, KafkaError, error_for_code, error_for_name

# Bases that group errors for ``except`` and have no wire identity of their own.
_BASES = (KafkaError, AuthorizationError)


def _all_errors() -> list[type[KafkaError]]:
    return [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, KafkaError) and obj not in _BASES
    ]


def test_wire_codes_are_unique_and_round_trip() -> None:
    """Every error with a wire code is found again by its code and by its name, and no
    two classes share a code; names are Kafka's SCREAMING_SNAKE_CASE."""
    seen: dict[int, type[KafkaError]] = {}
    for cls in _all_errors():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", cls.name), cls
        assert cls.__name__.endswith("Error"), cls
        if cls.code >= 0:
            assert cls.code not in seen, (cls, seen.get(cls.code))
            seen[cls.code] = cls
            assert type(error_for_code(cls.code)) is cls
        assert type(error_for_name(cls.name)) is cls
    assert len(seen) >= 60


@pytest.mark.parametrize(
    ("code", "name", "retriable"),
    [
        (1, "OFFSET_OUT_OF_RANGE", False),
        (2, "CORRUPT_MESSAGE", True),
        (6, "NOT_LEADER_OR_FOLLOWER", True),
        (10, "MESSAGE_TOO_LARGE", False),
        (19, "NOT_ENOUGH_REPLICAS", True),
        (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
        (21, "INVALID_REQUIRED_ACKS", False),
        (41, "NOT_CONTROLLER", True),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
        (56, "KAFKA_STORAGE_ERROR", True),
        (74, "FENCED_LEADER_EPOCH", True),
        (95, "INVALID_UPDATE_VERSION", False),
    ],
)
def test_kafka_codes_and_retriable_flags(code: int, name: str, retriable: bool) -> None:
    """Spot checks against the Kafka protocol guide's error table."""
    err = error_for_code(code, "why")
    assert (err.name, err.code, err.retriable) == (name, code, retriable)
    assert err.to_wire() == {"error": name, "error_code": code, "message": "why"}
    assert str(err) == f"{name}: why"


def test_unknown_code_and_name_map_to_unknown_server_error() -> None:
    """A code or name from a newer peer is still an error, never a crash."""
    assert error_for_code(9999).name == "UNKNOWN_SERVER_ERROR"
    assert error_for_name("SOMETHING_NEW", "m").message == "m"
