"""The pure parts of the operator tools: kafka-topics' describe reports (which
partitions each names) and kafka-delete-records' offset file (what it accepts, and the
one-line refusal of anything else)."""

from __future__ import annotations

import click
import pytest

from raftka.client.admin import ConfigEntry
from raftka.client.cli.configs import format_configs, parse_add_config
from raftka.client.cli.reassign import (
    assignment_json,
    parse_reassignment_json,
    parse_topics_json,
    propose,
)
from raftka.client.cli.records import parse_offset_json
from raftka.client.cli.topics import REPORTS, reported_partition
from raftka.client.structs import PartitionInfo
from raftka.common.structs import TopicPartition

LIVE = {1, 2, 3}


def _p(
    leader: int | None, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)
) -> PartitionInfo:
    return PartitionInfo("t", 0, leader, 0, replicas, isr)


@pytest.mark.parametrize(
    ("partition", "min_insync", "expected"),
    [
        # healthy, min.insync.replicas 2
        (_p(1, (1, 2, 3)), 2, set()),
        # one follower out of the ISR: under-replicated, and at min ISR
        (_p(1, (1, 2)), 2, {"under-replicated-partitions", "at-min-isr-partitions"}),
        # leader alone: under-replicated and under min ISR
        (_p(1, (1,)), 2, {"under-replicated-partitions", "under-min-isr-partitions"}),
        # no leader: unavailable
        (
            _p(None, (1,)),
            1,
            {"unavailable-partitions", "under-replicated-partitions", "at-min-isr-partitions"},
        ),
        # a leader that is not a live broker: unavailable
        (_p(4, (4, 1, 2), (4, 1, 2)), 2, {"unavailable-partitions"}),
        # -1 is "no leader" on the wire
        (_p(-1, (1, 2, 3)), 2, {"unavailable-partitions"}),
    ],
)
def test_each_report_names_the_partitions_kafka_topics_names(
    partition: PartitionInfo, min_insync: int, expected: set[str]
) -> None:
    got = {
        r
        for r in REPORTS
        if reported_partition(r, partition, live_brokers=LIVE, min_insync=min_insync)
    }
    assert got == expected


def test_an_unknown_report_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown report"):
        reported_partition("lagging-partitions", _p(1, (1,)), live_brokers=LIVE, min_insync=1)


def test_kafka_delete_records_offset_file() -> None:
    text = (
        b'{"partitions": [{"topic": "a", "partition": 0, "offset": 5},'
        b' {"topic": "a", "partition": 1, "offset": -1}], "version": 1}'
    )
    assert parse_offset_json(text, "f") == {TopicPartition("a", 0): 5, TopicPartition("a", 1): -1}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"{", "not JSON"),
        (b"[]", "expected"),
        (b'{"partitions": []}', "no partitions"),
        (b'{"partitions": [], "version": 2}', "unsupported version 2"),
        (b'{"partitions": [{"topic": "", "partition": 0, "offset": 1}]}', "topic"),
        (b'{"partitions": [{"topic": "a", "partition": -1, "offset": 1}]}', "partition must"),
        (b'{"partitions": [{"topic": "a", "partition": 0, "offset": -2}]}', "offset must"),
        (b'{"partitions": [{"topic": "a", "partition": 0, "offset": "5"}]}', "offset must"),
        (
            b'{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            b' {"topic": "a", "partition": 0, "offset": 2}]}',
            "named twice",
        ),
    ],
)
def test_a_bad_offset_file_is_refused_in_one_line(text: bytes, why: str) -> None:
    with pytest.raises(click.BadParameter, match=why) as raised:
        parse_offset_json(text, "f.json")
    assert "\n" not in raised.value.format_message()


def test_kafka_reassign_partitions_files_and_the_generated_plan() -> None:
    text = (
        b'{"version": 1, "partitions": [{"topic": "a", "partition": 1, "replicas": [3, 1],'
        b' "log_dirs": ["any", "any"]}]}'
    )
    plan = parse_reassignment_json(text, "f")
    assert plan == {TopicPartition("a", 1): (3, 1)}
    assert parse_reassignment_json(assignment_json(plan).encode(), "again") == plan
    assert parse_topics_json(b'{"topics": [{"topic": "a"}, {"topic": "a"}]}', "f") == ["a"]
    current = {TopicPartition("a", i): (1, 2) for i in range(3)}
    assert propose(current, [103, 101, 102]) == {
        TopicPartition("a", 0): (101, 102),
        TopicPartition("a", 1): (102, 103),
        TopicPartition("a", 2): (103, 101),
    }
    with pytest.raises(click.UsageError, match="2 replicas but --broker-list names 1"):
        propose(current, [101])


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'{"partitions": [{"topic": "a", "partition": 0, "replicas": []}]}', "broker ids"),
        (b'{"partitions": [{"topic": "a", "partition": 0, "replicas": [1, "2"]}]}', "broker ids"),
        (
            b'{"partitions": [{"topic": "a", "partition": 0, "replicas": [1],'
            b' "log_dirs": ["/data"]}]}',
            'only "any"',
        ),
        (b'{"partitions": [], "version": 1}', "no partitions"),
    ],
)
def test_a_bad_reassignment_file_is_refused_in_one_line(text: bytes, why: str) -> None:
    with pytest.raises(click.BadParameter, match=why):
        parse_reassignment_json(text, "f.json")


def test_kafka_configs_add_config_syntax() -> None:
    assert parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete],x=") == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "x": "",
    }
    for bad in ("retention.ms", "a=[b", "a=[b]c", "=1"):
        with pytest.raises(click.BadParameter):
            parse_add_config(bad)


def test_kafka_configs_describe_lines() -> None:
    entries = {
        "retention.ms": ConfigEntry(
            "retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG", False, False, False
        ),
        "segment.ms": ConfigEntry("segment.ms", "604800000", "DEFAULT_CONFIG", True, False, False),
        "ssl.key.password": ConfigEntry(
            "ssl.key.password", None, "STATIC_BROKER_CONFIG", False, True, True
        ),
    }
    assert format_configs("topic", "t", entries, everything=False) == [
        "Dynamic configs for topic t are:",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
    ]
    assert format_configs("topic", "t", entries, everything=True)[2:] == [
        "  segment.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:segment.ms=604800000}",
        "  ssl.key.password=null sensitive=true"
        " synonyms={STATIC_BROKER_CONFIG:ssl.key.password=null}",
    ]
