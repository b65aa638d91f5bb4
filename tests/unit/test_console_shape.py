"""The web console's JSON: the pure functions from the clients' answers to what the page
renders (raftka.console.shape), and the app's routes over a fake cluster that does not
answer (errors become one line with Kafka's name, and the console keeps serving)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from raftka.client.admin import ClusterDescription, ConfigEntry
from raftka.client.group_admin import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
)
from raftka.client.structs import (
    ConsumerRecord,
    Node,
    OffsetAndMetadata,
    PartitionInfo,
    TopicDescription,
    TopicPartition,
)
from raftka.common.errors import (
    InvalidRequestError,
    NetworkError,
    UnknownTopicOrPartitionError,
)
from raftka.common.messages.controller import DescribeQuorumResponse, QuorumReplica
from raftka.common.record.header import TimestampType
from raftka.console import shape
from raftka.console.app import ConsoleSettings, make_app
from raftka.local import free_ports


def _partition(p: int, leader: int | None, replicas: tuple[int, ...], isr: tuple[int, ...]):
    return PartitionInfo("t", p, leader, 3, replicas, isr)


TOPICS = [
    TopicDescription(
        "t",
        "id-t",
        False,
        (
            _partition(0, 101, (101, 102, 103), (101, 102, 103)),
            _partition(1, 102, (102, 103, 101), (102, 101)),  # 103 out of the ISR
            _partition(2, None, (103,), ()),  # offline
        ),
    ),
    TopicDescription("a", "id-a", False, ()),
]


def _replica(node_id: int, address: str | None, leo: int | None, lag: int | None):
    return QuorumReplica(
        node_id=node_id,
        address=address,
        log_end_offset=leo,
        lag=lag,
        last_fetch_ms=None,
        last_caught_up_ms=None,
    )


QUORUM = DescribeQuorumResponse(
    node_id=2,
    role="leader",
    leader_id=2,
    leader_address="h:2",
    epoch=7,
    high_watermark=40,
    log_end_offset=40,
    log_start_offset=0,
    max_follower_lag=3,
    voters=[_replica(3, "h:3", 37, 3), _replica(2, "h:2", 40, 0), _replica(1, "h:1", 40, 0)],
    observers=[_replica(103, "h:103", 30, 10), _replica(101, "h:101", 40, 0)],
    metadata_offset=40,
)

CLUSTER = ClusterDescription(
    brokers=(Node(101, "h", 101), Node(102, "h", 102)),
    controller_id=2,
    controllers=("h:1", "h:2", "h:3"),
)


def test_overview_marks_the_active_controller_the_epoch_and_fenced_brokers() -> None:
    o = shape.overview_json(CLUSTER, QUORUM, TOPICS)
    assert (o["active_controller"], o["epoch"], o["high_watermark"]) == (2, 7, 40)
    assert [(c["id"], c["active"], c["lag"]) for c in o["controllers"]] == [
        (1, False, 0),
        (2, True, 0),
        (3, False, 3),
    ]
    # 103 is an observer and a replica but not in describe_cluster: fenced.
    assert [(b["id"], b["state"], b["address"], b["leader_of"]) for b in o["brokers"]] == [
        (101, "unfenced", "h:101", 1),
        (102, "unfenced", "h:102", 1),
        (103, "fenced", "h:103", 0),
    ]
    assert (o["topic_count"], o["partition_count"]) == (2, 3)
    assert (o["under_replicated"], o["offline"]) == (2, 1)


def test_overview_without_the_quorum_lists_the_controllers_by_address() -> None:
    o = shape.overview_json(CLUSTER, None, [], quorum_error="NETWORK_EXCEPTION: x")
    assert o["epoch"] is None and o["active_controller"] == 2
    assert o["quorum_error"] == "NETWORK_EXCEPTION: x"
    assert [c["address"] for c in o["controllers"]] == ["h:1", "h:2", "h:3"]
    assert [b["id"] for b in o["brokers"]] == [101, 102]


def test_topics_are_sorted_with_their_replication_marks() -> None:
    topics = shape.topics_json(TOPICS)["topics"]
    assert [t["name"] for t in topics] == ["a", "t"]
    parts = topics[1]["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2]
    assert [(p["under_replicated"], p["offline"]) for p in parts] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert parts[1]["replicas"] == [102, 103, 101] and parts[1]["isr"] == [102, 101]
    assert topics[1]["under_replicated"] == 2


def test_topic_configs_put_the_ones_set_first_and_hide_sensitive_values() -> None:
    configs = {
        "retention.ms": ConfigEntry("retention.ms", "1000", "TOPIC_CONFIG", False, False, False),
        "cleanup.policy": ConfigEntry(
            "cleanup.policy", "delete", "DEFAULT_CONFIG", True, False, False
        ),
        "secret": ConfigEntry("secret", "pw", "TOPIC_CONFIG", False, False, True),
    }
    rows = shape.topic_configs_json("t", configs)["configs"]
    assert [(r["name"], r["value"]) for r in rows] == [
        ("retention.ms", "1000"),
        ("secret", None),
        ("cleanup.policy", "delete"),
    ]


def test_group_lag_is_end_offset_minus_committed_per_partition() -> None:
    t0, t1, t2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    description = ConsumerGroupDescription(
        "g",
        "Stable",
        "consumer",
        "range",
        (
            MemberDescription("m-2", None, "c2", "/h", (t2,)),
            MemberDescription("m-1", None, "c1", "/h", (t1, t0)),
        ),
        101,
    )
    committed = {t0: OffsetAndMetadata(5, ""), t1: OffsetAndMetadata(9, "")}
    ends = {t0: 12, t1: 9, t2: 4}
    g = shape.group_json(description, committed, ends)
    assert [m["member_id"] for m in g["members"]] == ["m-1", "m-2"]
    assert g["members"][0]["assignment"] == ["t-0", "t-1"]
    assert [
        (p["partition"], p["committed"], p["end_offset"], p["lag"], p["member"])
        for p in g["partitions"]
    ] == [
        (0, 5, 12, 7, "m-1"),
        (1, 9, 9, 0, "m-1"),
        (2, None, 4, None, "m-2"),  # assigned, never committed: no lag
    ]
    assert g["total_lag"] == 7


def test_group_lag_is_unknown_when_no_end_offset_is() -> None:
    t0 = TopicPartition("t", 0)
    description = ConsumerGroupDescription("g", "Empty", "consumer", "", (), 101)
    g = shape.group_json(description, {t0: OffsetAndMetadata(5, "")}, {})
    assert g["partitions"][0]["lag"] is None and g["total_lag"] is None


def test_groups_are_listed_by_id() -> None:
    listings = [ConsumerGroupListing("b", "consumer", "Empty"), ConsumerGroupListing("a", "", "")]
    assert [g["group_id"] for g in shape.groups_json(listings)["groups"]] == ["a", "b"]


def test_groups_name_the_brokers_that_did_not_answer() -> None:
    """A partial list says which broker's groups are missing, with its error line."""
    listings = [ConsumerGroupListing("a", "consumer", "Stable")]
    down = NetworkError("POST 127.0.0.1:9093/v1/list-groups: ClientConnectorError: refused")
    answer = shape.groups_json(listings, {102: down})
    assert [g["group_id"] for g in answer["groups"]] == ["a"]
    assert answer["unanswered"] == [{"broker_id": 102, "error": str(down)}]
    assert "NETWORK_EXCEPTION" in answer["unanswered"][0]["error"]
    assert shape.groups_json(listings)["unanswered"] == []


