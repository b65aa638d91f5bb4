"""The constructor keywords of the kafka-python and aiokafka adapters, without a
cluster (constructors do no I/O): units (kafka-python's seconds <-> raftka's ms),
kafka-python's and aiokafka's defaults where they differ from raftka's, keywords
raftka cannot honour refused by name, tuning-only keywords accepted, unknown keywords
refused, and kafka-python's idempotence rules."""

from __future__ import annotations

import selectors
import socket
import ssl

import pytest

from raftka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
)
from raftka.client._transport import RESPONSE_BYTES_MAX, Transport
from raftka.client.compat import aiokafka as aio
from raftka.client.compat import kafka_python as kp
from raftka.client.compat._options import bootstrap_with_ports, ms_from_s
from raftka.errors import KafkaConfigurationError, UnsupportedVersionError

BOOT = "127.0.0.1:1"


def test_seconds_become_whole_milliseconds_rounded_up() -> None:
    assert ms_from_s("t", None) is None
    assert ms_from_s("t", float("inf")) is None
    assert ms_from_s("t", 10) == 10_000
    assert ms_from_s("t", 0.0001) == 1
    assert ms_from_s("t", 1.5) == 1_500
    assert ms_from_s("t", 0) == 0
    with pytest.raises(ValueError, match="t: timeout must be >= 0"):
        ms_from_s("t", -1)
    with pytest.raises(TypeError):
        ms_from_s("t", "10")  # type: ignore[arg-type]


def test_bootstrap_servers_get_kafkas_port_where_missing() -> None:
    assert bootstrap_with_ports("localhost") == "localhost:9092"
    assert bootstrap_with_ports("a:1,b") == "a:1,b:9092"
    assert bootstrap_with_ports(["a", "b:2"]) == ["a:9092", "b:2"]
    assert bootstrap_with_ports("[::1]") == "[::1]:9092"
    assert KafkaProducer().config["bootstrap_servers"] == ("localhost:9092",)


