"""The client configurations: Kafka's options in snake_case, Kafka's defaults, frozen.

Each client takes its options as typed keyword-only arguments and freezes them into one
of these dataclasses before doing anything else, so a bad value fails at construction
(no I/O happens there) with :class:`ClientConfigError` naming the option, never later
inside a background task. The names are Kafka's (``linger.ms`` -> ``linger_ms``); where
raftka's default differs from Kafka's the field says why.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypedDict

from raftka.client._http_sasl import SaslLogin
from raftka.common.client_tls import ClientTls
from raftka.common.errors import InvalidConfigError
from raftka.common.record.header import Compression
from raftka.common.scram import SASL_MECHANISMS

__all__ = [
    "INT32_MAX",
    "AdminConfig",
    "ClientConfigError",
    "ConsumerConfig",
    "ProducerConfig",
    "SecurityOptions",
    "parse_bootstrap",
]

#: Java's Integer.MAX_VALUE: Kafka's default for ``retries`` and ``delivery.timeout.ms``
#: bounds.
INT32_MAX: Final = 2**31 - 1

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]


class ClientConfigError(InvalidConfigError, ValueError):
    """An invalid client option (Kafka's ConfigException). Both a ``KafkaError`` with
    Kafka's ``INVALID_CONFIG`` name and a ``ValueError``; the message starts with the
    option's name."""


def _fail(option: str, value: object, why: str) -> ClientConfigError:
    return ClientConfigError(f"{option}={value!r}: {why}")


def parse_bootstrap(option: str, value: str | Sequence[str]) -> tuple[str, ...]:
    """``"h1:9092,h2:9092"`` or ``["h1:9092", ...]`` -> ``("h1:9092", ...)``; each
    entry must be host:port with a port in 1..65535."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise _fail(option, value, "expected host:port strings")
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise _fail(option, value, f"{item!r} is not host:port")
        out.append(item)
    if not out:
        raise _fail(option, value, "at least one host:port is required")
    return tuple(out)


def _check_int(option: str, value: object, low: int, high: int = 2**63 - 1) -> None:
    if type(value) is not int or not low <= value <= high:
        raise _fail(option, value, f"expected an integer in [{low}, {high}]")


def _check_callable(option: str, value: object) -> None:
    if value is not None and not callable(value):
        raise _fail(option, value, "expected a callable or None")


class SecurityOptions(TypedDict, total=False):
    """Kafka's client security settings every client takes (see _CommonConfig)."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL"]
    sasl_mechanism: str | None
    sasl_plain_username: str | None
    sasl_plain_password: str | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_password: str | None
    ssl_check_hostname: bool
    ssl_context: ssl.SSLContext | None


_SSL_OPTIONS: Final = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")


@dataclass(frozen=True, slots=True, kw_only=True)
class _CommonConfig:
    bootstrap_servers: tuple[str, ...]
    client_id: str = "raftka-python"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    connections_max_idle_ms: int = 540_000
    #: SO_SNDBUF / SO_RCVBUF of the client's sockets; -1: the OS default (Kafka's
    #: send.buffer.bytes / receive.buffer.bytes, whose -1 means the same).
    send_buffer_bytes: int = -1
    receive_buffer_bytes: int = -1
    #: Kafka's security.protocol: PLAINTEXT, or SSL for nodes whose HTTP API is HTTPS
    #: (server_common/node_http.py), where the client presents ``ssl_certfile`` (its
    #: principal) and checks the node against ``ssl_cafile`` (the system's CAs when
    #: None) and, unless ``ssl_check_hostname`` is False, its host name. SASL_SSL: the
    #: same TLS, and the client authenticates as ``sasl_plain_username`` by
    #: ``sasl_mechanism`` (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, kafka-python's
    #: names; client/_http_sasl.py), a certificate then optional. SASL_PLAINTEXT is
    #: refused: the HTTP API carries SASL over TLS only.
    security_protocol: str = "PLAINTEXT"
    #: None: PLAIN under SASL_SSL (kafka-python's and aiokafka's default).
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    #: A ready context instead of the files (kafka-python's and aiokafka's
    #: ``ssl_context``): it must present the client's certificate, and it checks the
    #: node as it was made to; the ssl_* options above are then refused, not ignored.
    ssl_context: ssl.SSLContext | None = None

    def _check_common(self) -> None:
        object.__setattr__(
            self,
            "bootstrap_servers",
            parse_bootstrap("bootstrap_servers", self.bootstrap_servers),
        )
        if not isinstance(self.client_id, str):
            raise _fail("client_id", self.client_id, "expected a string")
        _check_int("request_timeout_ms", self.request_timeout_ms, 1, INT32_MAX)
        _check_int("retry_backoff_ms", self.retry_backoff_ms, 0, INT32_MAX)
        _check_int("metadata_max_age_ms", self.metadata_max_age_ms, 0)
        _check_int("connections_max_idle_ms", self.connections_max_idle_ms, 1)
        _check_int("send_buffer_bytes", self.send_buffer_bytes, -1, INT32_MAX)
        _check_int("receive_buffer_bytes", self.receive_buffer_bytes, -1, INT32_MAX)
        self._check_security()

    def _check_security(self) -> None:
        protocol = self.security_protocol
        if protocol == "SASL_PLAINTEXT":
            raise _fail(
                "security_protocol",
                protocol,
                "raftka's HTTP API carries SASL over TLS only: use SASL_SSL",
            )
        if protocol not in ("PLAINTEXT", "SSL", "SASL_SSL"):
            raise _fail("security_protocol", protocol, "expected PLAINTEXT, SSL or SASL_SSL")
        self._check_sasl(protocol)
        if protocol == "SASL_SSL":
            protocol = "SSL"  # the same TLS; the checks below but for the certificate
        for option in _SSL_OPTIONS:
            value = getattr(self, option)
            if value is not None and not isinstance(value, str):
                raise _fail(option, value, "expected a file name (str) or None")
            if value is not None and protocol == "PLAINTEXT":
                raise _fail(option, value, "security_protocol is PLAINTEXT: nothing uses it")
        if not isinstance(self.ssl_check_hostname, bool):
            raise _fail("ssl_check_hostname", self.ssl_check_hostname, "expected a bool")
        if not self.ssl_check_hostname and protocol == "PLAINTEXT":
            raise _fail("ssl_check_hostname", False, "security_protocol is PLAINTEXT")
        if self.ssl_context is not None:
            self._check_ssl_context(protocol)
            return
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise _fail("ssl_keyfile", self.ssl_keyfile, "ssl_certfile and ssl_keyfile go together")
        if self.security_protocol == "SSL" and self.ssl_certfile is None:
            raise _fail(
                "ssl_certfile",
                None,
                "an HTTPS API authenticates clients by certificate: give ssl_certfile and "
                "ssl_keyfile (or an ssl_context that presents one)",
            )

    def _check_sasl(self, protocol: str) -> None:
        options = ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password")
        for option in options:
            value = getattr(self, option)
            if value is not None and not isinstance(value, str):
                raise _fail(option, value, "expected a string or None")
            if value is not None and protocol != "SASL_SSL":
                raise _fail(option, value, f"security_protocol is {protocol}: nothing uses it")
        if protocol != "SASL_SSL":
            return
        mechanism = self.sasl_mechanism or "PLAIN"
        if mechanism not in SASL_MECHANISMS:
            raise _fail(
                "sasl_mechanism", mechanism, f"expected one of {', '.join(SASL_MECHANISMS)}"
            )
        if not self.sasl_plain_username or not self.sasl_plain_password:
            raise _fail(
                "sasl_plain_username",
                self.sasl_plain_username,
                "SASL_SSL needs sasl_plain_username and sasl_plain_password",
            )

    def sasl_login(self) -> SaslLogin | None:
        """Who the client authenticates as under SASL_SSL (None otherwise)."""
        if self.security_protocol != "SASL_SSL":
            return None
        assert self.sasl_plain_username is not None and self.sasl_plain_password is not None
        return SaslLogin(
            self.sasl_mechanism or "PLAIN", self.sasl_plain_username, self.sasl_plain_password
        )

    def _check_ssl_context(self, protocol: str) -> None:
        context = self.ssl_context
        if not isinstance(context, ssl.SSLContext):
            raise _fail("ssl_context", context, "expected an ssl.SSLContext or None")
        if protocol != "SSL":
            raise _fail("ssl_context", context, "security_protocol is PLAINTEXT: nothing uses it")
        for option in _SSL_OPTIONS:
            if getattr(self, option) is not None:
                raise _fail(
                    option,
                    getattr(self, option),
                    "ssl_context is given: it carries the certificates (give one or the other)",
                )
        if not self.ssl_check_hostname:
            raise _fail(
                "ssl_check_hostname",
                False,
                "ssl_context is given: set check_hostname on the context itself",
            )

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context of security_protocol=SSL (None for PLAINTEXT): ``ssl_context``
        when given, else one made from the files now, ClientConfigError naming the
        option that cannot be loaded."""
        if self.ssl_context is not None:
            return self.ssl_context
        tls = ClientTls(
            protocol="PLAINTEXT" if self.security_protocol == "PLAINTEXT" else "SSL",
            cafile=self.ssl_cafile,
            certfile=self.ssl_certfile,
            keyfile=self.ssl_keyfile,
            password=self.ssl_password,
            check_hostname=self.ssl_check_hostname,
        )
        try:
            return tls.context(cafile_name="ssl_cafile", certfile_name="ssl_certfile")
        except InvalidConfigError as e:
            raise ClientConfigError(e.message) from None

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` applied and validated again."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return type(self)(**values)


_ACKS: Final = {"all": -1, "-1": -1, -1: -1, 0: 0, "0": 0, 1: 1, "1": 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig(_CommonConfig):
    """Kafka's producer options. ``acks`` is normalised to -1/0/1 (``"all"`` -> -1).

    ``linger_ms`` defaults to 5, Kafka 4.0's default (KIP-1030; it was 0 before), which
    lets batches fill at a cost of at most 5 ms of latency.
    """

    acks: int | str = "all"
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    compression_type: str = "none"
    max_in_flight_requests_per_connection: int = 5
    retries: int = INT32_MAX
    delivery_timeout_ms: int = 120_000
    max_request_size: int = 1_048_576
    enable_idempotence: bool = True
    partitioner_ignore_keys: bool = False
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    #: Kafka's ``transactional.id``: set, the producer is transactional (and
    #: idempotent): ``init_transactions()`` first, then records only inside
    #: ``begin_transaction()`` ... ``commit_transaction()``/``abort_transaction()``.
    transactional_id: str | None = None
    #: Kafka's ``transaction.timeout.ms``: the coordinator aborts a transaction open
    #: longer (it refuses a value above the broker's ``transaction.max.timeout.ms``).
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        self._check_common()
        if self.transactional_id is not None and (
            not isinstance(self.transactional_id, str) or not self.transactional_id
        ):
            raise _fail("transactional_id", self.transactional_id, "expected a non-empty string")
        _check_int("transaction_timeout_ms", self.transaction_timeout_ms, 1, INT32_MAX)
        if self.transactional_id is not None and self.enable_idempotence is False:
            # Kafka's ProducerConfig: "Cannot set a transactional.id without also
            # enabling idempotence."
            raise _fail(
                "enable_idempotence",
                self.enable_idempotence,
                "a transactional_id requires enable_idempotence=True",
            )
        acks = self.acks
        if isinstance(acks, str):
            acks = acks.strip().lower()
        if isinstance(acks, bool) or acks not in _ACKS:
            raise _fail("acks", self.acks, 'expected "all", -1, 0 or 1')
        object.__setattr__(self, "acks", _ACKS[acks])
        _check_int("linger_ms", self.linger_ms, 0, INT32_MAX)
        _check_int("batch_size", self.batch_size, 0, INT32_MAX)
        _check_int("buffer_memory", self.buffer_memory, 1)
        _check_int("max_block_ms", self.max_block_ms, 0)
        try:
            Compression.from_name(self.compression_type)
        except (ValueError, AttributeError):
            raise _fail(
                "compression_type", self.compression_type, "expected none|gzip|snappy|lz4|zstd"
            ) from None
        _check_int(
            "max_in_flight_requests_per_connection",
            self.max_in_flight_requests_per_connection,
            1,
            INT32_MAX,
        )
        _check_int("retries", self.retries, 0, INT32_MAX)
        _check_int("delivery_timeout_ms", self.delivery_timeout_ms, 1, INT32_MAX)
        _check_int("max_request_size", self.max_request_size, 1, INT32_MAX)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            # Kafka's ProducerConfig refuses this too: a batch could expire before its
            # first attempt had a chance to finish.
            raise _fail(
                "delivery_timeout_ms",
                self.delivery_timeout_ms,
                "must be at least linger_ms + request_timeout_ms "
                f"({self.linger_ms} + {self.request_timeout_ms})",
            )
        if type(self.enable_idempotence) is not bool:
            raise _fail("enable_idempotence", self.enable_idempotence, "expected a bool")
        if self.enable_idempotence and self.acks != -1:
            # Kafka: "Must set acks to all in order to use the idempotent producer."
            raise _fail("acks", self.acks, 'enable_idempotence=True requires acks="all"')
        if self.enable_idempotence and self.max_in_flight_requests_per_connection > 5:
            # Kafka: the broker keeps the last 5 batches per producer, so a retry
            # further back than that could not be recognised as a duplicate.
            raise _fail(
                "max_in_flight_requests_per_connection",
                self.max_in_flight_requests_per_connection,
                "must be at most 5 with enable_idempotence=True",
            )
        if type(self.partitioner_ignore_keys) is not bool:
            raise _fail("partitioner_ignore_keys", self.partitioner_ignore_keys, "expected a bool")
        _check_callable("key_serializer", self.key_serializer)
        _check_callable("value_serializer", self.value_serializer)

    @property
    def compression(self) -> Compression:
        return Compression.from_name(self.compression_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig(_CommonConfig):
    """Kafka's consumer options (manual assignment; group options come with groups).

    ``isolation_level="read_committed"``: fetches stop at the last stable offset and
    records of aborted transactions are dropped (client/consumer/fetcher.py), as in
    Kafka.
    """

    group_id: str | None = None
    auto_offset_reset: Literal["earliest", "latest", "none"] = "latest"
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    check_crcs: bool = True
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def __post_init__(self) -> None:
        self._check_common()
        if self.group_id is not None and not isinstance(self.group_id, str):
            raise _fail("group_id", self.group_id, "expected a string or None")
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise _fail(
                "auto_offset_reset", self.auto_offset_reset, "expected earliest|latest|none"
            )
        _check_int("fetch_min_bytes", self.fetch_min_bytes, 0, INT32_MAX)
        _check_int("fetch_max_wait_ms", self.fetch_max_wait_ms, 0, 30_000)
        _check_int("fetch_max_bytes", self.fetch_max_bytes, 0, INT32_MAX)
        _check_int("max_partition_fetch_bytes", self.max_partition_fetch_bytes, 0, INT32_MAX)
        _check_int("max_poll_records", self.max_poll_records, 1, INT32_MAX)
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise _fail(
                "isolation_level", self.isolation_level, "expected read_uncommitted|read_committed"
            )
        if type(self.check_crcs) is not bool:
            raise _fail("check_crcs", self.check_crcs, "expected a bool")
        _check_callable("key_deserializer", self.key_deserializer)
        _check_callable("value_deserializer", self.value_deserializer)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminConfig(_CommonConfig):
    """Kafka's admin options. ``bootstrap_controllers`` (KIP-919) names controllers to
    send admin writes to directly; without it they are learnt from a broker's
    metadata. ``default_api_timeout_ms`` bounds each call, retries included."""

    bootstrap_controllers: tuple[str, ...] | None = None
    default_api_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        self._check_common()
        if self.bootstrap_controllers is not None:
            object.__setattr__(
                self,
                "bootstrap_controllers",
                parse_bootstrap("bootstrap_controllers", self.bootstrap_controllers),
            )
        _check_int("default_api_timeout_ms", self.default_api_timeout_ms, 1, INT32_MAX)
