"""Constructor keywords of kafka-python and aiokafka, sorted into three kinds.

- *mapped*: raftka has the option (same name or a renamed one) and honours it; the
  adapter passes it on, converting the unit or the spelling where needed.
- *handled*: kafka-python's and aiokafka's own options about versions, connections and
  metrics (:data:`CLIENT_OPTIONS`); :func:`take_client_options` honours each in
  raftka's terms (``api_version`` limits the features the adapter lets a program use,
  socket buffer sizes go onto the sockets, reconnect back-off onto ``retry_backoff_ms``,
  ``metrics_enabled`` onto ``metrics()``) or refuses the value by name where raftka
  cannot honour it (``None`` socket buffer sizes: the OS default, as in kafka-python).
- *refused unless honourable*: a feature the adapters do not offer (TLS options
  raftka's client lacks, such as ``ssl_crlfile``; SASL, which the HTTP API lacks;
  transactions, topic auto-creation, ...). The keyword is accepted only with a value
  that asks for nothing raftka lacks (``security_protocol="PLAINTEXT"``,
  ``ssl_cafile=None``, ...); any other value raises :class:`ClientConfigError`
  naming the keyword and why, at construction, never later.

Any other keyword raises ``ClientConfigError`` too (kafka-python refuses unknown
configs as well), so a typo never passes silently.
"""

from __future__ import annotations

import math
import selectors
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from raftka.client._transport import RESPONSE_BYTES_MAX
from raftka.client.config import ClientConfigError
from raftka.common.errors import UnsupportedVersionError

__all__ = [
    "CLIENT_OPTIONS",
    "DEFAULT_PORT",
    "SASL_MAPPED",
    "TLS_MAPPED",
    "ClientOptions",
    "Refusal",
    "bootstrap_with_ports",
    "check_ms",
    "sort_client_options",
    "sort_options",
    "take_client_options",
    "tls_options",
]

#: kafka-python and aiokafka add Kafka's port to a bootstrap host given without one.
DEFAULT_PORT: Final = 9092


@dataclass(frozen=True, slots=True)
class Refusal:
    """A keyword raftka cannot honour unless ``honourable(value)``; ``why`` ends the
    error message."""

    honourable: Callable[[Any], bool]
    why: str


def is_none(value: Any) -> bool:
    return value is None


def equals(*allowed: Any) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return any(value == a and type(value) is type(a) for a in allowed)

    return check


def is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, list | tuple) and not value)


NO_TLS: Final = (
    "raftka's client reads its TLS settings from PEM files (security_protocol='SSL', "
    "ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password, ssl_check_hostname)"
)
NO_SASL: Final = (
    "raftka's client logs in with SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN only "
    "(security_protocol='SASL_SSL', sasl_mechanism, sasl_plain_username, sasl_plain_password)"
)
#: kafka-python's and aiokafka's SASL options, which raftka's client takes under the same
#: names (SASL_SSL on its HTTPS API: client/_http_sasl.py).
SASL_MAPPED: Final = frozenset({"sasl_mechanism", "sasl_plain_username", "sasl_plain_password"})

#: kafka-python's TLS and SASL options that raftka's client takes under the same names
#: and honours the same way (its HTTPS API: server_common/node_http.py); aiokafka's are
#: security_protocol, ssl_context and the SASL ones. security_protocol SASL_PLAINTEXT
#: is refused by the client itself, by name.
TLS_MAPPED: Final = (
    frozenset(
        {
            "security_protocol",
            "ssl_context",
            "ssl_cafile",
            "ssl_certfile",
            "ssl_keyfile",
            "ssl_password",
            "ssl_check_hostname",
        }
    )
    | SASL_MAPPED
)

#: Security options, the same in kafka-python and aiokafka; the kafka-python adapter
#: maps TLS_MAPPED instead of refusing them.
SECURITY: Final[Mapping[str, Refusal]] = {
    "security_protocol": Refusal(equals("PLAINTEXT"), NO_TLS),
    "ssl_context": Refusal(is_none, NO_TLS),
    "ssl_check_hostname": Refusal(equals(True), NO_TLS),
    "ssl_cafile": Refusal(is_none, NO_TLS),
    "ssl_certfile": Refusal(is_none, NO_TLS),
    "ssl_keyfile": Refusal(is_none, NO_TLS),
    "ssl_crlfile": Refusal(is_none, "raftka's client checks no certificate revocation list"),
    "ssl_password": Refusal(is_none, NO_TLS),
    "ssl_ciphers": Refusal(is_none, "raftka's client takes Python's default TLS 1.2+ ciphers"),
    "sasl_kerberos_name": Refusal(is_none, NO_SASL),
    "sasl_kerberos_service_name": Refusal(equals("kafka"), NO_SASL),
    "sasl_kerberos_domain_name": Refusal(is_none, NO_SASL),
    "sasl_oauth_token_provider": Refusal(is_none, NO_SASL),
    "proxy_url": Refusal(is_none, "raftka's client connects directly (no proxy)"),
    "socks5_proxy": Refusal(is_none, "raftka's client connects directly (no proxy)"),
    "kafka_client": Refusal(is_none, "raftka's client has its own transport"),
    "metric_reporters": Refusal(is_empty, "raftka has no metric reporters; read metrics() instead"),
}


