"""Unit tests of the client command line's pure parts (config parsing, line splitting,
stdin's line splitter, record and describe formatting, the one-line error text, a
failed connection in plain words, topic and group names given either way) and of
DeleteRecords' pure core (target offset, low watermark) on a hand-driven
PartitionState. No sockets."""

from __future__ import annotations

import click
import pytest
from partition_state_helpers import leader

from raftka.broker.delete_records import low_watermark, target_offset
from raftka.broker.replication import PartitionState
from raftka.client.admin import ConfigEntry
from raftka.client.cli._common import (
    error_line,
    many_names,
    one_name,
    plain_connection_error,
)
from raftka.client.cli.consume import format_record
from raftka.client.cli.produce import LineSplitter, Oversized, lone_batch_bytes, split_line
from raftka.client.cli.topics import format_description, parse_configs
from raftka.client.structs import ConsumerRecord, PartitionInfo, TopicDescription
from raftka.common.errors import (
    KafkaTimeoutError,
    NetworkError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raftka.common.record.header import TimestampType


def test_parse_configs_splits_at_the_first_equals_and_rejects_bad_items() -> None:
    """k=v pairs (a value may hold '='); an item without '=' or a name is a usage error
    naming the option."""
    assert parse_configs(["a=1", "b=x=y", "c="], "--config") == {"a": "1", "b": "x=y", "c": ""}
    for bad in ("novalue", "=1"):
        with pytest.raises(click.BadParameter, match="not name=value"):
            parse_configs([bad], "--config")


def test_split_line_with_and_without_a_key_separator() -> None:
    """No separator: the whole line is the value; with one, the first occurrence splits
    key from value; a line without it is an error."""
    assert split_line(b"a:b:c", None) == (None, b"a:b:c")
    assert split_line(b"a:b:c", b":") == (b"a", b"b:c")
    assert split_line(b"::", b"::") == (b"", b"")
    with pytest.raises(ValueError, match="no key separator"):
        split_line(b"abc", b":")


def test_line_splitter_keeps_lines_whole_across_chunks_and_bounds_long_ones() -> None:
    """Lines split at '\n' (a '\r' before it dropped) however the bytes are chunked; a
    line longer than the bound comes out as Oversized(length) in its place, never
    held, and the lines after it still come; a last line without a break comes at
    the end."""
    splitter = LineSplitter(5)
    assert splitter.feed(b"ab") == []
    assert splitter.feed(b"c\r\nde\n\n") == [b"abc", b"de", b""]
    assert splitter.feed(b"123456") == []  # over the bound: dropped as it comes
    assert splitter.feed(b"789\r\nok\n") == [Oversized(10), b"ok"]
    assert splitter.feed(b"12345\ntail") == [b"12345"]  # exactly the bound is fine
    assert splitter.end() == [b"tail"]
    assert splitter.end() == []
    big = LineSplitter(3)
    assert big.feed(b"abcdefgh") == []
    assert big.end() == [Oversized(8)]


def test_lone_batch_bytes_matches_the_brokers_max_message_bytes_check() -> None:
    """A record alone in an uncompressed batch: 61 header bytes plus the record's own.
    A 230-byte value makes exactly 300 (fits max.message.bytes=300, as a broker
    accepted it); 231 makes 301 (refused, as the broker answered 'record batch of 301
    bytes'). A key counts too."""
    assert lone_batch_bytes(None, b"b" * 230, 300) is None
    assert lone_batch_bytes(None, b"b" * 231, 300) == 301
    assert lone_batch_bytes(b"k", b"b" * 230, 300) == 301
    assert lone_batch_bytes(None, b"b" * 10_000, 1_048_588) is None


_AIOHTTP_REFUSED = (
    "KAFKA_TIMEOUT: the call did not complete in time; last error: NETWORK_EXCEPTION: "
    "GET 127.0.0.1:1/v1/metadata: ClientConnectorError: Cannot connect to host "
    "127.0.0.1:1 ssl:default [Connect call failed ('127.0.0.1', 1)]"
)


def test_a_failed_connection_is_said_in_plain_words_with_the_address() -> None:
    """aiohttp's connector text, however deep in an error's message, becomes
    'NETWORK_EXCEPTION: cannot connect to ADDRESS: connection refused' (unknown host,
    no route to host likewise); other errors keep their own line."""
    expected = "NETWORK_EXCEPTION: cannot connect to 127.0.0.1:1: connection refused"
    assert plain_connection_error(_AIOHTTP_REFUSED) == expected
    assert error_line(KafkaTimeoutError(_AIOHTTP_REFUSED.split(": ", 1)[1])) == expected
    assert error_line(
        NetworkError("POST h:9/v1/x: ClientConnectorError: Cannot connect to host h:9 "
                     "ssl:default [Connection refused]")
    ) == "NETWORK_EXCEPTION: cannot connect to h:9: connection refused"  # fmt: skip
    assert (
        plain_connection_error(
            "Cannot connect to host nohost:9096 ssl:default [Name or service not known]"
        )
        == "NETWORK_EXCEPTION: cannot connect to nohost:9096: unknown host"
    )
    assert (
        plain_connection_error(
            "Cannot connect to host 10.0.0.9:9096 ssl:default [No route to host]"
        )
        == "NETWORK_EXCEPTION: cannot connect to 10.0.0.9:9096: no route to host"
    )
    assert (
        plain_connection_error("Cannot connect to host 10.0.0.9:9096 ssl:default [Something else]")
        == "NETWORK_EXCEPTION: cannot connect to 10.0.0.9:9096: Something else"
    )
    assert plain_connection_error("UNKNOWN_TOPIC_OR_PARTITION: topic 'x'") is None


def test_names_are_taken_as_options_or_positionals_and_never_empty() -> None:
    """--topic X and X are the same; both given must agree; none is a usage error; an
    empty topic is INVALID_TOPIC_EXCEPTION and an empty group INVALID_GROUP_ID, each
    one line; repeatable names keep their order once each."""
    assert one_name("topic", ("t",), None) == "t"
    assert one_name("topic", (), "t") == "t"
    assert one_name("topic", ("t",), "t") == "t"
    with pytest.raises(click.UsageError, match="one topic only"):
        one_name("topic", ("a",), "b")
    with pytest.raises(click.UsageError, match="--topic NAME"):
        one_name("topic", (), None)
    with pytest.raises(click.ClickException) as empty_topic:
        one_name("topic", (), "")
    assert not isinstance(empty_topic.value, click.UsageError)
    assert empty_topic.value.message == (
        "INVALID_TOPIC_EXCEPTION: topic name is illegal, it can't be empty"
    )
    with pytest.raises(click.ClickException, match=r"^INVALID_GROUP_ID: "):
        one_name("group", ("",), None)
    assert many_names("topic", ("a", "b"), ("b", "c")) == ["a", "b", "c"]
    assert many_names("group", (), ()) == []
    with pytest.raises(click.ClickException, match=r"^INVALID_TOPIC_EXCEPTION: "):
        many_names("topic", ("a",), ("",))


def _record(key: bytes | None, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord("t", 0, 5, 1234, TimestampType.CREATE_TIME, key, value)


def test_format_record_orders_timestamp_key_value() -> None:
    """value alone; key and value joined by the separator; the timestamp first; null
    for a missing key or value."""
    sep = b"\t"
    r = _record(b"k", b"v")
    assert format_record(r, print_key=False, print_timestamp=False, separator=sep) == b"v\n"
    assert format_record(r, print_key=True, print_timestamp=False, separator=b"=") == b"k=v\n"
    assert (
        format_record(r, print_key=True, print_timestamp=True, separator=sep)
        == b"CreateTime:1234\tk\tv\n"
    )
    assert (
        format_record(_record(None, None), print_key=True, print_timestamp=False, separator=sep)
        == b"null\tnull\n"
    )


def test_format_description_shows_partitions_and_non_default_configs() -> None:
    """kafka-topics' layout: a summary with only the non-default configs, then one line
    per partition; a partition without a leader shows 'none'."""
    description = TopicDescription(
        "t",
        "id1",
        False,
        (
            PartitionInfo("t", 0, 101, 3, (101, 102), (101, 102)),
            PartitionInfo("t", 1, None, 3, (102, 101), (102,), elr=(101,)),
        ),
    )
    configs = {
        "retention.ms": ConfigEntry("retention.ms", "1000", "TOPIC", False, False, False),
        "segment.ms": ConfigEntry("segment.ms", "604800000", "DEFAULT", True, False, False),
    }
    assert format_description(description, configs) == [
        "Topic: t\tTopicId: id1\tPartitionCount: 2\tReplicationFactor: 2\t"
        "Configs: retention.ms=1000",
        "\tTopic: t\tPartition: 0\tLeader: 101\tReplicas: 101,102\tIsr: 101,102",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 102,101\tIsr: 102\tElr: 101",
    ]


def test_error_line_is_one_line_with_kafkas_name() -> None:
    """Kafka errors print their name and message; others their type; newlines fold."""
    assert error_line(UnknownTopicOrPartitionError("no\ntopic")) == (
        "UNKNOWN_TOPIC_OR_PARTITION: no topic"
    )
    assert error_line(OSError("boom")) == "OSError: boom"


# --------------------------------------------------------------------- DeleteRecords


def _leader(*, leo: int, hw: int) -> PartitionState:
    state, _ = leader(leo=leo, hw=hw, isr=(1, 2))
    return state


def test_target_offset_follows_kafkas_rules() -> None:
    """Up to the HW is allowed; -1 means the HW; above it or another negative offset is
    OFFSET_OUT_OF_RANGE; a non-leader answers NOT_LEADER_OR_FOLLOWER."""
    state = _leader(leo=100, hw=80)
    assert target_offset(state, 40) == 40
    assert target_offset(state, 80) == 80
    assert target_offset(state, -1) == 80
    assert isinstance(target_offset(state, 81), OffsetOutOfRangeError)
    assert isinstance(target_offset(state, -2), OffsetOutOfRangeError)
    state.make_follower(
        leader_id=2, leader_epoch=2, partition_epoch=2, replicas=(1, 2, 3), isr=(2,), now_ms=0
    )
    assert isinstance(target_offset(state, 10), NotLeaderOrFollowerError)


def test_low_watermark_is_the_smallest_in_sync_log_start() -> None:
    """The leader's start counts with each ISR follower's reported start (0 until it
    fetched); a follower outside the ISR does not hold it back."""
    state = _leader(leo=100, hw=100)
    state.on_log_start_offset(log_start_offset=40)
    assert low_watermark(state) == 0  # follower 2 has not reported yet
    state.on_follower_fetch(
        replica_id=2,
        fetch_offset=100,
        last_fetched_epoch=1,
        broker_epoch=7,
        registered_epoch=7,
        now_ms=1,
        follower_log_start_offset=40,
    )
    assert low_watermark(state) == 40  # replica 3 is not in the ISR (1, 2)


def test_delete_offsets_topic_spec_names_partitions_or_is_refused() -> None:
    """``raftka groups delete-offsets --topic T:P,...``: the partitions named; a bad
    spec is a usage error naming it, before any connection (T alone asks the cluster)."""
    from raftka.client.cli.groups import _topic_partitions
    from raftka.common.structs import TopicPartition

    assert _topic_partitions("t:0,2", "unused:1", 1000) == [
        TopicPartition("t", 0),
        TopicPartition("t", 2),
    ]
    for bad in ("t:x", "t:", "t:-1", "t:1,,2"):
        with pytest.raises(click.BadParameter, match=r"TOPIC|partition"):
            _topic_partitions(bad, "unused:1", 1000)
