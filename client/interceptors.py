"""Producer and consumer interceptors (Kafka's ProducerInterceptor / ConsumerInterceptor).

An interceptor sees what passes through a client without changing the application:
tracing, metrics, auditing, adding a header. Subclass and override what you need; the
defaults pass everything through unchanged.

- ``ProducerInterceptor.on_send(record)`` runs inside ``send()`` before the key and
  value are serialised and the partition is chosen, and returns the record to send
  (possibly another one). ``on_acknowledgement(metadata, exception)`` runs once per
  record when it is acknowledged or fails, on the producer's event loop, before the
  record's own callback.
- ``ConsumerInterceptor.on_consume(records)`` runs in ``poll()`` before the records are
  returned, and returns the records to return. ``on_commit(offsets)`` runs after a
  commit succeeded (sync, async or automatic).
- ``close()`` runs when the client closes.

Interceptors run in the order given, each on the previous one's output. As in Kafka an
exception in an interceptor is logged and ignored (the record, or the previous
interceptor's output, goes on): an interceptor must not break the client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from raftka.client.config import ClientConfigError
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, RecordMetadata, TopicPartition

__all__ = ["ConsumerInterceptor", "ProducerInterceptor", "ProducerRecord"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

Headers = tuple[tuple[str, bytes | None], ...] | None


class ProducerRecord(NamedTuple):
    """A record as the application handed it to ``send()`` (before serialisation)."""

    topic: str
    value: Any
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Headers = None


class ProducerInterceptor:
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        return None

    def close(self) -> None:
        return None


class ConsumerInterceptor:
    def on_consume(
        self, records: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        return None

    def close(self) -> None:
        return None


def check_interceptors(option: str, value: object, kind: type) -> tuple[Any, ...]:
    """The interceptors as a tuple; ClientConfigError naming ``option`` if one is not a
    ``kind``."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise ClientConfigError(f"{option}={value!r}: expected a list of {kind.__name__} objects")
    for item in value:
        if not isinstance(item, kind):
            raise ClientConfigError(f"{option}: {item!r} is not a {kind.__name__}")
    return tuple(value)


def _chain(
    interceptors: Sequence[ProducerInterceptor] | Sequence[ConsumerInterceptor],
    hook: str,
    value: _T,
    kind: type,
) -> _T:
    """``value`` through each interceptor's ``hook`` in turn, each on the previous one's
    output. User code: a hook that raises, or returns something not a ``kind``, is logged
    and skipped (the previous output goes on), so an interceptor cannot break the client."""
    for interceptor in interceptors:
        try:
            out: object = getattr(interceptor, hook)(value)  # user code: checked below
        except Exception:
            log.exception("%s.%s of %r failed", _owner(interceptor), hook, interceptor)
            continue
        if isinstance(out, kind):
            value = cast(_T, out)
        else:
            log.error("%r.%s returned %r, not a %s: ignored", interceptor, hook, out, kind.__name__)
    return value


def _notify(
    interceptors: Sequence[ProducerInterceptor] | Sequence[ConsumerInterceptor],
    hook: str,
    *args: object,
) -> None:
    """Call each interceptor's ``hook``; one that raises is logged and the others still run."""
    for interceptor in interceptors:
        try:
            getattr(interceptor, hook)(*args)
        except Exception:
            log.exception("%s.%s of %r failed", _owner(interceptor), hook, interceptor)


def _owner(interceptor: object) -> str:
    if isinstance(interceptor, ProducerInterceptor):
        return "ProducerInterceptor"
    return "ConsumerInterceptor"


def on_send(interceptors: Sequence[ProducerInterceptor], record: ProducerRecord) -> ProducerRecord:
    return _chain(interceptors, "on_send", record, ProducerRecord)


def on_acknowledgement(
    interceptors: Sequence[ProducerInterceptor],
    metadata: RecordMetadata | None,
    exception: BaseException | None,
) -> None:
    _notify(interceptors, "on_acknowledgement", metadata, exception)


def on_consume(
    interceptors: Sequence[ConsumerInterceptor],
    records: dict[TopicPartition, list[ConsumerRecord]],
) -> dict[TopicPartition, list[ConsumerRecord]]:
    return _chain(interceptors, "on_consume", records, dict)


def on_commit(
    interceptors: Sequence[ConsumerInterceptor],
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> None:
    _notify(interceptors, "on_commit", offsets)


def close_all(interceptors: Sequence[ProducerInterceptor | ConsumerInterceptor]) -> None:
    for interceptor in interceptors:
        try:
            interceptor.close()
        except Exception:
            log.exception("closing interceptor %r failed", interceptor)