@pytest.mark.parametrize(
    ("data", "fmt", "shown"),
    [
        (b"hello", "text", "hello"),
        (b"\xff\xfeok", "text", "\ufffd\ufffdok"),
        (b'{"a":[1,2]}', "json", '{\n  "a": [\n    1,\n    2\n  ]\n}'),
        (b"not json", "json", "(not JSON) not json"),
        (b"\x00\x01\xab", "hex", "00 01 ab"),
        (b"", "hex", ""),
        (None, "text", None),
    ],
)
def test_keys_and_values_as_text_json_or_hex(
    data: bytes | None, fmt: shape.Format, shown: str | None
) -> None:
    assert shape.format_bytes(data, fmt) == shown


def test_records_carry_offsets_timestamps_and_headers() -> None:
    record = ConsumerRecord(
        "t", 0, 42, 1_700_000_000_000, TimestampType.CREATE_TIME, b"k", b"\x01", (("h", b"v"),)
    )
    out = shape.records_json("t", 0, 42, [record], "hex")
    assert out["start_offset"] == 42
    (r,) = out["records"]
    assert (r["offset"], r["timestamp"], r["key"], r["value"]) == (
        42,
        1_700_000_000_000,
        "6b",
        "01",
    )
    assert r["value_base64"] == "AQ==" and r["headers"] == [{"key": "h", "value": "76"}]
    with pytest.raises(InvalidRequestError, match="format must be one of"):
        shape.records_json("t", 0, 0, [], "yaml")  # type: ignore[arg-type]


