"""The connector's options: Spark's Kafka option names in, frozen settings out.

Pure: a mapping of strings (Spark passes every option as a string, and matches their
names without regard to case) becomes :class:`SourceOptions` or :class:`SinkOptions`,
or a :class:`SparkOptionError` whose message names the option at fault. Client
settings pass through with Kafka's ``kafka.`` prefix, from a fixed table of the ones
the raftka clients take (an unknown one is an error rather than silently ignored).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from raftka.client.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetsJsonError,
    parse_assign_json,
    parse_offsets_json,
)
from raftka.client.structs import TopicPartition
from raftka.common.errors import InvalidConfigError
from raftka.common.jaas import parse_login
from raftka.common.scram import SASL_MECHANISMS

__all__ = [
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
    "DEFAULT_POLL_TIMEOUT_MS",
    "SECURITY_SETTINGS",
    "OffsetsSpec",
    "SinkOptions",
    "SourceOptions",
    "SparkOptionError",
    "Subscription",
    "parse_duration_ms",
    "parse_sink_options",
    "parse_source_options",
]

#: Spark's default maxTriggerDelay (15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000
#: Spark's kafkaConsumer.pollTimeoutMs default: how long a task waits for a range's
#: records to arrive before failing (they are below the high watermark, so they exist).
DEFAULT_POLL_TIMEOUT_MS: Final = 120_000

_SUBSCRIPTION_OPTIONS: Final = ("assign", "subscribe", "subscribepattern")
_DURATION = re.compile(r"\s*(\d+)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|d|days?)?\s*")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class SparkOptionError(ValueError):
    """An option of the raftka data source is missing, malformed or contradicts
    another; the message names the option."""


def _int(text: str) -> int:
    return int(text.strip())


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return lowered == "true"


def _str(text: str) -> str:
    return text.strip()


def _acks(text: str) -> int | str:
    lowered = text.strip().lower()
    return lowered if lowered == "all" else int(lowered)


# Kafka client settings accepted with the ``kafka.`` prefix: Kafka name -> (keyword
# argument of the raftka client, parser).
_COMMON: Final[Mapping[str, tuple[str, Callable[[str], Any]]]] = {
    "client.id": ("client_id", _str),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int),
}
CONSUMER_SETTINGS: Final[Mapping[str, tuple[str, Callable[[str], Any]]]] = {
    **_COMMON,
    "fetch.min.bytes": ("fetch_min_bytes", _int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int),
    "fetch.max.bytes": ("fetch_max_bytes", _int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int),
    "max.poll.records": ("max_poll_records", _int),
    "check.crcs": ("check_crcs", _bool),
    "default.api.timeout.ms": ("default_api_timeout_ms", _int),
}
PRODUCER_SETTINGS: Final[Mapping[str, tuple[str, Callable[[str], Any]]]] = {
    **_COMMON,
    "acks": ("acks", _acks),
    "linger.ms": ("linger_ms", _int),
    "batch.size": ("batch_size", _int),
    "buffer.memory": ("buffer_memory", _int),
    "max.block.ms": ("max_block_ms", _int),
    "compression.type": ("compression_type", _str),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "retries": ("retries", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "max.request.size": ("max_request_size", _int),
    "enable.idempotence": ("enable_idempotence", _bool),
    "transaction.timeout.ms": ("transaction_timeout_ms", _int),
}


def _protocol(text: str) -> str:
    protocol = text.strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_SSL"):
        raise ValueError(
            "expected PLAINTEXT, SSL or SASL_SSL (raftka's HTTP API carries SASL over TLS only)"
        )
    return protocol


def _hostname_check(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("https", ""):
        raise ValueError("expected https or empty (no host-name check)")
    return lowered == "https"


#: TLS to an HTTPS cluster (server_common/node_http.py), given to every client the
#: connector makes (admin, consumers, producers), with the names of ``--command-config``
#: (common/client_tls.py): PEM files, as Python's ssl module reads them. The files must
#: be at these paths on the driver and on every executor.
SECURITY_SETTINGS: Final[Mapping[str, tuple[str, Callable[[str], Any]]]] = {
    "security.protocol": ("security_protocol", _protocol),
    "ssl.cafile": ("ssl_cafile", _str),
    "ssl.certfile": ("ssl_certfile", _str),
    "ssl.keyfile": ("ssl_keyfile", _str),
    "ssl.key.password": ("ssl_password", _str),
    "ssl.endpoint.identification.algorithm": ("ssl_check_hostname", _hostname_check),
}
#: Spark's Java TLS settings, each refused with the PEM setting to use instead.
_JAVA_TLS: Final = {
    "ssl.truststore.location": "kafka.ssl.cafile",
    "ssl.truststore.type": "kafka.ssl.cafile",
    "ssl.truststore.password": "kafka.ssl.cafile (a PEM file has no password)",
    "ssl.keystore.location": "kafka.ssl.certfile and kafka.ssl.keyfile",
    "ssl.keystore.type": "kafka.ssl.certfile and kafka.ssl.keyfile",
    "ssl.keystore.password": "kafka.ssl.key.password",
}

# Handled by the connector itself, not passed to a client.
_KAFKA_HANDLED: Final = frozenset({"bootstrap.servers", "isolation.level", "transactional.id"})
_ISOLATION_LEVELS: Final = ("read_uncommitted", "read_committed")
# Kafka settings that Spark's connector refuses because it manages them itself.
_KAFKA_REFUSED: Final = frozenset(
    {
        "group.id",
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "enable.auto.commit",
        "interceptor.classes",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """Which partitions the source reads: exactly one of Spark's three ways."""

    kind: Literal["assign", "subscribe", "subscribePattern"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        if self.kind == "subscribe":
            return topic in self.topics
        return any(tp.topic == topic for tp in self.partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsSpec:
    """Where to start or end: ``earliest``, ``latest``, per-partition offsets (-2 earliest,
    -1 latest; partitions not named take ``default``), or a timestamp in ms."""

    kind: Literal["earliest", "latest", "offsets", "timestamp"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    default: int = EARLIEST

    def for_partition(self, tp: TopicPartition) -> int:
        """The spec of one partition: an offset >= 0, EARLIEST or LATEST (not for
        ``timestamp``, which needs a lookup)."""
        assert self.kind != "timestamp"
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return self.offsets.get(tp, self.default)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetsSpec
    ending: OffsetsSpec
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    # minPartitions and maxRecordsPerPartition: how far each partition's offset range
    # is cut into more Spark input partitions (planning.split_ranges).
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    # startingOffsetsByTimestampStrategy: what a partition with no record at or after
    # startingTimestamp does ("error" as Spark's default, or "latest").
    timestamp_strategy: Literal["error", "latest"] = "error"
    # read_committed: ranges end at the last stable offset and the reader drops aborted
    # records and transaction markers (the offsets they take are gaps).
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    consumer: Mapping[str, Any] = field(default_factory=dict)
    security: Mapping[str, Any] = field(default_factory=dict)

    @property
    def connection(self) -> dict[str, Any]:
        """Where and how every client of the source connects (bootstrap servers, TLS)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security}


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    # Streaming only: skip a micro-batch whose sink commit raftka already recorded.
    replay_protection: bool = True
    # kafka.transactional.id: the prefix of the transactional ids the sink derives per
    # query and Spark partition (transactional mode); None: plain at-least-once writes.
    transactional_id_prefix: str | None = None
    producer: Mapping[str, Any] = field(default_factory=dict)
    security: Mapping[str, Any] = field(default_factory=dict)

    @property
    def connection(self) -> dict[str, Any]:
        """Where and how every client of the sink connects (bootstrap servers, TLS)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security}


def parse_duration_ms(text: str, *, option: str) -> int:
    """Spark's duration strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d``; a bare
    number is milliseconds."""
    m = _DURATION.fullmatch(text.lower())
    if m is None:
        raise SparkOptionError(f"option {option}: {text!r} is not a duration such as 30s or 15m")
    word = m.group(2) or "ms"
    unit = "ms" if word == "ms" or word.startswith("milli") else word[0]
    return int(m.group(1)) * _UNIT_MS[unit]


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in options.items():
        out[k.lower()] = str(v)
    return out


def _parse(opts: Mapping[str, str], name: str, parse: Callable[[str], Any], display: str) -> Any:
    try:
        return parse(opts[name])
    except (ValueError, TypeError) as e:
        raise SparkOptionError(f"option {display}: {opts[name]!r} is invalid ({e})") from None


def _positive(opts: Mapping[str, str], name: str, display: str) -> int | None:
    if name not in opts:
        return None
    value: int = _parse(opts, name, _int, display)
    if value < 1:
        raise SparkOptionError(f"option {display}: must be a positive integer, not {value}")
    return value


def _bootstrap(opts: Mapping[str, str]) -> str:
    plain, prefixed = opts.get("bootstrap.servers"), opts.get("kafka.bootstrap.servers")
    if plain is not None and prefixed is not None and plain.strip() != prefixed.strip():
        raise SparkOptionError(
            "options bootstrap.servers and kafka.bootstrap.servers disagree; give one"
        )
    servers = (plain if plain is not None else prefixed or "").strip()
    if not servers:
        raise SparkOptionError(
            "option bootstrap.servers (or kafka.bootstrap.servers) is required, e.g. 127.0.0.1:9096"
        )
    return servers


def _client_settings(
    opts: Mapping[str, str], table: Mapping[str, tuple[str, Callable[[str], Any]]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(opts):
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _KAFKA_HANDLED or _is_security(name):
            continue  # _security() reads (or refuses) those
        if name in _KAFKA_REFUSED:
            raise SparkOptionError(
                f"option kafka.{name} is not supported: the raftka connector manages it itself"
            )
        if name not in table:
            raise SparkOptionError(
                f"option kafka.{name} is not a setting the raftka client takes here "
                f"(known: {', '.join(sorted([*table, *SECURITY_SETTINGS]))})"
            )
        kwarg, parse = table[name]
        out[kwarg] = _parse(opts, key, parse, f"kafka.{name}")
    return out


def _is_security(name: str) -> bool:
    return name in SECURITY_SETTINGS or name in _JAVA_TLS or name.startswith("sasl.")


def _security(opts: Mapping[str, str]) -> dict[str, Any]:
    """The ``kafka.`` TLS settings (SECURITY_SETTINGS); Java key stores and SASL are
    refused by name."""
    out: dict[str, Any] = {}
    for key in sorted(opts):
        name = key.removeprefix("kafka.")
        if name == key:
            continue
        if name in _JAVA_TLS:
            raise SparkOptionError(
                f"option kafka.{name} is not supported (a Java key store): use {_JAVA_TLS[name]}"
            )
        if name.startswith("sasl.") and name not in _SASL_SETTINGS:
            raise SparkOptionError(
                f"option kafka.{name} is not supported: raftka's client logs in with "
                f"{' and '.join('kafka.' + n for n in _SASL_SETTINGS)} only"
            )
        if name in SECURITY_SETTINGS:
            kwarg, parse = SECURITY_SETTINGS[name]
            out[kwarg] = _parse(opts, key, parse, f"kafka.{name}")
    out.update(_sasl_login(opts, out.get("security_protocol", "PLAINTEXT")))
    return out


#: Kafka's SASL client settings for a SCRAM or PLAIN login (SASL_SSL on raftka's HTTPS
#: API, client/_http_sasl.py).
_SASL_SETTINGS: Final = ("sasl.mechanism", "sasl.jaas.config")


def _sasl_login(opts: Mapping[str, str], protocol: str) -> dict[str, Any]:
    """The client's SASL keywords from kafka.sasl.mechanism (Kafka's default GSSAPI,
    which raftka does not serve) and kafka.sasl.jaas.config."""
    given = {n: opts[f"kafka.{n}"] for n in _SASL_SETTINGS if f"kafka.{n}" in opts}
    if protocol != "SASL_SSL":
        if given:
            name = sorted(given)[0]
            raise SparkOptionError(
                f"option kafka.{name}: kafka.security.protocol is {protocol}, nothing uses it"
            )
        return {}
    mechanism = given.get("sasl.mechanism", "GSSAPI").strip()
    if mechanism not in SASL_MECHANISMS:
        raise SparkOptionError(
            f"option kafka.sasl.mechanism={mechanism}: raftka's client logs in with "
            f"{', '.join(SASL_MECHANISMS)} (Kafka's default is GSSAPI: set it)"
        )
    if "sasl.jaas.config" not in given:
        raise SparkOptionError("option kafka.sasl.jaas.config: SASL_SSL needs the login")
    try:
        user, password = parse_login(
            given["sasl.jaas.config"], mechanism, key="kafka.sasl.jaas.config"
        )
    except InvalidConfigError as e:
        raise SparkOptionError(f"option {e.message}") from None
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def _isolation(opts: Mapping[str, str]) -> Literal["read_uncommitted", "read_committed"]:
    """``isolation.level`` (Spark's name) or ``kafka.isolation.level``; both given must
    agree."""
    levels: dict[str, str] = {}
    for key in ("isolation.level", "kafka.isolation.level"):
        value = opts.get(key)
        if value is None:
            continue
        level = value.strip().lower()
        if level not in _ISOLATION_LEVELS:
            raise SparkOptionError(
                f"option {key}: read_uncommitted or read_committed, not {value!r}"
            )
        levels[key] = level
    if len(set(levels.values())) > 1:
        raise SparkOptionError(
            "options isolation.level and kafka.isolation.level disagree; give one"
        )
    return "read_committed" if "read_committed" in levels.values() else "read_uncommitted"


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in _SUBSCRIPTION_OPTIONS if name in opts]
    display = {"assign": "assign", "subscribe": "subscribe", "subscribepattern": "subscribePattern"}
    if len(given) != 1:
        named = ", ".join(display[n] for n in given) or "none"
        raise SparkOptionError(
            "exactly one of the options assign, subscribe, subscribePattern is required "
            f"(given: {named})"
        )
    kind = given[0]
    value = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SparkOptionError("option subscribe: expected a comma-separated list of topics")
        return Subscription(kind="subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as e:
            raise SparkOptionError(
                f"option subscribePattern: {value!r} is not a regex ({e})"
            ) from None
        return Subscription(kind="subscribePattern", pattern=value)
    try:
        partitions = parse_assign_json(value)
    except OffsetsJsonError as e:
        raise SparkOptionError(f"option assign: {e}") from None
    if not partitions:
        raise SparkOptionError("option assign: names no partition")
    return Subscription(kind="assign", partitions=tuple(partitions))


def _offsets_spec(
    opts: Mapping[str, str], name: str, display: str, *, default: str, refused: int | None
) -> OffsetsSpec:
    text = opts.get(name, default).strip()
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        if (lowered == "earliest" and refused == EARLIEST) or (
            lowered == "latest" and refused == LATEST
        ):
            raise SparkOptionError(f"option {display}: {lowered} is not allowed here")
        return OffsetsSpec(kind="earliest" if lowered == "earliest" else "latest")
    try:
        offsets = parse_offsets_json(text)
    except OffsetsJsonError as e:
        raise SparkOptionError(f"option {display}: {e}") from None
    for tp, offset in offsets.items():
        if refused is not None and offset == refused:
            word = "earliest (-2)" if refused == EARLIEST else "latest (-1)"
            raise SparkOptionError(f"option {display}: {word} is not allowed here (for {tp})")
    return OffsetsSpec(
        kind="offsets",
        offsets=offsets,
        default=EARLIEST if name == "startingoffsets" else LATEST,
    )


#: The source's own options (lower case; ``kafka.`` settings are checked apart).
_SOURCE_OPTIONS: Final = frozenset(
    {
        "bootstrap.servers",
        "isolation.level",
        *_SUBSCRIPTION_OPTIONS,
        "startingoffsets",
        "startingtimestamp",
        "startingoffsetsbytimestampstrategy",
        "endingoffsets",
        "failondataloss",
        "includeheaders",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "minpartitions",
        "maxrecordsperpartition",
        "kafkaconsumer.polltimeoutms",
    }
)

#: Spark's Kafka source options this connector does not offer, and why.
_OFFSET_LOOKUPS: Final = "offset lookups are raftka's admin client's, bounded by its own timeout"

_SOURCE_REFUSED: Final = {
    "groupidprefix": "the raftka connector reads without a consumer group",
    "fetchoffset.numretries": _OFFSET_LOOKUPS,
    "fetchoffset.retryintervalms": _OFFSET_LOOKUPS,
    "startingoffsetsbytimestamp": "use startingTimestamp (one timestamp for every "
    "partition) or startingOffsets",
    "endingoffsetsbytimestamp": "use endingOffsets",
    "endingtimestamp": "use endingOffsets",
}


#: The sink's own options. Spark adds ``checkpointLocation`` to a streaming query's.
_SINK_OPTIONS: Final = frozenset(
    {"bootstrap.servers", "topic", "replayprotection", "checkpointlocation"}
)

_SINK_REFUSED: Final = {
    "path": "the raftka sink writes to the topic option or the topic column",
}


def _refuse_unknown(
    options: Mapping[str, str],
    known: frozenset[str],
    refused: Mapping[str, str],
    side: Literal["source", "sink"],
) -> None:
    """Every option is one this connector honours: an unknown one (a typo, or a Spark
    option it does not offer) is refused by name, as given, rather than ignored."""
    for given in sorted(options):
        key = given.lower()
        if key.startswith("kafka.") or key in known:
            continue
        if key in refused:
            raise SparkOptionError(f"option {given} is not supported: {refused[key]}")
        raise SparkOptionError(
            f"option {given} is not one the raftka {side} takes (known: "
            f"{', '.join(sorted(known))}, and kafka.* client settings)"
        )


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """The source's settings for a batch (``streaming=False``) or streaming read."""
    opts = _lower(options)
    _refuse_unknown(options, _SOURCE_OPTIONS, _SOURCE_REFUSED, "source")
    isolation_level = _isolation(opts)
    if "kafka.transactional.id" in opts:
        raise SparkOptionError(
            "option kafka.transactional.id is a sink option (the source only reads)"
        )
    subscription = _subscription(opts)
    starting = _offsets_spec(
        opts,
        "startingoffsets",
        "startingOffsets",
        default="latest" if streaming else "earliest",
        refused=None if streaming else LATEST,
    )
    if "startingtimestamp" in opts:
        ts: int = _parse(opts, "startingtimestamp", _int, "startingTimestamp")
        if ts < 0:
            raise SparkOptionError(f"option startingTimestamp: must be >= 0, not {ts}")
        starting = OffsetsSpec(kind="timestamp", timestamp_ms=ts)
    if streaming and "endingoffsets" in opts:
        raise SparkOptionError("option endingOffsets is for batch queries only")
    ending = _offsets_spec(
        opts, "endingoffsets", "endingOffsets", default="latest", refused=EARLIEST
    )
    for spec, display in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        for tp in spec.offsets:
            if subscription.kind == "assign" and tp not in subscription.partitions:
                raise SparkOptionError(
                    f"option {display}: {tp} is not among the assigned partitions"
                )
            if not subscription.matches(tp.topic):
                raise SparkOptionError(f"option {display}: topic {tp.topic!r} is not subscribed")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(
            f"option startingOffsetsByTimestampStrategy: error or latest, not {strategy!r}"
        )
    fail_on_data_loss = True
    if "failondataloss" in opts:
        fail_on_data_loss = _parse(opts, "failondataloss", _bool, "failOnDataLoss")
    include_headers = False
    if "includeheaders" in opts:
        include_headers = _parse(opts, "includeheaders", _bool, "includeHeaders")
    max_trigger_delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS
    if "maxtriggerdelay" in opts:
        max_trigger_delay_ms = parse_duration_ms(opts["maxtriggerdelay"], option="maxTriggerDelay")
    poll_timeout_ms = _positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        bootstrap_servers=_bootstrap(opts),
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=fail_on_data_loss,
        include_headers=include_headers,
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger"),
        max_trigger_delay_ms=max_trigger_delay_ms,
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive(
            opts, "maxrecordsperpartition", "maxRecordsPerPartition"
        ),
        poll_timeout_ms=DEFAULT_POLL_TIMEOUT_MS if poll_timeout_ms is None else poll_timeout_ms,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        isolation_level=isolation_level,
        consumer=_client_settings(opts, CONSUMER_SETTINGS),
        security=_security(opts),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """The sink's settings (batch and streaming)."""
    opts = _lower(options)
    _refuse_unknown(options, _SINK_OPTIONS, _SINK_REFUSED, "sink")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise SparkOptionError("option topic: must not be empty")
    replay_protection = True
    if "replayprotection" in opts:
        replay_protection = _parse(opts, "replayprotection", _bool, "replayProtection")
    prefix = opts.get("kafka.transactional.id")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise SparkOptionError("option kafka.transactional.id: must not be empty")
        if not replay_protection:
            # Transactional mode skips a batch a partition already committed: turning
            # that off would write it twice, contradicting the transactions.
            raise SparkOptionError(
                "options kafka.transactional.id and replayProtection=false contradict: "
                "transactional writes always skip a batch already committed"
            )
    producer = _client_settings(opts, PRODUCER_SETTINGS)
    if prefix is not None and producer.get("enable_idempotence") is False:
        raise SparkOptionError(
            "option kafka.enable.idempotence=false: kafka.transactional.id needs the "
            "idempotent producer"
        )
    if prefix is None and "transaction_timeout_ms" in producer:
        raise SparkOptionError(
            "option kafka.transaction.timeout.ms needs kafka.transactional.id (it bounds "
            "a transaction; without one the sink writes none)"
        )
    if prefix is not None and producer.get("acks", "all") not in ("all", -1):
        raise SparkOptionError(
            f"option kafka.acks={producer['acks']}: kafka.transactional.id needs acks=all"
        )
    return SinkOptions(
        bootstrap_servers=_bootstrap(opts),
        topic=None if topic is None else topic.strip(),
        replay_protection=replay_protection,
        transactional_id_prefix=prefix,
        producer=producer,
        security=_security(opts),
    )
