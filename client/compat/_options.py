"""Constructor keywords of kafka-python and aiokafka, sorted into three kinds.

- *mapped*: raftka has the option (same name or a renamed one) and honours it; the
  adapter passes it on, converting the unit or the spelling where needed.
- *tuning*: the option changes how a client does its work (socket buffers, reconnect
  back-off, metric sampling, protocol version probing) but nothing a program can
  observe about what is sent, read or committed; raftka accepts it and it has no
  effect. The docs list each of these.
- *refused unless honourable*: a feature raftka does not have (TLS, SASL,
  transactions, topic auto-creation, ...). The keyword is accepted only with a value
  that asks for nothing raftka lacks (``security_protocol="PLAINTEXT"``,
  ``ssl_cafile=None``, ...); any other value raises :class:`ClientConfigError`
  naming the keyword and why, at construction, never later.

Any other keyword raises ``ClientConfigError`` too (kafka-python refuses unknown
configs as well), so a typo never passes silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from raftka.client.config import ClientConfigError

__all__ = [
    "DEFAULT_PORT",
    "Refusal",
    "bootstrap_with_ports",
    "sort_options",
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


NO_TLS: Final = "raftka's client speaks plain HTTP/1.1 (no TLS)"
NO_SASL: Final = "raftka has no SASL authentication"

#: Security options, the same in kafka-python and aiokafka.
SECURITY: Final[Mapping[str, Refusal]] = {
    "security_protocol": Refusal(equals("PLAINTEXT"), NO_TLS + " and no SASL"),
    "ssl_context": Refusal(is_none, NO_TLS),
    "ssl_check_hostname": Refusal(equals(True), NO_TLS),
    "ssl_cafile": Refusal(is_none, NO_TLS),
    "ssl_certfile": Refusal(is_none, NO_TLS),
    "ssl_keyfile": Refusal(is_none, NO_TLS),
    "ssl_crlfile": Refusal(is_none, NO_TLS),
    "ssl_password": Refusal(is_none, NO_TLS),
    "ssl_ciphers": Refusal(is_none, NO_TLS),
    "sasl_plain_username": Refusal(is_none, NO_SASL),
    "sasl_plain_password": Refusal(is_none, NO_SASL),
    "sasl_kerberos_name": Refusal(is_none, NO_SASL),
    "sasl_kerberos_service_name": Refusal(equals("kafka"), NO_SASL),
    "sasl_kerberos_domain_name": Refusal(is_none, NO_SASL),
    "sasl_oauth_token_provider": Refusal(is_none, NO_SASL),
    "proxy_url": Refusal(is_none, "raftka's client connects directly (no proxy)"),
    "socks5_proxy": Refusal(is_none, "raftka's client connects directly (no proxy)"),
    "kafka_client": Refusal(is_none, "raftka's client has its own transport"),
    "metric_reporters": Refusal(is_empty, "raftka has no metric reporters; read metrics() instead"),
}


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
    tuning: Iterable[str],
    refused: Mapping[str, Refusal],
) -> dict[str, Any]:
    """The options of ``given`` that the adapter maps (as given); raises
    ClientConfigError for a refused value or an unknown keyword; drops tuning."""
    mapped_set, tuning_set = frozenset(mapped), frozenset(tuning)
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in mapped_set:
            out[key] = value
        elif key in refused:
            refusal = refused[key]
            if not refusal.honourable(value):
                raise ClientConfigError(f"{key}={value!r}: not supported by {face}: {refusal.why}")
        elif key not in tuning_set:
            raise ClientConfigError(f"{key}={value!r}: {face} has no such option")
    return out


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