def tls_options(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The TLS_MAPPED options of ``opts``, for the clients an adapter makes besides its
    own (an admin client for ``topics()``, a group admin)."""
    return {k: v for k, v in opts.items() if k in TLS_MAPPED}


def bootstrap_with_ports(value: Any) -> str | list[str]:
    """kafka-python's bootstrap_servers ("host", "host:port", a list of them) with
    Kafka's port added where none is given."""

    def one(item: Any) -> Any:
        if not isinstance(item, str):
            return item  # the core names the bad value
        item = item.strip()
        if item.endswith("]") or ":" not in item:
            return f"{item}:{DEFAULT_PORT}"
        return item

    if isinstance(value, str):
        return ",".join(one(part) for part in value.split(",") if part.strip())
    if isinstance(value, Iterable):
        # Each entry may itself be a comma-separated list.
        return [
            one(part)
            for entry in value
            for part in (entry.split(",") if isinstance(entry, str) else [entry])
            if not isinstance(part, str) or part.strip()
        ]
    return value  # type: ignore[no-any-return]


def sort_options(
    face: str,
    given: Mapping[str, Any],
    *,
    mapped: Iterable[str],
    handled: Iterable[str] = (),
    refused: Mapping[str, Refusal],
) -> dict[str, Any]:
    """The options of ``given`` that the adapter maps or handles itself (as given);
    raises ClientConfigError for a refused value or an unknown keyword."""
    kept = frozenset(mapped) | frozenset(handled)
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in kept:
            out[key] = value
        elif key in refused:
            refusal = refused[key]
            if not refusal.honourable(value):
                raise ClientConfigError(f"{key}={value!r}: not supported by {face}: {refusal.why}")
        else:
            raise ClientConfigError(f"{key}={value!r}: {face} has no such option")
    return out


def _refuse(face: str, key: str, value: Any, why: str) -> ClientConfigError:
    return ClientConfigError(f"{key}={value!r}: not supported by {face}: {why}")


def check_ms(face: str, key: str, value: Any, low: int = 0) -> int:
    """``value`` if it is an integer >= ``low``, else ClientConfigError naming ``key``."""
    if type(value) is not int or value < low:
        raise ClientConfigError(f"{key}={value!r}: {face} expects an integer >= {low}")
    return value


#: The oldest Kafka whose client semantics raftka gives: every record has a timestamp
#: (message format v1 and later); 0.8 and 0.9 clients had none.
API_VERSION_MIN: Final = (0, 10)
#: The first versions with each feature, as kafka-python and aiokafka gate them.
HEADERS_SINCE: Final = (0, 11)
IDEMPOTENCE_SINCE: Final = (0, 11)
ZSTD_SINCE: Final = (2, 1)
OFFSETS_FOR_TIMES_SINCE: Final = (0, 10, 1)
STATIC_MEMBERSHIP_SINCE: Final = (2, 3)
NO_HEADERS: Final = "message format v1 has no record headers"


def parse_api_version(face: str, value: Any) -> tuple[int, ...] | None:
    """kafka-python's ``api_version`` (a tuple; a "0.10.2" string, deprecated there and
    aiokafka's form) or ``None`` / ``"auto"`` (every feature); refused below 0.10."""
    if value is None or value == "auto":
        return None
    version: tuple[int, ...] | None = None
    if isinstance(value, str):
        parts = value.split(".")
        if all(p.isdigit() for p in parts):
            version = tuple(int(p) for p in parts)
    elif isinstance(value, tuple | list) and all(type(p) is int and p >= 0 for p in value):
        version = tuple(value)
    if not version:
        raise ClientConfigError(
            f"api_version={value!r}: {face} expects a version such as (2, 8) or None"
        )
    if version < API_VERSION_MIN:
        raise _refuse(
            face,
            "api_version",
            value,
            "raftka gives Kafka 0.10 semantics and later (every record has a timestamp)",
        )
    return version


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """What the adapter keeps of :data:`CLIENT_OPTIONS` after mapping the rest."""

    face: str
    #: ``api_version`` as a tuple; None: the newest (every feature raftka has).
    api_version: tuple[int, ...] | None = None
    #: kafka-python's ``metrics_enabled``: False makes ``metrics()`` return ``{}``.
    metrics_enabled: bool = True

    def metrics_wanted(self, raw: bool) -> bool:
        """The common start of kafka-python's ``metrics(raw)``: ``raw=True`` (KafkaMetric
        objects) is refused; False when ``metrics_enabled=False`` (``metrics()`` is then
        ``{}``)."""
        if raw:
            raise ValueError("metrics(raw=True): raftka has no KafkaMetric objects")
        return self.metrics_enabled

    def supports(self, since: tuple[int, ...]) -> bool:
        return self.api_version is None or self.api_version >= since

    def require(self, since: tuple[int, ...], what: str) -> None:
        """UnsupportedVersionError unless ``api_version`` allows ``what``."""
        if not self.supports(since):
            raise UnsupportedVersionError(
                f"{what} needs api_version >= {since}; this {self.face} was created with "
                f"api_version={self.api_version}"
            )

    def refuse_unless(self, since: tuple[int, ...], key: str, value: Any, why: str = "") -> None:
        """ClientConfigError naming ``key`` unless ``api_version`` allows it."""
        if not self.supports(since):
            raise _refuse(
                self.face,
                key,
                value,
                f"needs api_version >= {since}, not {self.api_version}"
                + (f" ({why})" if why else ""),
            )


#: kafka-python's keywords about versions, connections and metrics (aiokafka has
#: ``api_version`` only): :func:`take_client_options` honours or refuses each.
CLIENT_OPTIONS: Final = frozenset(
    {
        "api_version",
        "api_version_auto_timeout_ms",
        "bootstrap_timeout_ms",
        "client_dns_lookup",
        "metrics_enabled",
        "metrics_num_samples",
        "metrics_sample_window_ms",
        "receive_buffer_bytes",
        "receive_message_max_bytes",
        "reconnect_backoff_max_ms",
        "reconnect_backoff_ms",
        "selector",
        "send_buffer_bytes",
        "socket_options",
    }
)
#: kafka-python's defaults for the sampled metrics raftka does not keep.
_METRIC_SAMPLES: Final = 2
_METRIC_WINDOW_MS: Final = 30_000
_BUFFER_OPTIONS: Final = {
    (socket.SOL_SOCKET, socket.SO_SNDBUF): "send_buffer_bytes",
    (socket.SOL_SOCKET, socket.SO_RCVBUF): "receive_buffer_bytes",
}
_NODELAY: Final = (socket.IPPROTO_TCP, socket.TCP_NODELAY)


def sort_client_options(
    face: str,
    given: Mapping[str, Any],
    *,
    mapped: Iterable[str],
    handled: Iterable[str] = (),
    refused: Mapping[str, Refusal],
) -> tuple[dict[str, Any], ClientOptions]:
    """:func:`sort_options` with :data:`CLIENT_OPTIONS` handled too, then
    :func:`take_client_options` on the result: (the adapter's options, the client's)."""
    opts = sort_options(
        face, given, mapped=mapped, handled=CLIENT_OPTIONS | frozenset(handled), refused=refused
    )
    return opts, take_client_options(face, opts)


def take_client_options(
    face: str, opts: dict[str, Any], *, retry_backoff_default_ms: int = 100
) -> ClientOptions:
    """Remove :data:`CLIENT_OPTIONS` from ``opts``, put what raftka's client takes in
    their place (socket buffer sizes, ``retry_backoff_ms``), and return the rest;
    ClientConfigError naming the keyword for a value raftka cannot honour."""
    given = {key: opts.pop(key) for key in CLIENT_OPTIONS if key in opts}
    version = parse_api_version(face, given.get("api_version"))
    for key in ("api_version_auto_timeout_ms",):
        # kafka-python 2's bound on the version probe in its constructor: raftka's
        # constructors never probe (no I/O), so any bound holds.
        if key in given:
            check_ms(face, key, given[key])
    if given.get("bootstrap_timeout_ms") is not None:
        raise _refuse(
            face,
            "bootstrap_timeout_ms",
            given["bootstrap_timeout_ms"],
            "raftka's constructors do no I/O; the first call bootstraps within its own "
            "timeout (max_block_ms, request_timeout_ms)",
        )
    dns = given.get("client_dns_lookup", "use_all_dns_ips")
    if dns != "use_all_dns_ips":
        raise _refuse(
            face,
            "client_dns_lookup",
            dns,
            "raftka tries every address a host name resolves to (use_all_dns_ips)",
        )
    enabled = given.get("metrics_enabled", True)
    if type(enabled) is not bool:
        raise ClientConfigError(f"metrics_enabled={enabled!r}: {face} expects a bool")
    for key, default in (
        ("metrics_num_samples", _METRIC_SAMPLES),
        ("metrics_sample_window_ms", _METRIC_WINDOW_MS),
    ):
        if key in given and given[key] != default:
            raise _refuse(
                face,
                key,
                given[key],
                "metrics() reports totals, not the sampled rates and averages it shapes",
            )
    for key in _BUFFER_OPTIONS.values():
        size = given.get(key)
        if size is not None:
            opts[key] = check_ms(face, key, size, 1)
    nodelay = False
    for entry in given.get("socket_options", [(*_NODELAY, 1)]):
        if not (isinstance(entry, tuple | list) and len(entry) == 3):
            raise ClientConfigError(
                f"socket_options={entry!r}: {face} expects (level, option, value) tuples"
            )
        level, option, value = entry
        if (level, option) == _NODELAY and value:
            nodelay = True
        elif (level, option) in _BUFFER_OPTIONS:
            opts.setdefault(
                _BUFFER_OPTIONS[level, option], check_ms(face, "socket_options", value, 1)
            )
        else:
            raise _refuse(
                face,
                "socket_options",
                entry,
                "raftka's sockets take TCP_NODELAY, SO_SNDBUF and SO_RCVBUF only",
            )
    if not nodelay:
        raise _refuse(
            face,
            "socket_options",
            given["socket_options"],
            "raftka's sockets always set TCP_NODELAY (include (IPPROTO_TCP, TCP_NODELAY, 1))",
        )
    limit = given.get("receive_message_max_bytes")
    if limit is not None and (type(limit) is not int or limit < RESPONSE_BYTES_MAX):
        raise _refuse(
            face,
            "receive_message_max_bytes",
            limit,
            f"raftka's client accepts answers up to {RESPONSE_BYTES_MAX} bytes; give at least that",
        )
    if "reconnect_backoff_ms" in given:
        # raftka waits retry_backoff_ms before trying a broker again after any failure,
        # a failed connection included: at least reconnect_backoff_ms honours both.
        wait_ms = check_ms(face, "reconnect_backoff_ms", given["reconnect_backoff_ms"])
        opts["retry_backoff_ms"] = max(
            opts.get("retry_backoff_ms", retry_backoff_default_ms), wait_ms
        )
    if "reconnect_backoff_max_ms" in given:
        ceiling = check_ms(face, "reconnect_backoff_max_ms", given["reconnect_backoff_max_ms"])
        backoff_ms = opts.get("retry_backoff_ms", retry_backoff_default_ms)
        if isinstance(backoff_ms, int) and ceiling < backoff_ms:
            raise _refuse(
                face,
                "reconnect_backoff_max_ms",
                ceiling,
                f"raftka waits a constant retry_backoff_ms={backoff_ms} after a failed "
                "connection, longer than this ceiling",
            )
    selector = given.get("selector", selectors.DefaultSelector)
    if selector is not selectors.DefaultSelector:
        raise _refuse(
            face,
            "selector",
            selector,
            "raftka's client runs on an asyncio event loop over selectors.DefaultSelector",
        )
    return ClientOptions(face, version, enabled)


def ms_from_s(what: str, timeout_s: float | None) -> int | None:
    """A timeout in seconds (kafka-python's unit for ``get``/``flush``/``close``) as
    whole milliseconds, rounded up so that a tiny positive timeout still waits."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"{what}: timeout must be a number of seconds, not {timeout_s!r}")
    if timeout_s < 0:
        raise ValueError(f"{what}: timeout must be >= 0, not {timeout_s!r}")
    if timeout_s == float("inf"):
        return None
    return math.ceil(timeout_s * 1000)


#: The consumer options kafka-python and aiokafka name as raftka's Consumer does.
CONSUMER_MAPPED: Final = frozenset(
    {
        "auto_commit_interval_ms",
        "auto_offset_reset",
        "bootstrap_servers",
        "check_crcs",
        "client_id",
        "connections_max_idle_ms",
        "enable_auto_commit",
        "fetch_max_bytes",
        "fetch_max_wait_ms",
        "fetch_min_bytes",
        "group_id",
        "group_instance_id",
        "heartbeat_interval_ms",
        "isolation_level",
        "key_deserializer",
        "max_partition_fetch_bytes",
        "max_poll_interval_ms",
        "max_poll_records",
        "metadata_max_age_ms",
        "partition_assignment_strategy",
        "request_timeout_ms",
        "retry_backoff_ms",
        "session_timeout_ms",
        "value_deserializer",
    }
)
#: Both consumers refuse exclude_internal_topics=False.
EXCLUDE_INTERNAL_TOPICS: Final = Refusal(
    equals(True), "raftka never matches internal (__) topics to a pattern"
)
