"""The group coordinator's HTTP routes (docs/protocol.md, "Group coordinator").

A thin layer: parse the JSON body, call :class:`GroupCoordinatorService`, encode. Every
answer is HTTP 200 with Kafka's errors inside the body (``"error": null`` or
``{"error", "error_code", "message"}``) at the level Kafka puts them: per request for
membership calls, per partition for OffsetCommit, per group for describe and delete.
A malformed body is INVALID_REQUEST (HTTP 400) from the error middleware. Byte fields
(member metadata, assignments) travel as base64 text.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson
from aiohttp import web

from raftka.broker.coordinator.group import (
    ErrorType,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveMember,
    SyncGroupRequest,
)
from raftka.broker.coordinator.group_manager import OffsetCommitRequest
from raftka.broker.coordinator.service import GroupCoordinatorService
from raftka.common.errors import InvalidRequestError, KafkaError
from raftka.common.structs import OffsetAndMetadata, TopicPartition
from raftka.server_common.http_errors import json_response

__all__ = ["coordinator_routes"]

#: Bound on the items of one request (groups, topics, partitions, members).
REQUEST_ITEMS_MAX: Final = 100_000


def _error(error: ErrorType | KafkaError) -> dict[str, object] | None:
    if error is None:
        return None
    if isinstance(error, KafkaError):
        return error.to_wire()
    return error().to_wire()


async def _body(request: web.Request, what: str) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"{what}: the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"{what}: expected a JSON object")
    return body


def _field(
    obj: dict[str, Any], name: str, kind: type, *, default: Any = ..., where: str = ""
) -> Any:
    value = obj.get(name, default)
    if value is ...:
        raise InvalidRequestError(f"{where}{name} is required")
    if value is None and default is None:
        return None
    if type(value) is not kind:
        raise InvalidRequestError(f"{where}{name}: expected {kind.__name__}, got {value!r}")
    return value


def _list(obj: dict[str, Any], name: str, *, where: str = "") -> list[Any]:
    value = obj.get(name)
    if not isinstance(value, list) or len(value) > REQUEST_ITEMS_MAX:
        raise InvalidRequestError(f"{where}{name}: expected a list (at most {REQUEST_ITEMS_MAX})")
    for i, item in enumerate(value):
        if not isinstance(item, dict | str | int):
            raise InvalidRequestError(f"{where}{name}[{i}]: unexpected {item!r}")
    return value


def _b64(obj: dict[str, Any], name: str, *, where: str = "") -> bytes:
    text = _field(obj, name, str, default="", where=where)
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InvalidRequestError(f"{where}{name}: not base64") from None


def _enc(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _client_host(request: web.Request) -> str:
    return f"/{request.remote or 'unknown'}"


def coordinator_routes(service: GroupCoordinatorService) -> list[web.RouteDef]:
    """The /v1/ routes of the group coordinator, bound to ``service``."""

    async def find_coordinator(request: web.Request) -> web.Response:
        body = await _body(request, "find-coordinator")
        key = _field(body, "key", str)
        key_type = _field(body, "key_type", int, default=0)
        if key_type != 0:
            raise InvalidRequestError("key_type: only 0 (group) is supported")
        found = await service.find_coordinator(key)
        return json_response(
            {
                "error": _error(found.error),
                "node_id": found.node_id,
                "host": found.host,
                "port": found.port,
            }
        )

    async def join_group(request: web.Request) -> web.Response:
        body = await _body(request, "join-group")
        protocols = []
        for i, item in enumerate(_list(body, "protocols")):
            where = f"protocols[{i}]."
            if not isinstance(item, dict):
                raise InvalidRequestError(f"{where[:-1]}: expected an object")
            protocols.append(
                (_field(item, "name", str, where=where), _b64(item, "metadata", where=where))
            )
        session_ms = _field(body, "session_timeout_ms", int)
        response = await service.join_group(
            JoinGroupRequest(
                group_id=_field(body, "group_id", str),
                member_id=_field(body, "member_id", str, default=""),
                group_instance_id=_field(body, "group_instance_id", str, default=None),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=_field(body, "rebalance_timeout_ms", int, default=session_ms),
                protocol_type=_field(body, "protocol_type", str),
                protocols=tuple(protocols),
                client_id=_field(body, "client_id", str, default="consumer"),
                client_host=_client_host(request),
            )
        )
        return json_response(
            {
                "error": _error(response.error),
                "generation_id": response.generation_id,
                "protocol_type": response.protocol_type,
                "protocol_name": response.protocol_name,
                "leader": response.leader_id,
                "member_id": response.member_id,
                "skip_assignment": response.skip_assignment,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "metadata": _enc(m.metadata),
                    }
                    for m in response.members
                ],
            }
        )

    async def sync_group(request: web.Request) -> web.Response:
        body = await _body(request, "sync-group")
        assignments: dict[str, bytes] = {}
        for i, item in enumerate(_list(body, "assignments") if "assignments" in body else []):
            where = f"assignments[{i}]."
            if not isinstance(item, dict):
                raise InvalidRequestError(f"{where[:-1]}: expected an object")
            assignments[_field(item, "member_id", str, where=where)] = _b64(
                item, "assignment", where=where
            )
        response = await service.sync_group(
            SyncGroupRequest(
                group_id=_field(body, "group_id", str),
                generation_id=_field(body, "generation_id", int),
                member_id=_field(body, "member_id", str),
                group_instance_id=_field(body, "group_instance_id", str, default=None),
                assignments=assignments,
                protocol_type=_field(body, "protocol_type", str, default=None),
                protocol_name=_field(body, "protocol_name", str, default=None),
            )
        )
        return json_response(
            {
                "error": _error(response.error),
                "protocol_type": response.protocol_type,
                "protocol_name": response.protocol_name,
                "assignment": _enc(response.assignment),
            }
        )

    async def heartbeat(request: web.Request) -> web.Response:
        body = await _body(request, "heartbeat")
        response = service.heartbeat(
            HeartbeatRequest(
                group_id=_field(body, "group_id", str),
                generation_id=_field(body, "generation_id", int),
                member_id=_field(body, "member_id", str),
                group_instance_id=_field(body, "group_instance_id", str, default=None),
            )
        )
        return json_response({"error": _error(response.error)})

    async def leave_group(request: web.Request) -> web.Response:
        body = await _body(request, "leave-group")
        members = []
        for i, item in enumerate(_list(body, "members")):
            where = f"members[{i}]."
            if not isinstance(item, dict):
                raise InvalidRequestError(f"{where[:-1]}: expected an object")
            members.append(
                LeaveMember(
                    _field(item, "member_id", str, default="", where=where),
                    _field(item, "group_instance_id", str, default=None, where=where),
                )
            )
        response = service.leave_group(_field(body, "group_id", str), tuple(members))
        return json_response(
            {
                "error": _error(response.error),
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "error": _error(m.error),
                    }
                    for m in response.members
                ],
            }
        )

    def _partitions_by_topic(body: dict[str, Any], what: str) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for i, topic in enumerate(_list(body, "topics")):
            where = f"topics[{i}]."
            if not isinstance(topic, dict):
                raise InvalidRequestError(f"{what}: {where[:-1]}: expected an object")
            name = _field(topic, "name", str, where=where)
            for j, item in enumerate(_list(topic, "partitions", where=where)):
                if not isinstance(item, dict):
                    raise InvalidRequestError(f"{what}: {where}partitions[{j}]: expected an object")
                out.append((name, item))
        return out

    async def offset_commit(request: web.Request) -> web.Response:
        body = await _body(request, "offset-commit")
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for name, item in _partitions_by_topic(body, "offset-commit"):
            where = f"{name}."
            tp = TopicPartition(name, _field(item, "partition", int, where=where))
            offsets[tp] = OffsetAndMetadata(
                _field(item, "offset", int, where=where),
                _field(item, "metadata", str, default="", where=where),
                _field(item, "leader_epoch", int, default=None, where=where),
            )
        response = await service.offset_commit(
            OffsetCommitRequest(
                group_id=_field(body, "group_id", str),
                generation_id=_field(body, "generation_id", int, default=-1),
                member_id=_field(body, "member_id", str, default=""),
                offsets=offsets,
                group_instance_id=_field(body, "group_instance_id", str, default=None),
                retention_time_ms=_field(body, "retention_time_ms", int, default=None),
            )
        )
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, error in response.errors.items():
            topics.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "error": _error(error)}
            )
        return json_response(
            {"topics": [{"name": n, "partitions": ps} for n, ps in sorted(topics.items())]}
        )

    async def offset_fetch(request: web.Request) -> web.Response:
        body = await _body(request, "offset-fetch")
        wanted: tuple[TopicPartition, ...] | None = None
        if body.get("topics") is not None:
            wanted = tuple(
                TopicPartition(name, _field(item, "partition", int, where=f"{name}."))
                for name, item in _partitions_by_topic(body, "offset-fetch")
            )
        response = service.offset_fetch(_field(body, "group_id", str), wanted)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, committed in response.offsets.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "offset": committed.offset,
                    "leader_epoch": committed.leader_epoch,
                    "metadata": committed.metadata,
                    "error": None,
                }
            )
        return json_response(
            {
                "error": _error(response.error),
                "topics": [{"name": n, "partitions": ps} for n, ps in sorted(topics.items())],
            }
        )

    async def list_groups(request: web.Request) -> web.Response:
        body = await _body(request, "list-groups")
        states = body.get("states_filter")
        if states is not None and (
            not isinstance(states, list) or not all(isinstance(s, str) for s in states)
        ):
            raise InvalidRequestError("states_filter: expected a list of state names or null")
        response = service.list_groups(None if not states else frozenset(states))
        return json_response(
            {
                "error": _error(response.error),
                "groups": [
                    {"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
                    for g in response.groups
                ],
            }
        )

    def _group_ids(body: dict[str, Any]) -> tuple[str, ...]:
        groups = _list(body, "groups")
        if not all(isinstance(g, str) for g in groups):
            raise InvalidRequestError("groups: expected a list of group ids")
        return tuple(groups)

    async def describe_groups(request: web.Request) -> web.Response:
        body = await _body(request, "describe-groups")
        described = service.describe_groups(_group_ids(body))
        return json_response(
            {
                "groups": [
                    {
                        "error": _error(g.error),
                        "group_id": g.group_id,
                        "state": g.state,
                        "protocol_type": g.protocol_type,
                        "protocol": g.protocol,
                        "members": [
                            {
                                "member_id": m.member_id,
                                "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id,
                                "client_host": m.client_host,
                                "member_metadata": _enc(m.metadata),
                                "member_assignment": _enc(m.assignment),
                            }
                            for m in g.members
                        ],
                    }
                    for g in described
                ]
            }
        )

    async def delete_groups(request: web.Request) -> web.Response:
        body = await _body(request, "delete-groups")
        response = service.delete_groups(_group_ids(body))
        return json_response(
            {"results": [{"group_id": g, "error": _error(e)} for g, e in response.results.items()]}
        )

    return [
        web.post("/v1/find-coordinator", find_coordinator),
        web.post("/v1/join-group", join_group),
        web.post("/v1/sync-group", sync_group),
        web.post("/v1/heartbeat", heartbeat),
        web.post("/v1/leave-group", leave_group),
        web.post("/v1/offset-commit", offset_commit),
        web.post("/v1/offset-fetch", offset_fetch),
        web.post("/v1/list-groups", list_groups),
        web.post("/v1/describe-groups", describe_groups),
        web.post("/v1/delete-groups", delete_groups),
    ]