def test_errors_are_one_line_with_kafkas_name() -> None:
    assert shape.error_json(UnknownTopicOrPartitionError("topic 'x'\ndoes not exist")) == {
        "error": "UNKNOWN_TOPIC_OR_PARTITION: topic 'x' does not exist"
    }
    assert shape.error_json(TimeoutError())["error"].startswith("KAFKA_TIMEOUT")
    refused = OSError(
        "Cannot connect to host 127.0.0.1:1 ssl:default [Connect call failed ('127.0.0.1', 1)]"
    )
    assert shape.error_json(refused) == {
        "error": "NETWORK_EXCEPTION: cannot connect to 127.0.0.1:1: connection refused"
    }


def test_reports_are_listed_newest_first_under_their_folder(tmp_path: Path) -> None:
    assert shape.reports_json(None, []) == {"enabled": False, "reports": []}
    old = tmp_path / "run-1" / "timeline.png"
    new = tmp_path / "run-2" / "timeline.png"
    for i, p in enumerate((old, new)):
        p.parent.mkdir()
        p.write_bytes(b"png")
        os.utime(p, (1000 + i, 1000 + i))
    out = shape.reports_json(tmp_path, [old, new])
    assert [r["url"] for r in out["reports"]] == [
        "/reports/run-2/timeline.png",
        "/reports/run-1/timeline.png",
    ]


# ---------------------------------------------------------------------------------------
# The app over a cluster that is not there


async def _get_all(settings: ConsoleSettings, paths: list[str]) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    async with TestClient(TestServer(make_app(settings))) as client:
        for path in paths:
            response = await client.get(path)
            is_json = response.content_type == "application/json"
            body = await (response.json() if is_json else response.read())
            out.append((response.status, body if is_json else body.decode("utf-8", "replace")))
    return out


def test_the_app_answers_one_line_errors_while_the_cluster_is_down(tmp_path: Path) -> None:
    """Nothing listens at the bootstrap address: every cluster call becomes 503 with a
    one-line Kafka error within the timeout, bad parameters 400, and the page, its
    script and the report pictures are still served (nothing outside the folder)."""
    (port,) = free_ports(1)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "timeline.png").write_bytes(b"\x89PNG")
    (tmp_path / "notes.txt").write_text("not a picture")
    settings = ConsoleSettings(
        bootstrap_servers=f"127.0.0.1:{port}", api_timeout_ms=500, reports_dir=tmp_path
    )
    paths = [
        "/api/cluster",
        "/api/groups",
        "/api/messages",
        "/api/messages?topic=t&limit=501",
        "/api/messages?topic=t&offset=x",
        "/api/messages?topic=t&offset=1&timestamp=2",
        "/api/messages?topic=t&format=yaml",
        "/",
        "/static/console.js",
        "/static/nope.js",
        "/api/reports",
        "/reports/run/timeline.png",
        "/reports/notes.txt",
        "/reports/..%2F..%2Fetc%2Fpasswd.png",
    ]
    answers = dict(zip(paths, asyncio.run(_get_all(settings, paths)), strict=True))
    for path in ("/api/cluster", "/api/groups"):
        status, body = answers[path]
        assert status == 503, (path, body)
        assert body["error"].split(":")[0] in ("NETWORK_EXCEPTION", "KAFKA_TIMEOUT"), body
        assert "\n" not in body["error"]
    assert answers["/api/messages"] == (400, {"error": "INVALID_REQUEST: give a topic"})
    assert answers["/api/messages?topic=t&limit=501"][1]["error"] == (
        "INVALID_REQUEST: limit must be at most 500, not 501"
    )
    for path in (
        "/api/messages?topic=t&offset=x",
        "/api/messages?topic=t&offset=1&timestamp=2",
        "/api/messages?topic=t&format=yaml",
    ):
        assert answers[path][0] == 400 and answers[path][1]["error"].startswith("INVALID_REQUEST")
    assert answers["/"][0] == 200 and "<title>raftka console</title>" in answers["/"][1]
    assert answers["/static/console.js"][0] == 200
    assert "/api/cluster" in answers["/static/console.js"][1]
    assert answers["/static/nope.js"][0] == 404
    assert answers["/api/reports"][1]["reports"][0]["url"] == "/reports/run/timeline.png"
    assert answers["/reports/run/timeline.png"][0] == 200
    assert answers["/reports/notes.txt"][0] == 404
    assert answers["/reports/..%2F..%2Fetc%2Fpasswd.png"][0] == 404
