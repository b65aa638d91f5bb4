"""ACLs end to end on a real cluster (3 controllers and 3 brokers as processes):
``raftka acls add|list|remove``, the admin client's create/describe/delete_acls, the
controller's CreateAcls/DeleteAcls, the bindings on every broker, and Kafka's errors for
bad input with every process staying up.

What "every broker has them" means here: each broker answers ``GET /v1/acls`` from its
own metadata image (the image the integrator's enforcement reads through
``MetadataImage.acl_bindings()``), so the bindings it lists are what that broker
replayed from the metadata log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from cli_helpers import CliCluster, ok

from raftka.client.admin import Admin
from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.local import wait_for
from raftka.local.processes import http_json

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
API_TIMEOUT_MS = 20_000

Row = tuple[str, str, str, str, str, str, str]


class Env(CliCluster):
    def broker_acls(self, broker_id: int, query: str = "") -> set[Row]:
        """The bindings one broker's own image holds, as tuples of the wire fields."""
        status, body = http_json(self.brokers[broker_id].address, f"/v1/acls{query}")
        assert status == 200, body
        return {
            (
                a["resource_type"],
                a["resource_name"],
                a["pattern_type"],
                a["principal"],
                a["host"],
                a["operation"],
                a["permission_type"],
            )
            for a in body["acls"]
        }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(tmp_path_factory.mktemp("acls"), kafka_listener=True) as env:
        yield env


def _everywhere(env: Env, expected: set[Row], query: str = "") -> None:
    """Wait until every broker's image holds exactly ``expected`` (under ``query``)."""

    def shown() -> bool:
        return all(env.broker_acls(b, query) == expected for b in sorted(env.brokers.ids))

    wait_for(
        shown,
        timeout_s=DEADLINE_S,
        message=lambda: (
            f"brokers show: { {b: env.broker_acls(b, query) for b in env.brokers.ids} }"
        ),
    )


def _nodes_up(env: Env) -> None:
    for node in [*env.controllers.controllers.values(), *env.brokers.brokers.values()]:
        assert node.running, f"{node.role} {node.node_id} exited:\n{node.tail()}"
        assert node.health() is not None


ALICE_READ = ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")
ALICE_DESCRIBE = ("TOPIC", "orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")
BOB_DENY = ("TOPIC", "ord", "PREFIXED", "User:bob", "10.0.0.9", "WRITE", "DENY")
GROUP_READ = ("GROUP", "billing", "LITERAL", "User:alice", "*", "READ", "ALLOW")
GROUP_DESCRIBE = ("GROUP", "billing", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")


def test_cli_add_list_remove_reaches_every_broker(env: Env) -> None:
    out = ok(
        env.run(
            "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
            "--operation", "Describe", "--topic", "orders", "--group", "billing",
        )
    )  # fmt: skip
    # kafka-acls' listing: what was added, then the resources' current ACLs.
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
    ) in out
    assert "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing" in out
    ok(
        env.run(
            "acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
            "--operation", "Write", "--topic", "ord", "--resource-pattern-type", "prefixed",
        )
    )  # fmt: skip
    # Adding an existing binding again succeeds and adds nothing.
    ok(env.run("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                "--topic", "orders"))  # fmt: skip
    everything = {ALICE_READ, ALICE_DESCRIBE, BOB_DENY, GROUP_READ, GROUP_DESCRIBE}
    _everywhere(env, everything)

    # list with filters: a principal; MATCH (what applies to topic "orders": the literal
    # ACLs and the "ord" prefix); a literal resource alone.
    listed = ok(env.run("acls", "list", "--principal", "User:bob"))
    assert listed.splitlines() == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, "
        "patternType=PREFIXED)`:",
        "\t(principal=User:bob, host=10.0.0.9, operation=WRITE, permissionType=DENY)",
        "",
    ]
    matched = ok(env.run("acls", "list", "--topic", "orders", "--resource-pattern-type", "match"))
    assert "name=ord, patternType=PREFIXED" in matched and "name=orders" in matched
    assert "billing" not in matched
    literal = ok(env.run("acls", "list", "--topic", "orders"))
    assert "PREFIXED" not in literal and literal.count("principal=User:alice") == 2
    _everywhere(
        env,
        {ALICE_READ, ALICE_DESCRIBE, BOB_DENY},
        "?resource_type=TOPIC&resource_name=orders&pattern_type=MATCH",
    )

    # remove by filter: alice's READ on the topic only, then everything on the group.
    removed = ok(env.run("acls", "remove", "--allow-principal", "User:alice",
                          "--operation", "Read", "--topic", "orders"))  # fmt: skip
    assert "operation=READ" in removed and "DESCRIBE" not in removed
    _everywhere(env, {ALICE_DESCRIBE, BOB_DENY, GROUP_READ, GROUP_DESCRIBE})
    ok(env.run("acls", "remove", "--group", "billing"))
    _everywhere(env, {ALICE_DESCRIBE, BOB_DENY})
    assert ok(env.run("acls", "remove", "--group", "billing")) == "No ACLs matched.\n"
    ok(env.run("acls", "remove", "--topic", "or", "--resource-pattern-type", "any"))
    ok(env.run("acls", "remove", "--topic", "orders"))
    ok(env.run("acls", "remove", "--topic", "ord", "--resource-pattern-type", "prefixed"))
    _everywhere(env, set())
    assert ok(env.run("acls", "list")) == ""


def _binding(principal: str, operation: AclOperation, name: str = "payments") -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW),
    )