@pytest.mark.parametrize(
    ("cls", "keyword", "value", "why"),
    [
        # kafka-python's TLS and SASL options reach raftka's client, which checks them.
        (KafkaProducer, "security_protocol", "SASL_PLAINTEXT", "over TLS only"),
        (KafkaProducer, "ssl_cafile", "/ca.pem", "PLAINTEXT: nothing uses it"),
        (KafkaProducer, "ssl_crlfile", "/crl.pem", "revocation"),
        (KafkaProducer, "ssl_context", object(), "expected an ssl.SSLContext"),
        (KafkaProducer, "sasl_mechanism", "PLAIN", "PLAINTEXT: nothing uses it"),
        (KafkaProducer, "sasl_kerberos_name", "k", "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN"),
        (KafkaProducer, "allow_auto_create_topics", True, "create_topics"),
        (KafkaProducer, "metric_reporters", [object], "metrics"),
        (KafkaConsumer, "exclude_internal_topics", False, "internal"),
        (KafkaConsumer, "default_offset_commit_callback", print, "commit_async"),
        (KafkaConsumer, "client_rack", "rack-1", "leader"),
        (KafkaAdminClient, "sasl_plain_username", "u", "PLAINTEXT: nothing uses it"),
        (AIOKafkaProducer, "sasl_mechanism", "SCRAM-SHA-256", "PLAINTEXT: nothing uses it"),
        (AIOKafkaConsumer, "rebalance_timeout_ms", 10_000, "max_poll_interval_ms"),
        (AIOKafkaConsumer, "ssl_context", object(), "expected an ssl.SSLContext"),
        (AIOKafkaProducer, "ssl_context", ssl.create_default_context(), "PLAINTEXT: nothing"),
        (AIOKafkaProducer, "security_protocol", "SASL_PLAINTEXT", "over TLS only"),
        (AIOKafkaConsumer, "ssl_cafile", "/ca.pem", "takes TLS as ssl_context"),
        (KafkaProducer, "api_version", (0, 9), "0.10"),
        (KafkaProducer, "api_version", "x.y", "expects a version"),
        (KafkaProducer, "bootstrap_timeout_ms", 5_000, "no I/O"),
        (KafkaProducer, "client_dns_lookup", "resolve_canonical_bootstrap_servers_only", "every"),
        (KafkaProducer, "metrics_num_samples", 3, "totals"),
        (KafkaConsumer, "metrics_sample_window_ms", 1_000, "totals"),
        (KafkaProducer, "socket_options", [], "TCP_NODELAY"),
        (KafkaProducer, "socket_options", [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)], "only"),
        (KafkaProducer, "receive_message_max_bytes", 100_000_000, "up to"),
        (KafkaProducer, "reconnect_backoff_max_ms", 50, "retry_backoff_ms=100"),
        (KafkaProducer, "selector", selectors.SelectSelector, "DefaultSelector"),
        (KafkaProducer, "send_buffer_bytes", -5, "integer >= 1"),
        (KafkaConsumer, "enable_incremental_fetch_sessions", True, "KIP-227"),
        (KafkaConsumer, "legacy_iterator", True, "iterator"),
        (KafkaConsumer, "sock_chunk_bytes", 4096, "aiohttp"),
        (KafkaConsumer, "max_in_flight_requests_per_connection", 0, ">= 1"),
        (KafkaAdminClient, "socket_options", [(1, 2, 3, 4)], "tuples"),
        (AIOKafkaProducer, "api_version", "0.9", "0.10"),
        (AIOKafkaConsumer, "consumer_timeout_ms", -1, ">= 0"),
    ],
)
def test_keywords_raftka_cannot_honour_are_refused_by_name(
    cls: type, keyword: str, value: object, why: str
) -> None:
    with pytest.raises(KafkaConfigurationError, match=rf"INVALID_CONFIG: {keyword}=.*{why}"):
        cls(bootstrap_servers=BOOT, **{keyword: value})


def test_transactional_id_reaches_the_producer_and_implies_idempotence() -> None:
    """Both shims pass transactional_id and transaction_timeout_ms on (aiokafka then
    switches idempotence on and acks to "all", as aiokafka does); before 0.11 it is
    refused by name, and with idempotence off raftka's own config refuses it."""
    kp_producer = KafkaProducer(
        bootstrap_servers=BOOT, transactional_id="tx-1", transaction_timeout_ms=30_000
    )
    assert kp_producer._producer.config.transactional_id == "tx-1"
    assert kp_producer._producer.config.transaction_timeout_ms == 30_000
    kp_producer.close()
    aio_producer = AIOKafkaProducer(bootstrap_servers=BOOT, transactional_id="tx")
    config = aio_producer._producer.config
    assert config.enable_idempotence and config.acks == -1 and config.transactional_id == "tx"
    with pytest.raises(KafkaConfigurationError, match=r"transactional_id=.*0, 11"):
        KafkaProducer(bootstrap_servers=BOOT, transactional_id="tx", api_version=(0, 10))
    with pytest.raises(KafkaConfigurationError, match="enable_idempotence"):
        AIOKafkaProducer(bootstrap_servers=BOOT, transactional_id="tx", enable_idempotence=False)


def test_refused_keywords_with_a_value_raftka_honours_are_accepted() -> None:
    """The default (or a value that asks for nothing raftka lacks) is accepted."""
    KafkaProducer(
        bootstrap_servers=BOOT,
        security_protocol="PLAINTEXT",
        ssl_cafile=None,
        sasl_mechanism=None,
        transactional_id=None,
        allow_auto_create_topics=False,
        sasl_kerberos_service_name="kafka",
    ).close()
    KafkaConsumer(bootstrap_servers=BOOT, exclude_internal_topics=True, client_rack="").close()
    AIOKafkaProducer(bootstrap_servers=BOOT, sasl_mechanism="PLAIN", loop=None)


