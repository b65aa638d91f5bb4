"""From the clients' answers to the JSON the console's page renders (pure functions).

Every ``/api/...`` endpoint is one of these over what :mod:`raftka.console.app` asked the
cluster, so what the page shows is tested here without a cluster. Node lists are sorted
by id and topics by name, so that two polls of an unchanged cluster give equal JSON.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from raftka.client.admin import ClusterDescription, ConfigEntry
from raftka.client.cli._common import error_line
from raftka.client.group_admin import ConsumerGroupDescription, ConsumerGroupListing
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, TopicDescription
from raftka.common.errors import InvalidRequestError, KafkaError, KafkaTimeoutError
from raftka.common.messages.controller import DescribeQuorumResponse
from raftka.common.structs import TopicPartition

__all__ = [
    "FORMATS",
    "RECORDS_MAX",
    "Format",
    "error_json",
    "format_bytes",
    "group_json",
    "groups_json",
    "overview_json",
    "records_json",
    "reports_json",
    "topic_configs_json",
    "topics_json",
]

Format = Literal["text", "json", "hex"]
FORMATS: Final[tuple[Format, ...]] = ("text", "json", "hex")
#: The most records one message-browser request returns.
RECORDS_MAX: Final = 500

JSON = dict[str, Any]


def error_json(error: BaseException) -> JSON:
    """``{"error": "KAFKA_NAME: message"}``: the one line the page shows. A timeout of
    the console's own bound on a call is Kafka's REQUEST_TIMED_OUT-like KafkaTimeoutError."""
    if isinstance(error, TimeoutError):
        error = KafkaTimeoutError(f"the cluster did not answer in time ({error or 'timeout'})")
    return {"error": error_line(error)}


# ---------------------------------------------------------------------------------------
# Cluster overview


def overview_json(
    cluster: ClusterDescription,
    quorum: DescribeQuorumResponse | None,
    topics: Sequence[TopicDescription],
    quorum_error: str | None = None,
) -> JSON:
    """Controllers (the active one, the Raft epoch, each voter's lag) and brokers.

    A broker is ``unfenced`` when describe_cluster lists it (Kafka lists only unfenced
    brokers), and ``fenced`` when the cluster knows it otherwise: as a metadata-log
    observer of the quorum or as a replica of some partition."""
    unfenced = {n.node_id: f"{n.host}:{n.port}" for n in cluster.brokers}
    known: dict[int, str | None] = {}
    if quorum is not None:
        for o in quorum.observers:
            known[o.node_id] = o.address
    for t in topics:
        for p in t.partitions:
            for r in p.replicas:
                known.setdefault(r, None)
    brokers = [
        {
            "id": bid,
            "address": unfenced.get(bid) or known.get(bid),
            "state": "unfenced" if bid in unfenced else "fenced",
            "leader_of": sum(1 for t in topics for p in t.partitions if p.leader == bid),
        }
        for bid in sorted(set(unfenced) | set(known))
    ]
    active = quorum.leader_id if quorum is not None else cluster.controller_id
    controllers: list[JSON] = []
    if quorum is not None:
        for v in sorted(quorum.voters, key=lambda v: v.node_id):
            controllers.append(
                {
                    "id": v.node_id,
                    "address": v.address,
                    "active": v.node_id == active,
                    "log_end_offset": v.log_end_offset,
                    "lag": v.lag,
                }
            )
    else:
        controllers = [
            {"id": None, "address": a, "active": False, "log_end_offset": None, "lag": None}
            for a in sorted(cluster.controllers)
        ]
    partitions = [p for t in topics for p in t.partitions]
    return {
        "active_controller": active,
        "epoch": None if quorum is None else quorum.epoch,
        "high_watermark": None if quorum is None else quorum.high_watermark,
        "quorum_error": quorum_error,
        "controllers": controllers,
        "brokers": brokers,
        "topic_count": len(topics),
        "partition_count": len(partitions),
        "under_replicated": sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
        "offline": sum(1 for p in partitions if p.leader is None),
    }


# ---------------------------------------------------------------------------------------
# Topics


def topics_json(topics: Iterable[TopicDescription]) -> JSON:
    """Every topic's partitions: leader, replicas, ISR, and the marks Kafka's
    ``--under-replicated-partitions`` / ``--unavailable-partitions`` reports use."""
    out = []
    for t in sorted(topics, key=lambda t: t.name):
        parts = [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "offline_replicas": list(p.offline_replicas),
                "under_replicated": len(p.isr) < len(p.replicas),
                "offline": p.leader is None,
            }
            for p in t.partitions  # in partition order (TopicDescription checks)
        ]
        out.append(
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "internal": t.is_internal,
                "partitions": parts,
                "under_replicated": sum(1 for p in parts if p["under_replicated"]),
            }
        )
    return {"topics": out}


def topic_configs_json(topic: str, configs: Mapping[str, ConfigEntry]) -> JSON:
    """One topic's configs, the ones set on the topic first, then by name."""
    rows = sorted(configs.values(), key=lambda c: (c.is_default, c.name))
    return {
        "topic": topic,
        "configs": [
            {
                "name": c.name,
                "value": None if c.is_sensitive else c.value,
                "source": c.source,
                "default": c.is_default,
                "read_only": c.read_only,
            }
            for c in rows
        ],
    }


# ---------------------------------------------------------------------------------------
# Consumer groups


def groups_json(
    listings: Iterable[ConsumerGroupListing], errors: Mapping[int, KafkaError] | None = None
) -> JSON:
    """The groups, and the brokers that did not answer (their groups are missing)."""
    return {
        "groups": [
            {"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type}
            for g in sorted(listings, key=lambda g: g.group_id)
        ],
        "unanswered": [
            {"broker_id": broker_id, "error": str(error)}
            for broker_id, error in sorted((errors or {}).items())
        ],
    }


def group_json(
    description: ConsumerGroupDescription,
    committed: Mapping[TopicPartition, OffsetAndMetadata],
    end_offsets: Mapping[TopicPartition, int],
) -> JSON:
    """Members with their assignments, and per partition the committed offset, the end
    offset (high watermark) and the lag between them, as kafka-consumer-groups
    ``--describe`` shows. A partition assigned but never committed has no lag (None);
    one whose end offset is unknown (its leader down) has none either."""
    owner: dict[TopicPartition, str] = {}
    for m in description.members:
        for tp in m.assignment:
            owner[tp] = m.member_id
    rows = []
    for tp in sorted(set(committed) | set(owner)):
        offset = committed[tp].offset if tp in committed else None
        end = end_offsets.get(tp)
        lag = None if offset is None or end is None else max(0, end - offset)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed": offset,
                "end_offset": end,
                "lag": lag,
                "member": owner.get(tp),
            }
        )
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    return {
        "group_id": description.group_id,
        "state": description.state,
        "protocol": description.protocol,
        "coordinator": description.coordinator_id,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment)],
            }
            for m in sorted(description.members, key=lambda m: m.member_id)
        ],
        "partitions": rows,
        "total_lag": sum(lags) if lags else None,
    }