def test_admin_client_create_describe_delete(env: Env) -> None:
    carol = _binding("User:carol", AclOperation.WRITE)
    dave = _binding("User:dave", AclOperation.READ)
    cluster = AclBinding(
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
        AccessControlEntry(
            "User:carol", "*", AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW
        ),
    )
    with Admin(
        bootstrap_servers=env.bootstrap_servers, default_api_timeout_ms=API_TIMEOUT_MS
    ) as admin:
        admin.create_acls([carol, dave, cluster])
        _everywhere(
            env,
            {
                ("TOPIC", "payments", "LITERAL", "User:carol", "*", "WRITE", "ALLOW"),
                ("TOPIC", "payments", "LITERAL", "User:dave", "*", "READ", "ALLOW"),
            },
            "?resource_type=TOPIC",
        )
        assert admin.describe_acls(AclBindingFilter(principal="User:carol")) == [carol, cluster]
        assert set(admin.describe_acls()) == {carol, dave, cluster}
        by_topic = AclBindingFilter(ResourceType.TOPIC, "payments", PatternType.LITERAL)
        nobody = AclBindingFilter(principal="User:nobody")
        deleted = admin.delete_acls([by_topic, nobody])
        assert set(deleted[by_topic]) == {carol, dave} and deleted[nobody] == []
        assert admin.describe_acls() == [cluster]
        assert admin.delete_acls([AclBindingFilter(resource_type=ResourceType.CLUSTER)]) == {
            AclBindingFilter(resource_type=ResourceType.CLUSTER): [cluster]
        }
    _everywhere(env, set())