def test_connection_and_metric_keywords_are_honoured() -> None:
    """Socket buffer sizes (as keywords or as socket_options) reach raftka's sockets,
    reconnect back-off becomes at least retry_backoff_ms, metrics_enabled=False
    empties metrics(), and the defaults kafka-python programs pass are accepted."""
    producer = KafkaProducer(
        bootstrap_servers=BOOT,
        send_buffer_bytes=131_072,
        receive_buffer_bytes=None,  # kafka-python's default: the OS's
        reconnect_backoff_ms=250,
        reconnect_backoff_max_ms=30_000,
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        metrics_enabled=False,
        metrics_num_samples=2,
        metrics_sample_window_ms=30_000,
        client_dns_lookup="use_all_dns_ips",
        selector=selectors.DefaultSelector,
        api_version_auto_timeout_ms=2_000,
        receive_message_max_bytes=RESPONSE_BYTES_MAX,
        transaction_timeout_ms=60_000,
    )
    assert producer._producer.config.send_buffer_bytes == 131_072
    assert producer._producer.config.receive_buffer_bytes == -1
    assert producer._producer.config.retry_backoff_ms == 250
    assert producer.metrics() == {}
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=BOOT,
        socket_options=[
            (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
            (socket.SOL_SOCKET, socket.SO_RCVBUF, 65_536),
        ],
        max_in_flight_requests_per_connection=5,  # HTTP/1.1: 1 per connection holds it
        reconnect_backoff_ms=10,  # below retry_backoff_ms (100): already honoured
        enable_incremental_fetch_sessions=False,
    )
    assert consumer._consumer.config.receive_buffer_bytes == 65_536
    assert consumer._consumer.config.retry_backoff_ms == 100
    assert consumer.metrics()["consumer-coordinator-metrics"]["commit-total"] == 0
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=BOOT, send_buffer_bytes=4096)
    assert admin._admin.config.send_buffer_bytes == 4096
    assert admin._group_options["send_buffer_bytes"] == 4096
    admin.close()
    AIOKafkaConsumer(bootstrap_servers=BOOT, api_version="auto", consumer_timeout_ms=100)
    aio_producer = AIOKafkaProducer(bootstrap_servers=BOOT, send_backoff_ms=300)
    assert aio_producer.config.retry_backoff_ms == 300


def test_client_sockets_get_the_buffer_sizes_before_they_connect() -> None:
    """The transport's socket factory sets SO_SNDBUF / SO_RCVBUF (Linux reports at
    least the size asked for: it doubles it for bookkeeping)."""
    transport = Transport(
        client_id="t",
        request_timeout_ms=1_000,
        idle_ms=1_000,
        send_buffer_bytes=65_536,
        receive_buffer_bytes=32_768,
    )
    info = socket.getaddrinfo("127.0.0.1", 9, type=socket.SOCK_STREAM)[0]
    with transport._new_socket(info) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65_536
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 32_768
    assert Transport(client_id="t", request_timeout_ms=1, idle_ms=1)._socket_options == ()


