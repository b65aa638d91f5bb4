"""``raftka acls``: kafka-acls' listing format and the one-line errors for bad input
(all refused before any connection, so no cluster is needed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from raftka.client.cli.acls import acls_command, format_acls
from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def test_listing_is_kafka_acls_format() -> None:
    orders = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.PREFIXED)
    bindings = [
        AclBinding(
            orders,
            AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
        ),
        AclBinding(
            orders,
            AccessControlEntry("User:bob", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY),
        ),
    ]
    assert format_acls("Current ACLs", bindings) == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=PREFIXED)`:",
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "\t(principal=User:bob, host=10.0.0.1, operation=WRITE, permissionType=DENY)",
        "",
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Raed"],
            "--operation: unknown operation 'Raed'",
        ),
        (
            ["add", "--topic", "t", "--allow-principal", "alice"],
            "--allow-principal: principal 'alice'",
        ),
        (
            ["add", "--cluster", "--allow-principal", "User:a", "--operation", "Read"],
            "--operation: CLUSTER does not support operation READ",
        ),
        (
            ["add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"],
            "--operation: GROUP does not support operation WRITE",
        ),
        (["add", "--topic", "t"], "--allow-principal: name a principal"),
        (["add", "--allow-principal", "User:a"], "--topic: name a resource"),
        (
            [
                "add",
                "--topic",
                "t",
                "--allow-principal",
                "User:a",
                "--resource-pattern-type",
                "match",
            ],
            "--resource-pattern-type: 'match' is not one of literal|prefixed",
        ),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--deny-host", "h"],
            "--deny-host: needs --deny-principal",
        ),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--allow-host", ""],
            "--allow-host: the host must not be empty",
        ),
        (
            ["add", "--topic", "", "--allow-principal", "User:a"],
            "--topic: the name must not be empty",
        ),
        (
            [
                "add",
                "--cluster",
                "--allow-principal",
                "User:a",
                "--resource-pattern-type",
                "prefixed",
            ],
            "--resource-pattern-type: the cluster resource is literal only",
        ),
        (["remove", "--allow-principal", "User:a"], "--topic: name a resource"),
        (["remove", "--topic", "t", "--allow-host", "h"], "--allow-host: needs --allow-principal"),
        (
            ["list", "--resource-pattern-type", "match"],
            "--resource-pattern-type: match needs a resource",
        ),
        (["list", "--principal", "nobody"], "--principal: principal 'nobody'"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(
        acls_command, [*args, "--bootstrap-server", "127.0.0.1:1", "--api-timeout-ms", "200"]
    )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: INVALID_REQUEST: ") and expected in lines[0], lines[0]
