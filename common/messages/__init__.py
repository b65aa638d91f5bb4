"""Typed messages: every JSON body that crosses a process boundary, one class each.

Theory of operation. A message is a frozen ``msgspec.Struct`` (:class:`Message`) whose
fields carry their bounds (``Annotated[int, Meta(ge=0)]``, lengths of strings and
lists); both ends of an API use the same class. :func:`decode` turns request bytes
into a validated instance in one pass (msgspec decodes JSON straight into the types,
checking every constraint on the way) or raises Kafka's ``INVALID_REQUEST`` naming the
offending field (``$.partitions[3].fetch_offset``); :func:`encode` is the inverse.
Unknown fields are ignored, as Kafka ignores unknown tagged fields, so an older peer
can read a newer one's message.

Why msgspec: it validates while it decodes (no dict is built and then walked), its
structs are frozen and slotted, and mypy understands them; pydantic and attrs+cattrs
would do the job with a larger dependency and, measured in ``bench/messages_bench.py``,
more time per message.

The messages of one API family live in one module: ``replication`` (follower fetch,
DeleteRecords), ``broker`` (produce, fetch, list offsets, metadata), ``coordinator``
(the group coordinator's API), ``controller`` (the controller's API), ``transactions``
(the transaction APIs).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, TypeVar

import msgspec

from raftka.common.errors import InvalidRequestError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "Int32",
    "Message",
    "NonNegInt32",
    "NonNegInt64",
    "PartitionId",
    "TopicName",
    "decode",
    "decode_value",
    "encode",
]

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

#: Kafka's bounds on the values most messages carry.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=INT32_MAX)]
NonNegInt32 = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
NonNegInt64 = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
PartitionId = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
#: Kafka's topic names: at most 249 characters (the legal characters are checked where
#: topics are created, not on every request).
TopicName = Annotated[str, msgspec.Meta(min_length=1, max_length=249)]


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every typed message: frozen, keyword-only, unknown fields ignored."""


M = TypeVar("M")

# One decoder per type, built on first use: msgspec compiles the type's validation once.
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_encoder: Final = msgspec.json.Encoder()


def decode(body: bytes | bytearray | memoryview | str, message_type: type[M]) -> M:
    """Decode and validate one JSON message; ``INVALID_REQUEST`` naming the field if the
    body is not JSON or breaks a declared bound."""
    decoder = _decoders.get(message_type)
    if decoder is None:
        decoder = _decoders[message_type] = msgspec.json.Decoder(message_type)
    try:
        result: M = decoder.decode(body)
    except msgspec.ValidationError as error:
        raise InvalidRequestError(str(error)) from None
    except msgspec.DecodeError as error:
        raise InvalidRequestError(f"the body is not valid JSON: {error}") from None
    return result


def decode_value(value: object, message_type: type[M]) -> M:
    """Validate an already-parsed value (e.g. a frame's JSON header) into ``message_type``."""
    try:
        return msgspec.convert(value, message_type)
    except msgspec.ValidationError as error:
        raise InvalidRequestError(str(error)) from None


def encode(message: object) -> bytes:
    """A message (or any msgspec-encodable value) as JSON bytes."""
    return _encoder.encode(message)