def test_api_version_limits_the_features_a_program_may_use() -> None:
    """kafka-python's (0, 10) (a common argument) runs, with 0.10's features: no
    idempotence (switched off; refused when asked for), no headers, no zstd, no
    read_committed, no offsets_for_times before 0.10.1, one timeout for session and
    poll interval before 0.10.1, a 30 s session before 3.0, no static membership
    before 2.3. Newer versions and None allow each."""
    old = KafkaProducer(bootstrap_servers=BOOT, api_version=(0, 10))
    assert not old.config["enable_idempotence"]
    with pytest.raises(UnsupportedVersionError, match=r"headers.*\(0, 11\)"):
        old.send("t", b"v", headers=[("h", b"x")])
    old.close()
    with pytest.raises(KafkaConfigurationError, match=r"enable_idempotence.*\(0, 11\)"):
        KafkaProducer(bootstrap_servers=BOOT, api_version=(0, 10, 2), enable_idempotence=True)
    with pytest.raises(KafkaConfigurationError, match=r"compression_type.*\(2, 1\)"):
        KafkaProducer(bootstrap_servers=BOOT, api_version="2.0", compression_type="zstd")
    KafkaProducer(bootstrap_servers=BOOT, api_version=(2, 1), compression_type="zstd").close()
    assert KafkaProducer(bootstrap_servers=BOOT, api_version=(2, 8)).config["enable_idempotence"]
    with pytest.raises(KafkaConfigurationError, match=r"isolation_level.*\(0, 11\)"):
        KafkaConsumer(bootstrap_servers=BOOT, api_version=(0, 10), isolation_level="read_committed")
    with pytest.raises(KafkaConfigurationError, match=r"group_instance_id.*\(2, 3\)"):
        KafkaConsumer(
            bootstrap_servers=BOOT, api_version=(2, 2), group_id="g", group_instance_id="i"
        )
    oldest = KafkaConsumer(
        bootstrap_servers=BOOT, api_version=(0, 10, 0), session_timeout_ms=20_000
    )
    assert oldest._consumer._async.group_options.max_poll_interval_ms == 20_000
    with pytest.raises(UnsupportedVersionError, match="offsets_for_times"):
        oldest.offsets_for_times({kp.TopicPartition("t", 0): 0})
    oldest.close()
    with pytest.raises(KafkaConfigurationError, match="must equal session_timeout_ms"):
        KafkaConsumer(
            bootstrap_servers=BOOT,
            api_version=(0, 10),
            session_timeout_ms=10_000,
            max_poll_interval_ms=20_000,
        )
    pre_3 = KafkaConsumer(bootstrap_servers=BOOT, api_version=(2, 8))
    assert pre_3._consumer._async.group_options.session_timeout_ms == 30_000
    pre_3.close()
    with pytest.raises(KafkaConfigurationError, match=r"enable_idempotence.*\(0, 11\)"):
        AIOKafkaProducer(bootstrap_servers=BOOT, api_version="0.10.2", enable_idempotence=True)
    admin = KafkaAdminClient(bootstrap_servers=BOOT, api_version=(0, 11))
    with pytest.raises(
        UnsupportedVersionError, match=r"create_partitions needs api_version >= \(1, 0\)"
    ):
        admin.create_partitions({})
    with pytest.raises(UnsupportedVersionError, match="delete_consumer_groups"):
        admin.delete_consumer_groups(["g"])
    admin.close()


def test_unknown_keywords_are_refused() -> None:
    with pytest.raises(KafkaConfigurationError, match="lingr_ms=5: KafkaProducer has no such"):
        KafkaProducer(bootstrap_servers=BOOT, lingr_ms=5)
    with pytest.raises(KafkaConfigurationError, match="AIOKafkaConsumer has no such"):
        AIOKafkaConsumer(bootstrap_servers=BOOT, nope=1)


def test_kafka_python_producer_defaults_and_conversions() -> None:
    """linger_ms 0 (kafka-python's), acks all with idempotence, retries=inf and
    compression_type=None converted; a bad value is raftka's ClientConfigError."""
    opts = kp.producer_options({"retries": float("inf"), "compression_type": None})
    assert opts["linger_ms"] == 0
    assert opts["retries"] == 2**31 - 1
    assert opts["compression_type"] == "none"
    producer = KafkaProducer(bootstrap_servers=BOOT)
    assert (producer.config["acks"], producer.config["enable_idempotence"]) == (-1, True)
    assert producer.config["linger_ms"] == 0
    with pytest.raises(KafkaConfigurationError, match="linger_ms"):
        KafkaProducer(bootstrap_servers=BOOT, linger_ms=-1)


