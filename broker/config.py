"""A broker process's configuration: Kafka's broker keys on top of the node config.

``raftka broker --config FILE`` reads a ``.properties`` or TOML file through
:mod:`raftka.server_common.node_config` (``node.id``, ``listeners``, ``advertised.listeners``,
``controller.quorum.voters``, ``log.dirs``, ...) and adds the broker's own keys
(:data:`BROKER_KEYS`), with Kafka's names and defaults. Every key must be known: a
typo is an error naming the key.

Kafka keys kept here (defaults are Kafka's unless noted):

========================================== =========== ==================================
key                                        default     meaning
========================================== =========== ==================================
replica.lag.time.max.ms                    30000       ISR shrink after this lag
min.insync.replicas                        1           acks=all durability floor
default.replication.factor                 1           (controller key, accepted here)
broker.heartbeat.interval.ms               2000        heartbeat period
request.timeout.ms                         30000       produce timeout cap; controller calls
replica.fetch.wait.max.ms                  500         follower long-poll
replica.fetch.max.bytes                    1048576     per partition per follower fetch
replica.fetch.response.max.bytes           10485760    per follower fetch
replica.fetch.backoff.ms                   1000        after a failed follower fetch
replica.high.watermark.checkpoint.interval.ms 5000     HW checkpoint period
message.max.bytes                          1048588     largest batch (topic: max.message.bytes)
controlled.shutdown.enable                 true        move leaderships away on SIGTERM
controlled.shutdown.timeout.ms             30000       raftka's bound on that wait
offsets.topic.num.partitions               50          __consumer_offsets partitions
offsets.topic.replication.factor           3           its replication (needs as many brokers)
offsets.commit.timeout.ms                  5000        acks=all wait of a commit append
offsets.retention.minutes                  10080       committed offsets of empty groups
transaction.state.log.num.partitions       50          __transaction_state partitions
transaction.state.log.replication.factor   3           its replication (needs as many brokers)
transaction.state.log.min.isr              2           its min.insync.replicas (<= RF)
transaction.state.log.segment.bytes        104857600   its segment.bytes
transaction.max.timeout.ms                 900000      largest transaction.timeout.ms
transactional.id.expiration.ms             604800000   idle transactional ids expire
transaction.abort.timed.out.transaction.cleanup.interval.ms 10000  timeout check period
transaction.remove.expired.transaction.cleanup.interval.ms 3600000 expiry check period
transaction.version                        2           highest KIP-890 version (1 or 2)
offsets.retention.check.interval.ms        600000      how often they are expired
offset.metadata.max.bytes                  4096        metadata string of a commit
group.initial.rebalance.delay.ms           3000        first rebalance of an empty group
group.min.session.timeout.ms               6000        session.timeout.ms bounds
group.max.session.timeout.ms               1800000
group.max.size                             2147483647  members per group
log.segment.bytes, log.retention.ms, ...   (LogConfig) broker-wide log defaults
log.cleaner.enable                         true        run the log cleaner (compaction)
log.cleaner.backoff.ms                     15000       cleaner's sleep when nothing to do
log.cleaner.dedupe.buffer.size             134217728   the cleaner's offset map bound
log.cleaner.io.buffer.size                 524288      kept bytes buffered per write
log.cleaner.threads                        1           only 1 (refused otherwise)
socket.request.max.bytes                   104857600   largest Kafka-protocol request
connections.max.idle.ms                    600000      idle Kafka connections close
connection.failed.authentication.delay.ms  100         SASL failure answered, then close
connections.max.reauth.ms                  0           SASL session lifetime (KIP-368)
max.connections                            2147483647  open Kafka connections at most
auto.create.topics.enable                  true        Metadata creates unknown topics
authorizer.class.name                      (empty)     StandardAuthorizer: enforce ACLs
super.users                                (empty)     ;-separated principals never denied
allow.everyone.if.no.acl.found             false       allow a resource no ACL names
num.io.threads                             8           I/O worker threads (disk work)
queued.max.requests                        500         disk jobs waiting for a worker
log.flush.scheduler.interval.ms            1000        flush.ms check period (see below)
num.recovery.threads.per.data.dir          1           logs opened at once, per log dir
transaction.partition.verification.enable  true        KIP-890 part 1 on produce
========================================== =========== ==================================

Listeners: the first entry of ``listeners`` (and ``advertised.listeners``) is raftka's
HTTP API, as before, whatever its name (``HTTP://host:port`` reads best). A
``PLAINTEXT://host:port`` or ``SSL://host:port`` entry after it is the Kafka
binary-protocol listener (``raftka.broker.kafka``); its advertised address is the entry
of the same name in ``advertised.listeners``, else its own. An SSL listener takes the
TLS settings of ``raftka.server_common.tls`` (``ssl.certfile``, ``ssl.keyfile``,
``ssl.cafile``, ``ssl.client.auth``, ..., also as ``listener.name.ssl.ssl.*``) and
refuses to start when its certificate cannot be loaded; ``ssl.*`` keys without an SSL
listener are refused. With client certificates asked for (``ssl.client.auth``), an SSL
listener names a connection's principal after its certificate's subject by
``ssl.principal.mapping.rules`` (``raftka.server_common.ssl_principal``). A
``SASL_PLAINTEXT://`` or ``SASL_SSL://`` listener (SASL_SSL takes the same TLS
settings, also as ``listener.name.sasl_ssl.ssl.*``) authenticates every connection
with ``sasl.enabled.mechanisms`` (or
``listener.name.<listener>.sasl.enabled.mechanisms``): SCRAM-SHA-256, SCRAM-SHA-512
and PLAIN, checked against the SCRAM credentials of the metadata log (``raftka
users``). It must be set: Kafka's default, GSSAPI, is not supported, and a SASL setting
without a SASL listener is refused. Without ``listener.security.protocol.map`` a
listener's name is its protocol (Kafka's default map); with it, listeners are named
freely and renamed to these names before any of this is read
(``raftka.server_common.listener_map``). A single-entry ``listeners``
has no Kafka listener (the configs written before it existed keep their meaning).
``inter.broker.listener.name`` may only name that first listener: the nodes talk to
each other over the HTTP API, never over the Kafka listener. A
first entry named ``HTTPS`` serves the HTTP API over TLS with client certificates, and
the broker then talks HTTPS to every other node (``raftka.server_common.node_http``:
``listener.name.https.ssl.*``, ``super.users`` as the node principals).

``num.io.threads`` and ``queued.max.requests`` size the broker's I/O workers
(broker/io_workers.py): log recovery at start-up, fsyncs, retention, producer-state
snapshots and HW checkpoint writes run there, off the event loop; at most
``num.recovery.threads.per.data.dir`` logs per log dir are opened (recovered) at once
(recovery is mostly Python work holding the GIL: more at once would not finish sooner,
only take the GIL from the event loop more often).
``log.flush.scheduler.interval.ms`` is how often the broker looks for logs whose
``flush.ms`` has passed with unflushed records (Kafka's default, Long.MAX_VALUE, never
looks, so an idle partition would never be flushed by time; raftka looks every second).

``log.cleaner.threads`` accepts only 1 (raftka runs one cleaner thread per broker, the
whole dedupe buffer is its own); any other value is refused by name rather than
accepted and ignored. ``log.cleaner.io.max.bytes.per.second`` (throttling) is not
implemented and so not accepted.

The authorizer (``raftka.broker.kafka.authorization``) checks ACLs on the Kafka
listener: ``authorizer.class.name`` accepts Kafka's KRaft
``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` (any other class is
refused), and ``super.users`` (unless the HTTP API is HTTPS, which reads it too) or
``allow.everyone.if.no.acl.found`` without it are refused by name rather than accepted
and ignored. With it on, an HTTPS HTTP API checks the same ACLs on the routes raftka's
client uses (``raftka.broker.http_acls``) and serves its other routes to ``super.users``
only.

``controlled.shutdown.timeout.ms`` is raftka's: Kafka's KRaft broker waits for the
controller without a bound of its own; a process manager's stop timeout bounds it.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from raftka.broker.replication.partition_state import ReplicationConfig
from raftka.common.errors import InvalidConfigError
from raftka.common.record.header import HEADER_SIZE
from raftka.metadata.authorizer import AuthorizerConfig
from raftka.metadata.topic_config import parse_bool
from raftka.server_common.node_config import NodeConfig, load_node_config
from raftka.server_common.node_http import (
    PLAIN_HTTP,
    NodeHttp,
    api_listener_name,
    parse_super_users,
)
from raftka.server_common.process_config import ConfigError, int_property, parse_host_port
from raftka.server_common.sasl import SASL_MECHANISMS
from raftka.server_common.ssl_principal import DEFAULT_MAPPER, SslPrincipalMapper
from raftka.server_common.tls import ClientAuth, server_context, tls_keys_for, tls_settings
from raftka.storage.cleaner import (
    DEDUPE_BUFFER_BYTES_DEFAULT,
    IO_BUFFER_BYTES_DEFAULT,
    MAP_ENTRY_OVERHEAD_BYTES,
    CleanerConfig,
)
from raftka.storage.log_config import LogConfig
from raftka.storage.log_validator import ValidationConfig, compression_for

__all__ = [
    "BROKER_KEYS",
    "LOG_KEY_PREFIX",
    "BrokerConfig",
    "KafkaListenerConfig",
    "broker_config",
    "kafka_listener_config",
    "load_broker_config",
]

# Broker-wide log defaults are Kafka's ``log.``-prefixed topic keys.
LOG_KEY_PREFIX: Final = "log."
log = logging.getLogger("raftka.broker.config")

_LOG_KEYS: Final[Mapping[str, str]] = {
    # broker key -> topic (LogConfig) key
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "message.max.bytes": "max.message.bytes",
}

_INT_KEYS: Final[Mapping[str, tuple[int, int]]] = {
    # key -> (default, minimum)
    "replica.lag.time.max.ms": (30_000, 1),
    "min.insync.replicas": (1, 1),
    "broker.heartbeat.interval.ms": (2_000, 1),
    "request.timeout.ms": (30_000, 1),
    "replica.fetch.wait.max.ms": (500, 0),
    "replica.fetch.max.bytes": (1024 * 1024, 1),
    "replica.fetch.response.max.bytes": (10 * 1024 * 1024, 1),
    "replica.fetch.backoff.ms": (1_000, 0),
    "replica.high.watermark.checkpoint.interval.ms": (5_000, 1),
    "controlled.shutdown.timeout.ms": (30_000, 0),
    "offsets.topic.num.partitions": (50, 1),
    "offsets.topic.replication.factor": (3, 1),
    "offsets.commit.timeout.ms": (5_000, 1),
    "offsets.retention.minutes": (7 * 24 * 60, 1),
    "offsets.retention.check.interval.ms": (600_000, 1),
    # The transaction coordinator (broker/coordinator/transaction_service.py).
    "transaction.state.log.num.partitions": (50, 1),
    "transaction.state.log.replication.factor": (3, 1),
    "transaction.state.log.min.isr": (2, 1),
    "transaction.state.log.segment.bytes": (104_857_600, 1),
    "transaction.max.timeout.ms": (900_000, 1),
    "transactional.id.expiration.ms": (604_800_000, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (10_000, 1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (3_600_000, 1),
    # Kafka's transaction.version feature level (KIP-890 part 2 at 2); 1 or 2.
    "transaction.version": (2, 1),
    # Kafka's log.retention.check.interval.ms (5 min) and producer id expiry (KIP-854).
    "log.retention.check.interval.ms": (300_000, 1),
    "producer.id.expiration.ms": (86_400_000, 1),
    "producer.id.expiration.check.interval.ms": (600_000, 1),
    "offset.metadata.max.bytes": (4096, 0),
    "group.initial.rebalance.delay.ms": (3_000, 0),
    "group.min.session.timeout.ms": (6_000, 1),
    "group.max.session.timeout.ms": (1_800_000, 1),
    "group.max.size": (2**31 - 1, 1),
    # The log cleaner (Kafka's log.cleaner.*; storage/cleaner.py, broker/log_cleaning.py).
    "log.cleaner.backoff.ms": (15_000, 0),
    "log.cleaner.dedupe.buffer.size": (DEDUPE_BUFFER_BYTES_DEFAULT, MAP_ENTRY_OVERHEAD_BYTES),
    "log.cleaner.io.buffer.size": (IO_BUFFER_BYTES_DEFAULT, HEADER_SIZE),
    "log.cleaner.threads": (1, 1),
    # The Kafka listener (raftka.broker.kafka).
    "socket.request.max.bytes": (104_857_600, 1),
    "connections.max.idle.ms": (600_000, 1),
    "connection.failed.authentication.delay.ms": (100, 0),
    # KIP-368: 0 (Kafka's default) never asks a SASL client to re-authenticate.
    "connections.max.reauth.ms": (0, 0),
    "max.connections": (2**31 - 1, 1),
    # The I/O workers (broker/io_workers.py) and the flush.ms timer.
    "num.io.threads": (8, 1),
    "queued.max.requests": (500, 1),
    "log.flush.scheduler.interval.ms": (1_000, 1),
    "num.recovery.threads.per.data.dir": (1, 1),
}

# The SSL listener's TLS keys. Not ssl.endpoint.identification.algorithm: it governs a
# TLS client's check of the server, and the broker makes no TLS connections of its own
# yet, so it would be accepted and never used (it is refused as an unknown key).
_BROKER_TLS_KEYS: Final = frozenset(
    k
    for k in tls_keys_for("SSL") | tls_keys_for("SASL_SSL")
    if not k.endswith("ssl.endpoint.identification.algorithm")
)
#: A SASL listener's mechanisms (Kafka's key, also per listener).
_SASL_KEYS: Final = frozenset(
    {"sasl.enabled.mechanisms"}
    | {f"listener.name.{n}.sasl.enabled.mechanisms" for n in ("sasl_plaintext", "sasl_ssl")}
)

#: Keys that only a SASL listener uses: refused by name without one (never ignored).
_SASL_ONLY_KEYS: Final = _SASL_KEYS | {
    "connection.failed.authentication.delay.ms",
    "connections.max.reauth.ms",
}
#: Kafka's mTLS principal rules: only an SSL listener that asks for client certificates
#: names its principals after them (on SASL_SSL the SASL user is the principal).
_PRINCIPAL_RULES_KEYS: Final = frozenset(
    {"ssl.principal.mapping.rules", "listener.name.ssl.ssl.principal.mapping.rules"}
)

#: Kafka's KRaft authorizer, the one value ``authorizer.class.name`` accepts.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: Keys that only the authorizer uses: refused by name without it (never ignored).
_AUTHORIZER_ONLY_KEYS: Final = frozenset({"super.users", "allow.everyone.if.no.acl.found"})
_AUTHORIZER_KEYS: Final = _AUTHORIZER_ONLY_KEYS | {"authorizer.class.name"}

BROKER_KEYS: Final[frozenset[str]] = frozenset(
    _BROKER_TLS_KEYS
    | _SASL_KEYS
    | _PRINCIPAL_RULES_KEYS
    | set(_INT_KEYS)
    | set(_LOG_KEYS)
    | {"controlled.shutdown.enable", "broker.rack", "log.cleaner.enable"}
    | {"auto.create.topics.enable", "transaction.partition.verification.enable"}
    | {"inter.broker.listener.name"}
    | _AUTHORIZER_KEYS
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaListenerConfig:
    """The Kafka binary-protocol listener (``PLAINTEXT://``, ``SSL://``,
    ``SASL_PLAINTEXT://`` or ``SASL_SSL://`` in ``listeners``)."""

    host: str
    port: int
    advertised_host: str
    advertised_port: int
    socket_request_max_bytes: int = 104_857_600
    connections_max_idle_ms: int = 600_000
    max_connections: int = 2**31 - 1
    #: How long a SASL connection whose authentication failed stays open after the
    #: failure's answer (Kafka's connection.failed.authentication.delay.ms).
    failed_authentication_delay_ms: int = 100
    #: KIP-368's session lifetime of a SASL connection (connections.max.reauth.ms; 0:
    #: none): a client must re-authenticate within it to go on using the connection.
    connections_max_reauth_ms: int = 0
    #: The listener's name, which is its security protocol (Kafka's default map).
    security_protocol: str = "PLAINTEXT"
    #: The TLS context of an SSL or SASL_SSL listener, built (and its files loaded) at
    #: config time, so a listener that cannot load its certificate refuses to start.
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    #: sasl.enabled.mechanisms of a SASL listener; empty: no authentication.
    sasl_mechanisms: tuple[str, ...] = ()
    #: An SSL listener with ssl.client.auth required or requested: how a client
    #: certificate's subject becomes the connection's principal
    #: (ssl.principal.mapping.rules); None: no certificate principals.
    principal_mapper: SslPrincipalMapper | None = field(default=None, compare=False)


#: Kafka's security protocols, each served by the Kafka listener.
_KAFKA_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_TLS_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})


