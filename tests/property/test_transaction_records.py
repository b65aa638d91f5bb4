"""__transaction_state records: any consistent metadata round-trips through its record,
the key has Kafka's layout, and bytes a coordinator never writes are refused with
CORRUPT_MESSAGE (never a bare decoding exception).

Examples are capped so the module runs in a few seconds; hypothesis prints a failing
example so it replays.
"""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.broker.coordinator.transaction_records import (
    TransactionRecordError,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
    transaction_record,
    transaction_tombstone,
)
from raftka.broker.coordinator.transaction_state import TransactionMetadata, TransactionState
from raftka.common.errors import CorruptMessageError
from raftka.common.structs import TopicPartition

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
S = TransactionState
STORED_STATES = [s for s in S if s not in (S.DEAD, S.PREPARE_EPOCH_FENCE)]
OPEN_STATES = (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)

ids = st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 0x7FFF)
epochs = st.integers(-1, 32767)
partitions = st.frozensets(
    st.builds(
        TopicPartition,
        st.text(min_size=1, max_size=20),
        st.integers(0, 2**31 - 1),
    ),
    max_size=6,
)


@st.composite
def metadata(draw: st.DrawFn) -> TransactionMetadata:
    state = draw(st.sampled_from(STORED_STATES))
    open_ = state in OPEN_STATES
    return TransactionMetadata(
        transactional_id=draw(ids),
        producer_id=draw(st.integers(-1, 2**63 - 1)),
        last_producer_id=draw(st.integers(-1, 2**63 - 1)),
        producer_epoch=draw(epochs),
        last_producer_epoch=draw(epochs),
        transaction_timeout_ms=draw(st.integers(1, 2**31 - 1)),
        state=state,
        partitions=draw(partitions) if open_ else frozenset(),
        transaction_start_time_ms=draw(st.integers(0, 2**62)) if open_ else -1,
        transaction_last_update_time_ms=draw(st.integers(0, 2**62)),
    )


@FAST
@given(metadata())
def test_metadata_round_trips_through_its_record(value: TransactionMetadata) -> None:
    record = transaction_record(value)
    assert decode_transaction_key(record.key) == value.transactional_id
    assert record.value is not None
    assert decode_transaction_value(value.transactional_id, record.value) == value
    # One value, one byte string: partitions are written in order.
    assert encode_transaction_value(value) == record.value


@FAST
@given(ids)
def test_the_key_is_kafkas_layout(tid: str) -> None:
    """int16 version 0, int16 length, UTF-8 id (TransactionLogKey v0)."""
    raw = tid.encode()
    assert encode_transaction_key(tid) == struct.pack(">hh", 0, len(raw)) + raw


@FAST
@given(st.binary(max_size=64))
def test_arbitrary_key_bytes_decode_or_are_corrupt(data: bytes) -> None:
    try:
        tid = decode_transaction_key(data)
    except CorruptMessageError:
        return
    assert encode_transaction_key(tid) == data


@FAST
@given(st.binary(max_size=200))
def test_arbitrary_value_bytes_decode_or_are_corrupt(data: bytes) -> None:
    try:
        decode_transaction_value("t", data)
    except TransactionRecordError as exc:
        assert exc.name == "CORRUPT_MESSAGE"


def test_a_dead_id_is_a_tombstone() -> None:
    value = TransactionMetadata.new("t", producer_id=1, timeout_ms=1000, now_ms=0)
    dead = value.transition(S.DEAD, now_ms=1)
    assert transaction_record(dead) == transaction_tombstone("t")
    assert transaction_record(dead).value is None


GOOD = orjson.loads(
    encode_transaction_value(TransactionMetadata.new("t", producer_id=1, timeout_ms=1000, now_ms=0))
)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"version": 1}, "version 1 is not supported"),
        ({"producer_epoch": 32768}, "producer_epoch"),
        ({"producer_epoch": True}, "producer_epoch"),
        ({"state": "Closed"}, "state"),
        ({"state": "Dead"}, "never stored"),
        ({"state": "PrepareEpochFence"}, "never stored"),
        ({"partitions": [{"topic": "t", "partitions": [0]}]}, "partitions in state Empty"),
        ({"state": "Ongoing"}, "without a transaction start time"),
        ({"transaction_timeout_ms": 0}, "transaction_timeout_ms"),
        ({"partitions": [{"topic": "t", "partitions": []}]}, "length >= 1"),
        ({"client_transaction_version": 3}, "client_transaction_version"),
    ],
)
def test_values_a_coordinator_never_writes_are_corrupt(
    changes: dict[str, object], why: str
) -> None:
    data = orjson.dumps({**GOOD, **changes})
    with pytest.raises(TransactionRecordError, match=why):
        decode_transaction_value("t", data)


def test_a_value_written_before_the_client_transaction_version_reads_as_2() -> None:
    """Values written before the field existed came from a coordinator that ran
    transaction version 2 for every client; a version-1 value keeps its 1."""
    old = {k: v for k, v in GOOD.items() if k != "client_transaction_version"}
    assert decode_transaction_value("t", orjson.dumps(old)).client_transaction_version == 2
    tv1 = orjson.dumps({**GOOD, "client_transaction_version": 1})
    assert decode_transaction_value("t", tv1).client_transaction_version == 1


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    data = orjson.dumps({**GOOD, "a_later_field": [1, 2]})
    assert decode_transaction_value("t", data).producer_id == 1


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00\x01\x00\x01t", "unknown transaction key version 1"),
        (b"\x00\x00\x00\x02t", "does not match"),
        (b"\x00\x00\x00\x01tt", "does not match"),
        (b"\x00\x00\x00\x00", "does not match"),
        (b"\x00\x00\x00\x01\xff", "not UTF-8"),
        (b"\x00\x00", "shorter"),
    ],
)
def test_bad_keys_are_corrupt(data: bytes, why: str) -> None:
    with pytest.raises(TransactionRecordError, match=why):
        decode_transaction_key(data)
