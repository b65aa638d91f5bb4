"""Client configuration: Kafka's defaults, freezing, and validation that names the option.

Each invalid value is given to the config class (and, for a few, to the client
constructor) and must raise ClientConfigError (a ValueError and a KafkaError
INVALID_CONFIG) whose message starts with the option's name; no I/O happens.
"""

from __future__ import annotations

import dataclasses

import pytest

from raftka.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ClientConfigError,
    Consumer,
    Producer,
)
from raftka.client.config import INT32_MAX, AdminConfig, ConsumerConfig, ProducerConfig
from raftka.common.errors import InvalidConfigError
from raftka.common.record import Compression

BS = ("127.0.0.1:1",)


def test_producer_defaults_are_kafkas() -> None:
    """The producer defaults match Kafka 4.0's (linger.ms 5, acks all, idempotence on)."""
    c = ProducerConfig(bootstrap_servers=BS)
    assert c.acks == -1
    assert c.linger_ms == 5
    assert c.batch_size == 16384
    assert c.buffer_memory == 33554432
    assert c.max_block_ms == 60000
    assert c.compression is Compression.NONE
    assert c.max_in_flight_requests_per_connection == 5
    assert c.retries == INT32_MAX
    assert c.retry_backoff_ms == 100
    assert c.delivery_timeout_ms == 120000
    assert c.request_timeout_ms == 30000
    assert c.max_request_size == 1048576
    assert c.enable_idempotence is True


def test_consumer_and_admin_defaults() -> None:
    """Consumer and admin defaults are Kafka's."""
    c = ConsumerConfig(bootstrap_servers=BS)
    assert (c.auto_offset_reset, c.fetch_min_bytes, c.fetch_max_wait_ms) == ("latest", 1, 500)
    assert (c.fetch_max_bytes, c.max_partition_fetch_bytes) == (52428800, 1048576)
    assert (c.max_poll_records, c.isolation_level) == (500, "read_uncommitted")
    a = AdminConfig(bootstrap_servers=BS)
    assert a.default_api_timeout_ms == 60000 and a.request_timeout_ms == 30000


def test_configs_are_frozen_and_bootstrap_is_normalised() -> None:
    """A config cannot be changed after construction; bootstrap strings become tuples."""
    c = ProducerConfig(bootstrap_servers="a:1, b:2")  # type: ignore[arg-type]
    assert c.bootstrap_servers == ("a:1", "b:2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.linger_ms = 7  # type: ignore[misc]
    assert c.replace(linger_ms=7).linger_ms == 7


PRODUCER_BAD = [
    ("bootstrap_servers", ""),
    ("bootstrap_servers", "nohost"),
    ("bootstrap_servers", "h:99999"),
    ("acks", 2),
    ("acks", "some"),
    ("acks", True),
    ("linger_ms", -1),
    ("linger_ms", 1.5),
    ("batch_size", -1),
    ("buffer_memory", 0),
    ("max_block_ms", -1),
    ("compression_type", "brotli"),
    ("max_in_flight_requests_per_connection", 0),
    ("retries", -1),
    ("retry_backoff_ms", -1),
    ("delivery_timeout_ms", 0),
    ("request_timeout_ms", 0),
    ("max_request_size", 0),
    ("enable_idempotence", "yes"),
    ("partitioner_ignore_keys", 1),
    ("key_serializer", 42),
    ("value_serializer", "str"),
    ("client_id", 5),
    ("metadata_max_age_ms", -5),
]


@pytest.mark.parametrize(("option", "value"), PRODUCER_BAD)
def test_invalid_producer_option_is_named(option: str, value: object) -> None:
    """Every invalid producer value raises ClientConfigError starting with its name."""
    kwargs: dict[str, object] = {"bootstrap_servers": BS, option: value}
    with pytest.raises(ClientConfigError) as info:
        ProducerConfig(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"INVALID_CONFIG: {option}="), str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidConfigError)


def test_cross_option_rules() -> None:
    """Kafka's cross-option checks: idempotence needs acks=all; delivery_timeout_ms
    must cover linger_ms + request_timeout_ms."""
    with pytest.raises(ClientConfigError, match="acks"):
        ProducerConfig(bootstrap_servers=BS, acks=1)
    ProducerConfig(bootstrap_servers=BS, acks=1, enable_idempotence=False)
    with pytest.raises(ClientConfigError, match=r"^INVALID_CONFIG: delivery_timeout_ms"):
        ProducerConfig(bootstrap_servers=BS, delivery_timeout_ms=1000, request_timeout_ms=2000)


CONSUMER_BAD = [
    ("auto_offset_reset", "smallest"),
    ("fetch_min_bytes", -1),
    ("fetch_max_wait_ms", 30001),
    ("fetch_max_bytes", -1),
    ("max_partition_fetch_bytes", -1),
    ("max_poll_records", 0),
    ("isolation_level", "serializable"),
    ("check_crcs", "no"),
    ("group_id", 3),
    ("key_deserializer", 1),
    ("value_deserializer", 1),
    ("bootstrap_servers", []),
]


@pytest.mark.parametrize(("option", "value"), CONSUMER_BAD)
def test_invalid_consumer_option_is_named(option: str, value: object) -> None:
    """Every invalid consumer value raises ClientConfigError starting with its name."""
    kwargs: dict[str, object] = {"bootstrap_servers": BS, option: value}
    with pytest.raises(ClientConfigError, match=rf"^INVALID_CONFIG: {option}="):
        ConsumerConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value"), [("default_api_timeout_ms", 0), ("bootstrap_controllers", "x")]
)
def test_invalid_admin_option_is_named(option: str, value: object) -> None:
    """Invalid admin values name their option too."""
    kwargs: dict[str, object] = {"bootstrap_servers": BS, option: value}
    with pytest.raises(ClientConfigError, match=rf"^INVALID_CONFIG: {option}="):
        AdminConfig(**kwargs)  # type: ignore[arg-type]


def test_client_constructors_validate_and_do_no_io() -> None:
    """Constructors validate at once and open nothing: no loop, session or thread is
    needed (this test has no event loop running) and nothing listens on port 1."""
    with pytest.raises(ClientConfigError, match=r"^INVALID_CONFIG: linger_ms"):
        AsyncProducer(bootstrap_servers=BS, linger_ms=-1)
    with pytest.raises(ClientConfigError, match=r"^INVALID_CONFIG: max_poll_records"):
        AsyncConsumer(bootstrap_servers=BS, max_poll_records=0)
    AsyncAdmin(bootstrap_servers=BS)
    p = Producer(bootstrap_servers=BS)
    c = Consumer(bootstrap_servers=BS)
    assert not p._thread.started and not c._thread.started
    p.close()
    c.close()


def test_read_committed_is_accepted_and_other_levels_are_refused() -> None:
    """read_committed is Kafka's (reads stop at the LSO, aborted records dropped); any
    other value is refused by name (Kafka's INVALID_CONFIG)."""
    assert (
        ConsumerConfig(bootstrap_servers="h:1", isolation_level="read_committed").isolation_level
        == "read_committed"
    )
    with pytest.raises(ClientConfigError, match=r"^INVALID_CONFIG: isolation_level='serializable'"):
        ConsumerConfig(bootstrap_servers="h:1", isolation_level="serializable")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError):
        ConsumerConfig(bootstrap_servers="h:1", isolation_level="serializable")  # type: ignore[arg-type]