def _sasl_mechanisms(props: Mapping[str, str], protocol: str) -> tuple[str, ...]:
    """sasl.enabled.mechanisms of a SASL listener (the per-listener key first)."""
    for key in (
        f"listener.name.{protocol.lower()}.sasl.enabled.mechanisms",
        "sasl.enabled.mechanisms",
    ):
        if key in props:
            names = tuple(
                dict.fromkeys(m.strip().upper() for m in props[key].split(",") if m.strip())
            )
            unknown = [m for m in names if m not in SASL_MECHANISMS]
            if unknown or not names:
                raise ConfigError(
                    f"{key}: {', '.join(unknown) or 'no mechanism'} is not supported; "
                    f"the mechanisms are {', '.join(SASL_MECHANISMS)}"
                )
            return names
    raise ConfigError(
        f"listeners: the {protocol} listener needs sasl.enabled.mechanisms (Kafka's "
        f"default, GSSAPI, is not supported; choose from {', '.join(SASL_MECHANISMS)})"
    )


def _listener_entries(text: str, key: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` as (NAME, host, port); names unique (Kafka's rule)."""
    out: list[tuple[str, str, int]] = []
    for raw in (e.strip() for e in text.split(",")):
        if not raw:
            continue
        name, sep, address = raw.partition("://")
        if not sep:
            name, address = "", raw
        host, port = parse_host_port(address, key)
        if name and any(name.upper() == n for n, _, _ in out):
            raise ConfigError(f"{key}: listener name {name!r} appears twice")
        out.append((name.upper(), host, port))
    return out


def kafka_listener_config(props: Mapping[str, str]) -> KafkaListenerConfig | None:
    """The Kafka listener of ``listeners`` (every entry after the first, HTTP, one);
    ConfigError naming the key for a security protocol raftka cannot serve yet."""
    entries = _listener_entries(props.get("listeners", ""), "listeners")[1:]
    tls_given = sorted(k for k in props if k in _BROKER_TLS_KEYS)
    sasl_given = sorted(k for k in props if k in _SASL_ONLY_KEYS)
    if not entries:
        if tls_given:
            raise ConfigError(f"{tls_given[0]}: no SSL listener uses it (listeners)")
        if sasl_given:
            raise ConfigError(f"{sasl_given[0]}: no SASL listener uses it (listeners)")
        return None
    if len(entries) > 1:
        raise ConfigError("listeners: one Kafka listener after the HTTP API, not several")
    protocol, host, port = entries[0]
    if protocol not in _KAFKA_PROTOCOLS:
        raise ConfigError(
            f"listeners: listener {protocol or '(unnamed)'!r} after the first (the HTTP API) "
            "must be PLAINTEXT://, SSL://, SASL_PLAINTEXT:// or SASL_SSL://host:port"
        )
    own = f"listener.name.{protocol.lower()}."
    stray = [
        k
        for k in tls_given + sasl_given
        if k.startswith("listener.name.") and not k.startswith(own)
    ]
    if stray:
        raise ConfigError(f"{stray[0]}: no listener of that name (listeners)")
    context = None
    mapper = None
    if protocol in _TLS_PROTOCOLS:
        settings = tls_settings(props, protocol)
        context = server_context(settings)
        mapper = _principal_mapper(props, protocol, settings.client_auth)
    elif tls_given:
        raise ConfigError(f"{tls_given[0]}: no SSL listener uses it (listeners)")
    elif rules_given := sorted(k for k in props if k in _PRINCIPAL_RULES_KEYS):
        raise ConfigError(f"{rules_given[0]}: no SSL listener uses it (listeners)")
    mechanisms: tuple[str, ...] = ()
    if protocol.startswith("SASL_"):
        mechanisms = _sasl_mechanisms(props, protocol)
    elif sasl_given:
        raise ConfigError(f"{sasl_given[0]}: no SASL listener uses it (listeners)")
    advertised = _listener_entries(props.get("advertised.listeners", ""), "advertised.listeners")
    adv_host, adv_port = host, port
    for name, a_host, a_port in advertised[1:]:
        if name != protocol:
            raise ConfigError(
                f"advertised.listeners: {name or '(unnamed)'!r} is not a listener of listeners"
            )
        adv_host, adv_port = a_host, a_port
    if adv_host in ("0.0.0.0", "::", ""):
        raise ConfigError(
            f"advertised.listeners: the {protocol} listener binds to a wildcard address; "
            "advertise a host clients can reach"
        )
    return KafkaListenerConfig(
        host=host,
        port=port,
        advertised_host=adv_host,
        advertised_port=adv_port,
        socket_request_max_bytes=_int(props, "socket.request.max.bytes"),
        connections_max_idle_ms=_int(props, "connections.max.idle.ms"),
        failed_authentication_delay_ms=_int(props, "connection.failed.authentication.delay.ms"),
        connections_max_reauth_ms=_int(props, "connections.max.reauth.ms"),
        max_connections=_int(props, "max.connections"),
        security_protocol=protocol,
        ssl_context=context,
        sasl_mechanisms=mechanisms,
        principal_mapper=mapper,
    )


def _principal_mapper(
    props: Mapping[str, str], protocol: str, client_auth: ClientAuth
) -> SslPrincipalMapper | None:
    """The SSL listener's ssl.principal.mapping.rules (Kafka's default: DEFAULT), when
    it asks for client certificates; the setting anywhere else is refused by name, as
    it would name no principal."""
    given = [
        k
        for k in ("listener.name.ssl.ssl.principal.mapping.rules", "ssl.principal.mapping.rules")
        if k in props
    ]
    if protocol != "SSL":
        if given:
            raise ConfigError(
                f"{given[0]}: a {protocol} listener's principal is its SASL user; "
                "certificate principals are an SSL listener's"
            )
        return None
    if client_auth is ClientAuth.NONE:
        if given:
            raise ConfigError(
                f"{given[0]}: the SSL listener asks for no client certificate "
                "(ssl.client.auth=none); set ssl.client.auth=required or requested"
            )
        return None
    return SslPrincipalMapper.from_rules(props[given[0]], given[0]) if given else DEFAULT_MAPPER


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """What the broker process needs; see the module doc for the keys."""

    node_id: int
    listen_host: str
    listen_port: int
    advertised_host: str
    advertised_port: int
    log_dirs: tuple[Path, ...]
    controllers: tuple[str, ...]  # host:port of every controller
    controller_ids: tuple[int, ...] = ()  # their node ids, in the same order
    rack: str | None = None
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False
    broker_heartbeat_interval_ms: int = 2_000
    broker_session_timeout_ms: int = 9_000
    request_timeout_ms: int = 30_000
    # controller.quorum.request.timeout.ms: bounds each attempt at one controller, so a
    # silent controller cannot use up a heartbeat's whole deadline.
    controller_quorum_request_timeout_ms: int = 2_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    controlled_shutdown_enable: bool = True
    controlled_shutdown_timeout_ms: int = 30_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_commit_timeout_ms: int = 5_000
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_version: int = 2
    log_retention_check_interval_ms: int = 300_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_size: int = DEDUPE_BUFFER_BYTES_DEFAULT
    log_cleaner_io_buffer_size: int = IO_BUFFER_BYTES_DEFAULT
    num_io_threads: int = 8
    queued_max_requests: int = 500
    log_flush_scheduler_interval_ms: int = 1_000
    num_recovery_threads_per_data_dir: int = 1
    log_level: str = "INFO"
    # The Kafka binary-protocol listener: None when ``listeners`` names none.
    kafka_listener: KafkaListenerConfig | None = None
    auto_create_topics_enable: bool = True
    # authorizer.class.name, super.users, allow.everyone.if.no.acl.found: None when no
    # authorizer is configured (every Kafka request is allowed, Kafka's default).
    authorizer: AuthorizerConfig | None = None
    # KIP-890 part 1: verify a producer's first transactional batch at a partition with
    # the transaction coordinator (broker/txn_verification.py).
    transaction_partition_verification_enable: bool = True
    # Broker-wide log defaults under the topic keys LogConfig reads.
    log_defaults: Mapping[str, str] = field(default_factory=dict)
    # The HTTP API's scheme, TLS contexts and node principals (server_common/node_http.py).
    http: NodeHttp = PLAIN_HTTP
    # Every property as given (the properties file, flattened): what DescribeConfigs
    # of this broker answers as its static configs.
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.log_dirs, "at least one log dir"
        assert self.controllers, "at least one controller"

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"

    def replication_config(self, topic_config: Mapping[str, str]) -> ReplicationConfig:
        """The replication settings of a topic: its min.insync.replicas overrides ours."""
        raw = topic_config.get("min.insync.replicas")
        min_isr = self.min_insync_replicas
        if raw is not None:
            # Validated by the controller; keep the broker default if it does not parse.
            with contextlib.suppress(ValueError):
                min_isr = max(1, int(raw))
        return ReplicationConfig(
            replica_lag_time_max_ms=self.replica_lag_time_max_ms, min_insync_replicas=min_isr
        )

    def log_config(self, topic_config: Mapping[str, str]) -> LogConfig:
        """The log settings of a topic: its own keys over the broker's ``log.*`` ones.
        Keys the segment log does not read (replication's, the producer's) are skipped.

        The controller refuses values the log cannot take, so a bad one here means an
        older controller or a hand-edited log: that key alone is dropped, with a
        warning naming it, and every other override stays (never a silent fall back to
        all defaults, which would e.g. delete a compacted topic by time)."""
        known = {f.replace("_", ".") for f in LogConfig.__dataclass_fields__}
        merged = {k: v for k, v in {**self.log_defaults, **topic_config}.items() if k in known}
        try:
            return LogConfig.from_properties(merged)
        except InvalidConfigError:
            pass
        kept: dict[str, str] = {}
        for key, value in merged.items():
            try:
                LogConfig.from_properties({**kept, key: value})
            except InvalidConfigError as error:
                log.warning(
                    "topic config ignored",
                    extra={"fields": {"key": key, "value": value, "reason": error.message}},
                )
                continue
            kept[key] = value
        return LogConfig.from_properties(kept)

    def cleaner_config(self) -> CleanerConfig:
        return CleanerConfig(
            dedupe_buffer_bytes=self.log_cleaner_dedupe_buffer_size,
            io_buffer_bytes=self.log_cleaner_io_buffer_size,
        )

    def validation_config(
        self, log_config: LogConfig, topic_config: Mapping[str, str]
    ) -> ValidationConfig:
        """What the leader checks in a producer's batches for a topic with these log
        settings (storage/log_validator.py), and the codec it stores them in."""
        return ValidationConfig(
            log_append_time=log_config.log_append_time,
            timestamp_before_max_ms=log_config.message_timestamp_before_max_ms,
            timestamp_after_max_ms=log_config.message_timestamp_after_max_ms,
            compacted=log_config.compact,
            compression=compression_for(topic_config.get("compression.type")),
        )


def _int(props: Mapping[str, str], key: str) -> int:
    default, minimum = _INT_KEYS[key]
    return int_property(props, key, default, minimum)


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    value = parse_bool(raw)
    if value is None:
        raise ConfigError(f"{key} must be true or false, got {raw!r}")
    return value


def _transaction_settings(props: Mapping[str, str]) -> dict[str, int]:
    """The transaction coordinator's keys as BrokerConfig fields (the key with '_')."""
    keys = (
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.state.log.segment.bytes",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "transaction.version",
    )
    settings = {key.replace(".", "_"): _int(props, key) for key in keys}
    min_isr = settings["transaction_state_log_min_isr"]
    replication = settings["transaction_state_log_replication_factor"]
    if min_isr > replication:
        # Kafka would create the topic and then refuse every write to it
        # (NOT_ENOUGH_REPLICAS): say so at start instead.
        raise ConfigError(
            f"transaction.state.log.min.isr ({min_isr}) exceeds "
            f"transaction.state.log.replication.factor ({replication}): every write to "
            "__transaction_state would fail"
        )
    if settings["transaction_version"] not in (1, 2):
        raise ConfigError(
            f"transaction.version must be 1 or 2, got {settings['transaction_version']}"
        )
    return settings


def authorizer_config(props: Mapping[str, str], *, https: bool = False) -> AuthorizerConfig | None:
    """The Kafka listener's authorizer settings; None when ``authorizer.class.name`` is
    empty (the default). ConfigError naming the key for another class, a malformed
    principal, or a setting given without the authorizer (it would do nothing)."""
    name = props.get("authorizer.class.name", "").strip()
    if not name:
        # An HTTPS API reads super.users too (its node principals).
        given = sorted(
            k for k in props if k in _AUTHORIZER_ONLY_KEYS and not (https and k == "super.users")
        )
        if given:
            raise ConfigError(f"{given[0]}: no authorizer uses it (authorizer.class.name)")
        return None
    if name != STANDARD_AUTHORIZER:
        raise ConfigError(
            f"authorizer.class.name: only {STANDARD_AUTHORIZER} is supported, got {name!r}"
        )
    return AuthorizerConfig(
        super_users=parse_super_users(props),
        allow_everyone_if_no_acl_found=_bool(props, "allow.everyone.if.no.acl.found", False),
    )


def _check_inter_broker_listener(props: Mapping[str, str]) -> None:
    """Kafka's ``inter.broker.listener.name``: the nodes talk to each other over
    raftka's HTTP API, the first listener, so only its name is accepted."""
    name = props.get("inter.broker.listener.name")
    if name is None:
        return
    api = api_listener_name(props)
    if name.strip().upper() != api:
        raise ConfigError(
            f"inter.broker.listener.name={name}: the nodes talk to each other over raftka's "
            f"HTTP API, the first listener ({api or 'unnamed'}); name it or leave the key out"
        )


def broker_config(node: NodeConfig) -> BrokerConfig:
    """The broker's view of a parsed node config; ConfigError when a value is wrong
    (naming the keys as the config file spells them)."""
    try:
        return _broker_config(node)
    except ConfigError as e:
        raise ConfigError(node.explain(str(e))) from None


def _broker_config(node: NodeConfig) -> BrokerConfig:
    props = node.properties
    if "broker" not in node.process_roles:
        raise ConfigError("process.roles does not include broker")
    kafka_listener = kafka_listener_config(props)
    _check_inter_broker_listener(props)
    authorizer = authorizer_config(props, https=node.http.secure)
    if authorizer is not None and kafka_listener is None:
        # It guards the Kafka listener only: without one it would guard nothing.
        raise ConfigError(
            "authorizer.class.name: no Kafka listener to guard (listeners); "
            "raftka's HTTP API is not authorized"
        )
    raw_dirs = props.get("log.dirs", "")
    log_dirs = tuple(Path(d.strip()) for d in raw_dirs.split(",") if d.strip())
    if not log_dirs:
        raise ConfigError("log.dirs is required for a broker")
    log_defaults = {_LOG_KEYS[k]: v for k, v in props.items() if k in _LOG_KEYS}
    try:
        LogConfig.from_properties(log_defaults)
    except InvalidConfigError as e:
        raise ConfigError(f"log settings: {e.message}") from None
    if _int(props, "log.cleaner.threads") != 1:
        # One cleaner thread per broker is what raftka runs; more would be a setting
        # accepted and not honoured.
        raise ConfigError(
            f"log.cleaner.threads must be 1 (raftka runs one cleaner thread), "
            f"got {props['log.cleaner.threads']!r}"
        )
    voters = sorted(node.voters.items())
    controllers = tuple(f"{host}:{port}" for _, (host, port) in voters)
    return BrokerConfig(
        node_id=node.node_id,
        listen_host=node.listen_host,
        listen_port=node.listen_port,
        advertised_host=node.advertised_host,
        advertised_port=node.advertised_port,
        log_dirs=log_dirs,
        controllers=controllers,
        controller_ids=tuple(node_id for node_id, _ in voters),
        rack=props.get("broker.rack") or None,
        replica_lag_time_max_ms=_int(props, "replica.lag.time.max.ms"),
        min_insync_replicas=_int(props, "min.insync.replicas"),
        default_replication_factor=node.controller.default_replication_factor,
        unclean_leader_election_enable=node.controller.unclean_leader_election_enable,
        broker_heartbeat_interval_ms=_int(props, "broker.heartbeat.interval.ms"),
        broker_session_timeout_ms=node.controller.broker_session_timeout_ms,
        request_timeout_ms=_int(props, "request.timeout.ms"),
        controller_quorum_request_timeout_ms=node.quorum.request_timeout_ms,
        replica_fetch_wait_max_ms=_int(props, "replica.fetch.wait.max.ms"),
        replica_fetch_max_bytes=_int(props, "replica.fetch.max.bytes"),
        replica_fetch_response_max_bytes=_int(props, "replica.fetch.response.max.bytes"),
        replica_fetch_backoff_ms=_int(props, "replica.fetch.backoff.ms"),
        replica_high_watermark_checkpoint_interval_ms=_int(
            props, "replica.high.watermark.checkpoint.interval.ms"
        ),
        controlled_shutdown_enable=_bool(props, "controlled.shutdown.enable", True),
        controlled_shutdown_timeout_ms=_int(props, "controlled.shutdown.timeout.ms"),
        offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions"),
        offsets_topic_replication_factor=_int(props, "offsets.topic.replication.factor"),
        offsets_commit_timeout_ms=_int(props, "offsets.commit.timeout.ms"),
        offsets_retention_minutes=_int(props, "offsets.retention.minutes"),
        offsets_retention_check_interval_ms=_int(props, "offsets.retention.check.interval.ms"),
        **_transaction_settings(props),
        log_retention_check_interval_ms=_int(props, "log.retention.check.interval.ms"),
        producer_id_expiration_ms=_int(props, "producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=_int(
            props, "producer.id.expiration.check.interval.ms"
        ),
        offset_metadata_max_bytes=_int(props, "offset.metadata.max.bytes"),
        group_initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms"),
        group_min_session_timeout_ms=_int(props, "group.min.session.timeout.ms"),
        group_max_session_timeout_ms=_int(props, "group.max.session.timeout.ms"),
        group_max_size=_int(props, "group.max.size"),
        log_cleaner_enable=_bool(props, "log.cleaner.enable", True),
        log_cleaner_backoff_ms=_int(props, "log.cleaner.backoff.ms"),
        log_cleaner_dedupe_buffer_size=_int(props, "log.cleaner.dedupe.buffer.size"),
        log_cleaner_io_buffer_size=_int(props, "log.cleaner.io.buffer.size"),
        num_io_threads=_int(props, "num.io.threads"),
        queued_max_requests=_int(props, "queued.max.requests"),
        log_flush_scheduler_interval_ms=_int(props, "log.flush.scheduler.interval.ms"),
        num_recovery_threads_per_data_dir=_int(props, "num.recovery.threads.per.data.dir"),
        log_level=node.log_level,
        kafka_listener=kafka_listener,
        auto_create_topics_enable=_bool(props, "auto.create.topics.enable", True),
        authorizer=authorizer,
        transaction_partition_verification_enable=_bool(
            props, "transaction.partition.verification.enable", True
        ),
        log_defaults=log_defaults,
        # With the authorizer on, only super.users may use an HTTPS API but for the routes
        # that check ACLs (broker/http_acls.py).
        http=node.http.serving_nodes_only(authorizer is not None),
        properties=dict(props),
    )


def load_broker_config(path: Path | str) -> BrokerConfig:
    """Read and check a broker's config file; ConfigError (naming the key) if wrong."""
    node = load_node_config(path, extra_keys=BROKER_KEYS)
    try:
        return broker_config(node)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