# ---------------------------------------------------------------------------------------
# Message browser


def format_bytes(data: bytes | None, fmt: Format) -> str | None:
    """A key or value for the page: ``text`` (UTF-8, undecodable bytes as U+FFFD),
    ``json`` (indented when it parses, else the text with a note), or ``hex``."""
    if data is None:
        return None
    if fmt == "hex":
        return binascii.hexlify(data, " ").decode()
    if fmt == "json":
        try:
            return orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2).decode()
        except orjson.JSONDecodeError:
            return "(not JSON) " + data.decode("utf-8", "replace")
    return data.decode("utf-8", "replace")


def records_json(
    topic: str, partition: int, start: int | None, records: Sequence[ConsumerRecord], fmt: Format
) -> JSON:
    """The records read, each key/value in ``fmt`` (and base64, for a copy of the bytes)."""
    if fmt not in FORMATS:
        raise InvalidRequestError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return {
        "topic": topic,
        "partition": partition,
        "start_offset": start,
        "format": fmt,
        "records": [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": format_bytes(r.key, fmt),
                "value": format_bytes(r.value, fmt),
                "value_base64": None if r.value is None else base64.b64encode(r.value).decode(),
                "headers": [{"key": k, "value": format_bytes(v, fmt)} for k, v in r.headers],
            }
            for r in records
        ],
    }


# ---------------------------------------------------------------------------------------
# Chaos reports


def reports_json(root: Path | None, pictures: Iterable[Path]) -> JSON:
    """The report pictures under ``root`` (``raftka chaos``' timeline PNGs), newest
    first, each with the URL the page shows it from (its path under ``root``)."""
    if root is None:
        return {"enabled": False, "reports": []}
    found = []
    for p in pictures:
        rel = p.relative_to(root).as_posix()
        found.append((p.stat().st_mtime, rel))
    found.sort(key=lambda x: (-x[0], x[1]))
    return {
        "enabled": True,
        "reports": [{"name": rel, "url": f"/reports/{rel}", "mtime": m} for m, rel in found],
    }