def test_bad_inputs_get_kafka_errors_and_nothing_falls_over(env: Env) -> None:
    address = env.active_controller()

    def acl(**over: str) -> dict[str, str]:
        return {
            "resource_type": "TOPIC",
            "resource_name": "audit",
            "pattern_type": "LITERAL",
            "principal": "User:erin",
            "host": "*",
            "operation": "READ",
            "permission_type": "ALLOW",
            **over,
        }

    creations = [
        acl(resource_type="ANY"),
        acl(pattern_type="MATCH"),
        acl(operation="ANY"),
        acl(permission_type="UNKNOWN"),
        acl(principal="erin"),
        acl(operation="Read"),  # not Kafka's name
        acl(resource_name=""),
        acl(),
    ]
    status, body = http_json(address, "/v1/acls", method="POST", body={"creations": creations})
    assert status == 200, body
    errors = [r["error"] and r["error"]["error"] for r in body["results"]]
    assert errors == ["INVALID_REQUEST"] * 7 + [None]
    fine = ("TOPIC", "audit", "LITERAL", "User:erin", "*", "READ", "ALLOW")
    _everywhere(env, {fine})

    # A malformed body is refused whole, naming the field; so is a bad describe filter.
    status, body = http_json(
        address, "/v1/acls", method="POST", body={"creations": [{**acl(), "host": 5}]}
    )
    assert (status, body["error"]) == (400, "INVALID_REQUEST") and "host" in body["message"]
    status, body = http_json(env.brokers[min(env.brokers.ids)].address, "/v1/acls?operation=x")
    assert (status, body["error"]) == (400, "INVALID_REQUEST"), body
    # A bad delete filter fails alone.
    status, body = http_json(
        address,
        "/v1/acls/delete",
        method="POST",
        body={"filters": [{"pattern_type": "UNKNOWN"}, {"principal": "User:erin"}]},
    )
    assert status == 200, body
    first, second = body["filter_results"]
    assert first["error"]["error"] == "INVALID_REQUEST" and first["matching_acls"] == []
    assert second["error"] is None and len(second["matching_acls"]) == 1
    _everywhere(env, set())

    # The real command: one line with Kafka's error name, exit status 1.
    env_vars = {**os.environ, "RAFTKA_BOOTSTRAP_SERVERS": env.bootstrap_servers}
    for args, expected in [
        (["add", "--topic", "t", "--allow-principal", "erin"], "--allow-principal"),
        (["add", "--topic", "t", "--allow-principal", "User:e", "--operation", "Reed"],
         "--operation"),
        (["remove", "--topic", "t", "--resource-pattern-type", "glob"],
         "--resource-pattern-type"),
    ]:  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "raftka", "acls", *args],
            capture_output=True,
            timeout=60,
            env=env_vars,
            check=False,
        )
        err = done.stderr.decode()
        assert done.returncode == 1, (args, done.stdout, err)
        assert err.startswith(f"Error: INVALID_REQUEST: {expected}"), (args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    _nodes_up(env)


def test_kafka_python_admin_over_the_kafka_listener(env: Env) -> None:
    """CreateAcls and DeleteAcls (forwarded to the controller) and DescribeAcls
    (answered from the broker's image) on the Kafka listener, from kafka-python."""
    import kafka.admin as kp
    import kafka.errors
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType

    pattern = kp.ResourcePattern(kp.ResourceType.TOPIC, "kp-topic", ACLResourcePatternType.PREFIXED)
    good = ACL("User:kp", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    bad = ACL("kp-no-type", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
    admin = kp.KafkaAdminClient(bootstrap_servers=env.brokers.kafka_bootstrap_servers)
    try:
        created = admin.create_acls([good, bad])
        assert created["succeeded"] == [good]
        assert created["failed"] == [kafka.errors.InvalidRequestError]
        _everywhere(env, {("TOPIC", "kp-topic", "PREFIXED", "User:kp", "*", "WRITE", "ALLOW")})
        every = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            kp.ResourcePatternFilter(kp.ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        acls, error = admin.describe_acls(every)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in acls] == [
            ("User:kp", ACLOperation.WRITE, "kp-topic")
        ]
        ((_, deleted, error),) = admin.delete_acls([every])
        assert error.errno == 0
        assert [(a.principal, a.resource_pattern.pattern_type) for a in deleted] == [
            ("User:kp", ACLResourcePatternType.PREFIXED)
        ]
        _everywhere(env, set())
    finally:
        admin.close()


def test_confluent_kafka_admin_over_the_kafka_listener(env: Env) -> None:
    """The same APIs from librdkafka (confluent-kafka's AdminClient)."""
    import confluent_kafka.admin as ck
    from confluent_kafka import KafkaException

    admin = ck.AdminClient({"bootstrap.servers": env.brokers.kafka_bootstrap_servers})
    binding = ck.AclBinding(
        ck.ResourceType.GROUP, "ck-group", ck.ResourcePatternType.LITERAL, "User:ck", "*",
        ck.AclOperation.READ, ck.AclPermissionType.DENY,
    )  # fmt: skip
    bad = ck.AclBinding(
        ck.ResourceType.GROUP, "ck-group", ck.ResourcePatternType.LITERAL, "ck-no-type", "*",
        ck.AclOperation.READ, ck.AclPermissionType.ALLOW,
    )  # fmt: skip
    futures = admin.create_acls([binding, bad])
    assert futures[binding].result(timeout=30) is None
    with pytest.raises(KafkaException) as info:
        futures[bad].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_REQUEST"
    _everywhere(env, {("GROUP", "ck-group", "LITERAL", "User:ck", "*", "READ", "DENY")})
    groups = ck.AclBindingFilter(
        ck.ResourceType.GROUP, None, ck.ResourcePatternType.ANY, None, None,
        ck.AclOperation.ANY, ck.AclPermissionType.ANY,
    )  # fmt: skip
    assert admin.describe_acls(groups).result(timeout=30) == [binding]
    assert admin.delete_acls([groups])[groups].result(timeout=30) == [binding]
    _everywhere(env, set())
    assert admin.describe_acls(groups).result(timeout=30) == []


def test_raftka_kafka_python_compat_admin(env: Env) -> None:
    """raftka.client.compat.kafka_python's KafkaAdminClient takes kafka-python's ACL
    classes (here its own, with kafka-python's argument orders) and returns its shapes."""
    from raftka.client.compat import kafka_python as compat

    pattern = compat.ResourcePattern(compat.ResourceType.TRANSACTIONAL_ID, "tx-")
    good = compat.ACL(
        "User:tx", "*", compat.ACLOperation.WRITE, compat.ACLPermissionType.ALLOW, pattern
    )
    bad = compat.ACL(
        "tx-no-type", "*", compat.ACLOperation.WRITE, compat.ACLPermissionType.ALLOW, pattern
    )
    every = compat.ACLFilter(
        None,
        None,
        compat.ACLOperation.ANY,
        compat.ACLPermissionType.ANY,
        compat.ResourcePatternFilter(
            compat.ResourceType.ANY, None, compat.ACLResourcePatternType.ANY
        ),
    )
    with compat.KafkaAdminClient(
        bootstrap_servers=env.bootstrap_servers, request_timeout_ms=API_TIMEOUT_MS
    ) as admin:
        created = admin.create_acls([good, bad])
        assert created["succeeded"] == [good]
        assert [e.name for e in created["failed"]] == ["INVALID_REQUEST"]
        _everywhere(env, {("TRANSACTIONAL_ID", "tx-", "LITERAL", "User:tx", "*", "WRITE", "ALLOW")})
        assert admin.describe_acls(every) == ([good], None)
        assert admin.delete_acls([every]) == [(every, [good], None)]
    _everywhere(env, set())
