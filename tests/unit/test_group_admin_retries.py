"""The group admin retries a group's own coordinator error (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), which DescribeGroups and DeleteGroups carry per group
and OffsetCommit (alter_offsets) per partition, rather than at the top of the answer,
against one fake broker on loopback.

Right after a broker restart or a coordinator move the broker that FindCoordinator
names may not own the group yet; Kafka's admin client finds the coordinator again and
retries. Before the fix ``raftka groups describe`` printed ``Error: NOT_COORDINATOR``
and exited 1 (seen in the docs-examples test). The fake answers each call with the
error twice and then the real answer; the test checks the call succeeds and asked
three times.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from aiohttp import web
from aiohttp.test_utils import TestServer

from raftka.client import AsyncGroupAdmin
from raftka.common.errors import GroupIdNotFoundError, NotCoordinatorError
from raftka.common.messages import coordinator as api
from raftka.common.messages import encode
from raftka.common.messages.broker import ErrorObject, error_object
from raftka.common.structs import OffsetAndMetadata, TopicPartition

FAILURES_FIRST = 2


def _fake_broker(
    calls: Counter[str], final_delete_error: bool, address: dict[str, object]
) -> web.Application:

    async def metadata(_request: web.Request) -> web.Response:
        host, port = address["host"], address["port"]
        body = {
            "controller_id": None,
            "controllers": [],
            "brokers": [{"id": 1, "host": host, "port": port, "rack": None}],
            "topics": [],
        }
        return web.json_response(body)

    async def find_coordinator(_request: web.Request) -> web.Response:
        answer = api.FindCoordinatorResponse(
            node_id=1, host=str(address["host"]), port=int(str(address["port"]))
        )
        return web.Response(body=encode(answer), content_type="application/json")

    def failing_first(path: str) -> ErrorObject | None:
        calls[path] += 1
        if calls[path] <= FAILURES_FIRST:
            return error_object(NotCoordinatorError("the coordinator moved"))
        return None

    async def describe(_request: web.Request) -> web.Response:
        error = failing_first("describe")
        group = api.DescribedGroup(
            error=error,
            group_id="g",
            state="" if error else "Empty",
            protocol_type="" if error else "consumer",
        )
        answer = api.DescribeGroupsResponse(groups=(group,))
        return web.Response(body=encode(answer), content_type="application/json")

    async def delete(_request: web.Request) -> web.Response:
        error = failing_first("delete")
        if error is None and final_delete_error:
            error = error_object(GroupIdNotFoundError("no such group"))
        answer = api.DeleteGroupsResponse(
            results=(api.DeleteGroupsResult(group_id="g", error=error),)
        )
        return web.Response(body=encode(answer), content_type="application/json")

    async def commit(_request: web.Request) -> web.Response:
        # The error per partition, as the coordinator answers while __consumer_offsets
        # is still being created.
        error = failing_first("commit")
        partition = api.OffsetCommitPartitionResponse(partition=0, error=error)
        answer = api.OffsetCommitResponse(
            topics=(api.OffsetCommitTopicResponse(name="t", partitions=(partition,)),)
        )
        return web.Response(body=encode(answer), content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/metadata", metadata)
    app.router.add_post("/v1/offset-commit", commit)
    app.router.add_post("/v1/find-coordinator", find_coordinator)
    app.router.add_post("/v1/describe-groups", describe)
    app.router.add_post("/v1/delete-groups", delete)
    return app


async def _with_admin(final_delete_error: bool) -> Counter[str]:
    calls: Counter[str] = Counter()
    address: dict[str, object] = {}
    server = TestServer(_fake_broker(calls, final_delete_error, address), host="127.0.0.1")
    await server.start_server()
    address.update(host="127.0.0.1", port=server.port)
    try:
        async with AsyncGroupAdmin(
            bootstrap_servers=f"127.0.0.1:{server.port}", retry_backoff_ms=10
        ) as admin:
            described = await admin.describe_group("g", timeout_ms=10_000)
            assert described.state == "Empty"
            await admin.alter_offsets(
                "g", {TopicPartition("t", 0): OffsetAndMetadata(4, "", None)}, timeout_ms=10_000
            )
            if final_delete_error:
                try:
                    await admin.delete_groups(["g"], timeout_ms=10_000)
                except GroupIdNotFoundError:
                    pass
                else:
                    raise AssertionError("GROUP_ID_NOT_FOUND was not raised")
            else:
                await admin.delete_groups(["g"], timeout_ms=10_000)
    finally:
        await server.close()
    return calls


def test_describe_and_delete_retry_a_groups_not_coordinator_error() -> None:
    calls = asyncio.run(asyncio.wait_for(_with_admin(final_delete_error=False), 30))
    assert calls == {
        "describe": FAILURES_FIRST + 1,
        "commit": FAILURES_FIRST + 1,
        "delete": FAILURES_FIRST + 1,
    }


def test_a_groups_non_retriable_error_is_raised_after_the_retriable_ones() -> None:
    calls = asyncio.run(asyncio.wait_for(_with_admin(final_delete_error=True), 30))
    assert calls["delete"] == FAILURES_FIRST + 1
