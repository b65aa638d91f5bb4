"""Offset JSON as Spark's Kafka connector writes it, and the streaming offset form.

Pure. Options name partitions as ``{"topic": {"0": 23, "1": -2}}`` (offsets; -2 is
earliest, -1 latest) and ``{"topic": [0, 1]}`` (``assign``). Streaming offsets are the
same per topic-partition object, and Spark stores them verbatim in its checkpoint and
compares them as strings: :func:`to_offset_dict` therefore builds them in one stable
order (topics by name, partitions by number) so equal positions always print equally.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from raftka.client.structs import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetsJsonError",
    "from_offset_dict",
    "parse_assign_json",
    "parse_offsets_json",
    "to_offset_dict",
]

#: Spark's (and Kafka's ListOffsets') markers in offset JSON.
EARLIEST: Final = -2
LATEST: Final = -1
# Offsets are Kafka int64.
_OFFSET_MAX: Final = 2**63 - 1
_PARTITION_MAX: Final = 2**31 - 1


class OffsetsJsonError(ValueError):
    """Offset or partition JSON that is malformed; the message says where."""


def _load_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise OffsetsJsonError(f"{text!r} is not JSON ({e})") from None
    if not isinstance(value, dict) or not value:
        raise OffsetsJsonError(f"{text!r}: expected a non-empty JSON object keyed by topic")
    return value


def _partition(topic: str, key: Any) -> int:
    if isinstance(key, bool):
        raise OffsetsJsonError(f"topic {topic!r}: partition {key!r} is not a number")
    try:
        p = int(key)
    except (TypeError, ValueError):
        raise OffsetsJsonError(f"topic {topic!r}: partition {key!r} is not a number") from None
    if not 0 <= p <= _PARTITION_MAX or (isinstance(key, str) and key != str(p)):
        raise OffsetsJsonError(f"topic {topic!r}: partition {key!r} is not a partition number")
    return p


def parse_offsets_json(text: str) -> dict[TopicPartition, int]:
    """``{"t": {"0": 5, "1": -2}}`` -> {TopicPartition("t", 0): 5, ...}; offsets >= -2."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in _load_object(text).items():
        if not topic:
            raise OffsetsJsonError("a topic name is empty")
        if not isinstance(partitions, dict):
            raise OffsetsJsonError(
                f'topic {topic!r}: expected {{"<partition>": <offset>, ...}}, not {partitions!r}'
            )
        for key, offset in partitions.items():
            p = _partition(topic, key)
            if type(offset) is not int or not EARLIEST <= offset <= _OFFSET_MAX:
                raise OffsetsJsonError(
                    f"{topic}-{p}: offset {offset!r} must be an integer >= -2 "
                    "(-2 earliest, -1 latest)"
                )
            out[TopicPartition(topic, p)] = offset
    return out


def parse_assign_json(text: str) -> list[TopicPartition]:
    """``{"t": [0, 1]}`` -> the partitions, sorted."""
    out: set[TopicPartition] = set()
    for topic, partitions in _load_object(text).items():
        if not topic:
            raise OffsetsJsonError("a topic name is empty")
        if not isinstance(partitions, list):
            raise OffsetsJsonError(f"topic {topic!r}: expected a list of partitions")
        for key in partitions:
            if type(key) is not int:
                raise OffsetsJsonError(f"topic {topic!r}: partition {key!r} is not a number")
            out.add(TopicPartition(topic, _partition(topic, key)))
    return sorted(out)


def to_offset_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The streaming offset Spark checkpoints: topics by name, partitions by number."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        assert offsets[tp] >= 0, f"a streaming offset is a position, not {offsets[tp]} ({tp})"
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_offset_dict(value: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """Inverse of :func:`to_offset_dict` (as read back from a checkpoint)."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping):
            raise OffsetsJsonError(f"checkpointed offset for {topic!r} is not an object")
        for key, offset in partitions.items():
            if type(offset) is not int or offset < 0:
                raise OffsetsJsonError(f"checkpointed offset {topic}-{key}: {offset!r}")
            out[TopicPartition(topic, _partition(topic, key))] = offset
    return out