def test_idempotence_follows_kafka_pythons_rules() -> None:
    """acks=1 given without enable_idempotence: idempotence is switched off (as
    kafka-python does); given with enable_idempotence=True: refused."""
    producer = KafkaProducer(bootstrap_servers=BOOT, acks=1)
    assert (producer.config["acks"], producer.config["enable_idempotence"]) == (1, False)
    with pytest.raises(KafkaConfigurationError, match=r"enable_idempotence=True.*acks=1"):
        KafkaProducer(bootstrap_servers=BOOT, acks=1, enable_idempotence=True)
    relaxed = KafkaProducer(bootstrap_servers=BOOT, max_in_flight_requests_per_connection=10)
    assert not relaxed.config["enable_idempotence"]


def test_kafka_python_consumer_conversions() -> None:
    opts = kp.consumer_options("KafkaConsumer", {"auto_offset_reset": "smallest"})
    assert opts["auto_offset_reset"] == "earliest"
    assert opts["partition_assignment_strategy"] == ("range", "roundrobin")
    assert opts["consumer_timeout_ms"] == float("inf")
    consumer = KafkaConsumer(bootstrap_servers=BOOT, group_id="g", consumer_timeout_ms=50)
    assert (consumer.config["group_id"], consumer.config["consumer_timeout_ms"]) == ("g", 50)
    assert consumer.config["partition_assignment_strategy"] == ("range", "roundrobin")
    with pytest.raises(KafkaConfigurationError, match="consumer_timeout_ms"):
        KafkaConsumer(bootstrap_servers=BOOT, consumer_timeout_ms=-5)


def test_assignors_are_taken_by_name_and_custom_ones_refused() -> None:
    """kafka-python passes assignor classes; their ``name`` picks raftka's assignor."""

    class RoundRobinPartitionAssignor:
        name = "roundrobin"

    class MyAssignor:
        name = "mine"

    assert kp.assignment_strategy([RoundRobinPartitionAssignor, "range"]) == (
        "roundrobin",
        "range",
    )
    with pytest.raises(KafkaConfigurationError, match="custom"):
        KafkaConsumer(bootstrap_servers=BOOT, partition_assignment_strategy=[MyAssignor])


def test_aiokafka_defaults() -> None:
    """aiokafka's producer: no idempotence, acks=1, request_timeout_ms 40 s,
    max_batch_size -> batch_size; its consumer: 40 s requests, round robin,
    max_poll_records None -> raftka's default."""
    opts = aio.producer_options({"max_batch_size": 1000})
    assert (opts["enable_idempotence"], opts["acks"], opts["batch_size"]) == (False, 1, 1000)
    assert aio.producer_options({"enable_idempotence": True})["acks"] == "all"
    producer = AIOKafkaProducer(bootstrap_servers=BOOT)
    assert producer.config.request_timeout_ms == 40_000
    copts = aio.consumer_options({"max_poll_records": None})
    assert "max_poll_records" not in copts
    assert copts["partition_assignment_strategy"] == ("roundrobin",)
    assert AIOKafkaConsumer(bootstrap_servers=BOOT).config.request_timeout_ms == 40_000


def test_commit_offsets_in_kafka_python_and_aiokafka_shapes() -> None:
    from raftka.structs import OffsetAndMetadata, TopicPartition

    tp = TopicPartition("t", 0)
    assert kp.offsets_to_commit({tp: OffsetAndMetadata(5, None, -1)}) == {  # type: ignore[arg-type]
        tp: OffsetAndMetadata(5, "", None)
    }
    assert kp.offsets_to_commit({tp: 7}) == {tp: OffsetAndMetadata(7)}
    assert kp.offsets_to_commit({tp: (8, "m")}) == {tp: OffsetAndMetadata(8, "m")}
    assert kp.offsets_to_commit(None) is None
    with pytest.raises(TypeError):
        kp.offsets_to_commit({tp: "9"})
